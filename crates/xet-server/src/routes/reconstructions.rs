//! File reconstructions (`GET /v1|v2/reconstructions/{file}`, the v1 batch) and file
//! existence checks (`HEAD /v1/files/{file}`). v1, v2 and batch answers are one
//! [`Reconstruction`] from [`reconstruct`], told apart only by their wire form.

use super::{head_response, json};
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult, code};
use crate::range::RangeSpec;
use crate::sign::query_pairs;
use crate::state::access::can_read_file;
use crate::state::extract::{BaseUrl, PathParams, ReadAccess, parse_hash, range_header};
use crate::state::{AppState, Shared};
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::Response;
use std::collections::BTreeMap;
use xet_cas::wire::{BatchReconstructionV1, FetchInfoV1};
use xet_cas::{Reconstruction, XorbFetch};
use xet_hash::MerkleHash;

/// The wire form of a single-file reconstruction answer.
#[derive(Debug, Clone, Copy)]
enum Form {
    V1,
    V2,
}

pub(crate) async fn reconstruction_v1(
    State(s): State<AppState>,
    ReadAccess(caller): ReadAccess,
    BaseUrl(base): BaseUrl,
    PathParams(hash): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    reconstruction(Form::V1, &s, &caller, &base, &hash, &headers).await
}

pub(crate) async fn reconstruction_v2(
    State(s): State<AppState>,
    ReadAccess(caller): ReadAccess,
    BaseUrl(base): BaseUrl,
    PathParams(hash): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    reconstruction(Form::V2, &s, &caller, &base, &hash, &headers).await
}

/// File `hash` (or the bytes its `Range` header asks for), in `form`.
async fn reconstruction(
    form: Form,
    s: &Shared,
    caller: &Caller,
    base: &str,
    hash: &str,
    headers: &HeaderMap,
) -> ApiResult<Response> {
    let file = parse_hash("file", hash)?;
    readable(s, caller, &file).await?;
    let rec = reconstruct(s, &file, single_range(headers)?).await?;
    let url = presigner(s, base);
    Ok(match form {
        Form::V1 => json(StatusCode::OK, &rec.to_v1(url)),
        Form::V2 => json(StatusCode::OK, &rec.to_v2(url)),
    })
}

/// `GET /v1/reconstructions?file_id=a&file_id=b`: whole files. Unknown files are left
/// out of `files`; a malformed id is a 400.
pub(crate) async fn reconstruction_batch(
    State(s): State<AppState>,
    ReadAccess(caller): ReadAccess,
    BaseUrl(base): BaseUrl,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let ids = batch_ids(query.as_deref().unwrap_or(""), s.config.max_batch_files)?;
    // One expiry for the whole answer, as for a single file.
    let url = presigner(&s, &base);
    let mut out = BatchReconstructionV1 {
        files: BTreeMap::new(),
        fetch_info: BTreeMap::new(),
    };
    for file in ids {
        if out.files.contains_key(&file.to_string()) {
            continue;
        }
        let rec = match readable(&s, &caller, &file).await {
            Ok(()) => reconstruct(&s, &file, None).await,
            Err(e) => Err(e),
        };
        let rec = match rec {
            Ok(r) => r,
            Err(e) if e.status == StatusCode::NOT_FOUND => continue,
            Err(e) => return Err(e),
        };
        let v1 = rec.to_v1(&url);
        out.files.insert(file.to_string(), v1.terms);
        for (xorb, list) in v1.fetch_info {
            merge_fetch_info(out.fetch_info.entry(xorb).or_default(), list);
        }
    }
    Ok(json(StatusCode::OK, &out))
}

/// The `file_id`s of a batch query, at least one and at most `max`.
fn batch_ids(query: &str, max: usize) -> ApiResult<Vec<MerkleHash>> {
    let mut ids = Vec::new();
    for (k, v) in query_pairs(query) {
        if k == "file_id" {
            ids.push(parse_hash("file", v)?);
        }
    }
    if ids.is_empty() {
        return Err(ApiError::bad_request(code::BAD_REQUEST, "no file_id given"));
    }
    if ids.len() > max {
        return Err(ApiError::bad_request(
            code::BAD_REQUEST,
            format!("{} file_ids; at most {max} per request", ids.len()),
        ));
    }
    Ok(ids)
}

/// Add `more` fetches of one xorb to `into`, leaving out those it already has (files
/// of a batch often share xorb ranges).
fn merge_fetch_info(into: &mut Vec<FetchInfoV1>, more: Vec<FetchInfoV1>) {
    for f in more {
        if !into
            .iter()
            .any(|e| e.range == f.range && e.url_range == f.url_range)
        {
            into.push(f);
        }
    }
}

/// Presigned data URLs for the fetches of an answer, on the server at `base`, all
/// expiring together.
fn presigner<'a>(s: &'a Shared, base: &'a str) -> impl Fn(&XorbFetch) -> String + 'a {
    let expires = s.url_expiry();
    move |f| s.xorb_url(base, &f.xorb, expires)
}

/// The one byte range of a `Range` header, if any.
fn single_range(headers: &HeaderMap) -> ApiResult<Option<RangeSpec>> {
    let Some((_, specs)) = range_header(headers)? else {
        return Ok(None);
    };
    match specs.as_slice() {
        [one] => Ok(Some(*one)),
        _ => Err(ApiError::bad_request(
            code::BAD_RANGE,
            "reconstructions take a single byte range",
        )),
    }
}

/// `Ok` if `caller` may read `file`, else the answer a missing file gets (404): a
/// caller learns nothing of files it may not read, not even that they exist.
async fn readable(s: &Shared, caller: &Caller, file: &MerkleHash) -> ApiResult<()> {
    if can_read_file(s, caller, file).await? {
        Ok(())
    } else {
        Err(ApiError::not_found(format!("file {file} not found")))
    }
}

/// The reconstruction of `file`, or of the bytes `range` selects (416 if none). A range
/// covering the whole file is asked of the store as the whole file. The empty file (hash
/// zero) is 0 bytes without being registered, so every range of it is a 416 (`bytes */0`).
async fn reconstruct(
    s: &Shared,
    file: &MerkleHash,
    range: Option<RangeSpec>,
) -> ApiResult<Reconstruction> {
    let size = if file.is_zero() {
        0
    } else {
        s.cas
            .file_size(file)
            .await?
            .ok_or_else(|| ApiError::not_found(format!("file {file} not found")))?
    };
    let range = match range {
        None => None,
        Some(spec) => match spec.resolve(size) {
            None => {
                return Err(ApiError::unsatisfiable(
                    format!(
                        "range starts at byte {} but file {file} is {size} bytes",
                        spec.start()
                    ),
                    size,
                ));
            }
            Some(r) if r.start == 0 && r.end == size => None,
            Some(r) => Some(r),
        },
    };
    Ok(s.cas.reconstruction(file, range).await?)
}

pub(crate) async fn file_head(
    State(s): State<AppState>,
    ReadAccess(caller): ReadAccess,
    PathParams(hash): PathParams<String>,
) -> ApiResult<Response> {
    let file = parse_hash("file", &hash)?;
    if file.is_zero() {
        return Ok(head_response(0));
    }
    readable(&s, &caller, &file).await?;
    match s.cas.file_size(&file).await? {
        Some(n) => Ok(head_response(n)),
        None => Err(ApiError::not_found(format!("file {file} not found"))),
    }
}
