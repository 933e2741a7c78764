//! The Hub API over HTTP (`hub-api.md`): repository info, tree listings, paths-info,
//! repository and branch creation, preupload, commits, the Xet token routes, and
//! `resolve` for files not stored in Xet.
//!
//! The Hub token goes only to the Hub's own origin: a `Link: rel="next"` page on another
//! origin is fetched without it, and a redirect of a `resolve` GET drops it (reqwest
//! removes `Authorization` on cross-origin redirects). The CAS never sees it: its own
//! short-lived tokens come from the token routes ([`HubClient::xet_cas`]).
//!
//! Every answer is read within a size limit and checked before use: commit ids are 40
//! hex digits, paths are valid repository paths (they become file names), sizes agree.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, HeaderMap};
use reqwest::{Method, RequestBuilder, Response, StatusCode};
use serde::de::DeserializeOwned;
use xet_cas::backoff;
use xet_hub::api::{self, error_code, header, url};
use xet_hub::{CommitId, RepoPath, RepoRef, RepoType};

use crate::env::HubToken;
use crate::error::{HubError, RepoTarget, Result};

/// Most bytes of one JSON answer (a tree page of a very large repository stays far below).
const MAX_JSON_BYTES: usize = 256 << 20;
/// Most bytes of an error body read for its message.
const MAX_ERROR_BYTES: usize = 64 << 10;
/// Files per `preupload` request, as `huggingface_hub` sends them.
pub const PREUPLOAD_BATCH: usize = 256;
/// Pages of one tree listing before the listing is taken to loop.
const MAX_PAGES: usize = 100_000;
/// Attempts per request when the Hub is unreachable or overloaded.
const ATTEMPTS: u32 = 4;
/// The first retry's delay ceiling ([`xet_cas::backoff`]), doubling per retry.
const RETRY_BASE: Duration = Duration::from_millis(500);
/// The longest wait before a retry, whatever `Retry-After` asks.
const RETRY_MAX: Duration = Duration::from_secs(30);

/// Which Xet token route.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    Read,
    Write,
}

/// What `HEAD .../resolve/...` says about a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolvedFile {
    pub commit: Option<CommitId>,
    /// `X-Linked-Etag` or `ETag`, without `W/` and quotes.
    pub etag: Option<String>,
    /// `X-Linked-Size` or `Content-Length`.
    pub size: Option<u64>,
    pub xet_hash: Option<String>,
}

/// A Hub at one endpoint, with one token (or none).
#[derive(Clone)]
pub struct HubClient {
    http: reqwest::Client,
    no_redirect: reqwest::Client,
    endpoint: String,
    token: Option<HubToken>,
    /// Whether any answer came back yet: until then a refused connection means
    /// nothing listens at the endpoint, and is not retried.
    reached: std::sync::Arc<std::sync::atomic::AtomicBool>,
}

impl std::fmt::Debug for HubClient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HubClient")
            .field("endpoint", &self.endpoint)
            .field("token", &self.token.as_ref().map(|t| &t.origin))
            .finish()
    }
}

fn user_agent() -> String {
    format!("xet/{}", env!("CARGO_PKG_VERSION"))
}

impl HubClient {
    /// A client for the Hub at `endpoint` (scheme and host, no trailing `/`).
    pub fn new(endpoint: &str, token: Option<HubToken>) -> Result<HubClient> {
        let build = |redirects| {
            reqwest::Client::builder()
                .user_agent(user_agent())
                .connect_timeout(Duration::from_secs(10))
                .read_timeout(Duration::from_secs(120))
                .redirect(redirects)
                .build()
                .map_err(|e| HubError::Usage(format!("cannot set up the HTTP client: {e}")))
        };
        let endpoint = endpoint.trim_end_matches('/').to_string();
        match reqwest::Url::parse(&endpoint) {
            Ok(u) if matches!(u.scheme(), "http" | "https") && u.host().is_some() => {}
            _ => {
                return Err(HubError::Usage(format!(
                    "the Hub endpoint {endpoint:?} (HF_ENDPOINT) is not an http:// or https:// URL"
                )));
            }
        }
        Ok(HubClient {
            http: build(reqwest::redirect::Policy::limited(10))?,
            no_redirect: build(reqwest::redirect::Policy::none())?,
            reached: Default::default(),
            endpoint,
            token,
        })
    }

    pub fn endpoint(&self) -> &str {
        &self.endpoint
    }

    pub fn token(&self) -> Option<&HubToken> {
        self.token.as_ref()
    }

    /// `Authorization: Bearer <hub token>` for requests to the Hub, if there is a token.
    pub fn auth_header(&self) -> Option<(String, xet_client::Secret)> {
        self.token.as_ref().map(|t| {
            (
                AUTHORIZATION.as_str().to_string(),
                xet_client::Secret::new(format!("Bearer {}", t.secret.expose())),
            )
        })
    }

    /// Whether `u` is on the Hub's own origin (where the token may go).
    fn is_hub_origin(&self, u: &str) -> bool {
        let (Ok(a), Ok(b)) = (reqwest::Url::parse(u), reqwest::Url::parse(&self.endpoint)) else {
            return false;
        };
        a.scheme() == b.scheme()
            && a.host_str() == b.host_str()
            && a.port_or_known_default() == b.port_or_known_default()
    }

    fn request(&self, client: &reqwest::Client, method: Method, u: &str) -> RequestBuilder {
        let rb = client.request(method, u);
        match (&self.token, self.is_hub_origin(u)) {
            (Some(t), true) => rb.bearer_auth(t.secret.expose()),
            _ => rb,
        }
    }

    /// One request to `u`: `action` on `subject` is what its messages say.
    pub(crate) fn call(
        &self,
        method: Method,
        u: String,
        action: &'static str,
        subject: RepoTarget,
    ) -> Call<'_> {
        Call {
            hub: self,
            client: &self.http,
            method,
            url: u,
            action,
            subject,
        }
    }

    /// `GET /api/{type}s/{repo}/revision/{rev}`: the commit `rev` names, and the info.
    pub async fn repo_info(&self, repo: &RepoRef, rev: &str) -> Result<(CommitId, api::RepoInfo)> {
        let u = url::api_repo_rev(&self.endpoint, repo, "revision", rev);
        let call = self.call(Method::GET, u, "reading", RepoTarget::repo(repo).at(rev));
        let info: api::RepoInfo = call.json(|rb| rb).await?;
        let commit = CommitId::parse(&info.sha)
            .ok_or_else(|| call.bad(format!("sha {:?} is not a commit id", info.sha)))?;
        Ok((commit, info))
    }

    /// `GET .../tree/{rev}[/{path}]`, every page (`Link: rel="next"`).
    pub async fn list_tree(
        &self,
        repo: &RepoRef,
        rev: &str,
        path: Option<&RepoPath>,
        recursive: bool,
    ) -> Result<Vec<api::TreeEntry>> {
        let mut subject = RepoTarget::repo(repo).at(rev);
        let mut u = url::api_repo_rev(&self.endpoint, repo, "tree", rev);
        if let Some(p) = path {
            subject = subject.path(p.as_str());
            u = format!("{u}/{}", api::quote_path(p.as_str()));
        }
        u.push_str(&format!("?recursive={recursive}&expand=false"));
        self.call(Method::GET, u, "listing", subject)
            .all_pages()
            .await
    }

    /// `POST .../paths-info/{rev}`: the entries of these paths (absent paths are left out).
    pub async fn paths_info(
        &self,
        repo: &RepoRef,
        rev: &str,
        paths: &[RepoPath],
    ) -> Result<Vec<api::TreeEntry>> {
        let mut subject = RepoTarget::repo(repo).at(rev);
        if let [one] = paths {
            subject = subject.path(one.as_str());
        }
        let u = url::api_repo_rev(&self.endpoint, repo, "paths-info", rev);
        let body = api::PathsInfoRequest {
            paths: paths.iter().map(|p| p.to_string()).collect(),
            expand: false,
        };
        self.call(Method::POST, u, "reading", subject)
            .json(|rb| rb.json(&body))
            .await
    }

    /// `POST /api/repos/create`; `Ok(false)` when it exists already (409).
    pub async fn create_repo(&self, repo: &RepoRef, private: bool) -> Result<bool> {
        let u = format!("{}/api/repos/create", self.endpoint);
        let body = api::CreateRepoRequest {
            name: repo.id.name().to_string(),
            organization: Some(repo.id.namespace().to_string()),
            repo_type: Some(repo.kind.as_str().to_string()),
            visibility: private.then(|| "private".to_string()),
            sdk: (repo.kind == RepoType::Space).then(|| "gradio".to_string()),
            ..Default::default()
        };
        let call = self.call(Method::POST, u, "creating", RepoTarget::repo(repo));
        let r = call.send(|rb| rb.json(&body)).await?;
        match r.status() {
            s if s.is_success() => Ok(true),
            StatusCode::CONFLICT => Ok(false),
            _ => Err(call.failure(r).await),
        }
    }

    /// `POST .../branch/{branch}` from the default branch's head; an existing branch (409)
    /// is fine.
    pub async fn create_branch(&self, repo: &RepoRef, branch: &str) -> Result<()> {
        let u = url::api_repo_rev(&self.endpoint, repo, "branch", branch);
        let subject = RepoTarget::repo(repo).at(branch);
        let call = self.call(Method::POST, u, "creating a branch in", subject);
        let body = api::CreateBranchRequest::default();
        let r = call.send(|rb| rb.json(&body)).await?;
        match r.status() {
            s if s.is_success() || s == StatusCode::CONFLICT => Ok(()),
            _ => Err(call.failure(r).await),
        }
    }

    /// `POST .../preupload/{rev}` in batches of [`PREUPLOAD_BATCH`]: one answer per file,
    /// in the order of `files`. Every path must come back exactly once.
    pub async fn preupload(
        &self,
        repo: &RepoRef,
        rev: &str,
        files: &[api::PreuploadFile],
    ) -> Result<Vec<api::PreuploadAnswer>> {
        let u = url::api_repo_rev(&self.endpoint, repo, "preupload", rev);
        let subject = RepoTarget::repo(repo).at(rev);
        let call = self.call(Method::POST, u, "preparing the upload to", subject);
        let mut out = Vec::with_capacity(files.len());
        for batch in files.chunks(PREUPLOAD_BATCH) {
            let body = api::PreuploadRequest {
                files: batch.to_vec(),
                ..Default::default()
            };
            let answer: api::PreuploadResponse = call.json(|rb| rb.json(&body)).await?;
            let mut by_path: std::collections::HashMap<String, api::PreuploadAnswer> = answer
                .files
                .into_iter()
                .map(|a| (a.path.clone(), a))
                .collect();
            for f in batch {
                let a = by_path
                    .remove(&f.path)
                    .ok_or_else(|| call.bad(format!("no answer for {}", f.path)))?;
                out.push(a);
            }
        }
        Ok(out)
    }

    /// `POST .../commit/{rev}` of these NDJSON lines (the header first); with
    /// `create_pr`, a pull request onto `rev` (`pullRequestUrl` in the answer).
    pub async fn commit(
        &self,
        repo: &RepoRef,
        rev: &str,
        lines: &[api::CommitLine],
        create_pr: bool,
    ) -> Result<(CommitId, api::CommitResponse)> {
        let mut u = url::api_repo_rev(&self.endpoint, repo, "commit", rev);
        if create_pr {
            u.push_str("?create_pr=1");
        }
        let call = self.call(
            Method::POST,
            u,
            "committing to",
            RepoTarget::repo(repo).at(rev),
        );
        let mut body = Vec::new();
        for l in lines {
            serde_json::to_writer(&mut body, l).map_err(|e| HubError::Usage(e.to_string()))?;
            body.push(b'\n');
        }
        let body = bytes::Bytes::from(body);
        let answer: api::CommitResponse = call
            .json(|rb| {
                rb.header(reqwest::header::CONTENT_TYPE, "application/x-ndjson")
                    .body(body.clone())
            })
            .await?;
        let id = CommitId::parse(&answer.commit_oid).ok_or_else(|| {
            call.bad(format!(
                "commitOid {:?} is not a commit id",
                answer.commit_oid
            ))
        })?;
        Ok((id, answer))
    }

    /// `{endpoint}/api/{type}s/{repo}/xet-{read,write}-token/{rev}`.
    pub fn xet_token_url(&self, repo: &RepoRef, kind: TokenKind, rev: &str) -> String {
        let what = match kind {
            TokenKind::Read => "xet-read-token",
            TokenKind::Write => "xet-write-token",
        };
        url::api_repo_rev(&self.endpoint, repo, what, rev)
    }

    /// An [`xet_client::HttpCas`] whose CAS and token come from `token_url` (refreshed
    /// before they expire). The Hub token goes to `token_url` only.
    pub fn xet_cas(
        &self,
        subject: &RepoTarget,
        token_url: &str,
        idle_timeout: Option<Duration>,
    ) -> Result<xet_client::HttpCas> {
        let mut refresh = xet_client::TokenRefresh::new(token_url);
        refresh.headers.extend(self.auth_header());
        let mut cfg = xet_client::ClientConfig::new(String::new())
            .with_token_source(xet_client::TokenSource::Refresh(refresh));
        if let Some(idle) = idle_timeout {
            cfg.idle_timeout = idle;
        }
        xet_client::HttpCas::new(cfg).map_err(|source| HubError::CasConfig {
            subject: subject.clone(),
            source,
        })
    }

    /// A request to `.../resolve/{rev}/{path}`.
    fn resolve(
        &self,
        method: Method,
        action: &'static str,
        repo: &RepoRef,
        rev: &str,
        path: &RepoPath,
    ) -> Call<'_> {
        let u = url::resolve(&self.endpoint, repo, rev, path);
        self.call(
            method,
            u,
            action,
            RepoTarget::repo(repo).at(rev).path(path.as_str()),
        )
    }

    /// `HEAD .../resolve/{rev}/{path}`, redirects not followed (the facts are on the
    /// first answer).
    pub async fn resolve_head(
        &self,
        repo: &RepoRef,
        rev: &str,
        path: &RepoPath,
    ) -> Result<ResolvedFile> {
        let call = Call {
            client: &self.no_redirect,
            ..self.resolve(Method::HEAD, "reading", repo, rev, path)
        };
        let r = call.send(|rb| rb).await?;
        if !(r.status().is_success() || r.status().is_redirection()) {
            return Err(call.failure(r).await);
        }
        let h = r.headers();
        let number = |name: &str| header_str(h, name).and_then(|v| v.parse::<u64>().ok());
        let etag = header_str(h, header::LINKED_ETAG)
            .or_else(|| header_str(h, "etag"))
            .map(|e| normalize_etag(&e));
        let size = number(header::LINKED_SIZE).or_else(|| {
            r.status()
                .is_success()
                .then(|| number("content-length"))
                .flatten()
        });
        Ok(ResolvedFile {
            commit: header_str(h, header::REPO_COMMIT).and_then(|c| CommitId::parse(&c)),
            etag,
            size,
            xet_hash: header_str(h, header::XET_HASH),
        })
    }

    /// `GET .../resolve/{rev}/{path}`: the answer, its body not read yet.
    pub async fn resolve_get(
        &self,
        repo: &RepoRef,
        rev: &str,
        path: &RepoPath,
    ) -> Result<Response> {
        self.resolve(Method::GET, "downloading", repo, rev, path)
            .ok(|rb| rb)
            .await
    }
}

/// One Hub API request: `method` at `url` through `client`; `action` on `subject` is what
/// its messages say. A route says only these and its body; sending, retrying and the
/// meaning of a failed answer are here, the same for every route.
pub(crate) struct Call<'h> {
    hub: &'h HubClient,
    /// The redirect policy: `resolve_head` reads the first answer itself.
    client: &'h reqwest::Client,
    method: Method,
    url: String,
    action: &'static str,
    subject: RepoTarget,
}

impl Call<'_> {
    /// Send, `body` adding what each attempt carries, and retry what may succeed later
    /// by the workspace's one policy ([`xet_cas::backoff`]): connection failures and
    /// timeouts, 429 and 5xx, after `Retry-After` or the jittered backoff. A refused
    /// connection before the Hub ever answered fails at once, as the CAS client's does.
    pub(crate) async fn send(
        &self,
        body: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Response> {
        let (action, subject, u) = (self.action, &self.subject, &self.url);
        let reached = &self.hub.reached;
        let mut attempt = 0;
        loop {
            attempt += 1;
            let request = body(self.hub.request(self.client, self.method.clone(), u));
            let retry_after = match request.send().await {
                Ok(r) => {
                    reached.store(true, std::sync::atomic::Ordering::Relaxed);
                    if !backoff::retryable_status(r.status().as_u16()) || attempt >= ATTEMPTS {
                        return Ok(r);
                    }
                    header_str(r.headers(), "retry-after")
                        .and_then(|v| backoff::parse_retry_after(&v))
                }
                Err(e) if attempt < ATTEMPTS && retryable(&e, reached) => None,
                Err(e) => {
                    return Err(HubError::Network {
                        action,
                        subject: subject.clone(),
                        url: u.clone(),
                        source: e,
                    });
                }
            };
            let wait = retry_after
                .unwrap_or_else(|| backoff::delay(RETRY_BASE, RETRY_MAX, attempt))
                .min(RETRY_MAX);
            tracing::warn!("{action} {subject}: retrying {u} (attempt {attempt} failed)");
            tokio::time::sleep(wait).await;
        }
    }

    /// [`Call::send`], any non-success answer turned into its [`HubError`].
    pub(crate) async fn ok(
        &self,
        body: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<Response> {
        let r = self.send(body).await?;
        if r.status().is_success() {
            Ok(r)
        } else {
            Err(self.failure(r).await)
        }
    }

    /// Every page of a listing (each a JSON array), following `Link: rel="next"`.
    pub(crate) async fn all_pages<T: DeserializeOwned>(self) -> Result<Vec<T>> {
        let mut out = Vec::new();
        self.each_page(|page: Vec<T>| {
            out.extend(page);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// Every page of a `Link`-paginated listing, handed to `f` as it arrives (a caller
    /// that prints as it goes holds one page at a time).
    pub(crate) async fn each_page<T: DeserializeOwned>(
        mut self,
        mut f: impl FnMut(Vec<T>) -> Result<()>,
    ) -> Result<()> {
        for page in 1.. {
            if page > MAX_PAGES {
                return Err(self.bad("the listing does not end"));
            }
            let r = self.ok(|rb| rb).await?;
            let next = next_link(r.headers());
            let entries: Vec<T> = self.read_json(r).await?;
            f(entries)?;
            match next {
                Some(u) => self.url = u,
                None => break,
            }
        }
        Ok(())
    }

    /// [`Call::ok`], and the answer's JSON.
    pub(crate) async fn json<T: DeserializeOwned>(
        &self,
        body: impl Fn(RequestBuilder) -> RequestBuilder,
    ) -> Result<T> {
        let r = self.ok(body).await?;
        self.read_json(r).await
    }

    /// The JSON of answer `r`, read within [`MAX_JSON_BYTES`].
    pub(crate) async fn read_json<T: DeserializeOwned>(&self, r: Response) -> Result<T> {
        let body = read_capped(r, MAX_JSON_BYTES)
            .await
            .map_err(|why| self.bad(why))?;
        serde_json::from_slice(&body).map_err(|e| self.bad(e.to_string()))
    }

    /// An answer that makes no sense, and why.
    pub(crate) fn bad(&self, why: impl Into<String>) -> HubError {
        HubError::BadAnswer {
            action: self.action,
            subject: self.subject.clone(),
            url: self.url.clone(),
            why: why.into(),
        }
    }

    /// The error an unsuccessful answer means: `X-Error-Code` first (as
    /// `huggingface_hub` reads it), then the status.
    pub(crate) async fn failure(&self, r: Response) -> HubError {
        let (action, hub) = (self.action, self.hub);
        let status = r.status().as_u16();
        let code = header_str(r.headers(), api::header::ERROR_CODE);
        let header_msg = header_str(r.headers(), header::ERROR_MESSAGE);
        let body = read_capped(r, MAX_ERROR_BYTES).await.unwrap_or_default();
        let message = header_msg
            .or_else(|| error_text(&body))
            .unwrap_or_else(|| format!("HTTP {status}"));
        let subject = self.subject.clone();
        match code.as_deref() {
            // The Hub hides repositories from anonymous callers behind a 401 saying
            // "not found": without a token, the token is what is missing.
            Some(error_code::REPO_NOT_FOUND) if status == 401 && hub.token.is_none() => {
                HubError::NoToken {
                    action,
                    subject,
                    message,
                }
            }
            Some(error_code::REPO_NOT_FOUND) => HubError::RepoNotFound {
                subject,
                endpoint: hub.endpoint.clone(),
                authenticated: hub.token.is_some(),
            },
            Some(error_code::REVISION_NOT_FOUND) => HubError::RevisionNotFound { subject },
            Some(error_code::ENTRY_NOT_FOUND) => HubError::EntryNotFound { subject },
            Some(error_code::GATED_REPO) => HubError::Gated { subject, message },
            _ => match (status, &hub.token) {
                (401 | 403, None) => HubError::NoToken {
                    action,
                    subject,
                    message,
                },
                (401, Some(t)) => HubError::BadToken {
                    action,
                    subject,
                    origin: t.origin.clone(),
                    message,
                },
                (403, Some(t)) => HubError::Forbidden {
                    action,
                    subject,
                    origin: t.origin.clone(),
                    message,
                },
                _ => HubError::Status {
                    action,
                    subject,
                    url: self.url.clone(),
                    status,
                    message,
                },
            },
        }
    }
}

/// Whether a failed attempt may succeed when made again: a connection that failed or
/// timed out, but not one refused before the Hub ever answered (nothing listens there).
fn retryable(e: &reqwest::Error, reached: &std::sync::atomic::AtomicBool) -> bool {
    let nothing_listens =
        xet_client::connection_refused(e) && !reached.load(std::sync::atomic::Ordering::Relaxed);
    (e.is_connect() || e.is_timeout()) && !nothing_listens
}

pub(crate) fn header_str(h: &HeaderMap, name: &str) -> Option<String> {
    h.get(name)?
        .to_str()
        .ok()
        .map(str::to_string)
        .filter(|s| !s.is_empty())
}

/// `W/"abc"` → `abc`, as `huggingface_hub` names blobs.
pub fn normalize_etag(e: &str) -> String {
    e.trim()
        .trim_start_matches("W/")
        .trim_matches('"')
        .to_string()
}

/// The body, or why it could not be read within `cap` bytes.
async fn read_capped(mut r: Response, cap: usize) -> std::result::Result<Vec<u8>, String> {
    if r.content_length().is_some_and(|n| n > cap as u64) {
        return Err(format!("the answer is larger than {cap} bytes"));
    }
    let mut out = Vec::new();
    while let Some(piece) = r
        .chunk()
        .await
        .map_err(|e| format!("reading the answer: {e}"))?
    {
        if out.len() + piece.len() > cap {
            return Err(format!("the answer is larger than {cap} bytes"));
        }
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// `{"error": "..."}` (or a list of messages), else the text itself, shortened.
fn error_text(body: &[u8]) -> Option<String> {
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        match &v["error"] {
            serde_json::Value::String(s) => return Some(s.clone()),
            serde_json::Value::Array(a) => {
                let parts: Vec<String> = a
                    .iter()
                    .map(|m| m.as_str().map_or_else(|| m.to_string(), str::to_string))
                    .collect();
                return Some(parts.join("; "));
            }
            _ => {}
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    (!text.is_empty()).then(|| text.chars().take(300).collect())
}

/// The target of `Link: <url>; rel="next"`, if any.
pub fn next_link(h: &HeaderMap) -> Option<String> {
    for value in h.get_all(reqwest::header::LINK) {
        let Ok(value) = value.to_str() else { continue };
        for link in value.split(',') {
            let mut parts = link.split(';');
            let target = parts.next()?.trim();
            let is_next = parts.any(|p| {
                let p = p.trim().replace(' ', "");
                p == "rel=\"next\"" || p == "rel=next"
            });
            if is_next {
                let t = target.strip_prefix('<')?.strip_suffix('>')?;
                return Some(t.to_string());
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn link_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(next_link(&h), None);
        h.insert(
            reqwest::header::LINK,
            "<https://h/api/models/a/b/tree/main?cursor=x>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(
            next_link(&h).as_deref(),
            Some("https://h/api/models/a/b/tree/main?cursor=x")
        );
        h.insert(
            reqwest::header::LINK,
            "<http://a/x>; rel=\"xet-auth\", <http://a/y>; rel=\"next\""
                .parse()
                .unwrap(),
        );
        assert_eq!(next_link(&h).as_deref(), Some("http://a/y"));
        h.insert(
            reqwest::header::LINK,
            "<http://a/x>; rel=\"prev\"".parse().unwrap(),
        );
        assert_eq!(next_link(&h), None);
    }

    #[test]
    fn error_texts_and_etags() {
        assert_eq!(
            error_text(br#"{"error":"Repo not found"}"#).unwrap(),
            "Repo not found"
        );
        assert_eq!(error_text(br#"{"error":["a","b"]}"#).unwrap(), "a; b");
        assert_eq!(error_text(b"  plain  ").unwrap(), "plain");
        assert_eq!(error_text(b""), None);
        assert_eq!(normalize_etag("W/\"abc\""), "abc");
        assert_eq!(normalize_etag("\"abc\""), "abc");
    }

    #[test]
    fn the_token_goes_to_the_hub_origin_only() {
        let token = crate::env::HubToken {
            secret: xet_client::Secret::new("hf_x"),
            origin: crate::env::TokenOrigin::Given("--token"),
        };
        let c = HubClient::new("http://127.0.0.1:8080/", Some(token)).unwrap();
        assert_eq!(c.endpoint(), "http://127.0.0.1:8080");
        assert!(c.is_hub_origin("http://127.0.0.1:8080/api/x"));
        assert!(!c.is_hub_origin("http://127.0.0.1:8081/api/x"));
        assert!(!c.is_hub_origin("https://127.0.0.1:8080/api/x"));
        assert!(!c.is_hub_origin("http://cas.example/v1/x"));
        let with = c
            .request(&c.http, Method::GET, "http://127.0.0.1:8080/a")
            .build()
            .unwrap();
        assert!(with.headers().contains_key(AUTHORIZATION));
        let without = c
            .request(&c.http, Method::GET, "http://other/a")
            .build()
            .unwrap();
        assert!(!without.headers().contains_key(AUTHORIZATION));
        assert!(HubClient::new("ftp://x", None).is_err());
        assert!(HubClient::new("not a url", None).is_err());
    }
}
