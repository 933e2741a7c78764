//! Bearer-token checks (the extractors that run them before any body is read are
//! [`ReadAccess`](crate::state::extract::ReadAccess) and
//! [`WriteAccess`](crate::state::extract::WriteAccess)).
//!
//! - No tokens configured: every request is allowed (the server refuses to bind a
//!   non-loopback address in that case).
//! - Missing or unknown token: `401` + `WWW-Authenticate: Bearer` + JSON body.
//! - A read-only token on an upload route: `403`.
//!
//! Which files and repositories a caller reaches is its [`Scope`]: everything for an
//! unscoped user token, one repository for a CAS token minted for it, the repositories
//! its patterns match for a scoped user token, and on an open server (no tokens) the
//! public repositories and files no repository references.

use crate::config::{Access, RepoPattern, Token};
use crate::error::{ApiError, code};
use crate::sign::{UrlSigner, unix_now};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use subtle::ConstantTimeEq;
use xet_hub::{RepoId, RepoRef, RepoType};

pub struct Auth {
    tokens: Vec<Token>,
    minter: Option<TokenMinter>,
}

/// What a caller reaches (see the module docs).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Scope {
    /// Everything: an unscoped user token.
    All,
    /// An open server: public repositories, and files no repository references (plain
    /// CAS uploads).
    Open,
    /// A CAS token minted for this repository: the files it references.
    Repo(RepoRef),
    /// A scoped user token: the repositories these patterns match.
    Patterns(Vec<RepoPattern>),
}

impl Scope {
    /// Whether this scope reaches repository `repo` (private or not: privacy is the
    /// caller's business, see `Caller::user`).
    pub fn reaches(&self, repo: &RepoRef) -> bool {
        match self {
            Scope::All | Scope::Open => true,
            Scope::Repo(r) => r == repo,
            Scope::Patterns(p) => p.iter().any(|p| p.matches(&repo.id)),
        }
    }
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
    pub scope: Scope,
}

impl Caller {
    /// The caller of an open server (no tokens configured).
    pub fn open(token: Option<String>) -> Caller {
        Caller {
            token,
            access: Access::Write,
            user: false,
            expires: None,
            scope: Scope::Open,
        }
    }
}

/// What a presented user token grants for a need.
pub enum UserGrant {
    /// Not a configured token.
    Unknown,
    /// A configured token, without `need` (read-only).
    TooWeak,
    Granted {
        access: Access,
        scope: Scope,
    },
}

/// Short-lived CAS tokens handed out by the Hub's xet token routes:
/// `xet-cas.<r|w>.<repo>.<exp>.<signature>`, `<repo>` the repository it was minted for
/// (`type/namespace/name`, base64url), signed with a key every server sharing the store
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

    /// A token granting `access` to the files of `repo` until `exp` (Unix seconds).
    pub fn mint(&self, access: Access, repo: &RepoRef, exp: u64) -> String {
        let scope = scope_letter(access);
        let repo = URL_SAFE_NO_PAD.encode(format!("{}/{}", repo.kind.as_str(), repo.id));
        let sig = self
            .signer
            .sign(SIGN_CAS_TOKEN, &format!("{scope}.{repo}"), exp);
        format!("{MINTED_PREFIX}{scope}.{repo}.{exp}.{sig}")
    }

    /// The access a minted token grants at `now`, to which repository, and until when,
    /// or why it grants none.
    fn verify(&self, token: &str, now: u64) -> Result<(Access, RepoRef, u64), &'static str> {
        const MALFORMED: &str = "malformed CAS token";
        let mut parts = token
            .strip_prefix(MINTED_PREFIX)
            .ok_or("not a minted token")?
            .splitn(4, '.');
        let (Some(scope), Some(repo), Some(exp), Some(sig)) =
            (parts.next(), parts.next(), parts.next(), parts.next())
        else {
            return Err(MALFORMED);
        };
        let access = match scope {
            "r" => Access::Read,
            "w" => Access::Write,
            _ => return Err(MALFORMED),
        };
        let exp: u64 = exp.parse().map_err(|_| MALFORMED)?;
        if !self
            .signer
            .check(SIGN_CAS_TOKEN, &format!("{scope}.{repo}"), exp, sig)
        {
            return Err("invalid token");
        }
        if now >= exp {
            return Err("the CAS token has expired; fetch a new one from the xet token route");
        }
        Ok((access, decode_repo(repo).ok_or(MALFORMED)?, exp))
    }
}

/// The repository a minted token names (`type/namespace/name`, base64url): a
/// repository, or a bucket's storage (`bucket/-/<nonce>`, which only the server writes).
fn decode_repo(s: &str) -> Option<RepoRef> {
    let text = String::from_utf8(URL_SAFE_NO_PAD.decode(s).ok()?).ok()?;
    let (kind, id) = text.split_once('/')?;
    Some(RepoRef::new(
        RepoType::from_name(kind)?,
        RepoId::parse_stored(id).ok()?,
    ))
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
            return Ok(Caller::open(presented.map(str::to_string)));
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
            let (access, repo, exp) = minter.verify(presented, unix_now()).map_err(unauthorized)?;
            if access < need {
                return Err(read_only());
            }
            return Ok(Caller {
                token: Some(presented.to_string()),
                access,
                user: false,
                expires: Some(exp),
                scope: Scope::Repo(repo),
            });
        }
        match self.user_grant(presented, need) {
            UserGrant::Unknown => Err(unauthorized("invalid token")),
            UserGrant::TooWeak => Err(read_only()),
            UserGrant::Granted { access, scope } => Ok(Caller {
                token: Some(presented.to_string()),
                access,
                user: true,
                expires: None,
                scope,
            }),
        }
    }

    /// What a configured (user) token grants for `need`: every configured line with this
    /// secret that grants `need` counts, an unscoped one reaching everything. Minted CAS
    /// tokens are no user tokens.
    pub fn user_grant(&self, presented: &str, need: Access) -> UserGrant {
        // Compare against every configured token (no early exit on a match).
        let mut matched: Vec<&Token> = Vec::new();
        for t in &self.tokens {
            // Constant time for equal lengths; a length mismatch returns at once (so only
            // the length can leak).
            if bool::from(t.secret.as_bytes().ct_eq(presented.as_bytes())) {
                matched.push(t);
            }
        }
        if matched.is_empty() {
            return UserGrant::Unknown;
        }
        let enough: Vec<&Token> = matched.into_iter().filter(|t| t.access >= need).collect();
        let Some(access) = enough.iter().map(|t| t.access).max() else {
            return UserGrant::TooWeak;
        };
        let scope = if enough.iter().any(|t| t.scope.is_none()) {
            Scope::All
        } else {
            Scope::Patterns(enough.iter().filter_map(|t| t.scope.clone()).collect())
        };
        UserGrant::Granted { access, scope }
    }
}

fn read_only() -> ApiError {
    ApiError::forbidden(
        code::FORBIDDEN,
        "this token is read-only; uploads need a write token",
    )
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
        let repo = RepoRef::new(RepoType::Dataset, RepoId::parse("org/a.b-c").unwrap());
        let w = TokenMinter::new(key).mint(Access::Write, &repo, later);
        let r = TokenMinter::new(key).mint(Access::Read, &repo, later);
        let caller = a.check(&h(&format!("Bearer {w}")), Access::Write).unwrap();
        assert!(!caller.user);
        assert_eq!(caller.scope, Scope::Repo(repo.clone()));
        assert_eq!(
            a.check(&h(&format!("Bearer {r}")), Access::Write)
                .unwrap_err()
                .status,
            StatusCode::FORBIDDEN
        );
        assert!(a.check(&h(&format!("Bearer {r}")), Access::Read).is_ok());
        // A bucket's storage, a name no request can give, round-trips.
        let storage = RepoRef::new(RepoType::Bucket, RepoId::storage(0xfeed));
        let s = TokenMinter::new(key).mint(Access::Read, &storage, later);
        let caller = a.check(&h(&format!("Bearer {s}")), Access::Read).unwrap();
        assert_eq!(caller.scope, Scope::Repo(storage));
        // Another key, a changed scope or expiry, an expired token: refused.
        let other = TokenMinter::new([8u8; 32]).mint(Access::Write, &repo, later);
        let widened = r.replacen(".r.", ".w.", 1);
        let extended = w.replacen(&later.to_string(), &(later + 1).to_string(), 1);
        let expired = TokenMinter::new(key).mint(Access::Write, &repo, unix_now() - 1);
        // Another repository's name in a token signed for this one.
        let elsewhere = RepoRef::new(RepoType::Dataset, RepoId::parse("org/secret").unwrap());
        let moved = {
            let other = TokenMinter::new(key).mint(Access::Write, &elsewhere, later);
            let name = |t: &str| t.split('.').nth(2).unwrap().to_string();
            w.replacen(&name(&w), &name(&other), 1)
        };
        for bad in [
            other,
            widened,
            extended,
            expired,
            moved,
            "xet-cas.w.1".into(),
        ] {
            assert_eq!(
                a.check(&h(&format!("Bearer {bad}")), Access::Read)
                    .unwrap_err()
                    .status,
                StatusCode::UNAUTHORIZED,
                "{bad}"
            );
        }
        // Minted tokens are for the CAS only: they are no user token.
        assert!(matches!(a.user_grant(&w, Access::Read), UserGrant::Unknown));
        assert!(matches!(
            a.user_grant("w", Access::Write),
            UserGrant::Granted {
                scope: Scope::All,
                ..
            }
        ));
    }

    #[test]
    fn scoped_user_tokens() {
        let org = RepoPattern::parse("org/*").unwrap();
        let one = RepoPattern::parse("other/x").unwrap();
        let a = Auth::new(vec![
            Token::write("s").scoped(org.clone()),
            Token::read("s").scoped(one.clone()),
            Token::read("r").scoped(one.clone()),
        ]);
        let scope = |t: &str, need| match a.user_grant(t, need) {
            UserGrant::Granted { scope, .. } => Some(scope),
            _ => None,
        };
        assert_eq!(
            scope("s", Access::Read),
            Some(Scope::Patterns(vec![org.clone(), one.clone()]))
        );
        assert_eq!(scope("s", Access::Write), Some(Scope::Patterns(vec![org])));
        assert!(matches!(
            a.user_grant("r", Access::Write),
            UserGrant::TooWeak
        ));
        let repo = |s: &str| RepoRef::new(RepoType::Model, RepoId::parse(s).unwrap());
        let p = scope("s", Access::Write).unwrap();
        assert!(p.reaches(&repo("org/y")) && !p.reaches(&repo("other/x")));
    }
}
