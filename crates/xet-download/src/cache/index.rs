//! The in-memory index of the cache directory (rebuilt from a directory scan when the
//! cache is opened), its updates as entries come and go, and least-recently-used
//! eviction.

use std::collections::HashMap;
use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::time::SystemTime;

use xet_hash::MerkleHash;

use super::ChunkCache;
use super::entry::parse_entry_name;
use super::layout::{remove_stale_tmp, scan_xorb_dirs};

#[derive(Debug, Clone)]
pub(super) struct Entry {
    pub start: u32,
    pub end: u32,
    /// Bytes of the entry file itself (a reference: its header only).
    pub file_len: u64,
    pub last_used: SystemTime,
    /// A reference: the chunks are in the linked file `files/<this hash>`.
    pub linked: Option<MerkleHash>,
}

/// A linked file: its size and how many references point into it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Linked {
    pub len: u64,
    pub refs: usize,
}

/// An entry's `(start, end, linked file)`: what its file name says.
pub(super) type EntryKey = (u32, u32, Option<MerkleHash>);

#[derive(Debug, Default)]
pub(super) struct Index {
    pub xorbs: HashMap<MerkleHash, Vec<Entry>>,
    pub linked: HashMap<MerkleHash, Linked>,
    /// Entry files plus linked files, in bytes.
    pub total: u64,
}

/// What eviction removes: one entry, or a linked file with all its references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Unit {
    Entry(MerkleHash, u32, u32),
    Linked(MerkleHash),
}

impl Index {
    /// Index the entry files of every xorb directory under `root`, counting references
    /// into the linked files already indexed; a reference whose linked file is gone is
    /// deleted. Linked files' sizes are not added to `total` here.
    pub fn scan_entries(&mut self, root: &Path) -> io::Result<()> {
        for (xorb, path) in scan_xorb_dirs(root)? {
            let Ok(rd) = fs::read_dir(&path) else {
                continue;
            };
            for f in rd.flatten() {
                let name = f.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(".tmp") {
                    remove_stale_tmp(&f);
                    continue;
                }
                let Some((start, end, linked)) = parse_entry_name(&name) else {
                    continue;
                };
                if let Some(h) = &linked {
                    match self.linked.get_mut(h) {
                        Some(l) => l.refs += 1,
                        None => {
                            // Its linked file was evicted (by another process).
                            let _ = fs::remove_file(f.path());
                            continue;
                        }
                    }
                }
                let Ok(m) = f.metadata() else { continue };
                let last_used = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                self.total += m.len();
                self.xorbs.entry(xorb).or_default().push(Entry {
                    start,
                    end,
                    file_len: m.len(),
                    last_used,
                    linked,
                });
            }
        }
        Ok(())
    }

    /// Entries covering chunks `a..b` of `xorb`, as `(entry, from, to)` pieces in order,
    /// or `None` if the cache does not hold all of them.
    pub fn cover(&self, xorb: &MerkleHash, a: u32, b: u32) -> Option<Vec<(EntryKey, u32, u32)>> {
        let entries = self.xorbs.get(xorb)?;
        let mut pos = a;
        let mut pieces = Vec::new();
        while pos < b {
            let best = entries
                .iter()
                .filter(|e| e.start <= pos && pos < e.end)
                .max_by_key(|e| e.end)?;
            let to = best.end.min(b);
            pieces.push(((best.start, best.end, best.linked), pos, to));
            pos = to;
        }
        Some(pieces)
    }

    /// Take an entry out of the index only (its file is left alone).
    pub fn unindex(&mut self, xorb: &MerkleHash, es: u32, ee: u32) -> Option<Entry> {
        let v = self.xorbs.get_mut(xorb)?;
        let e = v.remove(v.iter().position(|e| e.start == es && e.end == ee)?);
        if v.is_empty() {
            self.xorbs.remove(xorb);
        }
        self.total = self.total.saturating_sub(e.file_len);
        if let Some(l) = e.linked.as_ref().and_then(|h| self.linked.get_mut(h)) {
            l.refs = l.refs.saturating_sub(1);
        }
        Some(e)
    }

    /// Forget linked file `h` if no reference uses it any more; the caller then
    /// deletes it. Returns whether it was forgotten.
    pub fn unlink_if_unused(&mut self, h: &MerkleHash) -> bool {
        match self.linked.get(h) {
            Some(l) if l.refs == 0 => {
                self.total = self.total.saturating_sub(l.len);
                self.linked.remove(h);
                true
            }
            _ => false,
        }
    }

    /// The least recently used entry or linked file (never `keep`). A linked file is
    /// as recent as its most recent reference.
    pub fn lru_victim(&self, keep: Option<Unit>) -> Option<Unit> {
        let mut linked_used: HashMap<MerkleHash, SystemTime> = HashMap::new();
        let mut best: Option<(SystemTime, Unit)> = None;
        let mut consider = |t: SystemTime, u: Unit| {
            if Some(u) != keep && best.is_none_or(|(bt, _)| t < bt) {
                best = Some((t, u));
            }
        };
        for (x, v) in &self.xorbs {
            for e in v {
                match e.linked {
                    None => consider(e.last_used, Unit::Entry(*x, e.start, e.end)),
                    Some(h) => {
                        let t = linked_used.entry(h).or_insert(e.last_used);
                        *t = (*t).max(e.last_used);
                    }
                }
            }
        }
        for (h, t) in linked_used {
            consider(t, Unit::Linked(h));
        }
        best.map(|(_, u)| u)
    }
}

impl ChunkCache {
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
