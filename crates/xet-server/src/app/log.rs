//! The request log: one line per request, once its answer is sent in full or cut off.

use axum::body::Body;
use axum::extract::Request;
use axum::http::{HeaderValue, Method};
use axum::middleware::Next;
use axum::response::Response;
use bytes::Bytes;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

/// One log line per request, written once the answer is sent in full (or cut off):
/// `ms` is the whole answer, `head_ms` the time to its headers. A streamed answer (the
/// NDJSON of `/v2/shards`, a xorb range) is mostly body, so the time to its headers
/// alone hides where it spends its time.
pub(super) async fn request_log(req: Request, next: Next) -> Response {
    let id = uuid::Uuid::now_v7();
    let method = req.method().clone();
    let path = req.uri().path().chars().take(200).collect::<String>();
    let start = Instant::now();
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let head_ms = start.elapsed().as_millis() as u64;
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let logged = LoggedBody {
        inner: body,
        bytes: 0,
        ended: false,
        line: RequestLine {
            id,
            method,
            path,
            status,
            start,
            head_ms,
        },
    };
    Response::from_parts(parts, Body::new(logged))
}

struct RequestLine {
    id: uuid::Uuid,
    method: Method,
    path: String,
    status: u16,
    start: Instant,
    head_ms: u64,
}

/// An answer's body, counting what is sent; logs the request when dropped (hyper drops it
/// once the body is sent, or when the connection goes away first).
struct LoggedBody {
    inner: Body,
    bytes: u64,
    ended: bool,
    line: RequestLine,
}

impl http_body::Body for LoggedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
            }
            Poll::Ready(None) => self.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        // Passed on as it is, so a known length still goes out as `Content-Length`.
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        let l = &self.line;
        // A HEAD answer's body is never sent; any other body not read to its end was cut
        // off (the client went away, or the body failed).
        let complete =
            self.ended || http_body::Body::is_end_stream(&self.inner) || l.method == Method::HEAD;
        tracing::info!(
            request_id = %l.id,
            method = %l.method,
            path = %l.path,
            status = l.status,
            ms = l.start.elapsed().as_millis() as u64,
            head_ms = l.head_ms,
            bytes = self.bytes,
            complete,
            "request"
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;
    use std::convert::Infallible;

    /// Log lines written while `f` runs on this thread.
    fn logged(f: impl FnOnce()) -> String {
        let sink = xet_testdata::SharedBuf::default();
        let out = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(sink.contents()).unwrap()
    }

    /// A body of three 1,000-byte frames, logged; `frames` of them are sent before it
    /// is dropped.
    fn send(method: Method, frames: usize) -> String {
        logged(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                let pieces = (0..3).map(|i| Ok::<_, Infallible>(Bytes::from(vec![i as u8; 1000])));
                let mut body = LoggedBody {
                    inner: Body::from_stream(futures_util::stream::iter(pieces)),
                    bytes: 0,
                    ended: false,
                    line: RequestLine {
                        id: uuid::Uuid::now_v7(),
                        method,
                        path: "/_xorb/x".into(),
                        status: 206,
                        start: Instant::now(),
                        head_ms: 0,
                    },
                };
                for _ in 0..frames {
                    body.frame().await.unwrap().unwrap();
                }
                if frames == 3 {
                    assert!(body.frame().await.is_none());
                }
            })
        })
    }

    #[test]
    fn request_lines_say_what_was_sent_and_whether_it_was_all() {
        let whole = send(Method::GET, 3);
        assert!(
            whole.contains("status=206") && whole.contains("bytes=3000 complete=true"),
            "{whole}"
        );
        // Cut off after one frame (the client went away).
        let cut = send(Method::GET, 1);
        assert!(cut.contains("bytes=1000 complete=false"), "{cut}");
        // A HEAD answer's body is never sent, and that is its whole answer.
        let head = send(Method::HEAD, 0);
        assert!(head.contains("bytes=0 complete=true"), "{head}");
        assert_eq!(whole.lines().count(), 1, "one line per request: {whole}");
    }
}
