//! Bearer-token checks, as axum extractors that run before any body is read.
//!
//! - No tokens configured: every request is allowed (the server refuses to bind a
//!   non-loopback address in that case).
//! - Missing or unknown token: `401` + `WWW-Authenticate: Bearer` + JSON body.
//! - A read-only token on an upload route: `403`.

use crate::app::AppState;
use crate::config::{Access, Token};
use crate::error::{ApiError, code};
use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use subtle::ConstantTimeEq;

pub struct Auth {
    tokens: Vec<Token>,
}

/// The caller's token, if any (`None` when auth is off and no token was sent).
#[derive(Debug, Clone)]
pub struct Caller {
    pub token: Option<String>,
    pub access: Access,
}

fn unauthorized(reason: &str) -> ApiError {
    ApiError::new(StatusCode::UNAUTHORIZED, code::UNAUTHORIZED, reason)
        .with_header(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"))
}

/// The token of an `Authorization: Bearer <token>` header.
pub fn bearer(headers: &HeaderMap) -> Option<&str> {
    let v = headers.get(header::AUTHORIZATION)?.to_str().ok()?.trim();
    let (scheme, token) = v.split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

impl Auth {
    pub fn new(tokens: Vec<Token>) -> Self {
        Auth { tokens }
    }

    pub fn enabled(&self) -> bool {
        !self.tokens.is_empty()
    }

    /// Check `headers` for a token granting `need`.
    pub fn check(&self, headers: &HeaderMap, need: Access) -> Result<Caller, ApiError> {
        let presented = bearer(headers);
        if !self.enabled() {
            return Ok(Caller {
                token: presented.map(str::to_string),
                access: Access::Write,
            });
        }
        let Some(presented) = presented else {
            return Err(if headers.contains_key(header::AUTHORIZATION) {
                unauthorized("the Authorization header is not of the form `Bearer <token>`")
            } else {
                unauthorized("missing bearer token")
            });
        };
        // Compare against every configured token (no early exit on a match).
        let mut found: Option<Access> = None;
        for t in &self.tokens {
            // Constant time for equal lengths; a length mismatch returns at once (so only
            // the length can leak).
            if bool::from(t.secret.as_bytes().ct_eq(presented.as_bytes())) {
                found = found.max(Some(t.access));
            }
        }
        let Some(access) = found else {
            return Err(unauthorized("invalid token"));
        };
        if access < need {
            return Err(ApiError::forbidden(
                code::FORBIDDEN,
                "this token is read-only; uploads need a write token",
            ));
        }
        Ok(Caller {
            token: Some(presented.to_string()),
            access,
        })
    }
}

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

#[cfg(test)]
mod tests {
    use super::*;

    fn h(v: &str) -> HeaderMap {
        let mut m = HeaderMap::new();
        m.insert(header::AUTHORIZATION, HeaderValue::from_str(v).unwrap());
        m
    }

    #[test]
    fn matrix() {
        let a = Auth::new(vec![Token::read("r"), Token::write("w")]);
        assert_eq!(
            a.check(&HeaderMap::new(), Access::Read).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            a.check(&h("Bearer x"), Access::Read).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        assert_eq!(
            a.check(&h("Basic w"), Access::Read).unwrap_err().status,
            StatusCode::UNAUTHORIZED
        );
        assert!(a.check(&h("Bearer r"), Access::Read).is_ok());
        assert_eq!(
            a.check(&h("Bearer r"), Access::Write).unwrap_err().status,
            StatusCode::FORBIDDEN
        );
        assert!(a.check(&h("bearer w"), Access::Write).is_ok());
        let open = Auth::new(vec![]);
        assert!(open.check(&HeaderMap::new(), Access::Write).is_ok());
        assert!(open.check(&h("Bearer anything"), Access::Write).is_ok());
    }
}
