//! Client configuration: endpoint, credentials, retries, timeouts, legacy switches.

use std::fmt;
use std::time::Duration;

/// A credential. Its `Debug` and `Display` never show the value, so it cannot leak
/// into logs or error messages by accident; use [`Secret::expose`] to send it.
#[derive(Clone, PartialEq, Eq)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Self {
        Secret(s.into())
    }
    /// The actual value. Only for building request headers.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(***)")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

impl From<&str> for Secret {
    fn from(s: &str) -> Self {
        Secret(s.to_string())
    }
}

impl From<String> for Secret {
    fn from(s: String) -> Self {
        Secret(s)
    }
}

/// Where the bearer token for CAS routes comes from.
#[derive(Clone, Debug, Default)]
pub enum TokenSource {
    /// No `Authorization` header (a local `xet serve` without auth).
    #[default]
    None,
    /// One token for the lifetime of the client.
    Static(Secret),
    /// A URL answering `GET` with `{"accessToken","exp","casUrl"}`. The token is
    /// fetched before the first request (unless `initial` is still valid) and again
    /// shortly before `exp`; `casUrl` becomes the endpoint.
    Refresh(TokenRefresh),
}

/// Token-refresh settings (the reference client's session API).
#[derive(Clone, Debug)]
pub struct TokenRefresh {
    pub url: String,
    /// Extra headers for the refresh request (e.g. the Hub's `Authorization`).
    pub headers: Vec<(String, Secret)>,
    /// A token already in hand and its expiry (unix seconds).
    pub initial: Option<(Secret, u64)>,
    /// Refresh this long before `exp`.
    pub margin: Duration,
}

impl TokenRefresh {
    pub fn new(url: impl Into<String>) -> Self {
        TokenRefresh {
            url: url.into(),
            headers: Vec::new(),
            initial: None,
            margin: Duration::from_secs(30),
        }
    }
}

/// Exponential backoff with jitter. Defaults are the reference client's
/// (`HF_XET_CLIENT_RETRY_MAX_ATTEMPTS=5`, `..._BASE_DELAY=3s`, `..._MAX_DURATION=360s`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RetryPolicy {
    /// Total attempts per request, the first included (1 = no retry).
    pub max_attempts: u32,
    /// Delay before the first retry; doubles per retry, jittered to [d/2, d].
    pub base_delay: Duration,
    /// Upper bound of one delay (before jitter).
    pub max_delay: Duration,
    /// Give up when the next retry would start later than this after the first attempt.
    pub max_duration: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_secs(3),
            max_delay: Duration::from_secs(60),
            max_duration: Duration::from_secs(360),
        }
    }
}

impl RetryPolicy {
    /// No retries at all.
    pub fn none() -> Self {
        RetryPolicy {
            max_attempts: 1,
            ..Default::default()
        }
    }
}

/// Switches forcing the older routes, for testing servers and fallbacks.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LegacyOptions {
    /// Upload xorbs with `POST /v1/xorbs/...` instead of asking for a grant.
    pub direct_xorb_upload: bool,
    /// Upload shards with `POST /v1/shards` instead of `/v2/shards`.
    pub v1_shards: bool,
    /// Ask `GET /v1/reconstructions/...` instead of `/v2/...`.
    pub v1_reconstructions: bool,
}

/// Everything an [`crate::HttpCas`] needs.
#[derive(Clone, Debug)]
pub struct ClientConfig {
    /// CAS base URL; routes are appended directly (`{endpoint}/v1/...`). May be empty
    /// when the token source is [`TokenSource::Refresh`], whose `casUrl` sets it.
    pub endpoint: String,
    pub token: TokenSource,
    pub retry: RetryPolicy,
    pub connect_timeout: Duration,
    /// A request fails (and is retried) when no byte moves in either direction for
    /// this long: while sending the body, waiting for headers, or reading the body.
    pub idle_timeout: Duration,
    pub user_agent: String,
    pub legacy: LegacyOptions,
}

impl ClientConfig {
    pub fn new(endpoint: impl Into<String>) -> Self {
        ClientConfig {
            endpoint: endpoint.into(),
            token: TokenSource::None,
            retry: RetryPolicy::default(),
            connect_timeout: Duration::from_secs(10),
            idle_timeout: Duration::from_secs(60),
            user_agent: format!("xet/{}", env!("CARGO_PKG_VERSION")),
            legacy: LegacyOptions::default(),
        }
    }

    pub fn with_token(mut self, token: impl Into<Secret>) -> Self {
        self.token = TokenSource::Static(token.into());
        self
    }

    pub fn with_token_source(mut self, token: TokenSource) -> Self {
        self.token = token;
        self
    }

    pub fn with_retry(mut self, retry: RetryPolicy) -> Self {
        self.retry = retry;
        self
    }

    pub fn with_timeouts(mut self, connect: Duration, idle: Duration) -> Self {
        self.connect_timeout = connect;
        self.idle_timeout = idle;
        self
    }

    pub fn with_legacy(mut self, legacy: LegacyOptions) -> Self {
        self.legacy = legacy;
        self
    }
}

/// Why an [`crate::HttpCas`] cannot be set up. URLs in it are redacted (no query
/// string), so it can be shown as it is.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// The CAS endpoint does not parse as a URL.
    #[error("invalid CAS endpoint {endpoint:?}: {reason}")]
    InvalidEndpoint { endpoint: String, reason: String },
    /// The CAS endpoint is a URL, but not an `http://` or `https://` one.
    #[error("CAS endpoint {endpoint:?} must be an http:// or https:// URL")]
    EndpointScheme { endpoint: String },
    /// The token refresh URL does not parse as a URL.
    #[error("invalid token refresh URL {url:?}: {reason}")]
    InvalidRefreshUrl { url: String, reason: String },
    /// The HTTP client could not be built (TLS initialisation).
    #[error("cannot set up the HTTP client: {0}")]
    HttpClient(String),
}
