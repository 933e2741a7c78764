//! Xorb ranges handed over as they arrive ([`xet_cas::Cas::stream_xorb_range`]), with a
//! broken transfer resumed from the first byte not yet delivered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::Response;
use reqwest::header::{CONTENT_RANGE, RANGE};
use reqwest::{Method, StatusCode};
use xet_cas::{ByteRange, CasError, RangeStream, Result, XorbFetch};
use xet_hash::MerkleHash;

use crate::transport::{Fail, Progress, Transport, network};
use crate::{HttpCas, header_str, no_url, util};

/// A presigned GET's answer that passed the status and header checks.
pub(crate) enum RangeAnswer {
    /// The body is exactly the asked-for bytes (206, or a 200 of that length).
    Body(Response),
    /// The server ignored `Range` and sent more: the asked-for bytes, cut out of it.
    Whole(Bytes),
}

impl HttpCas {
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
            return Err(Self::fetch_rejection(xorb, rej, what));
        }
        let corrupt = |message: String| {
            Fail::Fatal(CasError::Corrupt {
                what: what.to_string(),
                message,
            })
        };
        let want = range.len();
        let length = Transport::content_length(&resp);
        if status == StatusCode::PARTIAL_CONTENT {
            let crange = header_str(&resp, CONTENT_RANGE);
            if let Some((a, _, _)) = crange.as_deref().and_then(util::parse_content_range) {
                if a != range.start {
                    return Err(corrupt(format!(
                        "asked for bytes from {}, got from {a}",
                        range.start
                    )));
                }
            }
            if let Some(n) = length.filter(|&n| n != want) {
                return Err(corrupt(format!(
                    "asked for {want} bytes, the answer has {n}; the range may lie past the end of the xorb"
                )));
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
            Err(corrupt(format!(
                "asked for bytes {}..{}, got a {} answer of {} bytes",
                range.start,
                range.end,
                status.as_u16(),
                body.len()
            )))
        }
    }
}

/// Open a stream of `fetch`'s bytes. The first request is retried like any other
/// (its errors come from here); breaks after that are [`XorbStream`]'s.
pub(crate) async fn open(cas: &HttpCas, fetch: &XorbFetch) -> Result<Box<dyn RangeStream>> {
    let mut s = XorbStream {
        cas: cas.clone(),
        xorb: fetch.xorb,
        url: String::new(),
        range: fetch.bytes,
        what: String::new(),
        delivered: 0,
        body: None,
        whole: None,
        breaks: 0,
        since_progress: Instant::now(),
    };
    if fetch.bytes.is_empty() {
        return Ok(Box::new(s));
    }
    s.url = fetch.url.clone().ok_or_else(|| no_url(fetch))?;
    s.what = HttpCas::fetch_what(fetch, &s.url);
    let answer = cas
        .t
        .retrying(&s.what, || async {
            let p = Progress::new();
            let a = cas
                .open_range(&s.xorb, &s.url, s.range, &s.what, &p)
                .await?;
            Ok((a, p))
        })
        .await?;
    s.take(answer);
    Ok(Box::new(s))
}

/// One presigned range in transit. A break (connection error, stall, body ending
/// early, 5xx or 429 on a re-request) re-requests only the bytes not yet delivered,
/// from the same URL, with the client's backoff. Breaks are counted since the last
/// byte delivered: a transfer that keeps moving is never given up on, one that stops
/// moving gets the usual attempts and total duration of the [`crate::RetryPolicy`].
struct XorbStream {
    cas: HttpCas,
    xorb: MerkleHash,
    url: String,
    range: ByteRange,
    what: String,
    delivered: u64,
    body: Option<(Response, Arc<Progress>)>,
    /// A whole answer not yet handed over.
    whole: Option<Bytes>,
    breaks: u32,
    since_progress: Instant,
}

impl XorbStream {
    fn take(&mut self, (answer, p): (RangeAnswer, Arc<Progress>)) {
        match answer {
            RangeAnswer::Body(resp) => self.body = Some((resp, p)),
            RangeAnswer::Whole(b) => self.whole = Some(b),
        }
    }

    /// A retryable failure: wait and count it, or give up.
    async fn broke(&mut self, err: CasError, after: Option<Duration>) -> Result<()> {
        self.body = None;
        self.breaks += 1;
        let t = &self.cas.t;
        let policy = &t.cfg.retry;
        let took = self.since_progress.elapsed();
        if self.breaks >= policy.max_attempts.max(1) {
            return Err(t.gave_up(err, self.breaks, took));
        }
        let delay = after.unwrap_or_else(|| util::backoff_delay(policy, self.breaks));
        if took + delay > policy.max_duration {
            return Err(t.gave_up(err, self.breaks, took));
        }
        tracing::warn!(
            what = %self.what,
            delivered = self.delivered,
            attempt = self.breaks,
            delay_ms = delay.as_millis() as u64,
            error = %err,
            "transfer broke; resuming"
        );
        tokio::time::sleep(delay).await;
        Ok(())
    }

    /// Ask for the rest of the range again.
    async fn resume(&mut self) -> Result<()> {
        let rest = ByteRange::new(self.range.start + self.delivered, self.range.end);
        let p = Progress::new();
        match self
            .cas
            .open_range(&self.xorb, &self.url, rest, &self.what, &p)
            .await
        {
            Ok(a) => {
                self.take((a, p));
                Ok(())
            }
            Err(Fail::Fatal(e)) => Err(e),
            Err(Fail::Retry { err, after }) => self.broke(err, after).await,
        }
    }

    fn deliver(&mut self, b: Bytes) -> Result<Option<Bytes>> {
        let left = self.range.len() - self.delivered;
        if b.len() as u64 > left {
            return Err(CasError::Corrupt {
                what: self.what.clone(),
                message: format!(
                    "the answer holds more than the {} bytes asked for",
                    self.range.len()
                ),
            });
        }
        self.delivered += b.len() as u64;
        self.breaks = 0;
        self.since_progress = Instant::now();
        Ok(Some(b))
    }
}

#[async_trait::async_trait]
impl RangeStream for XorbStream {
    async fn next(&mut self) -> Result<Option<Bytes>> {
        loop {
            if let Some(b) = self.whole.take().filter(|b| !b.is_empty()) {
                return self.deliver(b);
            }
            let done = self.delivered == self.range.len();
            let Some((resp, p)) = self.body.as_mut() else {
                if done {
                    return Ok(None);
                }
                self.resume().await?;
                continue;
            };
            match self.cas.t.chunk(resp, &self.what, p).await {
                Ok(Some(c)) if c.is_empty() => {}
                Ok(Some(c)) => return self.deliver(c),
                // Read to its end, so the connection goes back to the pool.
                Ok(None) if done => {
                    self.body = None;
                    return Ok(None);
                }
                Ok(None) => {
                    let err = network(
                        &self.what,
                        format!(
                            "the answer ended after {} of {} bytes",
                            self.delivered,
                            self.range.len()
                        ),
                    );
                    self.broke(err, None).await?;
                }
                // Everything asked for is here; how the body ends does not matter.
                Err(_) if done => {
                    self.body = None;
                    return Ok(None);
                }
                Err(Fail::Fatal(e)) => return Err(e),
                Err(Fail::Retry { err, after }) => self.broke(err, after).await?,
            }
        }
    }
}
