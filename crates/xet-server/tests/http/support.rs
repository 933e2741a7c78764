//! Helpers shared by the test modules: starting a server, error bodies, grants.

use crate::common::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use xet_cas::wire::{Grant, GrantRequest};
use xet_hash::MerkleHash;
use xet_server::ServerConfig;
use xet_server::grants::crc64_nvme;
use xet_store::MemoryStore;

/// Chunk sizes of the fixture file most tests use.
pub(crate) const SIZES: &[usize] = &[9000, 20000, 4000, 15000, 7000];

pub(crate) async fn json_error(resp: reqwest::Response) -> (StatusCode, String, String) {
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON error body");
    (
        status,
        body["error"].as_str().unwrap().to_string(),
        body["reason"].as_str().unwrap().to_string(),
    )
}

/// Objects in the store's backend (it keeps a few of its own from the start).
pub(crate) fn objects(store: &MemoryStore) -> usize {
    store.backend().len()
}

pub(crate) async fn start(config: ServerConfig) -> (TestServer, Arc<MemoryStore>) {
    let store = memory_store().await;
    let server = TestServer::start(config, store.clone()).await;
    (server, store)
}

pub(crate) async fn start_with(
    config: ServerConfig,
    f: &Fixture,
) -> (TestServer, Arc<MemoryStore>) {
    let (server, store) = start(config).await;
    put_fixture(&*store, f).await;
    (server, store)
}

pub(crate) fn grant_request(body: &[u8]) -> GrantRequest {
    GrantRequest {
        length: body.len() as u64,
        checksum: xet_cas::wire::Checksum {
            algo: "crc64nvme".into(),
            value: crc64_nvme(body).to_string(),
        },
    }
}

pub(crate) async fn get_grant(
    c: &reqwest::Client,
    s: &TestServer,
    xorb: &MerkleHash,
    body: &[u8],
) -> Grant {
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{xorb}")))
        .json(&grant_request(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    resp.json().await.unwrap()
}

pub(crate) fn put_grant(c: &reqwest::Client, g: &Grant, body: Vec<u8>) -> reqwest::RequestBuilder {
    let mut req = c.put(&g.url);
    for (k, v) in &g.headers {
        if !k.eq_ignore_ascii_case("content-length") {
            req = req.header(k, v);
        }
    }
    req.body(body)
}

pub(crate) async fn v2(
    c: &reqwest::Client,
    s: &TestServer,
    file: &MerkleHash,
    range: Option<&str>,
) -> reqwest::Response {
    let mut req = c.get(s.url(&format!("/v2/reconstructions/{file}")));
    if let Some(r) = range {
        req = req.header("range", r);
    }
    req.send().await.unwrap()
}
