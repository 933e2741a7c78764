//! The one retry policy of the workspace, used by the CAS client and the Hub client for
//! each request and by the download pipeline for what it retries itself: which answers
//! are worth another try ([`retryable_status`]), how long a server asks to wait
//! ([`parse_retry_after`]), and the delay otherwise: before retry number `retry` (1 for
//! the first) it is `base · 2^(retry-1)`, capped at `max`, then jittered uniformly into
//! `[d/2, d]` so clients that failed together do not retry together.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

/// Whether an answer with this HTTP status may succeed when sent again: 429 (too many
/// requests) and every 5xx.
pub fn retryable_status(status: u16) -> bool {
    status == 429 || status >= 500
}

/// `Retry-After` in delay-seconds (integer or decimal). HTTP-dates are not honoured
/// (the normal backoff applies instead).
pub fn parse_retry_after(v: &str) -> Option<Duration> {
    let v = v.trim();
    if let Ok(s) = v.parse::<u64>() {
        return Some(Duration::from_secs(s));
    }
    match v.parse::<f64>() {
        Ok(s) if (0.0..1e9).contains(&s) => Some(Duration::from_secs_f64(s)),
        _ => None,
    }
}

/// The delay before retry `retry` without jitter: `base · 2^(retry-1)`, at most `max`.
pub fn ceiling(base: Duration, max: Duration, retry: u32) -> Duration {
    let shift = retry.saturating_sub(1).min(30);
    base.saturating_mul(1u32 << shift).min(max)
}

/// [`ceiling`], jittered uniformly into `[ceiling/2, ceiling]`.
pub fn delay(base: Duration, max: Duration, retry: u32) -> Duration {
    let ceil = ceiling(base, max, retry);
    let lo = ceil / 2;
    let span = (ceil - lo).as_nanos() as u64;
    if span == 0 {
        return ceil;
    }
    lo + Duration::from_nanos(random_u64() % (span + 1))
}

/// A random number good enough for jitter, without a dependency: std's per-instance
/// random hasher keys.
fn random_u64() -> u64 {
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(0);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retry_after_seconds() {
        assert_eq!(parse_retry_after("3"), Some(Duration::from_secs(3)));
        assert_eq!(parse_retry_after(" 0 "), Some(Duration::ZERO));
        assert_eq!(parse_retry_after("1.5"), Some(Duration::from_millis(1500)));
        assert_eq!(parse_retry_after("Wed, 21 Oct 2015 07:28:00 GMT"), None);
        assert_eq!(parse_retry_after("-1"), None);
        assert_eq!(parse_retry_after("nan"), None);
    }

    #[test]
    fn retryable_statuses() {
        for s in [429, 500, 502, 503, 504, 599] {
            assert!(retryable_status(s), "{s}");
        }
        for s in [200, 400, 401, 403, 404, 409, 412, 416, 422, 428] {
            assert!(!retryable_status(s), "{s}");
        }
    }

    #[test]
    fn grows_is_capped_and_jittered() {
        let (b, m) = (Duration::from_millis(100), Duration::from_millis(700));
        assert_eq!(ceiling(b, m, 1), b);
        assert_eq!(ceiling(b, m, 2), b * 2);
        assert_eq!(ceiling(b, m, 3), b * 4);
        assert_eq!(ceiling(b, m, 4), m);
        assert_eq!(ceiling(b, m, 400), m);
        let mut seen = std::collections::HashSet::new();
        for _ in 0..200 {
            let d = delay(b, m, 2);
            assert!(d >= b && d <= b * 2, "{d:?}");
            seen.insert(d);
        }
        assert!(seen.len() > 50, "jittered: {} distinct delays", seen.len());
        assert_eq!(delay(Duration::ZERO, m, 3), Duration::ZERO);
    }
}
