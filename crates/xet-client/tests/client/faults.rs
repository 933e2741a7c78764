//! Fault injection through a proxy in front of a real server: every case ends with the
//! right data or a clear error, retries are bounded, nothing hangs.

use crate::support;

use bytes::Bytes;
use std::time::{Duration, Instant};
use support::{TestServer, download, sample, upload, within};
use xet_cas::{ByteRange, Cas, CasError, ObjectKind};
use xet_client::HttpCas;
use xet_testdata::proxy::{Cut, Fault, Match, Proxy};

const GRANTS: &str = "/v1/xorb-grants/";
const GRANT_PUT: &str = "/_grant-upload/";
const COMMITS: &str = "/v1/xorb-commits/";
const XORBS_V1: &str = "/v1/xorbs/";
const SHARDS_V2: &str = "/v2/shards";
const SHARDS_V1: &str = "/v1/shards";
const RECON_V2: &str = "/v2/reconstructions/";
const RECON_V1: &str = "/v1/reconstructions/";
const XORB_DATA: &str = "/_xorb/";

async fn setup() -> (TestServer, Proxy, HttpCas) {
    let server = TestServer::full().await;
    let proxy = Proxy::start(&server.url);
    let cas = support::client(&proxy.url);
    (server, proxy, cas)
}

#[tokio::test]
async fn transient_5xx_on_every_upload_route_are_retried() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(1);
    proxy.inject(Match::prefix(GRANTS), Fault::Status(500), 2);
    proxy.inject(Match::prefix(GRANT_PUT), Fault::Status(503), 1);
    proxy.inject(Match::prefix(COMMITS), Fault::Status(502), 1);
    proxy.inject(Match::prefix(SHARDS_V2), Fault::Status(500), 1);
    within(30, async {
        assert_eq!(
            xet_cas_conformance::text_err(cas.put_xorb(&s.xorb, s.body.clone().into()).await),
            Ok(true)
        );
        assert_eq!(
            xet_cas_conformance::text_err(cas.put_shard(s.shard.clone()).await),
            Ok(true)
        );
    })
    .await;
    assert_eq!(proxy.pending(), 0);
    assert_eq!(
        proxy.count("POST", GRANTS),
        3,
        "two failures, then the grant"
    );
    assert_eq!(proxy.count("PUT", GRANT_PUT), 2, "retried on the same URL");
    assert_eq!(
        proxy.count("POST", GRANTS),
        3,
        "a 503 on the grant URL does not ask for a new grant"
    );
    assert_eq!(proxy.count("POST", COMMITS), 2);
    assert_eq!(proxy.count("POST", SHARDS_V2), 2);
    assert_eq!(
        proxy.count("POST", SHARDS_V1),
        0,
        "5xx is not a reason to fall back"
    );
    for f in &s.files {
        assert_eq!(
            within(30, download(&cas, &f.hash, None)).await.unwrap(),
            f.data
        );
    }
}

#[tokio::test]
async fn persistent_503_gives_up_after_max_attempts_with_a_server_error() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(2);
    proxy.inject(Match::prefix(GRANTS), Fault::Status(503), 1000);
    let e = within(30, cas.put_xorb(&s.xorb, s.body.clone().into()))
        .await
        .unwrap_err();
    assert_eq!(proxy.count("POST", GRANTS), 4, "max_attempts = 4");
    // The retries are what `Proxy::repeated` names (the S3 tests rely on it).
    let repeated = proxy.repeated();
    assert!(
        repeated.len() == 1 && repeated[0].starts_with(&format!("POST {GRANTS}")),
        "{repeated:?}"
    );
    match &e {
        CasError::Server {
            status: 503,
            what,
            message,
        } => {
            assert!(what.contains(&s.xorb.to_string()), "{e}");
            assert!(message.contains("after 4 attempts"), "{e}");
        }
        other => panic!("expected Server 503, got {other:?}"),
    }
    assert!(
        e.is_retryable(),
        "a 503 stays classified as transient for the caller"
    );
}

#[tokio::test]
async fn retry_after_is_honoured_on_429() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(3);
    cas.put_xorb(&s.xorb, s.body.clone().into()).await.unwrap();
    proxy.inject(
        Match::prefix(SHARDS_V2),
        Fault::StatusRetryAfter(429, "1".into()),
        1,
    );
    let start = Instant::now();
    assert_eq!(
        xet_cas_conformance::text_err(within(30, cas.put_shard(s.shard.clone())).await),
        Ok(true)
    );
    let took = start.elapsed();
    assert!(
        took >= Duration::from_millis(950),
        "waited only {took:?} despite Retry-After: 1"
    );
    assert_eq!(proxy.count("POST", SHARDS_V2), 2);
}

#[tokio::test]
async fn other_4xx_are_not_retried() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(4);
    proxy.inject(Match::prefix(GRANTS), Fault::Status(409), 1);
    let e = within(10, cas.put_xorb(&s.xorb, s.body.clone().into()))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::InvalidXorb { .. }), "{e:?}");
    assert_eq!(proxy.count("POST", GRANTS), 1);
    proxy.inject(Match::prefix(GRANTS), Fault::Status(418), 1);
    let e = within(10, cas.put_xorb(&s.xorb, s.body.clone().into()))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::Server { status: 418, .. }), "{e:?}");
    assert!(!e.is_retryable());
    assert_eq!(proxy.count("POST", GRANTS), 2);
}

#[tokio::test]
async fn expired_grant_url_gets_a_new_grant() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(5);
    proxy.inject(Match::prefix(GRANT_PUT), Fault::Status(403), 1);
    assert_eq!(
        xet_cas_conformance::text_err(
            within(30, cas.put_xorb(&s.xorb, s.body.clone().into())).await
        ),
        Ok(true)
    );
    assert_eq!(proxy.count("POST", GRANTS), 2);
    assert_eq!(proxy.count("PUT", GRANT_PUT), 2);
    assert_eq!(proxy.count("POST", COMMITS), 1);
    assert_eq!(
        xet_cas_conformance::text_err(cas.xorb_size(&s.xorb).await),
        Ok(Some(s.body.len() as u64))
    );
}

#[tokio::test]
async fn commit_without_data_gets_a_new_grant_at_most_three_times() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(6);
    proxy.inject(Match::prefix(COMMITS), Fault::Status(404), 1);
    assert_eq!(
        xet_cas_conformance::text_err(
            within(30, cas.put_xorb(&s.xorb, s.body.clone().into())).await
        ),
        Ok(true)
    );
    assert_eq!(proxy.count("POST", GRANTS), 2);

    let s = sample(7);
    proxy.clear_log();
    proxy.inject(Match::prefix(GRANT_PUT), Fault::Status(403), 1000);
    let e = within(30, cas.put_xorb(&s.xorb, s.body.clone().into()))
        .await
        .unwrap_err();
    assert_eq!(proxy.count("POST", GRANTS), 3, "at most 3 grants per xorb");
    assert_eq!(proxy.count("POST", COMMITS), 0);
    assert!(e.to_string().contains("3 upload grants"), "{e}");
    assert_eq!(
        xet_cas_conformance::text_err(cas.xorb_size(&s.xorb).await),
        Ok(None)
    );
}

#[tokio::test]
async fn grant_upload_412_counts_as_uploaded() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(8);
    // 412 (the object is already at the grant URL) goes straight to the commit. Here the
    // proxy answered it, so no data arrived: the commit's 404 starts over with a new grant.
    proxy.inject(Match::prefix(GRANT_PUT), Fault::Status(412), 1);
    assert_eq!(
        xet_cas_conformance::text_err(
            within(30, cas.put_xorb(&s.xorb, s.body.clone().into())).await
        ),
        Ok(true)
    );
    assert_eq!(proxy.count("POST", GRANTS), 2);
    assert_eq!(proxy.count("PUT", GRANT_PUT), 2);
    assert_eq!(proxy.count("POST", COMMITS), 2);
}

#[tokio::test]
async fn server_without_grants_or_v2_gets_fallbacks_cached_per_client() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(10);
    proxy.inject(Match::prefix(GRANTS), Fault::Status(404), 1000);
    proxy.inject(Match::prefix(SHARDS_V2), Fault::Status(501), 1000);
    proxy.inject(Match::prefix(RECON_V2), Fault::Status(404), 1000);
    within(30, upload(&cas, &s)).await;
    assert_eq!(
        proxy.count("POST", XORBS_V1),
        1,
        "direct upload after a grant 404"
    );
    assert_eq!(proxy.count("POST", SHARDS_V1), 1);
    assert!(cas.lacks_v2_shards());
    for f in &s.files {
        assert_eq!(
            within(30, download(&cas, &f.hash, None)).await.unwrap(),
            f.data
        );
    }
    assert!(cas.lacks_v2_reconstructions());
    assert_eq!(
        proxy.count("GET", RECON_V2),
        1,
        "v2 asked once, then v1 only"
    );
    assert_eq!(proxy.count("GET", RECON_V1), 2);
    // Grants are asked per xorb, as the reference does.
    let s2 = sample(11);
    within(30, upload(&cas, &s2)).await;
    assert_eq!(proxy.count("POST", GRANTS), 2);
    assert_eq!(
        proxy.count("POST", SHARDS_V2),
        1,
        "v2 shards not asked again"
    );
}

#[tokio::test]
async fn missing_file_costs_v2_then_v1_and_is_not_found() {
    let (_s, proxy, cas) = setup().await;
    let h = xet_hash::chunk_hash(b"nope");
    let e = within(10, cas.reconstruction(&h, None)).await.unwrap_err();
    assert!(
        matches!(e, CasError::NotFound { kind: ObjectKind::File, hash } if hash == h),
        "{e:?}"
    );
    assert_eq!(proxy.count("GET", RECON_V2), 1);
    assert_eq!(proxy.count("GET", RECON_V1), 1);
    assert!(
        !cas.lacks_v2_reconstructions(),
        "a missing file says nothing about v2"
    );
}

#[tokio::test]
async fn presigned_403_is_url_expired_and_a_fresh_reconstruction_works() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(12);
    within(30, upload(&cas, &s)).await;
    let f = &s.files[1];
    let r = cas.reconstruction(&f.hash, None).await.unwrap();
    proxy.inject(Match::prefix(XORB_DATA), Fault::Status(403), 1);
    let e = within(10, cas.fetch_xorb_range(&r.fetches[0]))
        .await
        .unwrap_err();
    assert!(
        matches!(e, CasError::UrlExpired { hash } if hash == s.xorb),
        "{e:?}"
    );
    assert_eq!(
        proxy.count("GET", XORB_DATA),
        1,
        "403 is not retried on the same URL"
    );
    assert_eq!(
        within(30, download(&cas, &f.hash, None)).await.unwrap(),
        f.data
    );
}

#[tokio::test]
async fn broken_and_stalled_downloads_are_retried() {
    let server = TestServer::full().await;
    let proxy = Proxy::start(&server.url);
    let cfg = support::config(&proxy.url)
        .with_timeouts(Duration::from_secs(2), Duration::from_millis(400));
    let cas = HttpCas::new(cfg).unwrap();
    let s = sample(13);
    within(30, upload(&cas, &s)).await;
    let f = &s.files[0];
    proxy.clear_log();
    proxy.inject(Match::prefix(XORB_DATA), Fault::DropResponse(Cut::Half), 1);
    proxy.inject(Match::prefix(XORB_DATA), Fault::StallResponse(Cut::Half), 1);
    proxy.inject(Match::prefix(XORB_DATA), Fault::Status(500), 1);
    proxy.inject(Match::prefix(RECON_V2), Fault::StallHeaders, 1);
    let got = within(30, download(&cas, &f.hash, None)).await.unwrap();
    assert_eq!(got, f.data);
    assert_eq!(proxy.pending(), 0);
    assert_eq!(proxy.count("GET", XORB_DATA), 4);
    assert_eq!(proxy.count("GET", RECON_V2), 2);
    // Presigned requests never carry the token header; all share the session id.
    let log = proxy.log();
    assert!(
        log.iter()
            .filter(|l| l.path.starts_with(XORB_DATA))
            .all(|l| l.range().is_some())
    );
}

#[tokio::test]
async fn stalled_upload_is_cut_by_the_idle_timeout_and_retried() {
    let server = TestServer::full().await;
    let proxy = Proxy::start(&server.url);
    let cfg = support::config(&proxy.url)
        .with_timeouts(Duration::from_secs(2), Duration::from_millis(400));
    let cas = HttpCas::new(cfg).unwrap();
    let s = sample(14);
    proxy.inject(Match::prefix(COMMITS), Fault::StallHeaders, 1);
    proxy.inject(Match::prefix(SHARDS_V2), Fault::StallResponse(Cut::Half), 1);
    within(30, upload(&cas, &s)).await;
    assert_eq!(proxy.pending(), 0);
    // The stalled commit was retried on the same grant and found its data.
    assert_eq!(proxy.count("POST", GRANTS), 1);
    assert_eq!(proxy.count("POST", COMMITS), 2);
    assert_eq!(
        xet_cas_conformance::text_err(cas.xorb_size(&s.xorb).await),
        Ok(Some(s.body.len() as u64))
    );
}

#[tokio::test]
async fn ndjson_error_frames_and_truncated_streams() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(15);
    cas.put_xorb(&s.xorb, s.body.clone().into()).await.unwrap();
    let ndjson = |body: &str| Fault::Respond {
        status: 200,
        content_type: "application/x-ndjson".into(),
        body: body.to_string(),
    };
    // Retryable error frame, then a stream that ends without a terminal frame: both retried.
    proxy.inject(
        Match::prefix(SHARDS_V2),
        ndjson(concat!(
            "{\"type\":\"validating\",\"verified\":0,\"total\":1}\n",
            "{\"type\":\"error\",\"message\":\"disk busy\",\"retryable\":true}\n"
        )),
        1,
    );
    proxy.inject(
        Match::prefix(SHARDS_V2),
        ndjson("{\"type\":\"validating\",\"verified\":0,\"total\":1}\n"),
        1,
    );
    assert_eq!(
        xet_cas_conformance::text_err(within(30, cas.put_shard(s.shard.clone())).await),
        Ok(true)
    );
    assert_eq!(proxy.count("POST", SHARDS_V2), 3);

    // A final error frame: the message reaches the caller.
    proxy.inject(
        Match::prefix(SHARDS_V2),
        ndjson("{\"type\":\"error\",\"message\":\"policy says no\",\"retryable\":false}\n"),
        1,
    );
    let e = within(10, cas.put_shard(s.shard.clone()))
        .await
        .unwrap_err();
    // The server's message is the cause, as it said it.
    let refusal = match &e {
        CasError::InvalidShard { source } => source.downcast_ref::<xet_cas::Refusal>(),
        _ => None,
    };
    assert_eq!(
        refusal.map(|r| r.0.as_str()),
        Some("policy says no"),
        "{e:?}"
    );

    // Truncated for good: a network error after max attempts.
    proxy.clear_log();
    proxy.inject(
        Match::prefix(SHARDS_V2),
        ndjson("{\"type\":\"committing\",\"stage\":\"x\"}"),
        1000,
    );
    let e = within(10, cas.put_shard(s.shard.clone()))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::Network { .. }), "{e:?}");
    assert!(e.to_string().contains("without a result"), "{e}");
    assert_eq!(proxy.count("POST", SHARDS_V2), 4);
}

#[tokio::test]
async fn real_shard_rejections_name_the_problem() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(16);
    // Shard before its xorb: the server names the missing xorb.
    let e = within(10, cas.put_shard(s.shard.clone()))
        .await
        .unwrap_err();
    assert!(
        matches!(e, CasError::MissingXorb { hash } if hash == s.xorb),
        "{e:?}"
    );
    let e = within(10, cas.put_shard(Bytes::from_static(b"garbage")))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::InvalidShard { .. }), "{e:?}");
    assert_eq!(
        proxy.count("POST", SHARDS_V2),
        2,
        "rejections are not retried"
    );
}

#[tokio::test]
async fn dedup_query_failures_are_misses_without_retry() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(17);
    within(30, upload(&cas, &s)).await;
    let first_chunk = {
        // The first chunk of file 0 is dedup-eligible.
        let data = &s.files[0].data[..40_000];
        xet_hash::chunk_hash(data)
    };
    let hit = within(10, cas.dedup_shard(&first_chunk)).await.unwrap();
    assert!(hit.is_some_and(|b| !b.is_empty()));
    proxy.clear_log();
    for status in [500, 429, 503, 403, 400] {
        proxy.inject(Match::prefix("/v1/chunks/"), Fault::Status(status), 1);
        assert_eq!(
            xet_cas_conformance::text_err(within(10, cas.dedup_shard(&first_chunk)).await),
            Ok(None),
            "status {status}"
        );
    }
    assert_eq!(proxy.count("GET", "/v1/chunks/"), 5, "one request each");
    proxy.inject(
        Match::prefix("/v1/chunks/"),
        Fault::DropResponse(Cut::Half),
        1,
    );
    assert_eq!(
        xet_cas_conformance::text_err(within(10, cas.dedup_shard(&first_chunk)).await),
        Ok(None)
    );
    proxy.inject(Match::prefix("/v1/chunks/"), Fault::Status(401), 1);
    assert!(matches!(
        within(10, cas.dedup_shard(&first_chunk)).await,
        Err(CasError::Unauthorized { .. })
    ));
}

/// Writes and reads alike: a server nobody reached is a network error naming the
/// request and the address (see `a_refused_connection_before_any_answer_fails_at_once`).
#[tokio::test]
async fn unreachable_server_is_a_network_error_naming_the_request() {
    // A port nothing listens on (bound, then closed).
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let cas = support::client(&format!("http://127.0.0.1:{port}"));
    let s = sample(18);
    let e = within(30, cas.put_xorb(&s.xorb, s.body.clone().into()))
        .await
        .unwrap_err();
    match &e {
        CasError::Network { what, message, .. } => {
            assert!(
                what.contains("xorb-grants") && what.contains(&s.xorb.to_string()),
                "{e}"
            );
            assert!(
                message.contains("nothing is listening") && message.contains(&port.to_string()),
                "{e}"
            );
        }
        other => panic!("expected Network, got {other:?}"),
    }
    // Reads too: the error distinguishes the network from a server refusal.
    let e = within(30, cas.file_size(&s.files[0].hash))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::Network { .. }), "{e:?}");
}

#[tokio::test]
async fn a_fetch_from_a_server_ignoring_range_is_sliced_from_the_whole_xorb() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(19);
    within(30, upload(&cas, &s)).await;
    let r1 = cas.reconstruction(&s.files[1].hash, None).await.unwrap();
    let fetch = r1.fetches[0].clone();
    let want = s
        .body
        .slice(fetch.bytes.start as usize..fetch.bytes.end as usize);
    proxy.inject(Match::prefix(XORB_DATA), Fault::RewriteRange(None), 1);
    assert_eq!(
        within(10, cas.fetch_xorb_range(&fetch)).await.unwrap(),
        want
    );
}

#[tokio::test]
async fn ranged_reconstruction_and_range_errors() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(20);
    within(30, upload(&cas, &s)).await;
    let f = &s.files[1];
    let n = f.data.len() as u64;
    let r = ByteRange::new(70_000, 100_010);
    assert_eq!(
        within(10, download(&cas, &f.hash, Some(r))).await.unwrap(),
        &f.data[70_000..100_010]
    );
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.range() == Some("bytes=70000-100009"))
    );
    let e = within(
        10,
        cas.reconstruction(&f.hash, Some(ByteRange::new(n, n + 5))),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(
            e,
            CasError::RangeNotSatisfiable { file, start, size } if file == f.hash && start == n && size == n
        ),
        "{e:?}"
    );
    // An empty range inside the file is empty; past the end it is an error.
    assert!(
        within(10, cas.reconstruction(&f.hash, Some(ByteRange::new(5, 5))))
            .await
            .unwrap()
            .terms
            .is_empty()
    );
    assert!(
        within(
            10,
            cas.reconstruction(&f.hash, Some(ByteRange::new(n + 1, n + 1)))
        )
        .await
        .is_err()
    );
    // Ranges past the stored xorb's end (its chunk region, then its footer) are errors,
    // never short reads.
    let mut fetch = cas.reconstruction(&f.hash, None).await.unwrap().fetches[0].clone();
    let footer = cas.xorb_footer(&fetch).await.unwrap().expect("a footer");
    fetch.bytes.end = (s.body.len() + footer.to_bytes().len()) as u64 + 1;
    let e = within(10, cas.fetch_xorb_range(&fetch)).await.unwrap_err();
    assert!(matches!(e, CasError::Corrupt { .. }), "{e:?}");
}

#[tokio::test]
async fn retry_after_beyond_the_retry_budget_gives_up_at_once() {
    let (_s, proxy, cas) = setup().await;
    let h = xet_hash::chunk_hash(b"f");
    proxy.inject(
        Match::prefix("/v1/files/"),
        Fault::StatusRetryAfter(429, "100".into()),
        10,
    );
    // Waiting the 100 s asked for would outlast `within`.
    let e = within(10, cas.file_size(&h)).await.unwrap_err();
    assert!(matches!(e, CasError::Server { status: 429, .. }), "{e:?}");
    assert_eq!(proxy.count("HEAD", "/v1/files/"), 1);
}

/// Nothing has ever answered and the connection is refused: nothing listens there (a
/// wrong URL or port), so the client says so at once instead of retrying for half a
/// minute.
#[tokio::test]
async fn a_refused_connection_before_any_answer_fails_at_once() {
    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let url = format!("http://127.0.0.1:{port}");
    // A retry would sleep an hour: `within` tells "retried" from "did not".
    let hour = Duration::from_secs(3600);
    let policy = xet_client::RetryPolicy {
        max_attempts: 5,
        base_delay: hour,
        max_delay: hour,
        max_duration: 2 * hour,
    };
    let cas = HttpCas::new(support::config(&url).with_retry(policy)).unwrap();
    let file = xet_hash::MerkleHash::from_hex(&"ab".repeat(32)).unwrap();
    let err = within(60, cas.file_size(&file)).await.unwrap_err();
    let msg = err.to_string();
    assert!(matches!(err, CasError::Network { .. }), "{err:?}");
    assert!(msg.contains("nothing is listening at"), "{msg}");
    assert!(msg.contains(&url), "{msg}");
    assert!(!msg.contains("gave up"), "{msg}");
}

/// Once the server has answered, a refused connection is a server restarting: retried.
#[tokio::test]
async fn a_refused_connection_after_an_answer_is_retried() {
    let server = TestServer::full().await;
    let cas = support::client(&server.url);
    let file = xet_hash::MerkleHash::from_hex(&"ab".repeat(32)).unwrap();
    assert_eq!(cas.file_size(&file).await.unwrap(), None);
    drop(server);
    let err = within(60, cas.file_size(&file)).await.unwrap_err();
    let msg = err.to_string();
    assert!(msg.contains("gave up after 4 attempts"), "{msg}");
}

/// A server with no room for another grant (`503 grant_capacity`): the xorb goes up with
/// `POST /v1/xorbs` at once, without retrying the grant request.
#[tokio::test]
async fn grant_capacity_refusal_falls_back_to_a_direct_upload() {
    let server = TestServer::start(xet_server::ServerConfig {
        max_grants_per_token: 0,
        ..xet_server::ServerConfig::loopback()
    })
    .await;
    let proxy = Proxy::start(&server.url);
    let cas = support::client(&proxy.url);
    let s = sample(40);
    within(30, upload(&cas, &s)).await;
    assert_eq!(proxy.count("POST", GRANTS), 1, "not retried");
    assert_eq!(proxy.count("POST", XORBS_V1), 1);
    assert_eq!(proxy.count("PUT", GRANT_PUT), 0);
    for f in &s.files {
        assert_eq!(
            within(30, download(&cas, &f.hash, None)).await.unwrap(),
            f.data
        );
    }
    // The next xorb asks for a grant again (the refusal is not cached).
    let s2 = sample(41);
    within(30, upload(&cas, &s2)).await;
    assert_eq!(proxy.count("POST", GRANTS), 2);
    assert_eq!(proxy.count("POST", XORBS_V1), 2);
}

/// The grant upload refused for capacity (spill budget full): direct upload too; a plain
/// 503 on the grant URL is still retried there (see the first test).
#[tokio::test]
async fn grant_upload_capacity_refusal_falls_back_to_a_direct_upload() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(42);
    proxy.inject(
        Match::prefix(GRANT_PUT),
        Fault::Respond {
            status: 503,
            content_type: "application/json".into(),
            body: r#"{"error":"grant_capacity","reason":"spill budget full"}"#.into(),
        },
        1,
    );
    assert_eq!(
        xet_cas_conformance::text_err(
            within(30, cas.put_xorb(&s.xorb, s.body.clone().into())).await
        ),
        Ok(true)
    );
    assert_eq!(proxy.count("POST", GRANTS), 1);
    assert_eq!(proxy.count("PUT", GRANT_PUT), 1);
    assert_eq!(proxy.count("POST", COMMITS), 0);
    assert_eq!(proxy.count("POST", XORBS_V1), 1);
    assert_eq!(
        xet_cas_conformance::text_err(cas.xorb_size(&s.xorb).await),
        Ok(Some(s.body.len() as u64))
    );
}

/// A xorb's footer comes from the end of the object its URL names. A server that does
/// not serve it there (URLs signed for one range: 403 or 416; a `Range` it rewrites)
/// gives none, which is `Ok(None)`, not an error; a 5xx is retried.
#[tokio::test]
async fn a_footer_not_served_is_none_and_a_5xx_is_retried() {
    let (_s, proxy, cas) = setup().await;
    let s = sample(21);
    within(30, upload(&cas, &s)).await;
    let fetch = cas
        .reconstruction(&s.files[1].hash, None)
        .await
        .unwrap()
        .fetches[0]
        .clone();
    let footer = within(10, cas.xorb_footer(&fetch))
        .await
        .unwrap()
        .expect("served");
    assert_eq!(footer.xorb_hash, fetch.xorb);
    assert!(
        proxy
            .log()
            .iter()
            .any(|l| l.path.starts_with("/_xorb/") && l.range() == Some("bytes=-65536"))
    );
    for (fault, served) in [
        (Fault::Status(403), false),
        (Fault::Status(416), false),
        (Fault::RewriteRange(Some("bytes=0-99".into())), false),
        (Fault::Status(503), true),
    ] {
        let what = format!("{fault:?}");
        proxy.inject(Match::prefix("/_xorb/"), fault, 1);
        let got = within(30, cas.xorb_footer(&fetch)).await.unwrap();
        assert_eq!(got.is_some(), served, "{what}");
        if let Some(f) = got {
            assert_eq!(f, footer, "{what}");
        }
    }
}
