//! The web pages of `xet serve` (rendering in `xet_web`): the Hub's own page URLs for
//! browsers, beside the APIs, which keep their answers.
//!
//! # Which requests are pages
//! A `GET` or `HEAD` whose `Accept` prefers `text/html` to JSON, on a server with the
//! Hub, at one of these paths (`{P}` = `""`, `datasets/`, `spaces/`):
//!
//! | path | page |
//! |---|---|
//! | `/` (`?q=` searches names) | repositories and buckets, the store's figures |
//! | `/{P}{ns}/{name}`, `/{P}{ns}/{name}/tree/{rev}[/{path}]` | a folder (`?cursor=` pages it), its README |
//! | `/{P}{ns}/{name}/blob/{rev}/{path}` | a file: size, hashes, download, small text inline |
//! | `/{P}{ns}/{name}/commits/{rev}` | history (`?p=` pages it) |
//! | `/buckets/{ns}/{name}[/tree/{prefix}]` | a bucket's folder |
//!
//! and, whatever `Accept` says, this module's own `/-/style.css`, `/-/signin` (`GET`
//! the form, `POST` a token) and `/-/signout` (`POST`). Nothing under `/api/`, the CAS
//! routes (`/v1/`, `/v2/`, `/health`, the signed URLs) or `resolve` is ever a page:
//! those go on unchanged.
//!
//! # Who reads
//! The viewer is the sign-in cookie's token, checked as the API checks a bearer token
//! (`session`): a page shows exactly what the API would answer that token, no more (on
//! a server with tokens, nothing until signed in; private repositories only to user
//! tokens). Every `Cookie` header is removed before a request goes on to any other
//! route; the one exception is a browser's `resolve` download carrying the cookie and no
//! `Authorization`: the cookie's token becomes its bearer token, so the page's download
//! link works for a signed-in reader. The request log prints method, path, status and
//! times, never headers or query strings.
//!
//! # Safety
//! Pages carry `Content-Security-Policy: default-src 'none'` (styles from this server,
//! images from anywhere, no script at all) on top of `xet_web`'s escaping and
//! sanitizing, `X-Content-Type-Options: nosniff`, `frame-ancestors 'none'`, and
//! `Cache-Control: no-store`. Sign-in and sign-out take `POST` only, refuse a foreign
//! `Origin`, and the cookie is `SameSite=Strict`.

pub(crate) mod cache;
mod data;
mod session;

pub use cache::{FiguresSource, StoreFigures, WebCache};

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use xet_hub::{RepoId, RepoRef, RepoType};
use xet_web::{Chrome, ErrorPage, SignInPage};

use crate::state::AppState;
use crate::state::extract::base_url;
use data::{DEFAULT_REV, Fail, Paging};
use session::Viewer;

/// First path segments that are never a page: the APIs and the CAS routes.
const NOT_PAGES: [&str; 6] = ["api", "v1", "v2", "health", "_xorb", "_grant-upload"];
/// Most bytes of a sign-in form.
const FORM_BODY: usize = 8 * 1024;

/// The layer in front of every route (see the module docs).
pub(crate) async fn layer(State(state): State<AppState>, mut req: Request, next: Next) -> Response {
    if state.hub.is_some() {
        let path = req.uri().path();
        if path.starts_with("/-/") {
            return own(&state, req).await;
        }
        if matches!(*req.method(), Method::GET | Method::HEAD)
            && wants_html(req.headers())
            && let Some(page) = Page::of(path)
        {
            let query = req.uri().query().unwrap_or("").to_string();
            let page_path = path.to_string();
            return render_page(&state, req.headers(), page, &query, &page_path).await;
        }
    }
    // Anything else goes on without cookies: only the pages read them.
    let token = session::cookie_token(req.headers());
    req.headers_mut().remove(header::COOKIE);
    if let Some(t) = token
        && state.hub.is_some()
        && matches!(*req.method(), Method::GET | Method::HEAD)
        && !req.headers().contains_key(header::AUTHORIZATION)
        && is_resolve(req.uri().path())
        && let Ok(v) = HeaderValue::from_str(&format!("Bearer {t}"))
    {
        req.headers_mut().insert(header::AUTHORIZATION, v);
    }
    next.run(req).await
}

/// Whether `Accept` ranks `text/html` above JSON (browsers; API clients send JSON or
/// `*/*`).
fn wants_html(headers: &HeaderMap) -> bool {
    let Some(accept) = headers.get(header::ACCEPT).and_then(|v| v.to_str().ok()) else {
        return false;
    };
    let q = |want: &str| {
        accept
            .split(',')
            .filter_map(|item| {
                let mut parts = item.split(';').map(str::trim);
                let kind = parts.next()?;
                (kind.eq_ignore_ascii_case(want)).then(|| {
                    parts
                        .find_map(|p| p.strip_prefix("q="))
                        .and_then(|v| v.parse::<f32>().ok())
                        .unwrap_or(1.0)
                })
            })
            .fold(0.0f32, f32::max)
    };
    let html = q("text/html");
    html > 0.0 && html >= q("application/json")
}

/// `/{P}{ns}/{name}/resolve/...` or `/buckets/{ns}/{name}/resolve/...`.
fn is_resolve(path: &str) -> bool {
    let segs: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    matches!(
        segs.as_slice(),
        ["datasets" | "spaces" | "buckets", _, _, "resolve", ..] | [_, _, "resolve", ..]
    )
}

/// A page a path names.
#[derive(Debug, PartialEq, Eq)]
enum Page {
    Front,
    Tree {
        repo: RepoRef,
        rev: String,
        path: String,
    },
    Blob {
        repo: RepoRef,
        rev: String,
        path: String,
    },
    Commits {
        repo: RepoRef,
        rev: String,
    },
    Bucket {
        ns: String,
        name: String,
        prefix: String,
    },
}

impl Page {
    fn of(path: &str) -> Option<Page> {
        if path == "/" {
            return Some(Page::Front);
        }
        let segs: Vec<String> = path
            .trim_start_matches('/')
            .split('/')
            .map(xet_hub::api::unquote)
            .collect::<Option<_>>()?;
        let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
        if segs.first().is_none_or(|s| NOT_PAGES.contains(s)) || segs.iter().any(|s| s.is_empty()) {
            return None;
        }
        if let ["buckets", ns, name, rest @ ..] = segs.as_slice() {
            let prefix = match rest {
                [] => String::new(),
                ["tree", p @ ..] => p.join("/"),
                _ => return None,
            };
            return Some(Page::Bucket {
                ns: ns.to_string(),
                name: name.to_string(),
                prefix,
            });
        }
        let (kind, rest) = match segs.as_slice() {
            ["datasets", rest @ ..] => (RepoType::Dataset, rest),
            ["spaces", rest @ ..] => (RepoType::Space, rest),
            ["models", ..] => return None,
            rest => (RepoType::Model, rest),
        };
        let [ns, name, tail @ ..] = rest else {
            return None;
        };
        let repo = RepoRef::new(kind, RepoId::new(ns, name).ok()?);
        Some(match tail {
            [] => Page::Tree {
                repo,
                rev: DEFAULT_REV.to_string(),
                path: String::new(),
            },
            ["tree", rev, p @ ..] => Page::Tree {
                repo,
                rev: rev.to_string(),
                path: p.join("/"),
            },
            ["blob", rev, p @ ..] if !p.is_empty() => Page::Blob {
                repo,
                rev: rev.to_string(),
                path: p.join("/"),
            },
            ["commits", rev] => Page::Commits {
                repo,
                rev: rev.to_string(),
            },
            _ => return None,
        })
    }
}

/// `k=v&k2=v2` pairs, `+` as space, percent-decoded (query strings and forms).
fn form_pairs(s: &str) -> Vec<(String, String)> {
    let decode = |t: &str| xet_hub::api::unquote(&t.replace('+', " ")).unwrap_or_default();
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

fn query_param(query: &str, key: &str) -> Option<String> {
    form_pairs(query)
        .into_iter()
        .find(|(k, _)| k == key)
        .map(|(_, v)| v)
}

fn chrome(viewer: &Viewer, title: String) -> Chrome {
    Chrome {
        title,
        signed_in: viewer.signed_in,
        can_sign_in: viewer.can_sign_in,
    }
}

async fn render_page(
    state: &AppState,
    headers: &HeaderMap,
    page: Page,
    query: &str,
    page_path: &str,
) -> Response {
    let viewer = session::viewer(state, headers);
    let hub = state.hub.as_deref().expect("pages exist only with a hub");
    let cursor = query_param(query, "cursor");
    let paging = || Paging {
        cursor: cursor.as_deref(),
        page_path,
    };
    let html = match page {
        Page::Front => {
            let q = query_param(query, "q").unwrap_or_default();
            data::front(state, hub, &viewer, &q).await.map(|mut p| {
                p.chrome = chrome(&viewer, "xet serve".into());
                xet_web::render(&p)
            })
        }
        Page::Tree { repo, rev, path } => {
            data::tree(state, hub, &viewer, &repo, &rev, &path, paging())
                .await
                .map(|mut p| {
                    let title = if path.is_empty() {
                        repo.id.to_string()
                    } else {
                        format!("{path} · {}", repo.id)
                    };
                    p.chrome = chrome(&viewer, title);
                    xet_web::render(&p)
                })
        }
        Page::Blob { repo, rev, path } => data::blob(state, hub, &viewer, &repo, &rev, &path)
            .await
            .map(|mut p| {
                p.chrome = chrome(&viewer, format!("{path} · {}", repo.id));
                xet_web::render(&p)
            }),
        Page::Commits { repo, rev } => {
            let from = query_param(query, "p");
            data::commits(hub, &viewer, &repo, &rev, from.as_deref(), page_path)
                .await
                .map(|mut p| {
                    p.chrome = chrome(&viewer, format!("Commits · {}", repo.id));
                    xet_web::render(&p)
                })
        }
        Page::Bucket { ns, name, prefix } => {
            data::bucket(hub, &viewer, &ns, &name, &prefix, paging())
                .await
                .map(|mut p| {
                    p.chrome = chrome(&viewer, format!("{ns}/{name}"));
                    xet_web::render(&p)
                })
        }
    };
    match html {
        Ok(Ok(h)) => html_response(StatusCode::OK, h),
        Ok(Err(e)) => failure(&viewer, Fail::Internal(xet_cas::error_chain(&e))),
        Err(f) => failure(&viewer, f),
    }
}

fn failure(viewer: &Viewer, f: Fail) -> Response {
    let (status, message) = match f {
        Fail::NotFound(m) => (StatusCode::NOT_FOUND, m),
        Fail::SignIn => (
            StatusCode::UNAUTHORIZED,
            "This server needs a token: sign in to see its repositories.".to_string(),
        ),
        Fail::BadRequest(m) => (StatusCode::BAD_REQUEST, m),
        Fail::Internal(m) => {
            tracing::warn!(error = %m, "a web page failed");
            (StatusCode::INTERNAL_SERVER_ERROR, m)
        }
    };
    let page = ErrorPage {
        chrome: chrome(viewer, status.as_u16().to_string()),
        status: status.as_u16(),
        message,
    };
    match xet_web::render(&page) {
        Ok(h) => html_response(status, h),
        Err(_) => status.into_response(),
    }
}

fn html_response(status: StatusCode, html: String) -> Response {
    let mut r = (status, html).into_response();
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/html; charset=utf-8"),
    );
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'self'; img-src * data:; form-action 'self'; \
             frame-ancestors 'none'; base-uri 'none'",
        ),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    h.insert(header::VARY, HeaderValue::from_static("Accept, Cookie"));
    r
}

/// `/-/...`: the stylesheet, sign-in and sign-out.
async fn own(state: &AppState, req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let viewer = session::viewer(state, &parts.headers);
    let secure = base_url(&parts, state).starts_with("https://");
    match (&parts.method, parts.uri.path()) {
        (&Method::GET | &Method::HEAD, "/-/style.css") => {
            let mut r = xet_web::STYLESHEET.into_response();
            let h = r.headers_mut();
            h.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("text/css; charset=utf-8"),
            );
            h.insert(
                header::CACHE_CONTROL,
                HeaderValue::from_static("max-age=300"),
            );
            h.insert(
                header::X_CONTENT_TYPE_OPTIONS,
                HeaderValue::from_static("nosniff"),
            );
            r
        }
        (&Method::GET | &Method::HEAD, "/-/signin") => sign_in_form(&viewer, None, StatusCode::OK),
        (&Method::POST, "/-/signin") => {
            if !same_origin(&parts.headers) {
                return failure(
                    &viewer,
                    Fail::BadRequest("sign-in from another site".into()),
                );
            }
            let token = match read_form(body).await {
                Ok(form) => form_pairs(&form)
                    .into_iter()
                    .find(|(k, _)| k == "token")
                    .map(|(_, v)| v.trim().to_string())
                    .unwrap_or_default(),
                Err(m) => return failure(&viewer, Fail::BadRequest(m)),
            };
            if !state.auth.enabled() {
                return sign_in_form(
                    &viewer,
                    Some("This server has no tokens: everyone reads it without signing in."),
                    StatusCode::BAD_REQUEST,
                );
            }
            if token.is_empty()
                || token.len() > session::MAX_TOKEN
                || !session::valid_token(state, &token)
            {
                return sign_in_form(
                    &viewer,
                    Some("That is not a token of this server."),
                    StatusCode::UNAUTHORIZED,
                );
            }
            tracing::info!("signed in to the web pages");
            redirect_home(session::sign_in_cookie(&token, secure))
        }
        (&Method::POST, "/-/signout") => {
            if !same_origin(&parts.headers) {
                return failure(
                    &viewer,
                    Fail::BadRequest("sign-out from another site".into()),
                );
            }
            redirect_home(session::sign_out_cookie(secure))
        }
        _ => failure(
            &viewer,
            Fail::NotFound(format!("no page {}", parts.uri.path())),
        ),
    }
}

/// `Origin`, when a browser sends one, names this server (`Host`).
fn same_origin(headers: &HeaderMap) -> bool {
    let Some(origin) = headers.get(header::ORIGIN).and_then(|v| v.to_str().ok()) else {
        return true;
    };
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    let origin_host = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"));
    origin_host.is_some() && origin_host == host
}

async fn read_form(body: Body) -> Result<String, String> {
    let bytes = axum::body::to_bytes(body, FORM_BODY)
        .await
        .map_err(|_| format!("the form is larger than {FORM_BODY} bytes"))?;
    String::from_utf8(bytes.to_vec()).map_err(|_| "the form is not UTF-8".to_string())
}

fn sign_in_form(viewer: &Viewer, error: Option<&str>, status: StatusCode) -> Response {
    let page = SignInPage {
        chrome: chrome(viewer, "Sign in · xet serve".into()),
        error: error.map(str::to_string),
    };
    match xet_web::render(&page) {
        Ok(h) => html_response(status, h),
        Err(_) => StatusCode::INTERNAL_SERVER_ERROR.into_response(),
    }
}

fn redirect_home(cookie: HeaderValue) -> Response {
    let mut r = StatusCode::SEE_OTHER.into_response();
    r.headers_mut()
        .insert(header::LOCATION, HeaderValue::from_static("/"));
    r.headers_mut().insert(header::SET_COOKIE, cookie);
    r.headers_mut()
        .insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    r
}

/// The web layer's parsers of request bytes, for the fuzz target `web_request`
/// (`fuzz/fuzz_targets/web_request.rs`); not an API.
#[doc(hidden)]
pub mod fuzzing {
    use axum::http::{HeaderMap, HeaderValue, header};

    /// Whether `path` names a page.
    pub fn names_a_page(path: &str) -> bool {
        super::Page::of(path).is_some()
    }

    /// A query string's or form's pairs.
    pub fn form_pairs(s: &str) -> Vec<(String, String)> {
        super::form_pairs(s)
    }

    /// Whether a request with this `Accept` gets a page.
    pub fn wants_html(accept: &str) -> bool {
        let mut h = HeaderMap::new();
        if let Ok(v) = HeaderValue::from_str(accept) {
            h.insert(header::ACCEPT, v);
        }
        super::wants_html(&h)
    }

    /// The sign-in token of a request with these `Cookie` headers.
    pub fn cookie_token(cookies: &[&[u8]]) -> Option<String> {
        let mut h = HeaderMap::new();
        for c in cookies {
            if let Ok(v) = HeaderValue::from_bytes(c) {
                h.append(header::COOKIE, v);
            }
        }
        super::session::cookie_token(&h)
    }

    /// The `name=value` part of the cookie signing `token` in.
    pub fn sign_in_pair(token: &str) -> String {
        let v = super::session::sign_in_cookie(token, false);
        let v = v.to_str().expect("the cookie is ASCII");
        v.split(';').next().unwrap_or_default().to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn accept(v: &str) -> HeaderMap {
        let mut h = HeaderMap::new();
        h.insert(header::ACCEPT, HeaderValue::from_str(v).unwrap());
        h
    }

    #[test]
    fn browsers_get_pages_clients_get_json() {
        let chrome = "text/html,application/xhtml+xml,application/xml;q=0.9,image/avif,*/*;q=0.8";
        assert!(wants_html(&accept(chrome)));
        assert!(!wants_html(&accept("*/*")));
        assert!(!wants_html(&accept("application/json")));
        assert!(!wants_html(&accept("application/json, text/html;q=0.5")));
        assert!(!wants_html(&accept("text/html;q=0")));
        assert!(!wants_html(&HeaderMap::new()));
    }

    #[test]
    fn pages() {
        let model = |ns: &str, n: &str| RepoRef::new(RepoType::Model, RepoId::new(ns, n).unwrap());
        assert_eq!(Page::of("/"), Some(Page::Front));
        assert_eq!(
            Page::of("/org/m"),
            Some(Page::Tree {
                repo: model("org", "m"),
                rev: "main".into(),
                path: String::new()
            })
        );
        assert_eq!(
            Page::of("/datasets/org/d/blob/dev/a/b%20c.txt"),
            Some(Page::Blob {
                repo: RepoRef::new(RepoType::Dataset, RepoId::new("org", "d").unwrap()),
                rev: "dev".into(),
                path: "a/b c.txt".into()
            })
        );
        assert_eq!(
            Page::of("/buckets/o/b/tree/x/y"),
            Some(Page::Bucket {
                ns: "o".into(),
                name: "b".into(),
                prefix: "x/y".into()
            })
        );
        for not in [
            "/api/models/o/m",
            "/v1/token",
            "/health",
            "/o/m/resolve/main/x",
            "/buckets/o/b/resolve/x",
            "/o/m.git/info/lfs/objects/batch",
            "/_xorb/a/b",
            "/o/m/blob/main",
        ] {
            assert_eq!(Page::of(not), None, "{not}");
        }
        assert!(is_resolve("/o/m/resolve/main/x"));
        assert!(is_resolve("/datasets/o/m/resolve/main/x"));
        assert!(is_resolve("/buckets/o/b/resolve/x"));
        assert!(!is_resolve("/o/m/blob/main/x"));
    }
}
