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

/// The object a xorb URL names is the stored xorb: its chunk region (where the
/// reconstruction's byte ranges point), then its footer and `info_length`, so a client
/// can check the chunks of a range against the xorb hash after asking for the end
/// (`bytes=-N`).
///
/// No `Range`: 200 with the whole object. One range: 206 + `Content-Range`.
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
    let object = StoredXorb::open(&s, xorb).await?;
    let size = object.len();
    let Some((range, specs)) = range_header(&headers)? else {
        let mut r = octets(object.read(&s, ByteRange::new(0, size)).await?);
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
            let mut r = partial(octets(object.read(&s, *one).await?));
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&content_range(one, size)).expect("ascii"),
            );
            Ok(r)
        }
        many => {
            let mut body = ByteRangesWriter::new(size);
            for r in many {
                body.part(r, &object.read(&s, *r).await?);
            }
            let content_type = HeaderValue::from_str(&body.content_type()).expect("ascii");
            let mut r = partial(Response::new(Body::from(body.finish())));
            r.headers_mut().insert(header::CONTENT_TYPE, content_type);
            Ok(r)
        }
    }
}

/// A stored xorb as its URL serves it: the chunk region, read from the CAS range by
/// range, then the footer and `info_length` (where the CAS gives them).
struct StoredXorb {
    xorb: MerkleHash,
    region: u64,
    tail: Bytes,
}

impl StoredXorb {
    /// The footer comes from the CAS; one that gives none has the chunk region served
    /// alone (every range a reconstruction lists is in it).
    async fn open(s: &Shared, xorb: MerkleHash) -> ApiResult<Self> {
        let not_found = || ApiError::not_found(format!("xorb {xorb} not found"));
        let region = s.cas.xorb_size(&xorb).await?.ok_or_else(not_found)?;
        let footer = s.cas.xorb_footer(&whole(xorb, region)).await?;
        Ok(Self {
            xorb,
            region,
            tail: footer.map_or_else(Bytes::new, |f| Bytes::from(f.to_bytes())),
        })
    }

    fn len(&self) -> u64 {
        self.region + self.tail.len() as u64
    }

    /// Bytes `r` (within [`Self::len`]).
    async fn read(&self, s: &Shared, r: ByteRange) -> ApiResult<Bytes> {
        let in_tail = |a: u64, b: u64| {
            self.tail
                .slice((a - self.region) as usize..(b - self.region) as usize)
        };
        if r.start >= self.region {
            return Ok(in_tail(r.start, r.end));
        }
        let head = fetch(
            s,
            self.xorb,
            ByteRange::new(r.start, r.end.min(self.region)),
        )
        .await?;
        if r.end <= self.region {
            return Ok(head);
        }
        let mut both = bytes::BytesMut::with_capacity(r.len() as usize);
        both.extend_from_slice(&head);
        both.extend_from_slice(&in_tail(self.region, r.end));
        Ok(both.freeze())
    }
}

fn whole(xorb: MerkleHash, region: u64) -> XorbFetch {
    XorbFetch {
        xorb,
        chunks: ChunkRange::new(0, 0),
        bytes: ByteRange::new(0, region),
        url: None,
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
