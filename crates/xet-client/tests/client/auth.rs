//! Tokens, headers and sessions against a real server with authentication on.

use crate::support;

use std::time::Duration;
use support::{TestServer, download, sample, upload, within};
use xet_cas::{Cas, CasError};
use xet_client::{ClientConfig, HttpCas, Secret, TokenRefresh, TokenSource};
use xet_server::{ServerConfig, Token};
use xet_testdata::proxy::Proxy;

const WRITE: &str = "w-secret-token-123";
const READ: &str = "r-secret-token-456";

async fn auth_server(token_ttl: Duration) -> (TestServer, Proxy) {
    let server = TestServer::start(ServerConfig {
        tokens: vec![Token::write(WRITE), Token::read(READ)],
        token_ttl,
        ..ServerConfig::loopback()
    })
    .await;
    let proxy = Proxy::start(&server.url);
    (server, proxy)
}

fn with(cfg: ClientConfig) -> HttpCas {
    HttpCas::new(cfg).expect("client")
}

#[tokio::test]
async fn token_goes_to_cas_routes_only_and_every_request_has_the_session_id() {
    let (_s, proxy) = auth_server(Duration::from_secs(3600)).await;
    let cas = with(support::config(&proxy.url).with_token(WRITE));
    let s = sample(30);
    within(30, upload(&cas, &s)).await;
    for f in &s.files {
        assert_eq!(
            within(30, download(&cas, &f.hash, None)).await.unwrap(),
            f.data
        );
    }
    let log = proxy.log();
    assert!(log.iter().any(|l| l.path.starts_with("/_grant-upload/")));
    assert!(log.iter().any(|l| l.path.starts_with("/_xorb/")));
    for l in &log {
        let presigned = l.path.starts_with("/_grant-upload/") || l.path.starts_with("/_xorb/");
        if presigned {
            assert_eq!(
                l.header("authorization"),
                None,
                "token sent to {} {}",
                l.method,
                l.path
            );
            assert!(l.query.is_some(), "presigned URL used verbatim");
        } else {
            assert_eq!(
                l.header("authorization"),
                Some(format!("Bearer {WRITE}").as_str()),
                "{}",
                l.path
            );
        }
        assert_eq!(
            l.header("x-xet-session-id"),
            Some(cas.session_id()),
            "{} {}",
            l.method,
            l.path
        );
        assert!(
            l.header("user-agent")
                .is_some_and(|u| u.starts_with("xet/")),
            "{:?}",
            l.header("user-agent")
        );
    }
    assert!(
        !log.iter().any(|l| l.path.starts_with("/v1/telemetry")),
        "no telemetry"
    );
}

#[tokio::test]
async fn unauthorized_is_immediate_and_never_shows_the_token() {
    let (_s, proxy) = auth_server(Duration::from_secs(3600)).await;
    let s = sample(31);
    for cfg in [
        support::config(&proxy.url),
        support::config(&proxy.url).with_token("wrong-token-789"),
    ] {
        proxy.clear_log();
        let cas = with(cfg);
        let e = within(10, cas.put_xorb(&s.xorb, s.body.clone().into()))
            .await
            .unwrap_err();
        assert!(matches!(e, CasError::Unauthorized { .. }), "{e:?}");
        assert!(!e.to_string().contains("wrong-token-789"), "{e}");
        assert_eq!(proxy.log().len(), 1, "401 is not retried");
        let e = within(10, cas.reconstruction(&s.files[0].hash, None))
            .await
            .unwrap_err();
        assert!(matches!(e, CasError::Unauthorized { .. }), "{e:?}");
        let e = within(10, cas.dedup_shard(&s.xorb)).await.unwrap_err();
        assert!(matches!(e, CasError::Unauthorized { .. }), "{e:?}");
    }
}

#[tokio::test]
async fn read_only_token_is_forbidden_to_upload() {
    let (_s, proxy) = auth_server(Duration::from_secs(3600)).await;
    let s = sample(32);
    let cas = with(support::config(&proxy.url).with_token(READ));
    let e = within(10, cas.put_xorb(&s.xorb, s.body.clone().into()))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::Forbidden(_)), "{e:?}");
    assert!(e.to_string().contains("xorb-grants"), "{e}");
    let e = within(10, cas.put_shard(s.shard.clone()))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::Forbidden(_)), "{e:?}");
    assert_eq!(proxy.log().len(), 2, "403 is not retried");
    assert_eq!(
        xet_cas_conformance::text_err(cas.file_size(&s.files[0].hash).await),
        Ok(None),
        "reads are allowed"
    );
}

fn refresher(proxy: &Proxy, hub_token: &str) -> TokenRefresh {
    let mut r = TokenRefresh::new(format!("{}/v1/token", proxy.url));
    r.headers.push((
        "Authorization".into(),
        Secret::new(format!("Bearer {hub_token}")),
    ));
    r.margin = Duration::ZERO;
    r
}

#[tokio::test]
async fn token_refresh_url_sets_token_and_endpoint_and_refreshes_at_expiry() {
    let (_s, proxy) = auth_server(Duration::from_secs(1)).await;
    // No endpoint: casUrl from the refresh answer provides it.
    let cfg = support::config("").with_token_source(TokenSource::Refresh(refresher(&proxy, WRITE)));
    let cas = with(cfg);
    let s = sample(33);
    within(30, upload(&cas, &s)).await;
    assert_eq!(cas.endpoint(), proxy.url);
    let first = proxy.log();
    assert_eq!(
        first[0].path, "/v1/token",
        "the refresh is the first request"
    );
    assert_eq!(first[0].header("x-xet-session-id"), Some(cas.session_id()));
    let refreshes = proxy.count("GET", "/v1/token");
    assert!(refreshes >= 1);
    tokio::time::sleep(Duration::from_millis(1100)).await;
    assert_eq!(
        xet_cas_conformance::text_err(cas.file_size(&s.files[0].hash).await),
        Ok(Some(s.files[0].data.len() as u64))
    );
    assert!(
        proxy.count("GET", "/v1/token") > refreshes,
        "refreshed after exp"
    );
    assert!(!format!("{cas:?}").contains(WRITE));
}

#[tokio::test]
async fn seeded_token_is_used_until_it_expires() {
    let (_s, proxy) = auth_server(Duration::from_secs(3600)).await;
    let mut r = refresher(&proxy, WRITE);
    let far = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 3600;
    r.initial = Some((Secret::new(WRITE), far));
    let cas = with(support::config(&proxy.url).with_token_source(TokenSource::Refresh(r.clone())));
    let h = xet_hash::chunk_hash(b"x");
    assert_eq!(
        xet_cas_conformance::text_err(within(10, cas.file_size(&h)).await),
        Ok(None)
    );
    assert_eq!(proxy.count("GET", "/v1/token"), 0);

    // Expired seed: refreshed before the first request.
    r.initial = Some((Secret::new("stale"), 1));
    let cas = with(support::config(&proxy.url).with_token_source(TokenSource::Refresh(r)));
    assert_eq!(
        xet_cas_conformance::text_err(within(10, cas.file_size(&h)).await),
        Ok(None)
    );
    assert_eq!(proxy.count("GET", "/v1/token"), 1);
}

#[tokio::test]
async fn refresh_rejected_is_unauthorized() {
    let (_s, proxy) = auth_server(Duration::from_secs(3600)).await;
    let cas = with(
        support::config("")
            .with_token_source(TokenSource::Refresh(refresher(&proxy, "bad-hub-token"))),
    );
    let e = within(10, cas.file_size(&xet_hash::chunk_hash(b"x")))
        .await
        .unwrap_err();
    assert!(matches!(e, CasError::Unauthorized { .. }), "{e:?}");
    assert!(e.to_string().contains("token refresh"), "{e}");
    assert!(!e.to_string().contains("bad-hub-token"), "{e}");
    assert_eq!(proxy.count("GET", "/v1/token"), 1);
}
