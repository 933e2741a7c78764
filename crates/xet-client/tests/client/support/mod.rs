//! Shared test support: a real `xet_server` on 127.0.0.1 over an in-memory store, small
//! valid upload data built with the format crates, a download helper that follows
//! presigned URLs. The fault-injecting proxy is `xet_testdata::proxy`.
#![allow(dead_code)]

use bytes::Bytes;
use sha2::Digest;
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use xet_cas::{ByteRange, Cas};
use xet_client::{ClientConfig, HttpCas, RetryPolicy};
use xet_hash::MerkleHash;
use xet_server::{Server, ServerConfig};
use xet_store::MemoryStore;

/// A server task; stops when dropped.
pub struct TestServer {
    pub url: String,
    shutdown: Option<oneshot::Sender<()>>,
    handle: JoinHandle<()>,
}

impl TestServer {
    pub async fn start(config: ServerConfig) -> TestServer {
        let store: Arc<dyn Cas> = Arc::new(MemoryStore::in_memory().await.expect("memory store"));
        let server = Server::bind(config, store)
            .await
            .expect("bind the test server");
        let url = server.url();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            let _ = server
                .serve(async move {
                    let _ = rx.await;
                })
                .await;
        });
        TestServer {
            url,
            shutdown: Some(tx),
            handle,
        }
    }

    /// Everything on (grants, v2).
    pub async fn full() -> TestServer {
        Self::start(ServerConfig::loopback()).await
    }

    /// No grants, no v2 routes: clients must fall back.
    pub async fn legacy() -> TestServer {
        Self::start(ServerConfig {
            allow_grants: false,
            allow_v2: false,
            ..ServerConfig::loopback()
        })
        .await
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.handle.abort();
    }
}

/// Retries that finish quickly: 4 attempts, 10 ms base delay.
pub fn fast_retry() -> RetryPolicy {
    RetryPolicy {
        max_attempts: 4,
        base_delay: Duration::from_millis(10),
        max_delay: Duration::from_millis(100),
        max_duration: Duration::from_secs(20),
    }
}

pub fn config(url: &str) -> ClientConfig {
    ClientConfig::new(url)
        .with_retry(fast_retry())
        .with_timeouts(Duration::from_secs(2), Duration::from_secs(5))
}

pub fn client(url: &str) -> HttpCas {
    HttpCas::new(config(url)).expect("client")
}

/// Deterministic incompressible bytes.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        v.extend_from_slice(&x.to_le_bytes());
    }
    v.truncate(len);
    v
}

pub struct SampleFile {
    pub hash: MerkleHash,
    pub data: Vec<u8>,
}

/// One xorb holding two files (chunks 0..3 and 3..6), and the shard registering both.
pub struct Sample {
    pub xorb: MerkleHash,
    pub body: Bytes,
    pub footered: Bytes,
    pub files: Vec<SampleFile>,
    pub shard: Bytes,
}

pub fn sample(seed: u64) -> Sample {
    let sizes = [40_000usize, 65_536, 12_345, 100_000, 7, 30_000];
    let chunks: Vec<Vec<u8>> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| pseudo_random(seed * 100 + i as u64, n))
        .collect();
    let mut b = xet_xorb::XorbBuilder::new();
    for c in &chunks {
        b.add_chunk(c).expect("chunk fits");
    }
    let x = b.finish().expect("xorb");
    let xorb = x.hash();
    let entries = x.info().hash_entries();
    let footered = Bytes::from(x.to_footered());
    let body = Bytes::from(x.into_body());
    let mut files = Vec::new();
    let mut infos = Vec::new();
    for range in [0usize..3, 3..6] {
        let data: Vec<u8> = chunks[range.clone()].concat();
        let list = &entries[range.clone()];
        let hash = xet_hash::file_hash(list);
        let term = xet_shard::FileTerm::new(
            xorb,
            range.start as u32..range.end as u32,
            data.len() as u32,
        );
        let hashes: Vec<MerkleHash> = list.iter().map(|e| e.0).collect();
        let verification = vec![xet_hash::verification_hash(&hashes)];
        let digest: [u8; 32] = sha2::Sha256::digest(&data).into();
        infos.push(xet_shard::FileInfo::new(
            hash,
            vec![term],
            Some(verification),
            Some(xet_hash::sha256_to_metadata_hash(&digest)),
        ));
        files.push(SampleFile { hash, data });
    }
    let key = |h: &MerkleHash| [h.word(0), h.word(1), h.word(2), h.word(3)];
    infos.sort_by_key(|f| key(&f.file_hash));
    let cas = xet_shard::CasInfo::from_chunks(xorb, &entries, 0).expect("cas info");
    let shard = xet_shard::Shard::new(infos, vec![cas])
        .to_upload_bytes()
        .expect("shard");
    Sample {
        xorb,
        body,
        footered,
        files,
        shard: Bytes::from(shard),
    }
}

/// Upload a sample's xorb and shard.
pub async fn upload(cas: &dyn Cas, s: &Sample) {
    cas.put_xorb(&s.xorb, s.body.clone().into())
        .await
        .expect("put_xorb");
    cas.put_shard(s.shard.clone()).await.expect("put_shard");
}

/// Download (a range of) a file through reconstruction + presigned fetches.
pub async fn download(
    cas: &dyn Cas,
    file: &MerkleHash,
    range: Option<ByteRange>,
) -> xet_cas::Result<Vec<u8>> {
    let r = cas.reconstruction(file, range).await?;
    let mut out = Vec::new();
    for t in &r.terms {
        let f = r.fetch_for(t).expect("fetch for term");
        let bytes = cas.fetch_xorb_range(f).await?;
        let d = xet_xorb::decode_chunks(
            &bytes,
            xet_xorb::Expected::default(),
            &xet_xorb::Limits::PROTOCOL,
        )
        .expect("chunks decode");
        let from = (t.chunks.start - f.chunks.start) as usize;
        let to = (t.chunks.end - f.chunks.start) as usize;
        let start = if from == 0 {
            0
        } else {
            d.chunk_ends[from - 1] as usize
        };
        let end = d.chunk_ends[to - 1] as usize;
        out.extend_from_slice(&d.data[start..end]);
    }
    let mut out = out.split_off(r.offset_into_first_range as usize);
    if let Some(rg) = range {
        out.truncate((rg.end - rg.start) as usize);
    }
    Ok(out)
}

/// Fails the test instead of hanging.
pub async fn within<T>(secs: u64, f: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(secs), f)
        .await
        .expect("the operation hung")
}
