//! A reverse proxy on 127.0.0.1 that forwards to a real server and injects faults:
//! canned statuses (500/429/503/403/404/501, with `Retry-After`), canned bodies (NDJSON
//! frames), connections dropped mid-body, stalls before the headers or mid-body, and
//! Range rewriting. Every request is logged (method, path, auth, session id, Range) so
//! tests can count retries and check headers.
//!
//! The `Host` header is passed through, so the server builds presigned and grant URLs
//! pointing back at the proxy; any remaining upstream address in a JSON answer is
//! rewritten too. The proxy's task is aborted on drop: stalled connections never keep a
//! test alive.

use axum::Router;
use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::task::JoinHandle;

/// Which requests a rule applies to.
#[derive(Clone, Debug)]
pub enum Match {
    /// Path (no query) starting with this.
    Prefix(String),
    /// Method and path prefix.
    MethodPrefix(String, String),
}

impl Match {
    pub fn prefix(p: &str) -> Self {
        Match::Prefix(p.to_string())
    }
    pub fn method(m: &str, p: &str) -> Self {
        Match::MethodPrefix(m.to_string(), p.to_string())
    }
    fn hits(&self, method: &str, path: &str) -> bool {
        match self {
            Match::Prefix(p) => path.starts_with(p.as_str()),
            Match::MethodPrefix(m, p) => {
                method.eq_ignore_ascii_case(m) && path.starts_with(p.as_str())
            }
        }
    }
}

/// What to do instead of (or on top of) forwarding.
#[derive(Clone, Debug)]
pub enum Fault {
    /// Answer with this status and a JSON error body; nothing is forwarded.
    Status(u16),
    /// 429/503 with `Retry-After`.
    StatusRetryAfter(u16, String),
    /// Answer with a canned response; nothing is forwarded.
    Respond {
        status: u16,
        content_type: String,
        body: String,
    },
    /// Forward, then send half of the answer's body and cut the connection.
    DropMidBody,
    /// Forward, then send half of the answer's body and go silent.
    StallMidBody,
    /// Never answer.
    StallHeaders,
    /// Forward after a delay.
    Delay(Duration),
    /// Forward with the Range header replaced (`None`: removed).
    RewriteRange(Option<String>),
    /// Forward with only the first range of a multi-range header.
    FirstRangeOnly,
}

struct Rule {
    matcher: Match,
    fault: Fault,
    remaining: usize,
}

/// One request the proxy saw.
#[derive(Clone, Debug)]
pub struct Seen {
    pub method: String,
    pub path: String,
    pub has_query: bool,
    pub authorization: Option<String>,
    pub session_id: Option<String>,
    pub user_agent: Option<String>,
    pub range: Option<String>,
    /// The fault applied, if any.
    pub fault: Option<String>,
}

struct ProxyState {
    upstream: String,
    base: String,
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Seen>>,
    http: reqwest::Client,
}

pub struct FaultProxy {
    pub url: String,
    state: Arc<ProxyState>,
    handle: JoinHandle<()>,
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.handle.abort();
    }
}

impl FaultProxy {
    pub async fn start(upstream: &str) -> FaultProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind proxy");
        let url = format!("http://{}", listener.local_addr().expect("addr"));
        let state = Arc::new(ProxyState {
            upstream: upstream.trim_end_matches('/').to_string(),
            base: url.clone(),
            rules: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            http: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .build()
                .expect("client"),
        });
        let app = Router::new().fallback(handle).with_state(state.clone());
        let handle = tokio::spawn(async move {
            let _ = axum::serve(xet_server::nodelay(listener), app).await;
        });
        FaultProxy { url, state, handle }
    }

    /// Apply `fault` to the next `times` requests matching `m` (rules are checked in order).
    pub fn inject(&self, m: Match, fault: Fault, times: usize) {
        self.state.rules.lock().unwrap().push(Rule {
            matcher: m,
            fault,
            remaining: times,
        });
    }

    pub fn clear(&self) {
        self.state.rules.lock().unwrap().clear();
    }

    /// Unused injections left (0 when every fault was triggered).
    pub fn pending(&self) -> usize {
        self.state
            .rules
            .lock()
            .unwrap()
            .iter()
            .map(|r| r.remaining)
            .sum()
    }

    pub fn log(&self) -> Vec<Seen> {
        self.state.log.lock().unwrap().clone()
    }

    pub fn clear_log(&self) {
        self.state.log.lock().unwrap().clear();
    }

    /// Requests whose method and path prefix match.
    pub fn count(&self, method: &str, prefix: &str) -> usize {
        self.log()
            .iter()
            .filter(|s| s.method.eq_ignore_ascii_case(method) && s.path.starts_with(prefix))
            .count()
    }
}

fn error_response(status: u16, extra: Option<(HeaderName, String)>) -> Response {
    let body = format!(r#"{{"error":"injected","reason":"injected fault {status}"}}"#);
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = StatusCode::from_u16(status).expect("status");
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    if let Some((k, v)) = extra {
        r.headers_mut()
            .insert(k, HeaderValue::from_str(&v).expect("header"));
    }
    r
}

async fn handle(State(st): State<Arc<ProxyState>>, req: Request) -> Response {
    let method = req.method().as_str().to_string();
    let path = req.uri().path().to_string();
    let query = req.uri().query().map(str::to_string);
    let h = req.headers();
    let get = |n: &str| h.get(n).and_then(|v| v.to_str().ok()).map(str::to_string);
    let mut seen = Seen {
        method: method.clone(),
        path: path.clone(),
        has_query: query.is_some(),
        authorization: get("authorization"),
        session_id: get("x-xet-session-id"),
        user_agent: get("user-agent"),
        range: get("range"),
        fault: None,
    };
    let fault = {
        let mut rules = st.rules.lock().unwrap();
        rules
            .iter_mut()
            .find(|r| r.remaining > 0 && r.matcher.hits(&method, &path))
            .map(|r| {
                r.remaining -= 1;
                r.fault.clone()
            })
    };
    seen.fault = fault.as_ref().map(|f| format!("{f:?}"));
    st.log.lock().unwrap().push(seen);

    match &fault {
        Some(Fault::Status(s)) => return error_response(*s, None),
        Some(Fault::StatusRetryAfter(s, after)) => {
            return error_response(*s, Some((header::RETRY_AFTER, after.clone())));
        }
        Some(Fault::Respond {
            status,
            content_type,
            body,
        }) => {
            let mut r = Response::new(Body::from(body.clone()));
            *r.status_mut() = StatusCode::from_u16(*status).expect("status");
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(content_type).expect("ct"),
            );
            return r;
        }
        Some(Fault::StallHeaders) => {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        }
        Some(Fault::Delay(d)) => tokio::time::sleep(*d).await,
        _ => {}
    }

    // Forward.
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX)
        .await
        .unwrap_or_default();
    let url = match &query {
        Some(q) => format!("{}{path}?{q}", st.upstream),
        None => format!("{}{path}", st.upstream),
    };
    let mut headers = HeaderMap::new();
    for (k, v) in parts.headers.iter() {
        if k == header::CONTENT_LENGTH || k == header::TRANSFER_ENCODING || k == header::CONNECTION
        {
            continue;
        }
        headers.append(k.clone(), v.clone());
    }
    match &fault {
        Some(Fault::RewriteRange(None)) => {
            headers.remove(header::RANGE);
        }
        Some(Fault::RewriteRange(Some(r))) => {
            headers.insert(header::RANGE, HeaderValue::from_str(r).expect("range"));
        }
        Some(Fault::FirstRangeOnly) => {
            if let Some(r) = headers
                .get(header::RANGE)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
            {
                let first = r.split(',').next().unwrap_or(&r).to_string();
                headers.insert(header::RANGE, HeaderValue::from_str(&first).expect("range"));
            }
        }
        _ => {}
    }
    let upstream = st
        .http
        .request(parts.method.clone(), &url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let resp = match upstream {
        Ok(r) => r,
        Err(e) => {
            return error_response(
                502,
                Some((HeaderName::from_static("x-proxy-error"), e.to_string())),
            );
        }
    };
    let status = resp.status();
    let mut out_headers = HeaderMap::new();
    for (k, v) in resp.headers().iter() {
        if k == header::CONTENT_LENGTH || k == header::TRANSFER_ENCODING || k == header::CONNECTION
        {
            continue;
        }
        out_headers.append(k.clone(), v.clone());
    }
    let is_json = resp
        .headers()
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|c| c.contains("json"));
    let is_head = parts.method == axum::http::Method::HEAD;
    let upstream_len = resp.headers().get(header::CONTENT_LENGTH).cloned();
    let mut data = resp.bytes().await.unwrap_or_default();
    if is_json && st.upstream != st.base {
        let text = String::from_utf8_lossy(&data).replace(&st.upstream, &st.base);
        data = Bytes::from(text);
    }

    let mut r = match &fault {
        Some(Fault::DropMidBody) | Some(Fault::StallMidBody) => {
            let half = data.slice(..data.len() / 2);
            let stall = matches!(fault, Some(Fault::StallMidBody));
            let stream = async_stream(half, stall);
            let mut r = Response::new(Body::from_stream(stream));
            out_headers.insert(header::CONTENT_LENGTH, HeaderValue::from(data.len()));
            *r.headers_mut() = out_headers;
            r
        }
        _ => {
            let mut r = if is_head {
                Response::new(Body::empty())
            } else {
                Response::new(Body::from(data))
            };
            if is_head && let Some(l) = upstream_len {
                out_headers.insert(header::CONTENT_LENGTH, l);
            }
            *r.headers_mut() = out_headers;
            r
        }
    };
    *r.status_mut() = status;
    r
}

/// Half a body, then an error (the connection is cut) or silence.
fn async_stream(
    half: Bytes,
    stall: bool,
) -> impl futures_util::Stream<Item = Result<Bytes, std::io::Error>> + Send + 'static {
    use futures_util::StreamExt;
    let first = futures_util::stream::once(async move { Ok::<Bytes, std::io::Error>(half) });
    let rest = futures_util::stream::once(async move {
        if stall {
            tokio::time::sleep(Duration::from_secs(3600)).await;
        } else {
            // Let the first half reach the client before cutting.
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        Err(std::io::Error::other("injected connection drop"))
    });
    first.chain(rest)
}
