//! The in-memory index of the cache directory (rebuilt from a directory scan when the
//! cache is opened), its updates as entries come and go, and the choice of what
//! least-recently-used eviction removes. It touches files only in that scan; keeping
//! the directory in step is [`super::store`]'s.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;
use std::time::SystemTime;

use xet_hash::MerkleHash;

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
