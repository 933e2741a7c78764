//! Presigned xorb data URLs: ranges, multipart answers, signatures and hosts.

use crate::common::*;
use crate::support::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use xet_cas::wire::{ReconstructionV2, TokenRefresh};
use xet_server::ServerConfig;

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
    let region = &f.xorb_body;
    assert_eq!(decode(region), f.data);

    // No Range: 200, the whole stored xorb: the chunk region, then its footer.
    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let body = &resp.bytes().await.unwrap().to_vec();
    let n = body.len();
    let (footer, region_len) = xet_xorb::parse_footer(body, &xet_xorb::Limits::PROTOCOL).unwrap();
    assert_eq!(body[..region_len], region[..]);
    assert_eq!(footer.xorb_hash, f.xorb);
    assert_eq!(footer.body_len(), region.len() as u64);

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

/// A store that gives no footers (`Cas::xorb_footer`'s default).
struct NoFooters(std::sync::Arc<xet_store::MemoryStore>);

#[async_trait::async_trait]
impl xet_cas::Cas for NoFooters {
    async fn put_xorb(
        &self,
        hash: &xet_hash::MerkleHash,
        body: xet_cas::XorbBody,
    ) -> xet_cas::Result<bool> {
        self.0.put_xorb(hash, body).await
    }
    async fn xorb_size(&self, hash: &xet_hash::MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.0.xorb_size(hash).await
    }
    async fn put_shard(&self, shard: bytes::Bytes) -> xet_cas::Result<bool> {
        self.0.put_shard(shard).await
    }
    async fn file_size(&self, file: &xet_hash::MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.0.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &xet_hash::MerkleHash,
        range: Option<xet_cas::ByteRange>,
    ) -> xet_cas::Result<xet_cas::Reconstruction> {
        self.0.reconstruction(file, range).await
    }
    async fn fetch_xorb_range(&self, fetch: &xet_cas::XorbFetch) -> xet_cas::Result<bytes::Bytes> {
        self.0.fetch_xorb_range(fetch).await
    }
    async fn dedup_shard(
        &self,
        chunk: &xet_hash::MerkleHash,
    ) -> xet_cas::Result<Option<bytes::Bytes>> {
        self.0.dedup_shard(chunk).await
    }
}

/// Over a CAS that gives no footers, a xorb URL serves the chunk region alone: every
/// range a reconstruction lists, and no footer.
#[tokio::test]
async fn without_footers_a_xorb_url_serves_the_chunk_region() {
    let f = fixture(22, SIZES);
    let inner = memory_store().await;
    put_fixture(inner.as_ref(), &f).await;
    let s = TestServer::start(
        ServerConfig::default(),
        std::sync::Arc::new(NoFooters(inner)),
    )
    .await;
    let c = client();
    let url = xorb_data_url(&c, &s, &f).await;
    let region = &f.xorb_body;
    let resp = c.get(&url).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap(), region[..]);
    let n = region.len();
    let resp = c
        .get(&url)
        .header("range", "bytes=-5")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 206);
    assert_eq!(
        resp.headers()["content-range"],
        format!("bytes {}-{}/{n}", n - 5, n - 1).as_str()
    );
    assert_eq!(resp.bytes().await.unwrap(), region[n - 5..]);
}
