//! Rough speed figures; run with
//! `cargo test --release -p xet-chunk --test throughput -- --ignored --nocapture`.

use std::time::Instant;
use xet_chunk::{Chunker, boundaries_from_matches, chunk_boundaries, chunk_data, find_matches};

#[test]
#[ignore = "timing only; run in release"]
fn chunking_throughput() {
    const LEN: usize = 256 << 20;
    let mut data = vec![0u8; LEN];
    xet_testdata::Rng::new(1).fill(&mut data);
    let mib = LEN as f64 / (1 << 20) as f64;

    let t = Instant::now();
    let n = chunk_boundaries(&data).len();
    let s = t.elapsed().as_secs_f64();
    println!("boundaries only: {n} chunks, {:.0} MiB/s", mib / s);

    // The plain gear scan over every byte, for comparison with the skip-ahead chunker.
    let t = Instant::now();
    let mut h = gearhash::Hasher::default();
    let mut pos = 0;
    let mut m = 0;
    while let Some(k) = h.next_match(&data[pos..], xet_chunk::MASK) {
        pos += k;
        m += 1;
    }
    let s = t.elapsed().as_secs_f64();
    println!(
        "raw gearhash next_match over all bytes: {m} matches, {:.0} MiB/s",
        mib / s
    );

    let t = Instant::now();
    let mut c = Chunker::new();
    let mut k = 0;
    for block in data.chunks(1 << 20) {
        let mut rest = block;
        while let Some(n) = c.next_boundary(rest) {
            k += 1;
            rest = &rest[n..];
        }
    }
    k += c.finish().is_some() as usize;
    let s = t.elapsed().as_secs_f64();
    assert_eq!(k, n);
    println!("streaming in 1 MiB blocks: {:.0} MiB/s", mib / s);

    let t = Instant::now();
    let half = LEN / 2;
    let (a, b) = std::thread::scope(|s| {
        let a = s.spawn(|| find_matches(&data, 0..half));
        let b = s.spawn(|| find_matches(&data, half..LEN));
        (a.join().unwrap(), b.join().unwrap())
    });
    let matches: Vec<usize> = a.into_iter().chain(b).collect();
    let ends = boundaries_from_matches(&matches, LEN);
    let s = t.elapsed().as_secs_f64();
    assert_eq!(ends.len(), n);
    println!(
        "find_matches on 2 threads + selection: {:.0} MiB/s",
        mib / s
    );

    let t = Instant::now();
    let infos = chunk_data(&data);
    let s = t.elapsed().as_secs_f64();
    assert_eq!(infos.len(), n);
    println!("boundaries + chunk hashes (1 thread): {:.0} MiB/s", mib / s);
}
