//! Storage buckets (`buckets-api.md`): mutable, unversioned folders of Xet files, kept as
//! repositories of kind `bucket` are ([`xet_hub::bucket`]).
//!
//! | route | auth | answer |
//! |---|---|---|
//! | `POST /api/buckets/{ns}/{name}` | write | `{"url","name","id"}`; `409` if it exists |
//! | `GET /api/buckets/{ns}/{name}` | read | the bucket: `id`, `private`, `size`, `totalFiles`, `createdAt`, `updatedAt` |
//! | `GET /api/buckets/{ns}` | read | the namespace's buckets the caller sees (`me` = the caller) |
//! | `DELETE /api/buckets/{ns}/{name}` | write | `200`; its files are gone for good |
//! | `PUT /api/buckets/{ns}/{name}/settings` | write | `{"private": bool}` (other fields ignored; none: no change); `400` for private on a server without tokens |
//! | `POST /api/repos/move` | write, reaching both names | `{"fromRepo","toRepo","type":"bucket"}`: the bucket at its new name, records only; `404` no source, `409` target exists ([`manage`]) |
//! | `GET /api/buckets/{ns}/{name}/tree[/{prefix}]` | read | entries (full paths), `?recursive=true` (files only), paged by `Link` |
//! | `POST /api/buckets/{ns}/{name}/paths-info` | read | the files among `paths` (others omitted) |
//! | `POST /api/buckets/{ns}/{name}/batch` | write | NDJSON `addFile`/`copyFile`/`deleteFile` → report; `422` if nothing applied |
//! | `GET /api/buckets/{ns}/{name}/xet-{read,write}-token` | read / write | a CAS token for the bucket (bound to its storage, so it survives a move) |
//! | `GET /api/buckets/{ns}/{name}/events` | read | `text/event-stream` of `ready`/`changes`/`reset`/`reconnect`, `?cursor=` or `?since=`; `400` without `Accept: text/event-stream`, `503` + `Retry-After` when full ([`events`]) |
//! | `HEAD`/`GET /buckets/{ns}/{name}/resolve/{path}` | read | the file's Xet facts; `GET` its bytes, `Range` → `206` |
//!
//! A bucket the caller may not see answers as a missing one: `404` with `X-Error-Code:
//! RepoNotFound` (huggingface_hub raises `BucketNotFoundError` on exactly that). Privacy
//! is read from the record on every request, so a settings change applies at once on
//! every server of the store. A bucket half-way through a move (a crash) answers its
//! writes `409` until the same move is asked again.

mod access;
mod batch;
mod events;
mod manage;
mod read;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use axum::response::Response;
use xet_hub::api::buckets::{BucketInfo, CreateBucketRequest, CreateBucketResponse};
use xet_hub::{BucketState, RepoError, RepoRef, RepoType};

use super::ctx::Ctx;
use super::reply::{HubReply, HubResult};
use crate::config::Access;
use crate::routes::json;
use crate::routes::misc::no_route;

use access::{bucket_ref, not_found, now_ms, open};
pub(super) use manage::move_repo;
pub(super) use read::resolve;

/// `/api/buckets/...`, after `buckets`.
pub(super) async fn route(
    ctx: &Ctx,
    method: &Method,
    rest: &[&str],
    body: Body,
) -> HubResult<Response> {
    match (method, rest) {
        (&Method::GET, [ns]) => list(ctx, ns).await,
        (_, [ns, name, tail @ ..]) => {
            let bucket = bucket_ref(ctx, ns, name)?;
            match (method, tail) {
                (&Method::POST, []) => create(ctx, &bucket, body).await,
                (&Method::GET, []) => info(ctx, &bucket).await,
                (&Method::DELETE, []) => delete(ctx, &bucket).await,
                (&Method::PUT, ["settings"]) => manage::settings(ctx, &bucket, body).await,
                (&Method::GET, ["events"]) => events::events(ctx, &bucket).await,
                (&Method::GET, ["tree", prefix @ ..]) => {
                    read::tree(ctx, &bucket, &prefix.join("/")).await
                }
                (&Method::POST, ["paths-info"]) => read::paths_info(ctx, &bucket, body).await,
                (&Method::POST, ["batch"]) => batch::batch(ctx, &bucket, body).await,
                (&Method::GET, ["xet-read-token"]) => token(ctx, &bucket, Access::Read).await,
                (&Method::GET, ["xet-write-token"]) => token(ctx, &bucket, Access::Write).await,
                _ => Err(no_route(method, &ctx.path).into()),
            }
        }
        _ => Err(no_route(method, &ctx.path).into()),
    }
}

fn page_url(ctx: &Ctx, bucket: &RepoRef) -> String {
    format!("{}/buckets/{}", ctx.base, bucket.id)
}

async fn create(ctx: &Ctx, bucket: &RepoRef, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let req: CreateBucketRequest = super::repo::json_body(ctx, body, "create-bucket").await?;
    if !caller.scope.reaches(bucket) {
        return Err(HubReply::new(
            StatusCode::FORBIDDEN,
            format!(
                "this token cannot create bucket {}: it is scoped to other repositories",
                bucket.id
            ),
        ));
    }
    super::repo::refuse_private_without_tokens(ctx, req.is_private())?;
    let owner = &ctx.state.config.hub_user;
    let answer = CreateBucketResponse {
        url: page_url(ctx, bucket),
        name: bucket.id.name().to_string(),
        id: bucket.id.to_string(),
    };
    match ctx
        .repos()
        .create_bucket(bucket, owner, req.is_private(), now_ms())
        .await
    {
        Ok(_) => {
            tracing::info!(bucket = %bucket.id, "bucket created");
            Ok(json(StatusCode::OK, &answer))
        }
        Err(RepoError::RepoExists(_)) => Err(HubReply::new(
            StatusCode::CONFLICT,
            format!("You already created this bucket: {}", bucket.id),
        )),
        Err(e) => Err(e.into()),
    }
}

fn bucket_info(s: &BucketState) -> BucketInfo {
    let created_ms = s.record.created_ms.unwrap_or(s.record.created_at * 1000);
    BucketInfo {
        object_id: format!("bucket-{}", s.branch.as_str().trim_start_matches("bucket-")),
        id: s.record.id.to_string(),
        author: s.record.id.namespace().to_string(),
        private: s.record.private,
        repo_type: "bucket".into(),
        created_at: super::repo::rfc3339_ms(created_ms),
        updated_at: super::repo::rfc3339_ms(s.totals.updated_ms),
        size: s.totals.bytes,
        total_files: s.totals.files,
        cdn_regions: Vec::new(),
        resource_group: None,
    }
}

async fn info(ctx: &Ctx, bucket: &RepoRef) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let state = open(ctx, bucket, &caller).await?;
    Ok(json(StatusCode::OK, &bucket_info(&state)))
}

async fn list(ctx: &Ctx, ns: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let ns = if ns == "me" {
        ctx.state.config.hub_user.as_str()
    } else {
        ns
    };
    let search = ctx.query_param("search");
    let mut out = Vec::new();
    for record in ctx.repos().store().buckets().await? {
        let bucket = RepoRef::new(RepoType::Bucket, record.id.clone());
        if record.id.namespace() != ns
            || search
                .as_deref()
                .is_some_and(|s| !record.id.name().contains(s))
        {
            continue;
        }
        match open(ctx, &bucket, &caller).await {
            Ok(state) => out.push(bucket_info(&state)),
            // Deleted meanwhile, or not the caller's to see.
            Err(e) if e.status == StatusCode::NOT_FOUND => {}
            Err(e) => return Err(e),
        }
    }
    out.sort_by(|a, b| a.id.cmp(&b.id));
    Ok(json(StatusCode::OK, &out))
}

async fn delete(ctx: &Ctx, bucket: &RepoRef) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    open(ctx, bucket, &caller).await?;
    match ctx.repos().delete_bucket(bucket).await {
        Ok(()) => {}
        Err(RepoError::RepoNotFound(_)) => return Err(not_found(bucket)),
        Err(e) => return Err(e.into()),
    }
    tracing::info!(bucket = %bucket.id, "bucket deleted");
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// A CAS token for the bucket's storage, not its name: the files it reads and the
/// uploads it marks are where the bucket keeps them, through moves.
async fn token(ctx: &Ctx, bucket: &RepoRef, need: Access) -> HubResult<Response> {
    let caller = ctx.caller(need)?;
    let state = open(ctx, bucket, &caller).await?;
    super::upload::token_answer(ctx, &state.storage, need)
}
