//! Xorb ranges streamed as they arrive (`Cas::stream_xorb_range`), through a proxy in
//! front of a real server: breaks resume with the rest of the range, and what cannot be
//! resumed ends in the error it is.

use crate::support;

use std::time::Duration;
use support::{TestServer, sample, upload, within};
use xet_cas::{ByteRange, Cas, CasError, ChunkRange, XorbFetch};
use xet_client::HttpCas;
use xet_testdata::proxy::{Cut, Fault, Match, Proxy};

const XORB_DATA: &str = "/_xorb/";

async fn setup() -> (TestServer, Proxy, HttpCas, support::Sample) {
    let server = TestServer::full().await;
    let proxy = Proxy::start(&server.url);
    let cfg = support::config(&proxy.url)
        .with_timeouts(Duration::from_secs(2), Duration::from_millis(400));
    let cas = HttpCas::new(cfg).unwrap();
    let s = sample(21);
    within(30, upload(&cas, &s)).await;
    (server, proxy, cas, s)
}

/// A fetch of bytes `a..b` of the sample's xorb, with the presigned URL the server gave.
async fn fetch(cas: &HttpCas, s: &support::Sample, a: u64, b: u64) -> XorbFetch {
    let r = cas.reconstruction(&s.files[0].hash, None).await.unwrap();
    XorbFetch {
        xorb: s.xorb,
        chunks: ChunkRange::new(0, 6),
        bytes: ByteRange::new(a, b),
        url: r.fetches[0].url.clone(),
    }
}

/// Everything the stream yields, or its error with the bytes it yielded first.
async fn collect(cas: &HttpCas, f: &XorbFetch) -> Result<Vec<u8>, (CasError, usize)> {
    let mut stream = cas.stream_xorb_range(f).await.map_err(|e| (e, 0))?;
    let mut out = Vec::new();
    loop {
        match stream.next().await {
            Ok(Some(piece)) => {
                assert!(!piece.is_empty());
                out.extend_from_slice(&piece);
            }
            Ok(None) => return Ok(out),
            Err(e) => return Err((e, out.len())),
        }
    }
}

/// The `(start, end)` of every range the proxy saw asked for, in order.
fn asked(proxy: &Proxy) -> Vec<(u64, u64)> {
    proxy
        .log()
        .iter()
        .filter(|l| l.path.starts_with(XORB_DATA))
        .map(|l| {
            let r = l.range().expect("a Range header");
            let (a, b) = r
                .strip_prefix("bytes=")
                .and_then(|r| r.split_once('-'))
                .expect("one range");
            (a.parse().unwrap(), b.parse().unwrap())
        })
        .collect()
}

#[tokio::test]
async fn a_dropped_or_stalled_body_resumes_with_the_rest_of_the_range() {
    let (_s, proxy, cas, s) = setup().await;
    let n = s.body.len() as u64;
    let f = fetch(&cas, &s, 0, n).await;
    proxy.clear_log();
    proxy.inject(Match::prefix(XORB_DATA), Fault::DropResponse(Cut::Half), 1);
    proxy.inject(Match::prefix(XORB_DATA), Fault::StallResponse(Cut::Half), 1);
    let got = within(30, collect(&cas, &f)).await.unwrap();
    assert!(got == s.body, "the streamed bytes differ from the xorb");
    assert_eq!(proxy.pending(), 0);
    // Each request after a break starts where the delivered bytes end; none starts over.
    let ranges = asked(&proxy);
    assert_eq!(ranges.len(), 3, "{ranges:?}");
    assert_eq!(ranges[0], (0, n - 1));
    assert_eq!(ranges[1], (n / 2, n - 1), "after half was delivered");
    let rest = n - n / 2;
    assert_eq!(ranges[2], (n / 2 + rest / 2, n - 1));
}

#[tokio::test]
async fn a_sub_range_streams_exactly_its_bytes_also_from_a_server_ignoring_range() {
    let (_s, proxy, cas, s) = setup().await;
    let (a, b) = (1_000u64, s.body.len() as u64 - 777);
    let f = fetch(&cas, &s, a, b).await;
    let want = &s.body[a as usize..b as usize];
    assert!(within(30, collect(&cas, &f)).await.unwrap() == want);
    // The server answers 200 with the whole object: the range is cut out of it.
    proxy.inject(Match::prefix(XORB_DATA), Fault::RewriteRange(None), 1);
    assert!(within(30, collect(&cas, &f)).await.unwrap() == want);
    assert_eq!(proxy.pending(), 0);
}

#[tokio::test]
async fn an_expired_url_on_the_resumed_request_is_url_expired() {
    let (_s, proxy, cas, s) = setup().await;
    let n = s.body.len() as u64;
    let f = fetch(&cas, &s, 0, n).await;
    proxy.inject(Match::prefix(XORB_DATA), Fault::DropResponse(Cut::Half), 1);
    proxy.inject(Match::prefix(XORB_DATA), Fault::Status(403), 1);
    let (e, delivered) = within(30, collect(&cas, &f)).await.unwrap_err();
    assert!(
        matches!(e, CasError::UrlExpired { hash } if hash == s.xorb),
        "{e:?}"
    );
    assert_eq!(
        delivered as u64,
        n / 2,
        "the bytes before the break were handed over"
    );
}

#[tokio::test]
async fn a_resumed_request_that_keeps_failing_gives_up_within_the_policy() {
    let (_s, proxy, cas, s) = setup().await;
    let n = s.body.len() as u64;
    let f = fetch(&cas, &s, 0, n).await;
    proxy.clear_log();
    proxy.inject(Match::prefix(XORB_DATA), Fault::DropResponse(Cut::Half), 1);
    proxy.inject(Match::prefix(XORB_DATA), Fault::Status(503), 100);
    let (e, delivered) = within(30, collect(&cas, &f)).await.unwrap_err();
    assert!(
        matches!(&e, CasError::Server { status: 503, message, .. } if message.contains("4 attempts")),
        "{e:?}"
    );
    assert_eq!(delivered as u64, n / 2);
    // The policy's 4 attempts since the last progress: the request that broke, and
    // three at the rest.
    assert_eq!(proxy.count("GET", XORB_DATA), 4);
}

#[tokio::test]
async fn an_answer_for_other_bytes_is_corrupt() {
    let (_s, proxy, cas, s) = setup().await;
    let f = fetch(&cas, &s, 100, 5_000).await;
    // The server is asked for other bytes and answers 206 for those.
    proxy.inject(
        Match::prefix(XORB_DATA),
        Fault::RewriteRange(Some("bytes=0-4899".into())),
        1,
    );
    let (e, _) = within(30, collect(&cas, &f)).await.unwrap_err();
    assert!(
        matches!(&e, CasError::Corrupt { message, .. } if message.contains("got from 0")),
        "{e:?}"
    );
    // A longer answer than asked for.
    proxy.inject(
        Match::prefix(XORB_DATA),
        Fault::RewriteRange(Some("bytes=100-5999".into())),
        1,
    );
    let (e, _) = within(30, collect(&cas, &f)).await.unwrap_err();
    assert!(matches!(e, CasError::Corrupt { .. }), "{e:?}");
}
