//! Xorb uploads: through an upload grant (send the body to the grant's URL, then
//! commit), or with `POST /v1/xorbs` on servers that hand out no grants, and for a xorb
//! whose grant (or grant upload) the server refuses for capacity (`503 grant_capacity`).

use std::sync::Arc;

use reqwest::Method;
use reqwest::header::{CONTENT_LENGTH, HeaderName, HeaderValue};
use xet_cas::wire::{Checksum, Grant, GrantRequest, WasInserted};
use xet_cas::{CasError, Refusal, Result, XorbPieces, routes};
use xet_hash::MerkleHash;

use crate::transport::{Fail, Progress, Rejection, progress_pieces};
use crate::{HttpCas, redact_url};

/// At most this many grants are requested for one xorb (`client.max_xorb_grant_attempts`).
pub const MAX_GRANTS_PER_XORB: u32 = 3;

/// The error code of a `503` refusing a grant (or a grant upload) for capacity: the
/// xorb is then uploaded with `POST /v1/xorbs`.
pub const GRANT_CAPACITY: &str = "grant_capacity";

enum GrantAnswer {
    Grant(Grant),
    Exists,
    Unsupported,
    /// No room for a grant now (`503 grant_capacity`).
    Full(String),
}

enum GrantUpload {
    Done,
    Rejected {
        status: u16,
        reason: String,
    },
    /// No room for the data now (`503 grant_capacity`).
    Full(String),
}

enum Commit {
    Done(bool),
    NoData(String),
}

/// What a grant asks to be sent with the body.
type GrantHeaders = Vec<(HeaderName, HeaderValue)>;

impl HttpCas {
    /// `Ok(true)` when the xorb was new. Grants first, unless the legacy switch asks for
    /// direct uploads or the server has no grant route.
    pub(crate) async fn upload_xorb(&self, hash: &MerkleHash, body: XorbPieces) -> Result<bool> {
        if self.t.cfg.legacy.direct_xorb_upload {
            return self.put_xorb_direct(hash, body).await;
        }
        let crc = body.crc64_nvme();
        let mut last = (0u16, String::new());
        for n in 1..=MAX_GRANTS_PER_XORB {
            let grant = match self.request_grant(hash, body.len(), crc).await? {
                GrantAnswer::Exists => return Ok(false),
                GrantAnswer::Unsupported => {
                    tracing::debug!(
                        %hash,
                        "no upload grants (404): uploading the xorb directly"
                    );
                    return self.put_xorb_direct(hash, body).await;
                }
                GrantAnswer::Full(reason) => {
                    tracing::debug!(
                        %hash, %reason,
                        "no room for a grant: uploading the xorb directly"
                    );
                    return self.put_xorb_direct(hash, body).await;
                }
                GrantAnswer::Grant(g) => g,
            };
            match self.upload_to_grant(hash, &grant, &body).await? {
                GrantUpload::Done => {}
                GrantUpload::Full(reason) => {
                    tracing::debug!(
                        %hash, grant = %grant.id, %reason,
                        "no room for the grant's data: uploading the xorb directly"
                    );
                    return self.put_xorb_direct(hash, body).await;
                }
                GrantUpload::Rejected { status, reason } => {
                    tracing::debug!(
                        %hash, grant = %grant.id, attempt = n, status,
                        "grant upload refused: new grant"
                    );
                    last = (
                        status,
                        format!("the upload URL answered {status}: {reason}"),
                    );
                    continue;
                }
            }
            match self.commit_grant(hash, &grant.id).await? {
                Commit::Done(inserted) => return Ok(inserted),
                Commit::NoData(reason) => {
                    tracing::debug!(
                        %hash, grant = %grant.id, attempt = n,
                        "commit found no data: new grant"
                    );
                    last = (404, format!("the commit found no uploaded data: {reason}"));
                }
            }
        }
        Err(CasError::Server {
            status: last.0,
            what: format!("upload of xorb {hash}"),
            message: format!(
                "{MAX_GRANTS_PER_XORB} upload grants in a row failed (last: {}); retry later",
                last.1
            ),
        })
    }

    async fn request_grant(&self, hash: &MerkleHash, len: u64, crc: u64) -> Result<GrantAnswer> {
        let path = routes::xorb_grant(hash);
        let what = format!("POST {path}");
        let req = GrantRequest {
            length: len,
            checksum: Checksum {
                algo: "crc64nvme".into(),
                value: crc.to_string(),
            },
        };
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self.t.cas(Method::POST, &path).await?.json(&req);
                let resp = self.t.send(rb, &what, &p).await?;
                let status = resp.status().as_u16();
                match status {
                    200..=299 => {
                        let body = self.t.read_body(resp, &what, &p).await?;
                        grant_answer(status, &body, &what)
                    }
                    404 => {
                        let _ = self.t.rejection(resp, &p).await;
                        Ok(GrantAnswer::Unsupported)
                    }
                    _ => {
                        let rej = self.t.rejection(resp, &p).await;
                        if let Some(reason) = capacity_refusal(&rej) {
                            return Ok(GrantAnswer::Full(reason));
                        }
                        Err(xorb_rejection(hash, rej, &what))
                    }
                }
            })
            .await
    }

    async fn upload_to_grant(
        &self,
        hash: &MerkleHash,
        grant: &Grant,
        body: &XorbPieces,
    ) -> Result<GrantUpload> {
        let what = format!(
            "{} {} (grant {} for xorb {hash})",
            grant.method,
            redact_url(&grant.url),
            grant.id
        );
        let (method, headers) = grant_request(grant, body.len(), &what)?;
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let mut rb = self.t.external(method.clone(), &grant.url);
                for (k, v) in &headers {
                    rb = rb.header(k, v);
                }
                let rb = rb
                    .header(CONTENT_LENGTH, body.len())
                    .body(progress_pieces(body.pieces().to_vec(), p.clone()));
                let resp = self.t.send(rb, &what, &p).await?;
                let status = resp.status().as_u16();
                if resp.status().is_success() {
                    self.t.read_body(resp, &what, &p).await?;
                    return Ok(GrantUpload::Done);
                }
                let rej = self.t.rejection(resp, &p).await;
                if let Some(reason) = capacity_refusal(&rej) {
                    return Ok(GrantUpload::Full(reason));
                }
                match status {
                    // The object is already at the grant's URL.
                    412 => Ok(GrantUpload::Done),
                    // Expired or refused grant: ask for a new one.
                    403 => Ok(GrantUpload::Rejected {
                        status,
                        reason: rej.reason(),
                    }),
                    400 | 413 | 422 => Err(Fail::Fatal(CasError::invalid_xorb(
                        *hash,
                        Refusal(rej.reason()),
                    ))),
                    _ => Err(rej.into_fail(&what)),
                }
            })
            .await
    }

    async fn commit_grant(&self, hash: &MerkleHash, id: &str) -> Result<Commit> {
        let path = routes::xorb_commit(hash, id);
        let what = format!("POST {path}");
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let rb = self.t.cas(Method::POST, &path).await?.body(Vec::new());
                let resp = self.t.send(rb, &what, &p).await?;
                if resp.status().is_success() {
                    let body = self.t.read_body(resp, &what, &p).await?;
                    // The body is ignored by the reference; ours says whether it was new.
                    let inserted = serde_json::from_slice::<WasInserted>(&body)
                        .map(|w| w.was_inserted)
                        .unwrap_or(true);
                    return Ok(Commit::Done(inserted));
                }
                let rej = self.t.rejection(resp, &p).await;
                match rej.status {
                    404 => Ok(Commit::NoData(rej.reason())),
                    _ => Err(xorb_rejection(hash, rej, &what)),
                }
            })
            .await
    }

    async fn put_xorb_direct(&self, hash: &MerkleHash, body: XorbPieces) -> Result<bool> {
        let path = routes::xorb(hash);
        let route = DirectRoute {
            path: &path,
            shape: r#"{"was_inserted": bool}"#,
            lacks: "accepts neither upload grants nor direct xorb uploads",
        };
        self.post_direct(
            &route,
            body.len(),
            |p| progress_pieces(body.pieces().to_vec(), p),
            |rej, what| xorb_rejection(hash, rej, what),
            |b| serde_json::from_slice::<WasInserted>(b).map(|w| w.was_inserted),
        )
        .await
    }

    /// One attempt of an upload: `POST path` with a `len`-byte `body` (counting its
    /// progress in `p`), and the answer: a success, its body not read yet, or the refusal.
    pub(crate) async fn post_upload(
        &self,
        path: &str,
        what: &str,
        len: u64,
        body: reqwest::Body,
        p: &Progress,
    ) -> std::result::Result<Posted, Fail> {
        let rb = self
            .t
            .cas(Method::POST, path)
            .await?
            .header(CONTENT_LENGTH, len)
            .body(body);
        let resp = self.t.send(rb, what, p).await?;
        if resp.status().is_success() {
            Ok(Posted::Accepted(resp))
        } else {
            Ok(Posted::Refused(self.t.rejection(resp, p).await))
        }
    }

    /// A direct upload to `route` (the last route tried), retried: a `len`-byte body that
    /// `body` makes for each attempt, and what `answer` reads from the success's JSON. A
    /// 404 means the server takes this upload by no route at all; other refusals go to
    /// `refused`.
    pub(crate) async fn post_direct<T>(
        &self,
        route: &DirectRoute<'_>,
        len: u64,
        body: impl Fn(Arc<Progress>) -> reqwest::Body,
        refused: impl Fn(Rejection, &str) -> Fail,
        answer: impl Fn(&[u8]) -> serde_json::Result<T>,
    ) -> Result<T> {
        let what = format!("POST {}", route.path);
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let posted = self
                    .post_upload(route.path, &what, len, body(p.clone()), &p)
                    .await?;
                match posted {
                    Posted::Accepted(resp) => {
                        let b = self.t.read_body(resp, &what, &p).await?;
                        answer(&b).map_err(|e| {
                            Fail::Fatal(CasError::corrupt_with(
                                what.clone(),
                                format!("expected {}", route.shape),
                                e,
                            ))
                        })
                    }
                    Posted::Refused(rej) if rej.status == 404 => {
                        Err(Fail::Fatal(CasError::Server {
                            status: 404,
                            what: what.clone(),
                            message: format!(
                                "{}; the server {}: check the endpoint URL",
                                rej.reason(),
                                route.lacks
                            ),
                        }))
                    }
                    Posted::Refused(rej) => Err(refused(rej, &what)),
                }
            })
            .await
    }
}

/// What an upload `POST` was answered with.
pub(crate) enum Posted {
    /// A success, its body not read yet.
    Accepted(reqwest::Response),
    Refused(Rejection),
}

/// A direct upload route (`/v1/xorbs/{hash}`, `/v1/shards`) and how to read its answers.
pub(crate) struct DirectRoute<'a> {
    pub path: &'a str,
    /// The JSON a success answers with (named when it answers something else).
    pub shape: &'static str,
    /// What the server lacks when it answers 404 here.
    pub lacks: &'static str,
}

/// A 2xx answer to a grant request: 200 means the xorb is stored already.
fn grant_answer(status: u16, body: &[u8], what: &str) -> std::result::Result<GrantAnswer, Fail> {
    if status == 200 {
        return Ok(GrantAnswer::Exists);
    }
    match serde_json::from_slice::<Grant>(body) {
        Ok(g) => Ok(GrantAnswer::Grant(g)),
        Err(_) if status != 201 => Ok(GrantAnswer::Exists),
        Err(e) => Err(Fail::Fatal(CasError::corrupt_with(
            what,
            "the grant is not {\"id\",\"method\",\"url\",\"headers\"}",
            e,
        ))),
    }
}

/// The grant's method and headers, checked before anything is sent: a grant that
/// cannot be followed is corrupt, and retrying it would not help. `Content-Length` is
/// left out (the body sets it) but must match the xorb's length.
fn grant_request(grant: &Grant, len: u64, what: &str) -> Result<(Method, GrantHeaders)> {
    let corrupt = |message: String| CasError::corrupt(what, message);
    let method = Method::from_bytes(grant.method.as_bytes()).map_err(|_| {
        corrupt(format!(
            "the grant's method {:?} is not an HTTP method",
            grant.method
        ))
    })?;
    let mut headers = Vec::new();
    for (k, v) in &grant.headers {
        let bad = || corrupt(format!("the grant's header {k:?} is invalid"));
        let name = HeaderName::from_bytes(k.as_bytes()).map_err(|_| bad())?;
        if name == CONTENT_LENGTH {
            if v.trim().parse::<u64>().ok() != Some(len) {
                return Err(corrupt(format!(
                    "the grant expects Content-Length {v} but the xorb is {len} bytes"
                )));
            }
            continue;
        }
        headers.push((name, HeaderValue::from_str(v).map_err(|_| bad())?));
    }
    Ok((method, headers))
}

/// The reason of a `503 grant_capacity` refusal, if `rej` is one.
fn capacity_refusal(rej: &Rejection) -> Option<String> {
    (rej.status == 503 && rej.kind().as_deref() == Some(GRANT_CAPACITY)).then(|| rej.reason())
}

/// A refused xorb upload: 400/409/413/422 mean the xorb itself was refused.
fn xorb_rejection(hash: &MerkleHash, rej: Rejection, what: &str) -> Fail {
    match rej.status {
        400 | 409 | 413 | 422 => {
            let reason = rej.reason();
            // Our server's reason is the CasError text: do not say "rejected" twice.
            let prefix = format!("xorb {hash} rejected: ");
            let reason = reason
                .strip_prefix(&prefix)
                .map(str::to_string)
                .unwrap_or(reason);
            Fail::Fatal(CasError::invalid_xorb(*hash, Refusal(reason)))
        }
        _ => rej.into_fail(what),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use xet_cas::Cas;
    use xet_testdata::proxy::{Fault, Match, Proxy};

    /// An endpoint that answers every request itself: nothing is forwarded upstream.
    fn endpoint(rules: &[(&str, Fault)]) -> (Proxy, HttpCas) {
        let proxy = Proxy::start("http://127.0.0.1:9");
        for (prefix, fault) in rules {
            proxy.inject(Match::prefix(prefix), fault.clone(), 1000);
        }
        proxy.inject(Match::prefix("/"), Fault::Status(404), 1000);
        let cas = HttpCas::new(crate::ClientConfig::new(&proxy.url)).expect("client");
        (proxy, cas)
    }

    fn server_error(e: CasError) -> (u16, String, String) {
        match e {
            CasError::Server {
                status,
                what,
                message,
            } => (status, what, message),
            e => panic!("a server error expected, not {e:?}"),
        }
    }

    /// The direct uploads are the last routes tried: a 404 there says what the server
    /// lacks, and a success that is not the route's JSON is corrupt, naming the shape.
    #[tokio::test]
    async fn direct_uploads_name_a_missing_route_and_a_wrong_answer() {
        let hash = xet_hash::chunk_hash(b"x");
        let xorb_route = routes::xorb(&hash);
        let (proxy, cas) = endpoint(&[]);
        let e = cas.put_xorb(&hash, Bytes::from_static(b"xorb").into());
        let (status, what, message) = server_error(e.await.unwrap_err());
        assert_eq!(
            (status, what.as_str()),
            (404, &*format!("POST {xorb_route}"))
        );
        assert!(
            message.ends_with(
                "; the server accepts neither upload grants nor direct xorb uploads: \
                 check the endpoint URL"
            ),
            "{message}"
        );
        let e = cas
            .put_shard(Bytes::from_static(b"shard"))
            .await
            .unwrap_err();
        let (status, what, message) = server_error(e);
        assert_eq!((status, what.as_str()), (404, "POST /v1/shards"));
        assert!(
            message.ends_with(
                "; the server has neither /v2/shards nor /v1/shards: check the endpoint URL"
            ),
            "{message}"
        );
        assert_eq!(proxy.count("POST", &xorb_route), 1, "a 404 is not retried");
        assert_eq!(proxy.count("POST", routes::SHARDS_V1), 1);

        let wrong = Fault::Respond {
            status: 200,
            content_type: "application/json".into(),
            body: r#"{"stored": true}"#.into(),
        };
        let (_proxy, cas) = endpoint(&[(&xorb_route, wrong.clone()), (routes::SHARDS_V1, wrong)]);
        let e = cas.put_xorb(&hash, Bytes::from_static(b"xorb").into());
        match e.await.unwrap_err() {
            CasError::Corrupt {
                what,
                message,
                source,
            } => {
                assert_eq!(what, format!("POST {xorb_route}"));
                assert_eq!(message, r#"expected {"was_inserted": bool}"#);
                let cause = source.expect("the JSON error is kept as the cause");
                assert!(cause.is::<serde_json::Error>(), "{cause:?}");
            }
            e => panic!("corrupt expected, not {e:?}"),
        }
        match cas
            .put_shard(Bytes::from_static(b"shard"))
            .await
            .unwrap_err()
        {
            CasError::Corrupt {
                what,
                message,
                source,
            } => {
                assert_eq!(what, "POST /v1/shards");
                assert_eq!(message, r#"expected {"result": 0|1}"#);
                let cause = source.expect("the JSON error is kept as the cause");
                assert!(cause.is::<serde_json::Error>(), "{cause:?}");
            }
            e => panic!("corrupt expected, not {e:?}"),
        }
    }
}
