//! Request bodies read whole, bounded by a limit (`413` past it), and xorb bodies
//! verified as they arrive.

use crate::error::{ApiError, ApiResult, code};
use axum::body::Body;
use axum::http::{HeaderMap, header};
use bytes::Bytes;
use http_body_util::BodyExt;
use xet_cas::{ReceivedXorb, XorbReceiver};
use xet_hash::MerkleHash;

pub(crate) fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Read a whole request body, refusing more than `limit` bytes (413).
pub async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    what: &str,
) -> ApiResult<Bytes> {
    receive_body(headers, body, limit, what, |_| {}).await
}

/// [`read_body`] for the xorb `hash`, verified as it arrives if its length is declared
/// (see [`XorbReceiver`]).
pub(crate) async fn read_xorb_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    hash: &MerkleHash,
) -> ApiResult<ReceivedXorb> {
    let Some(declared) = content_length(headers) else {
        return Ok(ReceivedXorb::unverified(
            read_body(headers, body, limit, "xorb").await?,
        ));
    };
    let mut receiver = XorbReceiver::new(declared);
    // As for grant uploads: a frame's worth of hashing on the runtime thread, while the
    // frame is in the cache.
    let body = receive_body(headers, body, limit, "xorb", |b| receiver.advance(b)).await?;
    Ok(receiver.finish(body, hash))
}

/// Read a whole request body, refusing more than `limit` bytes (413); `seen` is given
/// the body so far after each frame.
async fn receive_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    what: &str,
    mut seen: impl FnMut(&[u8]),
) -> ApiResult<Bytes> {
    let declared = content_length(headers);
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(what, limit));
    }
    // Large (xorb) bodies go into recycled buffers (see `xet_cas::buffers`).
    // Page-aligned, so the store's direct writes need no staging copy.
    let mut buf =
        xet_cas::buffers::BodyBuf::with_capacity(declared.unwrap_or(0).min(limit) as usize);
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::bad_request(code::BAD_REQUEST, format!("{what} body failed: {e}"))
        })?;
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > limit {
                return Err(ApiError::too_large(what, limit));
            }
            buf.extend_from_slice(&data);
            seen(buf.as_slice());
        }
    }
    Ok(buf.freeze())
}
