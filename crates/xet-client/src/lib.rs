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
mod fetch;
mod footer;
mod reconstructions;
mod shards;
mod stream;
mod transport;
mod util;
mod xorbs;

pub use config::{
    ClientConfig, ConfigError, LegacyOptions, RetryPolicy, Secret, TokenRefresh, TokenSource,
};
pub use transport::connection_refused;
pub use util::{join_url, redact_url};
pub use xet_cas::crc::crc64_nvme;
pub use xorbs::MAX_GRANTS_PER_XORB;

use bytes::Bytes;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use transport::Transport;
use xet_cas::{ByteRange, Cas, RangeStream, Reconstruction, Result, XorbBody, XorbFetch, routes};
use xet_hash::MerkleHash;

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

impl HttpCas {
    pub fn new(cfg: ClientConfig) -> std::result::Result<Self, ConfigError> {
        Ok(HttpCas {
            t: Arc::new(Transport::new(cfg)?),
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

    /// Fetch the token now if one is refreshed (and about to be needed), so the first
    /// real request does not wait for it: a mount's first read is a round trip shorter.
    /// The token request's connection stays pooled for a CAS on the same host.
    pub async fn warm_up(&self) -> Result<()> {
        match self.t.credentials().await {
            Ok(_) => Ok(()),
            Err(transport::Fail::Fatal(e) | transport::Fail::Retry { err: e, .. }) => Err(e),
        }
    }
}

// Kept thin: each request lives in its module (xorbs, shards and dedup, reconstructions,
// fetch and stream for presigned ranges).
#[async_trait::async_trait]
impl Cas for HttpCas {
    /// Pieces go out as they are: a body is never joined into one buffer to be sent.
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> Result<bool> {
        self.upload_xorb(hash, body.into_pieces()).await
    }

    fn takes_xorb_pieces(&self) -> bool {
        true
    }

    fn retries_requests(&self) -> bool {
        true
    }

    /// Ranges arrive as the HTTP body does.
    fn streams_ranges(&self) -> bool {
        true
    }

    async fn xorb_size(&self, hash: &MerkleHash) -> Result<Option<u64>> {
        self.t.head_size(&routes::xorb(hash)).await
    }

    async fn put_shard(&self, shard: Bytes) -> Result<bool> {
        self.upload_shard(shard).await
    }

    async fn file_size(&self, file: &MerkleHash) -> Result<Option<u64>> {
        // The empty file's hash: nothing is stored under it to ask about.
        if file.is_zero() {
            return Ok(Some(0));
        }
        self.t.head_size(&routes::file(file)).await
    }

    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction> {
        self.reconstruct(file, range).await
    }

    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> Result<Bytes> {
        self.fetch_range(fetch).await
    }

    async fn stream_xorb_range(&self, fetch: &XorbFetch) -> Result<Box<dyn RangeStream>> {
        stream::open(self, fetch).await
    }

    async fn xorb_footer(&self, fetch: &XorbFetch) -> Result<Option<xet_xorb::XorbFooter>> {
        self.fetch_footer(fetch).await
    }

    async fn dedup_shard(&self, chunk: &MerkleHash) -> Result<Option<Bytes>> {
        self.query_dedup(chunk).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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

    #[test]
    fn config_errors_say_what_is_wrong_without_secrets() {
        let e = HttpCas::new(ClientConfig::new("not a url?sig=s3cr3t")).unwrap_err();
        let ConfigError::InvalidEndpoint { endpoint, .. } = &e else {
            panic!("{e:?}");
        };
        assert_eq!(endpoint, "not a url?…");
        let msg = e.to_string();
        assert!(
            msg.starts_with("invalid CAS endpoint \"not a url?…\": "),
            "{msg}"
        );
        let e = HttpCas::new(ClientConfig::new("ftp://h/")).unwrap_err();
        assert_eq!(
            e.to_string(),
            "CAS endpoint \"ftp://h/\" must be an http:// or https:// URL"
        );
        let r = TokenSource::Refresh(TokenRefresh::new("nowhere?sig=s3cr3t"));
        let e = HttpCas::new(ClientConfig::new("").with_token_source(r)).unwrap_err();
        assert!(matches!(e, ConfigError::InvalidRefreshUrl { .. }), "{e:?}");
        let msg = e.to_string();
        assert!(
            msg.starts_with("invalid token refresh URL \"nowhere?…\": "),
            "{msg}"
        );
        assert!(!msg.contains("s3cr3t"), "{msg}");
    }
}
