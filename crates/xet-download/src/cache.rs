//! The on-disk chunk cache: decompressed chunks, keyed by xorb hash and chunk range,
//! size-bounded with least-recently-used eviction.
//!
//! The reconstruction names chunks only by (xorb, chunk index), never by chunk hash, so
//! that is the key. One entry holds the decompressed chunks `start..end` of one xorb,
//! exactly as one fetch returned them:
//!
//! ```text
//! <cache dir>/chunks/<xorb hash>/<start>-<end>
//!     "XETCC001"                           8-byte magic
//!     n: u32 LE                            number of chunks (= end - start)
//!     n × (hash: [u8; 32], size: u32 LE)   chunk hash and decompressed size
//!     data                                 the n chunks' data, concatenated
//! ```
//!
//! Values are *decompressed* (the draft's recommendation, §13.2): a hit costs a read
//! and a hash, no decompression. A lookup for chunks `a..b` may be served from several
//! entries; every chunk read from the cache is re-hashed and compared with the hash in
//! the entry, and an entry that fails is deleted and treated as a miss. Entries are
//! written to a temporary name and renamed, so readers never see a partial entry.
//! Recency is the entry file's modification time, refreshed on every hit, so the LRU
//! order survives restarts; the in-memory index is rebuilt from a directory scan when
//! a download starts. Several processes may share a cache directory: a file evicted by
//! another process is just a miss.
//!
//! A whole file downloaded to the cache's file system is not copied: once verified, it
//! is hard-linked into the cache, and each of its terms is recorded as a *reference*
//! into that link, so caching it costs no data writes and no second copy on disk:
//!
//! ```text
//! <cache dir>/chunks/files/<file hash>                 the downloaded file (a hard link)
//! <cache dir>/chunks/<xorb hash>/<start>-<end>@<file hash>
//!     "XETCR001"                           8-byte magic
//!     n: u32 LE                            number of chunks (= end - start)
//!     offset: u64 LE                       where the chunks start in the linked file
//!     n × (hash: [u8; 32], size: u32 LE)   chunk hash and decompressed size
//! ```
//!
//! The link shares its inode with the user's file, so the cache never writes to it
//! and never changes its times (recency lives in the reference files). If the user
//! changes the file in place, the re-hash on read catches it and the reference is a
//! miss. A linked file counts against the size bound once, and is evicted as a unit
//! (with all its references) by the most recent use of any of them. A reference whose
//! linked file is gone is dropped when the cache is opened, and so is a linked file
//! with no references once its inode is an hour old (younger, another process may be
//! recording its references).

use std::collections::HashMap;
use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rayon::prelude::*;
use serde::Serialize;
use xet_hash::MerkleHash;

use crate::fsio;

const MAGIC: &[u8; 8] = b"XETCC001";
const REF_MAGIC: &[u8; 8] = b"XETCR001";
const SUBDIR: &str = "chunks";
/// Linked files, under `chunks/` (not a hash, so never taken for a xorb directory).
const FILES: &str = "files";
const ENTRY_HEADER: u64 = 36;

thread_local! {
    /// Per-thread chunk buffer for cache reads.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}
/// Largest chunk (the protocol's 128 KiB).
const MAX_CHUNK: usize = 128 * 1024;

#[derive(Debug, Clone)]
struct Entry {
    start: u32,
    end: u32,
    /// Bytes of the entry file itself (a reference: its header only).
    file_len: u64,
    last_used: SystemTime,
    /// A reference: the chunks are in the linked file `files/<this hash>`.
    linked: Option<MerkleHash>,
}

/// A linked file: its size and how many references point into it.
#[derive(Debug, Clone, Copy)]
struct Linked {
    len: u64,
    refs: usize,
}

#[derive(Debug, Default)]
struct Index {
    xorbs: HashMap<MerkleHash, Vec<Entry>>,
    linked: HashMap<MerkleHash, Linked>,
    /// Entry files plus linked files, in bytes.
    total: u64,
}

impl Index {
    /// Forget linked file `h` if no reference uses it any more; the caller then
    /// deletes it. Returns whether it was forgotten.
    fn unlink_if_unused(&mut self, h: &MerkleHash) -> bool {
        match self.linked.get(h) {
            Some(l) if l.refs == 0 => {
                self.total = self.total.saturating_sub(l.len);
                self.linked.remove(h);
                true
            }
            _ => false,
        }
    }
}

/// What eviction removes: one entry, or a linked file with all its references.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Unit {
    Entry(MerkleHash, u32, u32),
    Linked(MerkleHash),
}

/// One term of a verified, downloaded file, for [`ChunkCache::link_file`].
#[derive(Debug, Clone)]
pub(crate) struct FileTerm {
    pub xorb: MerkleHash,
    /// First chunk index in the xorb.
    pub start: u32,
    /// Where the term's data starts in the file.
    pub offset: u64,
    pub chunks: Vec<(MerkleHash, u32)>,
}

/// Chunks read from the cache (all verified).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CachedChunks {
    pub data: Vec<u8>,
    pub chunks: Vec<(MerkleHash, u32)>,
}

#[derive(Debug)]
pub(crate) struct ChunkCache {
    root: PathBuf,
    max_bytes: u64,
    index: Mutex<Index>,
    tmp_counter: AtomicU64,
}

fn entry_name(e_start: u32, e_end: u32, linked: Option<&MerkleHash>) -> String {
    match linked {
        None => format!("{e_start}-{e_end}"),
        Some(f) => format!("{e_start}-{e_end}@{f}"),
    }
}

/// `(start, end, linked file)` of an entry file name.
fn parse_entry_name(s: &str) -> Option<(u32, u32, Option<MerkleHash>)> {
    let (range, linked) = match s.split_once('@') {
        Some((r, f)) => (r, Some(MerkleHash::from_hex(f).ok()?)),
        None => (s, None),
    };
    let (a, b) = range.split_once('-')?;
    let (a, b) = (a.parse().ok()?, b.parse().ok()?);
    (a < b).then_some((a, b, linked))
}

/// Whether the inode's status last changed over `age` ago (linking a file changes it;
/// writing to it does too).
fn changed_before(m: &fs::Metadata, age: Duration) -> bool {
    #[cfg(unix)]
    let changed = {
        use std::os::unix::fs::MetadataExt;
        SystemTime::UNIX_EPOCH + Duration::from_secs(m.ctime().max(0) as u64)
    };
    #[cfg(not(unix))]
    let changed = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    changed.elapsed().is_ok_and(|a| a >= age)
}

/// Remove a `.tmp` file left by a crashed writer once it is an hour old.
fn remove_stale_tmp(f: &fs::DirEntry) {
    if let Ok(m) = f.metadata() {
        if m.modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|a| a > Duration::from_secs(3600))
        {
            let _ = fs::remove_file(f.path());
        }
    }
}

impl ChunkCache {
    /// Open (create) the cache under `dir` and index what is there. Blocking.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<ChunkCache> {
        Self::open_with(dir, max_bytes, Duration::from_secs(3600))
    }

    /// [`ChunkCache::open`], dropping linked files without references once their
    /// inode changed over `orphan_age` ago.
    fn open_with(dir: &Path, max_bytes: u64, orphan_age: Duration) -> io::Result<ChunkCache> {
        let root = dir.join(SUBDIR);
        fs::create_dir_all(&root)?;
        let mut index = Index::default();
        if let Ok(rd) = fs::read_dir(root.join(FILES)) {
            for f in rd.flatten() {
                let name = f.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(".tmp") {
                    remove_stale_tmp(&f);
                } else if let (Ok(h), Ok(m)) = (MerkleHash::from_hex(&name), f.metadata()) {
                    index.linked.insert(
                        h,
                        Linked {
                            len: m.len(),
                            refs: 0,
                        },
                    );
                }
            }
        }
        for (xorb, path) in scan_xorb_dirs(&root)? {
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
                    match index.linked.get_mut(h) {
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
                index.total += m.len();
                index.xorbs.entry(xorb).or_default().push(Entry {
                    start,
                    end,
                    file_len: m.len(),
                    last_used,
                    linked,
                });
            }
        }
        // Linked files nothing refers to any more are dropped, unless just linked:
        // another process may be writing their references right now.
        index.linked.retain(|h, l| {
            if l.refs == 0 {
                let path = root.join(FILES).join(h.to_string());
                if fs::metadata(&path).is_ok_and(|m| changed_before(&m, orphan_age)) {
                    let _ = fs::remove_file(path);
                }
            }
            l.refs > 0
        });
        index.total += index.linked.values().map(|l| l.len).sum::<u64>();
        let cache = ChunkCache {
            root,
            max_bytes,
            index: Mutex::new(index),
            tmp_counter: AtomicU64::new(0),
        };
        cache.evict(None);
        Ok(cache)
    }

    /// The size bound.
    pub fn max_bytes(&self) -> u64 {
        self.max_bytes
    }

    /// The directory linked files go to (for a same-file-system check).
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entry_path(
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

    fn linked_path(&self, file: &MerkleHash) -> PathBuf {
        self.root.join(FILES).join(file.to_string())
    }

    fn tmp_name(&self) -> String {
        format!(
            ".tmp-{}-{}",
            std::process::id(),
            self.tmp_counter.fetch_add(1, Ordering::Relaxed)
        )
    }

    /// Entries covering chunks `a..b` of `xorb`, as `((entry start, entry end, linked),
    /// from, to)` pieces in order, or `None` if the cache does not hold all of them.
    #[allow(clippy::type_complexity)]
    fn cover(
        &self,
        xorb: &MerkleHash,
        a: u32,
        b: u32,
    ) -> Option<Vec<((u32, u32, Option<MerkleHash>), u32, u32)>> {
        let idx = self.lock();
        let entries = idx.xorbs.get(xorb)?;
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

    /// Whether every chunk of `a..b` of `xorb` is cached (index only, no I/O).
    pub fn contains(&self, xorb: &MerkleHash, a: u32, b: u32) -> bool {
        self.cover(xorb, a, b).is_some()
    }

    /// Read chunks `a..b` of `xorb`, verify each against its recorded hash, and hand
    /// `(offset, data)` to `sink`, where `offset` is the chunk's position in the
    /// decompressed data of `a..b`. Chunks are read in parallel (positional reads into
    /// per-thread buffers), in no particular order. Blocking. Returns the chunks'
    /// `(hash, size)`, `Ok(None)` on a miss (broken entries are removed; `sink` may have
    /// seen some chunks), or the sink's error.
    pub fn read_chunks(
        &self,
        xorb: &MerkleHash,
        a: u32,
        b: u32,
        sink: impl Fn(u64, &[u8]) -> io::Result<()> + Sync,
    ) -> io::Result<Option<Vec<(MerkleHash, u32)>>> {
        let Some(pieces) = self.cover(xorb, a, b) else {
            return Ok(None);
        };
        let mut out = Vec::with_capacity((b - a) as usize);
        let mut base = 0u64;
        for (key, from, to) in pieces {
            let (es, ee, linked) = key;
            let sink_failed = AtomicBool::new(false);
            let res = self.read_piece(xorb, key, (from, to), base, &|off, d| {
                sink(off, d).inspect_err(|_| sink_failed.store(true, Ordering::Relaxed))
            });
            match res {
                Ok(chunks) => {
                    base += chunks.iter().map(|c| u64::from(c.1)).sum::<u64>();
                    out.extend(chunks);
                    self.touch(xorb, es, ee, linked.as_ref());
                }
                Err(e) if sink_failed.into_inner() => return Err(e),
                Err(e) => {
                    tracing::warn!(
                        "chunk cache entry {xorb}/{} unusable ({e}); removing it",
                        entry_name(es, ee, linked.as_ref())
                    );
                    self.remove(xorb, es, ee);
                    return Ok(None);
                }
            }
        }
        Ok(Some(out))
    }

    /// Chunks `a..b` of `xorb` as one buffer (tests).
    #[cfg(test)]
    pub fn get(&self, xorb: &MerkleHash, a: u32, b: u32) -> Option<CachedChunks> {
        let data = std::sync::Mutex::new(Vec::new());
        let chunks = self
            .read_chunks(xorb, a, b, |off, d| {
                let mut v = data.lock().unwrap();
                let end = off as usize + d.len();
                if v.len() < end {
                    v.resize(end, 0);
                }
                v[off as usize..end].copy_from_slice(d);
                Ok(())
            })
            .ok()??;
        Some(CachedChunks {
            data: data.into_inner().unwrap(),
            chunks,
        })
    }

    /// Chunks `from..to` of entry `es..ee`; `base` is added to every sink offset.
    fn read_piece(
        &self,
        xorb: &MerkleHash,
        (es, ee, linked): (u32, u32, Option<MerkleHash>),
        (from, to): (u32, u32),
        base: u64,
        sink: &(dyn Fn(u64, &[u8]) -> io::Result<()> + Sync),
    ) -> io::Result<Vec<(MerkleHash, u32)>> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let path = self.entry_path(xorb, es, ee, linked.as_ref());
        let mut f = File::open(&path)?;
        let file_len = f.metadata()?.len();
        let n = (ee - es) as usize;
        let (magic, prefix) = match linked {
            None => (MAGIC, 12),
            Some(_) => (REF_MAGIC, 20),
        };
        let header_len = prefix + n as u64 * ENTRY_HEADER;
        if file_len < header_len {
            return Err(bad(format!("{file_len} bytes is shorter than its header")));
        }
        let mut header = vec![0u8; header_len as usize];
        f.read_exact(&mut header)?;
        if &header[..8] != magic
            || u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize != n
        {
            return Err(bad("bad magic or chunk count".into()));
        }
        let mut chunks = Vec::with_capacity(n);
        for i in 0..n {
            let p = prefix as usize + i * ENTRY_HEADER as usize;
            let hash = MerkleHash(header[p..p + 32].try_into().expect("32 bytes"));
            let size = u32::from_le_bytes(header[p + 32..p + 36].try_into().expect("4 bytes"));
            if size == 0 || size as usize > MAX_CHUNK {
                return Err(bad(format!("chunk {i} size {size}")));
            }
            chunks.push((hash, size));
        }
        let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
        // Where the chunks are: after the header, or at the recorded offset of the
        // linked file.
        let (data, data_start) = match &linked {
            None => {
                if header_len + total != file_len {
                    return Err(bad(format!(
                        "length {file_len}, header says {}",
                        header_len + total
                    )));
                }
                (f, header_len)
            }
            Some(h) => {
                if file_len != header_len {
                    return Err(bad(format!(
                        "reference is {file_len} bytes, not {header_len}"
                    )));
                }
                let offset = u64::from_le_bytes(header[12..20].try_into().expect("8 bytes"));
                let data = File::open(self.linked_path(h))?;
                let len = data.metadata()?.len();
                if offset.checked_add(total).is_none_or(|e| e > len) {
                    return Err(bad(format!(
                        "linked file {h} is {len} bytes, the reference needs {total} at {offset}"
                    )));
                }
                (data, offset)
            }
        };
        // File position and sink offset of each wanted chunk.
        let skip: u64 = chunks[..(from - es) as usize]
            .iter()
            .map(|c| u64::from(c.1))
            .sum();
        let want = &chunks[(from - es) as usize..(to - es) as usize];
        let mut places = Vec::with_capacity(want.len());
        let mut off = 0u64;
        for &(_, size) in want {
            places.push(off);
            off += u64::from(size);
        }
        (0..want.len()).into_par_iter().try_for_each(|k| {
            let (hash, size) = want[k];
            READ_BUF.with(|b| {
                let buf = &mut *b.borrow_mut();
                buf.clear();
                buf.resize(size as usize, 0);
                fsio::read_exact_at(&data, buf, data_start + skip + places[k])?;
                if xet_hash::chunk_hash(buf) != hash {
                    return Err(bad(format!(
                        "chunk {} does not hash to its recorded hash",
                        from + k as u32
                    )));
                }
                sink(base + places[k], buf)
            })
        })?;
        Ok(want.to_vec())
    }

    /// Mark an entry used. For a reference this sets the reference file's time, never
    /// the linked file's: that inode is the user's file too.
    fn touch(&self, xorb: &MerkleHash, es: u32, ee: u32, linked: Option<&MerkleHash>) {
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

    /// Take an entry out of the index only (its file is left alone). The caller holds
    /// the lock.
    fn unindex(idx: &mut Index, xorb: &MerkleHash, es: u32, ee: u32) -> Option<Entry> {
        let v = idx.xorbs.get_mut(xorb)?;
        let e = v.remove(v.iter().position(|e| e.start == es && e.end == ee)?);
        if v.is_empty() {
            idx.xorbs.remove(xorb);
        }
        idx.total = idx.total.saturating_sub(e.file_len);
        if let Some(l) = e.linked.as_ref().and_then(|h| idx.linked.get_mut(h)) {
            l.refs = l.refs.saturating_sub(1);
        }
        Some(e)
    }

    /// Drop an entry from the index whose file has been replaced under the same name.
    fn forget(&self, xorb: &MerkleHash, es: u32, ee: u32) {
        Self::unindex(&mut self.lock(), xorb, es, ee);
    }

    /// Remove one entry; a linked file goes with its last reference.
    fn remove(&self, xorb: &MerkleHash, es: u32, ee: u32) {
        let mut idx = self.lock();
        let Some(e) = Self::unindex(&mut idx, xorb, es, ee) else {
            return;
        };
        let drop_linked = e.linked.filter(|h| idx.unlink_if_unused(h));
        drop(idx);
        let _ = fs::remove_file(self.entry_path(xorb, es, ee, e.linked.as_ref()));
        if let Some(h) = drop_linked {
            let _ = fs::remove_file(self.linked_path(&h));
        }
    }

    /// Remove a linked file and every reference into it.
    fn remove_linked(&self, file: &MerkleHash) {
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

    /// Store chunks `start..start + chunks.len()` of `xorb` (tests; the pipeline streams
    /// with [`ChunkCache::begin`]).
    #[cfg(test)]
    pub fn insert(&self, xorb: &MerkleHash, start: u32, chunks: &[(MerkleHash, u32)], data: &[u8]) {
        let Some(mut p) = self.begin(xorb, start, chunks.len()) else {
            return;
        };
        let mut off = 0usize;
        for (_, s) in chunks {
            p.append(&data[off..off + *s as usize]).unwrap();
            off += *s as usize;
        }
        let hashes: Vec<MerkleHash> = chunks.iter().map(|c| c.0).collect();
        self.commit(p, &hashes);
    }

    /// Start an entry for the `n` chunks `start..start + n` of `xorb`, whose data is then
    /// appended chunk by chunk, in order, with [`PendingEntry::append`] (as a range is
    /// decoded) and published by [`ChunkCache::commit`]. `None` if it is already cached,
    /// cannot fit, or cannot be created. Blocking.
    pub fn begin(&self, xorb: &MerkleHash, start: u32, n: usize) -> Option<PendingEntry> {
        let end = start + n as u32;
        let header_len = 12 + n as u64 * ENTRY_HEADER;
        if n == 0 || header_len > self.max_bytes || self.contains(xorb, start, end) {
            return None;
        }
        let res = (|| -> io::Result<PendingEntry> {
            let dir = self.root.join(xorb.to_string());
            fs::create_dir_all(&dir)?;
            let tmp = dir.join(self.tmp_name());
            let file = File::create(&tmp)?;
            Ok(PendingEntry {
                xorb: *xorb,
                start,
                n,
                sizes: Vec::with_capacity(n),
                file,
                tmp,
                file_len: header_len,
                max_len: self.max_bytes,
                done: false,
            })
        })();
        match res {
            Ok(p) => Some(p),
            Err(e) => {
                tracing::warn!("could not create a chunk cache entry for xorb {xorb}: {e}");
                None
            }
        }
    }

    /// Write the header of `p` (with the chunks' `hashes`) and publish it. Errors are
    /// logged: the cache is an optimisation. Blocking.
    pub fn commit(&self, mut p: PendingEntry, hashes: &[MerkleHash]) {
        let xorb = p.xorb;
        let (start, end) = (p.start, p.start + p.n as u32);
        let res = (|| -> io::Result<()> {
            if hashes.len() != p.n || p.sizes.len() != p.n {
                return Err(io::Error::other("hash count differs from chunk count"));
            }
            // Sizes are known only once the chunks are in.
            if p.file_len > self.max_bytes {
                return Err(io::Error::other("the entry is larger than the whole cache"));
            }
            let mut header = Vec::with_capacity(12 + hashes.len() * ENTRY_HEADER as usize);
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
            for (h, s) in hashes.iter().zip(&p.sizes) {
                header.extend_from_slice(&h.0);
                header.extend_from_slice(&s.to_le_bytes());
            }
            fsio::write_all_at(&p.file, &header, 0)?;
            fs::rename(&p.tmp, self.entry_path(&xorb, start, end, None))
        })();
        p.done = res.is_ok();
        if let Err(e) = res {
            tracing::warn!("could not write chunk cache entry for xorb {xorb}: {e}");
            return;
        }
        self.publish(
            &xorb,
            Entry {
                start,
                end,
                file_len: p.file_len,
                last_used: SystemTime::now(),
                linked: None,
            },
        );
        self.evict(Some(Unit::Entry(xorb, start, end)));
    }

    /// Add a written entry to the index; entries inside it become redundant and go.
    fn publish(&self, xorb: &MerkleHash, new: Entry) {
        let (start, end) = (new.start, new.end);
        let inside: Vec<(u32, u32, Option<MerkleHash>)> = self
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

    /// Share a downloaded file's data instead of copying it: hard-link `src` (already
    /// verified against `file`, `len` bytes) as `files/<file>` and record a reference
    /// for each of `terms` not already cached. `Ok(false)` if there was nothing to
    /// record or the file exceeds the bound; an error if the link could not be made
    /// (the caller may copy the terms instead). Blocking.
    pub fn link_file(
        &self,
        file: &MerkleHash,
        src: &Path,
        len: u64,
        terms: &[FileTerm],
    ) -> io::Result<bool> {
        let end_of = |t: &FileTerm| t.start + t.chunks.len() as u32;
        let new: Vec<&FileTerm> = terms
            .iter()
            .filter(|t| !t.chunks.is_empty() && !self.contains(&t.xorb, t.start, end_of(t)))
            .collect();
        // The file and its references must fit the bound together, or the next open
        // would evict them at once.
        let refs_len: u64 = new
            .iter()
            .map(|t| 20 + t.chunks.len() as u64 * ENTRY_HEADER)
            .sum();
        if new.is_empty() || len.saturating_add(refs_len) > self.max_bytes {
            return Ok(false);
        }
        let dir = self.root.join(FILES);
        fs::create_dir_all(&dir)?;
        let tmp = dir.join(self.tmp_name());
        fs::hard_link(src, &tmp)?;
        if let Err(e) = fs::rename(&tmp, self.linked_path(file)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        {
            // A link already there was replaced: its references now read the new
            // inode, which holds the same verified bytes.
            let mut idx = self.lock();
            let l = idx
                .linked
                .entry(*file)
                .or_insert(Linked { len: 0, refs: 0 });
            let old_len = std::mem::replace(&mut l.len, len);
            idx.total = idx.total.saturating_sub(old_len) + len;
        }
        for t in new {
            let (start, end) = (t.start, end_of(t));
            if self.contains(&t.xorb, start, end) {
                // A term repeated in the file, recorded a moment ago.
                continue;
            }
            let mut body = Vec::with_capacity(20 + t.chunks.len() * ENTRY_HEADER as usize);
            body.extend_from_slice(REF_MAGIC);
            body.extend_from_slice(&(t.chunks.len() as u32).to_le_bytes());
            body.extend_from_slice(&t.offset.to_le_bytes());
            for (h, s) in &t.chunks {
                body.extend_from_slice(&h.0);
                body.extend_from_slice(&s.to_le_bytes());
            }
            let res = (|| -> io::Result<()> {
                let d = self.root.join(t.xorb.to_string());
                fs::create_dir_all(&d)?;
                let tmp = d.join(self.tmp_name());
                if let Err(e) = fs::write(&tmp, &body).and_then(|()| {
                    fs::rename(&tmp, self.entry_path(&t.xorb, start, end, Some(file)))
                }) {
                    let _ = fs::remove_file(&tmp);
                    return Err(e);
                }
                Ok(())
            })();
            match res {
                Ok(()) => self.publish(
                    &t.xorb,
                    Entry {
                        start,
                        end,
                        file_len: body.len() as u64,
                        last_used: SystemTime::now(),
                        linked: Some(*file),
                    },
                ),
                Err(e) => tracing::warn!(
                    "could not record chunks {start}..{end} of xorb {} in the chunk cache: {e}",
                    t.xorb
                ),
            }
        }
        // No reference could be written: the link would only take room.
        let unused = self.lock().unlink_if_unused(file);
        if unused {
            let _ = fs::remove_file(self.linked_path(file));
            return Ok(false);
        }
        self.evict(Some(Unit::Linked(*file)));
        Ok(true)
    }

    /// Copy `terms` of a downloaded file into ordinary entries, reading their data
    /// back from `src` (when it could not be linked). Errors are logged. Blocking.
    pub fn copy_from_file(&self, src: &File, terms: &[FileTerm]) {
        for t in terms {
            let Some(mut p) = self.begin(&t.xorb, t.start, t.chunks.len()) else {
                continue;
            };
            let mut buf = Vec::new();
            let mut off = t.offset;
            let res = t.chunks.iter().try_for_each(|&(_, s)| {
                buf.resize(s as usize, 0);
                fsio::read_exact_at(src, &mut buf, off)?;
                off += u64::from(s);
                p.append(&buf)
            });
            match res {
                Ok(()) => {
                    let hashes: Vec<MerkleHash> = t.chunks.iter().map(|c| c.0).collect();
                    self.commit(p, &hashes);
                }
                Err(e) => tracing::warn!(
                    "could not copy chunks of xorb {} into the chunk cache: {e}",
                    t.xorb
                ),
            }
        }
    }

    /// Evict least recently used entries and linked files until the cache fits
    /// (never `keep`). A linked file is as recent as its most recent reference.
    fn evict(&self, keep: Option<Unit>) {
        loop {
            let victim = {
                let idx = self.lock();
                if idx.total <= self.max_bytes {
                    return;
                }
                let mut linked_used: HashMap<MerkleHash, SystemTime> = HashMap::new();
                let mut best: Option<(SystemTime, Unit)> = None;
                let mut consider = |t: SystemTime, u: Unit| {
                    if Some(u) != keep && best.is_none_or(|(bt, _)| t < bt) {
                        best = Some((t, u));
                    }
                };
                for (x, v) in &idx.xorbs {
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
            };
            match victim {
                Some(Unit::Entry(x, s, e)) => self.remove(&x, s, e),
                Some(Unit::Linked(h)) => self.remove_linked(&h),
                None => return,
            }
        }
    }

    #[cfg(test)]
    fn total(&self) -> u64 {
        self.lock().total
    }
}

/// An entry being written; see [`ChunkCache::begin`]. Dropped uncommitted, its
/// temporary file is removed.
#[derive(Debug)]
pub(crate) struct PendingEntry {
    xorb: MerkleHash,
    start: u32,
    /// Chunks the entry holds once complete.
    n: usize,
    /// Sizes of the chunks appended so far.
    sizes: Vec<u32>,
    file: File,
    tmp: PathBuf,
    /// Header plus the chunks appended so far.
    file_len: u64,
    /// The cache's bound: an entry growing past it is given up at once.
    max_len: u64,
    done: bool,
}

impl PendingEntry {
    /// Append the next chunk's data.
    pub fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if self.sizes.len() == self.n {
            return Err(io::Error::other(format!(
                "the entry holds {} chunks; no room for another",
                self.n
            )));
        }
        if self.file_len + data.len() as u64 > self.max_len {
            return Err(io::Error::other("the entry is larger than the whole cache"));
        }
        fsio::write_all_at(&self.file, data, self.file_len)?;
        self.file_len += data.len() as u64;
        self.sizes.push(data.len() as u32);
        Ok(())
    }
}

impl Drop for PendingEntry {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

fn scan_xorb_dirs(root: &Path) -> io::Result<Vec<(MerkleHash, PathBuf)>> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for d in rd.flatten() {
        if let Some(x) = d
            .file_name()
            .to_str()
            .and_then(|s| MerkleHash::from_hex(s).ok())
        {
            out.push((x, d.path()));
        }
    }
    Ok(out)
}

/// What `xet cache stats` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// The cache root that was looked at.
    pub dir: PathBuf,
    /// Cache entries (chunk ranges).
    pub entries: u64,
    /// Distinct xorbs with at least one entry.
    pub xorbs: u64,
    /// Decompressed chunks held.
    pub chunks: u64,
    /// Downloaded files whose data the cache shares by hard link.
    pub linked_files: u64,
    /// Their bytes (counted in `bytes` too, although the disk holds them once while
    /// the downloaded file exists).
    pub linked_bytes: u64,
    /// Bytes held: entry files plus linked files.
    pub bytes: u64,
}

fn entry_chunks(path: &Path) -> u64 {
    let mut head = [0u8; 12];
    match File::open(path).and_then(|mut f| f.read_exact(&mut head)) {
        Ok(()) if &head[..8] == MAGIC || &head[..8] == REF_MAGIC => {
            u64::from(u32::from_le_bytes(head[8..12].try_into().expect("4 bytes")))
        }
        _ => 0,
    }
}

/// Statistics of the chunk cache under `dir` (the same directory given as
/// [`crate::CacheConfig::dir`]). A missing cache has zero of everything.
pub fn cache_stats(dir: &Path) -> io::Result<CacheStats> {
    let mut s = CacheStats {
        dir: dir.to_path_buf(),
        ..Default::default()
    };
    for (_, path) in scan_xorb_dirs(&dir.join(SUBDIR))? {
        let mut any = false;
        for f in fs::read_dir(&path)?.flatten() {
            let name = f.file_name();
            if parse_entry_name(&name.to_string_lossy()).is_none() {
                continue;
            }
            any = true;
            s.entries += 1;
            s.bytes += f.metadata().map(|m| m.len()).unwrap_or(0);
            s.chunks += entry_chunks(&f.path());
        }
        s.xorbs += u64::from(any);
    }
    if let Ok(rd) = fs::read_dir(dir.join(SUBDIR).join(FILES)) {
        for f in rd.flatten() {
            if MerkleHash::from_hex(&f.file_name().to_string_lossy()).is_ok() {
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                s.linked_files += 1;
                s.linked_bytes += len;
                s.bytes += len;
            }
        }
    }
    Ok(s)
}

/// Delete the chunk cache under `dir` (only its `chunks/` subdirectory; nothing else
/// in `dir` is touched). Returns what was removed.
pub fn cache_clear(dir: &Path) -> io::Result<CacheStats> {
    let stats = cache_stats(dir)?;
    match fs::remove_dir_all(dir.join(SUBDIR)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::hash_chunks;

    fn chunks_of(data: &[u8], sizes: &[u32]) -> Vec<(MerkleHash, u32)> {
        hash_chunks(data, sizes)
            .unwrap()
            .into_iter()
            .zip(sizes.iter().copied())
            .collect()
    }

    #[test]
    fn insert_get_cover_and_stats() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(dir.path(), 1 << 20).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        let data: Vec<u8> = (0..600u32).map(|i| (i % 251) as u8).collect();
        c.insert(&x, 10, &chunks_of(&data[..300], &[100, 200]), &data[..300]);
        c.insert(&x, 12, &chunks_of(&data[300..], &[300]), &data[300..]);
        assert!(c.contains(&x, 10, 13));
        assert!(!c.contains(&x, 9, 11));
        assert!(!c.contains(&x, 10, 14));
        let got = c.get(&x, 11, 13).unwrap();
        assert_eq!(got.data, &data[100..]);
        assert_eq!(got.chunks.len(), 2);
        assert_eq!(got.chunks[1].1, 300);

        let s = cache_stats(dir.path()).unwrap();
        assert_eq!((s.entries, s.xorbs, s.chunks), (2, 1, 3));
        assert_eq!(s.bytes, c.total());

        // Reopen: the index is rebuilt from disk.
        drop(c);
        let c = ChunkCache::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(c.get(&x, 10, 11).unwrap().data, &data[..100]);

        // Inserting what is already covered is a no-op.
        c.insert(&x, 10, &chunks_of(&data, &[100, 200, 300]), &data);
        assert_eq!(cache_stats(dir.path()).unwrap().entries, 2);
        // A larger entry replaces the ones it contains.
        let mut more = vec![9u8; 50];
        more.extend_from_slice(&data);
        c.insert(&x, 9, &chunks_of(&more, &[50, 100, 200, 300]), &more);
        assert_eq!(cache_stats(dir.path()).unwrap().entries, 1);
        assert_eq!(c.get(&x, 9, 13).unwrap().data, more);

        let removed = cache_clear(dir.path()).unwrap();
        assert_eq!(removed.entries, 1);
        assert_eq!(cache_stats(dir.path()).unwrap().entries, 0);
        assert!(dir.path().exists());
    }

    #[test]
    fn corrupt_entries_are_misses_and_removed() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(dir.path(), 1 << 20).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        let data = vec![5u8; 200];
        c.insert(&x, 0, &chunks_of(&data, &[200]), &data);
        let p = c.entry_path(&x, 0, 1, None);
        let mut bytes = fs::read(&p).unwrap();
        let n = bytes.len();
        bytes[n - 1] ^= 0xff;
        fs::write(&p, bytes).unwrap();
        assert!(c.get(&x, 0, 1).is_none());
        assert!(!p.exists());
        assert!(!c.contains(&x, 0, 1));
    }

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

    /// A file of two terms (xorbs `x`, `y`) written at `path`, and its terms.
    fn linked_fixture(path: &Path) -> (Vec<u8>, Vec<FileTerm>) {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
        fs::write(path, &data).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        let y = xet_hash::chunk_hash(b"y");
        let terms = vec![
            FileTerm {
                xorb: x,
                start: 3,
                offset: 0,
                chunks: chunks_of(&data[..3000], &[1000, 2000]),
            },
            FileTerm {
                xorb: y,
                start: 0,
                offset: 3000,
                chunks: chunks_of(&data[3000..], &[2000]),
            },
        ];
        (data, terms)
    }

    #[test]
    fn linked_files_serve_their_terms_without_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("downloaded");
        let (data, terms) = linked_fixture(&src);
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        File::options()
            .write(true)
            .open(&src)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let fh = xet_hash::chunk_hash(b"file");
        let c = ChunkCache::open(&dir.path().join("cache"), 1 << 20).unwrap();
        assert!(c.link_file(&fh, &src, 5000, &terms).unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let (a, b) = (
                fs::metadata(&src).unwrap(),
                fs::metadata(c.linked_path(&fh)).unwrap(),
            );
            assert_eq!(
                (a.ino(), a.nlink()),
                (b.ino(), 2),
                "a hard link, not a copy"
            );
        }
        let (x, y) = (terms[0].xorb, terms[1].xorb);
        assert_eq!(c.get(&x, 4, 5).unwrap().data, &data[1000..3000]);
        assert_eq!(c.get(&y, 0, 1).unwrap().data, &data[3000..]);
        assert!(!c.contains(&x, 2, 4));
        assert_eq!(
            fs::metadata(&src).unwrap().modified().unwrap(),
            old,
            "hits never touch the user's file"
        );
        let s = cache_stats(&dir.path().join("cache")).unwrap();
        assert_eq!((s.entries, s.xorbs, s.chunks, s.linked_files), (2, 2, 3, 1));
        assert_eq!(s.linked_bytes, 5000);
        assert_eq!(s.bytes, c.total());
        assert_eq!(s.bytes, 5000 + 2 * 20 + 3 * 36);
        // Nothing new to record: no second link.
        assert!(!c.link_file(&fh, &src, 5000, &terms).unwrap());

        // Reopened, the index comes back from the names alone.
        drop(c);
        let c = ChunkCache::open(&dir.path().join("cache"), 1 << 20).unwrap();
        assert_eq!(c.total(), s.bytes);
        assert_eq!(c.get(&x, 3, 5).unwrap().data, &data[..3000]);

        // The user changes the file in place: that term is a miss and its reference
        // goes; the other still serves, and the link goes with the last reference.
        let mut changed = data.clone();
        changed[4000] ^= 1;
        fs::write(&src, &changed).unwrap();
        assert!(c.get(&y, 0, 1).is_none());
        assert!(!c.contains(&y, 0, 1));
        assert_eq!(c.get(&x, 3, 4).unwrap().data, &data[..1000]);
        c.remove(&x, 3, 5);
        assert!(!c.linked_path(&fh).exists());
        assert_eq!(c.total(), 0);
        assert_eq!(fs::read(&src).unwrap(), changed, "the user's file stays");
    }

    #[test]
    fn terms_copied_from_a_file_are_ordinary_entries() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("downloaded");
        let (data, terms) = linked_fixture(&src);
        let c = ChunkCache::open(&dir.path().join("cache"), 1 << 20).unwrap();
        c.copy_from_file(&File::open(&src).unwrap(), &terms);
        fs::remove_file(&src).unwrap();
        assert_eq!(c.get(&terms[0].xorb, 3, 5).unwrap().data, &data[..3000]);
        assert_eq!(c.get(&terms[1].xorb, 0, 1).unwrap().data, &data[3000..]);
        let s = cache_stats(&dir.path().join("cache")).unwrap();
        assert_eq!((s.entries, s.chunks, s.linked_files), (2, 3, 0));
        assert_eq!(s.bytes, 5000 + 2 * 12 + 3 * 36);
    }

    #[test]
    fn a_linked_file_is_evicted_whole_by_its_most_recent_use() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("downloaded");
        let (_, terms) = linked_fixture(&src);
        let fh = xet_hash::chunk_hash(b"file");
        let linked = 5000 + 2 * 20 + 3 * 36;
        let per = 12 + 36 + 1000u64;
        let c = ChunkCache::open(&dir.path().join("cache"), linked + 2 * per).unwrap();
        let one = vec![1u8; 1000];
        let ch = chunks_of(&one, &[1000]);
        let xs: Vec<MerkleHash> = (0..3u8).map(|i| xet_hash::chunk_hash(&[i])).collect();
        c.insert(&xs[0], 0, &ch, &one);
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.link_file(&fh, &src, 5000, &terms).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        c.insert(&xs[1], 0, &ch, &one);
        std::thread::sleep(Duration::from_millis(20));
        // Using one term of the file makes the whole file recent.
        assert!(c.get(&terms[1].xorb, 0, 1).is_some());
        std::thread::sleep(Duration::from_millis(20));
        c.insert(&xs[2], 0, &ch, &one);
        assert!(!c.contains(&xs[0], 0, 1), "the oldest entry goes first");
        assert!(c.contains(&terms[0].xorb, 3, 5) && c.contains(&terms[1].xorb, 0, 1));
        assert!(c.total() <= linked + 2 * per);

        // Another entry: now the file is least recently used, and goes whole.
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.get(&xs[2], 0, 1).is_some());
        assert!(c.get(&xs[1], 0, 1).is_some());
        c.insert(&xs[0], 0, &ch, &one);
        assert!(!c.contains(&terms[0].xorb, 3, 4) && !c.contains(&terms[1].xorb, 0, 1));
        assert!(!c.linked_path(&fh).exists());
        assert!(src.exists());
        assert_eq!(cache_stats(&dir.path().join("cache")).unwrap().entries, 3);

        // A file that fits the bound only without its references is not linked at all.
        let tight = ChunkCache::open(&dir.path().join("tight"), linked - 1).unwrap();
        assert!(!tight.link_file(&fh, &src, 5000, &terms).unwrap());
        assert_eq!(tight.total(), 0);
        let exact = ChunkCache::open(&dir.path().join("exact"), linked).unwrap();
        assert!(exact.link_file(&fh, &src, 5000, &terms).unwrap());
        drop(exact);
        let exact = ChunkCache::open(&dir.path().join("exact"), linked).unwrap();
        assert_eq!(exact.total(), linked, "still there when reopened");
    }

    #[test]
    fn open_drops_references_without_their_file_and_files_without_references() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let src = dir.path().join("downloaded");
        let (_, terms) = linked_fixture(&src);
        let (f1, f2) = (xet_hash::chunk_hash(b"f1"), xet_hash::chunk_hash(b"f2"));
        let c = ChunkCache::open(&root, 1 << 20).unwrap();
        assert!(c.link_file(&f1, &src, 5000, &terms[..1]).unwrap());
        assert!(c.link_file(&f2, &src, 5000, &terms[1..]).unwrap());
        let ref2 = c.entry_path(&terms[1].xorb, 0, 1, Some(&f2));
        let link1 = c.linked_path(&f1);
        drop(c);
        // f1 loses its reference file, f2 its linked file.
        fs::remove_file(c_ref(&root, &terms[0], &f1)).unwrap();
        fs::remove_file(root.join(SUBDIR).join(FILES).join(f2.to_string())).unwrap();
        // Just linked: another process may be about to write its references.
        drop(ChunkCache::open(&root, 1 << 20).unwrap());
        assert!(link1.exists(), "a young linked file is left alone");
        let c = ChunkCache::open_with(&root, 1 << 20, Duration::ZERO).unwrap();
        assert!(
            !link1.exists(),
            "a linked file no reference uses is removed"
        );
        assert!(!ref2.exists(), "a reference to a missing file is removed");
        assert_eq!(c.total(), 0);
        assert_eq!(
            cache_stats(&root).unwrap(),
            CacheStats {
                dir: root,
                ..Default::default()
            }
        );
    }

    fn c_ref(root: &Path, t: &FileTerm, f: &MerkleHash) -> PathBuf {
        root.join(SUBDIR).join(t.xorb.to_string()).join(entry_name(
            t.start,
            t.start + t.chunks.len() as u32,
            Some(f),
        ))
    }
}
