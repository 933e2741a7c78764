//! File reconstructions: `/v2/reconstructions`, or `/v1/reconstructions` on servers
//! without it.

use std::sync::atomic::Ordering;

use reqwest::Method;
use reqwest::header::{CONTENT_RANGE, RANGE};
use xet_cas::wire::{ReconstructionV1, ReconstructionV2, WireError};
use xet_cas::{ByteRange, Cas, CasError, ObjectKind, Reconstruction, Result, routes};
use xet_hash::MerkleHash;

use crate::transport::{Fail, Progress, Rejection};
use crate::{HttpCas, util};

impl HttpCas {
    /// Whether `/v2/reconstructions` is known to be missing on this server.
    pub fn lacks_v2_reconstructions(&self) -> bool {
        self.state.no_v2_reconstructions.load(Ordering::Relaxed)
    }

    /// [`Cas::reconstruction`]: the cases with no HTTP form answered here, the rest asked
    /// of the server.
    pub(crate) async fn reconstruct(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction> {
        // The empty file is answered here, as `xet serve` answers it (200 with no terms
        // without a range, 416 `bytes */0` with any), whatever the server.
        if file.is_zero() {
            return xet_cas::empty_file_reconstruction(range);
        }
        if let Some(r) = range.filter(ByteRange::is_empty) {
            return self.empty_range(file, r).await;
        }
        self.reconstruction_any(file, range.as_ref()).await
    }

    /// An empty range has no `Range` header; of a file that exists it is empty if it
    /// starts inside the file, unsatisfiable (as any range) if it starts at or past the end.
    async fn empty_range(&self, file: &MerkleHash, r: ByteRange) -> Result<Reconstruction> {
        match self.file_size(file).await? {
            None => Err(CasError::NotFound {
                kind: ObjectKind::File,
                hash: *file,
            }),
            Some(size) if r.start >= size => Err(CasError::RangeNotSatisfiable {
                file: *file,
                start: r.start,
                size,
            }),
            Some(_) => Ok(Reconstruction::default()),
        }
    }

    /// v2 first (unless known missing or switched off), then v1. v2 is remembered as
    /// missing once v1 answers in its place, or when v2 said 501; a 404 from both routes
    /// is a missing file, which says nothing about the routes.
    async fn reconstruction_any(
        &self,
        file: &MerkleHash,
        range: Option<&ByteRange>,
    ) -> Result<Reconstruction> {
        let mut v2_status = None;
        if !self.t.cfg.legacy.v1_reconstructions && !self.lacks_v2_reconstructions() {
            match self.reconstruction_at(file, range, true).await? {
                Ok(r) => return Ok(r),
                Err(status) => v2_status = Some(status),
            }
        }
        match self.reconstruction_at(file, range, false).await? {
            Ok(r) => {
                if v2_status.is_some() {
                    tracing::debug!(
                        "no /v2/reconstructions on the server: using /v1/reconstructions"
                    );
                    self.state
                        .no_v2_reconstructions
                        .store(true, Ordering::Relaxed);
                }
                Ok(r)
            }
            Err(501) => Err(CasError::Server {
                status: 501,
                what: format!("GET {}", routes::reconstruction_v1(file)),
                message: "the server serves no reconstructions: check the endpoint URL".into(),
            }),
            Err(_) => {
                if v2_status == Some(501) {
                    self.state
                        .no_v2_reconstructions
                        .store(true, Ordering::Relaxed);
                }
                Err(CasError::NotFound {
                    kind: ObjectKind::File,
                    hash: *file,
                })
            }
        }
    }

    /// One route's answer: `Ok(Ok(r))`, or `Ok(Err(status))` when it answered 404 or 501
    /// (the caller tells a missing route from a missing file). Other failures are `Err`.
    async fn reconstruction_at(
        &self,
        file: &MerkleHash,
        range: Option<&ByteRange>,
        v2: bool,
    ) -> Result<std::result::Result<Reconstruction, u16>> {
        let path = if v2 {
            routes::reconstruction_v2(file)
        } else {
            routes::reconstruction_v1(file)
        };
        let what = format!("GET {path}");
        let header = range.and_then(util::range_header);
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let mut rb = self.t.cas(Method::GET, &path).await?;
                if let Some(h) = &header {
                    rb = rb.header(RANGE, h);
                }
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    let body = self.t.read_body(resp, &what, &p).await?;
                    return parse_reconstruction(&body, v2, &what).map(Ok);
                }
                let rej = self.t.rejection(resp, &p).await;
                match rej.status {
                    404 | 501 => Ok(Err(rej.status)),
                    416 => Err(unsatisfiable(&rej, file, range)),
                    _ => Err(rej.into_fail(&what)),
                }
            })
            .await
    }
}

/// A reconstruction answer, checked to have a fetch for every term: one without would
/// only fail later, at download.
fn parse_reconstruction(
    body: &[u8],
    v2: bool,
    what: &str,
) -> std::result::Result<Reconstruction, Fail> {
    type Cause = Box<dyn std::error::Error + Send + Sync>;
    let wire = |e: WireError| Cause::from(e);
    let parsed = if v2 {
        serde_json::from_slice::<ReconstructionV2>(body)
            .map_err(Cause::from)
            .and_then(|w| Reconstruction::from_v2(&w).map_err(wire))
    } else {
        serde_json::from_slice::<ReconstructionV1>(body)
            .map_err(Cause::from)
            .and_then(|w| Reconstruction::from_v1(&w).map_err(wire))
    };
    let r = parsed.map_err(|e| {
        Fail::Fatal(CasError::Corrupt {
            what: what.to_string(),
            message: "bad reconstruction".into(),
            source: Some(xet_cas::Cause::from_boxed(e)),
        })
    })?;
    if let Some(t) = r.terms.iter().find(|t| r.fetch_for(t).is_none()) {
        let message = format!(
            "no fetch covers chunks {}..{} of xorb {}",
            t.chunks.start, t.chunks.end, t.xorb
        );
        return Err(Fail::Fatal(CasError::corrupt(what, message)));
    }
    Ok(r)
}

/// A 416: the file's size comes from `Content-Range: bytes */N` (0 when absent).
fn unsatisfiable(rej: &Rejection, file: &MerkleHash, range: Option<&ByteRange>) -> Fail {
    let size = rej
        .headers
        .get(CONTENT_RANGE)
        .and_then(|v| v.to_str().ok())
        .and_then(util::parse_unsatisfied_range)
        .unwrap_or(0);
    Fail::Fatal(CasError::RangeNotSatisfiable {
        file: *file,
        start: range.map(|r| r.start).unwrap_or(0),
        size,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use reqwest::header::{HeaderMap, HeaderValue};

    fn rejection_416(content_range: &str) -> Rejection {
        let mut headers = HeaderMap::new();
        headers.insert(CONTENT_RANGE, HeaderValue::from_str(content_range).unwrap());
        Rejection {
            status: 416,
            body: bytes::Bytes::new(),
            headers,
            retry_after: None,
        }
    }

    /// The server's 416 for the empty file (`bytes */0`) and for a range past the end
    /// of another file are the same `RangeNotSatisfiable` the stores give.
    #[test]
    fn a_416_is_range_not_satisfiable() {
        let f = MerkleHash::ZERO;
        for r in [
            ByteRange::new(0, 1),
            ByteRange::new(0, u64::MAX),
            ByteRange::new(5, 10),
        ] {
            match unsatisfiable(&rejection_416("bytes */0"), &f, Some(&r)) {
                Fail::Fatal(e) => assert!(
                    matches!(
                        e,
                        CasError::RangeNotSatisfiable { file, start, size: 0 }
                            if file == f && start == r.start
                    ),
                    "{e:?}"
                ),
                Fail::Retry { err, .. } => panic!("retried: {err:?}"),
            }
        }
        let g = xet_hash::chunk_hash(b"a file");
        match unsatisfiable(
            &rejection_416("bytes */1234"),
            &g,
            Some(&ByteRange::new(2000, 2010)),
        ) {
            Fail::Fatal(e) => assert!(
                matches!(
                    e,
                    CasError::RangeNotSatisfiable { file, start: 2000, size: 1234 } if file == g
                ),
                "{e:?}"
            ),
            Fail::Retry { err, .. } => panic!("retried: {err:?}"),
        }
    }
}
