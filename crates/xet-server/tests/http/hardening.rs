//! Upload hardening: stalled bodies hold no upload permit, a failed store put keeps the
//! grant's data for a retried commit, grants are bounded per token and unused ones die
//! early, and spilled grant data lives in visible, bounded files.

use crate::common::*;
use crate::support::*;
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use xet_cas::{ByteRange, Cas, CasError, Reconstruction, XorbBody, XorbFetch};
use xet_hash::MerkleHash;
use xet_server::{ServerConfig, Token};
use xet_store::MemoryStore;

/// Open a connection that declares a 1 MB body for `path` and sends only 100 bytes of it.
async fn stalled_upload(addr: std::net::SocketAddr, path: &str) -> tokio::net::TcpStream {
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    let head = format!(
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/octet-stream\r\n\
         Content-Length: 1000000\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).await.unwrap();
    tcp.write_all(&[7u8; 100]).await.unwrap();
    tcp.flush().await.unwrap();
    tcp
}

/// Upload `f` directly, through a grant, and its shard (v1 and v2). The stalled bodies
/// stall for the server's whole `body_timeout` (an hour here), so a step that waited for
/// them would not end within the test: `quick` is only a guard against that hang, not a
/// bound on speed.
async fn uploads_go_through(s: &TestServer, f: &Fixture) {
    let c = client();
    let quick = Duration::from_secs(120);
    // Direct xorb upload.
    let resp = tokio::time::timeout(
        quick,
        c.post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
            .body(f.xorb_body.clone())
            .send(),
    )
    .await
    .expect("direct xorb upload waited for stalled uploads")
    .unwrap();
    assert_eq!(resp.status(), 200);
    // A grant commit (of a second xorb).
    let g2 = fixture(f.xorb.as_bytes()[0] as u64 + 1000, SIZES);
    tokio::time::timeout(quick, grant_upload_and_commit(&c, s, &g2, None))
        .await
        .expect("grant commit waited for stalled uploads");
    // Shards, v1 and v2.
    for route in ["/v1/shards", "/v2/shards"] {
        let resp = tokio::time::timeout(quick, c.post(s.url(route)).body(f.shard.clone()).send())
            .await
            .unwrap_or_else(|_| panic!("{route} waited for stalled uploads"))
            .unwrap();
        assert_eq!(resp.status(), 200, "{route}");
        let text = tokio::time::timeout(quick, resp.text())
            .await
            .unwrap_or_else(|_| panic!("{route} answer waited for stalled uploads"))
            .unwrap();
        assert!(!text.contains("\"error\""), "{route}: {text}");
    }
}

/// Grant, upload and commit `f`'s xorb (with `token`, if given); returns the commit answer.
async fn grant_upload_and_commit(
    c: &reqwest::Client,
    s: &TestServer,
    f: &Fixture,
    token: Option<&str>,
) -> Value {
    let mut req = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", f.xorb)))
        .json(&grant_request(&f.xorb_body));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    let g: xet_cas::wire::Grant = resp.json().await.unwrap();
    let resp = put_grant(c, &g, f.xorb_body.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    let mut req = c.post(s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        f.xorb, g.id
    )));
    if let Some(t) = token {
        req = req.bearer_auth(t);
    }
    let resp = req.send().await.unwrap();
    assert_eq!(resp.status(), 200);
    resp.json().await.unwrap()
}

#[tokio::test]
async fn stalled_upload_bodies_do_not_block_other_uploads() {
    for (n, seed) in [(8usize, 600u64), (64, 601)] {
        let (s, _store) = start(ServerConfig {
            body_timeout: Duration::from_secs(3600),
            ..ServerConfig::default()
        })
        .await;
        let f = fixture(seed, SIZES);
        let stalled_xorb = fixture(seed + 50, SIZES);
        let routes = [
            format!("/v1/xorbs/default/{}", stalled_xorb.xorb),
            "/v1/shards".to_string(),
            "/v2/shards".to_string(),
        ];
        let mut held = Vec::new();
        for i in 0..n {
            held.push(stalled_upload(s.addr, &routes[i % routes.len()]).await);
        }
        // Let the server start reading every one of them.
        tokio::time::sleep(Duration::from_millis(300)).await;
        uploads_go_through(&s, &f).await;
        drop(held);
    }
}

/// A memory store whose `put_xorb` fails with a storage error the first `fail` times.
struct FailingPuts {
    inner: Arc<MemoryStore>,
    fail: AtomicUsize,
    puts: AtomicUsize,
}

#[async_trait::async_trait]
impl Cas for FailingPuts {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> xet_cas::Result<bool> {
        self.puts.fetch_add(1, Ordering::SeqCst);
        if self
            .fail
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
            .is_ok()
        {
            // ENOSPC: the server's answer must carry the cause, not only "storage error".
            return Err(CasError::storage_with(
                "cannot write xorb",
                std::io::Error::from_raw_os_error(28),
            ));
        }
        self.inner.put_xorb(hash, body).await
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    async fn put_shard(&self, shard: Bytes) -> xet_cas::Result<bool> {
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
        self.inner.dedup_shard(chunk).await
    }
}

#[tokio::test]
async fn a_failed_store_put_keeps_the_grant_data_for_a_retried_commit() {
    // In memory, and spilled to a file.
    for (budget, seed) in [(256u64 << 20, 610u64), (0, 611)] {
        let spool = tempfile::tempdir().unwrap();
        let inner = memory_store().await;
        let cas = Arc::new(FailingPuts {
            inner: inner.clone(),
            fail: AtomicUsize::new(2),
            puts: AtomicUsize::new(0),
        });
        let config = ServerConfig {
            grant_memory_budget: budget,
            spool_dir: Some(spool.path().to_path_buf()),
            ..ServerConfig::default()
        };
        let s = TestServer::start(config, cas.clone()).await;
        let c = client();
        let f = fixture(seed, SIZES);
        let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
        let resp = put_grant(&c, &g, f.xorb_body.clone()).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        let commit = s.url(&format!(
            "/v1/xorb-commits/default/{}/grant/{}",
            f.xorb, g.id
        ));
        for _ in 0..2 {
            let (st, code, reason) = json_error(c.post(&commit).send().await.unwrap()).await;
            assert_eq!(
                (st, code.as_str()),
                (StatusCode::INTERNAL_SERVER_ERROR, "storage"),
                "budget {budget}: {reason}"
            );
            assert!(reason.contains("No space left"), "{reason}");
        }
        // The cause is gone: the same grant commits.
        let r: Value = c.post(&commit).send().await.unwrap().json().await.unwrap();
        assert_eq!(
            r,
            serde_json::json!({"was_inserted": true}),
            "budget {budget}"
        );
        assert_eq!(cas.puts.load(Ordering::SeqCst), 3);
        assert_eq!(
            inner.xorb_size(&f.xorb).await.unwrap(),
            Some(f.xorb_body.len() as u64)
        );
        // Now the grant is used up.
        assert_eq!(c.post(&commit).send().await.unwrap().status(), 404);
    }
}

#[tokio::test]
async fn one_token_flooding_grant_requests_does_not_lock_out_another() {
    let config = ServerConfig {
        tokens: vec![Token::write("flood"), Token::write("honest")],
        ..ServerConfig::default()
    };
    let (s, store) = start(config).await;
    let c = client();
    let body = pseudo_random(1, 1000);
    let mut tasks = tokio::task::JoinSet::new();
    for w in 0..16u64 {
        let c = c.clone();
        let base = s.url.clone();
        let body = body.clone();
        tasks.spawn(async move {
            let mut out = Vec::new();
            for i in 0..256u64 {
                let xorb = xet_hash::chunk_hash(&(w * 1000 + i).to_le_bytes());
                let resp = c
                    .post(format!("{base}/v1/xorb-grants/default/{xorb}"))
                    .bearer_auth("flood")
                    .json(&grant_request(&body))
                    .send()
                    .await
                    .unwrap();
                let retry_after = resp.headers().get("retry-after").cloned();
                let st = resp.status();
                let code = if st.is_success() {
                    String::new()
                } else {
                    json_error(resp).await.1
                };
                out.push((st, code, retry_after));
            }
            out
        });
    }
    let mut created = 0;
    let mut refused = 0;
    while let Some(r) = tasks.join_next().await {
        for (st, code, retry_after) in r.unwrap() {
            if st == StatusCode::CREATED {
                created += 1;
            } else {
                assert_eq!(
                    (st, code.as_str()),
                    (StatusCode::SERVICE_UNAVAILABLE, "grant_capacity")
                );
                let secs: u64 = retry_after
                    .expect("Retry-After")
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!((1..=300).contains(&secs), "{secs}");
                refused += 1;
            }
        }
    }
    assert_eq!(created, 256, "max_grants_per_token");
    assert_eq!(refused, 4096 - 256);
    // The other token still gets grants and uploads.
    let f = fixture(620, SIZES);
    let r = grant_upload_and_commit(&c, &s, &f, Some("honest")).await;
    assert_eq!(r, serde_json::json!({"was_inserted": true}));
    assert!(store.xorb_size(&f.xorb).await.unwrap().is_some());
    // And the flooding token can still upload directly.
    let f = fixture(621, SIZES);
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .bearer_auth("flood")
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn unused_grants_expire_after_the_short_ttl() {
    let config = ServerConfig {
        max_grants_per_token: 2,
        grant_unused_ttl: Duration::from_secs(1),
        ..ServerConfig::default()
    };
    let (s, _store) = start(config).await;
    let c = client();
    let (a, b, d) = (
        fixture(630, SIZES),
        fixture(631, SIZES),
        fixture(632, SIZES),
    );
    let ga = get_grant(&c, &s, &a.xorb, &a.xorb_body).await;
    let _gb = get_grant(&c, &s, &b.xorb, &b.xorb_body).await;
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", d.xorb)))
        .json(&grant_request(&d.xorb_body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["retry-after"], "1");
    assert_eq!(
        json_error(resp).await.1,
        "grant_capacity",
        "two grants per identity"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    // The unused grants are gone (well before the URL's expiry).
    let resp = put_grant(&c, &ga, a.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_error(resp).await.0,
        StatusCode::FORBIDDEN,
        "an unused grant dies after grant_unused_ttl"
    );
    let r = grant_upload_and_commit(&c, &s, &d, None).await;
    assert_eq!(r, serde_json::json!({"was_inserted": true}));
}

/// Files (recursively) under `dir`.
fn files_under(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    if let Ok(rd) = std::fs::read_dir(dir) {
        for e in rd.flatten() {
            if e.path().is_dir() {
                out.extend(files_under(&e.path()));
            } else {
                out.push(e.path());
            }
        }
    }
    out
}

#[tokio::test]
async fn spilled_grant_data_is_visible_bounded_and_removed() {
    let spool = tempfile::tempdir().unwrap();
    // Left behind by a process that is gone: removed at start-up.
    let stale = spool.path().join("xet-grants-4294967");
    std::fs::create_dir_all(&stale).unwrap();
    std::fs::write(stale.join("grant-old"), b"old").unwrap();
    let (a, b) = (fixture(640, SIZES), fixture(641, SIZES));
    let config = ServerConfig {
        grant_memory_budget: 0,
        grant_spill_limit: a.xorb_body.len().max(b.xorb_body.len()) as u64 + 10,
        spool_dir: Some(spool.path().to_path_buf()),
        ..ServerConfig::default()
    };
    let (s, store) = start(config).await;
    assert!(!stale.exists(), "stale spill dirs are removed at start-up");
    let c = client();
    let ga = get_grant(&c, &s, &a.xorb, &a.xorb_body).await;
    let gb = get_grant(&c, &s, &b.xorb, &b.xorb_body).await;
    let resp = put_grant(&c, &ga, a.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let mine = spool
        .path()
        .join(format!("xet-grants-{}", std::process::id()));
    let files = files_under(spool.path());
    assert_eq!(files.len(), 1, "{files:?}");
    assert!(files[0].starts_with(&mine), "{files:?}");
    assert_eq!(
        std::fs::metadata(&files[0]).unwrap().len(),
        a.xorb_body.len() as u64
    );
    // Over the spill budget: 503 grant_capacity, retryable.
    let resp = put_grant(&c, &gb, b.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert!(resp.headers().contains_key("retry-after"));
    let (st, code, _) = json_error(resp).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::SERVICE_UNAVAILABLE, "grant_capacity")
    );
    // The commit removes the file, and makes room.
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        a.xorb, ga.id
    ));
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 200);
    assert_eq!(files_under(spool.path()), Vec::<std::path::PathBuf>::new());
    let resp = put_grant(&c, &gb, b.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        b.xorb, gb.id
    ));
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 200);
    assert!(store.xorb_size(&b.xorb).await.unwrap().is_some());
    assert!(files_under(spool.path()).is_empty());
}
