//! Changing a bucket without touching its files: its settings (`private`) and its name
//! (`POST /api/repos/move`, which moves repositories the same way). Both write records
//! only ([`xet_hub::bucket`]).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use xet_hub::api::MoveRepoRequest;
use xet_hub::api::buckets::BucketSettings;
use xet_hub::{RepoError, RepoId, RepoRef, RepoType};

use super::super::ctx::Ctx;
use super::super::reply::{HubReply, HubResult};
use super::access::{bucket_ref, not_found, open};
use crate::auth::Caller;
use crate::config::Access;
use crate::routes::json;

/// `PUT /api/buckets/{ns}/{name}/settings`: `{"private": bool}` makes the bucket private
/// or public, at once for every reader on every server sharing the store (records are
/// never cached). A body without `private` changes nothing.
pub(super) async fn settings(ctx: &Ctx, bucket: &RepoRef, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let req: BucketSettings = super::super::repo::json_body(ctx, body, "bucket settings").await?;
    let state = open(ctx, bucket, &caller).await?;
    let Some(private) = req.private else {
        return Ok(json(StatusCode::OK, &serde_json::json!({})));
    };
    super::super::repo::refuse_private_without_tokens(ctx, private)?;
    if private != state.record.private {
        ctx.repos().set_private(bucket, private).await?;
        tracing::info!(bucket = %bucket.id, private, "bucket settings changed");
    }
    Ok(json(
        StatusCode::OK,
        &serde_json::json!({ "private": private }),
    ))
}

/// `POST /api/repos/move`: the bucket or repository answers at its new name with its
/// files, history, refs, pull requests and creation time, and the old name is free
/// (`404` until created again, then empty). Records are written, nothing is copied: the
/// new name keeps its objects where the old one did. Needs write access reaching both
/// names; an existing target is `409`.
pub(crate) async fn move_repo(ctx: &Ctx, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let req: MoveRepoRequest = super::super::repo::json_body(ctx, body, "move").await?;
    let kind = match req.repo_type.as_deref() {
        Some("bucket") => RepoType::Bucket,
        None => RepoType::Model,
        Some(t @ ("model" | "dataset" | "space")) => RepoType::parse(Some(t))?,
        Some(other) => {
            return Err(HubReply::bad_request(format!(
                "unknown type {other:?}: expected model, dataset, space or bucket"
            )));
        }
    };
    let (from, to) = if kind == RepoType::Bucket {
        (
            named_bucket(ctx, &req.from_repo)?,
            named_bucket(ctx, &req.to_repo)?,
        )
    } else {
        (
            RepoRef::new(kind, RepoId::parse(&req.from_repo)?),
            RepoRef::new(kind, RepoId::parse(&req.to_repo)?),
        )
    };
    if from == to {
        return Err(HubReply::bad_request(format!(
            "{kind} {} is already named {}",
            from.id, to.id
        )));
    }
    check_move_access(&caller, &from, &to)?;
    if kind == RepoType::Bucket {
        open(ctx, &from, &caller).await?;
    } else {
        ctx.open_repo(&from, &caller).await?;
    }
    match ctx.repos().move_repo(&from, &to).await {
        Ok(_) => {
            tracing::info!(kind = %kind, from = %from.id, to = %to.id, "moved");
            Ok(json(StatusCode::OK, &serde_json::json!({})))
        }
        Err(RepoError::RepoExists(_)) => Err(HubReply::new(
            StatusCode::CONFLICT,
            format!("{kind} {} already exists: choose another name", to.id),
        )),
        Err(RepoError::RepoNotFound(_)) if kind == RepoType::Bucket => Err(not_found(&from)),
        Err(e) => Err(e.into()),
    }
}

/// The bucket `namespace/name` names (`me` is the caller).
fn named_bucket(ctx: &Ctx, id: &str) -> HubResult<RepoRef> {
    let id = RepoId::parse(id)?;
    let bucket = bucket_ref(ctx, id.namespace(), id.name())?;
    debug_assert_eq!(bucket.kind, RepoType::Bucket);
    Ok(bucket)
}

/// The caller must reach both names: a source it cannot see answers as missing, a
/// target outside its reach is forbidden.
fn check_move_access(caller: &Caller, from: &RepoRef, to: &RepoRef) -> HubResult<()> {
    if !caller.scope.reaches(from) {
        return Err(not_found(from));
    }
    if !caller.scope.reaches(to) {
        return Err(HubReply::new(
            StatusCode::FORBIDDEN,
            format!(
                "this token cannot write to namespace {}: it is scoped to other repositories",
                to.id.namespace()
            ),
        ));
    }
    Ok(())
}
