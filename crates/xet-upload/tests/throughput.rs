//! Throughput and memory of the pipeline. Ignored by default; run in release:
//! `cargo test --release -p xet-upload --test throughput -- --ignored --nocapture`

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use xet_cas::{ByteRange, Cas, Reconstruction, Result, XorbBody, XorbFetch};
use xet_hash::MerkleHash;
use xet_upload::{NoProgress, UploadOptions, upload};

fn peak_rss_mib() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = s.lines().find(|l| l.starts_with("VmHWM:"))?;
    Some(line.split_whitespace().nth(1)?.parse::<u64>().ok()? / 1024)
}

fn write_random(path: &Path, bytes: usize, seed: u64) {
    use std::io::Write;
    let mut f = std::io::BufWriter::new(std::fs::File::create(path).unwrap());
    let mut rng = xet_testdata::Rng::new(seed);
    let mut buf = vec![0u8; 8 << 20];
    let mut left = bytes;
    while left > 0 {
        let n = left.min(buf.len());
        rng.fill(&mut buf[..n]);
        f.write_all(&buf[..n]).unwrap();
        left -= n;
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run in release with --ignored --nocapture"]
async fn throughput_512mib_random_into_memory_store() {
    let d = tempfile::tempdir().unwrap();
    let path = d.path().join("random.bin");
    let size = 512 << 20;
    write_random(&path, size, 42);
    let store = common::memory_store().await;
    let t = Instant::now();
    let r = upload(
        store,
        &[path],
        &UploadOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(r.totals.bytes, size as u64);
    println!(
        "uploaded 512 MiB of random data into the memory store: {:.2} s, {:.0} MB/s, {} xorbs, peak RSS {:?} MiB (includes the store's copy)",
        secs,
        size as f64 / secs / 1e6,
        r.totals.xorbs_sent,
        peak_rss_mib()
    );
}

/// Stores nothing: isolates the pipeline's own memory.
struct Sink;

#[async_trait::async_trait]
impl Cas for Sink {
    async fn put_xorb(&self, _: &MerkleHash, _: XorbBody) -> Result<bool> {
        Ok(true)
    }
    async fn xorb_size(&self, _: &MerkleHash) -> Result<Option<u64>> {
        Ok(None)
    }
    async fn put_shard(&self, _: Bytes) -> Result<bool> {
        Ok(true)
    }
    async fn file_size(&self, _: &MerkleHash) -> Result<Option<u64>> {
        Ok(None)
    }
    async fn reconstruction(&self, _: &MerkleHash, _: Option<ByteRange>) -> Result<Reconstruction> {
        Ok(Reconstruction::default())
    }
    async fn fetch_xorb_range(&self, _: &XorbFetch) -> Result<Bytes> {
        Ok(Bytes::new())
    }
    async fn dedup_shard(&self, _: &MerkleHash) -> Result<Option<Bytes>> {
        Ok(None)
    }
}

#[tokio::test(flavor = "multi_thread")]
#[ignore = "benchmark: run in release with --ignored --nocapture (writes a 4 GiB file)"]
async fn memory_stays_flat_on_a_large_file() {
    let d = tempfile::tempdir().unwrap();
    let size: usize = std::env::var("XET_BENCH_GIB")
        .ok()
        .and_then(|v| v.parse::<usize>().ok())
        .unwrap_or(4)
        << 30;
    // XET_BENCH_FILE: an existing file of that size (e.g. to profile the upload alone).
    let path = match std::env::var("XET_BENCH_FILE") {
        Ok(p) => p.into(),
        Err(_) => {
            let p = d.path().join("big.bin");
            write_random(&p, size, 7);
            p
        }
    };
    let t = Instant::now();
    let r = upload(
        Arc::new(Sink),
        &[path],
        &UploadOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    .unwrap();
    let secs = t.elapsed().as_secs_f64();
    assert_eq!(r.totals.bytes, size as u64);
    let rss = peak_rss_mib().unwrap_or(0);
    println!(
        "4 GiB through the pipeline (sink CAS): {:.1} s, {:.0} MB/s, peak RSS {rss} MiB",
        secs,
        size as f64 / secs / 1e6
    );
    assert!(rss < 1024, "peak RSS {rss} MiB");
}
