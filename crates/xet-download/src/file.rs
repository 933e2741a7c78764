//! One file's setup and teardown around its segments: where its bytes go, its size
//! and first segment, the wanted byte range, the `.part` and journal opened (or resumed),
//! the empty file, the cleanup after a failure, and the report.

use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Instant;

use xet_cas::{ByteRange, Reconstruction};
use xet_hash::MerkleHash;

use crate::ctx::{FileCtx, Shared, blocking};
use crate::dest::{self, Target};
use crate::error::{DownloadError, Result};
use crate::fetch;
use crate::fsio;
use crate::journal::{DoneTerm, Journal, JournalHeader};
use crate::part::{self, Output};
use crate::plan;
use crate::sync::lock;
use crate::types::{
    Destination, DownloadOptions, FileRange, FileReport, ProgressEvent, Verification,
};

/// Where the verified bytes go. A path that may be replaced is the part's rename
/// target; a writer, or a device or FIFO (never replaced), gets a copy of a part staged
/// in a temporary directory. The directory the part goes to is created.
pub(crate) async fn resolve_destination(
    opts: &DownloadOptions,
    destination: Destination,
) -> Result<Output> {
    let output = match destination {
        Destination::Path(p) => match blocking(move || dest::resolve(&p)).await?? {
            Target::Replace(path) => Output {
                path,
                writer: None,
                staging: None,
            },
            Target::WriteInto(p) => part::staged(opts, Box::new(dest::OpenOnWrite::new(p)))?,
        },
        Destination::Writer(w) => part::staged(opts, w)?,
    };
    if let Some(parent) = output.path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| DownloadError::io("creating directory", parent, e))?;
    }
    Ok(output)
}

/// The empty file has no bytes to ask for: only the whole file (no range) is allowed.
pub(crate) fn check_empty_range(file: MerkleHash, range: Option<FileRange>) -> Result<()> {
    match range {
        Some(r) if r.start > 0 || r.end.is_some() => Err(DownloadError::RangeNotSatisfiable {
            file,
            start: r.start,
            size: 0,
        }),
        _ => Ok(()),
    }
}

/// The size of a file asked for whole, and the first segment's reconstruction, with no
/// request of their own: the first segment is asked for first, and an answer ending
/// before the segment does was cut at the end of the file, whose size it then gives
/// (every file smaller than the first segment, [`plan::FIRST_SEGMENTS`] segments, costs
/// one request, not two). A larger file needs the size query as well; its first segment
/// is the answer already in hand.
pub(crate) async fn first_segment_and_size(
    shared: &Shared,
    file: MerkleHash,
) -> Result<(u64, Option<Reconstruction>)> {
    let seg = plan::segment_len(0, shared.opts.segment_bytes);
    let first = fetch::query_reconstruction(shared, file, ByteRange::new(0, seg)).await?;
    let len = first
        .unpacked_len()
        .saturating_sub(first.offset_into_first_range);
    let size = if len < seg {
        len
    } else {
        fetch::query_file_size(shared, file).await?
    };
    Ok((size, Some(first)))
}

/// The file bytes wanted: the whole file, or `range` (its end inclusive, clipped to
/// the file).
pub(crate) fn wanted_bytes(
    file: MerkleHash,
    range: Option<FileRange>,
    size: u64,
) -> Result<ByteRange> {
    let Some(r) = range else {
        return Ok(ByteRange::new(0, size));
    };
    if let Some(e) = r.end
        && e < r.start
    {
        return Err(DownloadError::InvalidRequest {
            file,
            reason: format!("range end {e} is before its start {}", r.start),
        });
    }
    if r.start >= size {
        return Err(DownloadError::RangeNotSatisfiable {
            file,
            start: r.start,
            size,
        });
    }
    Ok(ByteRange::new(
        r.start,
        r.end.map_or(size, |e| e.saturating_add(1).min(size)),
    ))
}

/// The empty file's content is no bytes: an expected sha256 must be the one of nothing.
pub(crate) fn check_empty_sha256(file: MerkleHash, sha256: Option<[u8; 32]>) -> Result<()> {
    use sha2::Digest as _;
    match sha256 {
        Some(want) if want[..] != sha2::Sha256::digest([])[..] => {
            Err(DownloadError::Verification {
                source: None,
                file,
                detail: format!(
                    "the file is empty, whose sha256 is not the expected {}",
                    xet_hash::hex::encode(&want)
                ),
            })
        }
        _ => Ok(()),
    }
}

/// The empty file (hash zero): created with no request at all.
pub(crate) async fn download_empty(
    shared: &Shared,
    index: usize,
    file: MerkleHash,
    output: Output,
    shown: String,
    started: Instant,
) -> Result<FileReport> {
    shared.emit(ProgressEvent::FileStarted {
        index,
        file,
        dest: shown.clone(),
        total: 0,
        resumed: 0,
    });
    let p = output.path.clone();
    blocking(move || part::finish_empty(&p)).await??;
    if let Some(mut w) = output.writer {
        // Opens a device or FIFO destination, so its reader sees the (empty) end.
        blocking(move || w.flush())
            .await?
            .map_err(|e| DownloadError::io("writing", &shown, e))?;
    }
    shared.emit(ProgressEvent::FileFinished { index });
    Ok(FileReport {
        hash: file,
        path: shown.into(),
        size: 0,
        bytes_fetched: 0,
        bytes_from_cache: 0,
        bytes_resumed: 0,
        fetches: 0,
        verification: Verification::Empty,
        elapsed: started.elapsed().as_secs_f64(),
    })
}

/// Outputs smaller than this keep no resume journal: fetching such a file again after an
/// interruption costs less than creating, syncing and renaming a journal for every one
/// (a large share of the time of a download of many small files).
const JOURNAL_MIN: u64 = 1 << 20;

/// Parts at least this large are written with `O_DIRECT` where possible
/// ([`fsio::DirectWriter`]).
pub(crate) const DIRECT_MIN: u64 = 8 << 20;

/// A part ready to be written.
pub(crate) struct OpenedPart {
    pub part: Arc<File>,
    /// `<dest>.part`.
    pub part_path: PathBuf,
    pub journal: Option<Journal>,
    /// `<dest>.part.jsonl`, whether or not a journal is kept.
    pub journal_path: PathBuf,
    /// Terms an earlier run recorded (and that still verify), by offset in the part.
    pub done: HashMap<u64, DoneTerm>,
    /// The direct writer of a large part.
    pub direct: Option<fsio::DirectWriter>,
}

/// Open the part of `final_path` (`len` bytes) and its journal (`header` says what is
/// downloaded), resuming from the journal if `resume`. Only a part that is renamed
/// into place (`renamed`) keeps a journal or gets a direct writer.
pub(crate) async fn open_part_and_journal(
    final_path: &Path,
    header: JournalHeader,
    len: u64,
    resume: bool,
    renamed: bool,
) -> Result<OpenedPart> {
    let part_path = part::part_path(final_path);
    let journal_path = part::journal_path(final_path);
    blocking(move || {
        let journaled = renamed && len >= JOURNAL_MIN;
        let (part, journal, done) =
            part::open_part(&part_path, &journal_path, &header, len, resume, journaled)?;
        let part = Arc::new(part);
        // Only a part that is fsynced and renamed must reach the disk anyway.
        let direct = (renamed && len >= DIRECT_MIN)
            .then(|| fsio::DirectWriter::open(&part_path, part.clone()))
            .flatten();
        Ok(OpenedPart {
            part,
            part_path,
            journal,
            journal_path,
            done,
            direct,
        })
    })
    .await?
}

/// Whether the verified file is hard-linked into the chunk cache (so fetched chunks
/// are not also copied into it): a whole file renamed into place
/// (`whole_and_renamed`), with [`crate::CacheConfig::link_files`], room in the cache for the
/// file and its references, and the part on the cache's file system.
pub(crate) async fn links_into_cache(
    shared: &Shared,
    whole_and_renamed: bool,
    size: u64,
    part_path: &Path,
) -> Result<bool> {
    match (&shared.cache, &shared.opts.cache) {
        (Some(cache), Some(cfg)) if whole_and_renamed && cfg.link_files => {
            let (root, pp) = (cache.root().to_path_buf(), part_path.to_path_buf());
            // Room for the file and its references (36 bytes per chunk of at least
            // 8 KiB, and 20 per term, far below 1/128 of the file).
            Ok(size.saturating_add(size / 128 + 4096) <= cache.max_bytes()
                && blocking(move || {
                    fsio::same_file_system(&root, pp.parent().unwrap_or(Path::new(".")))
                })
                .await?)
        }
        _ => Ok(false),
    }
}

/// After a failed download: bad data (a verification failure) must not be resumed
/// from, or served again from the cache; a part that cannot be resumed is of no use.
/// Otherwise the part and journal stay for a rerun.
pub(crate) fn clean_up_after_failure(
    ctx: &FileCtx,
    e: &DownloadError,
    resumable: bool,
    journal_path: &Path,
) {
    let bad_data = e.kind() == crate::ErrorKind::Verification;
    if !bad_data && resumable {
        return;
    }
    let _ = fsio::remove_if_exists(&ctx.part_path);
    let _ = fsio::remove_if_exists(journal_path);
    if bad_data && let Some(cache) = &ctx.shared.cache {
        for (x, a, b) in lock(&ctx.cache_touched).drain(..) {
            cache.remove_overlapping(&x, a, b);
        }
    }
}

/// The report of a downloaded file.
pub(crate) fn report(ctx: &FileCtx, shown: String, resumed: u64, started: Instant) -> FileReport {
    FileReport {
        hash: ctx.file,
        path: shown.into(),
        size: ctx.out.len(),
        bytes_fetched: ctx.stats.fetched.load(Ordering::Relaxed),
        bytes_from_cache: ctx.stats.from_cache.load(Ordering::Relaxed),
        bytes_resumed: resumed,
        fetches: ctx.stats.fetches.load(Ordering::Relaxed),
        verification: if ctx.whole {
            Verification::FileHash
        } else if ctx.shared.opts.chunk_hashes.is_some()
            && !ctx.stats.unchecked.load(Ordering::Relaxed)
        {
            Verification::ChunkHashes
        } else {
            Verification::TermLengths
        },
        elapsed: started.elapsed().as_secs_f64(),
    }
}
