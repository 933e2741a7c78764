//! The on-disk chunk cache: decompressed chunks, keyed by xorb hash and chunk range,
//! size-bounded with least-recently-used eviction.
//!
//! The reconstruction names chunks only by (xorb, chunk index), never by chunk hash, so
//! that is the key. One entry holds the decompressed chunks `start..end` of one xorb,
//! exactly as one fetch returned them:
//!
//! ```text
//! <cache dir>/chunks/<xorb hash>/<start>-<end>
//!     data                                 the n chunks' data, concatenated
//!     n × (hash: [u8; 32], size: u32 LE)   chunk hash and decompressed size
//!     n: u32 LE                            number of chunks (= end - start)
//!     "XETCC002"                           8-byte magic
//! ```
//!
//! The chunk table trails the data because the data is written as it is decoded, in
//! order, through a small aligned buffer with `O_DIRECT` where the filesystem allows
//! (the table, known only at the end, then follows it); entries are read from disk
//! later anyway, and writing them through the page cache costs a download as much
//! system time as writing the file itself. Entries of the first layout (`XETCC001`: the
//! table first) are still read.
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
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, SystemTime};

use rayon::prelude::*;
use serde::Serialize;
use xet_hash::MerkleHash;

use crate::direct::{self, AlignedBuf, Pool};
use crate::fsio;

/// Magic of entries with the chunk table first (read only).
const MAGIC_V1: &[u8; 8] = b"XETCC001";
/// Magic of entries with the chunk table last, at the end of the file.
const MAGIC: &[u8; 8] = b"XETCC002";
const SUBDIR: &str = "chunks";
/// Bytes per chunk in the chunk table.
const ENTRY_HEADER: u64 = 36;
/// Bytes of count and magic.
const TABLE_FIXED: u64 = 12;
/// Entries are staged (and written) in blocks of this size.
const STAGE: usize = 1 << 20;
/// Stage buffers, 16 kept for reuse.
static STAGES: Pool = Pool::new(STAGE, 16);

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
        let f = File::open(&path)?;
        let file_len = f.metadata()?.len();
        let n = (ee - es) as usize;
        let (chunks, data_start) = read_table(&f, file_len, n).map_err(bad)?;
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
                fsio::read_exact_at(&f, buf, data_start + skip + places[k])?;
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
        let table_len = TABLE_FIXED + sizes.len() as u64 * ENTRY_HEADER;
        let data_len: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
        if sizes.is_empty()
            || table_len + data_len > self.max_bytes
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
            // Small entries are not worth the aligned writes.
            let out = match (data_len >= STAGE as u64)
                .then(|| direct::open(&tmp, true))
                .flatten()
            {
                Some(f) => Staged::new(f, true),
                None => Staged::new(
                    fs::OpenOptions::new()
                        .write(true)
                        .create_new(true)
                        .open(&tmp)?,
                    false,
                ),
            };
            Ok(PendingEntry {
                xorb: *xorb,
                start,
                sizes: sizes.to_vec(),
                out: Mutex::new(out),
                tmp,
                file_len: data_len + table_len,
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

    /// Append the chunk table of `p` (with the chunks' `hashes`) and publish it. Errors
    /// are logged: the cache is an optimisation. Blocking.
    pub fn commit(&self, mut p: PendingEntry, hashes: &[MerkleHash]) {
        let xorb = p.xorb;
        let (start, end) = (p.start, p.start + p.sizes.len() as u32);
        let res = (|| -> io::Result<()> {
            if hashes.len() != p.sizes.len() {
                return Err(io::Error::other("hash count differs from chunk count"));
            }
            let out = p.out.get_mut().unwrap_or_else(|e| e.into_inner());
            if out.next != p.sizes.len() {
                return Err(io::Error::other("not every chunk was written"));
            }
            let mut table = Vec::with_capacity(hashes.len() * ENTRY_HEADER as usize + 12);
            for (h, s) in hashes.iter().zip(&p.sizes) {
                table.extend_from_slice(&h.0);
                table.extend_from_slice(&s.to_le_bytes());
            }
            table.extend_from_slice(&(hashes.len() as u32).to_le_bytes());
            table.extend_from_slice(MAGIC);
            out.append(&table, &p.tmp)?;
            out.finish(&p.tmp, p.file_len)?;
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
pub(crate) struct PendingEntry {
    xorb: MerkleHash,
    start: u32,
    sizes: Vec<u32>,
    out: Mutex<Staged>,
    tmp: PathBuf,
    file_len: u64,
    done: bool,
}

impl std::fmt::Debug for PendingEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PendingEntry")
            .field("xorb", &self.xorb)
            .field("start", &self.start)
            .field("chunks", &self.sizes.len())
            .field("tmp", &self.tmp)
            .finish()
    }
}

impl PendingEntry {
    /// Write chunk `i` (relative to the entry's start). Chunks come in order.
    pub fn write_chunk(&self, i: usize, data: &[u8]) -> io::Result<()> {
        if data.len() != self.sizes[i] as usize {
            return Err(io::Error::other(format!(
                "chunk {i} is {} bytes, expected {}",
                data.len(),
                self.sizes[i]
            )));
        }
        let mut out = self.out.lock().unwrap_or_else(|e| e.into_inner());
        if i != out.next {
            return Err(io::Error::other(format!(
                "chunk {i} written out of order (expected {})",
                out.next
            )));
        }
        out.append(data, &self.tmp)?;
        out.next += 1;
        Ok(())
    }
}

/// An entry file written front to back through one aligned stage buffer: direct writes
/// of whole stages where the filesystem takes them, else plain writes of the same.
struct Staged {
    file: File,
    direct: bool,
    stage: AlignedBuf,
    filled: usize,
    /// File offset of the stage's first byte.
    pos: u64,
    /// Chunks written so far.
    next: usize,
}

impl Staged {
    fn new(file: File, direct: bool) -> Staged {
        Staged {
            file,
            direct,
            stage: STAGES.take(),
            filled: 0,
            pos: 0,
            next: 0,
        }
    }

    fn append(&mut self, mut data: &[u8], path: &Path) -> io::Result<()> {
        while !data.is_empty() {
            let n = data.len().min(STAGE - self.filled);
            self.stage[self.filled..self.filled + n].copy_from_slice(&data[..n]);
            self.filled += n;
            data = &data[n..];
            if self.filled == STAGE {
                self.write_stage(path)?;
                self.pos += STAGE as u64;
                self.filled = 0;
            }
        }
        Ok(())
    }

    /// Write the filled part of the stage (padded to the alignment when direct).
    fn write_stage(&mut self, path: &Path) -> io::Result<()> {
        if self.direct {
            let padded = direct::padded(self.filled);
            self.stage[self.filled..padded].fill(0);
            match direct::write_at(&self.file, &self.stage[..padded], self.pos) {
                Ok(()) => return Ok(()),
                Err(e) if direct::is_unsupported(&e) => {
                    // Refused after all: the same file, through the page cache.
                    self.file = fs::OpenOptions::new().write(true).open(path)?;
                    self.direct = false;
                }
                Err(e) => return Err(e),
            }
        }
        fsio::write_all_at(&self.file, &self.stage[..self.filled], self.pos)
    }

    /// Write what is staged and cut the file to `len` (padding removed).
    fn finish(&mut self, path: &Path, len: u64) -> io::Result<()> {
        if self.filled > 0 {
            self.write_stage(path)?;
        }
        self.file.set_len(len)
    }
}

/// The chunk table of an entry file of `file_len` bytes holding `n` chunks (either
/// layout): every chunk's `(hash, size)` and the offset of the data.
fn read_table(f: &File, file_len: u64, n: usize) -> Result<(Vec<(MerkleHash, u32)>, u64), String> {
    let table_len = TABLE_FIXED + n as u64 * ENTRY_HEADER;
    if file_len < table_len {
        return Err(format!("{file_len} bytes is shorter than its chunk table"));
    }
    let io = |e: io::Error| e.to_string();
    let mut tail = [0u8; 12];
    fsio::read_exact_at(f, &mut tail, file_len - 12).map_err(io)?;
    let (table, count, data_start) = if &tail[4..] == MAGIC {
        let mut t = vec![0u8; table_len as usize - 12];
        fsio::read_exact_at(f, &mut t, file_len - table_len).map_err(io)?;
        (
            t,
            u32::from_le_bytes(tail[..4].try_into().expect("4 bytes")),
            0,
        )
    } else {
        let mut t = vec![0u8; table_len as usize];
        fsio::read_exact_at(f, &mut t, 0).map_err(io)?;
        if &t[..8] != MAGIC_V1 {
            return Err("bad magic".into());
        }
        let count = u32::from_le_bytes(t[8..12].try_into().expect("4 bytes"));
        (t.split_off(12), count, table_len)
    };
    if count as usize != n {
        return Err(format!("{count} chunks, the name says {n}"));
    }
    let mut chunks = Vec::with_capacity(n);
    for (i, e) in table.chunks_exact(ENTRY_HEADER as usize).enumerate() {
        let hash = MerkleHash(e[..32].try_into().expect("32 bytes"));
        let size = u32::from_le_bytes(e[32..36].try_into().expect("4 bytes"));
        if size == 0 || size as usize > MAX_CHUNK {
            return Err(format!("chunk {i} size {size}"));
        }
        chunks.push((hash, size));
    }
    let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
    if table_len + total != file_len {
        return Err(format!(
            "length {file_len}, chunk table says {}",
            table_len + total
        ));
    }
    Ok((chunks, data_start))
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
    let read = || -> io::Result<u64> {
        let f = File::open(path)?;
        let len = f.metadata()?.len();
        let mut b = [0u8; 12];
        if len >= 12 {
            fsio::read_exact_at(&f, &mut b, len - 12)?;
            if &b[4..] == MAGIC {
                return Ok(u64::from(u32::from_le_bytes(
                    b[..4].try_into().expect("4 bytes"),
                )));
            }
            fsio::read_exact_at(&f, &mut b, 0)?;
            if &b[..8] == MAGIC_V1 {
                return Ok(u64::from(u32::from_le_bytes(
                    b[8..].try_into().expect("4 bytes"),
                )));
            }
        }
        Ok(0)
    };
    read().unwrap_or(0)
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
        // A flipped data byte (chunk hash mismatch), a flipped magic byte, a cut table.
        let flip_data = |b: &mut Vec<u8>| b[10] ^= 1;
        let flip_magic = |b: &mut Vec<u8>| *b.last_mut().unwrap() ^= 0xff;
        let cut = |b: &mut Vec<u8>| b.truncate(b.len() - 5);
        for damage in [&flip_data as &dyn Fn(&mut Vec<u8>), &flip_magic, &cut] {
            c.insert(&x, 0, &chunks_of(&data, &[200]), &data);
            let p = c.entry_path(&x, 0, 1);
            let mut bytes = fs::read(&p).unwrap();
            damage(&mut bytes);
            fs::write(&p, bytes).unwrap();
            assert!(c.get(&x, 0, 1).is_none());
            assert!(!p.exists());
            assert!(!c.contains(&x, 0, 1));
        }
    }

    #[test]
    fn large_entries_round_trip_through_aligned_stages() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(dir.path(), 64 << 20).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        // Just over two and a half stages, in chunks of every size up to the maximum,
        // so chunks straddle stage borders and the last stage is partly filled.
        let mut sizes = Vec::new();
        let mut total = 0usize;
        let mut k = 0u32;
        while total < 5 * STAGE / 2 + 1 {
            let s = 1 + (k * 7919) % MAX_CHUNK as u32;
            sizes.push(s);
            total += s as usize;
            k += 1;
        }
        let data: Vec<u8> = (0..total as u32).map(|i| (i % 253) as u8).collect();
        let chunks = chunks_of(&data, &sizes);
        c.insert(&x, 3, &chunks, &data);
        let end = 3 + sizes.len() as u32;
        let table = TABLE_FIXED + sizes.len() as u64 * ENTRY_HEADER;
        assert_eq!(
            fs::metadata(c.entry_path(&x, 3, end)).unwrap().len(),
            total as u64 + table,
            "no padding left behind"
        );
        let got = c.get(&x, 3, end).unwrap();
        assert!(got.data == data);
        assert_eq!(got.chunks, chunks);
        assert_eq!(cache_stats(dir.path()).unwrap().chunks, sizes.len() as u64);
        // A middle slice, served from the same entry.
        let got = c.get(&x, 5, 9).unwrap();
        let from: usize = sizes[..2].iter().map(|&s| s as usize).sum();
        let to: usize = sizes[..6].iter().map(|&s| s as usize).sum();
        assert!(got.data == data[from..to]);
    }

    #[test]
    fn entries_of_the_first_layout_are_still_read() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(dir.path(), 1 << 20).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        let data: Vec<u8> = (0..300u32).map(|i| (i % 251) as u8).collect();
        let chunks = chunks_of(&data, &[100, 200]);
        // Table first, then the data.
        let mut bytes = MAGIC_V1.to_vec();
        bytes.extend_from_slice(&2u32.to_le_bytes());
        for (h, s) in &chunks {
            bytes.extend_from_slice(&h.0);
            bytes.extend_from_slice(&s.to_le_bytes());
        }
        bytes.extend_from_slice(&data);
        fs::create_dir_all(dir.path().join(SUBDIR).join(x.to_string())).unwrap();
        fs::write(c.entry_path(&x, 4, 6), bytes).unwrap();
        drop(c);
        let c = ChunkCache::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(c.get(&x, 4, 6).unwrap().data, data);
        assert_eq!(c.get(&x, 5, 6).unwrap().data, &data[100..]);
        assert_eq!(cache_stats(dir.path()).unwrap().chunks, 2);
    }

    #[test]
    fn chunks_written_out_of_order_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let c = ChunkCache::open(dir.path(), 1 << 20).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        let p = c.begin(&x, 0, &[10, 20]).unwrap();
        assert!(p.write_chunk(1, &[0; 20]).is_err());
        p.write_chunk(0, &[0; 10]).unwrap();
        assert!(p.write_chunk(0, &[0; 10]).is_err());
        let hashes = [
            xet_hash::chunk_hash(&[0; 10]),
            xet_hash::chunk_hash(&[0; 20]),
        ];
        // Committing with a chunk missing publishes nothing.
        c.commit(p, &hashes);
        assert!(!c.contains(&x, 0, 2));
        assert_eq!(fs::read_dir(c.root.join(x.to_string())).unwrap().count(), 0);
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
