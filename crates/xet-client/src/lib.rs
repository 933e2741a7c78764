//! `HttpCas`: the [`xet_cas::Cas`] contract over HTTP, against any server speaking the
//! CAS API as the reference client hf_xet 1.8.0 does (`cas-http-api.md`): our
//! `xet serve`, or Hugging Face's CAS.
//!
//! - Bearer token on CAS routes only; never on presigned or grant URLs, never logged.
//! - One `X-Xet-Session-Id` (uuid v7) on every request of a client instance.
//! - Retries with exponential backoff and jitter on connection errors, stalls, broken
//!   bodies, 5xx and 429 (`Retry-After` honoured); never on other 4xx. 401 is final.
//! - Xorbs go through upload grants, shards through `/v2/shards`, reconstructions
//!   through `/v2/reconstructions`, each falling back to the v1 route when the server
//!   lacks the newer one. No telemetry is sent.
//!
//! # What each answer does
//!
//! "retry" = exponential backoff with jitter (or `Retry-After` seconds) up to
//! [`RetryPolicy`]'s attempts and total duration; then the last error is returned
//! (`Network` for connection/stall/body failures, `Server` for 5xx/429).
//! Connection errors, idle-timeout stalls and broken bodies are retried everywhere
//! except on the dedup query.
//!
//! | request | 2xx | 404 | 401 | 403 | other | 429/5xx |
//! |---|---|---|---|---|---|---|
//! | `POST /v1/xorb-grants` | 201 grant; 200 → `Ok(false)` | direct `POST /v1/xorbs` | `Unauthorized` | `Forbidden` | 400/409/413/422 `InvalidXorb`, else `Server` | retry |
//! | grant URL (no token) | uploaded; 412 = uploaded | `Server` | `Unauthorized` | new grant (≤ 3 per xorb) | 400/413/422 `InvalidXorb` | retry same URL |
//! | `POST /v1/xorb-commits` | `{"was_inserted"}` if present, else `true` | new grant (≤ 3) | `Unauthorized` | `Forbidden` | as grants | retry |
//! | `POST /v1/xorbs` | `{"was_inserted"}` | `Server` (no upload route) | `Unauthorized` | `Forbidden` | as grants | retry |
//! | `POST /v2/shards` | NDJSON until `result` (`was_inserted`/`result` if present) or `error` (retryable → retry, else `InvalidShard`/`MissingXorb`); no terminal frame → retry | `/v1/shards` (remembered) | `Unauthorized` | `Forbidden` | 400/409/413/422 `InvalidShard`/`MissingXorb`; 501 → `/v1/shards` | retry |
//! | `POST /v1/shards` | `{"result":1\|0}` | `Server` | `Unauthorized` | `Forbidden` | as v2 | retry |
//! | `GET /v2/reconstructions` | v2 JSON | `/v1` (remembered once v1 answers) | `Unauthorized` | `Forbidden` | 416 `RangeNotSatisfiable` (size from `Content-Range: bytes */N`); 501 → v1 | retry |
//! | `GET /v1/reconstructions` | v1 JSON | `NotFound` | `Unauthorized` | `Forbidden` | 416 as v2 | retry |
//! | presigned xorb URL (no token) | 206 (or 200 of exactly the range, or the whole object, sliced); wrong length → `Corrupt` | `NotFound` | `UrlExpired` | `UrlExpired` | 416 `Server` | retry same URL |
//! | `GET /v1/chunks` (one try) | shard bytes | `None` | `Unauthorized` | `None` | `None` | `None` |
//! | `HEAD /v1/xorbs`, `HEAD /v1/files` | `Content-Length` | `None` | `Unauthorized` | `Forbidden` | `Server` | retry |

mod config;
mod multipart;
mod stream;
mod transport;
mod util;

pub use config::{ClientConfig, LegacyOptions, RetryPolicy, Secret, TokenRefresh, TokenSource};
pub use multipart::{Part, byteranges_boundary, parse_byteranges};
pub use util::{join_url, redact_url};
pub use xet_cas::wire::crc64_nvme;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use reqwest::header::{
    CONTENT_LENGTH, CONTENT_RANGE, CONTENT_TYPE, HeaderName, HeaderValue, RANGE,
};
use reqwest::{Method, Response};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use transport::{Fail, Progress, Rejection, Transport, network, progress_body, progress_pieces};
use xet_cas::wire::{
    Checksum, Grant, GrantRequest, ReconstructionV1, ReconstructionV2, ShardResultV1, WasInserted,
};
use xet_cas::{
    ByteRange, Cas, CasError, ObjectKind, RangeStream, Reconstruction, Result, XorbFetch,
    XorbPieces, routes,
};
use xet_hash::MerkleHash;

/// At most this many grants are requested for one xorb (`client.max_xorb_grant_attempts`).
pub const MAX_GRANTS_PER_XORB: u32 = 3;
/// Parallel GETs when a multi-range answer has to be completed with single-range ones.
const FALLBACK_CONCURRENCY: usize = 8;
/// Ranges per multi-range GET (servers limit them; ours to 256).
const MAX_RANGES_PER_REQUEST: usize = 64;

/// A client that cannot be set up (bad endpoint URL, TLS initialisation).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError(pub String);

impl std::fmt::Display for ConfigError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

/// The CAS over HTTP. Cheap to clone; clones share connections, token and session id.
#[derive(Clone)]
pub struct HttpCas {
    t: Arc<Transport>,
    state: Arc<Discovered>,
}

/// What the client learned about the server.
#[derive(Default)]
struct Discovered {
    no_v2_shards: AtomicBool,
    no_v2_reconstructions: AtomicBool,
}

impl std::fmt::Debug for HttpCas {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpCas")
            .field("endpoint", &redact_url(&self.t.endpoint()))
            .field("session_id", &self.t.session_id)
            .field("token", &self.t.cfg.token)
            .field("legacy", &self.t.cfg.legacy)
            .finish()
    }
}

enum GrantAnswer {
    Grant(Grant),
    Exists,
    Unsupported,
}

enum GrantUpload {
    Done,
    Rejected { status: u16, reason: String },
}

enum Commit {
    Done(bool),
    NoData(String),
}

impl HttpCas {
    pub fn new(cfg: ClientConfig) -> std::result::Result<Self, ConfigError> {
        Ok(HttpCas {
            t: Arc::new(Transport::new(cfg).map_err(ConfigError)?),
            state: Arc::default(),
        })
    }

    /// The `X-Xet-Session-Id` sent on every request of this client.
    pub fn session_id(&self) -> &str {
        &self.t.session_id
    }

    /// The CAS base URL in use (a token refresh may have changed it).
    pub fn endpoint(&self) -> String {
        self.t.endpoint()
    }

    pub fn config(&self) -> &ClientConfig {
        &self.t.cfg
    }

    // ---- xorbs ----

    async fn request_grant(&self, hash: &MerkleHash, len: u64, crc: u64) -> Result<GrantAnswer> {
        let path = routes::xorb_grant(hash);
        let what = format!("POST {path}");
        let req = GrantRequest {
            length: len,
            checksum: Checksum {
                algo: "crc64nvme".into(),
                value: crc.to_string(),
            },
        };
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self.t.cas(Method::POST, &path).await?.json(&req);
                let resp = self.t.send(rb, &what, &p).await?;
                let status = resp.status().as_u16();
                match status {
                    200..=299 => {
                        let body = self.t.read_body(resp, &what, &p).await?;
                        if status == 200 {
                            return Ok(GrantAnswer::Exists);
                        }
                        match serde_json::from_slice::<Grant>(&body) {
                            Ok(g) => Ok(GrantAnswer::Grant(g)),
                            Err(_) if status != 201 => Ok(GrantAnswer::Exists),
                            Err(e) => Err(Fail::Fatal(CasError::Corrupt {
                                what: what.clone(),
                                message: format!("the grant is not {{\"id\",\"method\",\"url\",\"headers\"}}: {e}"),
                            })),
                        }
                    }
                    404 => {
                        let _ = self.t.rejection(resp, &p).await;
                        Ok(GrantAnswer::Unsupported)
                    }
                    _ => Err(xorb_rejection(hash, self.t.rejection(resp, &p).await, &what)),
                }
            })
            .await
    }

    async fn upload_to_grant(
        &self,
        hash: &MerkleHash,
        grant: &Grant,
        body: &XorbPieces,
    ) -> Result<GrantUpload> {
        let what = format!(
            "{} {} (grant {} for xorb {hash})",
            grant.method,
            redact_url(&grant.url),
            grant.id
        );
        let method =
            Method::from_bytes(grant.method.as_bytes()).map_err(|_| CasError::Corrupt {
                what: what.clone(),
                message: format!(
                    "the grant's method {:?} is not an HTTP method",
                    grant.method
                ),
            })?;
        let mut headers = Vec::new();
        for (k, v) in &grant.headers {
            let bad = || CasError::Corrupt {
                what: what.clone(),
                message: format!("the grant's header {k:?} is invalid"),
            };
            let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad())?;
            if name == CONTENT_LENGTH {
                if v.trim().parse::<u64>().ok() != Some(body.len()) {
                    return Err(CasError::Corrupt {
                        what,
                        message: format!(
                            "the grant expects Content-Length {v} but the xorb is {} bytes",
                            body.len()
                        ),
                    });
                }
                continue;
            }
            headers.push((name, HeaderValue::from_str(v).map_err(|_| bad())?));
        }
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let mut rb = self.t.external(method.clone(), &grant.url);
                for (k, v) in &headers {
                    rb = rb.header(k, v);
                }
                let rb = rb
                    .header(CONTENT_LENGTH, body.len())
                    .body(progress_pieces(body.pieces().to_vec(), p.clone()));
                let resp = self.t.send(rb, &what, &p).await?;
                let status = resp.status().as_u16();
                if resp.status().is_success() {
                    self.t.read_body(resp, &what, &p).await?;
                    return Ok(GrantUpload::Done);
                }
                let rej = self.t.rejection(resp, &p).await;
                match status {
                    // The object is already at the grant's URL.
                    412 => Ok(GrantUpload::Done),
                    // Expired or refused grant: ask for a new one.
                    403 => Ok(GrantUpload::Rejected {
                        status,
                        reason: rej.reason(),
                    }),
                    400 | 413 | 422 => Err(Fail::Fatal(CasError::InvalidXorb {
                        hash: *hash,
                        reason: rej.reason(),
                    })),
                    _ => Err(rej.into_fail(&what)),
                }
            })
            .await
    }

    async fn commit_grant(&self, hash: &MerkleHash, id: &str) -> Result<Commit> {
        let path = routes::xorb_commit(hash, id);
        let what = format!("POST {path}");
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self.t.cas(Method::POST, &path).await?.body(Vec::new());
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    let body = self.t.read_body(resp, &what, &p).await?;
                    // The body is ignored by the reference; ours says whether it was new.
                    let inserted = serde_json::from_slice::<WasInserted>(&body)
                        .map(|w| w.was_inserted)
                        .unwrap_or(true);
                    return Ok(Commit::Done(inserted));
                }
                let rej = self.t.rejection(resp, &p).await;
                match rej.status {
                    404 => Ok(Commit::NoData(rej.reason())),
                    _ => Err(xorb_rejection(hash, rej, &what)),
                }
            })
            .await
    }

    async fn put_xorb_direct(&self, hash: &MerkleHash, body: XorbPieces) -> Result<bool> {
        let path = routes::xorb(hash);
        let what = format!("POST {path}");
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self
                    .t
                    .cas(Method::POST, &path)
                    .await?
                    .header(CONTENT_LENGTH, body.len())
                    .body(progress_pieces(body.pieces().to_vec(), p.clone()));
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    let b = self.t.read_body(resp, &what, &p).await?;
                    return serde_json::from_slice::<WasInserted>(&b).map(|w| w.was_inserted).map_err(|e| {
                        Fail::Fatal(CasError::Corrupt {
                            what: what.clone(),
                            message: format!("expected {{\"was_inserted\": bool}}: {e}"),
                        })
                    });
                }
                let rej = self.t.rejection(resp, &p).await;
                if rej.status == 404 {
                    return Err(Fail::Fatal(CasError::Server {
                        status: 404,
                        what: what.clone(),
                        message: format!(
                            "{}; the server accepts neither upload grants nor direct xorb uploads: check the endpoint URL",
                            rej.reason()
                        ),
                    }));
                }
                Err(xorb_rejection(hash, rej, &what))
            })
            .await
    }

    // ---- shards ----

    /// `Some(inserted)`, or `None` when the server has no `/v2/shards`.
    async fn put_shard_v2(&self, shard: &Bytes) -> Result<Option<bool>> {
        let what = format!("POST {}", routes::SHARDS_V2);
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self
                    .t
                    .cas(Method::POST, routes::SHARDS_V2)
                    .await?
                    .header(CONTENT_LENGTH, shard.len())
                    .body(progress_body(shard.clone(), p.clone()));
                let mut resp = self.t.send(rb, &what, &p).await?;
                if !resp.status().is_success() {
                    let rej = self.t.rejection(resp, &p).await;
                    return match rej.status {
                        404 | 501 => Ok(None),
                        _ => Err(shard_rejection(rej, &what)),
                    };
                }
                let mut buf = BytesMut::new();
                loop {
                    let chunk = self.t.chunk(&mut resp, &what, &p).await?;
                    let ended = chunk.is_none();
                    if let Some(c) = chunk {
                        buf.extend_from_slice(&c);
                    } else if !buf.is_empty() && !buf.ends_with(b"\n") {
                        buf.extend_from_slice(b"\n");
                    }
                    while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                        let line = buf.split_to(nl + 1);
                        if let Some(outcome) = shard_frame(&line, &what) {
                            return outcome.map(Some);
                        }
                    }
                    if ended {
                        return Err(Fail::retry(network(
                            &what,
                            "the progress stream ended without a result or error frame",
                        )));
                    }
                }
            })
            .await
    }

    async fn put_shard_v1(&self, shard: &Bytes) -> Result<bool> {
        let what = format!("POST {}", routes::SHARDS_V1);
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self
                    .t
                    .cas(Method::POST, routes::SHARDS_V1)
                    .await?
                    .header(CONTENT_LENGTH, shard.len())
                    .body(progress_body(shard.clone(), p.clone()));
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    let b = self.t.read_body(resp, &what, &p).await?;
                    return serde_json::from_slice::<ShardResultV1>(&b).map(|r| r.result == 1).map_err(|e| {
                        Fail::Fatal(CasError::Corrupt {
                            what: what.clone(),
                            message: format!("expected {{\"result\": 0|1}}: {e}"),
                        })
                    });
                }
                let rej = self.t.rejection(resp, &p).await;
                if rej.status == 404 {
                    return Err(Fail::Fatal(CasError::Server {
                        status: 404,
                        what: what.clone(),
                        message: format!(
                            "{}; the server has neither /v2/shards nor /v1/shards: check the endpoint URL",
                            rej.reason()
                        ),
                    }));
                }
                Err(shard_rejection(rej, &what))
            })
            .await
    }

    // ---- reconstructions ----

    /// `Some`, or `None` when the server answered 404/501 (`true` for 501).
    async fn reconstruction_at(
        &self,
        file: &MerkleHash,
        range: Option<&ByteRange>,
        v2: bool,
    ) -> Result<std::result::Result<Reconstruction, u16>> {
        let path = if v2 {
            routes::reconstruction_v2(file)
        } else {
            routes::reconstruction_v1(file)
        };
        let what = format!("GET {path}");
        let header = range.and_then(util::range_header);
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let mut rb = self.t.cas(Method::GET, &path).await?;
                if let Some(h) = &header {
                    rb = rb.header(RANGE, h);
                }
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    let body = self.t.read_body(resp, &what, &p).await?;
                    let parsed = if v2 {
                        serde_json::from_slice::<ReconstructionV2>(&body)
                            .map_err(|e| e.to_string())
                            .and_then(|w| Reconstruction::from_v2(&w))
                    } else {
                        serde_json::from_slice::<ReconstructionV1>(&body)
                            .map_err(|e| e.to_string())
                            .and_then(|w| Reconstruction::from_v1(&w))
                    };
                    let r = parsed.map_err(|e| {
                        Fail::Fatal(CasError::Corrupt {
                            what: what.clone(),
                            message: format!("bad reconstruction: {e}"),
                        })
                    })?;
                    if let Some(t) = r.terms.iter().find(|t| r.fetch_for(t).is_none()) {
                        return Err(Fail::Fatal(CasError::Corrupt {
                            what: what.clone(),
                            message: format!(
                                "no fetch covers chunks {}..{} of xorb {}",
                                t.chunks.start, t.chunks.end, t.xorb
                            ),
                        }));
                    }
                    return Ok(Ok(r));
                }
                let rej = self.t.rejection(resp, &p).await;
                match rej.status {
                    404 | 501 => Ok(Err(rej.status)),
                    416 => {
                        let size = rej
                            .headers
                            .get(CONTENT_RANGE)
                            .and_then(|v| v.to_str().ok())
                            .and_then(util::parse_unsatisfied_range)
                            .unwrap_or(0);
                        Err(Fail::Fatal(CasError::RangeNotSatisfiable {
                            file: *file,
                            start: range.map(|r| r.start).unwrap_or(0),
                            size,
                        }))
                    }
                    _ => Err(rej.into_fail(&what)),
                }
            })
            .await
    }

    // ---- xorb data ----

    fn fetch_what(fetch: &XorbFetch, url: &str) -> String {
        format!(
            "GET {} (xorb {} bytes {}..{})",
            redact_url(url),
            fetch.xorb,
            fetch.bytes.start,
            fetch.bytes.end
        )
    }

    /// Classifies a failed presigned GET.
    fn fetch_rejection(xorb: &MerkleHash, rej: Rejection, what: &str) -> Fail {
        match rej.status {
            403 => Fail::Fatal(CasError::UrlExpired { hash: *xorb }),
            404 => Fail::Fatal(CasError::NotFound {
                kind: ObjectKind::Xorb,
                hash: *xorb,
            }),
            416 => Fail::Fatal(CasError::Server {
                status: 416,
                what: what.to_string(),
                message: format!("{}; the range lies past the end of the xorb", rej.reason()),
            }),
            // A 401 here is not about our token (none is sent): the URL is unusable.
            401 => Fail::Fatal(CasError::UrlExpired { hash: *xorb }),
            _ => rej.into_fail(what),
        }
    }

    /// Several ranges of xorbs in as few requests as possible: fetches sharing a URL
    /// go out as one multi-range GET (`multipart/byteranges`). Ranges the answer does
    /// not cover (a server answering with a single part, or ignoring multi-range) are
    /// fetched one by one. The result is in the order of `fetches`.
    pub async fn fetch_xorb_ranges(&self, fetches: &[XorbFetch]) -> Result<Vec<Bytes>> {
        let mut out: Vec<Option<Bytes>> = vec![None; fetches.len()];
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (i, f) in fetches.iter().enumerate() {
            if f.bytes.is_empty() {
                out[i] = Some(Bytes::new());
                continue;
            }
            let url = f.url.as_deref().ok_or_else(|| no_url(f))?;
            match groups.iter_mut().find(|(u, _)| u == url) {
                Some((_, v)) => v.push(i),
                None => groups.push((url.to_string(), vec![i])),
            }
        }
        for (url, idx) in &groups {
            if idx.len() < 2 {
                continue;
            }
            let mut ranges: Vec<ByteRange> = idx.iter().map(|&i| fetches[i].bytes).collect();
            ranges.sort_by_key(|r| (r.start, r.end));
            ranges.dedup();
            let mut parts = Vec::new();
            for batch in ranges.chunks(MAX_RANGES_PER_REQUEST) {
                parts.extend(self.multi_range_get(url, &fetches[idx[0]], batch).await?);
            }
            for &i in idx {
                let want = fetches[i].bytes;
                out[i] = parts.iter().find_map(|(r, data)| {
                    (r.start <= want.start && want.end <= r.end).then(|| {
                        data.slice((want.start - r.start) as usize..(want.end - r.start) as usize)
                    })
                });
            }
        }
        let missing: Vec<usize> = (0..fetches.len()).filter(|&i| out[i].is_none()).collect();
        let got: Vec<Result<(usize, Bytes)>> = futures_util::stream::iter(missing)
            .map(|i| async move { self.fetch_xorb_range(&fetches[i]).await.map(|b| (i, b)) })
            .buffered(FALLBACK_CONCURRENCY)
            .collect()
            .await;
        for r in got {
            let (i, b) = r?;
            out[i] = Some(b);
        }
        Ok(out
            .into_iter()
            .map(|b| b.expect("every range fetched"))
            .collect())
    }

    /// One GET with several ranges. Returns the byte ranges (end-exclusive) the answer
    /// holds, with their data; possibly fewer than asked.
    async fn multi_range_get(
        &self,
        url: &str,
        any: &XorbFetch,
        ranges: &[ByteRange],
    ) -> Result<Vec<(ByteRange, Bytes)>> {
        let header = util::multi_range_header(ranges).expect("non-empty ranges");
        let what = format!(
            "GET {} (xorb {}, {} ranges)",
            redact_url(url),
            any.xorb,
            ranges.len()
        );
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self.t.external(Method::GET, url).header(RANGE, &header);
                let resp = self.t.send(rb, &what, &p).await?;
                let status = resp.status().as_u16();
                if !resp.status().is_success() {
                    let rej = self.t.rejection(resp, &p).await;
                    if matches!(rej.status, 400 | 416) {
                        // Multi-range refused: the single-range GETs report what is wrong.
                        tracing::debug!(%what, status = rej.status, "multi-range GET refused: fetching ranges one by one");
                        return Ok(Vec::new());
                    }
                    return Err(Self::fetch_rejection(&any.xorb, rej, &what));
                }
                let ctype = header_str(&resp, CONTENT_TYPE);
                let crange = header_str(&resp, CONTENT_RANGE);
                let body = self.t.read_body(resp, &what, &p).await?;
                if status == 206 {
                    if let Some(boundary) = ctype.as_deref().and_then(byteranges_boundary) {
                        let parts = parse_byteranges(&body, &boundary).map_err(|e| {
                            Fail::Fatal(CasError::Corrupt {
                                what: what.clone(),
                                message: format!("bad multipart answer: {e}"),
                            })
                        })?;
                        return Ok(parts
                            .into_iter()
                            .map(|p| (ByteRange::new(p.start, p.end + 1), p.data))
                            .collect());
                    }
                    // A single part: usable if its Content-Range says where it is.
                    return Ok(
                        match crange.as_deref().and_then(util::parse_content_range) {
                            Some((a, b, _)) if b + 1 - a == body.len() as u64 => {
                                vec![(ByteRange::new(a, b + 1), body)]
                            }
                            _ => Vec::new(),
                        },
                    );
                }
                // 200: the whole object.
                Ok(vec![(ByteRange::new(0, body.len() as u64), body)])
            })
            .await
    }

    /// Whether `/v2/shards` is known to be missing on this server.
    pub fn lacks_v2_shards(&self) -> bool {
        self.state.no_v2_shards.load(Ordering::Relaxed)
    }

    /// Whether `/v2/reconstructions` is known to be missing on this server.
    pub fn lacks_v2_reconstructions(&self) -> bool {
        self.state.no_v2_reconstructions.load(Ordering::Relaxed)
    }

    async fn head_size(&self, path: &str) -> Result<Option<u64>> {
        let what = format!("HEAD {path}");
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self.t.cas(Method::HEAD, path).await?;
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    return Transport::content_length(&resp).map(Some).ok_or_else(|| {
                        Fail::Fatal(CasError::Corrupt {
                            what: what.clone(),
                            message: "no Content-Length in the answer".into(),
                        })
                    });
                }
                let rej = self.t.rejection(resp, &p).await;
                match rej.status {
                    404 => Ok(None),
                    _ => Err(rej.into_fail(&what)),
                }
            })
            .await
    }
}

fn header_str(resp: &Response, name: HeaderName) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn no_url(f: &XorbFetch) -> CasError {
    CasError::Corrupt {
        what: format!("fetch of xorb {}", f.xorb),
        message: "the reconstruction gave no URL for it; ask the HTTP CAS for the reconstruction"
            .into(),
    }
}

/// A refused xorb upload: 400/409/413/422 mean the xorb itself was refused.
fn xorb_rejection(hash: &MerkleHash, rej: Rejection, what: &str) -> Fail {
    match rej.status {
        400 | 409 | 413 | 422 => {
            let reason = rej.reason();
            // Our server's reason is the CasError text: do not say "rejected" twice.
            let prefix = format!("xorb {hash} rejected: ");
            let reason = reason
                .strip_prefix(&prefix)
                .map(str::to_string)
                .unwrap_or(reason);
            Fail::Fatal(CasError::InvalidXorb {
                hash: *hash,
                reason,
            })
        }
        _ => rej.into_fail(what),
    }
}

/// A refused shard: missing xorbs are told apart from other validation failures.
fn shard_error(kind: Option<&str>, reason: String) -> CasError {
    // Our server names the kind; otherwise go by the message.
    let missing = match kind {
        Some(k) => k.contains("missing"),
        None => {
            reason.contains("not stored") || reason.to_ascii_lowercase().contains("missing xorb")
        }
    };
    match util::find_hash(&reason) {
        Some(hash) if missing => CasError::MissingXorb { hash },
        _ => {
            let reason = reason
                .strip_prefix("shard rejected: ")
                .map(str::to_string)
                .unwrap_or(reason);
            CasError::InvalidShard { reason }
        }
    }
}

fn shard_rejection(rej: Rejection, what: &str) -> Fail {
    match rej.status {
        400 | 409 | 413 | 422 => Fail::Fatal(shard_error(rej.kind().as_deref(), rej.reason())),
        _ => rej.into_fail(what),
    }
}

/// One NDJSON line of `/v2/shards`: `Some` for a terminal frame.
fn shard_frame(line: &[u8], what: &str) -> Option<std::result::Result<bool, Fail>> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let v: serde_json::Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(%what, error = %e, "ignoring a progress line that is not JSON");
            return None;
        }
    };
    match v.get("type").and_then(|t| t.as_str()) {
        Some("result") => {
            let inserted = v
                .get("was_inserted")
                .and_then(|x| x.as_bool())
                .or_else(|| v.get("result").and_then(|x| x.as_u64()).map(|r| r == 1))
                .unwrap_or(true);
            Some(Ok(inserted))
        }
        Some("error") => {
            let message = v
                .get("message")
                .and_then(|m| m.as_str())
                .unwrap_or("no message")
                .to_string();
            if v.get("retryable")
                .and_then(|r| r.as_bool())
                .unwrap_or(false)
            {
                Some(Err(Fail::retry(CasError::Server {
                    status: 200,
                    what: what.to_string(),
                    message: format!("the server reported a transient error: {message}"),
                })))
            } else {
                let kind = v
                    .get("error")
                    .or_else(|| v.get("kind"))
                    .and_then(|k| k.as_str());
                Some(Err(Fail::Fatal(shard_error(kind, message))))
            }
        }
        // A server answering `/v2/shards` the v1 way.
        None if v.get("result").is_some_and(|r| r.is_u64()) => {
            Some(Ok(v.get("result").and_then(|r| r.as_u64()) == Some(1)))
        }
        other => {
            tracing::trace!(%what, frame = ?other, "shard upload progress");
            None
        }
    }
}

#[async_trait::async_trait]
impl Cas for HttpCas {
    async fn put_xorb(&self, hash: &MerkleHash, body: Bytes) -> Result<bool> {
        self.put_xorb_pieces(hash, XorbPieces::from(body)).await
    }

    /// Pieces go out as they are: a body is never joined into one buffer to be sent.
    fn takes_xorb_pieces(&self) -> bool {
        true
    }

    async fn put_xorb_pieces(&self, hash: &MerkleHash, body: XorbPieces) -> Result<bool> {
        if !self.t.cfg.legacy.direct_xorb_upload {
            let crc = body.crc64_nvme();
            let mut last = (0u16, String::new());
            for n in 1..=MAX_GRANTS_PER_XORB {
                let grant = match self.request_grant(hash, body.len(), crc).await? {
                    GrantAnswer::Exists => return Ok(false),
                    GrantAnswer::Unsupported => {
                        tracing::debug!(%hash, "no upload grants (404): uploading the xorb directly");
                        return self.put_xorb_direct(hash, body).await;
                    }
                    GrantAnswer::Grant(g) => g,
                };
                match self.upload_to_grant(hash, &grant, &body).await? {
                    GrantUpload::Done => {}
                    GrantUpload::Rejected { status, reason } => {
                        tracing::debug!(%hash, grant = %grant.id, attempt = n, status, "grant upload refused: new grant");
                        last = (
                            status,
                            format!("the upload URL answered {status}: {reason}"),
                        );
                        continue;
                    }
                }
                match self.commit_grant(hash, &grant.id).await? {
                    Commit::Done(inserted) => return Ok(inserted),
                    Commit::NoData(reason) => {
                        tracing::debug!(%hash, grant = %grant.id, attempt = n, "commit found no data: new grant");
                        last = (404, format!("the commit found no uploaded data: {reason}"));
                    }
                }
            }
            return Err(CasError::Server {
                status: last.0,
                what: format!("upload of xorb {hash}"),
                message: format!(
                    "{MAX_GRANTS_PER_XORB} upload grants in a row failed (last: {}); retry later",
                    last.1
                ),
            });
        }
        self.put_xorb_direct(hash, body).await
    }

    async fn xorb_size(&self, hash: &MerkleHash) -> Result<Option<u64>> {
        self.head_size(&routes::xorb(hash)).await
    }

    async fn put_shard(&self, shard: Bytes) -> Result<bool> {
        if !self.t.cfg.legacy.v1_shards && !self.lacks_v2_shards() {
            match self.put_shard_v2(&shard).await? {
                Some(inserted) => return Ok(inserted),
                None => {
                    tracing::debug!("no /v2/shards on the server: using /v1/shards");
                    self.state.no_v2_shards.store(true, Ordering::Relaxed);
                }
            }
        }
        self.put_shard_v1(&shard).await
    }

    async fn file_size(&self, file: &MerkleHash) -> Result<Option<u64>> {
        if file.is_zero() {
            return Ok(Some(0));
        }
        self.head_size(&routes::file(file)).await
    }

    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction> {
        if file.is_zero() {
            return match range {
                Some(r) if r.start > 0 => Err(CasError::RangeNotSatisfiable {
                    file: *file,
                    start: r.start,
                    size: 0,
                }),
                _ => Ok(Reconstruction::default()),
            };
        }
        if let Some(r) = range {
            if r.is_empty() {
                // No HTTP form; an empty range of a file that exists is empty.
                return match self.file_size(file).await? {
                    None => Err(CasError::NotFound {
                        kind: ObjectKind::File,
                        hash: *file,
                    }),
                    Some(size) if r.start > size => Err(CasError::RangeNotSatisfiable {
                        file: *file,
                        start: r.start,
                        size,
                    }),
                    Some(_) => Ok(Reconstruction::default()),
                };
            }
        }
        let range = range.as_ref();
        let mut v2_status = None;
        if !self.t.cfg.legacy.v1_reconstructions && !self.lacks_v2_reconstructions() {
            match self.reconstruction_at(file, range, true).await? {
                Ok(r) => return Ok(r),
                Err(status) => v2_status = Some(status),
            }
        }
        match self.reconstruction_at(file, range, false).await? {
            Ok(r) => {
                if v2_status.is_some() {
                    tracing::debug!(
                        "no /v2/reconstructions on the server: using /v1/reconstructions"
                    );
                    self.state
                        .no_v2_reconstructions
                        .store(true, Ordering::Relaxed);
                }
                Ok(r)
            }
            Err(501) => Err(CasError::Server {
                status: 501,
                what: format!("GET {}", routes::reconstruction_v1(file)),
                message: "the server serves no reconstructions: check the endpoint URL".into(),
            }),
            Err(_) => {
                if v2_status == Some(501) {
                    self.state
                        .no_v2_reconstructions
                        .store(true, Ordering::Relaxed);
                }
                Err(CasError::NotFound {
                    kind: ObjectKind::File,
                    hash: *file,
                })
            }
        }
    }

    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> Result<Bytes> {
        if fetch.bytes.is_empty() {
            return Ok(Bytes::new());
        }
        let url = fetch.url.as_deref().ok_or_else(|| no_url(fetch))?;
        let what = Self::fetch_what(fetch, url);
        let want = fetch.bytes.len();
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                match self.open_range(&fetch.xorb, url, fetch.bytes, &what, &p).await? {
                    stream::RangeAnswer::Whole(b) => Ok(b),
                    stream::RangeAnswer::Body(resp) => {
                        let body = self.t.read_body(resp, &what, &p).await?;
                        if body.len() as u64 != want {
                            return Err(Fail::Fatal(CasError::Corrupt {
                                what: what.clone(),
                                message: format!(
                                    "asked for {want} bytes, got {}; the range may lie past the end of the xorb",
                                    body.len()
                                ),
                            }));
                        }
                        Ok(body)
                    }
                }
            })
            .await
    }

    async fn stream_xorb_range(&self, fetch: &XorbFetch) -> Result<Box<dyn RangeStream>> {
        stream::open(self, fetch).await
    }

    async fn dedup_shard(&self, chunk: &MerkleHash) -> Result<Option<Bytes>> {
        // As the reference: one try, and any failure other than 401 is a miss.
        let path = routes::chunk(chunk);
        let what = format!("GET {path}");
        let miss = |why: String| {
            tracing::debug!(%what, %why, "global dedup query failed: treating as a miss");
            Ok(None)
        };
        let p = Progress::new();
        let rb = match self.t.cas(Method::GET, &path).await {
            Ok(rb) => rb,
            Err(Fail::Fatal(e @ CasError::Unauthorized(_))) => return Err(e),
            Err(Fail::Fatal(e) | Fail::Retry { err: e, .. }) => return miss(e.to_string()),
        };
        let resp = match self.t.send(rb, &what, &p).await {
            Ok(r) => r,
            Err(Fail::Fatal(e) | Fail::Retry { err: e, .. }) => return miss(e.to_string()),
        };
        match resp.status().as_u16() {
            200 => match self.t.read_body(resp, &what, &p).await {
                Ok(b) => Ok(Some(b)),
                Err(Fail::Fatal(e) | Fail::Retry { err: e, .. }) => miss(e.to_string()),
            },
            404 => Ok(None),
            401 => {
                let rej = self.t.rejection(resp, &p).await;
                Err(CasError::Unauthorized(format!(
                    "{what} answered 401: {}",
                    rej.reason()
                )))
            }
            s => miss(format!("status {s}")),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let w = "POST /v2/shards";
        assert!(shard_frame(br#"{"type":"validating","verified":0,"total":3}"#, w).is_none());
        assert!(shard_frame(b"   \n", w).is_none());
        assert!(shard_frame(b"garbage", w).is_none());
        assert!(matches!(
            shard_frame(br#"{"type":"result"}"#, w),
            Some(Ok(true))
        ));
        assert!(matches!(
            shard_frame(br#"{"type":"result","result":0}"#, w),
            Some(Ok(false))
        ));
        assert!(matches!(
            shard_frame(br#"{"type":"result","was_inserted":false}"#, w),
            Some(Ok(false))
        ));
        assert!(matches!(
            shard_frame(br#"{"type":"error","message":"x","retryable":true}"#, w),
            Some(Err(Fail::Retry { .. }))
        ));
        let h = xet_hash::chunk_hash(b"q");
        let line = format!(
            r#"{{"type":"error","message":"shard references xorb {h}, which is not stored","retryable":false}}"#
        );
        match shard_frame(line.as_bytes(), w) {
            Some(Err(Fail::Fatal(CasError::MissingXorb { hash }))) => assert_eq!(hash, h),
            _ => panic!("missing xorb expected"),
        }
        assert!(matches!(
            shard_frame(
                br#"{"type":"error","message":"bad magic","retryable":false}"#,
                w
            ),
            Some(Err(Fail::Fatal(CasError::InvalidShard { .. })))
        ));
    }

    #[test]
    fn debug_redacts_token() {
        let cfg = ClientConfig::new("http://127.0.0.1:1").with_token("hunter2-secret");
        let c = HttpCas::new(cfg).unwrap();
        let s = format!("{c:?} {:?}", c.config());
        assert!(!s.contains("hunter2"), "{s}");
        assert!(s.contains("***"));
        let mut r = TokenRefresh::new("http://127.0.0.1:1/token");
        r.headers
            .push(("authorization".into(), Secret::new("Bearer hub-secret")));
        r.initial = Some((Secret::new("cas-secret"), 1));
        let s = format!(
            "{:?}",
            ClientConfig::new("").with_token_source(TokenSource::Refresh(r))
        );
        assert!(
            !s.contains("hub-secret") && !s.contains("cas-secret"),
            "{s}"
        );
    }

    #[test]
    fn session_id_is_uuid_v7_and_per_instance() {
        let a = HttpCas::new(ClientConfig::new("http://127.0.0.1:1")).unwrap();
        let b = HttpCas::new(ClientConfig::new("http://127.0.0.1:1")).unwrap();
        let u = uuid::Uuid::parse_str(a.session_id()).unwrap();
        assert_eq!(u.get_version_num(), 7);
        assert_ne!(a.session_id(), b.session_id());
        assert_eq!(a.clone().session_id(), a.session_id());
    }

    #[test]
    fn bad_endpoints_are_config_errors() {
        assert!(HttpCas::new(ClientConfig::new("not a url")).is_err());
        assert!(HttpCas::new(ClientConfig::new("ftp://h/")).is_err());
        assert!(HttpCas::new(ClientConfig::new("")).is_err());
        let r = TokenSource::Refresh(TokenRefresh::new("http://127.0.0.1:1/t"));
        assert!(HttpCas::new(ClientConfig::new("").with_token_source(r)).is_ok());
    }
}
