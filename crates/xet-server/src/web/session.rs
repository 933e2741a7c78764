//! Who reads a page: the sign-in cookie (a token of this server, base64url in an
//! `HttpOnly`, `SameSite=Strict` cookie, `Secure` behind https), checked on every
//! request the way the API checks a bearer token. Only the web pages read it; the
//! `web` layer removes every `Cookie` header before a request goes anywhere else.

use axum::http::{HeaderMap, HeaderValue, header};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;

use crate::auth::{Caller, UserGrant};
use crate::config::Access;
use crate::state::AppState;

/// The cookie's name.
pub(crate) const COOKIE: &str = "xet_session";
/// How long a sign-in lasts (the browser forgets the cookie then).
const MAX_AGE_SECS: u64 = 12 * 3600;
/// Longest token accepted from the sign-in form.
pub(crate) const MAX_TOKEN: usize = 4096;

/// Who reads the page.
pub(crate) struct Viewer {
    /// As the API would see them with the same token.
    pub caller: Caller,
    /// May read anything at all: an open server (no tokens), or a signed-in token.
    pub may_read: bool,
    /// A valid sign-in cookie came with the request.
    pub signed_in: bool,
    /// The server has tokens (signing in means something).
    pub can_sign_in: bool,
}

/// The token in the request's sign-in cookie, if there is one.
pub(crate) fn cookie_token(headers: &HeaderMap) -> Option<String> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|kv| kv.trim().split_once('='))
        .find(|(k, _)| *k == COOKIE)
        .and_then(|(_, v)| URL_SAFE_NO_PAD.decode(v.trim().as_bytes()).ok())
        .and_then(|b| String::from_utf8(b).ok())
}

/// Who reads, from the request's cookie.
pub(crate) fn viewer(state: &AppState, headers: &HeaderMap) -> Viewer {
    let auth = &state.auth;
    if !auth.enabled() {
        return Viewer {
            caller: Caller::open(None),
            may_read: true,
            signed_in: false,
            can_sign_in: false,
        };
    }
    let granted = cookie_token(headers).and_then(|t| match auth.user_grant(&t, Access::Read) {
        UserGrant::Granted { access, scope } => Some(Caller {
            token: Some(t),
            access,
            user: true,
            expires: None,
            scope,
        }),
        _ => None,
    });
    match granted {
        Some(caller) => Viewer {
            caller,
            may_read: true,
            signed_in: true,
            can_sign_in: true,
        },
        None => Viewer {
            caller: Caller {
                token: None,
                access: Access::Read,
                user: false,
                expires: None,
                scope: crate::auth::Scope::Open,
            },
            may_read: false,
            signed_in: false,
            can_sign_in: true,
        },
    }
}

/// Whether `token` is one of this server's user tokens.
pub(crate) fn valid_token(state: &AppState, token: &str) -> bool {
    matches!(
        state.auth.user_grant(token, Access::Read),
        UserGrant::Granted { .. }
    )
}

/// The `Set-Cookie` value signing `token` in.
pub(crate) fn sign_in_cookie(token: &str, secure: bool) -> HeaderValue {
    let v = URL_SAFE_NO_PAD.encode(token.as_bytes());
    cookie(&v, MAX_AGE_SECS, secure)
}

/// The `Set-Cookie` value signing out (the cookie emptied and expired).
pub(crate) fn sign_out_cookie(secure: bool) -> HeaderValue {
    cookie("", 0, secure)
}

fn cookie(value: &str, max_age: u64, secure: bool) -> HeaderValue {
    let secure = if secure { "; Secure" } else { "" };
    HeaderValue::from_str(&format!(
        "{COOKIE}={value}; Path=/; Max-Age={max_age}; HttpOnly; SameSite=Strict{secure}"
    ))
    .expect("base64url and fixed text are a valid header value")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cookies_round_trip() {
        let c = sign_in_cookie("tok;en =x", true);
        let s = c.to_str().unwrap();
        assert!(s.contains("HttpOnly") && s.contains("SameSite=Strict") && s.contains("Secure"));
        let value = s.split(';').next().unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            header::COOKIE,
            HeaderValue::from_str(&format!("a=b; {value}; c=d")).unwrap(),
        );
        assert_eq!(cookie_token(&h).as_deref(), Some("tok;en =x"));
        assert!(!sign_out_cookie(false).to_str().unwrap().contains("Secure"));
        assert!(
            sign_out_cookie(false)
                .to_str()
                .unwrap()
                .contains("Max-Age=0")
        );
    }
}
