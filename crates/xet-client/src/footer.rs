//! A xorb's footer from its presigned URL ([`xet_cas::Cas::xorb_footer`]): the end of
//! the stored object, asked for with a suffix range.
//!
//! A server may not serve it: its URLs may name the chunk region only, or be signed for
//! the one range the reconstruction lists (a `403`, `416` or an answer that does not end
//! in a footer). That is `Ok(None)`, not an error: the caller then checks what it can
//! without the chunk hashes.

use bytes::Bytes;
use reqwest::StatusCode;
use reqwest::header::{CONTENT_RANGE, RANGE};
use xet_cas::{CasError, Result, XorbFetch};
use xet_xorb::{Limits, XorbFooter};

use crate::transport::{Fail, Progress, Transport};
use crate::{HttpCas, redact_url, util};

/// Bytes asked for at the end of a stored xorb: the whole footer of a xorb of up to
/// 1,600 chunks (a full xorb of 64 KiB chunks has about 1,000) in one request; a
/// longer footer takes a second one for the rest.
const FOOTER_GUESS: u64 = 64 << 10;

/// What a suffix GET brought: the last bytes of the object and its length.
struct Tail {
    bytes: Bytes,
    total: u64,
}

impl HttpCas {
    pub(crate) async fn fetch_footer(&self, fetch: &XorbFetch) -> Result<Option<XorbFooter>> {
        let Some(url) = fetch.url.as_deref() else {
            return Ok(None);
        };
        let what = format!("GET {} (footer of xorb {})", redact_url(url), fetch.xorb);
        let Some(tail) = self.get_tail(url, FOOTER_GUESS, &what).await? else {
            return Ok(None);
        };
        let Some(need) = footer_len(&tail.bytes) else {
            return Ok(None);
        };
        let tail = if need <= tail.bytes.len() as u64 {
            tail
        } else {
            // A footer longer than the guess (many small chunks): ask for all of it.
            match self.get_tail(url, need, &what).await? {
                Some(t) if t.total == tail.total && t.bytes.len() as u64 >= need => t,
                _ => return Ok(None),
            }
        };
        let (footer, _region) =
            xet_xorb::parse_footer_tail(&tail.bytes, tail.total, &Limits::PROTOCOL).map_err(
                |e| {
                    let message = "the end of the stored xorb is not a valid footer";
                    CasError::corrupt_with(what.clone(), message, e)
                },
            )?;
        if footer.xorb_hash != fetch.xorb {
            return Err(CasError::corrupt(
                what,
                format!("the footer names xorb {}", footer.xorb_hash),
            ));
        }
        Ok(Some(footer))
    }

    /// The last `n` bytes of the object at `url` (fewer if it is shorter), with retries;
    /// `None` if the server does not give them.
    async fn get_tail(&self, url: &str, n: u64, what: &str) -> Result<Option<Tail>> {
        self.t
            .retrying(what, || async {
                let p = Progress::new();
                let rb = self
                    .t
                    .external(reqwest::Method::GET, url)
                    .header(RANGE, format!("bytes=-{n}"));
                let resp = self.t.send(rb, what, &p).await?;
                let status = resp.status();
                if status.is_client_error() {
                    let rej = self.t.rejection(resp, &p).await;
                    tracing::debug!("{what}: {} ({}): no footer here", rej.status, rej.reason());
                    return Ok(None);
                }
                if !status.is_success() {
                    let rej = self.t.rejection(resp, &p).await;
                    return Err(rej.into_fail(what));
                }
                let length = Transport::content_length(&resp);
                let (start, total) = if status == StatusCode::PARTIAL_CONTENT {
                    let range = resp
                        .headers()
                        .get(CONTENT_RANGE)
                        .and_then(|v| v.to_str().ok())
                        .and_then(util::parse_content_range);
                    (range.map(|r| r.0), range.and_then(|r| r.2))
                } else {
                    // A 200 is the whole object: not worth reading for its end when large.
                    (Some(0), length.filter(|&l| l <= n))
                };
                let Some(total) = total.filter(|&t| t <= xet_xorb::MAX_XORB_FOOTERED_BYTES) else {
                    return Ok(None);
                };
                let want = n.min(total);
                if start != Some(total - want) {
                    tracing::debug!("{what}: the answer is not the object's end: no footer here");
                    return Ok(None);
                }
                if length.is_some_and(|l| l != want) {
                    return Err(Fail::Fatal(CasError::corrupt(
                        what,
                        format!("asked for the last {want} bytes, the answer has {length:?}"),
                    )));
                }
                let bytes = self.t.read_body(resp, what, &p).await?;
                if bytes.len() as u64 != want {
                    return Err(Fail::retry(crate::transport::network(
                        what,
                        format!("got {} of the last {want} bytes", bytes.len()),
                    )));
                }
                Ok(Some(Tail { bytes, total }))
            })
            .await
    }
}

/// Length of the footer plus its `info_length` from the end of a stored xorb, `None`
/// if it cannot be one (shorter than 4 bytes, or longer than any xorb's footer).
fn footer_len(tail: &[u8]) -> Option<u64> {
    let last4: [u8; 4] = tail.get(tail.len().checked_sub(4)?..)?.try_into().ok()?;
    let n = u64::from(u32::from_le_bytes(last4)) + 4;
    let max = xet_xorb::footer_len_v1(xet_xorb::MAX_XORB_CHUNKS) as u64 + 4;
    (n <= max).then_some(n)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footer_lengths_are_bounded() {
        assert_eq!(footer_len(&[1, 0, 0]), None);
        assert_eq!(footer_len(&[9, 9, 100, 0, 0, 0]), Some(104));
        assert_eq!(footer_len(&u32::MAX.to_le_bytes()), None);
    }
}
