//! One HTTP attempt (send, read, stall detection, status triage), the retry loop
//! around attempts, and the `HEAD` size query that xorbs and files share.

use crate::config::{ClientConfig, ConfigError, RetryPolicy, Secret, TokenSource};
use crate::util::{self, redact_url};
use bytes::{Bytes, BytesMut};
use reqwest::header::{ACCEPT, CONTENT_LENGTH, HeaderMap, RETRY_AFTER, USER_AGENT};
use reqwest::{Method, RequestBuilder, Response};
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use xet_cas::routes::SESSION_ID_HEADER;
use xet_cas::{CasError, Cause};

/// How one attempt failed.
#[derive(Debug)]
pub(crate) enum Fail {
    /// Worth another attempt (after `after` if the server said so).
    Retry {
        err: CasError,
        after: Option<Duration>,
    },
    /// Final.
    Fatal(CasError),
}

impl Fail {
    pub(crate) fn retry(err: CasError) -> Self {
        Fail::Retry { err, after: None }
    }
}

impl From<CasError> for Fail {
    fn from(e: CasError) -> Self {
        Fail::Fatal(e)
    }
}

pub(crate) fn network(what: &str, message: impl Into<String>) -> CasError {
    CasError::Network {
        what: what.to_string(),
        message: message.into(),
        source: None,
    }
}

/// Last time any byte moved for a request; a watchdog fails the request when that is
/// longer ago than the idle timeout.
pub(crate) struct Progress {
    start: Instant,
    last_ms: AtomicU64,
}

impl Progress {
    pub(crate) fn new() -> Arc<Self> {
        Arc::new(Progress {
            start: Instant::now(),
            last_ms: AtomicU64::new(0),
        })
    }
    pub(crate) fn touch(&self) {
        self.last_ms
            .store(self.start.elapsed().as_millis() as u64, Ordering::Relaxed);
    }
    fn idle_for(&self) -> Duration {
        let now = self.start.elapsed().as_millis() as u64;
        Duration::from_millis(now.saturating_sub(self.last_ms.load(Ordering::Relaxed)))
    }
    /// Completes once nothing has moved for `idle`.
    pub(crate) async fn stalled(&self, idle: Duration) {
        loop {
            let quiet = self.idle_for();
            if quiet >= idle {
                return;
            }
            tokio::time::sleep(idle - quiet).await;
        }
    }
}

/// A request body that reports progress as the connection takes it, sliced from one
/// `Bytes` so retries never copy the data.
pub(crate) fn progress_body(data: Bytes, progress: Arc<Progress>) -> reqwest::Body {
    progress_pieces(vec![data], progress)
}

/// A request body sending `pieces` back to back as they are (a long piece in slices, so
/// that progress is seen while it goes out), touching `progress` for each slice.
pub(crate) fn progress_pieces(pieces: Vec<Bytes>, progress: Arc<Progress>) -> reqwest::Body {
    const PIECE: usize = 256 * 1024;
    let slices = pieces.into_iter().flat_map(|p| {
        let n = p.len().div_ceil(PIECE);
        (0..n).map(move |i| p.slice(i * PIECE..((i + 1) * PIECE).min(p.len())))
    });
    let stream = futures_util::stream::iter(slices.map(move |b| {
        progress.touch();
        Ok::<Bytes, std::convert::Infallible>(b)
    }));
    reqwest::Body::wrap_stream(stream)
}

/// A [`CasError::Network`] caused by the transport's error, kept without its URL
/// (presigned ones carry signatures).
fn transport_error(what: &str, message: &str, e: reqwest::Error) -> CasError {
    CasError::Network {
        what: what.to_string(),
        message: message.to_string(),
        source: Some(Cause::new(e.without_url())),
    }
}

/// Whether the connection was refused (an `ECONNREFUSED` somewhere in the causes):
/// nothing listens there, so neither client retries it before it has reached the server
/// once.
pub fn connection_refused(e: &reqwest::Error) -> bool {
    let mut src: Option<&(dyn std::error::Error + 'static)> = Some(e);
    while let Some(s) = src {
        if s.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        src = s.source();
    }
    false
}

fn classify(e: reqwest::Error, what: &str) -> Fail {
    if e.is_builder() {
        return Fail::Fatal(transport_error(what, "cannot build the request", e));
    }
    let kind = if e.is_connect() {
        "cannot connect"
    } else if e.is_timeout() {
        "timed out"
    } else if e.is_body() || e.is_decode() {
        "connection failed while transferring the body"
    } else {
        "request failed"
    };
    Fail::retry(transport_error(what, kind, e))
}

/// A non-success answer, body read (best effort, bounded).
pub(crate) struct Rejection {
    pub status: u16,
    pub body: Bytes,
    pub headers: HeaderMap,
    pub retry_after: Option<Duration>,
}

impl Rejection {
    pub(crate) fn reason(&self) -> String {
        let mut r = util::error_reason(&self.body);
        if r.is_empty() {
            r = reqwest::StatusCode::from_u16(self.status)
                .ok()
                .and_then(|s| s.canonical_reason())
                .unwrap_or("no reason given")
                .to_string();
        }
        if let Some(id) = self
            .headers
            .get("x-request-id")
            .and_then(|v| v.to_str().ok())
        {
            r.push_str(&format!(" (request id {id})"));
        }
        r
    }

    pub(crate) fn kind(&self) -> Option<String> {
        util::error_kind(&self.body)
    }

    /// The default triage: 401 → Unauthorized, 403 → Forbidden, 429/5xx → retry,
    /// anything else → a final `Server` error.
    pub(crate) fn into_fail(self, what: &str) -> Fail {
        let reason = self.reason();
        match self.status {
            401 => Fail::Fatal(CasError::Unauthorized {
                message: format!("{what} answered 401: {reason}"),
                source: None,
            }),
            403 => Fail::Fatal(CasError::Forbidden(format!(
                "{what} answered 403: {reason}; the token does not allow this \
                 (check its scope and the repository)"
            ))),
            s if xet_cas::backoff::retryable_status(s) => Fail::Retry {
                err: CasError::Server {
                    status: self.status,
                    what: what.to_string(),
                    message: reason,
                },
                after: self.retry_after,
            },
            s => Fail::Fatal(CasError::Server {
                status: s,
                what: what.to_string(),
                message: reason,
            }),
        }
    }
}

struct AuthState {
    endpoint: String,
    token: Option<Secret>,
    exp: Option<u64>,
}

/// Shared state of one client instance.
pub(crate) struct Transport {
    pub http: reqwest::Client,
    pub cfg: ClientConfig,
    pub session_id: String,
    auth: std::sync::Mutex<AuthState>,
    refresh_lock: tokio::sync::Mutex<()>,
    /// Some answer has arrived in this session. Until then a refused connection means
    /// nothing listens at the address (a wrong URL or port, a server not started) and
    /// fails at once; after it, it means a server restarting, and is retried.
    reached: std::sync::atomic::AtomicBool,
}

impl Transport {
    pub(crate) fn new(cfg: ClientConfig) -> Result<Self, ConfigError> {
        let refresh = matches!(cfg.token, TokenSource::Refresh(_));
        if !(refresh && cfg.endpoint.is_empty()) {
            let u =
                reqwest::Url::parse(&cfg.endpoint).map_err(|e| ConfigError::InvalidEndpoint {
                    endpoint: redact_url(&cfg.endpoint),
                    reason: e.to_string(),
                })?;
            if u.scheme() != "http" && u.scheme() != "https" {
                return Err(ConfigError::EndpointScheme {
                    endpoint: redact_url(&cfg.endpoint),
                });
            }
        }
        if let TokenSource::Refresh(r) = &cfg.token {
            reqwest::Url::parse(&r.url).map_err(|e| ConfigError::InvalidRefreshUrl {
                url: redact_url(&r.url),
                reason: e.to_string(),
            })?;
        }
        let http = reqwest::Client::builder()
            .connect_timeout(cfg.connect_timeout)
            .pool_idle_timeout(Duration::from_secs(60))
            .tcp_nodelay(true)
            // Over HTTP/2 (an https endpoint that offers it) every range shares one
            // connection, whose fixed default window (5 MiB) would cap a download at
            // 25 MB/s at 200 ms: the window follows the measured bandwidth-delay
            // product instead.
            .http2_adaptive_window(true)
            .build()
            .map_err(|e| ConfigError::HttpClient(xet_cas::error_chain(&e)))?;
        let (token, exp) = match &cfg.token {
            TokenSource::None => (None, None),
            TokenSource::Static(t) => (Some(t.clone()), None),
            TokenSource::Refresh(r) => match &r.initial {
                Some((t, exp)) => (Some(t.clone()), Some(*exp)),
                None => (None, Some(0)),
            },
        };
        let auth = AuthState {
            endpoint: cfg.endpoint.clone(),
            token,
            exp,
        };
        Ok(Transport {
            http,
            session_id: uuid::Uuid::now_v7().to_string(),
            auth: std::sync::Mutex::new(auth),
            refresh_lock: tokio::sync::Mutex::new(()),
            reached: std::sync::atomic::AtomicBool::new(false),
            cfg,
        })
    }

    pub(crate) fn endpoint(&self) -> String {
        self.auth.lock().expect("auth lock").endpoint.clone()
    }

    fn needs_refresh(&self) -> bool {
        let TokenSource::Refresh(r) = &self.cfg.token else {
            return false;
        };
        let a = self.auth.lock().expect("auth lock");
        match (&a.token, a.exp) {
            (None, _) | (_, None) => true,
            (Some(_), Some(exp)) => util::now_unix().saturating_add(r.margin.as_secs()) >= exp,
        }
    }

    /// The endpoint and token to use now, refreshing the token first if it is about to expire.
    pub(crate) async fn credentials(&self) -> Result<(String, Option<Secret>), Fail> {
        if self.needs_refresh() {
            let _guard = self.refresh_lock.lock().await;
            if self.needs_refresh() {
                self.refresh().await?;
            }
        }
        let a = self.auth.lock().expect("auth lock");
        Ok((a.endpoint.clone(), a.token.clone()))
    }

    async fn refresh(&self) -> Result<(), Fail> {
        let TokenSource::Refresh(r) = &self.cfg.token else {
            return Ok(());
        };
        let what = format!("token refresh GET {}", redact_url(&r.url));
        let mut rb = self
            .http
            .get(&r.url)
            .header(ACCEPT, "*/*")
            .header(SESSION_ID_HEADER, &self.session_id);
        for (k, v) in &r.headers {
            rb = rb.header(k.as_str(), v.expose());
        }
        let p = Progress::new();
        let resp = self.send(rb, &what, &p).await?;
        if !resp.status().is_success() {
            let rej = self.rejection(resp, &p).await;
            return Err(match rej.status {
                401 | 403 => Fail::Fatal(CasError::Unauthorized {
                    message: format!(
                        "{what} answered {}: {}; log in again or check the refresh credentials",
                        rej.status,
                        rej.reason()
                    ),
                    source: None,
                }),
                _ => rej.into_fail(&what),
            });
        }
        let body = self.read_body(resp, &what, &p).await?;
        let t: xet_cas::wire::TokenRefresh = serde_json::from_slice(&body).map_err(|e| {
            Fail::Fatal(CasError::corrupt_with(
                &what,
                "expected {\"accessToken\",\"exp\",\"casUrl\"}",
                e,
            ))
        })?;
        if reqwest::Url::parse(&t.cas_url).is_err() {
            let message = format!("casUrl {:?} is not a URL", redact_url(&t.cas_url));
            return Err(Fail::Fatal(CasError::corrupt(what, message)));
        }
        tracing::debug!(exp = t.exp, endpoint = %redact_url(&t.cas_url), "CAS token refreshed");
        let mut a = self.auth.lock().expect("auth lock");
        a.token = Some(Secret::new(t.access_token));
        a.exp = Some(t.exp);
        a.endpoint = t.cas_url.trim_end_matches('/').to_string();
        Ok(())
    }

    /// A request to a CAS route: bearer token, user agent, session id.
    pub(crate) async fn cas(&self, method: Method, path: &str) -> Result<RequestBuilder, Fail> {
        let (endpoint, token) = self.credentials().await?;
        let mut rb = self
            .http
            .request(method, util::join_url(&endpoint, path))
            .header(USER_AGENT, &self.cfg.user_agent)
            .header(ACCEPT, "*/*")
            .header(SESSION_ID_HEADER, &self.session_id);
        if let Some(t) = token {
            rb = rb.bearer_auth(t.expose());
        }
        Ok(rb)
    }

    /// A request to a presigned or grant URL: never the bearer token.
    pub(crate) fn external(&self, method: Method, url: &str) -> RequestBuilder {
        self.http
            .request(method, url)
            .header(USER_AGENT, &self.cfg.user_agent)
            .header(ACCEPT, "*/*")
            .header(SESSION_ID_HEADER, &self.session_id)
    }

    /// Sends and waits for the answer's headers, failing when nothing moves for the idle timeout.
    pub(crate) async fn send(
        &self,
        rb: RequestBuilder,
        what: &str,
        p: &Progress,
    ) -> Result<Response, Fail> {
        p.touch();
        let idle = self.cfg.idle_timeout;
        tokio::select! {
            r = rb.send() => match r {
                Ok(resp) => {
                    self.reached.store(true, Ordering::Relaxed);
                    Ok(resp)
                }
                Err(e) if !self.reached.load(Ordering::Relaxed)
                    && connection_refused(&e) => Err(Fail::Fatal(network(
                    what,
                    format!(
                        "cannot connect: connection refused: nothing is listening at {} \
                         (check the URL and port, and that the server is running)",
                        redact_url(&self.endpoint())
                    ),
                ))),
                Err(e) => Err(classify(e, what)),
            },
            _ = p.stalled(idle) => Err(Fail::retry(network(
                what,
                format!("no progress for {}s (connection stalled)", idle.as_secs_f64()),
            ))),
        }
    }

    /// The next piece of a body, with stall detection.
    pub(crate) async fn chunk(
        &self,
        resp: &mut Response,
        what: &str,
        p: &Progress,
    ) -> Result<Option<Bytes>, Fail> {
        p.touch();
        let idle = self.cfg.idle_timeout;
        let r = tokio::select! {
            r = resp.chunk() => r.map_err(|e| classify(e, what)),
            _ = p.stalled(idle) => Err(Fail::retry(network(
                what,
                format!(
                    "no data for {}s while reading the answer (connection stalled)",
                    idle.as_secs_f64()
                ),
            ))),
        };
        if matches!(r, Ok(Some(_))) {
            p.touch();
        }
        r
    }

    /// The whole body. Failures mid-body are retryable network errors.
    pub(crate) async fn read_body(
        &self,
        mut resp: Response,
        what: &str,
        p: &Progress,
    ) -> Result<Bytes, Fail> {
        let hint = resp.content_length().unwrap_or(0).min(80 << 20) as usize;
        if hint >= xet_cas::buffers::MIN_POOLED {
            // Large bodies (xorb data) go into recycled buffers: a fresh 64 MiB allocation
            // is a fresh mapping whose every page faults and is zeroed before use.
            let mut buf = xet_cas::buffers::BodyBuf::with_capacity(hint);
            while let Some(c) = self.chunk(&mut resp, what, p).await? {
                buf.extend_from_slice(&c);
            }
            return Ok(buf.freeze());
        }
        let mut first: Option<Bytes> = None;
        let mut buf = BytesMut::new();
        while let Some(c) = self.chunk(&mut resp, what, p).await? {
            match first.take() {
                None if buf.is_empty() => first = Some(c),
                Some(f) => {
                    buf.reserve(hint.max(f.len() + c.len()));
                    buf.extend_from_slice(&f);
                    buf.extend_from_slice(&c);
                }
                None => buf.extend_from_slice(&c),
            }
        }
        Ok(match first {
            Some(f) => f,
            None => buf.freeze(),
        })
    }

    /// Reads a failed answer's body (at most 64 KiB, errors ignored).
    pub(crate) async fn rejection(&self, mut resp: Response, p: &Progress) -> Rejection {
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let retry_after = headers
            .get(RETRY_AFTER)
            .and_then(|v| v.to_str().ok())
            .and_then(xet_cas::backoff::parse_retry_after);
        let mut body = BytesMut::new();
        while body.len() < 64 * 1024 {
            match self.chunk(&mut resp, "error body", p).await {
                Ok(Some(c)) => body.extend_from_slice(&c),
                _ => break,
            }
        }
        Rejection {
            status,
            body: body.freeze(),
            headers,
            retry_after,
        }
    }

    /// Runs `attempt` until it succeeds, fails for good, or the retry policy is spent.
    pub(crate) async fn retrying<T, F, Fut>(&self, what: &str, mut attempt: F) -> xet_cas::Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T, Fail>>,
    {
        let policy: &RetryPolicy = &self.cfg.retry;
        let start = Instant::now();
        let mut n: u32 = 0;
        loop {
            n += 1;
            let (err, after) = match attempt().await {
                Ok(v) => return Ok(v),
                Err(Fail::Fatal(e)) => return Err(e),
                Err(Fail::Retry { err, after }) => (err, after),
            };
            if n >= policy.max_attempts.max(1) {
                return Err(self.gave_up(err, n, start.elapsed()));
            }
            let delay = after.unwrap_or_else(|| util::backoff_delay(policy, n));
            if start.elapsed() + delay > policy.max_duration {
                return Err(self.gave_up(err, n, start.elapsed()));
            }
            tracing::warn!(
                %what, attempt = n, delay_ms = delay.as_millis() as u64, error = %xet_cas::error_chain(&err),
                "retrying"
            );
            tokio::time::sleep(delay).await;
        }
    }

    pub(crate) fn gave_up(&self, err: CasError, n: u32, took: Duration) -> CasError {
        let tries = if n == 1 {
            "1 attempt".to_string()
        } else {
            format!("{n} attempts")
        };
        let took = took.as_secs_f64();
        match err {
            CasError::Network {
                what,
                message,
                source,
            } => CasError::Network {
                what,
                message: format!(
                    "{message} (gave up after {tries} in {took:.1}s; \
                     check that {} is reachable, then retry)",
                    redact_url(&self.endpoint())
                ),
                source,
            },
            CasError::Server {
                status,
                what,
                message,
            } => CasError::Server {
                status,
                what,
                message: format!(
                    "{message} (still failing after {tries} in {took:.1}s; \
                     retry later or check the server's logs)"
                ),
            },
            e => e,
        }
    }

    /// Content-Length of an answer, from the header (HEAD answers have no body).
    pub(crate) fn content_length(resp: &Response) -> Option<u64> {
        resp.headers()
            .get(CONTENT_LENGTH)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.trim().parse().ok())
    }

    /// `HEAD` of a CAS route: the object's size, `None` when the server does not have it.
    pub(crate) async fn head_size(&self, path: &str) -> xet_cas::Result<Option<u64>> {
        let what = format!("HEAD {path}");
        self.retrying(&what, || async {
            let p = Progress::new();
            let rb = self.cas(Method::HEAD, path).await?;
            let resp = self.send(rb, &what, &p).await?;
            if resp.status().is_success() {
                return Self::content_length(&resp).map(Some).ok_or_else(|| {
                    Fail::Fatal(CasError::corrupt(&what, "no Content-Length in the answer"))
                });
            }
            let rej = self.rejection(resp, &p).await;
            match rej.status {
                404 => Ok(None),
                _ => Err(rej.into_fail(&what)),
            }
        })
        .await
    }
}
