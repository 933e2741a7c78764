//! Small pure helpers: checksums, URLs, Range headers, backoff.

use crate::config::RetryPolicy;
use std::time::Duration;
use xet_cas::ByteRange;
use xet_hash::MerkleHash;

/// `{endpoint}{path}`: routes are appended directly, with exactly one `/` between.
pub fn join_url(endpoint: &str, path: &str) -> String {
    let base = endpoint.trim_end_matches('/');
    if path.starts_with('/') {
        format!("{base}{path}")
    } else {
        format!("{base}/{path}")
    }
}

/// A URL safe to print: the query string (presigned signatures) is replaced by `?…`.
pub fn redact_url(url: &str) -> String {
    match url.split_once('?') {
        Some((base, _)) => format!("{base}?…"),
        None => url.to_string(),
    }
}

/// `bytes=S-E` with an inclusive end for the end-exclusive `r`; `bytes=S-` when the
/// range runs to the end (`end == u64::MAX`). `None` for an empty range, which has no
/// HTTP form.
pub fn range_header(r: &ByteRange) -> Option<String> {
    if r.end == u64::MAX {
        return Some(format!("bytes={}-", r.start));
    }
    if r.is_empty() {
        return None;
    }
    Some(format!("bytes={}-{}", r.start, r.end - 1))
}

/// Jittered delay before retry number `retry`: uniform in `[ceiling/2, ceiling]`
/// ([`xet_cas::backoff`]).
pub fn backoff_delay(policy: &RetryPolicy, retry: u32) -> Duration {
    xet_cas::backoff::delay(policy.base_delay, policy.max_delay, retry)
}

/// `Content-Range: bytes a-b/total` → `(a, b inclusive, total)`; `bytes */total` →
/// `(None, Some(total))` via [`parse_unsatisfied_range`].
pub fn parse_content_range(v: &str) -> Option<(u64, u64, Option<u64>)> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    let (range, total) = rest.split_once('/')?;
    let (a, b) = range.trim().split_once('-')?;
    let total = match total.trim() {
        "*" => None,
        t => Some(t.parse().ok()?),
    };
    Some((a.trim().parse().ok()?, b.trim().parse().ok()?, total))
}

/// The total size in a `416` answer's `Content-Range: bytes */N`.
pub fn parse_unsatisfied_range(v: &str) -> Option<u64> {
    let rest = v.trim().strip_prefix("bytes")?.trim_start();
    rest.strip_prefix("*/")?.trim().parse().ok()
}

/// The first 64-hex-digit word in `s` that parses as a hash string.
pub fn find_hash(s: &str) -> Option<MerkleHash> {
    s.split(|c: char| !c.is_ascii_hexdigit())
        .filter(|w| w.len() == 64)
        .find_map(|w| MerkleHash::from_hex(w).ok())
}

/// A server's error body made printable: the `reason` of our JSON [`xet_cas::wire::ErrorBody`],
/// else the text itself, trimmed and shortened.
pub fn error_reason(body: &[u8]) -> String {
    if let Ok(e) = serde_json::from_slice::<xet_cas::wire::ErrorBody>(body) {
        return if e.reason.is_empty() {
            e.error
        } else {
            e.reason
        };
    }
    if let Ok(v) = serde_json::from_slice::<serde_json::Value>(body) {
        for k in ["reason", "message", "error", "detail"] {
            if let Some(s) = v.get(k).and_then(|x| x.as_str()) {
                return s.to_string();
            }
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.chars().count() > 300 {
        let cut: String = text.chars().take(300).collect();
        format!("{cut}…")
    } else {
        text.to_string()
    }
}

/// The `error` kind of our JSON error body, if present.
pub fn error_kind(body: &[u8]) -> Option<String> {
    serde_json::from_slice::<xet_cas::wire::ErrorBody>(body)
        .ok()
        .map(|e| e.error)
}

pub fn now_unix() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_join_and_redact() {
        assert_eq!(join_url("http://h:1", "/v1/x"), "http://h:1/v1/x");
        assert_eq!(join_url("http://h:1/", "/v1/x"), "http://h:1/v1/x");
        assert_eq!(
            join_url("https://h/cas/", "v2/shards"),
            "https://h/cas/v2/shards"
        );
        assert_eq!(
            redact_url("http://h/_xorb/a?X-Xet-Signature=s3cr3t"),
            "http://h/_xorb/a?…"
        );
        assert_eq!(redact_url("http://h/p"), "http://h/p");
    }

    #[test]
    fn range_headers_are_inclusive() {
        assert_eq!(range_header(&ByteRange::new(0, 100)).unwrap(), "bytes=0-99");
        assert_eq!(range_header(&ByteRange::new(5, 6)).unwrap(), "bytes=5-5");
        assert_eq!(
            range_header(&ByteRange::new(5, u64::MAX)).unwrap(),
            "bytes=5-"
        );
        assert!(range_header(&ByteRange::new(5, 5)).is_none());
    }

    #[test]
    fn content_range_forms() {
        assert_eq!(
            parse_content_range("bytes 0-99/1000"),
            Some((0, 99, Some(1000)))
        );
        assert_eq!(parse_content_range("bytes 5-9/*"), Some((5, 9, None)));
        assert_eq!(parse_content_range("bytes */1000"), None);
        assert_eq!(parse_unsatisfied_range("bytes */1000"), Some(1000));
        assert_eq!(parse_unsatisfied_range("bytes 0-1/2"), None);
    }

    #[test]
    fn error_bodies() {
        assert_eq!(
            error_reason(br#"{"error":"invalid_shard","reason":"bad magic"}"#),
            "bad magic"
        );
        assert_eq!(
            error_kind(br#"{"error":"invalid_shard","reason":"bad magic"}"#).unwrap(),
            "invalid_shard"
        );
        assert_eq!(error_reason(br#"{"message":"nope"}"#), "nope");
        assert_eq!(error_reason(b"  plain text\n"), "plain text");
        assert_eq!(error_reason(&[b'x'; 1000]).chars().count(), 301);
    }

    #[test]
    fn finds_hash_in_message() {
        let h = xet_hash::chunk_hash(b"x");
        let msg = format!("shard references xorb {h}, which is not stored");
        assert_eq!(find_hash(&msg), Some(h));
        assert_eq!(find_hash("no hash here"), None);
    }
}
