//! Shards: uploads through `/v2/shards` (an NDJSON progress stream ending in a result or
//! error frame) or `/v1/shards` on servers without it, and the global dedup query, whose
//! answer is a shard.

use std::sync::atomic::Ordering;

use bytes::{Bytes, BytesMut};
use reqwest::{Method, Response};
use xet_cas::wire::ShardResultV1;
use xet_cas::{CasError, Refusal, Result, error_chain, routes};
use xet_hash::MerkleHash;

use crate::transport::{Fail, Progress, Rejection, network, progress_body};
use crate::xorbs::{DirectRoute, Posted};
use crate::{HttpCas, util};

impl HttpCas {
    /// Whether `/v2/shards` is known to be missing on this server.
    pub fn lacks_v2_shards(&self) -> bool {
        self.state.no_v2_shards.load(Ordering::Relaxed)
    }

    /// `Ok(true)` when the shard was new. `/v2/shards` until the server turns out not to
    /// have it; from then on this client goes straight to `/v1/shards`.
    pub(crate) async fn upload_shard(&self, shard: Bytes) -> Result<bool> {
        if !self.t.cfg.legacy.v1_shards && !self.lacks_v2_shards() {
            match self.put_shard_v2(&shard).await? {
                Some(inserted) => return Ok(inserted),
                None => {
                    tracing::debug!("no /v2/shards on the server: using /v1/shards");
                    self.state.no_v2_shards.store(true, Ordering::Relaxed);
                }
            }
        }
        self.put_shard_v1(&shard).await
    }

    /// `Some(inserted)`, or `None` when the server has no `/v2/shards`.
    async fn put_shard_v2(&self, shard: &Bytes) -> Result<Option<bool>> {
        let what = format!("POST {}", routes::SHARDS_V2);
        self.t
            .retrying(&what, || async {
                let p = Progress::new();
                let body = progress_body(shard.clone(), p.clone());
                let posted = self
                    .post_upload(routes::SHARDS_V2, &what, shard.len() as u64, body, &p)
                    .await?;
                match posted {
                    Posted::Accepted(resp) => {
                        self.read_shard_frames(resp, &what, &p).await.map(Some)
                    }
                    Posted::Refused(rej) if matches!(rej.status, 404 | 501) => Ok(None),
                    Posted::Refused(rej) => Err(shard_rejection(rej, &what)),
                }
            })
            .await
    }

    /// Reads the NDJSON progress of `/v2/shards` up to its first terminal frame. A
    /// stream without one is a broken transfer (retryable).
    async fn read_shard_frames(
        &self,
        mut resp: Response,
        what: &str,
        p: &Progress,
    ) -> std::result::Result<bool, Fail> {
        let mut buf = BytesMut::new();
        loop {
            let chunk = self.t.chunk(&mut resp, what, p).await?;
            let ended = chunk.is_none();
            if let Some(c) = chunk {
                buf.extend_from_slice(&c);
            } else if !buf.is_empty() && !buf.ends_with(b"\n") {
                // A last frame without its newline still counts.
                buf.extend_from_slice(b"\n");
            }
            while let Some(nl) = buf.iter().position(|&b| b == b'\n') {
                let line = buf.split_to(nl + 1);
                if let Some(outcome) = shard_frame(&line, what) {
                    return outcome;
                }
            }
            if ended {
                return Err(Fail::retry(network(
                    what,
                    "the progress stream ended without a result or error frame",
                )));
            }
        }
    }

    async fn put_shard_v1(&self, shard: &Bytes) -> Result<bool> {
        let route = DirectRoute {
            path: routes::SHARDS_V1,
            shape: r#"{"result": 0|1}"#,
            lacks: "has neither /v2/shards nor /v1/shards",
        };
        self.post_direct(
            &route,
            shard.len() as u64,
            |p| progress_body(shard.clone(), p),
            shard_rejection,
            |b| serde_json::from_slice::<ShardResultV1>(b).map(|r| r.result == 1),
        )
        .await
    }

    /// The shard holding `chunk`, for global dedup. As the reference: one try, and any
    /// failure other than 401 is a miss (dedup is an optimisation, never a reason to fail).
    pub(crate) async fn query_dedup(&self, chunk: &MerkleHash) -> Result<Option<Bytes>> {
        let path = routes::chunk(chunk);
        let what = format!("GET {path}");
        let miss = |why: String| {
            tracing::debug!(%what, %why, "global dedup query failed: treating as a miss");
            Ok(None)
        };
        let p = Progress::new();
        let rb = match self.t.cas(Method::GET, &path).await {
            Ok(rb) => rb,
            Err(Fail::Fatal(e @ CasError::Unauthorized { .. })) => return Err(e),
            Err(Fail::Fatal(e) | Fail::Retry { err: e, .. }) => return miss(error_chain(&e)),
        };
        let resp = match self.t.send(rb, &what, &p).await {
            Ok(r) => r,
            Err(Fail::Fatal(e) | Fail::Retry { err: e, .. }) => return miss(error_chain(&e)),
        };
        match resp.status().as_u16() {
            200 => match self.t.read_body(resp, &what, &p).await {
                Ok(b) => Ok(Some(b)),
                Err(Fail::Fatal(e) | Fail::Retry { err: e, .. }) => miss(error_chain(&e)),
            },
            404 => Ok(None),
            401 => {
                let rej = self.t.rejection(resp, &p).await;
                Err(CasError::Unauthorized {
                    message: format!("{what} answered 401: {}", rej.reason()),
                    source: None,
                })
            }
            s => miss(format!("status {s}")),
        }
    }
}

/// A refused shard: missing xorbs are told apart from other validation failures.
fn shard_error(kind: Option<&str>, reason: String) -> CasError {
    // Our server names the kind; otherwise go by the message.
    let missing = match kind {
        Some(k) => k.contains("missing"),
        None => {
            reason.contains("not stored") || reason.to_ascii_lowercase().contains("missing xorb")
        }
    };
    match util::find_hash(&reason) {
        Some(hash) if missing => CasError::MissingXorb { hash },
        _ => {
            let reason = reason
                .strip_prefix("shard rejected: ")
                .map(str::to_string)
                .unwrap_or(reason);
            CasError::invalid_shard(Refusal(reason))
        }
    }
}

fn shard_rejection(rej: Rejection, what: &str) -> Fail {
    match rej.status {
        400 | 409 | 413 | 422 => Fail::Fatal(shard_error(rej.kind().as_deref(), rej.reason())),
        _ => rej.into_fail(what),
    }
}

/// One NDJSON line of `/v2/shards`: `Some` for a terminal frame.
fn shard_frame(line: &[u8], what: &str) -> Option<std::result::Result<bool, Fail>> {
    let line = line.trim_ascii();
    if line.is_empty() {
        return None;
    }
    let v: serde_json::Value = match serde_json::from_slice(line) {
        Ok(v) => v,
        Err(e) => {
            tracing::debug!(%what, error = %e, "ignoring a progress line that is not JSON");
            return None;
        }
    };
    match v.get("type").and_then(|t| t.as_str()) {
        Some("result") => {
            let inserted = v
                .get("was_inserted")
                .and_then(|x| x.as_bool())
                .or_else(|| v.get("result").and_then(|x| x.as_u64()).map(|r| r == 1))
                .unwrap_or(true);
            Some(Ok(inserted))
        }
        Some("error") => Some(Err(error_frame(&v, what))),
        // A server answering `/v2/shards` the v1 way.
        None if v.get("result").is_some_and(|r| r.is_u64()) => {
            Some(Ok(v.get("result").and_then(|r| r.as_u64()) == Some(1)))
        }
        other => {
            tracing::trace!(%what, frame = ?other, "shard upload progress");
            None
        }
    }
}

/// An `error` frame: retried when the server says it is transient.
fn error_frame(v: &serde_json::Value, what: &str) -> Fail {
    let message = v
        .get("message")
        .and_then(|m| m.as_str())
        .unwrap_or("no message")
        .to_string();
    if v.get("retryable")
        .and_then(|r| r.as_bool())
        .unwrap_or(false)
    {
        return Fail::retry(CasError::Server {
            status: 200,
            what: what.to_string(),
            message: format!("the server reported a transient error: {message}"),
        });
    }
    let kind = v
        .get("error")
        .or_else(|| v.get("kind"))
        .and_then(|k| k.as_str());
    Fail::Fatal(shard_error(kind, message))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames() {
        let w = "POST /v2/shards";
        assert!(shard_frame(br#"{"type":"validating","verified":0,"total":3}"#, w).is_none());
        assert!(shard_frame(b"   \n", w).is_none());
        assert!(shard_frame(b"garbage", w).is_none());
        assert!(matches!(
            shard_frame(br#"{"type":"result"}"#, w),
            Some(Ok(true))
        ));
        assert!(matches!(
            shard_frame(br#"{"type":"result","result":0}"#, w),
            Some(Ok(false))
        ));
        assert!(matches!(
            shard_frame(br#"{"type":"result","was_inserted":false}"#, w),
            Some(Ok(false))
        ));
        assert!(matches!(
            shard_frame(br#"{"type":"error","message":"x","retryable":true}"#, w),
            Some(Err(Fail::Retry { .. }))
        ));
        let h = xet_hash::chunk_hash(b"q");
        let line = format!(
            r#"{{"type":"error","message":"shard references xorb {h}, which is not stored","#
        ) + r#""retryable":false}"#;
        match shard_frame(line.as_bytes(), w) {
            Some(Err(Fail::Fatal(CasError::MissingXorb { hash }))) => assert_eq!(hash, h),
            _ => panic!("missing xorb expected"),
        }
        assert!(matches!(
            shard_frame(
                br#"{"type":"error","message":"bad magic","retryable":false}"#,
                w
            ),
            Some(Err(Fail::Fatal(CasError::InvalidShard { .. })))
        ));
    }
}
