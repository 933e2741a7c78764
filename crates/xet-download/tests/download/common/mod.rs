//! Test support: real xorbs and shards built with the format crates and stored in a real
//! `StoreCas<MemoryBackend>`, plus a fault-injecting `Cas` wrapper.
#![allow(dead_code)]

use std::collections::{HashMap, HashSet};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use sha2::Digest;
use xet_cas::{ByteRange, Cas, CasError, RangeStream, Reconstruction, XorbBody, XorbFetch};
use xet_hash::MerkleHash;
use xet_shard::{CasInfo, FileInfoBuilder, Shard};
use xet_store::{MemoryBackend, ObjectKey, StoreCas};
use xet_xorb::{Xorb, XorbBuilder};

pub struct TestFile {
    pub hash: MerkleHash,
    pub data: Vec<u8>,
    /// End offset of each chunk.
    pub chunk_ends: Vec<u64>,
    /// File offsets where one term ends and the next begins.
    pub term_bounds: Vec<u64>,
}

pub struct Corpus {
    pub files: Vec<TestFile>,
    pub xorbs: Vec<Xorb>,
    pub shard: Vec<u8>,
}

/// Chunk `files`, dedup chunks across them, pack new chunks into xorbs of at most
/// `max_xorb_bytes` uncompressed, and describe the files in one upload-form shard.
pub fn build(files: &[Vec<u8>], max_xorb_bytes: u64) -> Corpus {
    let mut xorbs: Vec<Xorb> = Vec::new();
    let mut open = XorbBuilder::new();
    let mut placed: HashMap<MerkleHash, (usize, u32)> = HashMap::new();
    let mut placements: Vec<Vec<(usize, u32, u64, MerkleHash)>> = Vec::new();
    let mut chunk_ends = Vec::new();
    for data in files {
        let chunks = xet_chunk::chunk_data(data);
        let mut pl = Vec::new();
        for c in &chunks {
            let bytes = &data[c.range()];
            let at = match placed.get(&c.hash) {
                Some(&p) => p,
                None => {
                    let full = !open.can_add(bytes.len())
                        || open.unpacked_len() + bytes.len() as u64 > max_xorb_bytes;
                    if full && !open.is_empty() {
                        xorbs.push(std::mem::take(&mut open).finish().unwrap());
                    }
                    let i = open.add_chunk_with_hash(bytes, Some(c.hash)).unwrap() as u32;
                    placed.insert(c.hash, (xorbs.len(), i));
                    (xorbs.len(), i)
                }
            };
            pl.push((at.0, at.1, c.len as u64, c.hash));
        }
        chunk_ends.push(
            chunks
                .iter()
                .map(|c| c.offset + c.len as u64)
                .collect::<Vec<_>>(),
        );
        placements.push(pl);
    }
    if !open.is_empty() {
        xorbs.push(open.finish().unwrap());
    }
    let cas_infos: Vec<CasInfo> = xorbs
        .iter()
        .map(|x| {
            CasInfo::from_chunks(x.hash(), &x.info().hash_entries(), x.body().len() as u32).unwrap()
        })
        .collect();
    let mut infos = Vec::new();
    let mut seen = HashSet::new();
    let mut out_files = Vec::new();
    for ((data, pl), ends) in files.iter().zip(placements).zip(chunk_ends) {
        let list: Vec<(MerkleHash, u64)> = pl.iter().map(|p| (p.3, p.2)).collect();
        let hash = xet_hash::file_hash(&list);
        // Terms: runs of consecutive chunks of one xorb.
        let mut terms: Vec<(usize, u32, u32, u64)> = Vec::new();
        for &(xi, ci, len, _) in &pl {
            match terms.last_mut() {
                Some(t) if t.0 == xi && t.2 == ci => {
                    t.2 += 1;
                    t.3 += len;
                }
                _ => terms.push((xi, ci, ci + 1, len)),
            }
        }
        let mut bounds = Vec::new();
        let mut pos = 0;
        for t in &terms {
            pos += t.3;
            bounds.push(pos);
        }
        bounds.pop();
        if !data.is_empty() && seen.insert(hash) {
            let mut b = FileInfoBuilder::new(hash);
            for &(xi, s, e, _) in &terms {
                b.add_term_from_cas(&cas_infos[xi], s..e).unwrap();
            }
            b.sha256(sha2::Sha256::digest(data).into());
            infos.push(b.build());
        }
        out_files.push(TestFile {
            hash,
            data: data.clone(),
            chunk_ends: ends,
            term_bounds: bounds,
        });
    }
    let mut shard = Shard::new(infos, cas_infos);
    shard.sort_canonical();
    let shard = shard.to_upload_bytes().unwrap();
    Corpus {
        files: out_files,
        xorbs,
        shard,
    }
}

pub type Store = StoreCas<MemoryBackend>;

/// A memory store holding `corpus`, and its backend (to corrupt objects).
pub async fn store(corpus: &Corpus) -> (Arc<Store>, MemoryBackend) {
    let backend = MemoryBackend::new();
    let store = StoreCas::open(backend.clone()).await.unwrap();
    put(&store as &dyn Cas, corpus).await;
    (Arc::new(store), backend)
}

pub async fn put(store: &dyn Cas, corpus: &Corpus) {
    for x in &corpus.xorbs {
        store
            .put_xorb(&x.hash(), Bytes::copy_from_slice(x.body()).into())
            .await
            .unwrap();
    }
    store
        .put_shard(Bytes::from(corpus.shard.clone()))
        .await
        .unwrap();
}

/// Replace the stored object of `xorb` with a copy where byte `at` is flipped.
pub async fn corrupt(backend: &MemoryBackend, xorb: &MerkleHash, at: usize) {
    use xet_store::ObjectBackend;
    let key = ObjectKey::xorb(xorb);
    let mut obj = backend.get(&key).await.unwrap().unwrap().to_vec();
    obj[at] ^= 0x5a;
    backend.delete(&key).await.unwrap();
    backend.put_if_absent(&key, Bytes::from(obj)).await.unwrap();
}

/// Deterministic pseudo-random bytes.
/// The names in `dir`, sorted.
pub fn leftovers(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

pub fn random(len: usize, seed: u64) -> Vec<u8> {
    xet_testdata::generate(xet_testdata::Kind::Random, len, seed)
}

pub fn text(len: usize, seed: u64) -> Vec<u8> {
    xet_testdata::generate(xet_testdata::Kind::Text, len, seed)
}

/// What the wrapper does to fetches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Fetches after the first `n` fail with a non-retryable error.
    FailAfter(u64),
    /// Every fetch hangs forever.
    Stall,
    /// The first fetch of each xorb answers `UrlExpired`.
    ExpireOnce,
    /// The first `n` fetches fail with a retryable network error.
    Flaky(u64),
    /// Reconstructions are answered untrimmed: for a query starting at `s`, the inner
    /// store is asked from `s - k` and the offset into the first range grows by `k`.
    Untrimmed(u64),
}

/// What goes wrong inside a streamed range ([`Wrapper::stream_in`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MidStream {
    /// A retryable network error.
    Break,
    /// Nothing more arrives, ever.
    Stall,
    /// The URL expires.
    Expire,
}

/// Counts calls and injects faults.
pub struct Wrapper {
    /// Hand ranges over in pieces of this many bytes (else in one piece).
    pub stream_piece: Mutex<Option<usize>>,
    /// The next `times` streams go wrong after delivering `after` bytes:
    /// `(what, after, times)`.
    pub mid_stream: Mutex<Option<(MidStream, usize, u64)>>,
    /// Every range streamed in pieces, as asked for.
    pub streamed_ranges: Mutex<Vec<(MerkleHash, ByteRange)>>,
    pub inner: Arc<dyn Cas>,
    pub fault: Mutex<Fault>,
    /// Successful fetches.
    pub fetches: AtomicU64,
    /// All fetch attempts.
    pub attempts: AtomicU64,
    pub reconstructions: AtomicU64,
    pub fetched_ranges: Mutex<Vec<(MerkleHash, ByteRange)>>,
    expired: Mutex<HashSet<MerkleHash>>,
    in_flight: AtomicU64,
    pub max_in_flight: AtomicU64,
    /// Delay every fetch by this much (to observe concurrency).
    pub delay: Mutex<Option<Duration>>,
    pub saw_url: AtomicBool,
    /// Answer `Cas::retries_requests` with this (as the HTTP client would: `true`).
    pub retries_requests: AtomicBool,
    /// `size` and `reconstruction` queries, in the order they were made.
    pub queries: Mutex<Vec<&'static str>>,
    /// Footers asked for.
    pub footers_asked: AtomicU64,
    /// Give them (from the inner CAS); else none (as a server whose URLs serve only the
    /// ranges they were signed for).
    pub serve_footers: AtomicBool,
}

impl Wrapper {
    pub fn new(inner: Arc<dyn Cas>) -> Arc<Self> {
        Arc::new(Wrapper {
            stream_piece: Mutex::new(None),
            mid_stream: Mutex::new(None),
            streamed_ranges: Mutex::new(Vec::new()),
            inner,
            fault: Mutex::new(Fault::None),
            fetches: AtomicU64::new(0),
            attempts: AtomicU64::new(0),
            reconstructions: AtomicU64::new(0),
            fetched_ranges: Mutex::new(Vec::new()),
            expired: Mutex::new(HashSet::new()),
            in_flight: AtomicU64::new(0),
            max_in_flight: AtomicU64::new(0),
            delay: Mutex::new(None),
            saw_url: AtomicBool::new(false),
            retries_requests: AtomicBool::new(false),
            queries: Mutex::new(Vec::new()),
            footers_asked: AtomicU64::new(0),
            serve_footers: AtomicBool::new(false),
        })
    }
    pub fn set_fault(&self, f: Fault) {
        *self.fault.lock().unwrap() = f;
    }
    pub fn reset(&self) {
        self.fetches.store(0, Ordering::SeqCst);
        self.attempts.store(0, Ordering::SeqCst);
        self.reconstructions.store(0, Ordering::SeqCst);
        self.fetched_ranges.lock().unwrap().clear();
    }
    pub fn fetches(&self) -> u64 {
        self.fetches.load(Ordering::SeqCst)
    }
    /// Hand ranges over in pieces of `piece` bytes; the next `times` streams go wrong
    /// after `after` bytes.
    pub fn stream_in(&self, piece: usize, fault: Option<(MidStream, usize, u64)>) {
        *self.stream_piece.lock().unwrap() = Some(piece);
        *self.mid_stream.lock().unwrap() = fault;
    }
}

/// A fetched range handed over in pieces, going wrong at `fail_at`.
struct Pieces {
    data: Bytes,
    piece: usize,
    pos: usize,
    fail_at: Option<(usize, MidStream)>,
    xorb: MerkleHash,
}

#[async_trait::async_trait]
impl RangeStream for Pieces {
    async fn next(&mut self) -> xet_cas::Result<Option<Bytes>> {
        let mut end = (self.pos + self.piece).min(self.data.len());
        if let Some((at, what)) = self.fail_at {
            if self.pos >= at {
                return match what {
                    MidStream::Break => Err(CasError::Network {
                        what: "test stream".into(),
                        message: "connection reset mid-body".into(),
                        source: None,
                    }),
                    MidStream::Stall => std::future::pending().await,
                    MidStream::Expire => Err(CasError::UrlExpired { hash: self.xorb }),
                };
            }
            end = end.min(at);
        }
        if self.pos == end {
            return Ok(None);
        }
        let b = self.data.slice(self.pos..end);
        self.pos = end;
        Ok(Some(b))
    }
}

struct InFlight<'a>(&'a Wrapper);
impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        self.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

#[async_trait::async_trait]
impl Cas for Wrapper {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> xet_cas::Result<bool> {
        self.inner.put_xorb(hash, body).await
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    fn retries_requests(&self) -> bool {
        self.retries_requests.load(Ordering::SeqCst)
    }
    async fn put_shard(&self, shard: Bytes) -> xet_cas::Result<bool> {
        self.inner.put_shard(shard).await
    }
    async fn xorb_footer(
        &self,
        fetch: &XorbFetch,
    ) -> xet_cas::Result<Option<xet_xorb::XorbFooter>> {
        self.footers_asked.fetch_add(1, Ordering::SeqCst);
        if !self.serve_footers.load(Ordering::SeqCst) {
            return Ok(None);
        }
        // Slow enough that concurrent lookups overlap.
        tokio::time::sleep(Duration::from_millis(50)).await;
        self.inner.xorb_footer(fetch).await
    }
    async fn file_size(&self, file: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.queries.lock().unwrap().push("size");
        self.inner.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> xet_cas::Result<Reconstruction> {
        self.reconstructions.fetch_add(1, Ordering::SeqCst);
        self.queries.lock().unwrap().push("reconstruction");
        let fault = self.fault.lock().unwrap().clone();
        if let (Fault::Untrimmed(k), Some(r)) = (fault, range) {
            let k = k.min(r.start);
            let mut rec = self
                .inner
                .reconstruction(file, Some(ByteRange::new(r.start - k, r.end)))
                .await?;
            rec.offset_into_first_range += k;
            return Ok(rec);
        }
        self.inner.reconstruction(file, range).await
    }
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> xet_cas::Result<Bytes> {
        let n = self.attempts.fetch_add(1, Ordering::SeqCst);
        let now = self.in_flight.fetch_add(1, Ordering::SeqCst) + 1;
        let _guard = InFlight(self);
        self.max_in_flight.fetch_max(now, Ordering::SeqCst);
        if fetch.url.is_some() {
            self.saw_url.store(true, Ordering::SeqCst);
        }
        let fault = self.fault.lock().unwrap().clone();
        match fault {
            Fault::None | Fault::Untrimmed(_) => {}
            Fault::FailAfter(k) => {
                if self.fetches.load(Ordering::SeqCst) >= k {
                    return Err(CasError::storage("injected failure"));
                }
            }
            Fault::Stall => std::future::pending::<()>().await,
            Fault::ExpireOnce => {
                if self.expired.lock().unwrap().insert(fetch.xorb) {
                    return Err(CasError::UrlExpired { hash: fetch.xorb });
                }
            }
            Fault::Flaky(k) => {
                if n < k {
                    return Err(CasError::Network {
                        what: "test".into(),
                        message: "the transfer broke".into(),
                        source: Some(xet_cas::Cause::new(std::io::Error::from(
                            std::io::ErrorKind::ConnectionReset,
                        ))),
                    });
                }
            }
        }
        let delay = *self.delay.lock().unwrap();
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        let r = self.inner.fetch_xorb_range(fetch).await?;
        self.fetches.fetch_add(1, Ordering::SeqCst);
        self.fetched_ranges
            .lock()
            .unwrap()
            .push((fetch.xorb, fetch.bytes));
        Ok(r)
    }
    async fn stream_xorb_range(&self, fetch: &XorbFetch) -> xet_cas::Result<Box<dyn RangeStream>> {
        let piece = *self.stream_piece.lock().unwrap();
        let data = self.fetch_xorb_range(fetch).await?;
        let Some(piece) = piece else {
            return Ok(Box::new(Pieces {
                piece: data.len().max(1),
                data,
                pos: 0,
                fail_at: None,
                xorb: fetch.xorb,
            }));
        };
        self.streamed_ranges
            .lock()
            .unwrap()
            .push((fetch.xorb, fetch.bytes));
        let fail_at = match &mut *self.mid_stream.lock().unwrap() {
            Some((what, after, times)) if *times > 0 => {
                *times -= 1;
                Some((*after, *what))
            }
            _ => None,
        };
        Ok(Box::new(Pieces {
            data,
            piece: piece.max(1),
            pos: 0,
            fail_at,
            xorb: fetch.xorb,
        }))
    }
    async fn dedup_shard(&self, chunk: &MerkleHash) -> xet_cas::Result<Option<Bytes>> {
        self.inner.dedup_shard(chunk).await
    }
}
