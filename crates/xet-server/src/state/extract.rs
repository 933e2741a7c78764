//! Extractors and request parsing shared by the handlers: the caller's access, path
//! parameters, the base URL of handed-out URLs, hashes and prefixes, `Range` headers.

use super::AppState;
use crate::auth::Caller;
use crate::config::Access;
use crate::error::{ApiError, ApiResult, code};
use crate::range::{RangeSpec, parse_range_header};
use axum::extract::{FromRequestParts, Path};
use axum::http::request::Parts;
use axum::http::{HeaderMap, header};
use serde::de::DeserializeOwned;
use std::convert::Infallible;
use xet_cas::routes;
use xet_hash::MerkleHash;

/// Extractor: any valid token.
pub struct ReadAccess(pub Caller);
/// Extractor: a read+write token.
pub struct WriteAccess(pub Caller);

impl FromRequestParts<AppState> for ReadAccess {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state
            .auth
            .check(&parts.headers, Access::Read)
            .map(ReadAccess)
    }
}

impl FromRequestParts<AppState> for WriteAccess {
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        state
            .auth
            .check(&parts.headers, Access::Write)
            .map(WriteAccess)
    }
}

/// `Path<T>` with a JSON rejection.
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(t)) => Ok(PathParams(t)),
            Err(e) => Err(ApiError::bad_request(code::BAD_REQUEST, e.body_text())),
        }
    }
}

/// Base URL for URLs handed to the client: the configured public URL, or `http://` + the
/// `Host` the client connected to (so loopback clients get loopback URLs), or the bound
/// address.
pub struct BaseUrl(pub String);

fn plausible_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 255
        && h.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
}

impl FromRequestParts<AppState> for BaseUrl {
    type Rejection = Infallible;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        Ok(BaseUrl(base_url(parts, state)))
    }
}

/// The URL clients reach this server at: the configured public URL, else `http://` +
/// the `Host` they connected to (so links work from wherever they came).
pub fn base_url(parts: &Parts, state: &AppState) -> String {
    if let Some(p) = &state.config.public_url {
        return p.trim_end_matches('/').to_string();
    }
    let host = parts
        .headers
        .get(header::HOST)
        .and_then(|v| v.to_str().ok())
        .or_else(|| parts.uri.authority().map(|a| a.as_str()))
        .filter(|h| plausible_host(h));
    match host {
        Some(h) => format!("http://{h}"),
        None => format!("http://{}", state.local_addr),
    }
}

/// `s`, cut to 80 characters, for echoing client input in error messages.
pub(crate) fn shorten(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(80).collect::<String>())
    }
}

pub(crate) fn parse_hash(what: &str, s: &str) -> ApiResult<MerkleHash> {
    MerkleHash::from_hex(s).map_err(|e| {
        ApiError::bad_request(
            code::BAD_HASH,
            format!("{what} hash {:?} is not 64 hex digits: {e}", shorten(s)),
        )
    })
}

pub(crate) fn check_prefix(p: &str) -> ApiResult<()> {
    if routes::is_known_prefix(p) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            code::BAD_PREFIX,
            format!(
                "unknown prefix {:?} (expected {:?} or {:?})",
                shorten(p),
                routes::DEFAULT_PREFIX,
                routes::MERKLEDB_PREFIX
            ),
        ))
    }
}

/// The `Range` header, as sent and parsed, if there is one (`400 bad_range` if it is
/// not ASCII or not a byte-range set).
pub(crate) fn range_header(headers: &HeaderMap) -> ApiResult<Option<(&str, Vec<RangeSpec>)>> {
    let Some(v) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::bad_request(code::BAD_RANGE, "Range header is not ASCII"))?;
    Ok(Some((v, parse_range_header(v)?)))
}
