//! Rough single-thread throughput numbers; run with
//! `cargo test -p xet-xorb --release --test xorb throughput -- --ignored --nocapture`.
//! Nothing is asserted about time.

use std::time::Instant;

use xet_testdata::{Kind, generate};
use xet_xorb::*;

const CHUNK: usize = 64 * 1024;
const TOTAL: usize = 48 << 20;

/// Best of three runs, in MB/s of uncompressed input.
fn rate(mut f: impl FnMut()) -> f64 {
    (0..3)
        .map(|_| {
            let t = Instant::now();
            f();
            TOTAL as f64 / t.elapsed().as_secs_f64() / 1e6
        })
        .fold(0.0, f64::max)
}

#[test]
#[ignore]
fn compression_throughput() {
    for (name, kind) in [
        ("text", Kind::Text),
        ("random", Kind::Random),
        ("float32", Kind::Float32),
        ("zeros", Kind::Zeros),
    ] {
        let data = generate(kind, TOTAL, 42);
        let hash = rate(|| {
            for c in data.chunks(CHUNK) {
                std::hint::black_box(xet_hash::chunk_hash(c));
            }
        });
        // What one pipeline worker does per chunk: choose, compress, hash.
        let serialize = rate(|| {
            for c in data.chunks(CHUNK) {
                std::hint::black_box(serialize_chunk_auto(c, None).unwrap());
            }
        });
        let mut x = None;
        let build = rate(|| {
            let mut b = XorbBuilder::new();
            for c in data.chunks(CHUNK) {
                b.add_chunk(c).unwrap();
            }
            x = Some(b.finish().unwrap());
        });
        let x = x.unwrap();
        let verify = rate(|| {
            verify_body(x.body(), Some(&x.hash()), &Limits::default()).unwrap();
        });
        let schemes: Vec<_> = CompressionScheme::ALL
            .iter()
            .map(|s| x.info().chunks.iter().filter(|c| c.scheme == *s).count())
            .collect();
        eprintln!(
            "{name:8} serialize_chunk_auto {serialize:5.0} MB/s, XorbBuilder {build:5.0} MB/s, verify_body {verify:5.0} MB/s \
             (chunk hashing alone {hash:5.0} MB/s); size ratio {:.3}, chunks none/lz4/bg4 {schemes:?}",
            x.body().len() as f64 / TOTAL as f64,
        );
    }
}

/// The scheme predictor's histograms over 16 KiB samples of each 64 KiB chunk, the
/// vectorised way and the plain way.
#[test]
#[ignore]
fn predictor_throughput() {
    let data = generate(Kind::Random, TOTAL, 7);
    for (name, f) in [
        (
            "popcount_histograms",
            popcount_histograms as fn(&[u8]) -> [[u32; 9]; 4],
        ),
        ("popcount_histograms_scalar", popcount_histograms_scalar),
    ] {
        let r = rate(|| {
            for c in data.chunks(CHUNK) {
                std::hint::black_box(f(&c[..16 * 1024]));
            }
        });
        println!("{name}: {r:.0} MB/s of chunk data (16 KiB sampled per 64 KiB chunk)");
    }
    let r = rate(|| {
        for c in data.chunks(CHUNK) {
            std::hint::black_box(choose_scheme(c));
        }
    });
    println!("choose_scheme: {r:.0} MB/s of chunk data");
}
