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
//!
//! The code, each module importing only those before it: [`layout`] holds the
//! directory layout, [`entry`] the file formats, [`index`] the in-memory index,
//! [`store`] the [`ChunkCache`] with the bookkeeping that keeps index and directory in
//! step (eviction too), [`linked`] the linked files and their references, [`stats`]
//! what `xet cache stats` and `xet cache clear` do; this module opens the cache,
//! reads it and writes entries.

mod entry;
mod index;
mod layout;
mod linked;
mod stats;
mod store;

use std::fs::{self, File};
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime};

use rayon::prelude::*;
use xet_hash::MerkleHash;

use crate::fsio;
use entry::{entry_name, invalid};
use index::{Entry, EntryKey, Index, Unit};
use layout::SUBDIR;

pub(crate) use entry::PendingEntry;
pub(crate) use linked::FileTerm;
pub use stats::{CacheStats, cache_clear, cache_stats};
pub(crate) use store::ChunkCache;

thread_local! {
    /// Per-thread chunk buffer for cache reads.
    static READ_BUF: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// Chunks read from the cache (all verified).
#[cfg(test)]
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct CachedChunks {
    pub data: Vec<u8>,
    pub chunks: Vec<(MerkleHash, u32)>,
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
        let mut index = Index {
            linked: linked::scan_linked_files(&root),
            ..Index::default()
        };
        index.scan_entries(&root)?;
        linked::drop_unreferenced(&root, &mut index, orphan_age);
        index.total += index.linked.values().map(|l| l.len).sum::<u64>();
        let cache = ChunkCache::new(root, max_bytes, index);
        cache.evict(None);
        Ok(cache)
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
        let Some(pieces) = self.lock().cover(xorb, a, b) else {
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
        (es, ee, linked): EntryKey,
        (from, to): (u32, u32),
        base: u64,
        sink: &(dyn Fn(u64, &[u8]) -> io::Result<()> + Sync),
    ) -> io::Result<Vec<(MerkleHash, u32)>> {
        let mut f = File::open(self.entry_path(xorb, es, ee, linked.as_ref()))?;
        let file_len = f.metadata()?.len();
        let header = entry::read_header(&mut f, file_len, (ee - es) as usize, linked.is_some())?;
        let chunks = header.chunks;
        // Where the chunks are: after the header, or at the recorded offset of the
        // linked file.
        let (data, data_start) = match (&linked, header.offset) {
            (Some(h), Some(offset)) => {
                let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
                let data = File::open(self.linked_path(h))?;
                let len = data.metadata()?.len();
                if offset.checked_add(total).is_none_or(|e| e > len) {
                    return Err(invalid(format!(
                        "linked file {h} is {len} bytes, the reference needs {total} at {offset}"
                    )));
                }
                (data, offset)
            }
            _ => (f, header.len),
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
                    return Err(invalid(format!(
                        "chunk {} does not hash to its recorded hash",
                        from + k as u32
                    )));
                }
                sink(base + places[k], buf)
            })
        })?;
        Ok(want.to_vec())
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
        let header_len = entry::header_len(n, false);
        if n == 0 || header_len > self.max_bytes() || self.contains(xorb, start, end) {
            return None;
        }
        let res = (|| -> io::Result<PendingEntry> {
            let dir = self.root().join(xorb.to_string());
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
                max_len: self.max_bytes(),
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
            if p.file_len > self.max_bytes() {
                return Err(io::Error::other("the entry is larger than the whole cache"));
            }
            let chunks = hashes.iter().copied().zip(p.sizes.iter().copied());
            fsio::write_all_at(&p.file, &entry::encode_header(chunks, None), 0)?;
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

    #[cfg(test)]
    fn total(&self) -> u64 {
        self.lock().total
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::decode::hash_chunks;

    pub(super) fn chunks_of(data: &[u8], sizes: &[u32]) -> Vec<(MerkleHash, u32)> {
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
}
