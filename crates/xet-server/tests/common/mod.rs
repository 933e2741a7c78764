//! Shared test support: a real server on 127.0.0.1 over an in-memory store, fixtures
//! built with the format crates, and a download helper that follows presigned URLs.
#![allow(dead_code)]

use bytes::Bytes;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use xet_cas::wire::ReconstructionV2;
use xet_cas::{ByteRange, Cas, Reconstruction, XorbBody, XorbFetch};
use xet_hash::MerkleHash;
use xet_server::{Server, ServerConfig, ServerError};
use xet_store::MemoryStore;

pub struct TestServer {
    pub url: String,
    pub addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    handle: Option<JoinHandle<Result<(), ServerError>>>,
}

impl TestServer {
    pub async fn start(config: ServerConfig, cas: Arc<dyn Cas>) -> TestServer {
        Self::start_hub(config, cas, None).await
    }

    /// [`TestServer::start`] with the Hub API over `repos`.
    pub async fn start_hub(
        config: ServerConfig,
        cas: Arc<dyn Cas>,
        repos: Option<xet_hub::Repos>,
    ) -> TestServer {
        init_log();
        let server = Server::bind_with_hub(config, cas, repos)
            .await
            .expect("bind");
        let url = server.url();
        let addr = server.local_addr();
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(server.serve(async move {
            let _ = rx.await;
        }));
        TestServer {
            url,
            addr,
            shutdown: Some(tx),
            handle: Some(handle),
        }
    }

    /// Like [`TestServer::start`], recording every request and response into `log`.
    pub async fn start_recorded(
        config: ServerConfig,
        cas: Arc<dyn Cas>,
        log: RequestLog,
    ) -> TestServer {
        Self::start_layered(config, cas, move |router| {
            router.layer(axum::middleware::from_fn(
                move |req: axum::extract::Request, next: axum::middleware::Next| {
                    let log = log.clone();
                    async move {
                        let method = req.method().to_string();
                        let path = req.uri().path().to_string();
                        let range = req
                            .headers()
                            .get("range")
                            .map(|v| v.to_str().unwrap_or("").to_string());
                        let resp = next.run(req).await;
                        let content_type = resp
                            .headers()
                            .get("content-type")
                            .map(|v| v.to_str().unwrap_or("").to_string());
                        log.0.lock().unwrap().push(Record {
                            method,
                            path,
                            range,
                            status: resp.status().as_u16(),
                            content_type,
                        });
                        resp
                    }
                },
            ))
        })
        .await
    }

    /// Serve the server's router wrapped by `wrap` (extra test layers).
    pub async fn start_layered(
        config: ServerConfig,
        cas: Arc<dyn Cas>,
        wrap: impl FnOnce(axum::Router) -> axum::Router,
    ) -> TestServer {
        init_log();
        let server = Server::bind(config, cas).await.expect("bind");
        let url = server.url();
        let addr = server.local_addr();
        let (listener, router) = server.into_parts();
        let router = wrap(router);
        let (tx, rx) = oneshot::channel::<()>();
        let handle = tokio::spawn(async move {
            axum::serve(xet_server::nodelay(listener), router)
                .with_graceful_shutdown(async move {
                    let _ = rx.await;
                })
                .await
                .map_err(ServerError::from)
        });
        TestServer {
            url,
            addr,
            shutdown: Some(tx),
            handle: Some(handle),
        }
    }

    pub fn url(&self, path: &str) -> String {
        format!("{}{path}", self.url)
    }

    /// Trigger graceful shutdown and wait for the server to finish.
    pub async fn stop(mut self) -> Result<(), ServerError> {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        self.handle.take().unwrap().await.expect("server task")
    }

    pub fn trigger_shutdown(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }

    pub async fn join(mut self) -> Result<(), ServerError> {
        self.handle.take().unwrap().await.expect("server task")
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

fn init_log() {
    // `XET_TEST_LOG=xet_server=info` shows every request.
    if let Ok(filter) = std::env::var("XET_TEST_LOG") {
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_test_writer()
            .try_init();
    }
}

#[derive(Debug, Clone)]
pub struct Record {
    pub method: String,
    pub path: String,
    pub range: Option<String>,
    pub status: u16,
    pub content_type: Option<String>,
}

/// Requests seen by a recorded server.
#[derive(Clone, Default)]
pub struct RequestLog(pub Arc<std::sync::Mutex<Vec<Record>>>);

impl RequestLog {
    pub fn records(&self) -> Vec<Record> {
        self.0.lock().unwrap().clone()
    }
    pub fn clear(&self) {
        self.0.lock().unwrap().clear()
    }
    /// Records whose path starts with `prefix` and (if given) has this method and status.
    pub fn count(&self, method: &str, prefix: &str, status: Option<u16>) -> usize {
        self.records()
            .iter()
            .filter(|r| {
                r.method == method
                    && r.path.starts_with(prefix)
                    && status.is_none_or(|s| r.status == s)
            })
            .count()
    }
}

pub async fn memory_store() -> Arc<MemoryStore> {
    Arc::new(MemoryStore::in_memory().await.expect("memory store"))
}

pub fn client() -> reqwest::Client {
    reqwest::Client::builder().build().unwrap()
}

/// Deterministic pseudo-random bytes.
pub fn pseudo_random(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E3779B97F4A7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

/// One file stored in one xorb, with the shard registering it.
pub struct Fixture {
    pub data: Vec<u8>,
    pub chunks: Vec<Vec<u8>>,
    pub xorb: MerkleHash,
    /// Footer-less chunk region (what hf_xet uploads).
    pub xorb_body: Vec<u8>,
    pub chunk_hashes: Vec<MerkleHash>,
    pub file: MerkleHash,
    /// Upload-form shard.
    pub shard: Vec<u8>,
}

/// A file made of chunks of the given sizes (alternating random and compressible data).
pub fn fixture(seed: u64, chunk_sizes: &[usize]) -> Fixture {
    fixture_claiming(seed, chunk_sizes, None)
}

/// [`fixture`] whose shard claims `sha256` for the file (its true sha256 when `None`).
pub fn fixture_claiming(seed: u64, chunk_sizes: &[usize], sha256: Option<[u8; 32]>) -> Fixture {
    build_fixture(seed, chunk_sizes, Some(sha256))
}

/// [`fixture`] whose shard has no sha256 at all (no `FileMetadataExt`), as `hf` uploads
/// bucket files.
pub fn fixture_without_sha256(seed: u64, chunk_sizes: &[usize]) -> Fixture {
    build_fixture(seed, chunk_sizes, None)
}

fn build_fixture(seed: u64, chunk_sizes: &[usize], sha256: Option<Option<[u8; 32]>>) -> Fixture {
    let chunks: Vec<Vec<u8>> = chunk_sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            if i % 2 == 0 {
                pseudo_random(seed * 1000 + i as u64, n)
            } else {
                let mut v = b"compressible text ".repeat(n / 18 + 1);
                v.truncate(n);
                v[0] = seed as u8;
                v
            }
        })
        .collect();
    let mut b = xet_xorb::XorbBuilder::new();
    for c in &chunks {
        b.add_chunk(c).unwrap();
    }
    let x = b.finish().unwrap();
    let entries = x.info().hash_entries();
    let xorb = x.hash();
    let file = xet_hash::file_hash(&entries);
    let cas = xet_shard::CasInfo::from_chunks(xorb, &entries, 0).unwrap();
    let mut fb = xet_shard::FileInfoBuilder::new(file);
    fb.add_term_from_cas(&cas, 0..entries.len() as u32).unwrap();
    let data = chunks.concat();
    if let Some(claim) = sha256 {
        fb.sha256(claim.unwrap_or_else(|| <sha2::Sha256 as sha2::Digest>::digest(&data).into()));
    }
    let shard = xet_shard::Shard::new(vec![fb.build()], vec![cas])
        .into_upload()
        .to_upload_bytes()
        .unwrap();
    Fixture {
        data,
        chunk_hashes: entries.iter().map(|e| e.0).collect(),
        chunks,
        xorb,
        xorb_body: x.into_body(),
        file,
        shard,
    }
}

/// Store a fixture through the Cas directly.
pub async fn put_fixture(cas: &dyn Cas, f: &Fixture) {
    cas.put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()).into())
        .await
        .unwrap();
    cas.put_shard(Bytes::from(f.shard.clone())).await.unwrap();
}

/// Decode whole serialized chunks into their data.
pub fn decode(bytes: &[u8]) -> Vec<u8> {
    let d = xet_xorb::decode_chunks(
        bytes,
        xet_xorb::Expected::default(),
        &xet_xorb::Limits::PROTOCOL,
    )
    .unwrap();
    (0..d.num_chunks())
        .flat_map(|i| d.chunk(i).to_vec())
        .collect()
}

/// Bytes `range` (end-exclusive, `None` = whole) of `file`, as a client would rebuild it:
/// v2 reconstruction, then presigned ranged GETs without auth.
pub async fn download(
    c: &reqwest::Client,
    base: &str,
    token: Option<&str>,
    file: &MerkleHash,
    range: Option<ByteRange>,
) -> Vec<u8> {
    let mut req = c.get(format!("{base}/v2/reconstructions/{file}"));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    if let Some(r) = range {
        req = req.header("range", format!("bytes={}-{}", r.start, r.end - 1));
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let w: ReconstructionV2 = resp.json().await.unwrap();
    let rec = Reconstruction::from_v2(&w).unwrap();
    let mut out = Vec::new();
    for t in &rec.terms {
        let f: &XorbFetch = rec.fetch_for(t).expect("fetch for term");
        let url = f.url.as_ref().unwrap();
        let resp = c
            .get(url)
            .header(
                "range",
                format!("bytes={}-{}", f.bytes.start, f.bytes.end - 1),
            )
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 206);
        let bytes = resp.bytes().await.unwrap();
        // Cut the term's chunks out of the fetched span.
        let all = xet_xorb::decode_chunks(
            &bytes,
            xet_xorb::Expected::default(),
            &xet_xorb::Limits::PROTOCOL,
        )
        .unwrap();
        let skip = (t.chunks.start - f.chunks.start) as usize;
        for i in skip..skip + t.chunks.len() as usize {
            out.extend_from_slice(all.chunk(i));
        }
    }
    let start = rec.offset_into_first_range as usize;
    let mut out = out.split_off(start.min(out.len()));
    if let Some(r) = range {
        out.truncate(r.len() as usize);
    }
    out
}

/// A `Cas` that counts what passes through and can delay shard registration.
pub struct Counting<C> {
    pub inner: C,
    pub xorbs_inserted: AtomicUsize,
    pub xorb_puts: AtomicUsize,
    pub shards: AtomicUsize,
    pub dedup_hits: AtomicUsize,
    pub dedup_queries: AtomicUsize,
    pub shard_delay: std::time::Duration,
    /// When set, every `put_shard` fails with this error.
    pub shard_error: Option<xet_cas::CasError>,
}

impl<C> Counting<C> {
    pub fn new(inner: C) -> Self {
        Counting {
            inner,
            xorbs_inserted: AtomicUsize::new(0),
            xorb_puts: AtomicUsize::new(0),
            shards: AtomicUsize::new(0),
            dedup_hits: AtomicUsize::new(0),
            dedup_queries: AtomicUsize::new(0),
            shard_delay: std::time::Duration::ZERO,
            shard_error: None,
        }
    }
}

pub fn count(c: &AtomicUsize) -> usize {
    c.load(Ordering::SeqCst)
}

#[async_trait::async_trait]
impl<C: Cas> Cas for Counting<C> {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> xet_cas::Result<bool> {
        self.xorb_puts.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.put_xorb(hash, body).await?;
        if r {
            self.xorbs_inserted.fetch_add(1, Ordering::SeqCst);
        }
        Ok(r)
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    async fn put_shard(&self, shard: Bytes) -> xet_cas::Result<bool> {
        if !self.shard_delay.is_zero() {
            tokio::time::sleep(self.shard_delay).await;
        }
        self.shards.fetch_add(1, Ordering::SeqCst);
        if let Some(e) = &self.shard_error {
            return Err(e.clone());
        }
        self.inner.put_shard(shard).await
    }
    async fn file_size(&self, file: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> xet_cas::Result<Reconstruction> {
        self.inner.reconstruction(file, range).await
    }
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> xet_cas::Result<Bytes> {
        self.inner.fetch_xorb_range(fetch).await
    }
    async fn xorb_footer(
        &self,
        fetch: &XorbFetch,
    ) -> xet_cas::Result<Option<xet_xorb::XorbFooter>> {
        self.inner.xorb_footer(fetch).await
    }
    async fn dedup_shard(&self, chunk: &MerkleHash) -> xet_cas::Result<Option<Bytes>> {
        self.dedup_queries.fetch_add(1, Ordering::SeqCst);
        let r = self.inner.dedup_shard(chunk).await?;
        if r.is_some() {
            self.dedup_hits.fetch_add(1, Ordering::SeqCst);
        }
        Ok(r)
    }
}
