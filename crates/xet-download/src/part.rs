//! The `.part` file a download is assembled in, and how the verified part reaches its
//! destination: renamed into place, or copied to a writer (stdout, a device node, a
//! FIFO) from a temporary directory.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};

use crate::error::{DownloadError, Result};
use crate::fsio;
use crate::journal::{self, DoneTerm, Journal, JournalHeader};
use crate::types::DownloadOptions;

pub(crate) type BoxWriter = Box<dyn Write + Send>;

/// `<dest>.part`: where the file is assembled.
pub(crate) fn part_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(".part");
    PathBuf::from(s)
}

/// `<dest>.part.jsonl`: the resume journal of `<dest>.part`.
pub(crate) fn journal_path(dest: &Path) -> PathBuf {
    let mut s = dest.as_os_str().to_owned();
    s.push(".part.jsonl");
    PathBuf::from(s)
}

/// Where a file's verified bytes go.
pub(crate) struct Output {
    /// The part is `<path>.part`, renamed to `path` once verified, unless there is a
    /// writer.
    pub path: PathBuf,
    /// Gets a copy of the verified part instead (which is then deleted).
    pub writer: Option<BoxWriter>,
    /// The temporary directory a writer's part is staged in; deleted when dropped.
    pub staging: Option<tempfile::TempDir>,
}

/// A writer destination: the file is assembled and verified in a temporary directory
/// (under [`DownloadOptions::temp_dir`], kept while the returned [`Output`] lives) and
/// copied to `w` only then.
pub(crate) fn staged(opts: &DownloadOptions, w: BoxWriter) -> Result<Output> {
    let mut b = tempfile::Builder::new();
    b.prefix("xet-download");
    let dir = match &opts.temp_dir {
        Some(d) => b.tempdir_in(d),
        None => b.tempdir(),
    }
    .map_err(|e| {
        let at = opts.temp_dir.clone().unwrap_or_else(std::env::temp_dir);
        DownloadError::io("creating a temporary directory in", at, e)
    })?;
    Ok(Output {
        path: dir.path().join("staged"),
        writer: Some(w),
        staging: Some(dir),
    })
}

/// The empty file: an empty part, fsynced and renamed into place. Blocking.
pub(crate) fn finish_empty(dest: &Path) -> Result<()> {
    let part = part_path(dest);
    let f = File::create(&part).map_err(|e| DownloadError::io("creating", &part, e))?;
    f.sync_all()
        .map_err(|e| DownloadError::io("syncing", &part, e))?;
    rename_into_place(&part, dest, Some(&journal_path(dest)))
}

/// The part, its journal and the terms recorded in the journal (verified).
pub(crate) type Opened = (File, Option<Journal>, HashMap<u64, DoneTerm>);

/// Open the part at `part`, `len` bytes long. With `resume`, the terms the journal at
/// `jp` records for this download (`header`) whose bytes in the part still hash right
/// are kept; otherwise the part starts empty. A journal is written only if `journaled`.
/// Blocking.
pub(crate) fn open_part(
    part: &Path,
    jp: &Path,
    header: &JournalHeader,
    len: u64,
    resume: bool,
    journaled: bool,
) -> Result<Opened> {
    let done = if resume {
        journal::load_verified(jp, part, header)
    } else {
        HashMap::new()
    };
    let f = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(part)
        .map_err(|e| DownloadError::io("opening", part, e))?;
    if done.is_empty() {
        f.set_len(0)
            .map_err(|e| DownloadError::io("truncating", part, e))?;
    }
    f.set_len(len)
        .map_err(|e| DownloadError::io("sizing", part, e))?;
    let journal = if journaled {
        Some(Journal::create(jp, header, &done).map_err(|e| DownloadError::io("writing", jp, e))?)
    } else {
        None
    };
    Ok((f, journal, done))
}

/// Rename the (fsynced) part to `dest` durably (`xet_mmap::durable::rename_durably`: the
/// directory is fsynced after), and delete the journal, which has nothing left to resume.
/// Blocking.
pub(crate) fn rename_into_place(part: &Path, dest: &Path, journal: Option<&Path>) -> Result<()> {
    xet_mmap::durable::rename_durably(part, dest)
        .map_err(|e| DownloadError::io("renaming into place", dest, e))?;
    if let Some(j) = journal {
        let _ = fsio::remove_if_exists(j);
    }
    Ok(())
}

/// Copy the verified part to `w` (shown as `shown` in errors), then delete the part.
/// Blocking.
pub(crate) fn copy_to_writer(part: &Path, w: &mut dyn Write, shown: &Path) -> Result<()> {
    let mut f = File::open(part).map_err(|e| DownloadError::io("reading", part, e))?;
    std::io::copy(&mut f, w).map_err(|e| DownloadError::io("writing", shown, e))?;
    w.flush()
        .map_err(|e| DownloadError::io("writing", shown, e))?;
    let _ = fsio::remove_if_exists(part);
    Ok(())
}
