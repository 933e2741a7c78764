//! Pull requests, the part of the Hub's discussions `huggingface_hub` uses for them:
//! `GET`/`POST .../discussions`, `GET .../discussions/{num}`, `POST .../discussions/{num}/
//! {status,comment,merge}`, and commits with `create_pr=1` (the `commit` module). The
//! model is `xet_hub::discussion`'s.

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use xet_hub::BranchName;
use xet_hub::discussion::{Discussion, DiscussionError, Event, EventKind, NewDiscussion, Status};
use xet_hub::{CommitMeta, RepoRef};

use super::ctx::Ctx;
use super::reply::{HubReply, HubResult};
use super::repo::{json_body, rfc3339_ms};
use crate::config::Access;
use crate::routes::json;
use crate::sign::unix_now;

/// Discussions per page of the listing.
const PAGE: usize = 50;

impl From<DiscussionError> for HubReply {
    fn from(e: DiscussionError) -> HubReply {
        let message = e.to_string();
        match e {
            DiscussionError::NotFound { .. } => HubReply::new(StatusCode::NOT_FOUND, message),
            DiscussionError::NotAPullRequest { .. } | DiscussionError::NotOpen { .. } => {
                HubReply::bad_request(message)
            }
            DiscussionError::Conflict { .. } => HubReply::new(StatusCode::CONFLICT, message),
            DiscussionError::Repo(e) => e.into(),
        }
    }
}

#[derive(serde::Deserialize)]
struct CreateRequest {
    title: String,
    #[serde(default)]
    description: String,
    #[serde(default, rename = "pullRequest")]
    pull_request: bool,
}

#[derive(serde::Deserialize, Default)]
struct StatusRequest {
    status: String,
    #[serde(default)]
    comment: Option<String>,
}

#[derive(serde::Deserialize, Default)]
struct CommentRequest {
    #[serde(default)]
    comment: Option<String>,
}

/// `GET .../discussions?p=&type=&status=&author=`: newest first, 50 a page.
pub(super) async fn list(ctx: &Ctx, repo: &RepoRef) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let kind = ctx.query_param("type").unwrap_or_else(|| "all".into());
    let status = ctx.query_param("status").unwrap_or_else(|| "all".into());
    let author = ctx.query_param("author");
    let page = ctx
        .query_param("p")
        .and_then(|p| p.parse::<usize>().ok())
        .unwrap_or(0);
    let all: Vec<Discussion> = ctx
        .repos()
        .discussions(&repo.at)
        .await?
        .into_iter()
        .filter(|d| match kind.as_str() {
            "pull_request" => d.is_pull_request,
            "discussion" => !d.is_pull_request,
            _ => true,
        })
        .filter(|d| match status.as_str() {
            "open" => matches!(d.status, Status::Open | Status::Draft),
            "closed" => matches!(d.status, Status::Closed | Status::Merged),
            _ => true,
        })
        .filter(|d| author.as_deref().is_none_or(|a| d.author == a))
        .collect();
    let start = page.saturating_mul(PAGE).min(all.len());
    let shown: Vec<serde_json::Value> = all[start..]
        .iter()
        .take(PAGE)
        .map(|d| summary(&repo.name, d))
        .collect();
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({
            "discussions": shown,
            "count": all.len(),
            "start": start,
            "numClosedDiscussions": all.iter().filter(|d| matches!(d.status, Status::Closed | Status::Merged)).count(),
        }),
    ))
}

/// `POST .../discussions` `{"title","description","pullRequest"}` → `{"num",...}`.
pub(super) async fn create(ctx: &Ctx, repo: &RepoRef, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: CreateRequest = json_body(ctx, body, "create-discussion").await?;
    let title = req.title.trim();
    if title.is_empty() || title.len() > 200 {
        return Err(HubReply::bad_request(
            "a discussion's title is 1 to 200 bytes",
        ));
    }
    let d = ctx
        .repos()
        .create_discussion(
            &repo.at,
            &NewDiscussion {
                base: &BranchName::main(),
                title,
                description: &req.description,
                author: &ctx.state.config.hub_user,
                created_at: unix_now(),
                pull_request: req.pull_request,
            },
        )
        .await?;
    tracing::info!(repo = %repo.name, num = d.num, pull_request = d.is_pull_request, "discussion created");
    Ok(json(StatusCode::OK, &details(ctx, &repo.name, &d)))
}

/// `GET .../discussions/{num}`.
pub(super) async fn get(ctx: &Ctx, repo: &RepoRef, num: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let (_, d) = ctx.repos().discussion(&repo.at, number(num)?).await?;
    Ok(json(StatusCode::OK, &details(ctx, &repo.name, &d)))
}

/// `POST .../discussions/{num}/status` `{"status": "open"|"closed", "comment"}`.
pub(super) async fn status(
    ctx: &Ctx,
    repo: &RepoRef,
    num: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: StatusRequest = json_body(ctx, body, "discussion status").await?;
    let status = match req.status.as_str() {
        "open" => Status::Open,
        "closed" => Status::Closed,
        other => {
            return Err(HubReply::bad_request(format!(
                "status {other:?} cannot be set: open or closed"
            )));
        }
    };
    let num = number(num)?;
    let user = &ctx.state.config.hub_user;
    if let Some(text) = req.comment.filter(|c| !c.trim().is_empty()) {
        comment_on(ctx, &repo.at, num, text).await?;
    }
    let d = ctx
        .repos()
        .set_discussion_status(&repo.at, num, status, user, unix_now())
        .await?;
    let last = d.events.last().map(event);
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "newStatus": last }),
    ))
}

/// `POST .../discussions/{num}/comment` `{"comment"}`.
pub(super) async fn comment(
    ctx: &Ctx,
    repo: &RepoRef,
    num: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: CommentRequest = json_body(ctx, body, "comment").await?;
    let text = req
        .comment
        .filter(|c| !c.trim().is_empty())
        .ok_or_else(|| HubReply::bad_request("a comment needs a non-empty \"comment\""))?;
    let d = comment_on(ctx, &repo.at, number(num)?, text).await?;
    let last = d.events.last().map(event);
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "newMessage": last }),
    ))
}

async fn comment_on(ctx: &Ctx, storage: &RepoRef, num: u64, text: String) -> HubResult<Discussion> {
    let user = ctx.state.config.hub_user.clone();
    let at = unix_now();
    Ok(ctx
        .repos()
        .update_discussion(storage, num, |d| {
            d.push(&user, at, EventKind::Comment { text: text.clone() });
            Ok(())
        })
        .await?)
}

/// `POST .../discussions/{num}/merge` `{"comment"}`.
pub(super) async fn merge(ctx: &Ctx, repo: &RepoRef, num: &str, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: CommentRequest = json_body(ctx, body, "merge").await?;
    let num = number(num)?;
    let (_, d) = ctx.repos().discussion(&repo.at, num).await?;
    let meta = CommitMeta {
        summary: format!("Merge pull request #{num}: {}", d.title),
        description: req.comment.unwrap_or_default(),
        author: ctx.state.config.hub_user.clone(),
        created_at: unix_now(),
    };
    let done = ctx.repos().merge_pull_request(&repo.at, num, &meta).await?;
    tracing::info!(repo = %repo.name, num, commit = %done.id, "pull request merged");
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

fn number(s: &str) -> HubResult<u64> {
    s.parse::<u64>()
        .ok()
        .filter(|&n| n > 0)
        .ok_or_else(|| HubReply::bad_request(format!("{s:?} is not a discussion number")))
}

fn author(name: &str) -> serde_json::Value {
    serde_json::json!({ "name": name, "type": "user", "isHf": false, "isOwner": true })
}

/// A discussion as the listing shows it.
fn summary(repo: &RepoRef, d: &Discussion) -> serde_json::Value {
    serde_json::json!({
        "num": d.num,
        "title": d.title,
        "status": d.status.as_str(),
        "createdAt": rfc3339_ms(d.created_at.saturating_mul(1000)),
        "isPullRequest": d.is_pull_request,
        "author": author(&d.author),
        "repo": { "name": repo.id.to_string(), "type": repo.kind.as_str() },
        "numComments": d.events.iter().filter(|e| matches!(e.kind, EventKind::Comment { .. })).count(),
        "pinned": false,
    })
}

/// A discussion with its events and, for a pull request, its base and merge commit.
fn details(ctx: &Ctx, repo: &RepoRef, d: &Discussion) -> serde_json::Value {
    let mut v = summary(repo, d);
    if let Some(o) = v.as_object_mut() {
        o.insert(
            "events".into(),
            d.events.iter().map(event).collect::<Vec<_>>().into(),
        );
        o.insert(
            "url".into(),
            format!("{}/{repo}/discussions/{}", ctx.base, d.num).into(),
        );
        if d.is_pull_request {
            let mut changes = serde_json::json!({
                "base": d.base.as_ref().map(|b| format!("refs/heads/{b}")),
            });
            if let (Some(m), Some(c)) = (d.merge_commit, changes.as_object_mut()) {
                c.insert("mergeCommitId".into(), m.to_string().into());
            }
            o.insert("changes".into(), changes);
            o.insert("filesWithConflicts".into(), serde_json::json!([]));
        }
    }
    v
}

fn event(e: &Event) -> serde_json::Value {
    let (kind, data) = match &e.kind {
        EventKind::Comment { text } => (
            "comment",
            serde_json::json!({
                "edited": false, "hidden": false, "numEdits": 0,
                "latest": { "raw": text, "author": author(&e.author) },
            }),
        ),
        EventKind::StatusChange { status } => (
            "status-change",
            serde_json::json!({ "status": status.as_str() }),
        ),
        EventKind::Commit { oid, subject } => (
            "commit",
            serde_json::json!({ "oid": oid.to_string(), "subject": subject }),
        ),
    };
    serde_json::json!({
        "id": e.id,
        "type": kind,
        "createdAt": rfc3339_ms(e.created_at.saturating_mul(1000)),
        "author": author(&e.author),
        "data": data,
    })
}
