//! Boundary rules, a byte-at-a-time second implementation, streaming equivalence and the
//! gear table, checked against the fast path.

use crate::common;

use common::{draft_boundaries, streamed};
use proptest::prelude::*;
use xet_chunk::{
    Chunker, MASK, MAX_CHUNK_SIZE, MIN_CHUNK_SIZE, StreamChunker, boundaries_from_matches,
    chunk_boundaries, chunk_data, find_matches, find_matches_after, gear_table,
};
use xet_testdata::Rng;

const SPEC: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../tests/vectors/spec/draft-denis-xet-03-appendix-b.txt"
);

/// The 256 constants of draft-denis-xet Appendix B, parsed from the draft text.
fn draft_table() -> &'static [u64; 256] {
    static TABLE: std::sync::OnceLock<[u64; 256]> = std::sync::OnceLock::new();
    TABLE.get_or_init(parse_draft_table)
}

fn parse_draft_table() -> [u64; 256] {
    let text = std::fs::read_to_string(SPEC).unwrap_or_else(|e| panic!("reading {SPEC}: {e}"));
    let start = text
        .find("Appendix B.  Gearhash Lookup Table\n\n")
        .expect("appendix B");
    let body = &text[start..];
    // The table spans a page break, whose header and footer hold no `0x` words.
    let body = &body[body.find("TABLE = [").expect("TABLE")..body.find("\n]\n").expect("]")];
    let vals: Vec<u64> = body
        .split(|c: char| c.is_whitespace() || c == ',')
        .filter_map(|w| w.strip_prefix("0x"))
        .map(|h| u64::from_str_radix(h, 16).expect("hex constant"))
        .collect();
    let n = vals.len();
    vals.try_into()
        .unwrap_or_else(|_| panic!("expected 256 constants, found {n}"))
}

/// The other behaviour older xet-core releases had: hashing starts at `MIN - 65` with the
/// hash state carried over from the previous boundary, and a match is accepted as soon as
/// hashing starts, so chunks of 8128..8191 bytes can occur. Kept to show the golden
/// vectors and the reference tell the two apart (see `reference_rejects_short_matches`).
fn legacy_boundaries(table: &[u64; 256], data: &[u8]) -> Vec<usize> {
    let hash_start = MIN_CHUNK_SIZE - 64 - 1;
    let mut h: u64 = 0;
    let mut start = 0;
    let mut out = Vec::new();
    for (i, &b) in data.iter().enumerate() {
        let size = i - start + 1;
        if size <= hash_start {
            continue;
        }
        h = (h << 1).wrapping_add(table[b as usize]);
        if size >= MAX_CHUNK_SIZE || h & MASK == 0 {
            out.push(i + 1);
            start = i + 1;
        }
    }
    if start < data.len() {
        out.push(data.len());
    }
    out
}

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut v = vec![0u8; len];
    Rng::new(seed).fill(&mut v);
    v
}

/// Bytes whose gear-table entry has its top 16 bits clear: one such byte right after a
/// window of anything makes `h & MASK` depend mostly on it, so inputs built from them have
/// many boundaries close to the minimum size.
fn low_entry_bytes() -> Vec<u8> {
    (0..=255u8)
        .filter(|&b| gear_table()[b as usize] & MASK == 0)
        .collect()
}

/// Find a 64-byte window (from `seed`) after which the gear hash matches the mask; repeated
/// with padding it gives inputs with many content-defined boundaries.
fn matching_window(seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    loop {
        let w = {
            let mut w = vec![0u8; 64];
            rng.fill(&mut w);
            w
        };
        let h = w.iter().fold(0u64, |h, &b| {
            (h << 1).wrapping_add(gear_table()[b as usize])
        });
        if h & MASK == 0 {
            return w;
        }
    }
}

/// A matching window followed by `pad` filler bytes, repeated: boundaries land at every
/// length the rules allow near MIN, exercising the minimum-size edge. `low_density` (0..4)
/// sets how many filler bytes have a low gear entry.
fn boundary_rich(seed: u64, pad: usize, low_density: u32, len: usize) -> Vec<u8> {
    let w = matching_window(seed);
    let low = low_entry_bytes();
    let mut rng = Rng::new(seed ^ 0xfeed);
    let mut data = Vec::with_capacity(len + pad + 64);
    while data.len() < len {
        data.extend_from_slice(&w);
        for _ in 0..pad {
            let b = if rng.below(4) < low_density as u64 {
                low[rng.below(low.len() as u64) as usize]
            } else {
                rng.below(256) as u8
            };
            data.push(b);
        }
    }
    data.truncate(len);
    data
}

/// `chunk_boundaries`, checked against the two-step parallel path on the same input.
fn boundaries(data: &[u8]) -> Vec<usize> {
    let ends = chunk_boundaries(data);
    let matches = find_matches(data, 0..data.len());
    assert_eq!(
        boundaries_from_matches(&matches, data.len()),
        ends,
        "parallel path"
    );
    ends
}

/// End offsets after which the gear hash of the preceding 64 bytes matches, recomputing the
/// window from scratch at every offset.
fn brute_force_matches(data: &[u8]) -> Vec<usize> {
    (64..=data.len())
        .filter(|&p| {
            let h = data[p - 64..p].iter().fold(0u64, |h, &b| {
                (h << 1).wrapping_add(draft_table()[b as usize])
            });
            h & MASK == 0
        })
        .collect()
}

fn lens(ends: &[usize]) -> Vec<usize> {
    let mut prev = 0;
    ends.iter()
        .map(|&e| {
            let l = e - prev;
            prev = e;
            l
        })
        .collect()
}

fn check_invariants(data: &[u8], ends: &[usize]) {
    if data.is_empty() {
        assert!(ends.is_empty());
        return;
    }
    assert_eq!(*ends.last().unwrap(), data.len());
    let l = lens(ends);
    for (i, &n) in l.iter().enumerate() {
        assert!((1..=MAX_CHUNK_SIZE).contains(&n), "chunk {i} has {n} bytes");
        if i + 1 < l.len() {
            assert!(n >= MIN_CHUNK_SIZE, "non-final chunk {i} has {n} bytes");
        }
    }
}

#[test]
fn gear_table_is_draft_appendix_b() {
    let draft = draft_table();
    assert_eq!(draft, gear_table());
    // Spot values straight from the draft, in case parsing and the crate agree by accident.
    assert_eq!(gear_table()[0], 0xb088d3a9e840f559);
    assert_eq!(gear_table()[17], 0x00005082119ea468);
    assert_eq!(gear_table()[255], 0x63c7a906c1dd187b);
}

#[test]
fn empty_and_tiny_inputs() {
    assert!(chunk_boundaries(&[]).is_empty());
    assert!(chunk_data(&[]).is_empty());
    assert_eq!(chunk_boundaries(&[42]), vec![1]);
    let one = chunk_data(&[42]);
    assert_eq!(one.len(), 1);
    assert_eq!((one[0].offset, one[0].len), (0, 1));
    assert_eq!(one[0].hash, xet_hash::chunk_hash(&[42]));
    assert!(Chunker::new().finish().is_none());
    assert!(StreamChunker::new().finish().is_none());
}

#[test]
fn zeros_never_match_so_chunks_are_max_sized() {
    // After 64 zero bytes the gear hash sits at the fixed point -TABLE[0], whose top bits
    // are set, and shorter runs do not match either.
    let fixed = 0u64.wrapping_sub(gear_table()[0]);
    assert_ne!(fixed & MASK, 0);
    let mut h = 0u64;
    for _ in 0..200 {
        h = (h << 1).wrapping_add(gear_table()[0]);
        assert_ne!(h & MASK, 0);
    }
    assert_eq!(h, fixed);

    let cases: &[(usize, &[usize])] = &[
        (MIN_CHUNK_SIZE - 1, &[MIN_CHUNK_SIZE - 1]),
        (MIN_CHUNK_SIZE, &[MIN_CHUNK_SIZE]),
        (MIN_CHUNK_SIZE + 1, &[MIN_CHUNK_SIZE + 1]),
        (MAX_CHUNK_SIZE - 1, &[MAX_CHUNK_SIZE - 1]),
        (MAX_CHUNK_SIZE, &[MAX_CHUNK_SIZE]),
        (MAX_CHUNK_SIZE + 1, &[MAX_CHUNK_SIZE, 1]),
        (
            3 * MAX_CHUNK_SIZE + 5,
            &[MAX_CHUNK_SIZE, MAX_CHUNK_SIZE, MAX_CHUNK_SIZE, 5],
        ),
    ];
    for &(n, want) in cases {
        let data = vec![0u8; n];
        assert_eq!(lens(&boundaries(&data)), want, "{n} zeros");
    }
}

#[test]
fn random_inputs_at_size_edges() {
    for (i, n) in [
        MIN_CHUNK_SIZE - 1,
        MIN_CHUNK_SIZE,
        MIN_CHUNK_SIZE + 1,
        MAX_CHUNK_SIZE - 1,
        MAX_CHUNK_SIZE,
        MAX_CHUNK_SIZE + 1,
        2_000_000,
    ]
    .into_iter()
    .enumerate()
    {
        let data = random(n, 1000 + i as u64);
        let ends = boundaries(&data);
        check_invariants(&data, &ends);
        assert_eq!(
            ends,
            draft_boundaries(draft_table(), &data),
            "{n} random bytes"
        );
        if n <= MIN_CHUNK_SIZE + 1 {
            // Too short for any boundary before the end of input.
            assert_eq!(ends, vec![n]);
        }
    }
}

#[test]
fn boundary_exactly_at_min_and_max() {
    // A matching window ending exactly at MIN gives a chunk of exactly MIN bytes; ending one
    // byte earlier it is ignored.
    let w = matching_window(5);
    for end in [MIN_CHUNK_SIZE, MIN_CHUNK_SIZE - 1] {
        let mut data = vec![0u8; 3 * MIN_CHUNK_SIZE];
        data[end - 64..end].copy_from_slice(&w);
        let ends = boundaries(&data);
        assert_eq!(ends, draft_boundaries(draft_table(), &data));
        assert_eq!(
            ends[0] == end,
            end == MIN_CHUNK_SIZE,
            "window ending at {end}: {ends:?}"
        );
    }
    // A window ending at MAX coincides with the forced boundary; one byte later it starts
    // the next chunk's count afresh.
    let mut data = vec![0u8; MAX_CHUNK_SIZE + MIN_CHUNK_SIZE + 10];
    data[MAX_CHUNK_SIZE - 64..MAX_CHUNK_SIZE].copy_from_slice(&w);
    assert_eq!(
        lens(&boundaries(&data)),
        vec![MAX_CHUNK_SIZE, MIN_CHUNK_SIZE + 10]
    );
}

/// A byte with a low gear entry right where hashing starts would end the chunk at 8128
/// bytes under the legacy behaviour; the reference (hf_xet 1.8.0) does not, and neither
/// do we. The file hash below was produced by `hf_xet.hash_files` on this input.
#[test]
fn reference_rejects_short_matches() {
    let data = short_match_input();
    let ends = boundaries(&data);
    let legacy = legacy_boundaries(draft_table(), &data);
    assert_eq!(
        legacy[0],
        MIN_CHUNK_SIZE - 64,
        "the input does exercise the nuance"
    );
    assert_ne!(ends, legacy);
    assert_eq!(ends, draft_boundaries(draft_table(), &data));
    check_invariants(&data, &ends);
    assert_eq!(lens(&ends)[..3], [29_733, 131_072, 24_067]);
    assert_eq!(
        xet_chunk::file_hash(&data).hex(),
        "cc064b802e8d1760f6b1d50e447662a47a853281f58ddd36710a70c7c3e3b5f0"
    );
}

/// The golden vectors themselves rule the legacy behaviour out: on some corpus files it
/// cuts differently from what the reference recorded.
#[test]
fn legacy_behaviour_disagrees_with_golden_vectors() {
    let mut differing = Vec::new();
    for (corpus, golden) in xet_testdata::golden_files() {
        let data = corpus.bytes();
        let want: Vec<usize> = golden
            .chunks
            .iter()
            .map(|c| (c.offset + c.len) as usize)
            .collect();
        assert_eq!(
            draft_boundaries(draft_table(), &data),
            want,
            "{}: draft",
            golden.name
        );
        if legacy_boundaries(draft_table(), &data) != want {
            differing.push(golden.name);
        }
    }
    assert!(
        !differing.is_empty(),
        "no golden file tells the behaviours apart"
    );
    println!("legacy behaviour contradicted by: {differing:?}");
}

/// 8127 zeros, then a byte whose gear entry has its top 16 bits clear, then random bytes;
/// the same pattern after the first boundary too.
fn short_match_input() -> Vec<u8> {
    let low = low_entry_bytes();
    assert!(!low.is_empty());
    let mut data = vec![0u8; MIN_CHUNK_SIZE - 65];
    data.push(low[0]);
    data.extend(random(300_000, 77));
    data
}

#[test]
fn find_matches_reports_exactly_the_window_matches() {
    let data = boundary_rich(3, 200, 2, 60_000);
    let all = brute_force_matches(&data);
    assert!(all.len() > 50, "input has many matches");
    assert_eq!(find_matches(&data, 0..data.len()), all);
    // Ranges starting or ending right at a match, including the first full window.
    for &p in all.iter().take(60) {
        assert_eq!(find_matches(&data, p - 1..p), vec![p]);
        assert!(find_matches(&data, p..p + 1).iter().all(|&q| q == p + 1));
        assert!(!find_matches(&data, p - 1..data.len()).is_empty());
        assert_eq!(find_matches(&data, p - 1..data.len())[0], p);
        assert_eq!(find_matches(&data, 0..p).last(), Some(&p));
    }
    assert!(find_matches(&data, 0..63).is_empty());
    assert!(find_matches(&data, 10..10).is_empty());
}

#[test]
fn find_matches_after_sees_windows_across_the_split() {
    let data = boundary_rich(3, 200, 2, 60_000);
    let all = brute_force_matches(&data);
    // Split right before, at and after matches (windows straddle the split), at the very
    // start (window not yet full) and with a `before` longer than one window.
    let splits: Vec<usize> = all
        .iter()
        .take(20)
        .flat_map(|&p| [p - 64, p - 63, p - 1, p])
        .chain([0, 1, 62, 63, 64, 100, data.len()])
        .collect();
    for split in splits {
        let (before, after) = data.split_at(split);
        let got: Vec<usize> = find_matches_after(before, after, 0..after.len())
            .into_iter()
            .map(|p| p + split)
            .collect();
        let want: Vec<usize> = all.iter().copied().filter(|&p| p > split).collect();
        assert_eq!(got, want, "split at {split}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn fast_path_equals_draft_on_random_data(seed in any::<u64>(), len in 0usize..700_000) {
        let data = random(len, seed);
        let ends = boundaries(&data);
        check_invariants(&data, &ends);
        prop_assert_eq!(ends, draft_boundaries(draft_table(), &data));
    }

    #[test]
    fn fast_path_equals_draft_with_many_boundaries(
        seed in any::<u64>(),
        pad in 0usize..3000,
        low_density in 0u32..4,
        len in 0usize..900_000,
    ) {
        let data = boundary_rich(seed, pad, low_density, len);
        let ends = boundaries(&data);
        check_invariants(&data, &ends);
        prop_assert_eq!(ends, draft_boundaries(draft_table(), &data));
    }

    #[test]
    fn parallel_matches_equal_one_shot(
        seed in any::<u64>(),
        rich in any::<bool>(),
        pad in 0usize..20_000,
        len in 0usize..1_200_000,
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..5),
    ) {
        let data = if rich { boundary_rich(seed, pad, 1, len) } else { random(len, seed) };
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(len + 1)).collect();
        cuts.extend([0, len]);
        cuts.sort_unstable();
        let matches: Vec<usize> =
            cuts.windows(2).flat_map(|w| find_matches(&data, w[0]..w[1])).collect();
        prop_assert_eq!(&matches, &find_matches(&data, 0..len));
        prop_assert_eq!(boundaries_from_matches(&matches, len), chunk_boundaries(&data));
    }

    #[test]
    fn streaming_equals_one_shot(
        seed in any::<u64>(),
        len in 0usize..1_500_000,
        sizes in prop::collection::vec(prop_oneof![1usize..70, 1usize..9000, 1usize..400_000], 1..12),
    ) {
        let data = random(len, seed);
        let want = chunk_boundaries(&data);
        prop_assert_eq!(&streamed(&data, &sizes), &want);

        let mut sc = StreamChunker::new();
        let mut got = Vec::new();
        let (mut pos, mut k) = (0, 0);
        while pos < data.len() {
            let end = (pos + sizes[k % sizes.len()]).min(data.len());
            k += 1;
            sc.push_with(&data[pos..end], |off, c| {
                assert_eq!(&data[off as usize..off as usize + c.len()], c);
                got.push(off as usize + c.len());
            });
            pos = end;
        }
        sc.finish_with(|off, c| {
            assert_eq!(&data[off as usize..], c);
            got.push(data.len());
        });
        prop_assert_eq!(sc.offset() as usize, data.len());
        prop_assert_eq!(got, want);
    }
}

#[test]
fn stream_chunker_owned_chunks_and_hashes() {
    let data = random(1_000_000, 9);
    let mut sc = StreamChunker::new();
    let mut chunks = Vec::new();
    for b in data.chunks(100_000) {
        chunks.extend(sc.push(b));
    }
    chunks.extend(sc.finish());
    let infos = chunk_data(&data);
    assert_eq!(chunks.len(), infos.len());
    for (c, info) in chunks.iter().zip(&infos) {
        assert_eq!(&data[info.range()], &c[..]);
        assert_eq!(xet_hash::chunk_hash(c), info.hash);
    }
    assert_eq!(chunks.concat(), data);
}
