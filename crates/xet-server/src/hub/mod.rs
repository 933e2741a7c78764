//! The Hugging Face Hub API of `xet serve` (`hub-api.md`), on the same listener as the
//! CAS API, so `HF_ENDPOINT=http://HOST:PORT` makes the real `hf` CLI, `huggingface_hub`
//! and `@huggingface/hub` work against this server, with Xet transfers.
//!
//! # Routes (`{T}` = `models`, `datasets`, `spaces`; `{P}` = `""`, `datasets/`, `spaces/`)
//!
//! | route | auth | answer |
//! |---|---|---|
//! | `GET /api/{T}` | read | the repositories the caller may see, `author`, `search`, `sort`, `limit`, `Link: rel="next"` |
//! | `POST /api/repos/create` | write | `200 {"url"}`, `409` if it exists |
//! | `DELETE /api/repos/delete` | write | `{"name","organization","type"}` → `200`; gone at once (`xet store gc` reclaims its bytes) |
//! | `POST /api/repos/move` | write on both names | `{"fromRepo","toRepo","type"}`: records only, the new name keeps the storage; `409` onto an existing name |
//! | `PUT /api/{T}/{ns}/{name}/settings` | write | `private` / `visibility` (`private`, `public`); `gated` is `501` |
//! | `GET /api/{T}/{ns}/{name}[/revision/{rev}]` | read | `{"id","sha","private","siblings",...}` |
//! | `GET /api/{T}/{ns}/{name}/tree/{rev}[/{path}]` | read | entries, `?recursive=true`, paged by `Link: rel="next"` |
//! | `POST /api/{T}/{ns}/{name}/paths-info/{rev}` | read | entries of the named paths (JSON or form body) |
//! | `POST /api/{T}/{ns}/{name}/preupload/{rev}` | write | `uploadMode` per file ([`xet_hub::mode`]) and remote `oid`s |
//! | `GET /api/{T}/{ns}/{name}/xet-read-token/{rev}` | read | a read CAS token, in `X-Xet-*` headers and JSON |
//! | `GET /api/{T}/{ns}/{name}/xet-write-token/{rev}` | write | the same with a write CAS token |
//! | `POST /api/{T}/{ns}/{name}/commit/{rev}` | write | NDJSON commit → `{"commitOid","commitUrl"}`; `create_pr=1` opens a pull request (`"pullRequestUrl"`); onto `refs/pr/N` an open one |
//! | `GET`/`POST /api/{T}/{ns}/{name}/discussions` | read/write | pull requests and discussions, newest first, 50 a page / `{"title","description","pullRequest"}` |
//! | `GET /api/{T}/{ns}/{name}/discussions/{num}` | read | with events, `changes.base`, `mergeCommitId` |
//! | `POST /api/{T}/{ns}/{name}/discussions/{num}/{status,comment,merge}` | write | merge applies the pull request onto its base; a conflict is `409` naming the files |
//! | `POST /api/{T}/{ns}/{name}/branch/{name}` | write | `200`, `409` if it (or a tag of that name) exists; `refs/...` names `400` |
//! | `DELETE /api/{T}/{ns}/{name}/branch/{name}` | write | `200`; `main` `403`, a missing one `404` |
//! | `GET /api/{T}/{ns}/{name}/refs[?include_prs=1]` | read | `{"branches","converts","tags"[,"pullRequests"]}` |
//! | `GET /api/{T}/{ns}/{name}/commits/{rev}` | read | newest first along first parents, `?p=&limit=`, `Link: rel="next"` |
//! | `POST /api/{T}/{ns}/{name}/tag/{rev}` | write | `{"tag","message"}` → `200`, `409` if it (or a branch of that name) exists |
//! | `DELETE /api/{T}/{ns}/{name}/tag/{tag}` | write | `200`, `404` if there is none |
//! | `POST /api/{T}/{ns}/{name}/super-squash/{branch}` | write | the branch becomes one commit of its tree; a tag `400` |
//! | `POST /api/validate-yaml` | read | `{"errors":[],"warnings":[]}` (the caller checked before the body is read) |
//! | `GET /api/whoami-v2` | user token | the configured user |
//! | `GET /api/agent-harnesses` | none | an empty registry |
//! | `HEAD`/`GET /{P}{ns}/{name}/resolve/{rev}/{path}` | read | the file's facts; `GET` streams its bytes, `Range` → `206` |
//! | `POST /{P}{ns}/{name}.git/info/lfs/objects/batch` | write | `"transfer":"xet"` for uploads |
//! | `/api/buckets/...`, `/buckets/{ns}/{name}/resolve/{path}` | | storage buckets: the `buckets` module |
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
//! so an open server refuses to create one. A scoped user token (`write:T:org/*`)
//! reaches the repositories its scope matches; any other answers as a missing one, and
//! it creates none. The xet token routes mint short-lived CAS tokens
//! ([`crate::auth::TokenMinter`]) bound to the repository asked for, whose access
//! follows the route and the caller (a read-only user never gets a write CAS token):
//! they read the files that repository references (`crate::state::access`), and the
//! files of shards uploaded with them become the repository's, for the commit that
//! names them. Hub tokens are never logged and never reach the CAS.

mod body;
mod buckets;
mod commit;
mod ctx;
mod discussions;
mod files;
mod listing;
mod refs;
mod reply;
mod repo;
mod upload;

use axum::body::Body;
use axum::extract::{Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use xet_hub::{RepoId, RepoRef, RepoType};

use crate::config::Access;
use crate::routes::misc::no_route;
use crate::state::AppState;
use crate::state::extract::base_url;
use ctx::{Ctx, segments};
use reply::HubResult;

/// `/api/...`: the Hub's JSON API.
pub(crate) async fn api(State(state): State<AppState>, req: Request) -> Response {
    let (ctx, method, body) = context(state, req);
    match api_route(&ctx, &method, body).await {
        Ok(r) => r,
        Err(e) => e.into_response(),
    }
}

fn context(state: AppState, req: Request) -> (Ctx, Method, Body) {
    let (parts, body) = req.into_parts();
    let base = base_url(&parts, &state);
    let ctx = Ctx {
        state,
        base,
        query: parts.uri.query().map(str::to_string),
        path: parts.uri.path().to_string(),
        headers: parts.headers,
    };
    (ctx, parts.method, body)
}

async fn api_route(ctx: &Ctx, method: &Method, body: Body) -> HubResult<Response> {
    let segs = segments(&ctx.path)?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let rest = segs.get(1..).unwrap_or_default();
    match (method, rest) {
        (&Method::POST, ["repos", "create"]) => repo::create(ctx, body).await,
        (&Method::DELETE, ["repos", "delete"]) => repo::delete(ctx, body).await,
        (&Method::POST, ["repos", "move"]) => buckets::move_repo(ctx, body).await,
        (&Method::POST, ["validate-yaml"]) => repo::validate_yaml(ctx, body).await,
        (&Method::GET, ["whoami-v2"]) => repo::whoami(ctx),
        (&Method::GET, ["agent-harnesses"]) => Ok(repo::agent_harnesses()),
        (_, ["buckets", rest @ ..]) => buckets::route(ctx, method, rest, body).await,
        (&Method::GET, [plural]) if RepoType::from_plural(plural).is_some() => {
            let kind = RepoType::from_plural(plural).unwrap_or(RepoType::Model);
            listing::list(ctx, kind).await
        }
        (_, [plural, ns, name, tail @ ..]) => {
            let Some(kind) = RepoType::from_plural(plural) else {
                return Err(no_route(method, &ctx.path).into());
            };
            let repo = RepoRef::new(kind, RepoId::new(ns, name)?);
            repo_route(ctx, method, &repo, tail, body).await
        }
        _ => Err(no_route(method, &ctx.path).into()),
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
        (&Method::PUT, ["settings"]) => repo::settings(ctx, repo, body).await,
        (&Method::POST, ["branch", branch @ ..]) if !branch.is_empty() => {
            repo::create_branch(ctx, repo, &joined(branch), body).await
        }
        (&Method::DELETE, ["branch", branch @ ..]) if !branch.is_empty() => {
            refs::delete_branch(ctx, repo, &joined(branch)).await
        }
        (&Method::GET, ["refs"]) => refs::refs(ctx, repo).await,
        (&Method::GET, ["discussions"]) => discussions::list(ctx, repo).await,
        (&Method::POST, ["discussions"]) => discussions::create(ctx, repo, body).await,
        (&Method::GET, ["discussions", num]) => discussions::get(ctx, repo, num).await,
        (&Method::POST, ["discussions", num, "status"]) => {
            discussions::status(ctx, repo, num, body).await
        }
        (&Method::POST, ["discussions", num, "comment"]) => {
            discussions::comment(ctx, repo, num, body).await
        }
        (&Method::POST, ["discussions", num, "merge"]) => {
            discussions::merge(ctx, repo, num, body).await
        }
        (&Method::GET, ["commits", rev @ ..]) if !rev.is_empty() => {
            refs::commits(ctx, repo, &joined(rev)).await
        }
        (&Method::POST, ["tag", rev @ ..]) if !rev.is_empty() => {
            refs::create_tag(ctx, repo, &joined(rev), body).await
        }
        (&Method::DELETE, ["tag", tag @ ..]) if !tag.is_empty() => {
            refs::delete_tag(ctx, repo, &joined(tag)).await
        }
        (&Method::POST, ["super-squash", branch @ ..]) if !branch.is_empty() => {
            refs::super_squash(ctx, repo, &joined(branch), body).await
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
        _ => Err(no_route(method, &ctx.path).into()),
    }
}

/// `HEAD`/`GET /buckets/{ns}/{name}/resolve/{path}`, if the request is one.
async fn bucket_file(ctx: &Ctx, method: &Method) -> Option<HubResult<Response>> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return None;
    }
    let segs = match segments(&ctx.path) {
        Ok(s) => s,
        Err(e) => return Some(Err(e)),
    };
    match segs
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["buckets", ns, name, "resolve", path @ ..] if !path.is_empty() => {
            Some(buckets::resolve(ctx, method, ns, name, &path.join("/")).await)
        }
        _ => None,
    }
}

/// Everything no other route took: file URLs of the Hub (`resolve`, the LFS batch
/// endpoint), else the CAS API's 404.
pub(crate) async fn files(State(state): State<AppState>, req: Request) -> Response {
    let method = req.method().clone();
    let uri = req.uri().clone();
    if state.hub.is_none() {
        return no_route(&method, uri.path()).into_response();
    }
    let (ctx, method, body) = context(state, req);
    let answer = match bucket_file(&ctx, &method).await {
        Some(r) => r.map(Some),
        None => files::route(&ctx, &method, body).await,
    };
    match answer {
        Ok(Some(r)) => r,
        Ok(None) => no_route(&method, uri.path()).into_response(),
        Err(e) => e.into_response(),
    }
}
