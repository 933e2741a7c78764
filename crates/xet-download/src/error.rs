//! The crate's one error type. Every variant names the file being downloaded and, where
//! it applies, the xorb, chunk, term, host or path involved; [`DownloadError::kind`]
//! gives the coarse class the CLI maps to an exit code.

use std::path::PathBuf;
use std::sync::Arc;

use xet_cas::{CasError, Cause};
use xet_hash::MerkleHash;

/// Coarse error classes, for exit codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The file (or a xorb it needs) does not exist.
    NotFound,
    /// The request itself is invalid (bad range).
    InvalidRequest,
    /// Downloaded data failed verification (file hash, term length, chunk decode).
    Verification,
    /// Network or server failure that persisted after retries, or a stall.
    Network,
    /// Authentication or authorization failure.
    Auth,
    /// Writing the output (or the `.part` / journal next to it) failed.
    Output,
    /// The download was cancelled.
    Interrupted,
    /// Anything else the CAS reported.
    Other,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum DownloadError {
    #[error("file {file} not found")]
    NotFound { file: MerkleHash },

    #[error("file {file}: xorb {xorb} not found (the store is missing data this file needs)")]
    XorbNotFound { file: MerkleHash, xorb: MerkleHash },

    #[error(
        "file {file}: byte range starting at {start} is not satisfiable: the file is {size} bytes"
    )]
    RangeNotSatisfiable {
        file: MerkleHash,
        start: u64,
        size: u64,
    },

    #[error("file {file}: invalid request: {reason}")]
    InvalidRequest { file: MerkleHash, reason: String },

    /// Data arrived but is wrong. `detail` names the term, xorb and chunk where known;
    /// `source` is the decoder's or parser's error, where there is one.
    #[error("file {file}: verification failed: {detail}; nothing was written to the destination")]
    Verification {
        file: MerkleHash,
        detail: String,
        source: Option<Cause>,
    },

    /// The reconstruction the CAS answered is inconsistent (gaps, missing fetches).
    #[error("file {file}: bad reconstruction from the CAS: {detail}")]
    BadReconstruction { file: MerkleHash, detail: String },

    /// A network / server failure that persisted after `attempts` tries, or a stall;
    /// `source` is the transport's error, where there is one.
    #[error("file {file}: {what}{host}: {message}{tries}", host = host_suffix(host), tries = attempts_suffix(*attempts))]
    Network {
        file: MerkleHash,
        what: String,
        // Boxed: every `Result` of the crate (and of `xet-hub-client`, which wraps this
        // error) carries this variant's size.
        host: Option<Box<str>>,
        attempts: u32,
        message: String,
        source: Option<Cause>,
    },

    #[error("file {file}")]
    Auth {
        file: MerkleHash,
        #[source]
        cause: CasError,
    },

    #[error("file {file}")]
    Cas {
        file: MerkleHash,
        #[source]
        cause: CasError,
    },

    /// Writing or reading local output files failed.
    #[error("{op} {}: {cause}", path.display())]
    Io {
        op: &'static str,
        path: PathBuf,
        cause: Arc<std::io::Error>,
    },

    #[error("file {file}: download interrupted{}", if *resumable { " (rerun to resume)" } else { "" })]
    Interrupted { file: MerkleHash, resumable: bool },

    /// A background task panicked or was cancelled (a bug, not the input): `what` was
    /// being done, `cause` says how the task ended.
    #[error("internal error: {what} failed")]
    Task {
        what: &'static str,
        #[source]
        cause: Arc<tokio::task::JoinError>,
    },

    /// The pipeline broke one of its own invariants (a bug, not the input).
    #[error("internal error: {0}")]
    Internal(String),
}

/// Only the pipeline's own retries are counted here; one attempt of the pipeline may
/// already be many of the CAS client's, which its message then says.
fn attempts_suffix(attempts: u32) -> String {
    if attempts > 1 {
        format!(" (after {attempts} attempts)")
    } else {
        String::new()
    }
}

fn host_suffix(host: &Option<Box<str>>) -> String {
    match host {
        Some(h) => format!(" from {h}"),
        None => String::new(),
    }
}

impl DownloadError {
    pub fn kind(&self) -> ErrorKind {
        match self {
            DownloadError::NotFound { .. } | DownloadError::XorbNotFound { .. } => {
                ErrorKind::NotFound
            }
            DownloadError::RangeNotSatisfiable { .. } | DownloadError::InvalidRequest { .. } => {
                ErrorKind::InvalidRequest
            }
            DownloadError::Verification { .. } | DownloadError::BadReconstruction { .. } => {
                ErrorKind::Verification
            }
            DownloadError::Network { .. } => ErrorKind::Network,
            DownloadError::Auth { .. } => ErrorKind::Auth,
            DownloadError::Io { .. } => ErrorKind::Output,
            DownloadError::Interrupted { .. } => ErrorKind::Interrupted,
            DownloadError::Cas { .. } | DownloadError::Task { .. } | DownloadError::Internal(_) => {
                ErrorKind::Other
            }
        }
    }

    /// The file hash the error is about, where it is about one file.
    pub fn file(&self) -> Option<MerkleHash> {
        use DownloadError::*;
        match self {
            NotFound { file }
            | XorbNotFound { file, .. }
            | RangeNotSatisfiable { file, .. }
            | InvalidRequest { file, .. }
            | Verification { file, .. }
            | BadReconstruction { file, .. }
            | Network { file, .. }
            | Auth { file, .. }
            | Cas { file, .. }
            | Interrupted { file, .. } => Some(*file),
            Io { .. } | Task { .. } | Internal(_) => None,
        }
    }

    pub(crate) fn io(op: &'static str, path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        DownloadError::Io {
            op,
            path: path.into(),
            cause: Arc::new(cause),
        }
    }

    /// A task that did `what` ended without its result (`e`: it panicked or was
    /// cancelled).
    pub(crate) fn task(what: &'static str, e: tokio::task::JoinError) -> Self {
        DownloadError::Task {
            what,
            cause: Arc::new(e),
        }
    }

    /// Map a CAS error about `file` (not about a specific fetch).
    pub(crate) fn from_cas(file: MerkleHash, e: CasError) -> Self {
        match e {
            CasError::NotFound {
                kind: xet_cas::ObjectKind::Xorb,
                hash,
            } => DownloadError::XorbNotFound { file, xorb: hash },
            CasError::NotFound { .. } => DownloadError::NotFound { file },
            CasError::RangeNotSatisfiable { start, size, .. } => {
                DownloadError::RangeNotSatisfiable { file, start, size }
            }
            CasError::Unauthorized { .. } | CasError::Forbidden(_) => {
                DownloadError::Auth { file, cause: e }
            }
            CasError::Corrupt {
                what,
                message,
                source,
            } => DownloadError::Verification {
                file,
                detail: format!("corrupt data from {what}: {message}"),
                source,
            },
            CasError::Network {
                what,
                message,
                source,
            } => DownloadError::Network {
                file,
                what,
                host: None,
                attempts: 1,
                message,
                source,
            },
            other => DownloadError::Cas { file, cause: other },
        }
    }
}

pub type Result<T, E = DownloadError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_failed_task_keeps_its_join_error_as_the_source() {
        let h = tokio::spawn(std::future::pending::<()>());
        h.abort();
        let e = DownloadError::task("a blocking task", h.await.unwrap_err());
        assert_eq!(e.to_string(), "internal error: a blocking task failed");
        let source = std::error::Error::source(&e).expect("the join error");
        assert!(source.to_string().contains("cancelled"), "{source}");
        assert_eq!(e.kind(), ErrorKind::Other);
        assert_eq!(e.file(), None);
    }
}
