//! The accept loop ([`serve`]): admits connections within the cap, answers the rest
//! `503`, and serves each with the router as its hyper service.

use super::io::{ConnIo, busy_answer};
use super::limits::ConnLimits;
use super::registry::{Admit, Conn, InFlight, Registry};
use axum::Router;
use axum::body::Body;
use axum::extract::Request;
use axum::response::Response;
use bytes::Bytes;
use std::convert::Infallible;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;
use tokio::io::AsyncWriteExt;
use tokio::net::{TcpListener, TcpStream};

/// Pause after a failed `accept` that is not about one connection (e.g. `EMFILE`).
const ACCEPT_BACKOFF: Duration = Duration::from_millis(100);
/// At most this many over-the-limit connections are being answered `503` at once;
/// beyond, they are closed without an answer.
const MAX_REJECTING: usize = 32;

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

/// `TCP_NODELAY` on an accepted connection ([`crate::nodelay`] says why).
pub(crate) fn set_nodelay(tcp: &TcpStream) {
    if let Err(e) = tcp.set_nodelay(true) {
        tracing::debug!("cannot set TCP_NODELAY on a connection: {e}");
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

/// An answer's body, holding its request's [`InFlight`].
struct ConnBody {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn throttled_messages_count_what_they_skip() {
        let mut t = Throttled::new();
        assert_eq!(t.due(), Some(0));
        assert_eq!(t.due(), None);
        assert_eq!(t.due(), None);
        t.last = Some(std::time::Instant::now() - Duration::from_secs(2));
        assert_eq!(t.due(), Some(2));
    }
}
