//! `xet_chunk::scan` against the sequential scan it replaces (`gearhash::Hasher::next_match`)
//! and a byte-at-a-time reference, and `find_matches_after`, `chunk_boundaries` and the
//! streaming `Chunker` against byte-at-a-time references, on inputs with few, many and
//! deliberately placed matches.

use crate::common;

use proptest::prelude::*;
use xet_chunk::{MASK, chunk_boundaries, find_matches_after, gear_table, scan};
use xet_testdata::Rng;

fn step(h: u64, b: u8) -> u64 {
    (h << 1).wrapping_add(gear_table()[b as usize])
}

/// Byte-at-a-time scan from state `h`: every match end offset, and the final state.
fn reference_matches(mut h: u64, data: &[u8]) -> (Vec<usize>, u64) {
    let mut out = Vec::new();
    for (i, &b) in data.iter().enumerate() {
        h = step(h, b);
        if h & MASK == 0 {
            out.push(i + 1);
        }
    }
    (out, h)
}

/// A 64-byte window whose gear hash (from any state: 64 bytes shift the state out)
/// matches: placed at `data[p - 64..p]`, it makes a match end at `p`.
fn matching_window(seed: u64) -> [u8; 64] {
    let mut rng = Rng::new(seed);
    loop {
        let mut w = [0u8; 64];
        rng.fill(&mut w);
        if w.iter().fold(0, |h, &b| step(h, b)) & MASK == 0 {
            return w;
        }
    }
}

fn windows() -> &'static [[u8; 64]; 4] {
    static W: std::sync::OnceLock<[[u8; 64]; 4]> = std::sync::OnceLock::new();
    W.get_or_init(|| std::array::from_fn(|i| matching_window(i as u64 + 1)))
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// Random bytes with a matching window after every `64 + gap` bytes, `gap` drawn below
/// `max_gap` (0 gives a match every 64 bytes): matches in every lane and at many offsets
/// relative to strip borders.
fn dense(len: usize, max_gap: u64, seed: u64) -> Vec<u8> {
    let mut data = random(len, seed);
    let mut rng = Rng::new(seed ^ 0x5eed);
    let mut p = rng.below(max_gap + 1) as usize;
    while p + 64 <= len {
        data[p..p + 64].copy_from_slice(&windows()[rng.below(4) as usize]);
        p += 64 + rng.below(max_gap + 1) as usize;
    }
    data
}

/// Bytes from a small alphabet: long repeats, so a match tends to recur periodically.
fn low_entropy(len: usize, symbols: u64, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let alphabet: Vec<u8> = (0..symbols).map(|_| rng.below(256) as u8).collect();
    (0..len)
        .map(|_| alphabet[rng.below(symbols) as usize])
        .collect()
}

/// Checks `scan::matches` against repeated `gearhash` `next_match` calls (what
/// `find_matches_after` used to do) and the reference: match positions and final hash.
fn check_scan(data: &[u8], h0: u64) -> usize {
    let (want, want_final) = reference_matches(h0, data);

    let mut got = vec![usize::MAX];
    let final_hash = scan::matches(h0, data, 1000, &mut got);
    assert_eq!(got[0], usize::MAX, "appends to `out`");
    let got: Vec<usize> = got[1..].iter().map(|p| p - 1000).collect();
    assert_eq!(got, want, "scan::matches");
    assert_eq!(final_hash, want_final, "scan::matches final hash");

    let mut gear = gearhash::Hasher::default();
    gear.set_hash(h0);
    let mut old = Vec::new();
    let mut pos = 0;
    while let Some(n) = gear.next_match(&data[pos..], MASK) {
        pos += n;
        old.push(pos);
    }
    assert_eq!(old, want, "gearhash agrees with the reference");
    assert_eq!(gear.get_hash(), want_final);
    want.len()
}

#[test]
fn empty_and_short_inputs() {
    let data = dense(3000, 0, 9);
    for len in [0, 1, 2, 63, 64, 65, 255, 256, 257, 1535, 1536, 1537] {
        for h0 in [0, 1, u64::MAX, 0x0000_FFFF_FFFF_FFFF] {
            check_scan(&data[..len], h0);
        }
    }
    let mut out = vec![7];
    assert_eq!(scan::matches(42, &[], 0, &mut out), 42);
    assert_eq!(out, [7], "nothing pushed, nothing removed");
    assert_eq!(scan::update(42, &[]), 42);
    assert_eq!(
        scan::update(42, &data[..100]),
        reference_matches(42, &data[..100]).1
    );
}

/// One match placed right before, at and after every multiple of 256 bytes: the strip
/// and segment lengths of `scan` are all multiples of 256 (checked at compile time there),
/// so this puts a match at both ends of every strip and segment, in every lane.
#[test]
fn matches_at_strip_borders() {
    let len = 60_000;
    let background = random(len, 3);
    assert!(
        reference_matches(0, &background).0.is_empty(),
        "quiet background"
    );
    let mut ends: Vec<usize> = (1..len / 256)
        .flat_map(|m| [256 * m - 1, 256 * m, 256 * m + 1])
        .filter(|&p| p >= 64)
        .collect();
    ends.extend([64, 65, len - 1, len]);
    for p in ends {
        let mut data = background.clone();
        data[p - 64..p].copy_from_slice(&windows()[p % 4]);
        let n = check_scan(&data, 0);
        assert!(n >= 1, "the placed match at {p}");
        // The same with a scan that does not start at a multiple of 256.
        check_scan(&data[p % 193..], 0);
    }
}

/// Matches on the first bytes: they depend on the state carried in.
#[test]
fn matches_at_the_first_bytes() {
    let data = random(20_000, 5);
    for p in 1..=48 {
        // Pick the state so that the hash after `data[..p]` is `rest`, whose top 16 bits
        // are clear: `h0 << p` must equal `rest - hash(data[..p])`.
        let tail = reference_matches(0, &data[..p]).1;
        let low = tail & ((1u64 << p) - 1);
        let rest = low; // top bits clear, same low `p` bits as `tail`
        let h0 = rest.wrapping_sub(tail) >> p;
        assert_eq!(reference_matches(h0, &data[..p]).1 & MASK, 0);
        let (m, _) = reference_matches(h0, &data);
        assert_eq!(m.first(), Some(&p));
        check_scan(&data, h0);
    }
}

#[test]
fn dense_and_periodic_inputs() {
    let mut total = 0;
    for (i, gap) in [0, 1, 7, 64, 200, 1000, 5000].into_iter().enumerate() {
        total += check_scan(&dense(150_000, gap, i as u64), 0);
        total += check_scan(&dense(150_000, gap, i as u64 + 50), u64::MAX);
    }
    assert!(total > 10_000, "many matches: {total}");
    for symbols in 1..=4 {
        for seed in 0..4 {
            check_scan(&low_entropy(100_000, symbols, seed), seed);
        }
    }
    // The same window over and over: a match at least every 64 bytes.
    let w = windows()[0];
    let periodic: Vec<u8> = w.iter().copied().cycle().take(70_000).collect();
    assert!(check_scan(&periodic, 0) >= 70_000 / 64);
}

/// `find_matches_after`, byte at a time: the window of each end offset `p` with
/// `range.start < p <= range.end`, if it is full, hashed from scratch out of
/// `before ++ data`.
fn reference_find_matches_after(
    before: &[u8],
    data: &[u8],
    range: std::ops::Range<usize>,
) -> Vec<usize> {
    let all: Vec<u8> = before.iter().chain(data).copied().collect();
    let off = before.len();
    (range.start + 1..=range.end)
        .filter(|&p| {
            let end = off + p;
            end >= 64 && all[end - 64..end].iter().fold(0, |h, &b| step(h, b)) & MASK == 0
        })
        .collect()
}

/// Inputs for the property tests: random, match-dense with a random gap, or low-entropy.
fn input(kind: u8, len: usize, gap: u64, seed: u64) -> Vec<u8> {
    match kind {
        0 => random(len, seed),
        1 => dense(len, gap, seed),
        _ => low_entropy(len, 1 + gap % 4, seed),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]

    #[test]
    fn scan_equals_sequential(
        kind in 0u8..3,
        len in 0usize..250_000,
        gap in 0u64..3000,
        seed in any::<u64>(),
        h0 in any::<u64>(),
        skip in 0usize..2000,
    ) {
        let data = input(kind, len, gap, seed);
        check_scan(&data[skip.min(len)..], h0);
    }

    #[test]
    fn find_matches_after_equals_byte_at_a_time(
        kind in 0u8..3,
        len in 0usize..120_000,
        gap in 0u64..2000,
        seed in any::<u64>(),
        split in 0usize..200,
        a in 0usize..120_000,
        b in 0usize..120_000,
    ) {
        let data = input(kind, len, gap, seed);
        // A split near the start (window not full yet, or straddling it) or anywhere.
        let split = if seed % 2 == 0 { split.min(len) } else { a.min(len) };
        let (before, after) = data.split_at(split);
        let (s, e) = (a.min(b).min(after.len()), a.max(b).min(after.len()));
        prop_assert_eq!(
            find_matches_after(before, after, s..e),
            reference_find_matches_after(before, after, s..e)
        );
    }

    #[test]
    fn chunker_equals_byte_at_a_time(
        kind in 0u8..3,
        len in 0usize..700_000,
        gap in 0u64..40_000,
        seed in any::<u64>(),
        sizes in proptest::collection::vec(1usize..200_000, 1..6),
    ) {
        let data = input(kind, len, gap, seed);
        let want = common::draft_boundaries(gear_table(), &data);
        prop_assert_eq!(&chunk_boundaries(&data), &want);
        prop_assert_eq!(&common::streamed(&data, &sizes), &want);
    }
}
