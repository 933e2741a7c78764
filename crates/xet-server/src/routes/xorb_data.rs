//! Presigned xorb data: `GET /_xorb/{prefix}/{xorb}?X-Xet-Expires=..&X-Xet-Signature=..`,
//! the URLs reconstructions hand out. The signature stands in for bearer auth.

use super::octets;
use crate::error::{ApiError, ApiResult, code};
use crate::multipart::ByteRangesWriter;
use crate::range::{RangeSpec, content_range};
use crate::state::extract::{PathParams, check_prefix, parse_hash, range_header};
use crate::state::{AppState, Shared};
use axum::body::Body;
use axum::extract::{RawQuery, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use xet_cas::{ByteRange, ChunkRange, XorbFetch};
use xet_hash::MerkleHash;

/// No `Range`: 200 with the whole chunk region. One range: 206 + `Content-Range`.
/// Several: 206 `multipart/byteranges`. Unsatisfiable: 416. Expired or forged: 403.
pub(crate) async fn xorb_data(
    State(s): State<AppState>,
    PathParams((prefix, hash)): PathParams<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    s.verify_xorb_url(&xorb, query.as_deref())?;
    let size = s
        .cas
        .xorb_size(&xorb)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("xorb {xorb} not found")))?;
    let Some((range, specs)) = range_header(&headers)? else {
        let mut r = octets(fetch(&s, xorb, ByteRange::new(0, size)).await?);
        r.headers_mut()
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        return Ok(r);
    };
    let ranges = satisfiable(&specs, s.config.max_ranges, size, &xorb)?;
    tracing::debug!(%xorb, range, satisfiable = ranges.len(), "xorb data");
    match ranges.as_slice() {
        [] => Err(ApiError::unsatisfiable(
            format!("no requested range overlaps xorb {xorb} ({size} bytes)"),
            size,
        )),
        [one] => {
            let mut r = partial(octets(fetch(&s, xorb, *one).await?));
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&content_range(one, size)).expect("ascii"),
            );
            Ok(r)
        }
        many => {
            let mut body = ByteRangesWriter::new(size);
            for r in many {
                body.part(r, &fetch(&s, xorb, *r).await?);
            }
            let content_type = HeaderValue::from_str(&body.content_type()).expect("ascii");
            let mut r = partial(Response::new(Body::from(body.finish())));
            r.headers_mut().insert(header::CONTENT_TYPE, content_type);
            Ok(r)
        }
    }
}

/// The ranges of `specs` that overlap a `size`-byte xorb, refusing more than `max` specs
/// and ranges that add up to more than the xorb (overlapping ranges could make the answer
/// many times its size).
fn satisfiable(
    specs: &[RangeSpec],
    max: usize,
    size: u64,
    xorb: &MerkleHash,
) -> ApiResult<Vec<ByteRange>> {
    if specs.len() > max {
        return Err(ApiError::bad_request(
            code::BAD_RANGE,
            format!("{} ranges; at most {max} per request", specs.len()),
        ));
    }
    let ranges: Vec<ByteRange> = specs.iter().filter_map(|r| r.resolve(size)).collect();
    if ranges.iter().map(|r| r.len()).sum::<u64>() > size {
        return Err(ApiError::bad_request(
            code::BAD_RANGE,
            format!(
                "the requested ranges overlap (they add up to more than the {size} bytes of xorb {xorb})"
            ),
        ));
    }
    Ok(ranges)
}

/// Bytes `r` of the chunk region of `xorb`.
async fn fetch(s: &Shared, xorb: MerkleHash, r: ByteRange) -> ApiResult<Bytes> {
    let fetch = XorbFetch {
        xorb,
        chunks: ChunkRange::new(0, 0),
        bytes: r,
        url: None,
    };
    Ok(s.cas.fetch_xorb_range(&fetch).await?)
}

/// `r` as a `206 Partial Content`.
fn partial(mut r: Response) -> Response {
    *r.status_mut() = StatusCode::PARTIAL_CONTENT;
    r
}
