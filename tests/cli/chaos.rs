//! Chaos: `xet serve` killed with SIGKILL 50 times at random moments while clients upload
//! and download through it, restarted on the same store and port each time. What must
//! hold: every upload that reported success downloads byte-identical afterwards, every
//! download that reported success was byte-identical when it did, every object in the
//! store verifies, and no temporary file survives the next start. The figures (attempts,
//! failures, kills) are printed.

use crate::common;

use common::Served;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

const KILLS: usize = 50;

fn xet() -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
    c.env_remove("XET_STORE")
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_TOKEN")
        .env("XET_STALL_TIMEOUT", "5");
    c
}

fn serve(store: &Path, listen: &str) -> Served {
    Served::spawn(
        xet()
            .args(["serve", "--listen", listen, "--store"])
            .arg(store)
            .stderr(Stdio::null()),
    )
}

/// Deterministic bytes of `n` for `seed` (distinct per upload).
fn data(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 32) as u8
        })
        .collect()
}

#[derive(Default)]
struct Figures {
    uploads: AtomicU64,
    uploads_ok: AtomicU64,
    downloads: AtomicU64,
    downloads_ok: AtomicU64,
}

/// The uploads that succeeded: hash and content.
type Uploaded = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Uploads one fresh file after another until `stop`; records the ones that succeeded.
fn uploader(
    id: u64,
    url: String,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    done: Uploaded,
    figures: Arc<Figures>,
) {
    let mut n = 0u64;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let seed = id * 1_000_000 + n;
        let bytes = data(100_000 + (seed as usize * 7919) % 2_500_000, seed);
        let path = dir.join(format!("in-{seed}"));
        std::fs::write(&path, &bytes).unwrap();
        figures.uploads.fetch_add(1, Ordering::SeqCst);
        let o = xet()
            .args(["--json", "upload", "--endpoint", &url, "--cache-dir"])
            .arg(dir.join(format!("cache-{id}")))
            .arg(&path)
            .output()
            .unwrap();
        if o.status.success() {
            let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            let hash = doc["files"][0]["hash"].as_str().unwrap().to_string();
            figures.uploads_ok.fetch_add(1, Ordering::SeqCst);
            done.lock().unwrap().push((hash, bytes));
        }
        let _ = std::fs::remove_file(&path);
    }
}

/// Downloads uploaded files until `stop`; a download that succeeds must be exact.
fn downloader(
    id: u64,
    url: String,
    dir: PathBuf,
    stop: Arc<AtomicBool>,
    done: Uploaded,
    figures: Arc<Figures>,
) {
    let mut n = 0usize;
    while !stop.load(Ordering::SeqCst) {
        n += 1;
        let pick = {
            let d = done.lock().unwrap();
            (!d.is_empty()).then(|| d[(n * 31 + id as usize) % d.len()].clone())
        };
        let Some((hash, bytes)) = pick else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        let out = dir.join(format!("out-{id}"));
        figures.downloads.fetch_add(1, Ordering::SeqCst);
        let o = xet()
            .args(["download", "--endpoint", &url, "--cache-dir"])
            .arg(dir.join(format!("dcache-{id}")))
            .args([&hash, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        if o.status.success() {
            figures.downloads_ok.fetch_add(1, Ordering::SeqCst);
            assert!(
                std::fs::read(&out).unwrap() == bytes,
                "download of {hash} reported success with wrong bytes"
            );
        }
        let _ = std::fs::remove_file(&out);
    }
}

/// Every stored object verifies with the CLI's checks.
fn verify_store(store: &Path) -> usize {
    let mut n = 0;
    for (sub, args) in [
        ("xorbs", ["xorb", "verify"]),
        ("shards", ["shard", "verify"]),
    ] {
        let Ok(entries) = std::fs::read_dir(store.join(sub)) else {
            continue;
        };
        for e in entries {
            let p = e.unwrap().path();
            let o = xet().args(args).arg(&p).output().unwrap();
            assert!(
                o.status.success(),
                "{} does not verify: {}",
                p.display(),
                String::from_utf8_lossy(&o.stdout)
            );
            n += 1;
        }
    }
    n
}

/// Files below `dir` (recursively).
pub(crate) fn files_below(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    if let Ok(entries) = std::fs::read_dir(dir) {
        for e in entries.flatten() {
            let p = e.path();
            if p.is_dir() {
                out.extend(files_below(&p));
            } else {
                out.push(p);
            }
        }
    }
    out
}

#[test]
fn fifty_kills_lose_nothing_and_store_nothing_invalid() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let first = serve(&store, "127.0.0.1:0");
    let url = first.url.clone();
    let listen = url.trim_start_matches("http://").to_string();
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(Mutex::new(Vec::new()));
    let figures = Arc::new(Figures::default());
    let mut clients = Vec::new();
    for id in 0..2u64 {
        let (u, d, s, f) = (
            url.clone(),
            tmp.path().to_path_buf(),
            stop.clone(),
            figures.clone(),
        );
        let done2 = done.clone();
        clients.push(std::thread::spawn(move || uploader(id, u, d, s, done2, f)));
        let (u, d, s, f) = (
            url.clone(),
            tmp.path().to_path_buf(),
            stop.clone(),
            figures.clone(),
        );
        let done2 = done.clone();
        clients.push(std::thread::spawn(move || {
            downloader(id, u, d, s, done2, f)
        }));
    }
    // Kill at uneven moments: 100 to 500 ms of service between kills.
    let mut server = first;
    for k in 0..KILLS {
        std::thread::sleep(Duration::from_millis(100 + (k as u64 * 37) % 400));
        drop(server); // SIGKILL (Child::kill), then wait.
        server = serve(&store, &listen);
    }
    // Let the clients finish one more round against a server that stays up.
    std::thread::sleep(Duration::from_millis(1500));
    stop.store(true, Ordering::SeqCst);
    for c in clients {
        c.join().expect("a client thread panicked");
    }
    let uploaded = done.lock().unwrap().clone();
    for (hash, bytes) in &uploaded {
        let out = tmp.path().join("final");
        let o = xet()
            .args(["download", "--endpoint", &server.url, hash, "-o"])
            .arg(&out)
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "{hash}, uploaded with success, does not download: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(std::fs::read(&out).unwrap() == *bytes, "{hash} differs");
    }
    drop(server);
    // A clean start removes what the kills left half-written.
    let last = serve(&store, &listen);
    let leftovers = files_below(&store.join("tmp"));
    drop(last);
    let objects = verify_store(&store);
    let f = &figures;
    println!(
        "chaos: {KILLS} kills; uploads {} ok of {}; downloads {} ok of {}; {} files checked after; {objects} objects verified",
        f.uploads_ok.load(Ordering::SeqCst),
        f.uploads.load(Ordering::SeqCst),
        f.downloads_ok.load(Ordering::SeqCst),
        f.downloads.load(Ordering::SeqCst),
        uploaded.len()
    );
    assert!(
        !uploaded.is_empty(),
        "no upload ever succeeded: the test proved nothing"
    );
    assert!(
        leftovers.is_empty(),
        "temporary files survived a clean start: {leftovers:?}"
    );
}
