//! Request bodies that stall: the middleware that gives every request body a deadline
//! for its next data, and answers `408` when it passes.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use bytes::Bytes;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::time::{Instant, Sleep};

/// Error code of a `408` for a stalled request body or head.
pub const REQUEST_TIMEOUT: &str = "request_timeout";

/// The error a request body gives when it delivered nothing for `body_timeout`.
#[derive(Debug, thiserror::Error)]
#[error("the request body delivered nothing for {} s", .0.as_secs_f32())]
pub struct BodyTimedOut(pub Duration);

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
