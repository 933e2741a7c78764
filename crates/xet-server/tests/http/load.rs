//! Load: several reference clients (`hf_xet` 1.8.0, one Python process each) upload and
//! download different and overlapping files through one server for a bounded time; every
//! file comes back identical, no client fails, the server answers no 5xx, and the store is
//! consistent afterwards (reopened from disk, every uploaded file reconstructs to its bytes).
//!
//! The clients start together by uploading the same shared files at once (identical xorbs
//! and shards racing), then each loops (driver step `load`, see `tests/ref/hf_xet_driver.py`): its own
//! random file, shared bases identical in every client, bases with a random insertion,
//! splices of two bases and a tiny or empty file; upload (write token), publish the
//! manifest, download its own files and four random files of other clients (read token)
//! plus one byte range of another client's file. Clients wait for each other's first
//! upload before their first download, so every client reads other clients' files while
//! those are still uploading. `XET_LOAD_SECONDS` (default 15) sets the duration.

use crate::common;
use crate::reference;

use common::*;
use reference::*;
use sha2::Digest;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xet_cas::Cas;
use xet_hash::MerkleHash;
use xet_server::{ServerConfig, Token};

const CLIENTS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_reference_clients_round_trip_overlapping_files() {
    let Some(py) = python() else { return };
    let seconds: f64 = std::env::var("XET_LOAD_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(15.0);
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let store_dir = tempfile::tempdir().unwrap();
    let store = Arc::new(Counting::new(
        xet_store::open_store(store_dir.path()).await.unwrap(),
    ));
    let config = ServerConfig {
        tokens: vec![Token::write("tok-w"), Token::read("tok-r")],
        ..Default::default()
    };
    let log = RequestLog::default();
    let server = TestServer::start_recorded(config.clone(), store.clone(), log.clone()).await;

    let t0 = Instant::now();
    let secs = seconds.to_string();
    let clients: Vec<String> = (0..CLIENTS).map(|i| i.to_string()).collect();
    let n = CLIENTS.to_string();
    let runs = futures_util::future::join_all(clients.iter().map(|i| {
        let args = [
            "load",
            "--endpoint",
            &server.url,
            "--token",
            "tok-w",
            "--read-token",
            "tok-r",
            "--client",
            i,
            "--clients",
            &n,
            "--seconds",
            &secs,
        ];
        let cache = format!("cache-c{i}");
        let py = py.clone();
        async move {
            let limit = Duration::from_secs_f64(seconds + 240.0);
            step_within(limit, &py, work, &cache, &args, &[]).await
        }
    }))
    .await;
    let elapsed = t0.elapsed();
    let failed: Vec<String> = runs
        .iter()
        .enumerate()
        .filter(|(_, r)| !r.ok)
        .map(|(i, r)| format!("client {i}:\n{}\n{}", r.stdout, r.stderr))
        .collect();
    assert!(failed.is_empty(), "{}", failed.join("\n"));
    let stats: Vec<serde_json::Value> = runs
        .into_iter()
        .enumerate()
        .map(|(i, r)| must(r, &format!("load client {i}")))
        .collect();
    eprintln!("{CLIENTS} clients in {elapsed:.1?}:");
    for s in &stats {
        eprintln!("  {s}");
    }
    eprintln!(
        "xorb puts {}, inserted {}, shards {}, dedup queries {} (hits {})",
        count(&store.xorb_puts),
        count(&store.xorbs_inserted),
        count(&store.shards),
        count(&store.dedup_queries),
        count(&store.dedup_hits)
    );
    for (i, s) in stats.iter().enumerate() {
        assert!(s["rounds"].as_u64().unwrap() >= 2, "client {i}: {s}");
        // Other clients' files, downloaded while they were uploading more.
        assert!(
            s["downloaded_other"].as_u64().unwrap() >= 4,
            "client {i}: {s}"
        );
        assert!(
            !s["other_clients"].as_array().unwrap().is_empty(),
            "client {i}: {s}"
        );
        assert!(s["ranges"].as_u64().unwrap() >= 1, "client {i}: {s}");
        // Its own files of every round (the shared files are uploaded once, before them).
        assert_eq!(
            s["downloaded_own"].as_u64().unwrap() + 3,
            s["uploaded"].as_u64().unwrap(),
            "client {i}: {s}"
        );
    }

    // No server error and no rejection beyond dedup misses (404 on /v1/chunks).
    let records = log.records();
    let bad: Vec<&Record> = records
        .iter()
        .filter(|r| r.status >= 500 || (r.status >= 400 && !r.path.starts_with("/v1/chunks/")))
        .collect();
    assert!(bad.is_empty(), "unexpected answers: {bad:#?}");
    let mut by_route = BTreeMap::<String, usize>::new();
    for r in &records {
        let parts = if r.path.starts_with("/_") { 2 } else { 3 };
        let route: String = r.path.split('/').take(parts).collect::<Vec<_>>().join("/");
        *by_route
            .entry(format!("{} {route} {}", r.method, r.status))
            .or_default() += 1;
    }
    eprintln!("requests: {by_route:#?}");

    // Every file any client uploaded, with the sha256 of its bytes.
    let mut uploaded = BTreeMap::<MerkleHash, (u64, String)>::new();
    let mut entries = 0;
    for e in std::fs::read_dir(work.join("manifests")).unwrap() {
        let path = e.unwrap().path();
        if path.extension().is_none_or(|x| x != "json") {
            continue;
        }
        let list: Vec<serde_json::Value> =
            serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        for m in list {
            entries += 1;
            let data = std::fs::read(work.join(m["path"].as_str().unwrap())).unwrap();
            let sha = hex(&sha2::Sha256::digest(&data));
            assert_eq!(m["sha256"].as_str().unwrap(), sha, "{m}");
            let hash = MerkleHash::from_hex(m["hash"].as_str().unwrap()).unwrap();
            assert_eq!(hash, xet_chunk::file_hash(&data), "{m}");
            let prev = uploaded.insert(hash, (data.len() as u64, sha.clone()));
            assert!(prev.is_none_or(|p| p == (data.len() as u64, sha)), "{m}");
        }
    }
    let reported: u64 = stats.iter().map(|s| s["uploaded"].as_u64().unwrap()).sum();
    assert_eq!(entries, reported);
    eprintln!("{entries} uploads, {} distinct files", uploaded.len());
    assert!(uploaded.len() < entries as usize, "no file uploaded twice");
    server.stop().await.unwrap();

    // Nothing half-written is left, and the store reopened from disk knows every file and
    // rebuilds its exact bytes (reconstruction and xorb ranges over HTTP, decoded here).
    let leftovers: Vec<_> = std::fs::read_dir(store_dir.path().join("tmp"))
        .map(|d| d.map(|e| e.unwrap().path()).collect())
        .unwrap_or_default();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    drop(store);
    let store = Arc::new(xet_store::open_store(store_dir.path()).await.unwrap());
    let server = TestServer::start(config, store.clone()).await;
    let c = client();
    for (hash, (size, sha)) in &uploaded {
        if *size == 0 {
            assert!(hash.is_zero());
            continue;
        }
        assert_eq!(store.file_size(hash).await.unwrap(), Some(*size), "{hash}");
        let data = download(&c, &server.url, Some("tok-r"), hash, None).await;
        assert_eq!(data.len() as u64, *size, "{hash}");
        assert_eq!(&hex(&sha2::Sha256::digest(&data)), sha, "{hash}");
    }
    server.stop().await.unwrap();
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
