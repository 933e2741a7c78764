//! The shared `xet_cas_conformance` suite against `HttpCas` talking to a real
//! `xet_server` on 127.0.0.1 over an in-memory store, in three setups.

use crate::support;

use support::TestServer;
use xet_cas_conformance::UnderTest;
use xet_client::{HttpCas, LegacyOptions};

/// Grants and v2 routes on both sides (the default path).
mod grants_v2 {
    use super::*;
    async fn make() -> UnderTest {
        let server = TestServer::full().await;
        let cas = support::client(&server.url);
        UnderTest::with_guard(cas, server)
    }
    xet_cas_conformance::cas_conformance_tests!(make);
}

/// A server without grants or v2 routes: the client falls back per request.
mod legacy_server {
    use super::*;
    async fn make() -> UnderTest {
        let server = TestServer::legacy().await;
        let cas = support::client(&server.url);
        UnderTest::with_guard(cas, server)
    }
    xet_cas_conformance::cas_conformance_tests!(make);
}

/// A full server, the client forced onto the legacy routes.
mod legacy_client {
    use super::*;
    async fn make() -> UnderTest {
        let server = TestServer::full().await;
        let legacy = LegacyOptions {
            direct_xorb_upload: true,
            v1_shards: true,
            v1_reconstructions: true,
        };
        let cas = HttpCas::new(support::config(&server.url).with_legacy(legacy)).expect("client");
        UnderTest::with_guard(cas, server)
    }
    xet_cas_conformance::cas_conformance_tests!(make);
}

/// The empty file on the wire, as `HttpCas` answers it without asking (the conformance
/// case `empty_file`): both reconstruction routes answer 200 with no terms without a
/// `Range`, and 416 with `Content-Range: bytes */0` with any `Range` (every range of a
/// zero-length representation is unsatisfiable), on a full and on a legacy server.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_file_on_the_wire() {
    use xet_cas::routes;
    use xet_hash::MerkleHash;
    let http = reqwest::Client::new();
    let zero = MerkleHash::ZERO;
    for (server, paths) in [
        (
            TestServer::full().await,
            vec![
                routes::reconstruction_v1(&zero),
                routes::reconstruction_v2(&zero),
            ],
        ),
        (
            TestServer::legacy().await,
            vec![routes::reconstruction_v1(&zero)],
        ),
    ] {
        for path in paths {
            let url = format!("{}{path}", server.url);
            let resp = http.get(&url).send().await.expect("GET");
            assert_eq!(resp.status(), 200, "GET {path} without a range");
            let body: serde_json::Value =
                serde_json::from_slice(&resp.bytes().await.expect("body")).expect("JSON answer");
            assert_eq!(
                body["terms"],
                serde_json::json!([]),
                "GET {path}: no terms: {body}"
            );
            for range in [
                "bytes=0-0",
                "bytes=0-",
                "bytes=0-18446744073709551614",
                "bytes=5-9",
                "bytes=-1",
            ] {
                let resp = http
                    .get(&url)
                    .header("range", range)
                    .send()
                    .await
                    .expect("GET");
                assert_eq!(resp.status(), 416, "GET {path} with {range}");
                assert_eq!(
                    resp.headers()
                        .get("content-range")
                        .and_then(|v| v.to_str().ok()),
                    Some("bytes */0"),
                    "GET {path} with {range}: Content-Range"
                );
            }
        }
    }
}
