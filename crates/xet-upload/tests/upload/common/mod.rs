//! Test helpers: corpus on disk, a counting/failing wrapper around a real CAS, and
//! reassembly of files from reconstructions.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use xet_cas::{ByteRange, Cas, CasError, Reconstruction, Result, XorbBody, XorbFetch};
use xet_hash::MerkleHash;

/// Delegates to a real CAS, counting calls; `put_xorb` fails after `fail_after` calls.
pub struct Counting {
    pub inner: Arc<dyn Cas>,
    pub put_xorbs: AtomicUsize,
    pub put_shards: AtomicUsize,
    pub dedup_queries: AtomicUsize,
    pub fail_after: Option<usize>,
    /// Bodies of the shards sent.
    pub shards: Mutex<Vec<Bytes>>,
    /// Ask for xorb bodies in pieces (`Cas::takes_xorb_pieces`), as the HTTP client does.
    pub takes_pieces: AtomicBool,
    /// Most pieces one xorb body came in.
    pub max_pieces: AtomicUsize,
}

impl Counting {
    pub fn new(inner: Arc<dyn Cas>) -> Arc<Self> {
        Self::failing(inner, None)
    }
    pub fn failing(inner: Arc<dyn Cas>, fail_after: Option<usize>) -> Arc<Self> {
        Arc::new(Counting {
            inner,
            put_xorbs: AtomicUsize::new(0),
            put_shards: AtomicUsize::new(0),
            dedup_queries: AtomicUsize::new(0),
            fail_after,
            shards: Mutex::new(Vec::new()),
            takes_pieces: AtomicBool::new(false),
            max_pieces: AtomicUsize::new(0),
        })
    }
    pub fn xorbs(&self) -> usize {
        self.put_xorbs.load(Ordering::SeqCst)
    }
    pub fn shard_count(&self) -> usize {
        self.put_shards.load(Ordering::SeqCst)
    }
}

#[async_trait::async_trait]
impl Cas for Counting {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> Result<bool> {
        let pieces = match &body {
            XorbBody::Pieces(p) => p.pieces().len(),
            _ => 1,
        };
        self.max_pieces.fetch_max(pieces, Ordering::SeqCst);
        let n = self.put_xorbs.fetch_add(1, Ordering::SeqCst);
        if self.fail_after.is_some_and(|f| n >= f) {
            return Err(CasError::Network {
                what: format!("xorb {hash}"),
                message: "injected failure".into(),
                source: None,
            });
        }
        self.inner.put_xorb(hash, body).await
    }
    fn takes_xorb_pieces(&self) -> bool {
        self.takes_pieces.load(Ordering::SeqCst)
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    async fn put_shard(&self, shard: Bytes) -> Result<bool> {
        self.put_shards.fetch_add(1, Ordering::SeqCst);
        self.shards.lock().unwrap().push(shard.clone());
        self.inner.put_shard(shard).await
    }
    async fn file_size(&self, file: &MerkleHash) -> Result<Option<u64>> {
        self.inner.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction> {
        self.inner.reconstruction(file, range).await
    }
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> Result<Bytes> {
        self.inner.fetch_xorb_range(fetch).await
    }
    async fn dedup_shard(&self, chunk: &MerkleHash) -> Result<Option<Bytes>> {
        self.dedup_queries.fetch_add(1, Ordering::SeqCst);
        self.inner.dedup_shard(chunk).await
    }
}

pub async fn memory_store() -> Arc<dyn Cas> {
    Arc::new(
        xet_store::MemoryStore::in_memory()
            .await
            .expect("memory store"),
    )
}

/// Write every golden corpus file into `dir`; returns (path, bytes, golden) in corpus order.
pub fn write_golden(dir: &Path) -> Vec<(PathBuf, Vec<u8>, xet_testdata::GoldenFile)> {
    xet_testdata::golden_files()
        .into_iter()
        .map(|(c, g)| {
            let bytes = c.bytes();
            let p = dir.join(&g.name);
            std::fs::write(&p, &bytes).unwrap();
            (p, bytes, g)
        })
        .collect()
}

/// Rebuild a file from the CAS: reconstruction, fetches, decode, cut each term.
pub async fn reassemble(cas: &dyn Cas, file: &MerkleHash) -> Vec<u8> {
    let rec = cas
        .reconstruction(file, None)
        .await
        .expect("reconstruction");
    let mut out = Vec::new();
    for t in &rec.terms {
        let f = rec.fetch_for(t).expect("a fetch covers the term");
        let bytes = cas.fetch_xorb_range(f).await.expect("fetch");
        let decoded = xet_xorb::decode_chunks(
            &bytes,
            xet_xorb::Expected {
                num_chunks: Some(f.chunks.len() as usize),
                unpacked_len: None,
            },
            &xet_xorb::Limits::default(),
        )
        .expect("decode");
        let before = out.len();
        for i in (t.chunks.start - f.chunks.start)..(t.chunks.end - f.chunks.start) {
            out.extend_from_slice(decoded.chunk(i as usize));
        }
        assert_eq!((out.len() - before) as u64, t.unpacked_length);
    }
    out
}
