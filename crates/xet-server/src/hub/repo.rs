//! Repositories: create, info, tree, paths-info, branches, and the small routes clients
//! call on the side (validate-yaml, whoami, agent-harnesses).

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use xet_hub::api::{
    CreateBranchRequest, CreateRepoRequest, CreateRepoResponse, PathsInfoRequest, RepoInfo,
    RepoSettings, Sibling, SiblingLfs, TreeEntry, TreeLfs, url,
};
use xet_hub::{
    BranchName, Commit, CommitId, FileEntry, Item, Listed, ObjectId, RepoError, RepoId, RepoPath,
    RepoRef, RepoType, Revision, Storage,
};

use super::ctx::{Ctx, Opened, form_pairs};
use super::reply::{HubReply, HubResult, header_value};
use crate::config::Access;
use crate::routes::json;
use crate::sign::unix_now;
use crate::state::body::read_body;

/// JSON bodies of the small routes are at most this large.
pub(super) const SMALL_BODY: u64 = 16 * 1024 * 1024;
/// Most bytes of a validate-yaml body (a model card's metadata).
const YAML_BODY: u64 = 1024 * 1024;

pub(super) async fn json_body<T: serde::de::DeserializeOwned>(
    ctx: &Ctx,
    body: Body,
    what: &str,
) -> HubResult<T> {
    let bytes = read_body(&ctx.headers, body, SMALL_BODY, what).await?;
    let bytes = if bytes.iter().all(u8::is_ascii_whitespace) {
        &b"{}"[..]
    } else {
        &bytes[..]
    };
    serde_json::from_slice(bytes).map_err(|e| {
        HubReply::bad_request(format!(
            "the {what} body is not valid JSON for this route: {e}"
        ))
    })
}

/// Nobody could read a private bucket or repository of a server without tokens (only
/// user tokens read private ones), so such a server makes none.
pub(super) fn refuse_private_without_tokens(ctx: &Ctx, private: bool) -> HubResult<()> {
    if private && !ctx.state.auth.enabled() {
        return Err(HubReply::bad_request(
            "this server has no tokens, so nobody could ever read a private repository or \
             bucket: start xet serve with --token to make private ones",
        ));
    }
    Ok(())
}

/// `PUT /api/{T}/{ns}/{name}/settings`: `private` or `visibility` (`private`, `public`)
/// makes the repository private or public; nothing else can be set yet (`gated` other
/// than `false` is `501`).
pub(super) async fn settings(ctx: &Ctx, repo: &RepoRef, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let req: RepoSettings = json_body(ctx, body, "repository settings").await?;
    let record = ctx.open_repo(repo, &caller).await?;
    if req
        .gated
        .as_ref()
        .is_some_and(|g| *g != serde_json::Value::Bool(false))
    {
        return Err(HubReply::new(
            StatusCode::NOT_IMPLEMENTED,
            "gated repositories are not supported by this server",
        ));
    }
    let private = match (req.private, req.visibility.as_deref()) {
        (Some(p), _) => Some(p),
        (None, Some("private")) => Some(true),
        (None, Some("public")) => Some(false),
        (None, Some(other)) => {
            return Err(HubReply::bad_request(format!(
                "visibility {other:?} is not one this server has: private or public"
            )));
        }
        (None, None) => None,
    };
    if let Some(private) = private.filter(|&p| p != record.private) {
        refuse_private_without_tokens(ctx, private)?;
        ctx.repos().set_private(repo, private).await?;
        tracing::info!(repo = %repo, private, "repository settings changed");
    }
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

pub(super) async fn create(ctx: &Ctx, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let req: CreateRepoRequest = json_body(ctx, body, "create-repo").await?;
    let kind = RepoType::parse(req.repo_type.as_deref())?;
    let cfg = &ctx.state.config;
    let namespace = req.organization.as_deref().unwrap_or(&cfg.hub_user);
    let repo = RepoRef::new(kind, RepoId::new(namespace, &req.name)?);
    if !caller.scope.reaches(&repo) {
        return Err(HubReply::new(
            StatusCode::FORBIDDEN,
            format!("this token cannot create {repo}: it is scoped to other repositories"),
        ));
    }
    refuse_private_without_tokens(ctx, req.is_private())?;
    let page = url::repo_page(&ctx.base, &repo);
    match ctx
        .repos()
        .create(&repo, &cfg.hub_user, req.is_private(), unix_now())
        .await
    {
        Ok(_) => {
            tracing::info!(repo = %repo, "repository created");
            Ok(json(
                StatusCode::OK,
                &CreateRepoResponse {
                    url: page,
                    error: None,
                },
            ))
        }
        Err(RepoError::RepoExists(_)) => {
            let message = format!("You already created this {kind} repo: {repo}");
            let mut r = json(
                StatusCode::CONFLICT,
                &CreateRepoResponse {
                    url: page,
                    error: Some(message.clone()),
                },
            );
            r.headers_mut()
                .insert(xet_hub::api::header::ERROR_MESSAGE, header_value(&message));
            Ok(r)
        }
        Err(e) => Err(e.into()),
    }
}

/// `DELETE /api/repos/delete`: the repository is gone at once for everyone (its
/// record removed, so every route answers 404); what only it held is reclaimed by the
/// store's garbage collection (`xet store gc`).
pub(super) async fn delete(ctx: &Ctx, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let req: xet_hub::api::DeleteRepoRequest = json_body(ctx, body, "delete-repo").await?;
    let kind = RepoType::parse(req.repo_type.as_deref())?;
    let namespace = req
        .organization
        .as_deref()
        .unwrap_or(&ctx.state.config.hub_user);
    let repo = RepoRef::new(kind, RepoId::new(namespace, &req.name)?);
    ctx.open_repo(&repo, &caller).await?;
    if !ctx.repos().store().delete_repo(&repo).await? {
        return Err(RepoError::RepoNotFound(repo).into());
    }
    tracing::info!(repo = %repo, "repository deleted");
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// Resolve `rev` (percent-decoded) in `repo`.
pub(super) async fn resolve(ctx: &Ctx, repo: &Opened, rev: &str) -> HubResult<(CommitId, Commit)> {
    let parsed = Revision::parse(rev).map_err(|_| {
        HubReply::from(RepoError::RevisionNotFound {
            repo: repo.name.clone(),
            rev: rev.to_string(),
        })
    })?;
    ctx.repos()
        .resolve(&repo.at, &parsed)
        .await
        .map_err(|e| repo.named(e).into())
}

pub(super) async fn info(ctx: &Ctx, repo: &RepoRef, rev: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let (id, commit) = resolve(ctx, repo, rev).await?;
    let files = ctx.repos().files(&repo.at, &commit.tree).await?;
    let siblings = files
        .into_iter()
        .map(|(p, e)| Sibling {
            rfilename: p,
            size: Some(e.size),
            blob_id: Some(e.git_oid.to_string()),
            lfs: (e.storage == Storage::Lfs).then(|| SiblingLfs {
                size: e.size,
                sha256: e.sha256.to_string(),
                pointer_size: e.pointer_size() as u64,
            }),
        })
        .collect();
    let info = RepoInfo {
        id: repo.name.id.to_string(),
        sha: id.to_string(),
        private: repo.record.private,
        siblings,
        last_modified: Some(rfc3339(commit.created_at)),
        created_at: Some(rfc3339(repo.record.created_at)),
        author: Some(repo.name.id.namespace().to_string()),
        tags: Vec::new(),
        gated: false,
        disabled: false,
    };
    let mut v = serde_json::to_value(&info)
        .map_err(|e| HubReply::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
    // Fields some clients expect by type: `modelId` for models, `_id` everywhere.
    if let Some(o) = v.as_object_mut() {
        o.insert("_id".into(), id.to_string().into());
        if repo.name.kind == RepoType::Model {
            o.insert("modelId".into(), repo.name.id.to_string().into());
        }
    }
    Ok(json(StatusCode::OK, &v))
}

/// The tree entry of a file.
pub(super) fn file_entry(path: &str, e: &FileEntry) -> TreeEntry {
    let lfs = e.storage == Storage::Lfs;
    TreeEntry::File {
        oid: e.git_oid.to_string(),
        path: path.to_string(),
        size: e.size,
        lfs: lfs.then(|| TreeLfs {
            oid: e.sha256.to_string(),
            size: e.size,
            pointer_size: e.pointer_size() as u64,
        }),
        xet_hash: lfs.then(|| e.xet_hash.to_string()),
    }
}

/// The tree entry of a listed file or folder (a folder's `oid` is its git tree id).
fn tree_entry(path: &str, item: &Item) -> TreeEntry {
    match item {
        Item::File(e) => file_entry(path, e),
        Item::Folder(id) => folder_entry(path, id),
    }
}

fn folder_entry(path: &str, id: &ObjectId) -> TreeEntry {
    TreeEntry::Directory {
        oid: id.to_string(),
        path: path.to_string(),
        size: 0,
    }
}

/// Entries per page of a tree listing unless `limit` says otherwise.
const TREE_PAGE: usize = 1000;
/// Entries per page of an `expand` listing, at most.
const EXPANDED_TREE_PAGE: usize = 50;
/// Commits an `expand` listing reads to find its entries' last commits; an entry last
/// changed further back is listed without one.
const LAST_COMMIT_WALK: usize = 10_000;

pub(super) async fn tree(ctx: &Ctx, repo: &RepoRef, rev: &str, path: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let (id, commit) = resolve(ctx, repo, rev).await?;
    let folder = if path.is_empty() {
        None
    } else {
        Some(RepoPath::parse_folder(path)?)
    };
    let recursive = ctx
        .query_param("recursive")
        .is_some_and(|v| v == "true" || v == "1");
    // `expand` adds each entry's last commit, which costs a walk of the history: pages
    // are smaller, as the Hub's are.
    let expand = ctx
        .query_param("expand")
        .is_some_and(|v| v.eq_ignore_ascii_case("true") || v == "1");
    let limit = ctx
        .query_param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0)
        .unwrap_or(if expand {
            EXPANDED_TREE_PAGE
        } else {
            TREE_PAGE
        })
        .min(if expand {
            EXPANDED_TREE_PAGE
        } else {
            usize::MAX
        });
    // The cursor is the last path of the previous page (see `next_page_url`).
    let after = match ctx.query_param("cursor") {
        Some(c) => Some(RepoPath::parse(&c).map_err(|_| {
            HubReply::bad_request(format!("cursor {c:?} is not one this server gave"))
        })?),
        None => None,
    };
    let page = ctx
        .repos()
        .list(
            &repo.at,
            &commit.tree,
            folder.as_ref(),
            recursive,
            after.as_ref(),
            limit,
        )
        .await?
        .ok_or_else(|| {
            HubReply::from(RepoError::EntryNotFound {
                repo: repo.name.clone(),
                rev: rev.to_string(),
                path: path.to_string(),
            })
            .at_commit(id)
        })?;
    let entries: Vec<TreeEntry> = page
        .entries
        .iter()
        .map(|Listed { path, item }| tree_entry(path, item))
        .collect();
    let mut r = if expand {
        let lasts = last_commits(ctx, &repo.at, id, folder.as_ref(), &page.entries).await?;
        json(StatusCode::OK, &with_last_commits(entries, lasts)?)
    } else {
        json(StatusCode::OK, &entries)
    };
    if let (true, Some(last)) = (page.more, page.entries.last()) {
        let next = next_page_url(ctx, &last.path);
        r.headers_mut().insert(
            header::LINK,
            header_value(&format!("<{next}>; rel=\"next\"")),
        );
    }
    Ok(r)
}

/// The last commit of each listed entry, walking at most [`LAST_COMMIT_WALK`] commits.
async fn last_commits(
    ctx: &Ctx,
    repo: &RepoRef,
    head: CommitId,
    folder: Option<&RepoPath>,
    entries: &[Listed],
) -> HubResult<Vec<Option<(CommitId, Commit)>>> {
    let paths = entries
        .iter()
        .map(|e| RepoPath::parse(&e.path))
        .collect::<Result<Vec<_>, _>>()?;
    // A recursive page reaches below `folder`; the walk's shortcut compares `folder`,
    // which holds all of them either way.
    Ok(ctx
        .repos()
        .last_commits(repo, head, folder, &paths, LAST_COMMIT_WALK)
        .await?)
}

/// `entries` as JSON, each with `lastCommit` (`id`, `title`, `date`) where one was found.
fn with_last_commits(
    entries: Vec<TreeEntry>,
    lasts: Vec<Option<(CommitId, Commit)>>,
) -> HubResult<Vec<serde_json::Value>> {
    entries
        .into_iter()
        .zip(lasts)
        .map(|(entry, last)| {
            let mut v = serde_json::to_value(&entry)
                .map_err(|e| HubReply::new(StatusCode::INTERNAL_SERVER_ERROR, e.to_string()))?;
            if let (Some(o), Some((id, c))) = (v.as_object_mut(), last) {
                o.insert(
                    "lastCommit".into(),
                    serde_json::json!({
                        "id": id.to_string(),
                        "title": c.summary,
                        "date": rfc3339(c.created_at),
                    }),
                );
            }
            Ok(v)
        })
        .collect()
}

/// This request's URL with `cursor=` the last path listed (other parameters kept).
pub(super) fn next_page_url(ctx: &Ctx, last: &str) -> String {
    url_with(ctx, "cursor", &xet_hub::api::quote_revision(last))
}

/// This request's URL with query parameter `key` set to `value` (already quoted; other
/// parameters kept): the next page of a paged listing.
pub(super) fn url_with(ctx: &Ctx, key: &str, value: &str) -> String {
    let prefix = format!("{key}=");
    let mut params: Vec<String> = ctx
        .query
        .as_deref()
        .unwrap_or("")
        .split('&')
        .filter(|p| !p.is_empty() && !p.starts_with(&prefix))
        .map(str::to_string)
        .collect();
    params.push(format!("{prefix}{value}"));
    format!("{}{}?{}", ctx.base, ctx.path, params.join("&"))
}

pub(super) async fn paths_info(
    ctx: &Ctx,
    repo: &RepoRef,
    rev: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let (_, commit) = resolve(ctx, repo, rev).await?;
    let is_form = ctx
        .headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/x-www-form-urlencoded"));
    let req: PathsInfoRequest = if is_form {
        let bytes = read_body(&ctx.headers, body, SMALL_BODY, "paths-info").await?;
        let text = String::from_utf8_lossy(&bytes);
        PathsInfoRequest {
            paths: form_pairs(&text)
                .into_iter()
                .filter(|(k, _)| k == "paths")
                .map(|(_, v)| v)
                .collect(),
            expand: false,
        }
    } else {
        json_body(ctx, body, "paths-info").await?
    };
    let mut out = Vec::new();
    for p in &req.paths {
        let path = RepoPath::parse_folder(p)?;
        if let Some(item) = ctx.repos().entry(&repo.at, &commit.tree, &path).await? {
            out.push(tree_entry(path.as_str(), &item));
        }
    }
    Ok(json(StatusCode::OK, &out))
}

pub(super) async fn create_branch(
    ctx: &Ctx,
    repo: &RepoRef,
    name: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let branch = plain_branch(name)?;
    let req: CreateBranchRequest = json_body(ctx, body, "create-branch").await?;
    let from = req.starting_point.as_deref().unwrap_or(BranchName::MAIN);
    let from = Revision::parse(from).map_err(|_| {
        HubReply::from(RepoError::RevisionNotFound {
            repo: repo.name.clone(),
            rev: from.to_string(),
        })
    })?;
    ctx.repos()
        .create_branch(&repo.at, &branch, &from)
        .await
        .map_err(|e| repo.named(e))?;
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// A branch name from a URL, for the routes that create or delete branches: `refs/...`
/// names (pull requests, tags) are made by their own routes.
pub(super) fn plain_branch(name: &str) -> HubResult<BranchName> {
    let branch = BranchName::parse(name)?;
    if !branch.is_plain() {
        return Err(HubReply::bad_request(format!(
            "{name:?} is not a branch name: names under refs/ are kept for pull requests \
             (refs/pr/N) and tags (refs/tags/X)"
        )));
    }
    Ok(branch)
}

/// Accepted without checking the YAML: clients only need the answer's shape to go on
/// (the Hub's metadata rules are its own).
pub(super) async fn validate_yaml(ctx: &Ctx, body: Body) -> HubResult<Response> {
    // Who asks first: on a server with tokens, nobody unknown gets a body read.
    ctx.caller(Access::Read)?;
    read_body(&ctx.headers, body, YAML_BODY, "validate-yaml").await?;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({"errors": [], "warnings": []}),
    ))
}

pub(super) fn whoami(ctx: &Ctx) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let role = match caller.access {
        Access::Read => "read",
        Access::Write => "write",
    };
    let name = &ctx.state.config.hub_user;
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({
            "type": "user",
            "name": name,
            "fullname": name,
            "orgs": [],
            "auth": {"type": "access_token", "accessToken": {"displayName": "xet serve", "role": role}},
        }),
    ))
}

pub(super) fn agent_harnesses() -> Response {
    let mut r = json(
        StatusCode::OK,
        &serde_json::json!({"standardEnvVars": [], "harnesses": {}}),
    );
    r.headers_mut().insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("max-age=86400"),
    );
    r
}

/// `secs` as RFC 3339 UTC (`2026-11-25T21:46:01.000Z`), the form the Hub uses.
fn rfc3339(secs: u64) -> String {
    rfc3339_ms(secs.saturating_mul(1000))
}

/// `ms` (milliseconds since the Unix epoch) as RFC 3339 UTC with milliseconds.
pub(super) fn rfc3339_ms(ms: u64) -> String {
    xet_hub::time::rfc3339_ms(i64::try_from(ms).unwrap_or(i64::MAX))
}

/// `secs` as an HTTP date (`Sun, 06 Dec 2026 09:30:00 GMT`, RFC 9110 IMF-fixdate).
pub(super) fn http_date(secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed"];
    const MONTHS: [&str; 12] = [
        "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec",
    ];
    let days = secs / 86_400;
    let (y, m, d) = xet_hub::time::civil(days as i64);
    let rem = secs % 86_400;
    format!(
        "{}, {d:02} {} {y:04} {:02}:{:02}:{:02} GMT",
        DAYS[(days % 7) as usize],
        MONTHS[(m - 1) as usize],
        rem / 3600,
        rem / 60 % 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(rfc3339(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(rfc3339(1_795_297_561), "2026-11-21T21:46:01.000Z");
        assert_eq!(rfc3339(951_782_400), "2000-02-29T00:00:00.000Z");
        assert_eq!(rfc3339_ms(1_795_297_561_042), "2026-11-21T21:46:01.042Z");
        assert_eq!(http_date(0), "Thu, 01 Jan 1970 00:00:00 GMT");
        assert_eq!(http_date(1_796_549_400), "Sun, 06 Dec 2026 09:30:00 GMT");
    }
}
