//! What a Hub handler answers: [`HubReply`], the Hub's error (status, `X-Error-Code`,
//! `X-Error-Message`, a `{"error"}` body), and the header helpers the handlers share.

use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use xet_hub::api::{ErrorBody, error_code, header as hh};
use xet_hub::{CommitId, NameError, RepoError};

use crate::error::ApiError;

/// An error answer of the Hub API.
#[derive(Debug)]
pub(crate) struct HubReply {
    pub(super) status: StatusCode,
    code: Option<&'static str>,
    pub(super) message: String,
    commit: Option<CommitId>,
    headers: Vec<(HeaderName, HeaderValue)>,
}

pub(crate) type HubResult<T> = Result<T, HubReply>;

impl HubReply {
    pub(crate) fn new(status: StatusCode, message: impl Into<String>) -> HubReply {
        HubReply {
            status,
            code: None,
            message: message.into(),
            commit: None,
            headers: Vec::new(),
        }
    }

    pub(crate) fn with_header(mut self, name: HeaderName, value: HeaderValue) -> HubReply {
        self.headers.push((name, value));
        self
    }

    pub(crate) fn bad_request(message: impl Into<String>) -> HubReply {
        HubReply::new(StatusCode::BAD_REQUEST, message)
    }

    pub(crate) fn coded(
        status: StatusCode,
        code: &'static str,
        message: impl Into<String>,
    ) -> HubReply {
        HubReply {
            code: Some(code),
            ..HubReply::new(status, message)
        }
    }

    /// With `X-Repo-Commit` (an `EntryNotFound` at a known commit, so clients can record
    /// the absence in their cache).
    pub(crate) fn at_commit(mut self, commit: CommitId) -> HubReply {
        self.commit = Some(commit);
        self
    }
}

impl IntoResponse for HubReply {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(status = self.status.as_u16(), "{}", self.message);
        }
        let mut r = (
            self.status,
            axum::Json(ErrorBody {
                error: self.message.clone(),
            }),
        )
            .into_response();
        let h = r.headers_mut();
        if let Some(code) = self.code {
            h.insert(hh::ERROR_CODE, HeaderValue::from_static(code));
        }
        // Header values must be visible ASCII: keep the message readable, drop the rest.
        let ascii: String = self
            .message
            .chars()
            .map(|c| {
                if c.is_ascii_graphic() || c == ' ' {
                    c
                } else {
                    '?'
                }
            })
            .take(400)
            .collect();
        if let Ok(v) = HeaderValue::from_str(&ascii) {
            h.insert(hh::ERROR_MESSAGE, v);
        }
        if let Some(c) = self.commit {
            h.insert(hh::REPO_COMMIT, header_value(&c.to_string()));
        }
        for (k, v) in self.headers {
            h.insert(k, v);
        }
        r
    }
}

impl From<RepoError> for HubReply {
    fn from(e: RepoError) -> HubReply {
        use xet_hub::commit::ApplyError;
        let message = e.to_string();
        match e {
            RepoError::RepoNotFound(_) => {
                HubReply::coded(StatusCode::NOT_FOUND, error_code::REPO_NOT_FOUND, message)
            }
            RepoError::RevisionNotFound { .. } => HubReply::coded(
                StatusCode::NOT_FOUND,
                error_code::REVISION_NOT_FOUND,
                message,
            ),
            RepoError::EntryNotFound { .. }
            | RepoError::Apply(ApplyError::NoSuchFile { .. } | ApplyError::NoSuchFolder { .. }) => {
                HubReply::coded(StatusCode::NOT_FOUND, error_code::ENTRY_NOT_FOUND, message)
            }
            RepoError::RepoExists(_)
            | RepoError::BranchExists { .. }
            | RepoError::TagExists { .. }
            | RepoError::Moving { .. } => HubReply::new(StatusCode::CONFLICT, message),
            RepoError::ParentMismatch { .. } => {
                HubReply::new(StatusCode::PRECONDITION_FAILED, message)
            }
            RepoError::Apply(_) => HubReply::new(StatusCode::UNPROCESSABLE_ENTITY, message),
            RepoError::IsTag { .. } => HubReply::bad_request(message),
            RepoError::DefaultBranch { .. } => HubReply::new(StatusCode::FORBIDDEN, message),
            RepoError::Contention { .. } | RepoError::RecordContention { .. } => {
                HubReply::new(StatusCode::SERVICE_UNAVAILABLE, message)
            }
            RepoError::Store(e) => HubReply::from(ApiError::from(e)),
        }
    }
}

impl From<ApiError> for HubReply {
    fn from(e: ApiError) -> HubReply {
        HubReply::new(e.status, e.reason)
    }
}

impl From<NameError> for HubReply {
    fn from(e: NameError) -> HubReply {
        HubReply::bad_request(e.to_string())
    }
}

impl From<xet_cas::CasError> for HubReply {
    fn from(e: xet_cas::CasError) -> HubReply {
        HubReply::from(ApiError::from(e))
    }
}

pub(crate) fn header_value(s: &str) -> HeaderValue {
    HeaderValue::from_str(s).unwrap_or_else(|_| HeaderValue::from_static("invalid"))
}

pub(crate) fn set(r: &mut Response, name: &'static str, value: HeaderValue) {
    r.headers_mut().insert(HeaderName::from_static(name), value);
}

pub(crate) fn content_type(r: &mut Response, v: &'static str) {
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(v));
}
