//! Reading input files that someone else may be writing meanwhile.
//!
//! Inputs are read with `read(2)` into buffers this process owns, never memory-mapped.
//! A map of a file that another process truncates faults (`SIGBUS`) on the first access
//! past the new end, which kills the client with no message; and a map shows every later
//! write, so a chunk's bytes could change between hashing it and sending it in its xorb,
//! which the server then rejects with a checksum error that says nothing about the file.
//! A read copies the bytes once, so each chunk is one consistent snapshot from hashing
//! to sending, and a truncation is an early end of file. The copy costs CPU time (see
//! the crate docs for the measured cost).
//!
//! What is read is still only one version of the file if nobody wrote to it meanwhile.
//! [`Snapshot`] records the file's size and modification time when it is opened;
//! once it has been read, a different size or time means the bytes may mix versions,
//! and the file is refused with [`InputChanged`] before anything registers it (the
//! shards are sent only after every file has been read and checked). The xorbs already
//! sent hold chunks that are valid on their own; nothing refers to them. A write that
//! lands within the same timestamp tick as the file's previous change, before it was
//! opened, keeps the same time and is not seen (Linux 6.13 and later give a file queried
//! since its last change a fresh, finer timestamp on the next write, so every write made
//! after the file was opened is seen there).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use bytes::Bytes;

/// One thing to upload: a file, read as described above, or bytes a program already
/// holds (a Hub commit's inline files), uploaded without a temporary file.
#[derive(Debug, Clone)]
pub enum Input {
    File(PathBuf),
    /// `name` is what the report and errors call it.
    Bytes {
        name: PathBuf,
        data: Bytes,
    },
}

impl Input {
    /// The path of a file, the name of bytes.
    pub fn name(&self) -> &Path {
        match self {
            Input::File(p) | Input::Bytes { name: p, .. } => p,
        }
    }
}

impl From<PathBuf> for Input {
    fn from(p: PathBuf) -> Input {
        Input::File(p)
    }
}

/// A file that changed while it was being read, so what was read may not be one version
/// of it. The upload's [`crate::UploadError::Input`] carries it as its cause (downcast
/// `cause.get_ref()` to tell it from other input errors) with the file's path.
#[derive(Debug, thiserror::Error)]
#[error("changed during upload ({what}); run the command again once nothing writes to it")]
pub struct InputChanged {
    /// What differs, e.g. "its size went from 1000 to 10 bytes".
    pub what: String,
}

impl From<InputChanged> for std::io::Error {
    fn from(e: InputChanged) -> Self {
        std::io::Error::other(e)
    }
}

/// Size and modification time of an open file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Snapshot {
    pub len: u64,
    modified: Option<SystemTime>,
    /// Only a regular file has versions to mix: a pipe's or a device's size and times
    /// say nothing about what is read from it (a FIFO's time changes with every write).
    regular: bool,
}

impl Snapshot {
    pub fn of(file: &File) -> std::io::Result<Snapshot> {
        let meta = file.metadata()?;
        Ok(Snapshot {
            len: meta.len(),
            modified: meta.modified().ok(),
            regular: meta.is_file(),
        })
    }

    /// Err if `file` is a regular file that no longer has this size and modification
    /// time.
    pub fn check(&self, file: &File) -> std::io::Result<()> {
        if !self.regular {
            return Ok(());
        }
        let now = Snapshot::of(file)?;
        let what = if now.len != self.len {
            format!("its size went from {} to {} bytes", self.len, now.len)
        } else if now.modified != self.modified {
            "it was written to while it was read".to_string()
        } else {
            return Ok(());
        };
        Err(InputChanged { what }.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{Seek, Write};
    use std::time::Duration;

    /// A FIFO has no versions: data written into it while it is read (which moves its
    /// modification time) is what is read, not a change.
    #[test]
    fn fifos_are_not_checked() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("fifo");
        let made = std::process::Command::new("mkfifo")
            .arg(&p)
            .status()
            .unwrap();
        assert!(made.success());
        // Read-write, so that neither open waits for the other side.
        let f = File::options().read(true).write(true).open(&p).unwrap();
        let snap = Snapshot::of(&f).unwrap();
        std::thread::sleep(Duration::from_millis(20));
        File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .write_all(b"more data")
            .unwrap();
        assert_ne!(f.metadata().unwrap().modified().ok(), snap.modified);
        snap.check(&f).unwrap();
    }

    /// Size changes and in-place writes are both reported; an untouched file is not.
    #[test]
    fn changes_of_size_or_content_are_reported() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, vec![1u8; 10_000]).unwrap();
        let past = SystemTime::now() - Duration::from_secs(3600);
        std::fs::File::options()
            .write(true)
            .open(&p)
            .unwrap()
            .set_modified(past)
            .unwrap();
        let f = File::open(&p).unwrap();
        let snap = Snapshot::of(&f).unwrap();
        assert_eq!(snap.len, 10_000);
        snap.check(&f).unwrap();

        let mut w = std::fs::File::options().write(true).open(&p).unwrap();
        w.seek(std::io::SeekFrom::Start(100)).unwrap();
        w.write_all(b"other bytes").unwrap();
        let e = snap.check(&f).unwrap_err();
        let changed = e.get_ref().unwrap().downcast_ref::<InputChanged>().unwrap();
        assert!(changed.what.contains("written to"), "{e}");

        w.set_len(10).unwrap();
        let e = snap.check(&f).unwrap_err();
        assert!(e.to_string().contains("from 10000 to 10 bytes"), "{e}");
        assert!(e.to_string().starts_with("changed during upload"), "{e}");
    }
}
