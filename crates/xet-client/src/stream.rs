//! Xorb ranges handed over as they arrive ([`xet_cas::Cas::stream_xorb_range`]), with a
//! broken transfer resumed from the first byte not yet delivered.

use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use reqwest::Response;
use xet_cas::{ByteRange, CasError, RangeStream, Result, XorbFetch};
use xet_hash::MerkleHash;

use crate::fetch::{RangeAnswer, no_url};
use crate::transport::{Fail, Progress, network};
use crate::{HttpCas, util};

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
            let message = format!(
                "the answer holds more than the {} bytes asked for",
                self.range.len()
            );
            return Err(CasError::corrupt(&self.what, message));
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
