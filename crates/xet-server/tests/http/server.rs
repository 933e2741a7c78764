//! Routing, path parsing, startup and shutdown.

use crate::common::*;
use crate::support::*;
use bytes::Bytes;
use reqwest::StatusCode;
use std::sync::Arc;
use std::time::Duration;
use xet_cas::Cas;
use xet_server::{Server, ServerConfig, ServerError, Token};
use xet_store::MemoryStore;

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
    cas.put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()).into())
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
