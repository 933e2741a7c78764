//! Connections: the accept loop of [`Server::serve`](crate::Server::serve) and the limits
//! that keep idle, slow or stalled clients from holding the server's sockets and memory.
//!
//! | limit | default | what happens |
//! |---|---|---|
//! | `header_timeout` | 30 s | a connection that has not sent a whole request head this long after it opened (or after the head's first byte) is closed; a half-sent head gets `408` + `Connection: close` first |
//! | `keepalive_timeout` | 60 s | a kept-alive connection with no new request this long after its last answer is closed |
//! | `body_timeout` | 30 s | a request body that delivers nothing this long (while its handler waits for it) is abandoned: `408 request_timeout` + `Connection: close` |
//! | `send_timeout` | 60 s | an answer the client does not read for this long (the socket accepts nothing) is dropped and the connection closed |
//! | `max_connections` | 512 | open connections; never more than the open-file limit allows (a quarter of it, at least 64, is left for files) |
//!
//! A zero timeout turns that timeout off. At `max_connections`, a new connection first
//! makes room by closing the connection that has been idle (between requests, or never
//! sent a byte) the longest, else one stuck for over a second in a half-sent head (that
//! one gets `503`); when every connection is busy with a request, the new one is answered
//! `503 busy` with `Retry-After: 1` and closed. Failed `accept`s (`EMFILE` when the
//! process is out of file descriptors) close the longest-idle connection, back off 100 ms
//! and are logged at most once a second.
//!
//! hyper's own `header_read_timeout` is not used: it starts whenever hyper waits for a
//! head, so it is also the keep-alive timeout (one number for both) and it closes without
//! an answer.

use crate::config::ServerConfig;
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::collections::HashMap;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::{Instant, Sleep};

/// Error code of a `408` for a stalled request body or head.
pub const REQUEST_TIMEOUT: &str = "request_timeout";

// The defaults live with the config they fill in (which must not depend on this module);
// they are named here too, where `xet serve`'s flags look for them.
pub use crate::config::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_SEND_TIMEOUT,
};

/// A connection stuck in a half-sent head this long may be closed to make room.
const STALE_HEAD: Duration = Duration::from_secs(1);
/// Pause after a failed `accept` that is not about one connection (e.g. `EMFILE`).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// At most this many over-the-limit connections are being answered `503` at once;
/// beyond, they are closed without an answer.
const MAX_REJECTING: usize = 32;

/// The connection limits of one server (from [`ServerConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    pub header_timeout: Option<Duration>,
    pub keepalive_timeout: Option<Duration>,
    pub send_timeout: Option<Duration>,
    /// Already lowered to what the open-file limit allows ([`connection_cap`]).
    pub max_connections: usize,
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

impl ConnLimits {
    /// The limits `config` asks for, `max_connections` lowered to fit the process's
    /// open-file limit.
    pub fn from_config(config: &ServerConfig) -> ConnLimits {
        ConnLimits {
            header_timeout: nonzero(config.header_timeout),
            keepalive_timeout: nonzero(config.keepalive_timeout),
            send_timeout: nonzero(config.send_timeout),
            max_connections: connection_cap(config.max_connections, open_file_limit()),
        }
    }
}

/// The soft `RLIMIT_NOFILE` of this process (`None` where there is no such thing).
pub fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `wanted` connections, lowered so they fit in `fd_limit` open files with a quarter of
/// them (at least 64) left for the store, spool files and the runtime; at least 1.
pub fn connection_cap(wanted: usize, fd_limit: Option<u64>) -> usize {
    let wanted = wanted.max(1);
    match fd_limit {
        Some(n) => {
            let room = n.saturating_sub((n / 4).max(64));
            wanted
                .min(usize::try_from(room).unwrap_or(usize::MAX))
                .max(1)
        }
        None => wanted,
    }
}

/// `TCP_NODELAY` on an accepted connection (see [`crate::nodelay`]).
pub(crate) fn set_nodelay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
    }
}

// ---------------------------------------------------------------------------------------
// Request bodies that stall.

/// The error a request body gives when it delivered nothing for `body_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body delivered nothing for {} s", .0.as_secs_f32())]
pub struct BodyTimedOut(pub Duration);

/// A request body that fails with [`BodyTimedOut`] when it stays pending for `timeout`
/// while it is being read (time spent not reading it, e.g. waiting for an upload slot,
/// does not count).
struct TimedBody {
    inner: Body,
    timeout: Duration,
    sleep: Option<Pin<Box<Sleep>>>,
    armed: bool,
    fired: Arc<AtomicBool>,
}

impl http_body::Body for TimedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        if self.fired.load(Ordering::Relaxed) {
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(self.timeout)))));
        }
        let this = &mut *self;
        match Pin::new(&mut this.inner).poll_frame(cx) {
            Poll::Pending => {}
            ready => {
                this.armed = false;
                return ready;
            }
        }
        let deadline = Instant::now() + this.timeout;
        let sleep = this
            .sleep
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if !this.armed {
            sleep.as_mut().reset(deadline);
            this.armed = true;
        }
        if sleep.as_mut().poll(cx).is_ready() {
            this.fired.store(true, Ordering::Relaxed);
            return Poll::Ready(Some(Err(axum::Error::new(BodyTimedOut(this.timeout)))));
        }
        Poll::Pending
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// Middleware: the request body times out after `timeout` without data; if it did, the
/// answer is `408 request_timeout` with `Connection: close`, whatever the handler made
/// of the failed body.
pub(crate) async fn body_deadline(timeout: Duration, req: Request, next: Next) -> Response {
    if timeout.is_zero() {
        return next.run(req).await;
    }
    let fired = Arc::new(AtomicBool::new(false));
    let flag = fired.clone();
    let req = req.map(|inner| {
        Body::new(TimedBody {
            inner,
            timeout,
            sleep: None,
            armed: false,
            fired: flag,
        })
    });
    let resp = next.run(req).await;
    if !fired.load(Ordering::Relaxed) {
        return resp;
    }
    tracing::debug!("request body stalled for {} s: 408", timeout.as_secs_f32());
    let mut resp = crate::error::ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        REQUEST_TIMEOUT,
        BodyTimedOut(timeout).to_string(),
    )
    .into_response();
    resp.headers_mut()
        .insert(header::CONNECTION, HeaderValue::from_static("close"));
    resp
}

// ---------------------------------------------------------------------------------------
// Connection state shared by the accept loop, the socket wrapper and the service.

struct ConnState {
    /// Requests handed to the router whose answers are not sent yet.
    in_flight: usize,
    /// When the first byte of a request head arrived (between requests only).
    head_since: Option<Instant>,
    /// When the connection opened or its last answer was sent.
    idle_since: Instant,
    /// Answers sent.
    served: u64,
    /// Asked to close to make room for a new connection.
    shed: bool,
    /// The connection's task (woken to close it, or to start the idle timer when an
    /// answer is done: hyper does not look at the socket again by itself then).
    waker: Option<Waker>,
}

struct Conn {
    state: Mutex<ConnState>,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            state: Mutex::new(ConnState {
                in_flight: 0,
                head_since: None,
                idle_since: Instant::now(),
                served: 0,
                shed: false,
                waker: None,
            }),
        }
    }

    fn state(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What to do with a connection asked to make room, by how long it has waited.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Victim {
    Idle,
    StaleHead,
}

struct RegistryInner {
    conns: HashMap<u64, Arc<Conn>>,
    next_id: u64,
    /// Connections in `conns` asked to close, not gone yet.
    shedding: usize,
}

/// The open connections.
struct Registry {
    inner: Mutex<RegistryInner>,
    cap: usize,
}

enum Admit {
    /// Serve it.
    Yes(u64, Arc<Conn>),
    /// At the cap and every connection busy.
    Full,
}

impl Registry {
    fn new(cap: usize) -> Registry {
        Registry {
            inner: Mutex::new(RegistryInner {
                conns: HashMap::new(),
                next_id: 0,
                shedding: 0,
            }),
            cap,
        }
    }

    fn lock(&self) -> MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a new connection, closing an idle one if at the cap. The second value says
    /// whether one was closed.
    fn admit(&self) -> (Admit, bool) {
        let mut g = self.lock();
        let mut shed = false;
        if g.conns.len() - g.shedding >= self.cap {
            if !shed_one(&mut g, true) {
                return (Admit::Full, false);
            }
            shed = true;
        }
        let id = g.next_id;
        g.next_id += 1;
        let conn = Arc::new(Conn::new());
        g.conns.insert(id, conn.clone());
        (Admit::Yes(id, conn), shed)
    }

    /// Close the longest-idle connection (e.g. to get a file descriptor back).
    fn shed_idle(&self) -> bool {
        shed_one(&mut self.lock(), false)
    }

    fn remove(&self, id: u64) {
        let mut g = self.lock();
        if let Some(c) = g.conns.remove(&id)
            && c.state().shed
        {
            g.shedding -= 1;
        }
    }

    fn len(&self) -> usize {
        self.lock().conns.len()
    }
}

/// Ask the best candidate in `g` to close: the longest idle, else (if `stale_heads`) the
/// one longest stuck in a half-sent head for over [`STALE_HEAD`].
fn shed_one(g: &mut RegistryInner, stale_heads: bool) -> bool {
    let now = Instant::now();
    let mut best: Option<(Victim, Instant, &Arc<Conn>)> = None;
    for c in g.conns.values() {
        let s = c.state();
        if s.shed || s.in_flight > 0 {
            continue;
        }
        let candidate = match s.head_since {
            None => (Victim::Idle, s.idle_since),
            Some(t) if stale_heads && now.duration_since(t) >= STALE_HEAD => (Victim::StaleHead, t),
            Some(_) => continue,
        };
        if best
            .as_ref()
            .is_none_or(|(v, t, _)| (candidate.0, candidate.1) < (*v, *t))
        {
            best = Some((candidate.0, candidate.1, c));
        }
    }
    let Some((_, _, victim)) = best else {
        return false;
    };
    let waker = {
        let mut s = victim.state();
        s.shed = true;
        s.waker.clone()
    };
    if let Some(w) = waker {
        w.wake();
    }
    g.shedding += 1;
    true
}

/// Counts a request from the moment the router gets it until its answer's body is sent
/// (or dropped).
struct InFlight(Arc<Conn>);

impl InFlight {
    fn start(conn: Arc<Conn>) -> InFlight {
        {
            let mut s = conn.state();
            s.in_flight += 1;
            s.head_since = None;
        }
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.0.state();
            s.in_flight -= 1;
            s.served += 1;
            s.idle_since = Instant::now();
            if s.in_flight > 0 {
                return;
            }
            s.waker.clone()
        };
        // Have hyper read again, so the keep-alive timer starts (and a shed connection
        // closes).
        if let Some(w) = waker {
            w.wake();
        }
    }
}

/// An answer's body, holding its request's [`InFlight`].
pub(crate) struct ConnBody {
    inner: Body,
    _in_flight: InFlight,
}

impl http_body::Body for ConnBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        Pin::new(&mut self.inner).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        self.inner.size_hint()
    }
}

/// The router as one connection's hyper service.
struct ConnService {
    router: Router,
    conn: Arc<Conn>,
}

type ServiceFuture = Pin<Box<dyn Future<Output = Result<Response<ConnBody>, Infallible>> + Send>>;

impl hyper::service::Service<Request<hyper::body::Incoming>> for ConnService {
    type Response = Response<ConnBody>;
    type Error = Infallible;
    type Future = ServiceFuture;

    fn call(&self, req: Request<hyper::body::Incoming>) -> ServiceFuture {
        use tower::ServiceExt;
        let in_flight = InFlight::start(self.conn.clone());
        let router = self.router.clone();
        Box::pin(async move {
            let resp = match router.oneshot(req.map(Body::new)).await {
                Ok(r) => r,
                Err(never) => match never {},
            };
            Ok(resp.map(|inner| ConnBody {
                inner,
                _in_flight: in_flight,
            }))
        })
    }
}

// ---------------------------------------------------------------------------------------
// The socket.

/// What to tell a client whose connection is closed while it sends a request head.
fn canned(status: StatusCode, code: &str, reason: &str, retry_after: bool) -> Vec<u8> {
    let body = serde_json::to_string(&xet_cas::wire::ErrorBody {
        error: code.to_string(),
        reason: reason.to_string(),
    })
    .unwrap_or_default();
    let retry = if retry_after {
        "Retry-After: 1\r\n"
    } else {
        ""
    };
    format!(
        "HTTP/1.1 {} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n{retry}Connection: close\r\n\r\n{body}",
        status.as_u16(),
        status.canonical_reason().unwrap_or(""),
        body.len()
    )
    .into_bytes()
}

fn busy_answer() -> Vec<u8> {
    canned(
        StatusCode::SERVICE_UNAVAILABLE,
        crate::error::code::BUSY,
        "the server has too many open connections; retry shortly",
        true,
    )
}

/// The accepted socket as hyper sees it: reads time out between requests
/// (`header_timeout`, `keepalive_timeout`) and on a shed connection, writes time out
/// when the client reads nothing (`send_timeout`).
struct ConnIo {
    tcp: TcpStream,
    conn: Arc<Conn>,
    limits: ConnLimits,
    read_timer: Option<Pin<Box<Sleep>>>,
    read_deadline: Option<Instant>,
    write_timer: Option<Pin<Box<Sleep>>>,
    write_stalled: bool,
}

enum Close {
    /// Nothing of a request arrived: close quietly (what an idle keep-alive close is).
    Quiet,
    /// Part of a head arrived: answer this first.
    Answer(Vec<u8>, &'static str),
}

impl ConnIo {
    fn new(tcp: TcpStream, conn: Arc<Conn>, limits: ConnLimits) -> ConnIo {
        ConnIo {
            tcp,
            conn,
            limits,
            read_timer: None,
            read_deadline: None,
            write_timer: None,
            write_stalled: false,
        }
    }

    fn close(&mut self, cx: &mut Context<'_>, how: Close) -> Poll<io::Result<()>> {
        match how {
            // End of stream: between requests hyper takes it as the client leaving.
            Close::Quiet => Poll::Ready(Ok(())),
            Close::Answer(answer, why) => {
                // Only if no earlier answer is stuck in the socket (it would interleave).
                if !self.write_stalled {
                    let _ = self.tcp.try_write(&answer);
                    let _ = Pin::new(&mut self.tcp).poll_shutdown(cx);
                }
                Poll::Ready(Err(io::Error::new(io::ErrorKind::TimedOut, why)))
            }
        }
    }

    /// A read is pending: close if the connection is shed or its wait between requests
    /// is over, else arm the timer for it.
    fn read_pending(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let (deadline, how) = {
            let s = self.conn.state();
            if s.in_flight > 0 {
                // Reading a request body or watching for the client to leave: the body
                // has its own timeout, and the answer being made is not idle time.
                self.read_deadline = None;
                return Poll::Pending;
            }
            if s.shed {
                let how = match s.head_since {
                    None => Close::Quiet,
                    Some(_) => Close::Answer(busy_answer(), "closed to make room"),
                };
                drop(s);
                tracing::debug!("closing a connection to make room for a new one");
                return self.close(cx, how);
            }
            match s.head_since {
                Some(t) => (
                    self.limits.header_timeout.map(|d| t + d),
                    Close::Answer(
                        canned(
                            StatusCode::REQUEST_TIMEOUT,
                            REQUEST_TIMEOUT,
                            "the request head did not arrive in time",
                            false,
                        ),
                        "request head timed out",
                    ),
                ),
                None => {
                    let wait = if s.served == 0 {
                        self.limits.header_timeout
                    } else {
                        self.limits.keepalive_timeout
                    };
                    (wait.map(|d| s.idle_since + d), Close::Quiet)
                }
            }
        };
        let Some(deadline) = deadline else {
            self.read_deadline = None;
            return Poll::Pending;
        };
        let timer = self
            .read_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if self.read_deadline != Some(deadline) {
            timer.as_mut().reset(deadline);
            self.read_deadline = Some(deadline);
        }
        if timer.as_mut().poll(cx).is_ready() {
            self.read_deadline = None;
            tracing::debug!("closing a connection that sent no request in time");
            return self.close(cx, how);
        }
        Poll::Pending
    }

    /// A write is pending: fail it once it has been for `send_timeout`.
    fn write_pending<T>(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<T>> {
        self.write_stalled = true;
        let Some(limit) = self.limits.send_timeout else {
            return Poll::Pending;
        };
        let deadline = Instant::now() + limit;
        let timer = self
            .write_timer
            .get_or_insert_with(|| Box::pin(tokio::time::sleep_until(deadline)));
        if timer.as_mut().poll(cx).is_ready() {
            tracing::debug!(
                "closing a connection whose client read nothing for {} s",
                limit.as_secs_f32()
            );
            return Poll::Ready(Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "the client stopped reading the answer",
            )));
        }
        Poll::Pending
    }

    fn write_done<T>(&mut self, r: io::Result<T>) -> Poll<io::Result<T>> {
        self.write_stalled = false;
        self.write_timer = None;
        Poll::Ready(r)
    }
}

impl AsyncRead for ConnIo {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        {
            let mut s = self.conn.state();
            if s.waker.as_ref().is_none_or(|w| !w.will_wake(cx.waker())) {
                s.waker = Some(cx.waker().clone());
            }
        }
        let before = buf.filled().len();
        match Pin::new(&mut self.tcp).poll_read(cx, buf) {
            Poll::Ready(Ok(())) => {
                if buf.filled().len() > before {
                    let mut s = self.conn.state();
                    if s.in_flight == 0 && s.head_since.is_none() {
                        s.head_since = Some(Instant::now());
                    }
                }
                Poll::Ready(Ok(()))
            }
            Poll::Ready(Err(e)) => Poll::Ready(Err(e)),
            Poll::Pending => self.read_pending(cx),
        }
    }
}

impl AsyncWrite for ConnIo {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.tcp).poll_write(cx, buf) {
            Poll::Ready(r) => self.write_done(r),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        match Pin::new(&mut self.tcp).poll_write_vectored(cx, bufs) {
            Poll::Ready(r) => self.write_done(r),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn is_write_vectored(&self) -> bool {
        self.tcp.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match Pin::new(&mut self.tcp).poll_flush(cx) {
            Poll::Ready(r) => self.write_done(r),
            Poll::Pending => self.write_pending(cx),
        }
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.tcp).poll_shutdown(cx)
    }
}

// ---------------------------------------------------------------------------------------
// The accept loop.

/// Logs at most once a second, counting what it left out.
struct Throttled {
    last: Option<std::time::Instant>,
    skipped: u64,
}

impl Throttled {
    const fn new() -> Throttled {
        Throttled {
            last: None,
            skipped: 0,
        }
    }

    /// `Some(n)` (`n` messages skipped since the last) if a message may be written now.
    fn due(&mut self) -> Option<u64> {
        let now = std::time::Instant::now();
        if self
            .last
            .is_some_and(|t| now.duration_since(t) < Duration::from_secs(1))
        {
            self.skipped += 1;
            return None;
        }
        self.last = Some(now);
        Some(std::mem::take(&mut self.skipped))
    }
}

/// Whether a failed `accept` concerns one connection only (try the next one at once).
fn per_connection(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionAborted
            | io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionRefused
            | io::ErrorKind::Interrupted
            | io::ErrorKind::WouldBlock
    )
}

/// Answer an over-the-limit connection `503 busy` + `Retry-After: 1` and close it
/// (without an answer when too many are being answered already).
fn reject(tcp: TcpStream, rejecting: &Arc<AtomicUsize>) {
    if rejecting.fetch_add(1, Ordering::Relaxed) >= MAX_REJECTING {
        rejecting.fetch_sub(1, Ordering::Relaxed);
        drop(tcp);
        return;
    }
    let rejecting = rejecting.clone();
    tokio::spawn(async move {
        let mut tcp = tcp;
        let bounded = Duration::from_secs(1);
        let _ = tokio::time::timeout(bounded, async {
            tcp.write_all(&busy_answer()).await?;
            tcp.shutdown().await?;
            // Read what the client sends until it closes, so closing does not reset the
            // connection before it has read the answer.
            let mut sink = [0u8; 4096];
            let mut left = 64 * 1024usize;
            while left > 0 {
                let n = tokio::io::AsyncReadExt::read(&mut tcp, &mut sink).await?;
                if n == 0 {
                    break;
                }
                left = left.saturating_sub(n);
            }
            io::Result::Ok(())
        })
        .await;
        rejecting.fetch_sub(1, Ordering::Relaxed);
    });
}

/// Serve `router` on `listener` with `limits` until `shutdown` completes, then stop
/// accepting, let the connections finish their requests and wait for them to close.
/// (What [`Server::serve`](crate::Server::serve) does; for routers from
/// [`Server::into_parts`](crate::Server::into_parts) with extra layers.)
pub async fn serve<F>(
    listener: TcpListener,
    router: Router,
    limits: ConnLimits,
    shutdown: F,
) -> io::Result<()>
where
    F: Future<Output = ()> + Send + 'static,
{
    let registry = Arc::new(Registry::new(limits.max_connections));
    let rejecting = Arc::new(AtomicUsize::new(0));
    let mut http = hyper::server::conn::http1::Builder::new();
    http.keep_alive(true);
    let (signal_tx, signal_rx) = tokio::sync::watch::channel(());
    let (close_tx, close_rx) = tokio::sync::watch::channel(());
    let mut accept_errors = Throttled::new();
    let mut full = Throttled::new();
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        let accepted = tokio::select! {
            r = listener.accept() => r,
            () = &mut shutdown => break,
        };
        let tcp = match accepted {
            Ok((tcp, _)) => tcp,
            Err(e) if per_connection(&e) => continue,
            Err(e) => {
                // Out of file descriptors (or worse): give one back if a connection
                // idles, and do not spin on the listener.
                let freed = registry.shed_idle();
                if let Some(skipped) = accept_errors.due() {
                    tracing::warn!(
                        "accept failed: {e}; {} connections open{}; retrying in {} ms{}",
                        registry.len(),
                        if freed {
                            ", closed the longest idle"
                        } else {
                            ""
                        },
                        ACCEPT_BACKOFF.as_millis(),
                        if skipped > 0 {
                            format!(" ({skipped} more failures since the last message)")
                        } else {
                            String::new()
                        }
                    );
                }
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_BACKOFF) => continue,
                    () = &mut shutdown => break,
                }
            }
        };
        set_nodelay(&tcp);
        let (admit, shed) = registry.admit();
        if (shed || matches!(admit, Admit::Full))
            && let Some(skipped) = full.due()
        {
            tracing::warn!(
                "at the connection limit ({}): {}{}",
                limits.max_connections,
                if shed {
                    "closed the longest idle connection for a new one"
                } else {
                    "all busy, answered a new connection 503"
                },
                if skipped > 0 {
                    format!(" ({skipped} more such since the last message)")
                } else {
                    String::new()
                }
            );
        }
        let (id, conn) = match admit {
            Admit::Yes(id, conn) => (id, conn),
            Admit::Full => {
                reject(tcp, &rejecting);
                continue;
            }
        };
        let io = hyper_util::rt::TokioIo::new(ConnIo::new(tcp, conn.clone(), limits));
        let service = ConnService {
            router: router.clone(),
            conn,
        };
        let connection = http.serve_connection(io, service);
        let mut signal = signal_rx.clone();
        let close_rx = close_rx.clone();
        let registry = registry.clone();
        tokio::spawn(async move {
            let _gone = Deregister(registry, id);
            let mut connection = std::pin::pin!(connection);
            let result = tokio::select! {
                r = connection.as_mut() => r,
                _ = signal.changed() => {
                    connection.as_mut().graceful_shutdown();
                    connection.await
                }
            };
            if let Err(e) = result {
                tracing::debug!("connection ended: {e}");
            }
            drop(close_rx);
        });
    }
    drop(listener);
    drop(signal_rx);
    let _ = signal_tx.send(());
    drop(close_rx);
    close_tx.closed().await;
    Ok(())
}

/// Takes a connection off the registry when its task ends.
struct Deregister(Arc<Registry>, u64);

impl Drop for Deregister {
    fn drop(&mut self) {
        self.0.remove(self.1);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_leaves_room_for_files() {
        assert_eq!(connection_cap(512, None), 512);
        assert_eq!(connection_cap(512, Some(20_000)), 512);
        // ulimit -n 1024: a quarter kept for files.
        assert_eq!(connection_cap(2000, Some(1024)), 768);
        assert_eq!(connection_cap(512, Some(256)), 192);
        // At least 64 kept, at least one connection.
        assert_eq!(connection_cap(512, Some(100)), 36);
        assert_eq!(connection_cap(512, Some(10)), 1);
        assert_eq!(connection_cap(0, None), 1);
    }

    #[test]
    fn the_open_file_limit_is_known_on_unix() {
        if cfg!(unix) {
            assert!(open_file_limit().is_some_and(|n| n > 0));
        }
    }

    #[test]
    fn throttled_messages_count_what_they_skip() {
        let mut t = Throttled::new();
        assert_eq!(t.due(), Some(0));
        assert_eq!(t.due(), None);
        assert_eq!(t.due(), None);
        t.last = Some(std::time::Instant::now() - Duration::from_secs(2));
        assert_eq!(t.due(), Some(2));
    }

    #[test]
    fn idle_connections_are_shed_longest_idle_first_and_busy_ones_never() {
        let r = Registry::new(2);
        let admit = |r: &Registry| match r.admit() {
            (Admit::Yes(id, c), shed) => (id, c, shed),
            (Admit::Full, _) => panic!("full"),
        };
        let (_, a, false) = admit(&r) else { panic!() };
        let (b_id, b, false) = admit(&r) else {
            panic!()
        };
        // `a` is busy, `b` idle: a third connection sheds `b`.
        let a_busy = InFlight::start(a.clone());
        let (_, c, true) = admit(&r) else { panic!() };
        assert!(b.state().shed && !a.state().shed);
        // `c` busy too: nothing can make room.
        let _c_busy = InFlight::start(c.clone());
        assert!(matches!(r.admit(), (Admit::Full, false)));
        // `a`'s answer sent: it idles and makes room.
        drop(a_busy);
        assert!(matches!(r.admit(), (Admit::Yes(..), true)));
        assert!(a.state().shed && !c.state().shed);
        // Shed connections leaving are no longer counted as leaving.
        r.remove(b_id);
        assert_eq!(r.lock().shedding, 1);
    }

    #[test]
    fn a_half_sent_head_is_shed_only_once_stale() {
        let r = Registry::new(1);
        let (Admit::Yes(_, a), false) = r.admit() else {
            panic!()
        };
        a.state().head_since = Some(Instant::now());
        assert!(matches!(r.admit(), (Admit::Full, false)));
        a.state().head_since = Some(Instant::now() - STALE_HEAD);
        assert!(matches!(r.admit(), (Admit::Yes(..), true)));
        assert!(a.state().shed);
    }
}
