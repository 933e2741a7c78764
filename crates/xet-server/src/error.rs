//! Every rejection is a status plus a JSON [`ErrorBody`] naming the reason.

use axum::Json;
use axum::http::{HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use xet_cas::CasError;
use xet_cas::wire::ErrorBody;

/// Machine-readable codes in `ErrorBody::error`.
pub mod code {
    pub const BAD_REQUEST: &str = "bad_request";
    pub const BAD_HASH: &str = "bad_hash";
    pub const BAD_PREFIX: &str = "bad_prefix";
    pub const BAD_RANGE: &str = "bad_range";
    pub const RANGE_NOT_SATISFIABLE: &str = "range_not_satisfiable";
    pub const UNAUTHORIZED: &str = "unauthorized";
    pub const FORBIDDEN: &str = "forbidden";
    pub const URL_EXPIRED: &str = "url_expired";
    pub const BAD_SIGNATURE: &str = "bad_signature";
    pub const NOT_FOUND: &str = "not_found";
    pub const NO_ROUTE: &str = "no_route";
    pub const METHOD_NOT_ALLOWED: &str = "method_not_allowed";
    /// A write to a store that takes none (a bundle): `405`.
    pub const READ_ONLY: &str = "read_only";
    pub const PAYLOAD_TOO_LARGE: &str = "payload_too_large";
    pub const LENGTH_MISMATCH: &str = "length_mismatch";
    pub const CHECKSUM_MISMATCH: &str = "checksum_mismatch";
    pub const CONFLICT: &str = "conflict";
    pub const INVALID_XORB: &str = "invalid_xorb";
    pub const INVALID_SHARD: &str = "invalid_shard";
    pub const MISSING_XORB: &str = "missing_xorb";
    pub const BUSY: &str = "busy";
    /// No room for another grant (or for its data): `503` with `Retry-After`. Clients
    /// upload the xorb with `POST /v1/xorbs` instead.
    pub const GRANT_CAPACITY: &str = "grant_capacity";
    pub const STORAGE: &str = "storage";
    pub const INTERNAL: &str = "internal";
    pub const UPSTREAM: &str = "upstream";
}

/// An HTTP error answer.
#[derive(Debug)]
pub struct ApiError {
    pub status: StatusCode,
    pub code: &'static str,
    pub reason: String,
    pub headers: Vec<(HeaderName, HeaderValue)>,
}

impl ApiError {
    pub fn new(status: StatusCode, code: &'static str, reason: impl Into<String>) -> Self {
        ApiError {
            status,
            code,
            reason: reason.into(),
            headers: Vec::new(),
        }
    }
    pub fn bad_request(code: &'static str, reason: impl Into<String>) -> Self {
        Self::new(StatusCode::BAD_REQUEST, code, reason)
    }
    pub fn not_found(reason: impl Into<String>) -> Self {
        Self::new(StatusCode::NOT_FOUND, code::NOT_FOUND, reason)
    }
    pub fn forbidden(code: &'static str, reason: impl Into<String>) -> Self {
        Self::new(StatusCode::FORBIDDEN, code, reason)
    }
    pub fn internal(reason: impl Into<String>) -> Self {
        Self::new(StatusCode::INTERNAL_SERVER_ERROR, code::INTERNAL, reason)
    }
    pub fn too_large(what: &str, limit: u64) -> Self {
        Self::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            code::PAYLOAD_TOO_LARGE,
            format!("{what} is larger than {limit} bytes"),
        )
    }
    /// 416 with `Content-Range: bytes */size`.
    pub fn unsatisfiable(reason: impl Into<String>, size: u64) -> Self {
        Self::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            code::RANGE_NOT_SATISFIABLE,
            reason,
        )
        .with_header(
            header::CONTENT_RANGE,
            HeaderValue::from_str(&format!("bytes */{size}")).expect("ascii"),
        )
    }
    /// `503 grant_capacity` with `Retry-After: secs` (at least 1).
    pub fn grant_capacity(reason: impl Into<String>, secs: u64) -> Self {
        Self::new(
            StatusCode::SERVICE_UNAVAILABLE,
            code::GRANT_CAPACITY,
            reason,
        )
        .with_header(
            header::RETRY_AFTER,
            HeaderValue::from_str(&secs.max(1).to_string()).expect("digits"),
        )
    }
    pub fn with_header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.push((name, value));
        self
    }

    /// The machine code an error frame / error body carries for a [`CasError`].
    pub fn code_of(e: &CasError) -> &'static str {
        ApiError::from(e.clone()).code
    }
}

impl From<CasError> for ApiError {
    fn from(e: CasError) -> Self {
        // The body carries the whole chain: a client has only this text.
        let reason = xet_cas::error_chain(&e);
        match e {
            CasError::NotFound { .. } => ApiError::not_found(reason),
            CasError::InvalidXorb { .. } => ApiError::bad_request(code::INVALID_XORB, reason),
            CasError::InvalidShard { .. } => ApiError::bad_request(code::INVALID_SHARD, reason),
            CasError::MissingXorb { .. } => ApiError::bad_request(code::MISSING_XORB, reason),
            CasError::RangeNotSatisfiable { size, .. } => ApiError::unsatisfiable(reason, size),
            CasError::Unauthorized { .. } => {
                ApiError::new(StatusCode::UNAUTHORIZED, code::UNAUTHORIZED, reason)
            }
            CasError::Forbidden(_) => ApiError::forbidden(code::FORBIDDEN, reason),
            CasError::UrlExpired { .. } => ApiError::forbidden(code::URL_EXPIRED, reason),
            CasError::Server { .. } | CasError::Network { .. } => {
                ApiError::new(StatusCode::BAD_GATEWAY, code::UPSTREAM, reason)
            }
            CasError::Corrupt { .. } => ApiError::internal(reason),
            CasError::Storage { .. } => {
                ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, code::STORAGE, reason)
            }
            CasError::ReadOnly(_) => {
                ApiError::new(StatusCode::METHOD_NOT_ALLOWED, code::READ_ONLY, reason)
            }
        }
    }
}

impl From<crate::range::RangeError> for ApiError {
    fn from(e: crate::range::RangeError) -> Self {
        ApiError::bad_request(code::BAD_RANGE, e.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status.is_server_error() {
            tracing::error!(
                status = self.status.as_u16(),
                code = self.code,
                "{}",
                self.reason
            );
        } else {
            tracing::debug!(
                status = self.status.as_u16(),
                code = self.code,
                "{}",
                self.reason
            );
        }
        let mut resp = (
            self.status,
            Json(ErrorBody {
                error: self.code.to_string(),
                reason: self.reason,
            }),
        )
            .into_response();
        for (k, v) in self.headers {
            resp.headers_mut().insert(k, v);
        }
        resp
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
