//! Direct xorb uploads (`POST /v1/xorbs/..`) and existence checks (`HEAD`).

use super::{head_response, json};
use crate::error::{ApiError, ApiResult};
use crate::state::AppState;
use crate::state::body::read_xorb_body;
use crate::state::extract::{PathParams, ReadAccess, WriteAccess, check_prefix, parse_hash};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use xet_cas::XorbBody;
use xet_cas::wire::WasInserted;

pub(crate) async fn xorb_post(
    State(s): State<AppState>,
    _: WriteAccess,
    PathParams((prefix, hash)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    // The body first: a slow or stalled sender must not hold a permit.
    let body = read_xorb_body(&headers, body, s.config.max_xorb_bytes, &xorb).await?;
    let _permit = s.upload_permit().await?;
    let was_inserted = s.cas.put_xorb(&xorb, XorbBody::Received(body)).await?;
    Ok(json(StatusCode::OK, &WasInserted { was_inserted }))
}

pub(crate) async fn xorb_head(
    State(s): State<AppState>,
    _: ReadAccess,
    PathParams((prefix, hash)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    match s.cas.xorb_size(&xorb).await? {
        Some(n) => Ok(head_response(n)),
        None => Err(ApiError::not_found(format!("xorb {xorb} not found"))),
    }
}
