//! The [`ChunkCache`] itself: its directory, size bound and in-memory index, and the
//! bookkeeping that keeps the index and the directory in step as entries are used,
//! published, removed and evicted.

use std::fs::{self, File};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::SystemTime;

use xet_hash::MerkleHash;

use super::entry::entry_name;
use super::index::{Entry, EntryKey, Index, Unit};
use super::layout::FILES;

/// The chunk cache of one directory. Its methods are grouped by concern: the index
/// bookkeeping here, below everything else; opening, reading and writing entries in
/// the [`super`] module; linked files in `linked.rs`.
#[derive(Debug)]
pub(crate) struct ChunkCache {
    /// `<cache dir>/chunks`.
    root: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
    tmp_counter: AtomicU64,
}

impl ChunkCache {
    /// A cache over `root` (`<cache dir>/chunks`) with its directory already scanned
    /// into `index`: what [`ChunkCache::open`] builds once the scan is done.
    pub(super) fn new(root: PathBuf, max_bytes: u64, index: Index) -> ChunkCache {
        ChunkCache {
            root,
            max_bytes,
            index: Mutex::new(index),
            tmp_counter: AtomicU64::new(0),
        }
    }

    /// The size bound.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The cache's `chunks/` directory, which holds the linked files (for a
    /// same-file-system check).
    pub fn root(&self) -> &Path {
        &self.root
    }

    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub(super) fn entry_path(
        &self,
        xorb: &MerkleHash,
        start: u32,
        end: u32,
        linked: Option<&MerkleHash>,
    ) -> PathBuf {
        self.root
            .join(xorb.to_string())
            .join(entry_name(start, end, linked))
    }

    /// Where linked file `file` is: `files/<file hash>`.
    pub(super) fn linked_path(&self, file: &MerkleHash) -> PathBuf {
        self.root.join(FILES).join(file.to_string())
    }

    /// A temporary file name unique within this process, for an entry or link that is
    /// written and then renamed into place.
    pub(super) fn tmp_name(&self) -> String {
        format!(
            ".tmp-{}-{}",
            std::process::id(),
            self.tmp_counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Whether every chunk of `a..b` of `xorb` is cached (index only, no I/O).
    pub fn contains(&self, xorb: &MerkleHash, a: u32, b: u32) -> bool {
        self.lock().cover(xorb, a, b).is_some()
    }

    /// Mark an entry used. For a reference this sets the reference file's time, never
    /// the linked file's: that inode is the user's file too.
    pub(super) fn touch(&self, xorb: &MerkleHash, es: u32, ee: u32, linked: Option<&MerkleHash>) {
        let now = SystemTime::now();
        if let Some(e) = self
            .lock()
            .xorbs
            .get_mut(xorb)
            .and_then(|v| v.iter_mut().find(|e| e.start == es && e.end == ee))
        {
            e.last_used = now;
        }
        if let Ok(f) = File::options()
            .write(true)
            .open(self.entry_path(xorb, es, ee, linked))
        {
            let _ = f.set_modified(now);
        }
    }

    /// Add a written entry to the index; entries inside it become redundant and go.
    pub(super) fn publish(&self, xorb: &MerkleHash, new: Entry) {
        let (start, end) = (new.start, new.end);
        let inside: Vec<EntryKey> = self
            .lock()
            .xorbs
            .get(xorb)
            .map(|v| {
                v.iter()
                    .filter(|e| start <= e.start && e.end <= end)
                    .map(|e| (e.start, e.end, e.linked))
                    .collect()
            })
            .unwrap_or_default();
        for (s, e, linked) in inside {
            if (s, e, linked) == (start, end, new.linked) {
                // Same name: the new file has already replaced it on disk.
                self.forget(xorb, s, e);
            } else {
                self.remove(xorb, s, e);
            }
        }
        let mut idx = self.lock();
        if let Some(l) = new.linked.as_ref().and_then(|h| idx.linked.get_mut(h)) {
            l.refs += 1;
        }
        idx.total += new.file_len;
        idx.xorbs.entry(*xorb).or_default().push(new);
    }

    /// Drop an entry from the index whose file has been replaced under the same name.
    fn forget(&self, xorb: &MerkleHash, es: u32, ee: u32) {
        self.lock().unindex(xorb, es, ee);
    }

    /// Remove one entry; a linked file goes with its last reference.
    pub(super) fn remove(&self, xorb: &MerkleHash, es: u32, ee: u32) {
        let mut idx = self.lock();
        let Some(e) = idx.unindex(xorb, es, ee) else {
            return;
        };
        let drop_linked = e.linked.filter(|h| idx.unlink_if_unused(h));
        drop(idx);
        let _ = fs::remove_file(self.entry_path(xorb, es, ee, e.linked.as_ref()));
        if let Some(h) = drop_linked {
            let _ = fs::remove_file(self.linked_path(&h));
        }
    }

    /// Remove every entry overlapping chunks `a..b` of `xorb` (used when a download
    /// that used them failed verification).
    pub fn remove_overlapping(&self, xorb: &MerkleHash, a: u32, b: u32) {
        let victims: Vec<(u32, u32)> = match self.lock().xorbs.get(xorb) {
            Some(v) => v
                .iter()
                .filter(|e| e.start < b && a < e.end)
                .map(|e| (e.start, e.end))
                .collect(),
            None => return,
        };
        for (s, e) in victims {
            self.remove(xorb, s, e);
        }
    }

    /// Evict least recently used entries and linked files until the cache fits
    /// (never `keep`).
    pub(super) fn evict(&self, keep: Option<Unit>) {
        loop {
            let victim = {
                let idx = self.lock();
                if idx.total <= self.max_bytes {
                    return;
                }
                idx.lru_victim(keep)
            };
            match victim {
                Some(Unit::Entry(x, s, e)) => self.remove(&x, s, e),
                Some(Unit::Linked(h)) => self.remove_linked(&h),
                None => return,
            }
        }
    }

    /// Remove a linked file and every reference into it.
    pub(super) fn remove_linked(&self, file: &MerkleHash) {
        let refs: Vec<(MerkleHash, u32, u32)> = self
            .lock()
            .xorbs
            .iter()
            .flat_map(|(x, v)| {
                v.iter()
                    .filter(|e| e.linked.as_ref() == Some(file))
                    .map(move |e| (*x, e.start, e.end))
            })
            .collect();
        for (x, s, e) in refs {
            self.remove(&x, s, e);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::cache::cache_stats;
    use crate::cache::tests::chunks_of;

    #[test]
    fn lru_eviction_keeps_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let per = 12 + 36 + 1000u64;
        let c = ChunkCache::open(dir.path(), per * 3).unwrap();
        let data = vec![1u8; 1000];
        let ch = chunks_of(&data, &[1000]);
        let xs: Vec<MerkleHash> = (0..5u8).map(|i| xet_hash::chunk_hash(&[i])).collect();
        for (i, x) in xs.iter().enumerate() {
            c.insert(x, 0, &ch, &data);
            if i == 2 {
                // Use the first one so it is more recent than the second and third.
                std::thread::sleep(Duration::from_millis(20));
                assert!(c.get(&xs[0], 0, 1).is_some());
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(c.total() <= per * 3);
        assert!(c.contains(&xs[0], 0, 1), "recently used entry survives");
        assert!(
            !c.contains(&xs[1], 0, 1),
            "least recently used entries are evicted"
        );
        assert!(!c.contains(&xs[2], 0, 1));
        assert!(c.contains(&xs[4], 0, 1));
        assert_eq!(cache_stats(dir.path()).unwrap().entries, 3);
    }
}
