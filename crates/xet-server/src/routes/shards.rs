//! Shard registration (`POST /v1/shards`, `POST /v2/shards`) and global dedup queries
//! (`GET /v1/chunks/..`, answered with a shard).

use super::{json, octets};
use crate::auth::{Caller, Scope};
use crate::error::{ApiError, ApiResult};
use crate::state::body::read_body;
use crate::state::extract::{PathParams, ReadAccess, WriteAccess, check_prefix, parse_hash};
use crate::state::{AppState, Shared};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use std::convert::Infallible;
use std::sync::Arc;
use tokio::sync::mpsc;
use xet_cas::wire::ShardResultV1;
use xet_cas::{Cas, CasError, routes};
use xet_hub::{RepoRef, RepoStore};

pub(crate) async fn shards_v1(
    State(s): State<AppState>,
    WriteAccess(caller): WriteAccess,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    // The body first: a slow or stalled sender must not hold a permit.
    let body = read_body(&headers, body, s.config.max_shard_bytes, "shard").await?;
    let _permit = s.upload_permit().await?;
    let inserted = s.cas.put_shard(body.clone()).await?;
    if let Some(to) = uploader_repo(&s, &caller) {
        record_shard_files(&to, body).await?;
    }
    Ok(json(
        StatusCode::OK,
        &ShardResultV1 {
            result: inserted as u8,
        },
    ))
}

/// `POST /v2/shards`: the shard is read and size-checked first (413/400 as HTTP
/// statuses), then the answer is a `200` NDJSON stream ending in
/// `{"type":"result","was_inserted":b}` or an error frame. Validation failures arrive as
/// `{"type":"error","message":..,"retryable":false,"error":<code>}` (hf_xet shows the
/// message to the user; a 400 would only show the status); storage failures as the same
/// frame with `retryable: true`.
pub(crate) async fn shards_v2(
    State(s): State<AppState>,
    WriteAccess(caller): WriteAccess,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    // The body first: a slow or stalled sender must not hold a permit.
    let body = read_body(&headers, body, s.config.max_shard_bytes, "shard").await?;
    let permit = s.upload_permit().await?;
    let (tx, rx) = mpsc::channel::<Bytes>(8);
    let cas = s.cas.clone();
    let to = uploader_repo(&s, &caller);
    tokio::spawn(async move {
        let _permit = permit;
        register_with_progress(cas.as_ref(), to.as_ref(), body, &tx).await;
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(routes::NDJSON),
    );
    Ok(resp)
}

/// The repository whose files a shard's files become, with its store: the one the
/// uploading CAS token was minted for. Its CAS tokens may then read them, and commits to
/// it claim them (an upload, then the commit that names it).
fn uploader_repo(s: &Shared, caller: &Caller) -> Option<(Arc<dyn RepoStore>, RepoRef)> {
    match (&caller.scope, &s.hub) {
        (Scope::Repo(repo), Some(hub)) => Some((Arc::clone(hub.repos.store()), repo.clone())),
        _ => None,
    }
}

/// File references written at once when a shard is registered.
const FILE_REFERENCES_AT_ONCE: usize = 64;

/// Record the files of `shard` (registered just now, so valid) as `to`'s.
async fn record_shard_files(
    to: &(Arc<dyn RepoStore>, RepoRef),
    shard: Bytes,
) -> Result<(), CasError> {
    let files = tokio::task::spawn_blocking(move || {
        xet_shard::Shard::parse(&shard, &xet_shard::Limits::default())
            .map(|s| s.files.into_iter().map(|f| f.file_hash).collect::<Vec<_>>())
    })
    .await
    .map_err(|e| CasError::storage(format!("reading a registered shard's files: {e}")))?
    .map_err(|e| CasError::storage_with("reading a registered shard's files", e))?;
    // Many at once: each is a small durable write (a 2,000-file shard of small files
    // took 9-17 s one after another on a directory store).
    let mut files = files;
    files.sort();
    files.dedup();
    for chunk in files.chunks(FILE_REFERENCES_AT_ONCE) {
        let writes = chunk.iter().map(|f| to.0.record_file_reference(&to.1, f));
        futures_util::future::try_join_all(writes).await?;
    }
    Ok(())
}

/// Register `shard`, sending the `/v2/shards` frames to `tx`; stops sending once the
/// client has gone away. With `to`, its files become that repository's.
async fn register_with_progress(
    cas: &dyn Cas,
    to: Option<&(Arc<dyn RepoStore>, RepoRef)>,
    shard: Bytes,
    tx: &mpsc::Sender<Bytes>,
) {
    let _ = tx
        .send(frame(
            serde_json::json!({"type": "validating", "verified": 0, "total": 1}),
        ))
        .await;
    let registered = match cas.put_shard(shard.clone()).await {
        Ok(inserted) => match to {
            Some(to) => record_shard_files(to, shard).await.map(|()| inserted),
            None => Ok(inserted),
        },
        Err(e) => Err(e),
    };
    match registered {
        Ok(inserted) => {
            for f in [
                serde_json::json!({"type": "validating", "verified": 1, "total": 1}),
                serde_json::json!({"type": "committing", "stage": "uploading"}),
                serde_json::json!({"type": "committing", "stage": "syncing"}),
                // `was_inserted` is our addition (hf_xet ignores it): false when the shard
                // was already registered.
                serde_json::json!({"type": "result", "was_inserted": inserted}),
            ] {
                if tx.send(frame(f)).await.is_err() {
                    break;
                }
            }
        }
        Err(e) => {
            let retry = retryable(&e);
            let message = xet_cas::error_chain(&e);
            if retry {
                tracing::error!("shard upload failed: {message}");
            } else {
                tracing::debug!("shard rejected: {message}");
            }
            let _ = tx
                .send(frame(serde_json::json!({
                    "type": "error",
                    "message": message,
                    "retryable": retry,
                    "error": ApiError::code_of(&e),
                })))
                .await;
        }
    }
}

/// One NDJSON line.
fn frame(v: serde_json::Value) -> Bytes {
    let mut line = serde_json::to_vec(&v).expect("json");
    line.push(b'\n');
    Bytes::from(line)
}

/// Whether an error frame for `e` should tell the client to retry.
fn retryable(e: &CasError) -> bool {
    matches!(e, CasError::Storage { .. }) || e.is_retryable()
}

/// `GET /v1/chunks/{prefix}/{chunk}`: a shard naming the xorb that holds `chunk`, for
/// clients to dedup against.
pub(crate) async fn dedup_chunk(
    State(s): State<AppState>,
    _: ReadAccess,
    PathParams((prefix, hash)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let chunk = parse_hash("chunk", &hash)?;
    match s.cas.dedup_shard(&chunk).await? {
        Some(shard) => Ok(octets(shard)),
        None => Err(ApiError::not_found(format!(
            "chunk {chunk} is not tracked for global dedup"
        ))),
    }
}
