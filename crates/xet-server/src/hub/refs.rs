//! Refs and history: `GET .../refs`, `GET .../commits/{rev}`, tags (`POST .../tag/{rev}`,
//! `DELETE .../tag/{tag}`), `DELETE .../branch/{branch}` and `POST .../super-squash/{branch}`.
//! Tags and pull requests are refs the store keeps beside the branches (`refs/tags/X`,
//! `refs/pr/N`), each moved or deleted by the same compare-and-swap as a branch.

use axum::body::Body;
use axum::http::{StatusCode, header};
use axum::response::Response;
use xet_hub::api::{
    CommitAuthor, CommitInfo, CreateTagRequest, GitRef, GitRefs, SuperSquashRequest,
};
use xet_hub::{BranchName, CommitMeta, RepoError, RepoRef, Revision, TagName};

use super::ctx::Ctx;
use super::reply::{HubReply, HubResult, header_value};
use super::repo::{json_body, plain_branch, resolve, rfc3339_ms, url_with};
use crate::config::Access;
use crate::routes::json;
use crate::sign::unix_now;

/// Commits per page of `GET .../commits/{rev}` unless `limit` says otherwise (at most
/// [`MAX_COMMITS_PAGE`]).
const COMMITS_PAGE: usize = 50;
const MAX_COMMITS_PAGE: usize = 1000;

/// `GET .../refs`: branches, tags and, with `include_prs=1`, pull requests, each with
/// the commit it points at, sorted by name.
pub(super) async fn refs(ctx: &Ctx, repo: &RepoRef) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let with_prs = ctx
        .query_param("include_prs")
        .is_some_and(|v| v == "1" || v == "true");
    let mut out = GitRefs {
        pull_requests: with_prs.then(Vec::new),
        ..GitRefs::default()
    };
    for (name, head) in ctx.repos().store().branches(&repo.at).await? {
        let target_commit = head.commit.to_string();
        let one = |name: &str, full: String| GitRef {
            name: name.to_string(),
            full,
            target_commit: target_commit.clone(),
        };
        if let Some(tag) = name.tag() {
            out.tags.push(one(tag, name.to_string()));
        } else if name.pull_request().is_some() {
            if let Some(prs) = out.pull_requests.as_mut() {
                prs.push(one(name.as_str(), name.to_string()));
            }
        } else if name.is_plain() {
            out.branches
                .push(one(name.as_str(), format!("refs/heads/{name}")));
        }
    }
    Ok(json(StatusCode::OK, &out))
}

/// `GET .../commits/{rev}`: the history from `rev` along first parents, newest first,
/// paged by `p` (from 0) and `limit`, the next page named by a `Link` header.
pub(super) async fn commits(ctx: &Ctx, repo: &RepoRef, rev: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let (head, _) = resolve(ctx, repo, rev).await?;
    let number = |key: &str| ctx.query_param(key).and_then(|v| v.parse::<usize>().ok());
    let page = number("p").unwrap_or(0);
    let limit = number("limit")
        .filter(|&l| l > 0)
        .unwrap_or(COMMITS_PAGE)
        .min(MAX_COMMITS_PAGE);
    let skip = page.checked_mul(limit).ok_or_else(|| {
        HubReply::bad_request(format!("page {page} of {limit} commits is out of range"))
    })?;
    let (commits, more) = ctx.repos().history(&repo.at, head, skip, limit).await?;
    let body: Vec<CommitInfo> = commits
        .into_iter()
        .map(|(id, c)| CommitInfo {
            id: id.to_string(),
            title: c.summary.clone(),
            message: c.description.clone(),
            authors: vec![CommitAuthor { user: c.author }],
            date: rfc3339_ms(c.created_at.saturating_mul(1000)),
        })
        .collect();
    let mut r = json(StatusCode::OK, &body);
    if more {
        let next = url_with(ctx, "p", &(page + 1).to_string());
        r.headers_mut().insert(
            header::LINK,
            header_value(&format!("<{next}>; rel=\"next\"")),
        );
    }
    Ok(r)
}

/// `POST .../tag/{rev}` with `{"tag": ..., "message": ...}`: tag the commit `rev` names.
pub(super) async fn create_tag(
    ctx: &Ctx,
    repo: &RepoRef,
    rev: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: CreateTagRequest = json_body(ctx, body, "create-tag").await?;
    let tag = TagName::parse(&req.tag)?;
    let from = parse_revision(&repo.name, rev)?;
    let at = ctx
        .repos()
        .create_tag(&repo.at, &tag, &from, req.message.as_deref())
        .await
        .map_err(|e| repo.named(e))?;
    tracing::info!(repo = %repo.name, tag = %tag, commit = %at, "tag created");
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// `DELETE .../tag/{tag}`.
pub(super) async fn delete_tag(ctx: &Ctx, repo: &RepoRef, tag: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let tag = TagName::parse(tag)?;
    ctx.repos()
        .delete_ref(&repo.at, &tag.as_ref_name())
        .await
        .map_err(|e| repo.named(e))?;
    tracing::info!(repo = %repo.name, tag = %tag, "tag deleted");
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// `DELETE .../branch/{branch}`: any branch but the default one.
pub(super) async fn delete_branch(ctx: &Ctx, repo: &RepoRef, name: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let branch = plain_branch(name)?;
    ctx.repos()
        .delete_ref(&repo.at, &branch)
        .await
        .map_err(|e| repo.named(e))?;
    tracing::info!(repo = %repo.name, branch = %branch, "branch deleted");
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// `POST .../super-squash/{branch}` with `{"message": ...}`: the branch becomes one
/// commit holding its current tree.
pub(super) async fn super_squash(
    ctx: &Ctx,
    repo: &RepoRef,
    name: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: SuperSquashRequest = json_body(ctx, body, "super-squash").await?;
    let branch = BranchName::parse(name)?;
    let store = ctx.repos().store();
    if branch.tag().is_some() || store.branch(&repo.at, &branch).await?.is_none() {
        // Tags (by either name) are refused as the Hub does: only branches squash.
        let is_tag = branch.tag().is_some()
            || matches!(ctx.repos().ref_head(&repo.at, &branch).await, Ok(Some(_)));
        return Err(if is_tag {
            HubReply::bad_request(format!(
                "{name} is a tag of {}: only a branch's history can be squashed",
                repo.name
            ))
        } else {
            RepoError::RevisionNotFound {
                repo: repo.name.clone(),
                rev: name.to_string(),
            }
            .into()
        });
    }
    let meta = CommitMeta {
        summary: req
            .message
            .unwrap_or_else(|| format!("Super-squash branch '{branch}'")),
        description: String::new(),
        author: ctx.state.config.hub_user.clone(),
        created_at: unix_now(),
    };
    let done = ctx
        .repos()
        .super_squash(&repo.at, &branch, &meta)
        .await
        .map_err(|e| repo.named(e))?;
    tracing::info!(repo = %repo.name, branch = %branch, commit = %done.id, "history squashed");
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "commitId": done.id.to_string() }),
    ))
}

fn parse_revision(repo: &RepoRef, rev: &str) -> HubResult<Revision> {
    Revision::parse(rev).map_err(|_| {
        HubReply::from(RepoError::RevisionNotFound {
            repo: repo.clone(),
            rev: rev.to_string(),
        })
    })
}
