//! The Hugging Face Hub API of `xet serve` (`hub-api.md`), on the same listener as the
//! CAS API, so `HF_ENDPOINT=http://HOST:PORT` makes the real `hf` CLI, `huggingface_hub`
//! and `@huggingface/hub` work against this server, with Xet transfers.
//!
//! # Routes (`{T}` = `models`, `datasets`, `spaces`; `{P}` = `""`, `datasets/`, `spaces/`)
//!
//! | route | auth | answer |
//! |---|---|---|
//! | `POST /api/repos/create` | write | `200 {"url"}`, `409` if it exists |
//! | `GET /api/{T}/{ns}/{name}[/revision/{rev}]` | read | `{"id","sha","private","siblings",...}` |
//! | `GET /api/{T}/{ns}/{name}/tree/{rev}[/{path}]` | read | entries, `?recursive=true`, paged by `Link: rel="next"` |
//! | `POST /api/{T}/{ns}/{name}/paths-info/{rev}` | read | entries of the named paths (JSON or form body) |
//! | `POST /api/{T}/{ns}/{name}/preupload/{rev}` | write | `uploadMode` per file ([`xet_hub::mode`]) and remote `oid`s |
//! | `GET /api/{T}/{ns}/{name}/xet-read-token/{rev}` | read | a read CAS token, in `X-Xet-*` headers and JSON |
//! | `GET /api/{T}/{ns}/{name}/xet-write-token/{rev}` | write | the same with a write CAS token |
//! | `POST /api/{T}/{ns}/{name}/commit/{rev}` | write | NDJSON commit → `{"commitOid","commitUrl"}`; `create_pr` is `501` |
//! | `POST /api/{T}/{ns}/{name}/branch/{name}` | write | `200`, `409` if it exists |
//! | `POST /api/validate-yaml` | none | `{"errors":[],"warnings":[]}` |
//! | `GET /api/whoami-v2` | user token | the configured user |
//! | `GET /api/agent-harnesses` | none | an empty registry |
//! | `HEAD`/`GET /{P}{ns}/{name}/resolve/{rev}/{path}` | read | the file's facts; `GET` streams its bytes, `Range` → `206` |
//! | `POST /{P}{ns}/{name}.git/info/lfs/objects/batch` | write | `"transfer":"xet"` for uploads |
//!
//! Every 404 carries `X-Error-Code` (`RepoNotFound`, `RevisionNotFound`,
//! `EntryNotFound`); every error has `X-Error-Message` and a `{"error"}` body saying
//! what was wrong.
//!
//! # Paths
//! Every path a request names is a [`xet_hub::RepoPath`]: no component git refuses to
//! check out (`.git` in any case and depth, `.git.`, `git~1`, HFS-ignorable spellings;
//! [`xet_hub::git_reserved`]), so no repository can plant a `.git` folder in a reader's
//! download. A tree stored before that rule drops such paths when it is read.
//!
//! # Auth
//! Hub routes take the configured tokens (`--token`, `--token-file`): user tokens,
//! never minted CAS tokens. With none configured (loopback only) everyone may read and
//! write public repositories; a private repository is readable only with a user token,
//! so an open server refuses to create one. The xet token routes mint short-lived CAS
//! tokens ([`crate::auth::TokenMinter`]) whose scope follows the route and the caller: a
//! read-only user never gets a write CAS token. Hub tokens are never logged and never
//! reach the CAS.

mod commit;
mod files;
mod repo;
mod stream;
mod upload;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use xet_hub::api::{ErrorBody, error_code, header as hh, unquote};
use xet_hub::{CommitId, HubError, NameError, RepoId, RepoRecord, RepoRef, RepoType, Repos};

use crate::auth::{Caller, bearer};
use crate::config::Access;
use crate::error::ApiError;
use crate::state::{AppState, Hub};

/// An error answer of the Hub API.
#[derive(Debug)]
pub(crate) struct HubReply {
    status: StatusCode,
    code: Option<&'static str>,
    message: String,
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

impl From<HubError> for HubReply {
    fn from(e: HubError) -> HubReply {
        use xet_hub::commit::ApplyError;
        let message = e.to_string();
        match e {
            HubError::RepoNotFound(_) => {
                HubReply::coded(StatusCode::NOT_FOUND, error_code::REPO_NOT_FOUND, message)
            }
            HubError::RevisionNotFound { .. } => HubReply::coded(
                StatusCode::NOT_FOUND,
                error_code::REVISION_NOT_FOUND,
                message,
            ),
            HubError::EntryNotFound { .. }
            | HubError::Apply(ApplyError::NoSuchFile { .. } | ApplyError::NoSuchFolder { .. }) => {
                HubReply::coded(StatusCode::NOT_FOUND, error_code::ENTRY_NOT_FOUND, message)
            }
            HubError::RepoExists(_) | HubError::BranchExists { .. } => {
                HubReply::new(StatusCode::CONFLICT, message)
            }
            HubError::ParentMismatch { .. } => {
                HubReply::new(StatusCode::PRECONDITION_FAILED, message)
            }
            HubError::Apply(_) => HubReply::new(StatusCode::UNPROCESSABLE_ENTITY, message),
            HubError::Contention { .. } => HubReply::new(StatusCode::SERVICE_UNAVAILABLE, message),
            HubError::Store(e) => HubReply::from(ApiError::from(e)),
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

/// What every Hub handler gets: the shared state, the Hub, the base URL clients reach
/// this server at, the request's headers, and its path split into decoded segments.
pub(crate) struct Ctx {
    pub state: AppState,
    pub base: String,
    pub headers: HeaderMap,
    pub query: Option<String>,
    pub path: String,
}

impl Ctx {
    pub(crate) fn hub(&self) -> &Hub {
        self.state
            .hub
            .as_deref()
            .expect("hub routes exist only with a hub")
    }

    pub(crate) fn repos(&self) -> &Repos {
        &self.hub().repos
    }

    /// The caller, who must hold `need`. Only user tokens count (minted CAS tokens are
    /// for the CAS). The 401s follow the Hub: clients show "repository not found" for a
    /// 401 on a repository URL unless the message says the credentials are invalid.
    pub(crate) fn caller(&self, need: Access) -> HubResult<Caller> {
        let auth = &self.state.auth;
        if !auth.enabled() {
            return Ok(Caller {
                token: None,
                access: Access::Write,
                user: false,
            });
        }
        let Some(presented) = bearer(&self.headers) else {
            return Err(HubReply::coded(
                StatusCode::UNAUTHORIZED,
                error_code::REPO_NOT_FOUND,
                "authentication required: this server needs a token (set HF_TOKEN or pass --token)",
            ));
        };
        let Some(access) = auth.user_access(presented) else {
            return Err(HubReply::new(
                StatusCode::UNAUTHORIZED,
                "Invalid credentials in Authorization header",
            ));
        };
        if access < need {
            return Err(HubReply::new(
                StatusCode::FORBIDDEN,
                "this token is read-only: writing to a repository needs a write token",
            ));
        }
        Ok(Caller {
            token: Some(presented.to_string()),
            access,
            user: true,
        })
    }

    /// The record of `repo`, if `caller` may see it. A private repository looks absent
    /// (401 `RepoNotFound`, as the Hub answers) to anyone without a user token.
    pub(crate) async fn open_repo(&self, repo: &RepoRef, caller: &Caller) -> HubResult<RepoRecord> {
        let record = self.repos().record(repo).await?;
        if record.private && !caller.user {
            return Err(HubReply::coded(
                StatusCode::UNAUTHORIZED,
                error_code::REPO_NOT_FOUND,
                format!("repository {repo} not found (or private: pass a token)"),
            ));
        }
        Ok(record)
    }

    /// The value of query parameter `key` (first occurrence, decoded).
    pub(crate) fn query_param(&self, key: &str) -> Option<String> {
        form_pairs(self.query.as_deref()?)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// `k=v&k2=v2` pairs, `+` as space, percent-decoded (forms and query strings).
pub(crate) fn form_pairs(s: &str) -> Vec<(String, String)> {
    let decode = |t: &str| unquote(&t.replace('+', " ")).unwrap_or_default();
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// Seconds since the Unix epoch.
pub(crate) fn now() -> u64 {
    crate::sign::unix_now()
}

/// `secs` as RFC 3339 UTC (`2026-11-25T21:46:01.000Z`), the form the Hub uses.
pub(crate) fn rfc3339(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}.000Z",
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

/// Split a raw URL path into percent-decoded segments (so `refs%2Fpr%2F1` stays one).
fn segments(path: &str) -> HubResult<Vec<String>> {
    path.trim_start_matches('/')
        .split('/')
        .map(|s| {
            unquote(s)
                .ok_or_else(|| HubReply::bad_request(format!("path segment {s:?} is not UTF-8")))
        })
        .collect()
}

/// `/api/...`: the Hub's JSON API.
pub(crate) async fn api(State(state): State<AppState>, req: Request) -> Response {
    let (ctx, method, body) = match context(state, req) {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    match api_route(&ctx, &method, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn context(state: AppState, req: Request) -> HubResult<(Ctx, Method, Body)> {
    let (parts, body) = req.into_parts();
    let base = crate::state::extract::base_url(&parts, &state);
    Ok((
        Ctx {
            state,
            base,
            query: parts.uri.query().map(str::to_string),
            path: parts.uri.path().to_string(),
            headers: parts.headers,
        },
        parts.method,
        body,
    ))
}

async fn api_route(ctx: &Ctx, method: &Method, body: Body) -> HubResult<Response> {
    let segs = segments(&ctx.path)?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let rest = segs.get(1..).unwrap_or_default();
    match (method, rest) {
        (&Method::POST, ["repos", "create"]) => repo::create(ctx, body).await,
        (&Method::POST, ["validate-yaml"]) => repo::validate_yaml(ctx, body).await,
        (&Method::GET, ["whoami-v2"]) => repo::whoami(ctx),
        (&Method::GET, ["agent-harnesses"]) => Ok(repo::agent_harnesses()),
        (_, [plural, ns, name, tail @ ..]) => {
            let Some(kind) = RepoType::from_plural(plural) else {
                return Err(no_route(method, &ctx.path));
            };
            let repo = RepoRef::new(kind, RepoId::new(ns, name)?);
            repo_route(ctx, method, &repo, tail, body).await
        }
        _ => Err(no_route(method, &ctx.path)),
    }
}

async fn repo_route(
    ctx: &Ctx,
    method: &Method,
    repo: &RepoRef,
    tail: &[&str],
    body: Body,
) -> HubResult<Response> {
    // Revisions may arrive unquoted (`refs/pr/1` as three segments): the rest of the path.
    let joined = |s: &[&str]| s.join("/");
    match (method, tail) {
        (&Method::GET, []) => repo::info(ctx, repo, "main").await,
        (&Method::GET, ["revision", rev @ ..]) if !rev.is_empty() => {
            repo::info(ctx, repo, &joined(rev)).await
        }
        (&Method::GET, ["tree", rev, path @ ..]) => repo::tree(ctx, repo, rev, &joined(path)).await,
        (&Method::POST, ["paths-info", rev @ ..]) if !rev.is_empty() => {
            repo::paths_info(ctx, repo, &joined(rev), body).await
        }
        (&Method::POST, ["branch", branch @ ..]) if !branch.is_empty() => {
            repo::create_branch(ctx, repo, &joined(branch), body).await
        }
        (&Method::POST, ["preupload", rev @ ..]) if !rev.is_empty() => {
            upload::preupload(ctx, repo, &joined(rev), body).await
        }
        (&Method::GET, ["xet-read-token", ..]) => upload::xet_token(ctx, repo, Access::Read).await,
        (&Method::GET, ["xet-write-token", ..]) => {
            upload::xet_token(ctx, repo, Access::Write).await
        }
        (&Method::POST, ["commit", rev @ ..]) if !rev.is_empty() => {
            commit::commit(ctx, repo, &joined(rev), body).await
        }
        _ => Err(no_route(method, &ctx.path)),
    }
}

fn no_route(method: &Method, path: &str) -> HubReply {
    HubReply::new(
        StatusCode::NOT_FOUND,
        format!(
            "no Hub API route for {method} {}",
            crate::state::extract::shorten(path)
        ),
    )
}

/// Everything no other route took: file URLs of the Hub (`resolve`, the LFS batch
/// endpoint), else the CAS API's 404.
pub(crate) async fn files(State(state): State<AppState>, req: Request) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    if state.hub.is_none() {
        return crate::routes::misc::no_route(method, uri)
            .await
            .into_response();
    }
    let (ctx, method, body) = match context(state, req) {
        Ok(x) => x,
        Err(e) => return e.into_response(),
    };
    match files::route(&ctx, &method, body).await {
        Ok(Some(r)) => r,
        Ok(None) => crate::routes::misc::no_route(method, uri)
            .await
            .into_response(),
        Err(e) => e.into_response(),
    }
}

/// `Link` header value of the xet routes of a file.
pub(crate) fn xet_links(
    base: &str,
    repo: &RepoRef,
    commit: &CommitId,
    xet_hash: &str,
) -> HeaderValue {
    let token = xet_hub::api::url::api_repo_rev(base, repo, "xet-read-token", &commit.to_string());
    header_value(&format!(
        "<{token}>; rel=\"xet-auth\", <{base}/v1/reconstructions/{xet_hash}>; rel=\"xet-reconstruction-info\""
    ))
}

pub(crate) fn json<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    (status, axum::Json(v)).into_response()
}

pub(crate) fn set(r: &mut Response, name: &'static str, value: HeaderValue) {
    r.headers_mut().insert(HeaderName::from_static(name), value);
}

pub(crate) fn content_type(r: &mut Response, v: &'static str) {
    r.headers_mut()
        .insert(header::CONTENT_TYPE, HeaderValue::from_static(v));
}

#[cfg(test)]
mod tests {
    #[test]
    fn dates() {
        assert_eq!(super::rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(super::rfc3339(1_795_297_561), "2026-11-21T21:46:01.000Z");
        assert_eq!(super::rfc3339(951_782_400), "2000-02-29T00:00:00.000Z");
    }

    #[test]
    fn forms() {
        assert_eq!(
            super::form_pairs("paths=a+b&paths=c%2Fd&expand=true"),
            [
                ("paths".to_string(), "a b".to_string()),
                ("paths".into(), "c/d".into()),
                ("expand".into(), "true".into())
            ]
        );
    }
}
