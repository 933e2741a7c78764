//! What a [`crate::Destination::Path`] names, decided before anything is written.
//!
//! Only a regular file (or nothing) may be replaced by the `.part` + rename. Renaming
//! over a device node, a FIFO or a symbolic link would destroy it: `-o /dev/null` run
//! as root would leave the machine without `/dev/null`. So symbolic links are followed
//! (the link stays, its target gets the file), and anything that is not a regular file
//! at the end is written into, as `cat > PATH` would, never replaced.

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};

use crate::error::{DownloadError, Result};

/// Where a path destination's bytes go.
#[derive(Debug, PartialEq, Eq)]
pub enum Target {
    /// Nothing exists there, or a regular file: `<path>.part`, verified, renamed over
    /// it. The path is the symbolic links' final target, so a link is not replaced.
    Replace(PathBuf),
    /// A device node, FIFO or socket: the verified bytes are written into it.
    WriteInto(PathBuf),
}

/// Decide what `path` is. Fails (an output error) for a directory and for a symbolic
/// link whose target does not exist.
pub fn resolve(path: &Path) -> Result<Target> {
    let link = match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => {
            return Ok(Target::Replace(path.to_path_buf()));
        }
        Err(e) => return Err(DownloadError::io("examining", path, e)),
        Ok(m) => m,
    };
    // Follows every link (including /proc's magic links, e.g. /dev/stdout).
    let meta = match std::fs::metadata(path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound && link.file_type().is_symlink() => {
            return Err(DownloadError::io(
                "writing to",
                path,
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "it is a symbolic link to a file that does not exist (remove the link, or point it at a file)",
                ),
            ));
        }
        Err(e) => return Err(DownloadError::io("examining", path, e)),
        Ok(m) => m,
    };
    if meta.is_dir() {
        return Err(DownloadError::io(
            "writing to",
            path,
            io::Error::new(
                io::ErrorKind::IsADirectory,
                "it is a directory (name a file in it)",
            ),
        ));
    }
    if !meta.is_file() {
        return Ok(Target::WriteInto(path.to_path_buf()));
    }
    if !link.file_type().is_symlink() {
        return Ok(Target::Replace(path.to_path_buf()));
    }
    std::fs::canonicalize(path)
        .map(Target::Replace)
        .map_err(|e| DownloadError::io("resolving the symbolic link", path, e))
}

/// Whether `full` (a path below a directory whose canonical form is `dir_canon`)
/// resolves outside that directory: its deepest existing ancestor (itself if it exists)
/// is what links already on disk make of it; what does not exist yet is created by the
/// download as plain directories. Callers writing repository or manifest paths below a
/// directory refuse those that lead out.
pub fn leads_out(dir_canon: &Path, full: &Path) -> io::Result<bool> {
    for a in full.ancestors() {
        match std::fs::canonicalize(a) {
            Ok(c) => return Ok(!c.starts_with(dir_canon)),
            // Not there (or a dangling link, which `resolve` refuses).
            Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
            // A file where a directory would be: the download fails on it anyway.
            Err(e) if e.kind() == io::ErrorKind::NotADirectory => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(false)
}

/// A writer that opens an existing non-regular file (device, FIFO) for writing on its
/// first write or flush: a FIFO's open waits for a reader, and that wait belongs after
/// the download is verified, not before it starts. Never creates or truncates.
pub(crate) struct OpenOnWrite {
    path: PathBuf,
    file: Option<File>,
}

impl OpenOnWrite {
    pub(crate) fn new(path: PathBuf) -> Self {
        OpenOnWrite { path, file: None }
    }

    fn file(&mut self) -> io::Result<&mut File> {
        if self.file.is_none() {
            self.file = Some(std::fs::OpenOptions::new().write(true).open(&self.path)?);
        }
        Ok(self.file.as_mut().expect("just opened"))
    }
}

impl Write for OpenOnWrite {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.file()?.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.file()?.flush()
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    #[test]
    fn regular_files_and_missing_paths_are_replaced() {
        let dir = tempfile::tempdir().unwrap();
        let missing = dir.path().join("new.bin");
        assert_eq!(resolve(&missing).unwrap(), Target::Replace(missing.clone()));
        let file = dir.path().join("old.bin");
        std::fs::write(&file, b"old").unwrap();
        assert_eq!(resolve(&file).unwrap(), Target::Replace(file.clone()));
    }

    #[test]
    fn a_symlink_to_a_file_replaces_its_target_not_the_link() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("target.bin");
        std::fs::write(&file, b"old").unwrap();
        let link = dir.path().join("link.bin");
        std::os::unix::fs::symlink("target.bin", &link).unwrap();
        let want = std::fs::canonicalize(&file).unwrap();
        assert_eq!(resolve(&link).unwrap(), Target::Replace(want));
    }

    #[test]
    fn devices_fifos_and_links_to_them_are_written_into() {
        let dir = tempfile::tempdir().unwrap();
        let null = Path::new("/dev/null");
        assert_eq!(resolve(null).unwrap(), Target::WriteInto(null.into()));
        let link = dir.path().join("null-link");
        std::os::unix::fs::symlink(null, &link).unwrap();
        assert_eq!(resolve(&link).unwrap(), Target::WriteInto(link.clone()));
    }

    #[test]
    fn directories_and_dangling_links_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let e = resolve(dir.path()).unwrap_err();
        assert!(e.to_string().contains("is a directory"), "{e}");
        let link = dir.path().join("dangling");
        std::os::unix::fs::symlink(dir.path().join("nowhere"), &link).unwrap();
        let e = resolve(&link).unwrap_err();
        assert!(e.to_string().contains("does not exist"), "{e}");
        assert_eq!(e.kind(), crate::ErrorKind::Output);
    }

    #[test]
    fn open_on_write_never_creates() {
        let dir = tempfile::tempdir().unwrap();
        let mut w = OpenOnWrite::new(dir.path().join("absent"));
        assert!(w.write_all(b"x").is_err());
        assert!(!dir.path().join("absent").exists());
        let mut null = OpenOnWrite::new("/dev/null".into());
        null.write_all(b"into the void").unwrap();
        null.flush().unwrap();
    }
}
