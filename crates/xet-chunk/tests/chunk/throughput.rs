//! Rough speed figures; run with
//! `cargo test --release -p xet-chunk --test chunk throughput -- --ignored --nocapture`.
//!
//! Every figure is the best of [`ROUNDS`] runs, the variants interleaved, so that old and
//! new are compared under the same (noisy) machine load.

use std::time::Instant;
use xet_chunk::{
    Chunker, MASK, boundaries_from_matches, chunk_boundaries, chunk_data, find_matches, scan,
};

const ROUNDS: usize = 5;

/// `find_matches(data, 0..data.len())` as it was before `xet_chunk::scan`, on
/// `gearhash::Hasher::next_match`.
fn gearhash_find_matches(data: &[u8]) -> Vec<usize> {
    let mut out = Vec::new();
    let mut hasher = gearhash::Hasher::default();
    let mut pos = 63.min(data.len());
    hasher.update(&data[..pos]);
    while let Some(k) = hasher.next_match(&data[pos..], MASK) {
        pos += k;
        out.push(pos);
    }
    out
}

#[test]
#[ignore = "timing only; run in release"]
fn chunking_throughput() {
    const LEN: usize = 256 << 20;
    let mut data = vec![0u8; LEN];
    xet_testdata::Rng::new(1).fill(&mut data);
    let mib = LEN as f64 / (1 << 20) as f64;
    let n = chunk_boundaries(&data).len();
    assert_eq!(find_matches(&data, 0..LEN), gearhash_find_matches(&data));

    type Run<'a> = Box<dyn Fn() -> usize + 'a>;
    let runs: Vec<(&str, Run)> = vec![
        (
            "scan, every byte: gearhash next_match",
            Box::new(|| {
                let mut h = gearhash::Hasher::default();
                let (mut pos, mut m) = (0, 0);
                while let Some(k) = h.next_match(&data[pos..], MASK) {
                    pos += k;
                    m += 1;
                }
                m
            }),
        ),
        (
            "scan, every byte: scan::matches",
            Box::new(|| {
                let mut out = Vec::new();
                scan::matches(0, &data, 0, &mut out);
                out.len()
            }),
        ),
        (
            "find_matches, 1 thread: gearhash (before)",
            Box::new(|| gearhash_find_matches(&data).len()),
        ),
        (
            "find_matches, 1 thread",
            Box::new(|| find_matches(&data, 0..LEN).len()),
        ),
        (
            "boundaries: chunk_boundaries",
            Box::new(|| chunk_boundaries(&data).len()),
        ),
        (
            "boundaries: streaming in 1 MiB blocks",
            Box::new(|| {
                let mut c = Chunker::new();
                let mut k = 0;
                for block in data.chunks(1 << 20) {
                    let mut rest = block;
                    while let Some(n) = c.next_boundary(rest) {
                        k += 1;
                        rest = &rest[n..];
                    }
                }
                k + c.finish().is_some() as usize
            }),
        ),
        (
            "boundaries: find_matches on 2 threads + selection",
            Box::new(|| {
                let half = LEN / 2;
                let (a, b) = std::thread::scope(|s| {
                    let a = s.spawn(|| find_matches(&data, 0..half));
                    let b = s.spawn(|| find_matches(&data, half..LEN));
                    (a.join().unwrap(), b.join().unwrap())
                });
                let matches: Vec<usize> = a.into_iter().chain(b).collect();
                boundaries_from_matches(&matches, LEN).len()
            }),
        ),
        (
            "boundaries + chunk hashes (1 thread)",
            Box::new(|| chunk_data(&data).len()),
        ),
    ];

    let mut best = vec![f64::INFINITY; runs.len()];
    let mut results = vec![0; runs.len()];
    for _ in 0..ROUNDS {
        for (i, (_, run)) in runs.iter().enumerate() {
            let t = Instant::now();
            results[i] = std::hint::black_box(run());
            best[i] = best[i].min(t.elapsed().as_secs_f64());
        }
    }
    for (i, (name, _)) in runs.iter().enumerate() {
        println!("{name:50} {:>6} {:6.0} MiB/s", results[i], mib / best[i]);
    }
    // The full scans find the same matches; every chunking the same chunks.
    assert!(
        results[1..4].iter().all(|&m| m == results[0]),
        "{results:?}"
    );
    assert!(results[4..].iter().all(|&k| k == n), "{results:?}");
}
