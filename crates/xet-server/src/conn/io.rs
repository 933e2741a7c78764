//! The accepted socket as hyper sees it: reads time out between requests and on a
//! connection asked to make room, writes time out when the client reads nothing.

use super::body::REQUEST_TIMEOUT;
use super::limits::ConnLimits;
use super::registry::Conn;
use axum::http::StatusCode;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::TcpStream;
use tokio::time::{Instant, Sleep};

/// The accepted socket as hyper sees it: reads time out between requests
/// (`header_timeout`, `keepalive_timeout`) and on a shed connection, writes time out
/// when the client reads nothing (`send_timeout`).
pub(super) struct ConnIo {
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
    pub(super) fn new(tcp: TcpStream, conn: Arc<Conn>, limits: ConnLimits) -> ConnIo {
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

pub(super) fn busy_answer() -> Vec<u8> {
    canned(
        StatusCode::SERVICE_UNAVAILABLE,
        crate::error::code::BUSY,
        "the server has too many open connections; retry shortly",
        true,
    )
}
