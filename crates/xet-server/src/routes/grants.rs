//! Xorb uploads through grants: `POST /v1/xorb-grants/..` issues a signed upload URL,
//! `PUT /_grant-upload/{id}` receives the data, `POST /v1/xorb-commits/..` stores it.

use super::json;
use crate::error::{ApiError, ApiResult, code};
use crate::grants::{IssueLimits, Owner, amz_checksum_header};
use crate::sign::unix_now;
use crate::spool::Ticket;
use crate::state::AppState;
use crate::state::body::{content_length, read_body};
use crate::state::extract::{BaseUrl, PathParams, WriteAccess, check_prefix, parse_hash, shorten};
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use std::collections::BTreeMap;
use xet_cas::XorbBody;
use xet_cas::wire::{Grant, GrantRequest, WasInserted};
use xet_hash::MerkleHash;

/// A grant request is a few fields of JSON.
const GRANT_REQUEST_LIMIT: u64 = 64 * 1024;

pub(crate) async fn xorb_grant(
    State(s): State<AppState>,
    WriteAccess(caller): WriteAccess,
    BaseUrl(base): BaseUrl,
    PathParams((prefix, hash)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    let body = read_body(&headers, body, GRANT_REQUEST_LIMIT, "grant request").await?;
    let (length, crc) = grant_terms(&body, &xorb, s.config.max_xorb_bytes)?;
    if s.cas.xorb_size(&xorb).await?.is_some() {
        return Ok(json(
            StatusCode::OK,
            &WasInserted {
                was_inserted: false,
            },
        ));
    }
    let now = unix_now();
    let expires = s.url_expiry();
    // Without auth, presented tokens are not identities: everyone is one.
    let owner = match caller.token.as_deref() {
        Some(t) if s.auth.enabled() => Owner::token(t),
        _ => Owner::anonymous(),
    };
    let limits = IssueLimits {
        per_owner: s.config.max_grants_per_token,
        idle_ttl: s.config.grant_unused_ttl.as_secs(),
    };
    let ticket = Ticket { xorb, length, crc };
    s.grants.start_sweeper();
    let id = s.grants.issue(ticket, expires, now, owner, limits)?;
    let url = s.grant_url(&base, &id, expires);
    Ok(json(
        StatusCode::CREATED,
        &Grant {
            id,
            method: "PUT".to_string(),
            url,
            headers: upload_headers(length, crc),
        },
    ))
}

/// The length and CRC-64/NVME a grant request for `xorb` asks for, checked.
fn grant_terms(body: &[u8], xorb: &MerkleHash, max_xorb_bytes: u64) -> ApiResult<(u64, u64)> {
    let req: GrantRequest = serde_json::from_slice(body).map_err(|e| {
        ApiError::bad_request(
            code::BAD_REQUEST,
            format!("grant request is not valid JSON: {e}"),
        )
    })?;
    if !req.checksum.algo.eq_ignore_ascii_case("crc64nvme") {
        return Err(ApiError::bad_request(
            code::BAD_REQUEST,
            format!(
                "checksum algorithm {:?} is not supported (use crc64nvme)",
                shorten(&req.checksum.algo)
            ),
        ));
    }
    let crc: u64 = req.checksum.value.trim().parse().map_err(|_| {
        ApiError::bad_request(
            code::BAD_REQUEST,
            format!(
                "checksum value {:?} is not a decimal u64",
                shorten(&req.checksum.value)
            ),
        )
    })?;
    if req.length == 0 {
        return Err(ApiError::bad_request(
            code::INVALID_XORB,
            format!("xorb {xorb}: a grant for 0 bytes"),
        ));
    }
    if req.length > max_xorb_bytes {
        return Err(ApiError::too_large("xorb", max_xorb_bytes));
    }
    Ok((req.length, crc))
}

/// The headers the client must send with the upload (checked by [`grant_upload`]).
fn upload_headers(length: u64, crc: u64) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            "Content-Type".to_string(),
            "application/octet-stream".to_string(),
        ),
        ("Content-Length".to_string(), length.to_string()),
        (
            "x-amz-checksum-crc64nvme".to_string(),
            amz_checksum_header(crc),
        ),
    ])
}

/// `PUT /_grant-upload/{id}?...`: no bearer auth, the URL is signed.
pub(crate) async fn grant_upload(
    State(s): State<AppState>,
    PathParams(id): PathParams<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let now = unix_now();
    s.verify_grant_url(&id, query.as_deref(), now)?;
    let (ticket, guard) = s.grants.begin_upload(&id, now)?;
    check_upload_headers(&ticket, &headers)?;
    let data = s
        .grants
        .receive(&ticket, body, s.config.grant_spill_limit)
        .await?;
    guard.complete(data)?;
    Ok(StatusCode::OK.into_response())
}

/// Refuse an upload whose declared length or checksum differs from its grant's, before
/// reading any of it.
fn check_upload_headers(ticket: &Ticket, headers: &HeaderMap) -> ApiResult<()> {
    if let Some(n) = content_length(headers).filter(|&n| n != ticket.length) {
        return Err(ApiError::bad_request(
            code::LENGTH_MISMATCH,
            format!(
                "upload for xorb {} declares {n} bytes but the grant is for {}",
                ticket.xorb, ticket.length
            ),
        ));
    }
    let want = amz_checksum_header(ticket.crc);
    for v in headers.get_all("x-amz-checksum-crc64nvme") {
        if v.as_bytes() != want.as_bytes() {
            return Err(ApiError::bad_request(
                code::CHECKSUM_MISMATCH,
                format!(
                    "x-amz-checksum-crc64nvme of the upload for xorb {} does not match the grant",
                    ticket.xorb
                ),
            ));
        }
    }
    Ok(())
}

pub(crate) async fn xorb_commit(
    State(s): State<AppState>,
    _: WriteAccess,
    PathParams((prefix, hash, id)): PathParams<(String, String, String)>,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    // The data stays with the grant until the store has it: a failed put (or a cancelled
    // request) gives it back, so a retried commit can succeed.
    let held = s.grants.begin_commit(&id, &xorb)?;
    let _permit = s.upload_permit().await?;
    let data = held.xorb().await?;
    match s.cas.put_xorb(&xorb, XorbBody::Received(data)).await {
        Ok(was_inserted) => {
            held.done();
            Ok(json(StatusCode::OK, &WasInserted { was_inserted }))
        }
        Err(e) => {
            let e = ApiError::from(e);
            if e.status.is_client_error() {
                // Refused for good (invalid xorb): retrying cannot help.
                held.done();
            }
            Err(e)
        }
    }
}
