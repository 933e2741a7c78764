//! Gear hash scan for every match, over several independent lanes, in portable safe Rust.
//!
//! One gear hash chain costs a load of the byte, a load of its table entry and a
//! dependent `h << 1` + add per byte: it is latency bound at about two cycles a byte. The
//! gear hash only depends on the last [`HASH_WINDOW_SIZE`] bytes, so a stretch can be cut
//! into strips hashed independently: each strip's lane starts from the hash of the 64
//! bytes before it, which is the sequential state there. Hashing 6 strips in one loop
//! hides the latency; the loop is then bound by its two loads per byte.
//!
//! The `gearhash` crate's AVX2 `next_match` does the same with 4 strips of 256 bytes, so
//! it hashes 64 bytes again for 3 strips out of 4 (19% more loads). Here strips are 8 KiB,
//! so that re-hashing is under 1%. That only pays when every match is wanted
//! ([`matches()`], for [`find_matches_after`](crate::find_matches_after)). A scan that stops
//! at the first match (the [`Chunker`](crate::Chunker)'s) needs short strips, as the work
//! on strips past the match is lost; on x86-64 with AVX2 (Zen 4) such a scan measured no
//! faster than `gearhash`, so the chunker still uses `gearhash`.
//!
//! Results are bit-identical to the sequential scan.

use crate::{HASH_WINDOW_SIZE, MASK};

/// Independent hash chains per loop iteration: enough to hide the 2-cycle chain latency,
/// few enough that lanes, table pointer and mask stay in registers (measured: 5 to 7 are
/// alike, 8 is slower).
const LANES: usize = 6;
/// Strip length for most of the input: the 64-byte warm-up per strip is under 1%, and
/// each lane reads a long sequential stretch (which the hardware prefetcher follows).
const LONG_STRIP: usize = 8192;
/// Strip lengths for what is left after the whole [`LONG_STRIP`] segments, then scalar.
const MID_STRIP: usize = 1024;
const SHORT_STRIP: usize = 256;
/// Positions per loop iteration in [`lanes_scan`].
const UNROLL: usize = 4;

// `tests/scan.rs` places matches around every multiple of 256 bytes to hit every strip and
// segment border.
const _: () = assert!(
    LONG_STRIP.is_multiple_of(256)
        && MID_STRIP.is_multiple_of(256)
        && SHORT_STRIP.is_multiple_of(256)
);

static TABLE: &[u64; 256] = &gearhash::DEFAULT_TABLE;

#[inline(always)]
fn step(h: u64, b: u8) -> u64 {
    (h << 1).wrapping_add(TABLE[b as usize])
}

#[inline(always)]
fn is_match(h: u64) -> bool {
    h & MASK == 0
}

/// The gear hash state after hashing `data` from state `hash`, without looking for
/// matches (`gearhash::Hasher::update`).
pub fn update(hash: u64, data: &[u8]) -> u64 {
    data.iter().fold(hash, |h, &b| step(h, b))
}

/// Initial lane states for `seg` cut into `LANES` strips of `S` bytes: lane 0 continues
/// `h0`; lane `k` starts from the hash of the 64 bytes before its strip (older bytes would
/// be shifted out by now, so this is the sequential state there).
#[inline(always)]
fn warm_lanes<const S: usize>(h0: u64, seg: &[u8]) -> [u64; LANES] {
    const { assert!(S >= HASH_WINDOW_SIZE) };
    let seg = &seg[..LANES * S];
    let mut h = [0u64; LANES];
    h[0] = h0;
    for j in 0..HASH_WINDOW_SIZE {
        for k in 1..LANES {
            h[k] = step(h[k], seg[k * S - HASH_WINDOW_SIZE + j]);
        }
    }
    h
}

/// Hashes positions `from..S` of the strips `seg[k*S..(k+1)*S]` in lockstep. Stops at the
/// first position `i` where some lane matches and returns `(k, i)` for the lowest such
/// lane `k` (higher lanes may match at `i` too); `h` then holds every lane's hash after
/// position `i`, or after the strip end if there is no match.
///
/// `S` is a constant and all strips are indexed from one slice, so every byte address is
/// one base register plus a constant, and no bounds check is left in the loop.
#[inline(never)]
fn lanes_scan<const S: usize>(
    h: &mut [u64; LANES],
    seg: &[u8],
    from: usize,
) -> Option<(usize, usize)> {
    const { assert!(S >= UNROLL) };
    let seg = &seg[..LANES * S];
    let mut hh = *h;
    let mut i = from;
    // `i <= S - UNROLL` (rather than `i + UNROLL <= S`) lets the compiler see `i + u < S`.
    while i <= S - UNROLL {
        for u in 0..UNROLL {
            for k in 0..LANES {
                hh[k] = step(hh[k], seg[k * S + i + u]);
            }
            for (k, &hk) in hh.iter().enumerate() {
                if is_match(hk) {
                    *h = hh;
                    return Some((k, i + u));
                }
            }
        }
        i += UNROLL;
    }
    while i < S {
        for k in 0..LANES {
            hh[k] = step(hh[k], seg[k * S + i]);
        }
        for (k, &hk) in hh.iter().enumerate() {
            if is_match(hk) {
                *h = hh;
                return Some((k, i));
            }
        }
        i += 1;
    }
    *h = hh;
    None
}

/// [`matches`] over the whole segments of `LANES * S` bytes from `*pos` on; advances `*pos`
/// past them.
fn segments_matches<const S: usize>(
    hash: &mut u64,
    data: &[u8],
    pos: &mut usize,
    base: usize,
    out: &mut Vec<usize>,
) {
    while data.len() - *pos >= LANES * S {
        let seg = &data[*pos..*pos + LANES * S];
        let mut lanes = warm_lanes::<S>(*hash, seg);
        let first = out.len();
        let mut from = 0;
        while let Some((k, i)) = lanes_scan::<S>(&mut lanes, seg, from) {
            for (j, &h) in lanes.iter().enumerate().skip(k) {
                if is_match(h) {
                    out.push(base + *pos + j * S + i + 1);
                }
            }
            from = i + 1;
        }
        // Found position by position across the strips: put them in data order.
        if out.len() - first > 1 {
            out[first..].sort_unstable();
        }
        // The last lane ends where the sequential scan would, in the same state.
        *hash = lanes[LANES - 1];
        *pos += LANES * S;
    }
}

/// Every match of the gear hash scan of `data` from state `hash`: pushes `base + n` onto
/// `out`, in ascending order, for each `n` such that the hash after `data[..n]` has the
/// [`MASK`] bits clear (what repeated `gearhash::Hasher::next_match(.., MASK)` calls
/// find, with the default table). Returns the hash after all of `data`.
pub fn matches(mut hash: u64, data: &[u8], base: usize, out: &mut Vec<usize>) -> u64 {
    let mut pos = 0;
    segments_matches::<LONG_STRIP>(&mut hash, data, &mut pos, base, out);
    segments_matches::<MID_STRIP>(&mut hash, data, &mut pos, base, out);
    segments_matches::<SHORT_STRIP>(&mut hash, data, &mut pos, base, out);
    for (i, &b) in data[pos..].iter().enumerate() {
        hash = step(hash, b);
        if is_match(hash) {
            out.push(base + pos + i + 1);
        }
    }
    hash
}
