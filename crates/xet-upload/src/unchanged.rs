//! Files unchanged since they were last uploaded are not read again.
//!
//! After a successful upload, each file's identity on disk (size, modification and change
//! times to the nanosecond, inode, device) is recorded with its file hash, sha256 and
//! term count in `<cache dir>/unchanged-files.json`. The next upload to the same CAS
//! (the cache dir is per CAS) skips a file whose identity is the same, once the CAS
//! confirms it still has the file at that size. This is the rule git's index and
//! restic's parent snapshots use; the change time (which no user tool can set back)
//! catches `touch -r` style restorations, and, as in git's "racy" check, an entry only
//! counts when the file had not been modified within [`RACY_WINDOW`] of being recorded
//! (an edit in that window could keep the same times). With `UploadOptions::rehash`, a
//! recorded file is chunked and hashed again instead, and skipped only if its file hash
//! is still the recorded one.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};
use xet_hash::MerkleHash;

use crate::error::{Result, UploadError};

/// Entries whose file was modified this close to (or after) the time they were recorded
/// are not trusted.
pub const RACY_WINDOW: Duration = Duration::from_secs(2);
/// Most entries kept; the oldest are dropped beyond it.
const MAX_ENTRIES: usize = 200_000;
const FILE_NAME: &str = "unchanged-files.json";

/// What identifies a file's content on disk without reading it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub size: u64,
    mtime_ns: i128,
    ctime_ns: i128,
    ino: u64,
    dev: u64,
}

impl Identity {
    #[cfg(unix)]
    pub fn of(meta: &std::fs::Metadata) -> Option<Identity> {
        use std::os::unix::fs::MetadataExt;
        Some(Identity {
            size: meta.len(),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            ino: meta.ino(),
            dev: meta.dev(),
        })
    }

    #[cfg(not(unix))]
    pub fn of(_meta: &std::fs::Metadata) -> Option<Identity> {
        None
    }
}

/// What an earlier upload learned about one file.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub(crate) struct Entry {
    pub identity: Identity,
    pub hash: MerkleHash,
    pub sha256: String,
    pub terms: usize,
    /// When the entry was written (ns since the Unix epoch).
    pub recorded_ns: i128,
}

impl Entry {
    fn trusted(&self, now: &Identity) -> bool {
        let racy = RACY_WINDOW.as_nanos() as i128;
        self.identity == *now
            && now.mtime_ns < self.recorded_ns - racy
            && now.ctime_ns < self.recorded_ns - racy
    }
}

pub(crate) fn now_ns() -> i128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_nanos() as i128)
        .unwrap_or(0)
}

/// The recorded files of one cache dir.
#[derive(Debug, Default)]
pub(crate) struct Unchanged {
    path: PathBuf,
    entries: HashMap<PathBuf, Entry>,
}

impl Unchanged {
    /// Load the records of `cache_dir` (none if missing or unreadable: it is only a cache).
    pub fn load(cache_dir: &Path) -> Unchanged {
        let path = cache_dir.join(FILE_NAME);
        let entries = std::fs::read(&path)
            .ok()
            .and_then(|b| serde_json::from_slice(&b).ok())
            .unwrap_or_default();
        Unchanged { path, entries }
    }

    /// The entry for `file` if its identity `now` is the recorded one and trusted.
    pub fn lookup(&self, file: &Path, now: &Identity) -> Option<&Entry> {
        let key = std::fs::canonicalize(file).ok()?;
        self.entries.get(&key).filter(|e| e.trusted(now))
    }

    pub fn record(&mut self, file: &Path, entry: Entry) {
        // The record file is JSON: paths that are not UTF-8 are simply not remembered.
        if let Ok(key) = std::fs::canonicalize(file)
            && key.to_str().is_some()
        {
            self.entries.insert(key, entry);
        }
    }

    /// Forget `file` (e.g. the CAS no longer has what the entry says).
    pub fn forget(&mut self, file: &Path) {
        if let Ok(key) = std::fs::canonicalize(file) {
            self.entries.remove(&key);
        }
    }

    /// Write the records atomically (temporary file, then rename).
    pub fn save(mut self) -> Result<()> {
        if self.entries.len() > MAX_ENTRIES {
            let mut by_age: Vec<(i128, PathBuf)> = self
                .entries
                .iter()
                .map(|(p, e)| (e.recorded_ns, p.clone()))
                .collect();
            by_age.sort();
            for (_, p) in by_age.into_iter().take(self.entries.len() - MAX_ENTRIES) {
                self.entries.remove(&p);
            }
        }
        self.write().map_err(|e| UploadError::cache(&self.path, e))
    }

    fn write(&self) -> std::io::Result<()> {
        let dir = self.path.parent().unwrap_or(Path::new("."));
        std::fs::create_dir_all(dir)?;
        xet_mmap::durable::replace_with(&self.path, |f| {
            // Buffered: serde_json writes token by token, a system call each unbuffered
            // (1.6 million for the records of 20,000 files).
            let mut w = std::io::BufWriter::with_capacity(1 << 20, f);
            serde_json::to_writer(&mut w, &self.entries)?;
            w.flush()
        })
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;

    fn entry(identity: Identity, recorded_ns: i128) -> Entry {
        Entry {
            identity,
            hash: MerkleHash::default(),
            sha256: String::new(),
            terms: 1,
            recorded_ns,
        }
    }

    #[test]
    fn only_an_identical_and_settled_file_is_trusted() {
        let dir = tempfile::tempdir().unwrap();
        let f = dir.path().join("f");
        std::fs::write(&f, b"abc").unwrap();
        let id = Identity::of(&std::fs::metadata(&f).unwrap()).unwrap();
        let mut u = Unchanged::load(dir.path());
        // Recorded right after the write: inside the racy window, not trusted.
        u.record(&f, entry(id, now_ns()));
        assert!(u.lookup(&f, &id).is_none());
        // Recorded well after: trusted, and it survives a save and load.
        u.record(&f, entry(id, now_ns() + 10_000_000_000));
        assert!(u.lookup(&f, &id).is_some());
        u.save().unwrap();
        let u = Unchanged::load(dir.path());
        assert!(u.lookup(&f, &id).is_some());
        // Any change of size or times is a miss.
        for changed in [
            Identity { size: 4, ..id },
            Identity {
                mtime_ns: id.mtime_ns + 1,
                ..id
            },
            Identity {
                ctime_ns: id.ctime_ns + 1,
                ..id
            },
            Identity {
                ino: id.ino + 1,
                ..id
            },
        ] {
            assert!(u.lookup(&f, &changed).is_none(), "{changed:?}");
        }
        // A rewrite of the file changes its identity.
        std::thread::sleep(Duration::from_millis(20));
        std::fs::write(&f, b"abd").unwrap();
        let id2 = Identity::of(&std::fs::metadata(&f).unwrap()).unwrap();
        assert_ne!(id, id2);
        assert!(u.lookup(&f, &id2).is_none());
    }

    #[test]
    fn a_failed_save_names_the_record_file() {
        let dir = tempfile::tempdir().unwrap();
        // The cache directory is a file: nothing can be written under it.
        let not_a_dir = dir.path().join("cache");
        std::fs::write(&not_a_dir, b"").unwrap();
        let u = Unchanged::load(&not_a_dir);
        match u.save() {
            Err(UploadError::Cache { path, .. }) => assert_eq!(path, not_a_dir.join(FILE_NAME)),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_damaged_record_file_is_an_empty_cache() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(FILE_NAME), b"{not json").unwrap();
        assert!(Unchanged::load(dir.path()).entries.is_empty());
    }
}
