//! Talking to the CAS: reconstruction queries and xorb range fetches with a stall
//! deadline, bounded retries with backoff, and re-queries after an expired URL.

use std::time::Duration;

use bytes::Bytes;
use xet_cas::{ByteRange, CasError, ChunkRange, Reconstruction, XorbFetch};
use xet_hash::MerkleHash;

use crate::ctx::Shared;
use crate::error::DownloadError;
use crate::plan::find_fetch;

/// The host of a URL, without credentials, path or query (presigned signatures stay
/// out of messages).
pub(crate) fn url_host(url: &str) -> String {
    let rest = url.split_once("://").map_or(url, |(_, r)| r);
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let authority = &rest[..end];
    authority
        .rsplit_once('@')
        .map_or(authority, |(_, h)| h)
        .to_string()
}

/// Delay before the pipeline's own retry after `attempt` failed tries (0 = the first
/// failed): the workspace's one backoff ([`xet_cas::backoff`]), capped at 30 s.
fn backoff(base: Duration, attempt: u32) -> Duration {
    xet_cas::backoff::delay(base, Duration::from_secs(30), attempt + 1)
}

enum Outcome<T> {
    Done(T),
    /// A retryable failure, and whether this layer may retry it.
    Retry(Failure, bool),
    Fail(DownloadError),
}

/// Why an attempt failed where another attempt may succeed.
enum Failure {
    /// A retryable error of the CAS (network, 429, 5xx).
    Cas(CasError),
    /// No answer to a query within the stall timeout.
    NoAnswer(Duration),
    /// A transfer made no progress by its deadline.
    Stalled(Duration),
    /// The stream ended short or ran long.
    Short(String),
}

impl Failure {
    /// The [`DownloadError::Network`] for this failure once the retries are spent: a
    /// transport error keeps its source (its message alone goes into the text).
    fn exhausted(
        self,
        file: MerkleHash,
        what: String,
        host: Option<Box<str>>,
        attempts: u32,
    ) -> DownloadError {
        let (message, source) = match self {
            Failure::Cas(CasError::Network {
                message, source, ..
            }) => (message, source),
            Failure::Cas(e) => (e.to_string(), None),
            other => (other.to_string(), None),
        };
        DownloadError::Network {
            file,
            what,
            host,
            attempts,
            message,
            source,
        }
    }
}

/// For logs: the whole chain.
impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Failure::Cas(e) => f.write_str(&xet_cas::error_chain(e)),
            Failure::NoAnswer(d) => write!(f, "no answer within {:.1}s", d.as_secs_f64()),
            Failure::Stalled(d) => write!(f, "no progress for {:.1}s (stalled)", d.as_secs_f64()),
            Failure::Short(m) => f.write_str(m),
        }
    }
}

/// Query the reconstruction of `file` for `range`, with retries.
pub(crate) async fn query_reconstruction(
    shared: &Shared,
    file: MerkleHash,
    range: ByteRange,
) -> Result<Reconstruction, DownloadError> {
    let opts = &shared.opts;
    let mut attempt = 0u32;
    loop {
        let res = tokio::time::timeout(
            opts.stall_timeout,
            shared.cas.reconstruction(&file, Some(range)),
        )
        .await;
        let outcome = match res {
            Ok(Ok(mut r)) => {
                crate::plan::merge_fetches(&mut r.fetches);
                Outcome::Done(r)
            }
            Ok(Err(e)) if e.is_retryable() => {
                Outcome::Retry(Failure::Cas(e), !shared.cas.retries_requests())
            }
            Ok(Err(e)) => Outcome::Fail(DownloadError::from_cas(file, e)),
            Err(_) => Outcome::Retry(Failure::NoAnswer(opts.stall_timeout), true),
        };
        match outcome {
            Outcome::Done(r) => return Ok(r),
            Outcome::Fail(e) => return Err(e),
            Outcome::Retry(failure, again) if !again || attempt >= opts.max_retries => {
                let what = format!("reconstruction of bytes {}..{}", range.start, range.end);
                return Err(failure.exhausted(file, what, None, attempt + 1));
            }
            Outcome::Retry(failure, _) => {
                tracing::debug!("reconstruction of {file} failed ({failure}); retrying");
                tokio::time::sleep(backoff(opts.retry_base_delay, attempt)).await;
                attempt += 1;
            }
        }
    }
}

/// Size of `file`, with retries.
pub(crate) async fn query_file_size(
    shared: &Shared,
    file: MerkleHash,
) -> Result<u64, DownloadError> {
    let opts = &shared.opts;
    let mut attempt = 0u32;
    loop {
        match tokio::time::timeout(opts.stall_timeout, shared.cas.file_size(&file)).await {
            Ok(Ok(Some(n))) => return Ok(n),
            Ok(Ok(None)) => return Err(DownloadError::NotFound { file }),
            Ok(Err(e)) if !e.is_retryable() => return Err(DownloadError::from_cas(file, e)),
            res => {
                let (failure, again) = match res {
                    Ok(Err(e)) => (Failure::Cas(e), !shared.cas.retries_requests()),
                    _ => (Failure::NoAnswer(opts.stall_timeout), true),
                };
                if !again || attempt >= opts.max_retries {
                    let what = "file size query".into();
                    return Err(failure.exhausted(file, what, None, attempt + 1));
                }
                tokio::time::sleep(backoff(opts.retry_base_delay, attempt)).await;
                attempt += 1;
            }
        }
    }
}

/// Why one attempt of [`pump_range`] stopped early.
enum Broke {
    /// The attempt's deadline passed.
    Stalled,
    /// The stream ended short or ran long.
    Short(String),
    Cas(CasError),
}

/// Where [`pump_range`] hands the pieces it receives.
pub(crate) enum Pieces<'a> {
    /// The decoder's bounded queue: the transfer waits while the decoder is behind.
    Decoder(&'a tokio::sync::mpsc::Sender<Bytes>),
    /// A part fetched ahead of its turn ([`crate::split`]): unbounded in count, bounded
    /// in bytes by the part's length, which `pump_range` never exceeds, and reserved
    /// from the memory budget by the caller.
    Buffer(&'a tokio::sync::mpsc::UnboundedSender<Bytes>),
}

impl Pieces<'_> {
    /// Hand `piece` on; false once the receiver is gone.
    async fn send(&self, piece: Bytes) -> bool {
        match self {
            Pieces::Decoder(tx) => tx.send(piece).await.is_ok(),
            Pieces::Buffer(tx) => tx.send(piece).is_ok(),
        }
    }
}

/// How [`pump_range`] ended without an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Pumped {
    /// Every byte of the range went to the decoder.
    Complete,
    /// The receiver stopped taking pieces (the decoder failed; its error says why).
    DecoderGone,
}

/// Stream the serialized chunks of `fetch` into `tx`, piece by piece, as they arrive.
/// `fetch.bytes` may be a part of the range the reconstruction listed (its chunks
/// are then those of the whole range: they only name it in messages and find it again
/// after a URL refresh).
///
/// A transfer that breaks, or is not complete by its deadline (`stall_timeout +
/// remaining / min_throughput`), is retried with backoff for the bytes not yet
/// delivered only, so the decoder sees one seamless range. On an
/// expired URL the reconstruction for `segment` is queried again and the rest comes
/// from the fresh URL of the fetch there that holds the `needed` chunks (same xorb, so
/// the same byte offsets). `on_piece` sees each piece before it is handed over.
pub(crate) async fn pump_range(
    shared: &Shared,
    file: MerkleHash,
    segment: ByteRange,
    mut fetch: XorbFetch,
    needed: ChunkRange,
    tx: Pieces<'_>,
    mut on_piece: impl FnMut(&Bytes),
) -> Result<Pumped, DownloadError> {
    let opts = &shared.opts;
    let total = fetch.bytes.len();
    let mut sent = 0u64;
    let mut attempt = 0u32;
    let mut refreshes = 0u32;
    loop {
        let mut rest = fetch.clone();
        rest.bytes = ByteRange::new(fetch.bytes.start + sent, fetch.bytes.end);
        let allowance = if opts.min_throughput == 0 {
            Duration::ZERO
        } else {
            Duration::from_secs_f64(rest.bytes.len() as f64 / opts.min_throughput as f64)
        };
        let limit = opts.stall_timeout + allowance;
        let deadline = tokio::time::Instant::now() + limit;
        let what = || {
            format!(
                "fetching xorb {} chunks {}..{}",
                fetch.xorb, fetch.chunks.start, fetch.chunks.end
            )
        };
        let host = fetch.url.as_deref().map(|u| url_host(u).into_boxed_str());
        // One deadline for the whole attempt, as for a fetch taken whole: a CAS that
        // watches for stalls itself (the HTTP client) resumes a stalled transfer within
        // it, and a per-piece limit of the same length would race with that.
        let res: Result<Pumped, Broke> = async {
            let mut stream = tokio::time::timeout_at(deadline, shared.cas.stream_xorb_range(&rest))
                .await
                .map_err(|_| Broke::Stalled)?
                .map_err(Broke::Cas)?;
            loop {
                match tokio::time::timeout_at(deadline, stream.next()).await {
                    Err(_) => return Err(Broke::Stalled),
                    Ok(Err(e)) => return Err(Broke::Cas(e)),
                    Ok(Ok(None)) if sent == total => return Ok(Pumped::Complete),
                    Ok(Ok(None)) => {
                        return Err(Broke::Short(format!(
                            "the range ended after {sent} of its {total} bytes"
                        )));
                    }
                    Ok(Ok(Some(piece))) if piece.len() as u64 > total - sent => {
                        return Err(Broke::Short(format!(
                            "got {} bytes more than the {total}-byte range",
                            sent + piece.len() as u64 - total
                        )));
                    }
                    Ok(Ok(Some(piece))) => {
                        sent += piece.len() as u64;
                        on_piece(&piece);
                        if !tx.send(piece).await {
                            return Ok(Pumped::DecoderGone);
                        }
                    }
                }
            }
        }
        .await;
        let outcome: Outcome<std::convert::Infallible> = match res {
            Ok(p) => return Ok(p),
            Err(Broke::Stalled) => Outcome::Retry(Failure::Stalled(limit), true),
            // Not what the CAS promised: worth another try whoever retries errors.
            Err(Broke::Short(message)) => Outcome::Retry(Failure::Short(message), true),
            Err(Broke::Cas(CasError::UrlExpired { .. })) => {
                if refreshes >= opts.max_url_refreshes {
                    Outcome::Fail(DownloadError::Network {
                        source: None,
                        file,
                        what: what(),
                        host: host.clone(),
                        attempts: attempt + refreshes + 1,
                        message: format!(
                            "presigned URL still expired after {refreshes} reconstruction re-queries"
                        ),
                    })
                } else {
                    refreshes += 1;
                    tracing::debug!(
                        "URL for xorb {} expired; re-querying the reconstruction",
                        fetch.xorb
                    );
                    let recon = query_reconstruction(shared, file, segment).await?;
                    match find_fetch(&recon, &fetch.xorb, &needed) {
                        Some(f) => fetch.url = f.url.clone(),
                        None => {
                            return Err(DownloadError::BadReconstruction {
                                file,
                                detail: format!(
                                    "re-queried reconstruction has no fetch for xorb {} chunks {}..{}",
                                    fetch.xorb, needed.start, needed.end
                                ),
                            });
                        }
                    }
                    continue;
                }
            }
            Err(Broke::Cas(e)) if e.is_retryable() => {
                Outcome::Retry(Failure::Cas(e), !shared.cas.retries_requests())
            }
            Err(Broke::Cas(CasError::NotFound { .. })) => {
                Outcome::Fail(DownloadError::XorbNotFound {
                    file,
                    xorb: fetch.xorb,
                })
            }
            Err(Broke::Cas(CasError::Corrupt {
                what: w,
                message,
                source,
            })) => Outcome::Fail(DownloadError::Verification {
                file,
                detail: format!(
                    "xorb {} chunks {}..{}: corrupt data from {w}: {message}",
                    fetch.xorb, fetch.chunks.start, fetch.chunks.end
                ),
                source,
            }),
            Err(Broke::Cas(e)) => Outcome::Fail(DownloadError::from_cas(file, e)),
        };
        if matches!(outcome, Outcome::Retry(..)) {
            shared.fetches.failed();
        }
        match outcome {
            Outcome::Done(never) => match never {},
            Outcome::Fail(e) => return Err(e),
            Outcome::Retry(failure, again) if !again || attempt >= opts.max_retries => {
                return Err(failure.exhausted(file, what(), host, attempt + 1));
            }
            Outcome::Retry(failure, _) => {
                tracing::debug!("{}: {failure}; retrying from byte {sent}", what());
                tokio::time::sleep(backoff(opts.retry_base_delay, attempt)).await;
                attempt += 1;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_without_secrets() {
        assert_eq!(
            url_host("https://cas.example.org:8443/_xorb/x?X-Sig=abc"),
            "cas.example.org:8443"
        );
        assert_eq!(url_host("http://user:pw@h/p"), "h");
        assert_eq!(url_host("h?x"), "h");
    }

    #[test]
    fn backoff_grows_and_is_capped() {
        let b = Duration::from_millis(100);
        assert!(backoff(b, 0) >= b / 2 && backoff(b, 0) <= b);
        assert!(backoff(b, 3) >= b * 4 && backoff(b, 3) <= b * 8);
        assert!(backoff(b, 30) <= Duration::from_secs(30));
    }
}
