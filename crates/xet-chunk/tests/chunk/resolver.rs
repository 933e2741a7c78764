//! The streaming match resolver equals one-shot chunking for any way of splitting the
//! input into blocks (the block-parallel scan used by `xet hash` and uploads relies on it).

use proptest::prelude::*;
use xet_chunk::{MatchResolver, chunk_boundaries, find_matches};

fn streamed(data: &[u8], cuts: &[usize]) -> Vec<usize> {
    let mut r = MatchResolver::new();
    let mut out = Vec::new();
    let mut prev = 0;
    for &c in cuts.iter().chain(std::iter::once(&data.len())) {
        let c = c.clamp(prev, data.len());
        let m = find_matches(data, prev..c).into_iter().map(|p| p as u64);
        r.push(m, c as u64, &mut out);
        prev = c;
    }
    r.finish(data.len() as u64, &mut out);
    out.into_iter().map(|x| x as usize).collect()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    #[test]
    fn resolver_equals_one_shot(seed in any::<u64>(), len in 0usize..1_200_000, mut cuts in prop::collection::vec(0usize..1_200_000, 0..12)) {
        let data = xet_testdata::generate(xet_testdata::Kind::Random, len, seed);
        cuts.sort_unstable();
        prop_assert_eq!(streamed(&data, &cuts), chunk_boundaries(&data));
    }
}

#[test]
fn zeros_and_golden_files() {
    // Zeros: no matches at all, every cut forced at the maximum.
    let z = vec![0u8; 1 << 20];
    assert_eq!(
        streamed(&z, &[100, 131_072, 131_073, 500_000]),
        chunk_boundaries(&z)
    );
    for (c, _) in xet_testdata::golden_files() {
        let d = c.bytes();
        let cuts: Vec<usize> = (1..8).map(|i| d.len() * i / 8).collect();
        assert_eq!(streamed(&d, &cuts), chunk_boundaries(&d), "{}", c.name);
    }
}
