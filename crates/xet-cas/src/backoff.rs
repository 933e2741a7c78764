//! The one retry backoff of the workspace, used by the HTTP client for each request and
//! by the download pipeline for what it retries itself: the delay before retry number
//! `retry` (1 for the first) is `base · 2^(retry-1)`, capped at `max`, then jittered
//! uniformly into `[d/2, d]` so clients that failed together do not retry together.

use std::hash::{BuildHasher, Hasher};
use std::time::Duration;

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
