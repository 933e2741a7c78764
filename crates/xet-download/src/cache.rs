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
const SUBDIR: &str = "chunks";
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
    file_len: u64,
    last_used: SystemTime,
}

#[derive(Debug, Default)]
struct Index {
    xorbs: HashMap<MerkleHash, Vec<Entry>>,
    total: u64,
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

fn entry_name(e_start: u32, e_end: u32) -> String {
    format!("{e_start}-{e_end}")
}

fn parse_entry_name(s: &str) -> Option<(u32, u32)> {
    let (a, b) = s.split_once('-')?;
    let (a, b) = (a.parse().ok()?, b.parse().ok()?);
    (a < b).then_some((a, b))
}

impl ChunkCache {
    /// Open (create) the cache under `dir` and index what is there. Blocking.
    pub fn open(dir: &Path, max_bytes: u64) -> io::Result<ChunkCache> {
        let root = dir.join(SUBDIR);
        fs::create_dir_all(&root)?;
        let mut index = Index::default();
        for (xorb, path) in scan_xorb_dirs(&root)? {
            let Ok(rd) = fs::read_dir(&path) else {
                continue;
            };
            for f in rd.flatten() {
                let name = f.file_name();
                let name = name.to_string_lossy();
                if name.starts_with(".tmp") {
                    // Left by a crashed writer; remove if old.
                    if let Ok(m) = f.metadata() {
                        if m.modified()
                            .ok()
                            .and_then(|t| t.elapsed().ok())
                            .is_some_and(|a| a > Duration::from_secs(3600))
                        {
                            let _ = fs::remove_file(f.path());
                        }
                    }
                    continue;
                }
                let Some((start, end)) = parse_entry_name(&name) else {
                    continue;
                };
                let Ok(m) = f.metadata() else { continue };
                let last_used = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
                index.total += m.len();
                index.xorbs.entry(xorb).or_default().push(Entry {
                    start,
                    end,
                    file_len: m.len(),
                    last_used,
                });
            }
        }
        let cache = ChunkCache {
            root,
            max_bytes,
            index: Mutex::new(index),
            tmp_counter: AtomicU64::new(0),
        };
        cache.evict(None);
        Ok(cache)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Index> {
        self.index.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn entry_path(&self, xorb: &MerkleHash, start: u32, end: u32) -> PathBuf {
        self.root
            .join(xorb.to_string())
            .join(entry_name(start, end))
    }

    /// Entries covering chunks `a..b` of `xorb`, as `(entry start, entry end, from, to)`
    /// pieces in order, or `None` if the cache does not hold all of them.
    fn cover(&self, xorb: &MerkleHash, a: u32, b: u32) -> Option<Vec<(u32, u32, u32, u32)>> {
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
            pieces.push((best.start, best.end, pos, to));
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
        for (es, ee, from, to) in pieces {
            let sink_failed = AtomicBool::new(false);
            let res = self.read_piece(xorb, (es, ee), (from, to), base, &|off, d| {
                sink(off, d).inspect_err(|_| sink_failed.store(true, Ordering::Relaxed))
            });
            match res {
                Ok(chunks) => {
                    base += chunks.iter().map(|c| u64::from(c.1)).sum::<u64>();
                    out.extend(chunks);
                    self.touch(xorb, es, ee);
                }
                Err(e) if sink_failed.into_inner() => return Err(e),
                Err(e) => {
                    tracing::warn!(
                        "chunk cache entry {xorb}/{es}-{ee} unusable ({e}); removing it"
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
        (es, ee): (u32, u32),
        (from, to): (u32, u32),
        base: u64,
        sink: &(dyn Fn(u64, &[u8]) -> io::Result<()> + Sync),
    ) -> io::Result<Vec<(MerkleHash, u32)>> {
        let bad = |m: String| io::Error::new(io::ErrorKind::InvalidData, m);
        let path = self.entry_path(xorb, es, ee);
        let mut f = File::open(&path)?;
        let file_len = f.metadata()?.len();
        let n = (ee - es) as usize;
        let header_len = 12 + n as u64 * ENTRY_HEADER;
        if file_len < header_len {
            return Err(bad(format!("{file_len} bytes is shorter than its header")));
        }
        let mut header = vec![0u8; header_len as usize];
        f.read_exact(&mut header)?;
        if &header[..8] != MAGIC
            || u32::from_le_bytes(header[8..12].try_into().expect("4 bytes")) as usize != n
        {
            return Err(bad("bad magic or chunk count".into()));
        }
        let mut chunks = Vec::with_capacity(n);
        for i in 0..n {
            let p = 12 + i * ENTRY_HEADER as usize;
            let hash = MerkleHash(header[p..p + 32].try_into().expect("32 bytes"));
            let size = u32::from_le_bytes(header[p + 32..p + 36].try_into().expect("4 bytes"));
            if size == 0 || size as usize > MAX_CHUNK {
                return Err(bad(format!("chunk {i} size {size}")));
            }
            chunks.push((hash, size));
        }
        let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
        if header_len + total != file_len {
            return Err(bad(format!(
                "length {file_len}, header says {}",
                header_len + total
            )));
        }
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
                fsio::read_exact_at(&f, buf, header_len + skip + places[k])?;
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

    fn touch(&self, xorb: &MerkleHash, es: u32, ee: u32) {
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
            .open(self.entry_path(xorb, es, ee))
        {
            let _ = f.set_modified(now);
        }
    }

    fn remove(&self, xorb: &MerkleHash, es: u32, ee: u32) {
        let mut idx = self.lock();
        if let Some(v) = idx.xorbs.get_mut(xorb) {
            if let Some(p) = v.iter().position(|e| e.start == es && e.end == ee) {
                let e = v.remove(p);
                idx.total = idx.total.saturating_sub(e.file_len);
            }
        }
        drop(idx);
        let _ = fs::remove_file(self.entry_path(xorb, es, ee));
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
        let sizes: Vec<u32> = chunks.iter().map(|c| c.1).collect();
        let Some(p) = self.begin(xorb, start, &sizes) else {
            return;
        };
        let mut off = 0usize;
        for (i, s) in sizes.iter().enumerate() {
            p.write_chunk(i, &data[off..off + *s as usize]).unwrap();
            off += *s as usize;
        }
        let hashes: Vec<MerkleHash> = chunks.iter().map(|c| c.0).collect();
        self.commit(p, &hashes);
    }

    /// Start an entry for chunks `start..start + sizes.len()` of `xorb`, whose data is
    /// then written chunk by chunk (from any thread) with [`PendingEntry::write_chunk`]
    /// and published by [`ChunkCache::commit`]. `None` if it is already cached, too big,
    /// or cannot be created. Blocking.
    pub fn begin(&self, xorb: &MerkleHash, start: u32, sizes: &[u32]) -> Option<PendingEntry> {
        let end = start + sizes.len() as u32;
        let header_len = 12 + sizes.len() as u64 * ENTRY_HEADER;
        let data_len: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
        if sizes.is_empty()
            || header_len + data_len > self.max_bytes
            || self.contains(xorb, start, end)
        {
            return None;
        }
        let res = (|| -> io::Result<PendingEntry> {
            let dir = self.root.join(xorb.to_string());
            fs::create_dir_all(&dir)?;
            let tmp = dir.join(format!(
                ".tmp-{}-{}",
                std::process::id(),
                self.tmp_counter.fetch_add(1, Ordering::Relaxed)
            ));
            let file = File::create(&tmp)?;
            file.set_len(header_len + data_len)?;
            let mut offsets = Vec::with_capacity(sizes.len());
            let mut pos = header_len;
            for &s in sizes {
                offsets.push(pos);
                pos += u64::from(s);
            }
            Ok(PendingEntry {
                xorb: *xorb,
                start,
                sizes: sizes.to_vec(),
                offsets,
                file,
                tmp,
                file_len: pos,
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
        let (start, end) = (p.start, p.start + p.sizes.len() as u32);
        let res = (|| -> io::Result<()> {
            let mut header = Vec::with_capacity(12 + hashes.len() * ENTRY_HEADER as usize);
            header.extend_from_slice(MAGIC);
            header.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
            for (h, s) in hashes.iter().zip(&p.sizes) {
                header.extend_from_slice(&h.0);
                header.extend_from_slice(&s.to_le_bytes());
            }
            if hashes.len() != p.sizes.len() {
                return Err(io::Error::other("hash count differs from chunk count"));
            }
            fsio::write_all_at(&p.file, &header, 0)?;
            fs::rename(&p.tmp, self.entry_path(&xorb, start, end))
        })();
        p.done = res.is_ok();
        if let Err(e) = res {
            tracing::warn!("could not write chunk cache entry for xorb {xorb}: {e}");
            return;
        }
        let file_len = p.file_len;
        // Entries inside the new one are now redundant.
        let redundant: Vec<(u32, u32)> = {
            let mut idx = self.lock();
            let v = idx.xorbs.entry(xorb).or_default();
            let redundant = v
                .iter()
                .filter(|e| start <= e.start && e.end <= end && (e.start, e.end) != (start, end))
                .map(|e| (e.start, e.end))
                .collect();
            let replaced: u64 = v
                .iter()
                .filter(|e| (e.start, e.end) == (start, end))
                .map(|e| e.file_len)
                .sum();
            v.retain(|e| (e.start, e.end) != (start, end));
            v.push(Entry {
                start,
                end,
                file_len,
                last_used: SystemTime::now(),
            });
            idx.total = idx.total.saturating_sub(replaced) + file_len;
            redundant
        };
        for (s, e) in redundant {
            self.remove(&xorb, s, e);
        }
        self.evict(Some((xorb, start, end)));
    }

    /// Evict least recently used entries until the cache fits (never `keep`).
    fn evict(&self, keep: Option<(MerkleHash, u32, u32)>) {
        loop {
            let victim = {
                let idx = self.lock();
                if idx.total <= self.max_bytes {
                    return;
                }
                idx.xorbs
                    .iter()
                    .flat_map(|(x, v)| v.iter().map(move |e| (*x, e)))
                    .filter(|(x, e)| keep != Some((*x, e.start, e.end)))
                    .min_by_key(|(_, e)| e.last_used)
                    .map(|(x, e)| (x, e.start, e.end))
            };
            match victim {
                Some((x, s, e)) => self.remove(&x, s, e),
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
    sizes: Vec<u32>,
    offsets: Vec<u64>,
    file: File,
    tmp: PathBuf,
    file_len: u64,
    done: bool,
}

impl PendingEntry {
    /// Write chunk `i` (relative to the entry's start). Any thread, any order.
    pub fn write_chunk(&self, i: usize, data: &[u8]) -> io::Result<()> {
        if data.len() != self.sizes[i] as usize {
            return Err(io::Error::other(format!(
                "chunk {i} is {} bytes, expected {}",
                data.len(),
                self.sizes[i]
            )));
        }
        fsio::write_all_at(&self.file, data, self.offsets[i])
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
    /// Bytes on disk.
    pub bytes: u64,
}

fn entry_chunks(path: &Path) -> u64 {
    let mut head = [0u8; 12];
    match File::open(path).and_then(|mut f| f.read_exact(&mut head)) {
        Ok(()) if &head[..8] == MAGIC => {
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
        let p = c.entry_path(&x, 0, 1);
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
}
