//! Direct xorb uploads, shard registration (v1 and the v2 NDJSON stream), body limits
//! and dedup queries.

use crate::common::*;
use crate::support::*;
use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::Value;
use xet_cas::wire::ReconstructionV1;
use xet_cas::{Cas, Reconstruction};
use xet_server::ServerConfig;

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
        .put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()).into())
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
