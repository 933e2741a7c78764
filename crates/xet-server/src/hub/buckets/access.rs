//! What every bucket route starts with: which bucket a path names, whether the caller
//! may see it, and the time. Imports no other bucket module.

use axum::http::StatusCode;
use xet_hub::api::error_code;
use xet_hub::{BucketState, RepoError, RepoId, RepoRef, RepoType};

use super::super::ctx::Ctx;
use super::super::reply::{HubReply, HubResult};
use crate::auth::Caller;

/// The bucket `ns/name`; `me` is the caller (the server's user).
pub(crate) fn bucket_ref(ctx: &Ctx, ns: &str, name: &str) -> HubResult<RepoRef> {
    let ns = if ns == "me" {
        ctx.state.config.hub_user.as_str()
    } else {
        ns
    };
    Ok(RepoRef::new(RepoType::Bucket, RepoId::new(ns, name)?))
}

pub(super) fn not_found(bucket: &RepoRef) -> HubReply {
    HubReply::coded(
        StatusCode::NOT_FOUND,
        error_code::REPO_NOT_FOUND,
        format!("bucket {} not found (or private: pass a token)", bucket.id),
    )
}

/// The state of `bucket`, if `caller` may see it; else it answers as a missing one.
pub(super) async fn open(ctx: &Ctx, bucket: &RepoRef, caller: &Caller) -> HubResult<BucketState> {
    if !caller.scope.reaches(bucket) {
        return Err(not_found(bucket));
    }
    match ctx.repos().bucket(bucket).await {
        Ok(s) if s.record.private && !caller.user => Err(not_found(bucket)),
        Ok(s) => Ok(s),
        Err(RepoError::RepoNotFound(_)) => Err(not_found(bucket)),
        Err(e) => Err(e.into()),
    }
}

/// Milliseconds since the Unix epoch.
pub(super) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
