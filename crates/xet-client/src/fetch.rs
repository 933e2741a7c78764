//! Xorb ranges from presigned URLs: the GET and the checks of its answer, shared by
//! whole-range fetches (here) and streamed ones (`stream`).

use bytes::Bytes;
use reqwest::header::{CONTENT_RANGE, HeaderName, RANGE};
use reqwest::{Method, Response, StatusCode};
use xet_cas::{ByteRange, CasError, ObjectKind, Result, XorbFetch};
use xet_hash::MerkleHash;

use crate::transport::{Fail, Progress, Rejection, Transport};
use crate::{HttpCas, redact_url, util};

/// A presigned GET's answer that passed the status and header checks.
pub(crate) enum RangeAnswer {
    /// The body is exactly the asked-for bytes (206, or a 200 of that length).
    Body(Response),
    /// The server ignored `Range` and sent more: the asked-for bytes, cut out of it.
    Whole(Bytes),
}

impl HttpCas {
    /// [`xet_cas::Cas::fetch_xorb_range`]: the whole range in one buffer.
    pub(crate) async fn fetch_range(&self, fetch: &XorbFetch) -> Result<Bytes> {
        if fetch.bytes.is_empty() {
            return Ok(Bytes::new());
        }
        let url = fetch.url.as_deref().ok_or_else(|| no_url(fetch))?;
        let what = Self::fetch_what(fetch, url);
        let want = fetch.bytes.len();
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                match self
                    .open_range(&fetch.xorb, url, fetch.bytes, &what, &p)
                    .await?
                {
                    RangeAnswer::Whole(b) => Ok(b),
                    RangeAnswer::Body(resp) => {
                        let body = self.t.read_body(resp, &what, &p).await?;
                        exact_length(body, want, &what)
                    }
                }
            })
            .await
    }

    /// Send the presigned GET for bytes `range` of `xorb` at `url` and check what comes
    /// back (status, `Content-Range`, length) before any of the body is read.
    pub(crate) async fn open_range(
        &self,
        xorb: &MerkleHash,
        url: &str,
        range: ByteRange,
        what: &str,
        p: &Progress,
    ) -> std::result::Result<RangeAnswer, Fail> {
        let header = util::range_header(&range).expect("non-empty range");
        let rb = self.t.external(Method::GET, url).header(RANGE, &header);
        let resp = self.t.send(rb, what, p).await?;
        let status = resp.status();
        if !status.is_success() {
            let rej = self.t.rejection(resp, p).await;
            return Err(fetch_rejection(xorb, rej, what));
        }
        let want = range.len();
        let length = Transport::content_length(&resp);
        if status == StatusCode::PARTIAL_CONTENT {
            let from = header_str(&resp, CONTENT_RANGE)
                .as_deref()
                .and_then(util::parse_content_range)
                .map(|(a, _, _)| a);
            if let Some(a) = from.filter(|&a| a != range.start) {
                return Err(corrupt(
                    what,
                    format!("asked for bytes from {}, got from {a}", range.start),
                ));
            }
            if let Some(n) = length.filter(|&n| n != want) {
                return Err(corrupt(
                    what,
                    format!(
                        "asked for {want} bytes, the answer has {n}; \
                         the range may lie past the end of the xorb"
                    ),
                ));
            }
            return Ok(RangeAnswer::Body(resp));
        }
        // 200: exactly the range, or the whole object (the server ignored Range).
        if length == Some(want) {
            return Ok(RangeAnswer::Body(resp));
        }
        let body = self.t.read_body(resp, what, p).await?;
        if body.len() as u64 == want {
            Ok(RangeAnswer::Whole(body))
        } else if body.len() as u64 >= range.end {
            Ok(RangeAnswer::Whole(
                body.slice(range.start as usize..range.end as usize),
            ))
        } else {
            Err(corrupt(
                what,
                format!(
                    "asked for bytes {}..{}, got a {} answer of {} bytes",
                    range.start,
                    range.end,
                    status.as_u16(),
                    body.len()
                ),
            ))
        }
    }

    /// How a fetch is named in errors and logs (the URL without its signature).
    pub(crate) fn fetch_what(fetch: &XorbFetch, url: &str) -> String {
        format!(
            "GET {} (xorb {} bytes {}..{})",
            redact_url(url),
            fetch.xorb,
            fetch.bytes.start,
            fetch.bytes.end
        )
    }
}

fn corrupt(what: &str, message: String) -> Fail {
    Fail::Fatal(CasError::corrupt(what, message))
}

/// A body read to its end must be the `want` bytes asked for: a short one means the
/// range went past the end of the xorb, which a retry would not change.
fn exact_length(body: Bytes, want: u64, what: &str) -> std::result::Result<Bytes, Fail> {
    if body.len() as u64 != want {
        return Err(corrupt(
            what,
            format!(
                "asked for {want} bytes, got {}; the range may lie past the end of the xorb",
                body.len()
            ),
        ));
    }
    Ok(body)
}

/// Classifies a failed presigned GET.
fn fetch_rejection(xorb: &MerkleHash, rej: Rejection, what: &str) -> Fail {
    match rej.status {
        403 => Fail::Fatal(CasError::UrlExpired { hash: *xorb }),
        404 => Fail::Fatal(CasError::NotFound {
            kind: ObjectKind::Xorb,
            hash: *xorb,
        }),
        416 => Fail::Fatal(CasError::Server {
            status: 416,
            what: what.to_string(),
            message: format!("{}; the range lies past the end of the xorb", rej.reason()),
        }),
        // A 401 here is not about our token (none is sent): the URL is unusable.
        401 => Fail::Fatal(CasError::UrlExpired { hash: *xorb }),
        _ => rej.into_fail(what),
    }
}

fn header_str(resp: &Response, name: HeaderName) -> Option<String> {
    resp.headers()
        .get(name)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

pub(crate) fn no_url(f: &XorbFetch) -> CasError {
    CasError::corrupt(
        format!("fetch of xorb {}", f.xorb),
        "the reconstruction gave no URL for it; ask the HTTP CAS for the reconstruction",
    )
}
