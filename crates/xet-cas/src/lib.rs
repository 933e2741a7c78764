//! The contract every CAS implementation keeps: the in-process stores (`xet-store`,
//! `xet-store-s3`), the HTTP client speaking to a remote server (`xet-client`), and what
//! `xet serve` exposes. Pipelines are written against [`Cas`] only. This crate holds the
//! trait, its domain types ([`types`], [`XorbBody`]), the wire JSON types and route paths
//! of the HTTP API ([`wire`], [`routes`]), [`CasError`], and the receive buffers the HTTP
//! client and server share ([`buffers`]); no implementation and no test suite.
//!
//! Contract (each implementation's tests run the shared suite of `xet-cas-conformance`):
//! - Objects are immutable and content-addressed. `put_xorb` of an existing xorb is a
//!   no-op returning `Ok(false)`; `put_shard` of an already registered shard likewise.
//! - Nothing invalid is accepted: a xorb body must rehash to the hash it is stored
//!   under; a shard must parse and reference only stored xorbs with correct chunk
//!   ranges, sizes and verification hashes. Rejections are [`CasError::InvalidXorb`],
//!   [`CasError::InvalidShard`] or [`CasError::MissingXorb`], and leave the store unchanged.
//! - A failed write leaves no object that looks complete.
//! - Missing files and xorbs are [`CasError::NotFound`]; callers branch on the variant.
//!
//! Who retries: `HttpCas` retries each request itself per its `RetryPolicy`; callers must
//! not retry its errors again (an error from it is final, even where
//! [`CasError::is_retryable`] says the kind could succeed later). In-process stores do not
//! retry.

pub mod backoff;
mod body;
pub mod buffers;
pub mod crc;
pub mod routes;
pub mod types;
pub mod wire;

pub use body::{ReceivedXorb, XorbBody, XorbReceiver};
pub use types::*;

use std::sync::Arc;

use bytes::Bytes;
use xet_hash::MerkleHash;

/// Errors callers can branch on. Messages name the object and say what to do; the error
/// that made an operation fail (a format crate's, an `io::Error`, a transport's) is kept
/// whole as the [`Cause`] that `source()` returns, never copied into the message, so a
/// chain printer ([`error_chain`], the CLI's) shows it once. What a server answered is
/// data, kept as text.
#[derive(Debug, Clone, thiserror::Error)]
pub enum CasError {
    #[error("{kind} {hash} not found")]
    NotFound { kind: ObjectKind, hash: MerkleHash },
    /// The body is not the xorb `hash`: the cause is the format's verdict
    /// (`xet_xorb::XorbError`), the store's limit, or what a server answered.
    #[error("xorb {hash} rejected")]
    InvalidXorb { hash: MerkleHash, source: Cause },
    /// The shard does not parse or breaks a rule of the format (`xet_shard::ShardError`),
    /// a limit of the store, or a server refused it.
    #[error("shard rejected")]
    InvalidShard { source: Cause },
    #[error("shard references xorb {hash}, which is not stored: upload the xorb before the shard")]
    MissingXorb { hash: MerkleHash },
    #[error("range starts at byte {start} but file {file} is {size} bytes")]
    RangeNotSatisfiable {
        file: MerkleHash,
        start: u64,
        size: u64,
    },
    /// The credentials were refused; `source` is the transport's error where one says why.
    #[error("not authorized: {message} (check the token)")]
    Unauthorized {
        message: String,
        source: Option<Cause>,
    },
    #[error("forbidden: {0}")]
    Forbidden(String),
    /// A presigned URL has expired; re-query the reconstruction for fresh ones.
    #[error("presigned URL expired for xorb {hash}")]
    UrlExpired { hash: MerkleHash },
    /// The server answered with a status this client does not expect; `message` is what
    /// it said (data, not a cause).
    #[error("server answered {status} for {what}: {message}")]
    Server {
        status: u16,
        what: String,
        message: String,
    },
    /// Connection, timeout, truncated body: the request may succeed if tried again.
    /// `source` is the transport's error, where there is one.
    #[error("network error for {what}: {message}")]
    Network {
        what: String,
        message: String,
        source: Option<Cause>,
    },
    /// Data arrived but is wrong (bad chunk, hash mismatch, short body); `source` is the
    /// parser's or verifier's error, where there is one.
    #[error("corrupt data from {what}: {message}")]
    Corrupt {
        what: String,
        message: String,
        source: Option<Cause>,
    },
    /// The backing storage failed (disk full, permissions, S3 error): `message` says
    /// which operation on which object, `source` is the `io::Error` or the S3 client's
    /// error where there is one.
    #[error("storage error: {message}")]
    Storage {
        message: String,
        source: Option<Cause>,
    },
    /// The store takes no writes (a bundle served read-only, `xet-bundle`): nothing was
    /// stored. Servers answer `405`.
    #[error("read-only store: {0}")]
    ReadOnly(String),
}

impl CasError {
    /// Whether retrying the same request may succeed.
    pub fn is_retryable(&self) -> bool {
        match self {
            CasError::Network { .. } => true,
            CasError::Server { status, .. } => backoff::retryable_status(*status),
            _ => false,
        }
    }

    /// [`CasError::Storage`] with no cause beyond its message.
    pub fn storage(message: impl Into<String>) -> Self {
        CasError::Storage {
            message: message.into(),
            source: None,
        }
    }

    /// [`CasError::Storage`] caused by `source` (an `io::Error`, the S3 client's error).
    pub fn storage_with(
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CasError::Storage {
            message: message.into(),
            source: Some(Cause::new(source)),
        }
    }

    /// [`CasError::Corrupt`] with no cause beyond its message.
    pub fn corrupt(what: impl Into<String>, message: impl Into<String>) -> Self {
        CasError::Corrupt {
            what: what.into(),
            message: message.into(),
            source: None,
        }
    }

    /// [`CasError::Corrupt`] caused by `source` (the parser's or verifier's error).
    pub fn corrupt_with(
        what: impl Into<String>,
        message: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CasError::Corrupt {
            what: what.into(),
            message: message.into(),
            source: Some(Cause::new(source)),
        }
    }

    /// [`CasError::InvalidXorb`] caused by `source`.
    pub fn invalid_xorb(
        hash: MerkleHash,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        CasError::InvalidXorb {
            hash,
            source: Cause::new(source),
        }
    }

    /// [`CasError::InvalidShard`] caused by `source`.
    pub fn invalid_shard(source: impl std::error::Error + Send + Sync + 'static) -> Self {
        CasError::InvalidShard {
            source: Cause::new(source),
        }
    }
}

/// The error behind a [`CasError`], kept whole and shared (so `CasError` stays `Clone`).
/// `source()` of the `CasError` is this error itself, so callers can downcast it:
/// `e.source().and_then(|s| s.downcast_ref::<std::io::Error>())`. One pointer wide
/// (the box inside the `Arc` holds the wide one), so errors carrying it stay small.
#[derive(Clone)]
pub struct Cause(Arc<Box<dyn std::error::Error + Send + Sync>>);

impl Cause {
    pub fn new(e: impl std::error::Error + Send + Sync + 'static) -> Self {
        Cause(Arc::new(Box::new(e)))
    }

    pub fn from_boxed(e: Box<dyn std::error::Error + Send + Sync>) -> Self {
        Cause(Arc::new(e))
    }
}

// `Cause` is deliberately not an `Error` itself: thiserror's `source()` then reaches the
// wrapped error through `Deref`, and a downcast finds the original type.
impl std::ops::Deref for Cause {
    type Target = dyn std::error::Error + Send + Sync;
    fn deref(&self) -> &Self::Target {
        &**self.0
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        std::fmt::Debug::fmt(&**self.0, f)
    }
}

/// What a server answered when it refused something (its error text): the cause of a
/// [`CasError::InvalidXorb`] or [`CasError::InvalidShard`] the HTTP client reports.
#[derive(Debug, Clone, thiserror::Error)]
#[error("the server answered: {0}")]
pub struct Refusal(pub String);

/// `e` and each of its causes in order, joined by ": " on one line: for an HTTP error
/// body, a log line or a report field, where a chain cannot be walked later.
pub fn error_chain(e: &(dyn std::error::Error + 'static)) -> String {
    let mut out = e.to_string();
    let mut next = e.source();
    while let Some(cause) = next {
        out.push_str(": ");
        out.push_str(&cause.to_string());
        next = cause.source();
    }
    out
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ObjectKind {
    File,
    Xorb,
    Shard,
    Chunk,
}

impl std::fmt::Display for ObjectKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            ObjectKind::File => "file",
            ObjectKind::Xorb => "xorb",
            ObjectKind::Shard => "shard",
            ObjectKind::Chunk => "chunk",
        })
    }
}

pub type Result<T> = std::result::Result<T, CasError>;

/// [`Cas::reconstruction`] of the empty file (hash zero), as every implementation answers
/// it: no terms without a range, and no byte for any range to start at.
pub fn empty_file_reconstruction(range: Option<ByteRange>) -> Result<Reconstruction> {
    match range {
        None => Ok(Reconstruction::default()),
        Some(r) => Err(CasError::RangeNotSatisfiable {
            file: MerkleHash::ZERO,
            start: r.start,
            size: 0,
        }),
    }
}

/// A content-addressed store of xorbs and shards that answers reconstructions.
#[async_trait::async_trait]
pub trait Cas: Send + Sync {
    /// Store a xorb. The body is the serialized chunk region, with or without the v1
    /// footer (in pieces: without), in any form of [`XorbBody`]; each
    /// implementation takes the one it works with best as it is and converts the others.
    /// Returns `true` if it was newly inserted, `false` if already present.
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> Result<bool>;

    /// A hint for callers that can produce a body either way: `true` if
    /// [`Cas::put_xorb`] sends or stores [`XorbBody::Pieces`] as they are, without joining
    /// them, so pieces that borrow the caller's chunk data save the copy into one buffer;
    /// `false` (the default) if one buffer suits it better (an in-process store writes a
    /// page-aligned one straight to disk).
    fn takes_xorb_pieces(&self) -> bool {
        false
    }

    /// A hint for downloads: `true` if [`Cas::stream_xorb_range`] hands a range over as
    /// it arrives, holding little of it (the HTTP client), so a caller need not reserve
    /// memory for a whole range, and a large range is worth asking for in parts (each
    /// request is one TCP window per round trip); `false` (the default) if it hands each
    /// range over whole. A caller that is not told learns it from the first piece.
    fn streams_ranges(&self) -> bool {
        false
    }

    /// `true` if this implementation retries each request itself (the HTTP client), so
    /// its errors are final: a caller retrying them would multiply the attempts and the
    /// time a dead server takes to fail. In-process stores answer `false`.
    fn retries_requests(&self) -> bool {
        false
    }

    /// Length of a stored xorb's serialized chunk region (no footer), `None` if absent.
    async fn xorb_size(&self, hash: &MerkleHash) -> Result<Option<u64>>;

    /// Register the files and xorbs of a shard in its upload form (no footer).
    /// Returns `true` if newly registered, `false` if it already was.
    async fn put_shard(&self, shard: Bytes) -> Result<bool>;

    /// Size of a registered file, `None` if unknown.
    async fn file_size(&self, file: &MerkleHash) -> Result<Option<u64>>;

    /// How to rebuild `file` (or bytes `range` of it).
    ///
    /// A range is clamped to the file's end, and an empty one starting inside the file
    /// has no terms; a range (empty or not) starting at or past the end of a registered
    /// file is [`CasError::RangeNotSatisfiable`] with `start` the range's start and
    /// `size` the file's size (HTTP 416, `Content-Range: bytes */size`). An unknown file
    /// is [`CasError::NotFound`].
    ///
    /// The empty file (hash zero, [`MerkleHash::ZERO`]) needs no registration: without
    /// a range it reconstructs to no terms and no fetches; with any range (`0..0`
    /// included) it is `RangeNotSatisfiable { file, start: range.start, size: 0 }`, as
    /// HTTP answers 416 (`bytes */0`) to every range of a zero-length representation.
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction>;

    /// The serialized chunks (headers + compressed data) at `fetch.bytes` of the xorb's
    /// chunk region. In-process stores read `xorb` + `bytes`; the HTTP client reads
    /// `url` + `bytes` (a `403` there is [`CasError::UrlExpired`]). `chunks` is
    /// informational. A range past the end is an error, never a short read: past the
    /// chunk region for in-process stores; over HTTP, past the object the URL names,
    /// which may go on with the footer (see [`Cas::xorb_footer`]), so a range reaching
    /// into it yields the footer's bytes (no chunks: the caller's decoder refuses them).
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> Result<Bytes>;

    /// The bytes [`Cas::fetch_xorb_range`] returns, handed over in pieces as they
    /// arrive, so a caller can decode the first chunks while the rest is in transit
    /// and never holds the whole range. Errors are those of `fetch_xorb_range`, from
    /// opening or from any later [`RangeStream::next`]. An implementation that retries
    /// a broken transfer resumes where it broke (the caller sees one seamless stream);
    /// dropping the stream cancels the transfer.
    ///
    /// The default fetches the whole range and hands it over as one piece, which is
    /// right for stores that read local files or memory.
    async fn stream_xorb_range(&self, fetch: &XorbFetch) -> Result<Box<dyn RangeStream>> {
        let bytes = self.fetch_xorb_range(fetch).await?;
        Ok(Box::new(WholeRange(Some(bytes))))
    }

    /// The footer of the xorb `fetch` names (its chunk hashes and boundaries), from
    /// where `fetch` points: what a caller checks the chunks of a range against, once
    /// the footer's chunk hashes are found to make up the xorb hash (which this method
    /// does not check). In-process stores read `xorb`; the HTTP client asks `url` for
    /// the end of the stored xorb (the object a xorb URL names is the chunk region
    /// followed by its footer).
    ///
    /// `Ok(None)` when this CAS does not give it (the default): a server whose URLs
    /// serve only the chunk region or only the ranges they were signed for. An error
    /// is a failure to get it that a later call may not have (network, a footer that
    /// does not parse or names another xorb).
    async fn xorb_footer(&self, fetch: &XorbFetch) -> Result<Option<xet_xorb::XorbFooter>> {
        let _ = fetch;
        Ok(None)
    }

    /// Global dedup: a full shard (footer, lookup tables, possibly keyed chunk hashes)
    /// listing the xorbs that hold `chunk`, or `None` if the chunk is unknown.
    async fn dedup_shard(&self, chunk: &MerkleHash) -> Result<Option<Bytes>>;
}

/// A xorb range in transit ([`Cas::stream_xorb_range`]).
///
/// Contract: `next` yields non-empty pieces whose concatenation is exactly the
/// requested range, then `Ok(None)`. A transfer that cannot deliver all of it ends with
/// an error, never with a short `Ok(None)`, and never yields bytes past the range.
#[async_trait::async_trait]
pub trait RangeStream: Send {
    /// The next piece, `Ok(None)` once the whole range was delivered.
    async fn next(&mut self) -> Result<Option<Bytes>>;
}

/// A range already in memory, handed over as one piece.
struct WholeRange(Option<Bytes>);

#[async_trait::async_trait]
impl RangeStream for WholeRange {
    async fn next(&mut self) -> Result<Option<Bytes>> {
        Ok(self.0.take().filter(|b| !b.is_empty()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::error::Error as _;

    fn enospc() -> CasError {
        let io = std::io::Error::from_raw_os_error(28);
        CasError::storage_with("writing xorbs/ab/cd", io)
    }

    #[test]
    fn the_cause_is_the_source_and_downcasts_to_its_type() {
        let e = enospc();
        let io = e
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .expect("the io::Error is the source");
        assert_eq!(io.kind(), std::io::ErrorKind::StorageFull);
        // A clone shares the same cause.
        let c = e.clone();
        let kind = c
            .source()
            .and_then(|s| s.downcast_ref::<std::io::Error>())
            .map(|io| io.kind());
        assert_eq!(kind, Some(std::io::ErrorKind::StorageFull));
    }

    #[test]
    fn the_message_and_the_chain_show_the_cause_once() {
        let e = enospc();
        let cause = std::io::Error::from_raw_os_error(28).to_string();
        assert_eq!(e.to_string(), "storage error: writing xorbs/ab/cd");
        let chain = error_chain(&e);
        assert_eq!(
            chain,
            format!("storage error: writing xorbs/ab/cd: {cause}")
        );
        assert_eq!(chain.matches(&cause).count(), 1, "{chain}");
    }

    #[test]
    fn variants_without_a_cause_have_no_source() {
        let e = CasError::storage("the dedup secret vanished");
        assert!(e.source().is_none());
        assert_eq!(error_chain(&e), e.to_string());
        let r = CasError::invalid_xorb(MerkleHash::ZERO, Refusal("bad chunk 3".into()));
        let refusal = r.source().and_then(|s| s.downcast_ref::<Refusal>());
        assert_eq!(refusal.map(|r| r.0.as_str()), Some("bad chunk 3"));
    }
}
