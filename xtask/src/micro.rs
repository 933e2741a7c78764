//! In-process micro benchmarks of the format crates: (name, bytes, seconds).

use anyhow::Result;
use std::time::Instant;

pub fn run(size: usize) -> Result<Vec<(String, u64, f64)>> {
    let data = xet_testdata::generate(xet_testdata::Kind::Random, size, 42);
    let text = xet_testdata::generate(xet_testdata::Kind::Text, size / 4, 43);
    let mut out = Vec::new();

    let t = Instant::now();
    let ends = xet_chunk::chunk_boundaries(&data);
    out.push((
        "chunking (gearhash CDC, 1 thread)".to_string(),
        size as u64,
        t.elapsed().as_secs_f64(),
    ));

    let t = Instant::now();
    let mut start = 0;
    let mut hashes = Vec::with_capacity(ends.len());
    for &e in &ends {
        hashes.push((xet_hash::chunk_hash(&data[start..e]), (e - start) as u64));
        start = e;
    }
    out.push((
        "chunk hashing (blake3, 1 thread)".to_string(),
        size as u64,
        t.elapsed().as_secs_f64(),
    ));
    std::hint::black_box(xet_hash::file_hash(&hashes));

    for (name, buf) in [("random", &data), ("text", &text)] {
        let t = Instant::now();
        let mut start = 0;
        for &e in &xet_chunk::chunk_boundaries(buf) {
            std::hint::black_box(xet_xorb::serialize_chunk_auto(&buf[start..e], None)?);
            start = e;
        }
        out.push((
            format!("xorb chunk compression ({name}, auto scheme, 1 thread)"),
            buf.len() as u64,
            t.elapsed().as_secs_f64(),
        ));
    }
    Ok(out)
}
