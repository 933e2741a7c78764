//! The server over real HTTP on 127.0.0.1 (reqwest), backed by the in-memory store.

mod common;

use bytes::Bytes;
use common::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::sync::Arc;
use std::time::Duration;
use xet_cas::wire::{Grant, GrantRequest, ReconstructionV1, ReconstructionV2, TokenRefresh};
use xet_cas::{ByteRange, Cas, MemoryStore, Reconstruction};
use xet_hash::MerkleHash;
use xet_server::grants::{amz_checksum_header, crc64_nvme};
use xet_server::{Server, ServerConfig, ServerError, Token};

const SIZES: &[usize] = &[9000, 20000, 4000, 15000, 7000];

async fn json_error(resp: reqwest::Response) -> (StatusCode, String, String) {
    let status = resp.status();
    let body: Value = resp.json().await.expect("JSON error body");
    (
        status,
        body["error"].as_str().unwrap().to_string(),
        body["reason"].as_str().unwrap().to_string(),
    )
}

/// Objects in the store's backend (it keeps a few of its own from the start).
fn objects(store: &MemoryStore) -> usize {
    store.backend().len()
}

async fn start(config: ServerConfig) -> (TestServer, Arc<MemoryStore>) {
    let store = memory_store().await;
    let server = TestServer::start(config, store.clone()).await;
    (server, store)
}

async fn start_with(config: ServerConfig, f: &Fixture) -> (TestServer, Arc<MemoryStore>) {
    let (server, store) = start(config).await;
    put_fixture(&*store, f).await;
    (server, store)
}

fn grant_request(body: &[u8]) -> GrantRequest {
    GrantRequest {
        length: body.len() as u64,
        checksum: xet_cas::wire::Checksum {
            algo: "crc64nvme".into(),
            value: crc64_nvme(body).to_string(),
        },
    }
}

async fn get_grant(c: &reqwest::Client, s: &TestServer, xorb: &MerkleHash, body: &[u8]) -> Grant {
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{xorb}")))
        .json(&grant_request(body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::CREATED);
    resp.json().await.unwrap()
}

fn put_grant(c: &reqwest::Client, g: &Grant, body: Vec<u8>) -> reqwest::RequestBuilder {
    let mut req = c.put(&g.url);
    for (k, v) in &g.headers {
        if !k.eq_ignore_ascii_case("content-length") {
            req = req.header(k, v);
        }
    }
    req.body(body)
}

// ---------------------------------------------------------------------------------------

#[tokio::test]
async fn health_and_unknown_routes() {
    let (s, _) = start(ServerConfig::default()).await;
    let c = client();
    let r = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    assert!(r.headers().contains_key("x-request-id"));
    for path in [
        "/v2/file-chunk-hashes/abc",
        "/v2/whatever",
        "/v1/nope",
        "/",
        "/api/v1/reconstructions/x",
    ] {
        let (st, code, _) = json_error(c.get(s.url(path)).send().await.unwrap()).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::NOT_FOUND, "no_route"),
            "{path}"
        );
    }
    let (st, code, _) = json_error(c.delete(s.url("/v1/shards")).send().await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::METHOD_NOT_ALLOWED, "method_not_allowed")
    );
}

#[tokio::test]
async fn direct_upload_shards_and_downloads() {
    let (s, store) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(1, SIZES);
    let xorb_url = s.url(&format!("/v1/xorbs/default/{}", f.xorb));

    assert_eq!(c.head(&xorb_url).send().await.unwrap().status(), 404);
    let r: Value = c
        .post(&xorb_url)
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r, serde_json::json!({"was_inserted": true}));
    let r: Value = c
        .post(&xorb_url)
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r, serde_json::json!({"was_inserted": false}));
    let h = c.head(&xorb_url).send().await.unwrap();
    assert_eq!(h.status(), 200);
    assert_eq!(
        h.headers()["content-length"],
        f.xorb_body.len().to_string().as_str()
    );
    // The draft's prefix works too.
    let h = c
        .head(s.url(&format!("/v1/xorbs/default-merkledb/{}", f.xorb)))
        .send()
        .await
        .unwrap();
    assert_eq!(h.status(), 200);

    let file_url = s.url(&format!("/v1/files/{}", f.file));
    assert_eq!(c.head(&file_url).send().await.unwrap().status(), 404);
    let r: Value = c
        .post(s.url("/v1/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r, serde_json::json!({"result": 1}));
    let r: Value = c
        .post(s.url("/v1/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(r, serde_json::json!({"result": 0}));
    let h = c.head(&file_url).send().await.unwrap();
    assert_eq!(h.status(), 200);
    assert_eq!(
        h.headers()["content-length"],
        f.data.len().to_string().as_str()
    );
    assert_eq!(
        store.file_size(&f.file).await.unwrap(),
        Some(f.data.len() as u64)
    );

    assert_eq!(download(&c, &s.url, None, &f.file, None).await, f.data);

    // v1 answers the same terms, with fetch_info.
    let v1: ReconstructionV1 = c
        .get(s.url(&format!("/v1/reconstructions/{}", f.file)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let rec = Reconstruction::from_v1(&v1).unwrap();
    assert_eq!(rec.unpacked_len(), f.data.len() as u64);
    let fetch = &rec.fetches[0];
    assert!(
        fetch
            .url
            .as_ref()
            .unwrap()
            .starts_with(&format!("{}/_xorb/default/{}?", s.url, f.xorb))
    );
}

#[tokio::test]
async fn v2_shards_stream_ndjson_frames() {
    let f = fixture(2, SIZES);
    let (s, store) = start(ServerConfig::default()).await;
    store
        .put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()))
        .await
        .unwrap();
    let c = client();
    let resp = c
        .post(s.url("/v2/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
    let text = resp.text().await.unwrap();
    let frames: Vec<Value> = text
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    assert_eq!(frames.first().unwrap()["type"], "validating");
    assert_eq!(
        frames.last().unwrap(),
        &serde_json::json!({"type": "result", "was_inserted": true})
    );
    assert!(frames.iter().any(|f| f["type"] == "committing"));
    assert_eq!(
        store.file_size(&f.file).await.unwrap(),
        Some(f.data.len() as u64)
    );
    // Again: already registered.
    let text = c
        .post(s.url("/v2/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        last,
        serde_json::json!({"type": "result", "was_inserted": false})
    );
}

#[tokio::test]
async fn invalid_xorbs_and_shards_are_rejected_with_reasons_and_not_stored() {
    let (s, store) = start(ServerConfig::default()).await;
    let before = objects(&store);
    let c = client();
    let f = fixture(3, SIZES);
    let other = fixture(4, SIZES);

    // Garbage body.
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body("not a xorb")
        .send()
        .await
        .unwrap();
    let (st, code, reason) = json_error(resp).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "invalid_xorb")
    );
    assert!(reason.contains(&f.xorb.to_string()), "{reason}");
    // A valid xorb under another xorb's hash.
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", other.xorb)))
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "invalid_xorb");
    // Truncated body.
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body(f.xorb_body[..f.xorb_body.len() - 3].to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "invalid_xorb");
    assert_eq!(store.xorb_size(&f.xorb).await.unwrap(), None);
    assert_eq!(store.xorb_size(&other.xorb).await.unwrap(), None);

    // Shard referencing a xorb that is not stored: v1 → 400, v2 → error frame.
    let resp = c
        .post(s.url("/v1/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap();
    let (st, code, reason) = json_error(resp).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "missing_xorb")
    );
    assert!(reason.contains(&f.xorb.to_string()));
    let text = c
        .post(s.url("/v2/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(last["type"], "error");
    assert_eq!(last["retryable"], false);
    assert_eq!(last["error"], "missing_xorb");
    assert!(
        last["message"]
            .as_str()
            .unwrap()
            .contains(&f.xorb.to_string())
    );

    // Garbage shard.
    let resp = c
        .post(s.url("/v1/shards"))
        .body(vec![7u8; 300])
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "invalid_shard");
    let text = c
        .post(s.url("/v2/shards"))
        .body(vec![7u8; 300])
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let last: Value = serde_json::from_str(text.lines().last().unwrap()).unwrap();
    assert_eq!(
        (last["type"].as_str(), last["error"].as_str()),
        (Some("error"), Some("invalid_shard"))
    );
    assert_eq!(store.file_size(&f.file).await.unwrap(), None);
    assert_eq!(objects(&store), before, "something was stored");
}

#[tokio::test]
async fn body_size_limits() {
    let (s, store) = start(ServerConfig {
        max_xorb_bytes: 1000,
        max_shard_bytes: 100,
        ..Default::default()
    })
    .await;
    let before = objects(&store);
    let c = client();
    let f = fixture(5, SIZES);
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    let (st, code, _) = json_error(resp).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::PAYLOAD_TOO_LARGE, "payload_too_large")
    );
    let resp = c
        .post(s.url("/v1/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let resp = c
        .post(s.url("/v2/shards"))
        .body(f.shard.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // A grant for more than the limit.
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", f.xorb)))
        .json(&grant_request(&f.xorb_body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    // Chunked body (no content-length) over the limit.
    let stream = futures_util::stream::iter(
        (0..20).map(|_| Ok::<_, std::io::Error>(Bytes::from(vec![0u8; 100]))),
    );
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body(reqwest::Body::wrap_stream(stream))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(objects(&store), before);
}

// The default xorb limit covers the largest valid xorb, and the 67,115,199-byte body
// hf_xet produced for a 200 MiB random file (cas-http-api.md §1.4).
const _: () =
    assert!(xet_server::config::DEFAULT_MAX_XORB_BYTES >= xet_xorb::MAX_XORB_FOOTERED_BYTES);
const _: () = assert!(xet_server::config::DEFAULT_MAX_XORB_BYTES >= 67_115_199);

// ---------------------------------------------------------------------------------------
// Grants

#[tokio::test]
async fn grant_flow() {
    let (s, store) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(6, SIZES);
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    assert_eq!(g.method, "PUT");
    assert!(
        g.url
            .starts_with(&format!("{}/_grant-upload/{}?X-Xet-Expires=", s.url, g.id)),
        "{}",
        g.url
    );
    assert_eq!(g.headers["Content-Length"], f.xorb_body.len().to_string());
    assert_eq!(
        g.headers["x-amz-checksum-crc64nvme"],
        amz_checksum_header(crc64_nvme(&f.xorb_body))
    );

    let resp = put_grant(&c, &g, f.xorb_body.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    // Not stored before the commit.
    assert_eq!(store.xorb_size(&f.xorb).await.unwrap(), None);
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        f.xorb, g.id
    ));
    let r: Value = c.post(&commit).send().await.unwrap().json().await.unwrap();
    assert_eq!(r, serde_json::json!({"was_inserted": true}));
    assert_eq!(
        store.xorb_size(&f.xorb).await.unwrap(),
        Some(f.xorb_body.len() as u64)
    );
    // The grant is used up.
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 404);
    // Existing xorb: 200 instead of a grant.
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", f.xorb)))
        .json(&grant_request(&f.xorb_body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        serde_json::json!({"was_inserted": false})
    );
}

#[tokio::test]
async fn grant_upload_checks() {
    let (s, store) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(7, SIZES);
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        f.xorb, g.id
    ));

    // Commit before any upload: 404 (hf_xet then asks for a new grant).
    let (st, code, reason) = json_error(c.post(&commit).send().await.unwrap()).await;
    assert_eq!((st, code.as_str()), (StatusCode::NOT_FOUND, "not_found"));
    assert!(reason.contains("no data arrived"), "{reason}");

    // CRC mismatch: same length, one byte flipped.
    let mut bad = f.xorb_body.clone();
    bad[100] ^= 1;
    let (st, code, _) = json_error(put_grant(&c, &g, bad).send().await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "checksum_mismatch")
    );
    // Length mismatch (short and long).
    let (st, code, _) = json_error(
        put_grant(&c, &g, f.xorb_body[1..].to_vec())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "length_mismatch")
    );
    let mut long = f.xorb_body.clone();
    long.push(0);
    let (_, code, _) = json_error(put_grant(&c, &g, long).send().await.unwrap()).await;
    assert_eq!(code, "length_mismatch");
    // Wrong checksum header.
    let resp = put_grant(&c, &g, f.xorb_body.clone())
        .header("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "checksum_mismatch");
    // Failed uploads leave nothing to commit.
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 404);

    // Tampered signature / id / missing query: 403.
    let forged = g.url.replace("X-Xet-Signature=", "X-Xet-Signature=00");
    let resp = c
        .put(&forged)
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_error(resp).await,
        (
            StatusCode::FORBIDDEN,
            "bad_signature".into(),
            "the grant upload URL signature is not valid".into()
        )
    );
    let unsigned = g.url.split('?').next().unwrap().to_string();
    assert_eq!(
        c.put(&unsigned)
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    let other_id = g.url.replace(&g.id, "00000000000000000000000000000000");
    assert_eq!(
        c.put(&other_id)
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    let later = {
        let (base, q) = g.url.split_once('?').unwrap();
        let exp: u64 = q
            .split('&')
            .next()
            .unwrap()
            .trim_start_matches("X-Xet-Expires=")
            .parse()
            .unwrap();
        format!(
            "{base}?{}",
            q.replace(
                &format!("X-Xet-Expires={exp}"),
                &format!("X-Xet-Expires={}", exp + 1000)
            )
        )
    };
    assert_eq!(
        c.put(&later)
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );

    // The grant still works after all that; committing under another xorb's hash does not.
    assert_eq!(
        put_grant(&c, &g, f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let other = fixture(8, SIZES);
    let wrong = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        other.xorb, g.id
    ));
    assert_eq!(c.post(&wrong).send().await.unwrap().status(), 404);
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 200);
    assert_eq!(
        store.xorb_size(&f.xorb).await.unwrap(),
        Some(f.xorb_body.len() as u64)
    );
    assert_eq!(store.xorb_size(&other.xorb).await.unwrap(), None);
}

#[tokio::test]
async fn grant_with_invalid_xorb_is_rejected_at_commit() {
    let (s, store) = start(ServerConfig::default()).await;
    let before = objects(&store);
    let c = client();
    let f = fixture(9, SIZES);
    let garbage = vec![1u8; 500];
    let g = get_grant(&c, &s, &f.xorb, &garbage).await;
    assert_eq!(
        put_grant(&c, &g, garbage).send().await.unwrap().status(),
        200
    );
    let resp = c
        .post(s.url(&format!(
            "/v1/xorb-commits/default/{}/grant/{}",
            f.xorb, g.id
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "invalid_xorb");
    assert_eq!(objects(&store), before);
}

#[tokio::test]
async fn grant_requests_are_validated() {
    let (s, _) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(10, SIZES);
    let url = s.url(&format!("/v1/xorb-grants/default/{}", f.xorb));
    for body in [
        "not json".to_string(),
        r#"{"length": 10}"#.to_string(),
        r#"{"length": 10, "checksum": {"algo": "sha256", "value": "1"}}"#.to_string(),
        r#"{"length": 10, "checksum": {"algo": "crc64nvme", "value": "0x12"}}"#.to_string(),
        r#"{"length": 0, "checksum": {"algo": "crc64nvme", "value": "0"}}"#.to_string(),
    ] {
        let resp = c
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let _ = json_error(resp).await;
    }
}

#[tokio::test]
async fn expired_grant_is_forbidden() {
    let (s, store) = start(ServerConfig {
        url_ttl: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let before = objects(&store);
    let c = client();
    let f = fixture(11, SIZES);
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (st, code, _) =
        json_error(put_grant(&c, &g, f.xorb_body.clone()).send().await.unwrap()).await;
    assert_eq!((st, code.as_str()), (StatusCode::FORBIDDEN, "url_expired"));
    assert_eq!(
        c.post(s.url(&format!(
            "/v1/xorb-commits/default/{}/grant/{}",
            f.xorb, g.id
        )))
        .send()
        .await
        .unwrap()
        .status(),
        404
    );
    assert_eq!(objects(&store), before);
}

#[tokio::test]
async fn grants_disabled() {
    let (s, _) = start(ServerConfig {
        allow_grants: false,
        ..Default::default()
    })
    .await;
    let c = client();
    let f = fixture(12, SIZES);
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", f.xorb)))
        .json(&grant_request(&f.xorb_body))
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.0, StatusCode::NOT_FOUND);
    let resp = c
        .post(s.url(&format!("/v1/xorb-commits/default/{}/grant/abc", f.xorb)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // Direct upload still works.
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn v2_disabled() {
    let f = fixture(13, SIZES);
    let (s, _) = start_with(
        ServerConfig {
            allow_v2: false,
            ..Default::default()
        },
        &f,
    )
    .await;
    let c = client();
    let (st, code, _) = json_error(
        c.post(s.url("/v2/shards"))
            .body(f.shard.clone())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (StatusCode::NOT_FOUND, "no_route"));
    let resp = c
        .get(s.url(&format!("/v2/reconstructions/{}", f.file)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // v1 still answers.
    let resp = c
        .get(s.url(&format!("/v1/reconstructions/{}", f.file)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

// ---------------------------------------------------------------------------------------
// Reconstructions and ranges

async fn v2(
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

#[tokio::test]
async fn reconstruction_ranges() {
    let f = fixture(14, SIZES);
    let (s, _) = start_with(ServerConfig::default(), &f).await;
    let c = client();
    let n = f.data.len() as u64;
    // Inclusive end; trims to chunk granularity with offset_into_first_range.
    for (start, end) in [
        (0, n),
        (0, 1),
        (5, 6),
        (9000, 9001),
        (8999, 29001),
        (n - 1, n),
        (12345, 40000),
    ] {
        let got = download(&c, &s.url, None, &f.file, Some(ByteRange::new(start, end))).await;
        assert_eq!(got, f.data[start as usize..end as usize], "{start}..{end}");
    }
    // The ranged answer only has the overlapping terms' chunks.
    let w: ReconstructionV2 = v2(&c, &s, &f.file, Some("bytes=30000-30009"))
        .await
        .json()
        .await
        .unwrap();
    let rec = Reconstruction::from_v2(&w).unwrap();
    assert_eq!(rec.terms.len(), 1);
    assert_eq!(rec.offset_into_first_range, 30000 - 29000);
    // End past the file is clamped.
    let w: ReconstructionV2 = v2(&c, &s, &f.file, Some(&format!("bytes=50000-{}", n + 1000)))
        .await
        .json()
        .await
        .unwrap();
    let rec = Reconstruction::from_v2(&w).unwrap();
    assert_eq!(rec.offset_into_first_range, 50000 - 48000);
    assert_eq!(rec.terms.last().unwrap().chunks.end, SIZES.len() as u32);
    // `S-` and `-N`.
    let a: ReconstructionV2 = v2(&c, &s, &f.file, Some("bytes=50000-"))
        .await
        .json()
        .await
        .unwrap();
    let b: ReconstructionV2 = v2(&c, &s, &f.file, Some(&format!("bytes=-{}", n - 50000)))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a.terms, b.terms);
    assert_eq!(a.offset_into_first_range, b.offset_into_first_range);
    // Start at or past the end: 416 with Content-Range, JSON reason.
    for r in [format!("bytes={n}-"), format!("bytes={}-{}", n + 5, n + 10)] {
        let resp = v2(&c, &s, &f.file, Some(&r)).await;
        assert_eq!(
            resp.headers()["content-range"],
            format!("bytes */{n}").as_str()
        );
        let (st, code, _) = json_error(resp).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::RANGE_NOT_SATISFIABLE, "range_not_satisfiable")
        );
    }
    // v1 honours the same ranges.
    let resp = c
        .get(s.url(&format!("/v1/reconstructions/{}", f.file)))
        .header("range", format!("bytes={n}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 416);
    // Malformed or multi-range: 400.
    for r in ["bytes=5-1", "bytes=x-", "items=0-5", "bytes=0-1,5-6"] {
        let (st, code, _) = json_error(v2(&c, &s, &f.file, Some(r)).await).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_range"),
            "{r}"
        );
    }
}

#[tokio::test]
async fn reconstruction_of_unknown_and_empty_files() {
    let (s, _) = start(ServerConfig::default()).await;
    let c = client();
    let unknown = fixture(15, &[100]).file;
    let (st, code, reason) = json_error(v2(&c, &s, &unknown, None).await).await;
    assert_eq!((st, code.as_str()), (StatusCode::NOT_FOUND, "not_found"));
    assert!(reason.contains(&unknown.to_string()));
    assert_eq!(
        c.get(s.url(&format!("/v1/reconstructions/{unknown}")))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        c.head(s.url(&format!("/v1/files/{unknown}")))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    // The empty file needs no registration.
    let w: ReconstructionV2 = v2(&c, &s, &MerkleHash::ZERO, None)
        .await
        .json()
        .await
        .unwrap();
    assert!(w.terms.is_empty());
    let h = c
        .head(s.url(&format!("/v1/files/{}", MerkleHash::ZERO)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            h.status().as_u16(),
            h.headers()["content-length"].to_str().unwrap()
        ),
        (200, "0")
    );
}

#[tokio::test]
async fn batch_reconstruction() {
    let a = fixture(16, SIZES);
    let b = fixture(17, &[3000, 5000]);
    let (s, store) = start_with(ServerConfig::default(), &a).await;
    put_fixture(&*store, &b).await;
    let c = client();
    let unknown = fixture(18, &[100]).file;
    let url = s.url(&format!(
        "/v1/reconstructions?file_id={}&file_id={}&file_id={unknown}",
        a.file, b.file
    ));
    let v: Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    let files = v["files"].as_object().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[&a.file.to_string()].as_array().unwrap().len(), 1);
    let fi = v["fetch_info"].as_object().unwrap();
    assert!(fi.contains_key(&a.xorb.to_string()) && fi.contains_key(&b.xorb.to_string()));
    assert_eq!(
        c.get(s.url("/v1/reconstructions"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        c.get(s.url("/v1/reconstructions?file_id=zz"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
}

/// The presigned xorb URL of the first fetch of `f`.
async fn xorb_data_url(c: &reqwest::Client, s: &TestServer, f: &Fixture) -> String {
    let w: ReconstructionV2 = v2(c, s, &f.file, None).await.json().await.unwrap();
    w.xorbs[&f.xorb.to_string()][0].url.clone()
}

#[tokio::test]
async fn xorb_data_ranges() {
    let f = fixture(19, SIZES);
    let (s, _) = start_with(ServerConfig::default(), &f).await;
    let c = client();
    let url = xorb_data_url(&c, &s, &f).await;
    let body = &f.xorb_body;
    let n = body.len();

    // No Range: 200, the whole chunk region.
    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap(), body[..]);
    assert_eq!(decode(body), f.data);

    let get = |r: String| {
        let c = c.clone();
        let url = url.clone();
        async move { c.get(&url).header("range", r).send().await.unwrap() }
    };
    // Single ranges: 206 with Content-Range; inclusive end, clamping, `S-`, `-N`.
    for (r, s0, e0) in [
        ("bytes=0-0".to_string(), 0, 1),
        ("bytes=10-99".to_string(), 10, 100),
        (format!("bytes=100-{}", n + 50), 100, n),
        (format!("bytes={}-", n - 7), n - 7, n),
        ("bytes=-5".to_string(), n - 5, n),
    ] {
        let resp = get(r.clone()).await;
        assert_eq!(resp.status(), 206, "{r}");
        assert_eq!(
            resp.headers()["content-range"],
            format!("bytes {}-{}/{n}", s0, e0 - 1).as_str(),
            "{r}"
        );
        assert_eq!(resp.bytes().await.unwrap(), body[s0..e0], "{r}");
    }
    // Overlapping ranges adding up to more than the xorb: 400.
    let resp = get(format!("bytes=0-,0-{}", n / 2)).await;
    assert_eq!(json_error(resp).await.1, "bad_range");
    // Past the end: 416.
    let resp = get(format!("bytes={n}-{}", n + 10)).await;
    assert_eq!(
        resp.headers()["content-range"],
        format!("bytes */{n}").as_str()
    );
    assert_eq!(json_error(resp).await.0, StatusCode::RANGE_NOT_SATISFIABLE);

    // Multi-range: multipart/byteranges with each part's exact bytes.
    let ranges = [(0usize, 10usize), (500, 1000), (n - 3, n)];
    let spec = ranges
        .iter()
        .map(|(a, b)| format!("{a}-{}", b - 1))
        .collect::<Vec<_>>()
        .join(",");
    let resp = get(format!("bytes={spec},{}-{}", n + 1, n + 2)).await;
    assert_eq!(resp.status(), 206);
    let ct = resp.headers()["content-type"].to_str().unwrap().to_string();
    let boundary = ct
        .strip_prefix("multipart/byteranges; boundary=")
        .expect(&ct)
        .to_string();
    let raw = resp.bytes().await.unwrap();
    let parts = parse_multipart(&raw, &boundary);
    assert_eq!(parts.len(), 3);
    for ((cr, data), (a, b)) in parts.iter().zip(ranges) {
        assert_eq!(cr, &format!("bytes {a}-{}/{n}", b - 1));
        assert_eq!(data[..], body[a..b]);
    }
}

/// Minimal multipart/byteranges parser: (content-range, data) per part.
fn parse_multipart(raw: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delim = format!("--{boundary}");
    let mut out = Vec::new();
    let mut pos = 0;
    let find = |hay: &[u8], needle: &[u8], from: usize| {
        hay[from..]
            .windows(needle.len())
            .position(|w| w == needle)
            .map(|p| p + from)
    };
    while let Some(start) = find(raw, delim.as_bytes(), pos) {
        let after = start + delim.len();
        if raw[after..].starts_with(b"--") {
            break;
        }
        let headers_end = find(raw, b"\r\n\r\n", after).unwrap();
        let headers = std::str::from_utf8(&raw[after..headers_end]).unwrap();
        let cr = headers
            .lines()
            .find_map(|l| l.strip_prefix("Content-Range: "))
            .unwrap()
            .to_string();
        let (a, b) = cr
            .trim_start_matches("bytes ")
            .split('/')
            .next()
            .unwrap()
            .split_once('-')
            .unwrap();
        let len = b.parse::<usize>().unwrap() - a.parse::<usize>().unwrap() + 1;
        let data_start = headers_end + 4;
        out.push((cr, raw[data_start..data_start + len].to_vec()));
        pos = data_start + len;
    }
    out
}

#[tokio::test]
async fn xorb_data_urls_are_signed_and_expire() {
    let f = fixture(20, SIZES);
    let (s, _) = start_with(
        ServerConfig {
            url_ttl: Duration::from_secs(1),
            ..Default::default()
        },
        &f,
    )
    .await;
    let c = client();
    let url = xorb_data_url(&c, &s, &f).await;
    assert_eq!(
        c.get(&url)
            .header("range", "bytes=0-9")
            .send()
            .await
            .unwrap()
            .status(),
        206
    );
    // Another xorb's path under this signature, a forged signature, no query: 403.
    let other = fixture(21, SIZES);
    let (st, code, _) = json_error(
        c.get(url.replace(&f.xorb.to_string(), &other.xorb.to_string()))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::FORBIDDEN, "bad_signature")
    );
    let unsigned = url.split('?').next().unwrap();
    assert_eq!(c.get(unsigned).send().await.unwrap().status(), 403);
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (st, code, _) = json_error(
        c.get(&url)
            .header("range", "bytes=0-9")
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (StatusCode::FORBIDDEN, "url_expired"));
    // A fresh reconstruction hands out a working URL again.
    let url = xorb_data_url(&c, &s, &f).await;
    assert_eq!(
        c.get(&url)
            .header("range", "bytes=0-9")
            .send()
            .await
            .unwrap()
            .status(),
        206
    );
}

#[tokio::test]
async fn presigned_urls_use_the_host_the_client_connected_to_or_the_public_url() {
    let f = fixture(22, SIZES);
    let (s, _) = start_with(ServerConfig::default(), &f).await;
    let c = client();
    let port = s.addr.port();
    let w: Value = c
        .get(format!(
            "http://localhost:{port}/v2/reconstructions/{}",
            f.file
        ))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = w["xorbs"][f.xorb.to_string()][0]["url"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        url.starts_with(&format!("http://localhost:{port}/_xorb/default/")),
        "{url}"
    );
    assert_eq!(c.get(&url).send().await.unwrap().status(), 200);
    // A Host header that is not a host name falls back to the bound address.
    let w: Value = c
        .get(s.url(&format!("/v2/reconstructions/{}", f.file)))
        .header("host", "evil/../x")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        w["xorbs"][f.xorb.to_string()][0]["url"]
            .as_str()
            .unwrap()
            .starts_with(&s.url)
    );

    let store = memory_store().await;
    put_fixture(&*store, &f).await;
    let public = TestServer::start(
        ServerConfig {
            public_url: Some("https://cas.example.org/".into()),
            ..Default::default()
        },
        store,
    )
    .await;
    let w: Value = c
        .get(public.url(&format!("/v2/reconstructions/{}", f.file)))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert!(
        w["xorbs"][f.xorb.to_string()][0]["url"]
            .as_str()
            .unwrap()
            .starts_with("https://cas.example.org/_xorb/default/")
    );
    let t: TokenRefresh = c
        .get(public.url("/v1/token"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.cas_url, "https://cas.example.org");
}

// ---------------------------------------------------------------------------------------
// Hashes and paths

#[tokio::test]
async fn bad_hashes_and_path_tricks_never_reach_storage() {
    let f = fixture(23, SIZES);
    let (s, store) = start(ServerConfig::default()).await;
    let before = objects(&store);
    let c = client();
    let good = f.xorb.to_string();
    let upper = good.to_uppercase();
    for (path, want) in [
        ("/v1/xorbs/default/zz".to_string(), 400),
        (format!("/v1/xorbs/default/{}", &good[..63]), 400),
        (format!("/v1/xorbs/default/{good}0"), 400),
        (
            "/v1/xorbs/default/..%2F..%2F..%2Fetc%2Fpasswd".to_string(),
            400,
        ),
        (format!("/v1/xorbs/default/%2E%2E%2F{}", &good[..55]), 400),
        (format!("/v1/xorbs/evil/{good}"), 400),
        (format!("/v1/xorbs/..%2Fdefault/{good}"), 400),
        (format!("/v1/xorbs/default/../{good}"), 404),
        (format!("/v1/xorbs/default/{good}/extra"), 404),
        (format!("/v1/xorbs/default//{good}"), 404),
    ] {
        let resp = c
            .post(s.url(&path))
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap();
        let (st, _, _) = json_error(resp).await;
        assert_eq!(st.as_u16(), want, "{path}");
    }
    for path in [
        "/v2/reconstructions/..%2F..%2Fshards".to_string(),
        "/v1/reconstructions/not-a-hash".to_string(),
        "/v1/chunks/default/xyz".to_string(),
        format!("/v1/chunks/nope/{good}"),
        format!("/_xorb/default/{}", "g".repeat(64)),
        format!("/_xorb/other/{good}"),
    ] {
        let status = c.get(s.url(&path)).send().await.unwrap().status();
        assert_eq!(status, 400, "{path}");
    }
    assert_eq!(
        objects(&store),
        before,
        "a rejected request stored something"
    );
    // Upper-case hex is the same hash.
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{upper}")))
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        store.xorb_size(&f.xorb).await.unwrap(),
        Some(f.xorb_body.len() as u64)
    );
}

// ---------------------------------------------------------------------------------------
// Auth

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Need {
    Read,
    Write,
}

#[tokio::test]
async fn auth_matrix() {
    let f = fixture(24, SIZES);
    let config = ServerConfig {
        tokens: vec![Token::read("reader"), Token::write("writer")],
        ..Default::default()
    };
    let (s, store) = start_with(config, &f).await;
    let c = client();
    let x = f.xorb;
    let other = fixture(25, SIZES);
    let routes: Vec<(reqwest::Method, String, Need, Option<Vec<u8>>)> = vec![
        (
            reqwest::Method::GET,
            format!("/v2/reconstructions/{}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/reconstructions/{}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/reconstructions?file_id={}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::HEAD,
            format!("/v1/files/{}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::HEAD,
            format!("/v1/xorbs/default/{x}"),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/chunks/default/{}", f.chunk_hashes[0]),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::POST,
            "/v1/telemetry".into(),
            Need::Read,
            Some(b"{}".to_vec()),
        ),
        (reqwest::Method::GET, "/v1/token".into(), Need::Read, None),
        (
            reqwest::Method::POST,
            format!("/v1/xorbs/default/{x}"),
            Need::Write,
            Some(f.xorb_body.clone()),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/xorb-grants/default/{}", other.xorb),
            Need::Write,
            Some(serde_json::to_vec(&grant_request(&other.xorb_body)).unwrap()),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/xorb-commits/default/{x}/grant/abc"),
            Need::Write,
            Some(vec![]),
        ),
        (
            reqwest::Method::POST,
            "/v1/shards".into(),
            Need::Write,
            Some(f.shard.clone()),
        ),
        (
            reqwest::Method::POST,
            "/v2/shards".into(),
            Need::Write,
            Some(f.shard.clone()),
        ),
    ];
    for (method, path, need, body) in &routes {
        for token in [None, Some("wrong"), Some("reader"), Some("writer")] {
            let mut req = c.request(method.clone(), s.url(path));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            if let Some(b) = body {
                req = req.body(b.clone());
            }
            let resp = req.send().await.unwrap();
            let st = resp.status().as_u16();
            let want_denied = match (token, need) {
                (None | Some("wrong"), _) => Some(401),
                (Some("reader"), Need::Write) => Some(403),
                _ => None,
            };
            match want_denied {
                Some(code) => {
                    assert_eq!(st, code, "{method} {path} token={token:?}");
                    if code == 401 {
                        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
                    }
                    if *method != reqwest::Method::HEAD {
                        let (_, err, _) = json_error(resp).await;
                        assert_eq!(
                            err,
                            if code == 401 {
                                "unauthorized"
                            } else {
                                "forbidden"
                            }
                        );
                    }
                }
                None => assert!(
                    st != 401 && st != 403,
                    "{method} {path} token={token:?}: {st}"
                ),
            }
        }
    }
    // Malformed Authorization headers.
    for h in ["writer", "Basic writer", "Bearer", "Bearer  "] {
        let resp = c
            .get(s.url("/v1/token"))
            .header("authorization", h)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{h:?}");
    }
    // Health and presigned URLs need no token.
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    let w: ReconstructionV2 = c
        .get(s.url(&format!("/v2/reconstructions/{}", f.file)))
        .bearer_auth("reader")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = &w.xorbs[&x.to_string()][0].url;
    assert_eq!(c.get(url).send().await.unwrap().status(), 200);
    // Grant upload URLs too.
    let g: Grant = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", other.xorb)))
        .bearer_auth("writer")
        .json(&grant_request(&other.xorb_body))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        put_grant(&c, &g, other.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        other.xorb, g.id
    ));
    assert_eq!(
        c.post(&commit)
            .bearer_auth("reader")
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(
        c.post(&commit)
            .bearer_auth("writer")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(store.xorb_size(&other.xorb).await.unwrap().is_some());
}

#[tokio::test]
async fn token_refresh_route() {
    let (s, _) = start(ServerConfig {
        tokens: vec![Token::read("r"), Token::write("w")],
        token_ttl: Duration::from_secs(600),
        ..Default::default()
    })
    .await;
    let c = client();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t: TokenRefresh = c
        .get(s.url("/v1/token"))
        .bearer_auth("r")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.access_token, "r");
    assert!(t.exp >= now + 599 && t.exp <= now + 602, "{}", t.exp);
    assert_eq!(t.cas_url, s.url);
    assert_eq!(
        c.get(s.url("/v1/token")).send().await.unwrap().status(),
        401
    );
    // Without auth it still answers (hf_xet needs some token string).
    let (open, _) = start(ServerConfig::default()).await;
    let t: TokenRefresh = c
        .get(open.url("/v1/token"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.cas_url, open.url);
}

#[tokio::test]
async fn telemetry_is_accepted() {
    let (s, _) = start(ServerConfig::default()).await;
    let c = client();
    let resp = c
        .post(s.url("/v1/telemetry"))
        .json(&serde_json::json!({"event": "xet_upload_summary", "metrics": {}}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}

#[tokio::test]
async fn dedup_queries() {
    let f = fixture(26, SIZES);
    let (s, _) = start_with(ServerConfig::default(), &f).await;
    let c = client();
    let first = f.chunk_hashes[0];
    for prefix in ["default", "default-merkledb"] {
        let resp = c
            .get(s.url(&format!("/v1/chunks/{prefix}/{first}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "{prefix}");
        let bytes = resp.bytes().await.unwrap();
        let parsed = xet_shard::ParsedShard::parse(
            &bytes,
            &xet_shard::Limits {
                max_bytes: u64::MAX,
                max_entries: u64::MAX,
            },
        )
        .expect("dedup answer is a shard");
        assert_eq!(parsed.shard.cas.len(), 1);
        assert_eq!(parsed.shard.cas[0].xorb_hash, f.xorb);
    }
    let unknown = xet_hash::chunk_hash(b"never stored");
    let (st, code, _) = json_error(
        c.get(s.url(&format!("/v1/chunks/default/{unknown}")))
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!((st, code.as_str()), (StatusCode::NOT_FOUND, "not_found"));
}

// ---------------------------------------------------------------------------------------
// Startup and shutdown

#[tokio::test]
async fn refuses_non_loopback_without_tokens() {
    let store: Arc<dyn Cas> = memory_store().await;
    for listen in ["0.0.0.0:0", "[::]:0"] {
        let r = Server::bind(
            ServerConfig {
                listen: listen.into(),
                ..Default::default()
            },
            store.clone(),
        )
        .await;
        match r {
            Err(ServerError::NoTokenOnPublicAddress { listen: l }) => assert_eq!(l, listen),
            Err(e) => panic!("{listen}: unexpected error {e}"),
            Ok(_) => panic!("{listen}: served without a token"),
        }
    }
    // With a token it binds; loopback names without a token bind too.
    let s = Server::bind(
        ServerConfig {
            listen: "0.0.0.0:0".into(),
            tokens: vec![Token::write("t")],
            ..Default::default()
        },
        store.clone(),
    )
    .await
    .unwrap();
    assert!(s.local_addr().ip().is_unspecified());
    for listen in ["127.0.0.1:0", "localhost:0"] {
        let s = Server::bind(
            ServerConfig {
                listen: listen.into(),
                ..Default::default()
            },
            store.clone(),
        )
        .await
        .unwrap();
        assert!(s.local_addr().ip().is_loopback());
        assert!(s.url().starts_with("http://"));
    }
    let bad = Server::bind(
        ServerConfig {
            public_url: Some("ftp://x".into()),
            ..Default::default()
        },
        store,
    )
    .await;
    assert!(matches!(bad, Err(ServerError::PublicUrl { .. })));
}

#[tokio::test]
async fn graceful_shutdown_finishes_in_flight_requests() {
    let f = fixture(27, SIZES);
    let mut counting = Counting::new(MemoryStore::in_memory().await.unwrap());
    counting.shard_delay = Duration::from_millis(800);
    let cas = Arc::new(counting);
    cas.put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()))
        .await
        .unwrap();
    let mut s = TestServer::start(ServerConfig::default(), cas.clone()).await;
    let c = client();
    let url = s.url("/v1/shards");
    let shard = f.shard.clone();
    let in_flight =
        tokio::spawn(async move { c.post(url).body(shard).send().await.unwrap().status() });
    tokio::time::sleep(Duration::from_millis(200)).await;
    s.trigger_shutdown();
    assert_eq!(in_flight.await.unwrap(), 200);
    let addr = s.addr;
    tokio::time::timeout(Duration::from_secs(5), s.join())
        .await
        .expect("server stopped")
        .unwrap();
    assert_eq!(
        cas.file_size(&f.file).await.unwrap(),
        Some(f.data.len() as u64)
    );
    // No longer accepting.
    assert!(
        client()
            .get(format!("http://{addr}/health"))
            .send()
            .await
            .is_err()
    );
}
