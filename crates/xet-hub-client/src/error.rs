//! Errors of Hub operations. Each names what was asked (repository, revision, path),
//! keeps its source, and says what to do about it; [`HubError::kind`] sorts them for
//! exit codes.

use std::fmt;
use std::path::PathBuf;

use xet_hub::RepoRef;

use crate::env::TokenOrigin;

/// What an operation was about: the repository and, where known, revision and path.
/// Boxed, so that every `Result` of the crate stays small.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoTarget(Box<Parts>);

#[derive(Debug, Clone, PartialEq, Eq)]
struct Parts {
    repo: RepoRef,
    revision: Option<String>,
    path: Option<String>,
}

impl RepoTarget {
    pub fn repo(repo: &RepoRef) -> RepoTarget {
        RepoTarget(Box::new(Parts {
            repo: repo.clone(),
            revision: None,
            path: None,
        }))
    }

    pub fn at(mut self, revision: &str) -> RepoTarget {
        self.0.revision = Some(revision.to_string());
        self
    }

    pub fn path(mut self, path: &str) -> RepoTarget {
        self.0.path = Some(path.to_string());
        self
    }

    pub fn repo_ref(&self) -> &RepoRef {
        &self.0.repo
    }

    pub fn revision(&self) -> Option<&str> {
        self.0.revision.as_deref()
    }

    pub fn file_path(&self) -> Option<&str> {
        self.0.path.as_deref()
    }

    fn revision_or_default(&self) -> &str {
        self.revision().unwrap_or(crate::DEFAULT_REVISION)
    }
}

impl fmt::Display for RepoTarget {
    /// `model org/name (revision main, path a/b.bin)`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} {}", self.0.repo.kind, self.0.repo.id)?;
        match (&self.0.revision, &self.0.path) {
            (Some(r), Some(p)) => write!(f, " (revision {r}, path {p})"),
            (Some(r), None) => write!(f, " (revision {r})"),
            (None, Some(p)) => write!(f, " (path {p})"),
            (None, None) => Ok(()),
        }
    }
}

/// How a failure is classified (the CLI maps these to exit codes).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// No token, a refused token, or one without the permission needed.
    Auth,
    /// The repository, revision or path does not exist (or is hidden from this token).
    NotFound,
    /// The Hub refused the request for another reason, or answered nonsense.
    Rejected,
    /// The Hub or the CAS could not be reached, or failed, after retries.
    Network,
    /// Downloaded data does not match what the Hub lists for it.
    Corrupt,
    /// A local file could not be read or written.
    Local,
    /// Arguments that cannot work (e.g. one output file for a folder).
    Usage,
    /// Cancelled; rerun to resume.
    Interrupted,
    Other,
}

#[derive(Debug, thiserror::Error)]
pub enum HubError {
    #[error(
        "{subject} not found on {endpoint}: check the name and the type (a datasets/ or spaces/ prefix){}",
        private_hint(*authenticated)
    )]
    RepoNotFound {
        subject: RepoTarget,
        endpoint: String,
        authenticated: bool,
    },
    #[error(
        "revision {} not found in {subject}: check the branch, tag or commit name",
        subject.revision_or_default()
    )]
    RevisionNotFound { subject: RepoTarget },
    #[error("{subject}: no such file or folder in the repository (`xet ls` lists what is there)")]
    EntryNotFound { subject: RepoTarget },
    #[error(
        "{subject} is gated: accept its access conditions on its Hub page, with the account your token belongs to ({message})"
    )]
    Gated {
        subject: RepoTarget,
        message: String,
    },
    #[error(
        "{action} {subject} needs a Hub token: set HF_TOKEN or log in with `hf auth login` ({message})"
    )]
    NoToken {
        action: &'static str,
        subject: RepoTarget,
        message: String,
    },
    #[error(
        "the Hub refused the token from {origin} for {action} {subject} ({message}): it is wrong or expired; use a valid one"
    )]
    BadToken {
        action: &'static str,
        subject: RepoTarget,
        origin: TokenOrigin,
        message: String,
    },
    #[error(
        "the token from {origin} may not do this: {action} {subject} was forbidden ({message}); uploads need a token with write access to the repository"
    )]
    Forbidden {
        action: &'static str,
        subject: RepoTarget,
        origin: TokenOrigin,
        message: String,
    },
    #[error("{action} {subject}: the Hub answered {status} to {url}: {message}")]
    Status {
        action: &'static str,
        subject: RepoTarget,
        url: String,
        status: u16,
        message: String,
    },
    #[error("{action} {subject}: cannot reach {url}")]
    Network {
        action: &'static str,
        subject: RepoTarget,
        url: String,
        #[source]
        source: reqwest::Error,
    },
    #[error("{action} {subject}: the answer of {url} is not valid: {why}")]
    BadAnswer {
        action: &'static str,
        subject: RepoTarget,
        url: String,
        why: String,
    },
    /// The events feed answered something other than an event stream: this server has
    /// no feed there (a proxy's page, an old server).
    #[error(
        "{subject}: {url} answered {content_type:?}, not an event stream (text/event-stream): the server has no events feed there"
    )]
    NotEventStream {
        subject: RepoTarget,
        url: String,
        content_type: String,
    },
    /// A listing names a path git refuses: nothing is written, whoever the server is.
    #[error("{subject}: {url} lists a file this machine will not write, so nothing was downloaded")]
    UnsafePath {
        subject: RepoTarget,
        url: String,
        #[source]
        source: xet_hub::NameError,
    },
    #[error("{subject}: the transfer broke off: {why}; run the command again")]
    Transfer { subject: RepoTarget, why: String },
    #[error("{subject} failed verification: {why}; nothing was kept")]
    Verify { subject: RepoTarget, why: String },
    #[error("{what} {}", path.display())]
    Local {
        what: &'static str,
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    /// A local file whose relative path cannot name a bucket or repository file.
    #[error("{} cannot be stored under that name; rename it or leave it out (--exclude)", path.display())]
    LocalName {
        path: PathBuf,
        #[source]
        source: xet_hub::NameError,
    },
    #[error("{0}")]
    Usage(String),
    #[error("cannot set up the connection to the CAS of {subject}")]
    CasConfig {
        subject: RepoTarget,
        #[source]
        source: xet_client::ConfigError,
    },
    #[error("downloading from {subject} failed")]
    Download {
        subject: RepoTarget,
        #[source]
        source: xet_download::DownloadError,
    },
    #[error("uploading to {subject} failed")]
    Upload {
        subject: RepoTarget,
        #[source]
        source: xet_upload::UploadError,
    },
    /// Lines of a bucket batch the server did not apply (after retries).
    #[error("{subject}: {failed} path(s) were not written: {first}")]
    BatchFailed {
        subject: RepoTarget,
        failed: usize,
        first: String,
    },
    #[error("interrupted; run the same command again to resume")]
    Interrupted,
    /// A worker task of this process panicked or was cancelled: a bug, not the input.
    #[error("{what}: a worker task failed")]
    Internal {
        what: &'static str,
        source: tokio::task::JoinError,
    },
}

fn private_hint(authenticated: bool) -> &'static str {
    if authenticated {
        "; if it is private or gated, your token may not read it"
    } else {
        "; if it is private, give a token (HF_TOKEN or `hf auth login`)"
    }
}

impl HubError {
    pub fn kind(&self) -> ErrorKind {
        use HubError::*;
        match self {
            RepoNotFound { .. } | RevisionNotFound { .. } | EntryNotFound { .. } => {
                ErrorKind::NotFound
            }
            Gated { .. } | NoToken { .. } | BadToken { .. } | Forbidden { .. } => ErrorKind::Auth,
            Status { status, .. } if *status >= 500 || *status == 429 => ErrorKind::Network,
            Status { .. } | BadAnswer { .. } | BatchFailed { .. } | NotEventStream { .. } => {
                ErrorKind::Rejected
            }
            Network { .. } | Transfer { .. } => ErrorKind::Network,
            Verify { .. } => ErrorKind::Corrupt,
            Local { .. } | UnsafePath { .. } | LocalName { .. } => ErrorKind::Local,
            Usage(_) => ErrorKind::Usage,
            CasConfig { .. } => ErrorKind::Rejected,
            Download { source, .. } => download_kind(source.kind()),
            Upload { source, .. } => upload_kind(source),
            Interrupted => ErrorKind::Interrupted,
            Internal { .. } => ErrorKind::Other,
        }
    }

    pub(crate) fn local(
        what: &'static str,
        path: impl Into<PathBuf>,
        source: std::io::Error,
    ) -> Self {
        HubError::Local {
            what,
            path: path.into(),
            source,
        }
    }
}

fn download_kind(k: xet_download::ErrorKind) -> ErrorKind {
    use xet_download::ErrorKind as D;
    match k {
        D::NotFound => ErrorKind::NotFound,
        D::InvalidRequest => ErrorKind::Usage,
        D::Verification => ErrorKind::Corrupt,
        D::Network => ErrorKind::Network,
        D::Auth => ErrorKind::Auth,
        D::Output => ErrorKind::Local,
        D::Interrupted => ErrorKind::Interrupted,
        D::Other => ErrorKind::Other,
    }
}

fn upload_kind(e: &xet_upload::UploadError) -> ErrorKind {
    use xet_cas::CasError as C;
    match e {
        xet_upload::UploadError::Input { .. } => ErrorKind::Local,
        xet_upload::UploadError::Interrupted => ErrorKind::Interrupted,
        xet_upload::UploadError::Cas(c) => match c {
            C::Unauthorized { .. } | C::Forbidden(_) => ErrorKind::Auth,
            C::Network { .. } => ErrorKind::Network,
            C::Server { status, .. } if *status >= 500 || *status == 429 => ErrorKind::Network,
            _ => ErrorKind::Rejected,
        },
        _ => ErrorKind::Other,
    }
}

pub type Result<T, E = HubError> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;
    use xet_hub::{RepoId, RepoType};

    fn subject() -> RepoTarget {
        RepoTarget::repo(&RepoRef::new(
            RepoType::Dataset,
            RepoId::parse("org/d").unwrap(),
        ))
    }

    #[test]
    fn messages_name_what_was_asked_and_what_to_do() {
        let e = HubError::EntryNotFound {
            subject: subject().at("dev").path("a/b.bin"),
        };
        let m = e.to_string();
        assert!(
            m.contains("dataset org/d (revision dev, path a/b.bin)"),
            "{m}"
        );
        assert_eq!(e.kind(), ErrorKind::NotFound);
        let e = HubError::RevisionNotFound {
            subject: subject().at("v9"),
        };
        assert!(
            e.to_string()
                .starts_with("revision v9 not found in dataset org/d")
        );
        let e = HubError::RepoNotFound {
            subject: subject(),
            endpoint: "http://h".into(),
            authenticated: false,
        };
        assert!(e.to_string().contains("HF_TOKEN"), "{e}");
        let e = HubError::Forbidden {
            action: "committing to",
            subject: subject().at("main"),
            origin: TokenOrigin::Env("HF_TOKEN"),
            message: "read-only".into(),
        };
        let m = e.to_string();
        assert!(m.contains("HF_TOKEN") && m.contains("write access"), "{m}");
        assert_eq!(e.kind(), ErrorKind::Auth);
    }

    /// A worker task that panicked is an internal failure, not the user's usage error,
    /// and the panic is the source.
    #[tokio::test]
    async fn a_failed_worker_task_is_internal() {
        let source = tokio::task::spawn_blocking(|| panic!("boom"))
            .await
            .unwrap_err();
        let e = HubError::Internal {
            what: "hashing",
            source,
        };
        assert_eq!(e.kind(), ErrorKind::Other);
        assert_eq!(e.to_string(), "hashing: a worker task failed");
        let cause = std::error::Error::source(&e).expect("the task's error");
        assert!(cause.to_string().contains("panicked"), "{cause}");
    }
}
