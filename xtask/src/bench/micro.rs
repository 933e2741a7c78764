//! Group `micro`: in-process micro benchmarks of the format crates, one thread unless a
//! row says otherwise. Each row's CPU time is the measuring thread's (or threads') time
//! on a CPU, from `/proc/thread-self/schedstat` (nanoseconds), so a row slowed by another
//! process taking the core shows it: wall time above CPU time.

use super::inputs::Setup;
use super::measure::Sample;
use super::proc::thread_cpu_secs;
use super::report::Row;
use anyhow::Result;
use std::time::Instant;
use xet_testdata::{Kind, generate};

/// Bytes each row goes over (the text and float32 compression rows a quarter, the xorb
/// rows at most 48 MiB).
const SIZE: usize = 256 << 20;

/// Chunk size of the xorb rows: the chunker's average, so a xorb holds the usual count.
const CHUNK: usize = 64 * 1024;

/// Run `f` once on this thread: its result, wall seconds and CPU seconds.
fn timed<T>(f: impl FnOnce() -> T) -> Result<(T, f64, f64)> {
    let cpu = thread_cpu_secs()?;
    let t = Instant::now();
    let out = std::hint::black_box(f());
    let secs = t.elapsed().as_secs_f64();
    Ok((out, secs, thread_cpu_secs()? - cpu))
}

struct Rows(Vec<Row>);

impl Rows {
    /// Measure `f` over `bytes` as the row `name`, returning what `f` returned.
    fn add<T>(&mut self, name: &str, bytes: usize, f: impl FnOnce() -> T) -> Result<T> {
        let (out, secs, cpu_secs) = timed(f)?;
        self.0.push(row(name.to_string(), bytes, secs, cpu_secs));
        Ok(out)
    }
}

/// A row of `bytes` in `secs`, `cpu_secs` on a CPU.
fn row(name: String, bytes: usize, secs: f64, cpu_secs: f64) -> Row {
    let s = Sample {
        secs,
        peak_rss_kib: 0,
        cpu_secs,
    };
    Row::xet(name, bytes as u64, s)
}

pub fn rows(_: &Setup) -> Result<Vec<Row>> {
    let data = generate(Kind::Random, SIZE, 42);
    let mut rows = Rows(Vec::new());
    chunking(&mut rows, &data)?;
    xorbs(&mut rows, &data, SIZE)?;
    Ok(rows.0)
}

/// The chunker's scan and boundary selection, the ways the pipelines call them.
fn chunking(rows: &mut Rows, data: &[u8]) -> Result<()> {
    let len = data.len();
    let ends = rows.add("chunking (gearhash CDC, 1 thread)", len, || {
        xet_chunk::chunk_boundaries(data)
    })?;
    rows.add(
        "chunk scan, every match (scan::matches, 1 thread)",
        len,
        || {
            let mut out = Vec::new();
            xet_chunk::scan::matches(0, data, 0, &mut out);
            out.len()
        },
    )?;
    rows.add("chunk matches (find_matches, 1 thread)", len, || {
        xet_chunk::find_matches(data, 0..len).len()
    })?;
    rows.add(
        "chunking streamed in 1 MiB blocks (Chunker, 1 thread)",
        len,
        || {
            let mut c = xet_chunk::Chunker::new();
            let mut k = 0;
            for block in data.chunks(1 << 20) {
                let mut rest = block;
                while let Some(n) = c.next_boundary(rest) {
                    k += 1;
                    rest = &rest[n..];
                }
            }
            k + usize::from(c.finish().is_some())
        },
    )?;
    two_thread_chunking(rows, data)?;
    rows.add(
        "chunking + chunk hashes (chunk_data, 1 thread)",
        len,
        || xet_chunk::chunk_data(data).len(),
    )?;
    let hashes = rows.add("chunk hashing (blake3, 1 thread)", len, || {
        let mut start = 0;
        let mut hashes = Vec::with_capacity(ends.len());
        for &e in &ends {
            hashes.push((xet_hash::chunk_hash(&data[start..e]), (e - start) as u64));
            start = e;
        }
        hashes
    })?;
    std::hint::black_box(xet_hash::file_hash(&hashes));
    Ok(())
}

/// `find_matches` over two halves on two threads, then one boundary selection: how the
/// upload reader chunks a block. CPU is both threads' plus the selection's.
fn two_thread_chunking(rows: &mut Rows, data: &[u8]) -> Result<()> {
    let len = data.len();
    let half = len / 2;
    let t = Instant::now();
    let (a, b) = std::thread::scope(|s| {
        let half_on_a_thread = |range: std::ops::Range<usize>| {
            s.spawn(move || timed(|| xet_chunk::find_matches(data, range)))
        };
        let a = half_on_a_thread(0..half);
        let b = half_on_a_thread(half..len);
        (a.join(), b.join())
    });
    let (a, b) = (
        a.map_err(|_| anyhow::anyhow!("a chunking thread panicked"))??,
        b.map_err(|_| anyhow::anyhow!("a chunking thread panicked"))??,
    );
    let matches: Vec<usize> = a.0.into_iter().chain(b.0).collect();
    let (_, _, select_cpu) = timed(|| xet_chunk::boundaries_from_matches(&matches, len).len())?;
    rows.0.push(row(
        "chunking, find_matches on 2 threads + selection".into(),
        len,
        t.elapsed().as_secs_f64(),
        a.2 + b.2 + select_cpu,
    ));
    Ok(())
}

/// Chunk compression, the scheme predictor, building and verifying xorbs.
fn xorbs(rows: &mut Rows, random: &[u8], size: usize) -> Result<()> {
    let text = generate(Kind::Text, size / 4, 43);
    let floats = generate(Kind::Float32, size / 4, 44);
    for (name, buf) in [("random", random), ("text", &text), ("float32", &floats)] {
        let ends = xet_chunk::chunk_boundaries(buf);
        rows.add(
            &format!("xorb chunk compression ({name}, auto scheme, 1 thread)"),
            buf.len(),
            || -> Result<()> {
                let mut start = 0;
                for &e in &ends {
                    std::hint::black_box(xet_xorb::serialize_chunk_auto(&buf[start..e], None)?);
                    start = e;
                }
                Ok(())
            },
        )??;
    }
    let xorb_input = &random[..random.len().min(48 << 20)];
    rows.add(
        "scheme predictor (choose_scheme, random, 1 thread)",
        random.len(),
        || {
            for c in random.chunks(CHUNK) {
                std::hint::black_box(xet_xorb::choose_scheme(c));
            }
        },
    )?;
    rows.add(
        "scheme predictor histograms, scalar (16 KiB of each 64 KiB, 1 thread)",
        random.len(),
        || {
            for c in random.chunks(CHUNK) {
                std::hint::black_box(xet_xorb::popcount_histograms_scalar(
                    &c[..c.len().min(16 << 10)],
                ));
            }
        },
    )?;
    let x = rows.add(
        "xorb build (XorbBuilder, random 64 KiB chunks, 1 thread)",
        xorb_input.len(),
        || -> Result<xet_xorb::Xorb> {
            let mut b = xet_xorb::XorbBuilder::new();
            for c in xorb_input.chunks(CHUNK) {
                b.add_chunk(c)?;
            }
            Ok(b.finish()?)
        },
    )??;
    rows.add(
        "xorb verify (verify_body, random, 1 thread)",
        xorb_input.len(),
        || xet_xorb::verify_body(x.body(), Some(&x.hash()), &xet_xorb::Limits::default()),
    )??;
    Ok(())
}
