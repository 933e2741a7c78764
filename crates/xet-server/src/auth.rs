//! Bearer-token checks (the extractors that run them before any body is read are
//! [`ReadAccess`](crate::state::extract::ReadAccess) and
//! [`WriteAccess`](crate::state::extract::WriteAccess)).
//!
//! - No tokens configured: every request is allowed (the server refuses to bind a
//!   non-loopback address in that case).
//! - Missing or unknown token: `401` + `WWW-Authenticate: Bearer` + JSON body.
//! - A read-only token on an upload route: `403`.

use crate::config::{Access, Token};
use crate::error::{ApiError, code};
use crate::sign::{UrlSigner, unix_now};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use subtle::ConstantTimeEq;

pub struct Auth {
    tokens: Vec<Token>,
    minter: Option<TokenMinter>,
}

/// The caller's token, if any (`None` when auth is off and no token was sent).
#[derive(Debug, Clone)]
pub struct Caller {
    pub token: Option<String>,
    pub access: Access,
    /// The token is one of the configured (user) tokens, not a minted CAS token and not
    /// an open server's anything-goes.
    pub user: bool,
    /// When a minted CAS token stops working (Unix seconds); `None` for tokens that do
    /// not expire.
    pub expires: Option<u64>,
}

/// Short-lived CAS tokens handed out by the Hub's xet token routes:
/// `xet-cas.<r|w>.<exp>.<signature>`, signed with a key every server sharing the store
/// holds, so a token minted by one server works on all of them until `exp`.
pub struct TokenMinter {
    signer: UrlSigner,
}

/// Prefix of minted CAS tokens.
pub const MINTED_PREFIX: &str = "xet-cas.";
const SIGN_CAS_TOKEN: &str = "cas-token";

impl TokenMinter {
    pub fn new(key: [u8; 32]) -> TokenMinter {
        TokenMinter {
            signer: UrlSigner::with_key(key),
        }
    }

    /// A token granting `access` until `exp` (Unix seconds).
    pub fn mint(&self, access: Access, exp: u64) -> String {
        let scope = scope_letter(access);
        let sig = self.signer.sign(SIGN_CAS_TOKEN, scope, exp);
        format!("{MINTED_PREFIX}{scope}.{exp}.{sig}")
    }

    /// The access a minted token grants at `now` and until when, or why it grants none.
    fn verify(&self, token: &str, now: u64) -> Result<(Access, u64), &'static str> {
        let mut parts = token
            .strip_prefix(MINTED_PREFIX)
            .ok_or("not a minted token")?
            .splitn(3, '.');
        let (Some(scope), Some(exp), Some(sig)) = (parts.next(), parts.next(), parts.next()) else {
            return Err("malformed CAS token");
        };
        let access = match scope {
            "r" => Access::Read,
            "w" => Access::Write,
            _ => return Err("malformed CAS token"),
        };
        let exp: u64 = exp.parse().map_err(|_| "malformed CAS token")?;
        if !self.signer.check(SIGN_CAS_TOKEN, scope, exp, sig) {
            return Err("invalid token");
        }
        if now >= exp {
            return Err("the CAS token has expired; fetch a new one from the xet token route");
        }
        Ok((access, exp))
    }
}

fn scope_letter(access: Access) -> &'static str {
    match access {
        Access::Read => "r",
        Access::Write => "w",
    }
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
        Auth {
            tokens,
            minter: None,
        }
    }

    /// Also accept CAS tokens minted with `minter`'s key.
    pub fn with_minter(mut self, minter: TokenMinter) -> Self {
        self.minter = Some(minter);
        self
    }

    pub fn minter(&self) -> Option<&TokenMinter> {
        self.minter.as_ref()
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
                user: false,
                expires: None,
            });
        }
        let Some(presented) = presented else {
            return Err(if headers.contains_key(header::AUTHORIZATION) {
                unauthorized("the Authorization header is not of the form `Bearer <token>`")
            } else {
                unauthorized("missing bearer token")
            });
        };
        if let Some(minter) = &self.minter
            && presented.starts_with(MINTED_PREFIX)
        {
            let (access, exp) = minter.verify(presented, unix_now()).map_err(unauthorized)?;
            return grant(presented, access, need, false).map(|c| Caller {
                expires: Some(exp),
                ..c
            });
        }
        let access = self
            .user_access(presented)
            .ok_or_else(|| unauthorized("invalid token"))?;
        grant(presented, access, need, true)
    }

    /// The access a configured (user) token grants; minted CAS tokens grant nothing here.
    pub fn user_access(&self, presented: &str) -> Option<Access> {
        // Compare against every configured token (no early exit on a match).
        let mut found: Option<Access> = None;
        for t in &self.tokens {
            // Constant time for equal lengths; a length mismatch returns at once (so only
            // the length can leak).
            if bool::from(t.secret.as_bytes().ct_eq(presented.as_bytes())) {
                found = found.max(Some(t.access));
            }
        }
        found
    }
}

fn grant(presented: &str, access: Access, need: Access, user: bool) -> Result<Caller, ApiError> {
    if access < need {
        return Err(ApiError::forbidden(
            code::FORBIDDEN,
            "this token is read-only; uploads need a write token",
        ));
    }
    Ok(Caller {
        token: Some(presented.to_string()),
        access,
        user,
        expires: None,
    })
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

    #[test]
    fn minted_cas_tokens() {
        let key = [7u8; 32];
        let a = Auth::new(vec![Token::write("w")]).with_minter(TokenMinter::new(key));
        let later = unix_now() + 600;
        let w = TokenMinter::new(key).mint(Access::Write, later);
        let r = TokenMinter::new(key).mint(Access::Read, later);
        let caller = a.check(&h(&format!("Bearer {w}")), Access::Write).unwrap();
        assert!(!caller.user);
        assert_eq!(
            a.check(&h(&format!("Bearer {r}")), Access::Write)
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        assert!(a.check(&h(&format!("Bearer {r}")), Access::Read).is_ok());
        // Another key, a changed scope or expiry, an expired token: refused.
        let other = TokenMinter::new([8u8; 32]).mint(Access::Write, later);
        let widened = r.replacen(".r.", ".w.", 1);
        let extended = w.replacen(&later.to_string(), &(later + 1).to_string(), 1);
        let expired = TokenMinter::new(key).mint(Access::Write, unix_now() - 1);
        for bad in [other, widened, extended, expired, "xet-cas.w.1".into()] {
            assert_eq!(
                a.check(&h(&format!("Bearer {bad}")), Access::Read)
                    .unwrap_err()
                    .status,
                StatusCode::UNAUTHORIZED,
                "{bad}"
            );
        }
        // Minted tokens are for the CAS only: they are no user token.
        assert_eq!(a.user_access(&w), None);
        assert_eq!(a.user_access("w"), Some(Access::Write));
    }
}
