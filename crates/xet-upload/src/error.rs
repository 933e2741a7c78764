//! The one error type of the crate.

use std::path::PathBuf;

use xet_cas::CasError;

/// Why an upload failed. Each variant is something a caller can act on (the CLI maps
/// them to exit codes): a bad input names the file, a CAS failure keeps the
/// [`CasError`] (whose variants say whether a retry can help), a cache problem names the
/// cache path.
#[derive(Debug, thiserror::Error)]
pub enum UploadError {
    /// An input file or directory could not be read (missing, permissions, not a
    /// regular file, I/O error while reading).
    // The causes of `Input` and `Cache` are in the message (so `{e}` says it all), not
    // in `source()`: a chain printer would show them twice.
    #[error("{}: {cause}", path.display())]
    Input {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// The CAS refused or failed a request.
    #[error(transparent)]
    Cas(#[from] CasError),
    /// The caller's cancellation token fired. Xorbs already stored are recorded in the
    /// resume journal, so running the same upload again skips them.
    #[error("upload interrupted")]
    Interrupted,
    /// The local cache directory (shard cache, resume journal) could not be used.
    #[error("cache {}: {cause}", path.display())]
    Cache {
        path: PathBuf,
        cause: std::io::Error,
    },
    /// A bug: a format builder refused what the pipeline produced, or a worker panicked.
    #[error("internal error: {0}")]
    Internal(String),
}

impl UploadError {
    pub(crate) fn input(path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        UploadError::Input {
            path: path.into(),
            cause,
        }
    }
    pub(crate) fn cache(path: impl Into<PathBuf>, cause: std::io::Error) -> Self {
        UploadError::Cache {
            path: path.into(),
            cause,
        }
    }
}

pub type Result<T, E = UploadError> = std::result::Result<T, E>;
