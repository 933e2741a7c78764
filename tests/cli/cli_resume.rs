//! Black-box resume and stall behaviour of the real `xet` binary against a real
//! `xet serve` on loopback, through a real TCP proxy (`xet_testdata::proxy`) that logs
//! every request (method, path, Range, body bytes each way) and injects faults: canned
//! statuses, requests or answers that stop mid-body and go silent with the connection
//! open. `xet upload` / `xet download` are SIGKILLed mid-transfer and rerun; the rerun
//! must finish with the right bytes and send or fetch only what the first run did not
//! complete.

use crate::common;

use common::Served;
use std::collections::BTreeMap;
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};
use xet_testdata::proxy::{Cut, Fault, Match, Proxy, Seen};

const MIB: usize = 1 << 20;

// Routes as `xet serve` answers them (see xet-server's route table).
const GRANTS: &str = "/v1/xorb-grants/";
const GRANT_PUT: &str = "/_grant-upload/";
const COMMITS: &str = "/v1/xorb-commits/";
const XORBS: &str = "/v1/xorbs/";
const SHARDS: &str = "/v2/shards";
const XORB_DATA: &str = "/_xorb/";

// ---------------------------------------------------------------------------------------
// Helpers

/// `xet serve --listen 127.0.0.1:0` on a store directory; killed on drop.
struct Serve {
    _served: Served,
    url: String,
    store: PathBuf,
}

impl Serve {
    fn start(store: &Path) -> Serve {
        let served = Served::spawn(
            Command::new(env!("CARGO_BIN_EXE_xet"))
                .args(["serve", "--listen", "127.0.0.1:0", "--store"])
                .arg(store)
                .stderr(Stdio::null()),
        );
        Serve {
            url: served.url.clone(),
            _served: served,
            store: store.to_path_buf(),
        }
    }

    /// Xorb hashes in the store (`xorbs/<hash>`).
    fn xorbs(&self) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(self.store.join("xorbs"))
            .map(|d| {
                d.filter_map(|e| e.ok())
                    .map(|e| e.file_name().to_string_lossy().into_owned())
                    .collect()
            })
            .unwrap_or_default();
        v.sort();
        v
    }
}

fn xet(args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
    c.args(args)
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_TOKEN")
        .env_remove("XET_STORE")
        .env_remove("XET_CACHE")
        .env_remove("XET_STALL_TIMEOUT");
    c
}

fn json_ok(what: &str, o: &Output) -> serde_json::Value {
    assert!(
        o.status.success(),
        "{what}: {:?}\n{}",
        o.status,
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| {
        panic!(
            "{what}: stdout is not JSON ({e}): {}",
            String::from_utf8_lossy(&o.stdout)
        )
    })
}

/// Poll `f` every 20 ms until it is true; false after `secs`.
fn wait_for(secs: u64, mut f: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + Duration::from_secs(secs);
    while Instant::now() < end {
        if f() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    f()
}

/// SIGKILL, and check it was the kill that ended the process.
fn sigkill(mut child: Child, what: &str) {
    if let Some(status) = child.try_wait().unwrap() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = e.read_to_string(&mut err);
        }
        panic!("{what} ended before it could be killed: {status:?}\n{err}");
    }
    child.kill().unwrap();
    let status = child.wait().unwrap();
    assert!(!status.success(), "{what}: {status:?}");
}

/// Write seeded random files; returns their paths.
fn random_files(dir: &Path, sizes: &[usize], seed: u64) -> Vec<PathBuf> {
    std::fs::create_dir_all(dir).unwrap();
    sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| {
            let p = dir.join(format!("f{i}.bin"));
            let data = xet_testdata::generate(xet_testdata::Kind::Random, n, seed + i as u64);
            std::fs::write(&p, data).unwrap();
            p
        })
        .collect()
}

/// `xet hash --json`: path → hash.
fn hashes(files: &[PathBuf]) -> BTreeMap<String, String> {
    let mut c = xet(&["--json", "hash"]);
    c.args(files);
    let doc = json_ok("xet hash", &c.output().unwrap());
    doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["hash"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

fn upload_hashes(doc: &serde_json::Value) -> BTreeMap<String, String> {
    doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_string(),
                f["hash"].as_str().unwrap().to_string(),
            )
        })
        .collect()
}

/// Download `hash` from `endpoint` to `dest` and compare with `src`.
fn check_download(endpoint: &str, hash: &str, src: &Path, dest: &Path, cache: &Path) {
    let o = xet(&["download", "--endpoint", endpoint, hash, "-o"])
        .arg(dest)
        .arg("--cache-dir")
        .arg(cache)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::read(dest).unwrap() == std::fs::read(src).unwrap(),
        "{} differs from {}",
        dest.display(),
        src.display()
    );
}

/// The upload resume journal (`<cache>/upload/<endpoint id>/xorb-journal`): hash → body length.
fn upload_journal(cache: &Path) -> BTreeMap<String, u64> {
    let mut out = BTreeMap::new();
    let Ok(dirs) = std::fs::read_dir(cache.join("upload")) else {
        return out;
    };
    for d in dirs.flatten() {
        let Ok(text) = std::fs::read_to_string(d.path().join("xorb-journal")) else {
            continue;
        };
        for l in text.lines() {
            if let Some((h, n)) = l.split_once(' ')
                && let (64, Ok(n)) = (h.len(), n.trim().parse())
            {
                out.insert(h.to_string(), n);
            }
        }
    }
    out
}

/// Whole terms recorded in a download journal (`<dest>.part.jsonl`): (offset, len).
fn download_journal(dest: &Path) -> Vec<(u64, u64)> {
    let p = PathBuf::from(format!("{}.part.jsonl", dest.display()));
    let Ok(text) = std::fs::read_to_string(p) else {
        return Vec::new();
    };
    text.lines()
        .skip(1)
        .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
        .filter_map(|v| Some((v["offset"].as_u64()?, v["len"].as_u64()?)))
        .collect()
}

/// Bytes asked for by a `Range: bytes=a-b[,c-d...]` header.
fn range_len(r: &str) -> u64 {
    r.trim_start_matches("bytes=")
        .split(',')
        .map(|p| {
            let (a, b) = p.trim().split_once('-').unwrap();
            b.parse::<u64>().unwrap() - a.parse::<u64>().unwrap() + 1
        })
        .sum()
}

fn hash_in_path(path: &str) -> String {
    // .../default/<hash>[/grant/<id>]
    path.split('/')
        .find(|s| s.len() == 64 && s.bytes().all(|b| b.is_ascii_hexdigit()))
        .unwrap_or_default()
        .to_string()
}

// ---------------------------------------------------------------------------------------
// Tests

/// Issue #4: an upload killed after some xorbs were stored resumes without sending
/// them again.
#[test]
fn killed_upload_resumes_without_resending_stored_xorbs() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let server = Serve::start(&tmp.path().join("store"));
    let proxy = Proxy::start(&server.url);
    // Three xorbs (64 MiB, 64 MiB, the rest) across two files.
    let files = random_files(&tmp.path().join("corpus"), &[90 * MIB, 50 * MIB], 4000);
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let expected = hashes(&files);
    let cache = tmp.path().join("cache");

    // The first xorb body goes through; every later one stops after 4 MiB and hangs,
    // so the process is killed while those uploads are in flight.
    proxy.pass(Match::method("PUT", GRANT_PUT), 1);
    proxy.inject(
        Match::method("PUT", GRANT_PUT),
        Fault::StallRequest { after: 4 << 20 },
        usize::MAX,
    );
    let upload = || {
        let mut c = xet(&["--json", "upload", "--endpoint", &proxy.url, "--cache-dir"]);
        c.arg(&cache).args(&files);
        c
    };
    let child = upload()
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = wait_for(60, || {
        upload_journal(&cache).len() == 1 && proxy.held() >= 1
    });
    assert!(
        ready,
        "no xorb journaled with another in flight: {:?}",
        proxy.log()
    );
    sigkill(child, "xet upload");
    let journal = upload_journal(&cache);
    let stored_before = server.xorbs();
    assert_eq!(journal.len(), 1, "{journal:?}");
    for h in journal.keys() {
        assert!(stored_before.contains(h), "journaled xorb {h} is stored");
    }
    assert_eq!(
        stored_before.len(),
        1,
        "half-sent xorbs are not stored: {stored_before:?}"
    );
    assert_eq!(proxy.count("POST", SHARDS), 0, "killed before any shard");
    let run1_puts = proxy.count("PUT", GRANT_PUT);
    assert!(run1_puts >= 2, "{run1_puts} xorb uploads started");

    // Rerun the same command.
    proxy.clear();
    proxy.clear_log();
    let t2 = Instant::now();
    let doc = json_ok("rerun", &upload().output().unwrap());
    let run2_secs = t2.elapsed().as_secs_f64();
    assert_eq!(upload_hashes(&doc), expected, "same hashes as `xet hash`");
    let stored = server.xorbs();
    let t = &doc["totals"];
    assert_eq!(t["xorbs_resumed"], 1, "{t}");
    assert_eq!(
        t["xorbs_sent"].as_u64().unwrap() as usize,
        stored.len() - 1,
        "{t}"
    );
    assert!(stored.len() >= 3, "{stored:?}");
    for h in journal.keys() {
        for (m, route) in [("POST", GRANTS), ("POST", XORBS), ("POST", COMMITS)] {
            let n = proxy
                .matching(m, route)
                .iter()
                .filter(|s| hash_in_path(&s.path) == *h)
                .count();
            assert_eq!(n, 0, "{m} {route} for the already stored xorb {h}");
        }
        let heads = proxy
            .matching("HEAD", XORBS)
            .iter()
            .filter(|s| hash_in_path(&s.path) == *h)
            .count();
        assert_eq!(heads, 1, "the journaled xorb is checked once");
    }
    // Every other xorb is sent exactly once, and only those bytes.
    let commits: Vec<String> = proxy
        .matching("POST", COMMITS)
        .iter()
        .map(|s| hash_in_path(&s.path))
        .collect();
    let mut unique = commits.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(commits.len(), unique.len(), "{commits:?}");
    assert_eq!(commits.len(), stored.len() - 1);
    // Counted by the bodies the server took: on a loaded machine a body can fail and
    // be sent again (the full suite once saw 9 uploads for 8 xorbs), which is a retry,
    // not a resend of a stored xorb (checked above).
    let puts = proxy.matching("PUT", GRANT_PUT);
    let taken: Vec<&Seen> = puts
        .iter()
        .filter(|s| (200..300).contains(&s.status))
        .collect();
    assert_eq!(taken.len(), stored.len() - 1, "{puts:#?}");
    let put_bytes: u64 = taken.iter().map(|s| s.request_bytes).sum();
    assert_eq!(
        put_bytes,
        t["xorb_bytes_sent"].as_u64().unwrap(),
        "{puts:#?}"
    );
    let journaled: u64 = journal.values().sum();
    assert!(
        put_bytes + journaled >= total && put_bytes + journaled < total + total / 100,
        "run 2 sent {put_bytes} bytes, run 1 stored {journaled}, the corpus is {total}"
    );
    assert!(
        upload_journal(&cache).is_empty(),
        "the journal is tidied after success"
    );

    for (i, f) in files.iter().enumerate() {
        let h = &expected[&f.display().to_string()];
        let dest = tmp.path().join(format!("out{i}"));
        check_download(&server.url, h, f, &dest, &tmp.path().join("dl-cache"));
    }
    eprintln!(
        "upload resume: {} xorbs, run 1 stored {journaled} bytes ({run1_puts} PUTs started), \
         run 2 sent {put_bytes} bytes in {run2_secs:.1}s; test took {:.1}s",
        stored.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Upload `files` straight to the server (no proxy); returns the JSON report.
fn upload_direct(server: &Serve, files: &[PathBuf], cache: &Path) -> serde_json::Value {
    let mut c = xet(&["--json", "upload", "--endpoint", &server.url, "--cache-dir"]);
    c.arg(cache).args(files);
    json_ok("upload", &c.output().unwrap())
}

fn part_files(dir: &Path) -> Vec<String> {
    std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".part"))
        .collect()
}

/// Issue #5: a download killed mid-way completes when rerun, and the rerun fetches only
/// the terms the first run did not record.
#[test]
fn killed_download_resumes_and_fetches_only_what_is_missing() {
    let started = Instant::now();
    let tmp = tempfile::tempdir().unwrap();
    let server = Serve::start(&tmp.path().join("store"));
    let src = random_files(&tmp.path().join("src"), &[150 * MIB], 5000).remove(0);
    let size = std::fs::metadata(&src).unwrap().len();
    let doc = upload_direct(&server, std::slice::from_ref(&src), &tmp.path().join("up"));
    let hash = doc["files"][0]["hash"].as_str().unwrap().to_string();
    let xorbs = server.xorbs();
    assert!(xorbs.len() >= 3, "several xorbs, so several terms");

    let proxy = Proxy::start(&server.url);
    // One xorb's ranges arrive whole (all its requests: a large range is fetched in
    // parts); every other request stops after 1 MiB and hangs.
    let whole = format!("{XORB_DATA}default/{}", xorbs[0]);
    proxy.pass(Match::method("GET", &whole), usize::MAX);
    proxy.inject(
        Match::method("GET", XORB_DATA),
        Fault::StallResponse(Cut::After(1 << 20)),
        usize::MAX,
    );
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let dest = out.join("f.bin");
    let download = |cache: &str| {
        let mut c = xet(&["--json", "download", "--endpoint", &proxy.url, &hash, "-o"]);
        c.arg(&dest).arg("--cache-dir").arg(tmp.path().join(cache));
        c
    };
    let child = download("c1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let ready = wait_for(60, || {
        !download_journal(&dest).is_empty() && proxy.held() >= 1
    });
    assert!(ready, "no term journaled: {:?}", proxy.log());
    sigkill(child, "xet download");
    let terms = download_journal(&dest);
    let done: u64 = terms.iter().map(|t| t.1).sum();
    assert!(done > 0 && done < size, "run 1 recorded {done} of {size}");
    assert!(!dest.exists(), "nothing at the destination yet");
    let run1_bytes: u64 = proxy
        .matching("GET", XORB_DATA)
        .iter()
        .map(|s| s.response_bytes)
        .sum();

    // Rerun with a fresh chunk cache: only the journal can save fetches.
    proxy.clear();
    proxy.clear_log();
    let t2 = Instant::now();
    let doc = json_ok("rerun", &download("c2").output().unwrap());
    let run2_secs = t2.elapsed().as_secs_f64();
    assert!(std::fs::read(&dest).unwrap() == std::fs::read(&src).unwrap());
    assert_eq!(
        part_files(&out),
        Vec::<String>::new(),
        "no .part files left"
    );
    let f = &doc["files"][0];
    assert_eq!(f["bytes_resumed"], done, "{f}");
    assert_eq!(f["bytes_from_cache"], 0, "{f}");

    let gets = proxy.matching("GET", XORB_DATA);
    let asked: u64 = gets.iter().map(|s| range_len(s.range().unwrap())).sum();
    let got: u64 = gets.iter().map(|s| s.response_bytes).sum();
    assert_eq!(got, asked);
    assert_eq!(f["bytes_fetched"], got, "{f}");
    let missing = size - done;
    // Serialized xorb data is the chunk data plus 8-byte chunk headers (random data is
    // stored uncompressed), so the missing bytes plus well under 1%.
    assert!(
        asked >= missing && asked <= missing + missing / 512 + (64 << 10),
        "run 2 asked for {asked} bytes; {missing} were missing"
    );
    // No byte of a xorb asked for twice (a large range comes in several parts).
    let mut ranges: Vec<(&str, u64, u64)> = gets
        .iter()
        .map(|s| {
            let (a, b) = s
                .range()
                .unwrap()
                .trim_start_matches("bytes=")
                .split_once('-')
                .unwrap();
            (s.path.as_str(), a.parse().unwrap(), b.parse().unwrap())
        })
        .collect();
    ranges.sort();
    assert!(
        ranges
            .windows(2)
            .all(|w| w[0].0 != w[1].0 || w[0].2 < w[1].1),
        "a xorb range asked for twice: {ranges:?}"
    );
    eprintln!(
        "download resume: {size} bytes; run 1 recorded {done} bytes in {} terms \
         ({run1_bytes} bytes arrived); run 2 fetched {asked} bytes in {} requests, {run2_secs:.1}s; \
         test took {:.1}s",
        terms.len(),
        gets.len(),
        started.elapsed().as_secs_f64()
    );
}

/// Upload one small file and serve it through a proxy; returns (server, proxy, src, hash).
fn small_file_behind_proxy(tmp: &Path, size: usize, seed: u64) -> (Serve, Proxy, PathBuf, String) {
    let server = Serve::start(&tmp.join("store"));
    let src = random_files(&tmp.join("src"), &[size], seed).remove(0);
    let doc = upload_direct(&server, std::slice::from_ref(&src), &tmp.join("up"));
    let hash = doc["files"][0]["hash"].as_str().unwrap().to_string();
    let proxy = Proxy::start(&server.url);
    (server, proxy, src, hash)
}

/// Issue #5: answers that stop mid-body are cut after the stall limit and retried; the
/// download completes.
#[test]
fn stalled_bodies_are_retried_and_the_download_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, proxy, src, hash) = small_file_behind_proxy(tmp.path(), 3 * MIB, 6000);
    proxy.inject(
        Match::method("GET", XORB_DATA),
        Fault::StallResponse(Cut::After(1 << 20)),
        2,
    );
    let dest = tmp.path().join("f.bin");
    let start = Instant::now();
    let o = xet(&["--json", "download", "--stall-timeout", "1", "--endpoint"])
        .arg(&proxy.url)
        .arg(&hash)
        .arg("-o")
        .arg(&dest)
        .arg("--cache-dir")
        .arg(tmp.path().join("c"))
        .output()
        .unwrap();
    let took = start.elapsed();
    json_ok("download", &o);
    assert!(std::fs::read(&dest).unwrap() == std::fs::read(&src).unwrap());
    let gets = proxy.matching("GET", XORB_DATA);
    // Two stalled answers, then a whole one (a retry more if the machine is very busy).
    assert!((3..=5).contains(&gets.len()), "{gets:?}");
    assert!(gets[..2].iter().all(|s| s.response_bytes == 1 << 20));
    let last = gets.last().unwrap();
    assert_eq!(last.response_bytes, range_len(last.range().unwrap()));
    assert!(took < Duration::from_secs(30), "took {took:?}");
    eprintln!("stalled twice, completed in {took:?}");
}

/// Issue #5: a server that always stalls mid-body makes the download fail with the
/// network exit code and a message naming the file and the server, in bounded time.
#[test]
fn a_server_that_always_stalls_fails_clearly_in_bounded_time() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, proxy, _src, hash) = small_file_behind_proxy(tmp.path(), 3 << 20, 7000);
    proxy.inject(
        Match::method("GET", XORB_DATA),
        Fault::StallResponse(Cut::After(16 << 10)),
        usize::MAX,
    );
    let dest = tmp.path().join("f.bin");
    let start = Instant::now();
    let o = xet(&["download", "--endpoint", &proxy.url, &hash, "-o"])
        .arg(&dest)
        .arg("--cache-dir")
        .arg(tmp.path().join("c"))
        .env("XET_STALL_TIMEOUT", "1")
        .output()
        .unwrap();
    let took = start.elapsed();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(6), "network exit code: {err}");
    assert!(err.contains(&hash), "names the file: {err}");
    assert!(
        err.contains(proxy.url.trim_start_matches("http://")),
        "names the server: {err}"
    );
    assert!(err.contains("stall"), "says it stalled: {err}");
    assert!(!dest.exists());
    let n = proxy.count("GET", XORB_DATA);
    assert!((2..=20).contains(&n), "{n} attempts");
    assert!(took < Duration::from_secs(25), "took {took:?}");
    eprintln!(
        "always stalled: exit 6 after {n} attempts in {took:?}: {}",
        err.trim()
    );
}

/// Transient 5xx / 429 answers and a stalled request body on the upload routes are
/// retried; the upload succeeds and the files download intact.
#[test]
fn upload_survives_transient_errors_and_a_stalled_body() {
    let tmp = tempfile::tempdir().unwrap();
    let server = Serve::start(&tmp.path().join("store"));
    let proxy = Proxy::start(&server.url);
    let files = random_files(&tmp.path().join("corpus"), &[2 * MIB, MIB + 17], 8000);
    let expected = hashes(&files);
    proxy.inject(Match::method("POST", GRANTS), Fault::Status(503), 1);
    proxy.inject(
        Match::method("PUT", GRANT_PUT),
        Fault::StallRequest { after: 64 << 10 },
        1,
    );
    proxy.inject(
        Match::method("POST", COMMITS),
        Fault::StatusRetryAfter(429, "1".into()),
        1,
    );
    proxy.inject(Match::method("POST", SHARDS), Fault::Status(500), 1);
    let start = Instant::now();
    let mut c = xet(&["--json", "upload", "--stall-timeout", "2", "--endpoint"]);
    c.arg(&proxy.url)
        .arg("--cache-dir")
        .arg(tmp.path().join("c"))
        .args(&files);
    let doc = json_ok("upload", &c.output().unwrap());
    let took = start.elapsed();
    assert_eq!(upload_hashes(&doc), expected);
    assert_eq!(proxy.count("POST", GRANTS), 2);
    assert_eq!(proxy.count("PUT", GRANT_PUT), 2);
    assert_eq!(proxy.count("POST", COMMITS), 2);
    assert_eq!(proxy.count("POST", SHARDS), 2);
    let faulted: Vec<_> = proxy.log().into_iter().filter_map(|s| s.fault).collect();
    assert_eq!(faulted.len(), 4, "every fault was hit once: {faulted:?}");
    assert_eq!(server.xorbs().len(), 1);
    for (i, f) in files.iter().enumerate() {
        let h = &expected[&f.display().to_string()];
        let dest = tmp.path().join(format!("out{i}"));
        check_download(&server.url, h, f, &dest, &tmp.path().join("dl-cache"));
    }
    assert!(took < Duration::from_secs(40), "took {took:?}");
    eprintln!("upload with 4 injected faults took {took:?}");
}

/// SIGTERM (like Ctrl-C) stops a download promptly with exit code 130, keeping the
/// `.part` file and journal; the rerun completes.
#[test]
fn terminated_download_exits_130_and_the_rerun_completes() {
    let tmp = tempfile::tempdir().unwrap();
    let (_server, proxy, src, hash) = small_file_behind_proxy(tmp.path(), 3 * MIB, 9000);
    proxy.inject(
        Match::method("GET", XORB_DATA),
        Fault::StallResponse(Cut::After(1 << 20)),
        usize::MAX,
    );
    let out = tmp.path().join("out");
    std::fs::create_dir_all(&out).unwrap();
    let dest = out.join("f.bin");
    let download = || {
        let mut c = xet(&["download", "--endpoint", &proxy.url, &hash, "-o"]);
        c.arg(&dest).arg("--cache-dir").arg(tmp.path().join("c"));
        c
    };
    let mut child = download()
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_for(30, || proxy.held() >= 1), "{:?}", proxy.log());
    let start = Instant::now();
    let term = Command::new("sh")
        .args(["-c", &format!("kill -TERM {}", child.id())])
        .status()
        .unwrap();
    assert!(term.success());
    let exited = wait_for(10, || child.try_wait().unwrap().is_some());
    if !exited {
        let _ = child.kill();
    }
    assert!(exited, "still running 10 s after SIGTERM");
    let took = start.elapsed();
    let status = child.wait().unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    assert_eq!(status.code(), Some(130), "{err}");
    assert!(err.contains("rerun to resume"), "{err}");
    let mut parts = part_files(&out);
    parts.sort();
    assert_eq!(
        parts,
        ["f.bin.part", "f.bin.part.jsonl"],
        "kept for the rerun"
    );

    proxy.clear();
    let o = download().output().unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(std::fs::read(&dest).unwrap() == std::fs::read(&src).unwrap());
    assert_eq!(part_files(&out), Vec::<String>::new());
    eprintln!("SIGTERM: exit 130 after {took:?}");
}

/// Issue #5: over HTTP a second download is served from the chunk cache (nothing
/// fetched); `--chunk-cache-size 0` turns the cache off, and a bad size is a usage error.
#[test]
fn chunk_cache_serves_repeat_downloads_unless_turned_off() {
    let tmp = tempfile::tempdir().unwrap();
    let size = 3 * MIB;
    let (_server, proxy, src, hash) = small_file_behind_proxy(tmp.path(), size, 8000);
    let want = std::fs::read(&src).unwrap();
    let download = |cache: &str, dest: &str, extra: &[&str]| {
        let mut c = xet(&["--json", "download"]);
        c.args(extra)
            .arg("--endpoint")
            .arg(&proxy.url)
            .arg(&hash)
            .arg("-o")
            .arg(tmp.path().join(dest))
            .arg("--cache-dir")
            .arg(tmp.path().join(cache));
        let doc = json_ok(dest, &c.output().unwrap());
        assert!(
            std::fs::read(tmp.path().join(dest)).unwrap() == want,
            "{dest}"
        );
        doc["files"][0].clone()
    };
    let fetched = |f: &serde_json::Value| f["bytes_fetched"].as_u64().unwrap();
    let from_cache = |f: &serde_json::Value| f["bytes_from_cache"].as_u64().unwrap();
    let stats = |cache: &str| {
        let o = xet(&["--json", "cache", "stats", "--cache-dir"])
            .arg(tmp.path().join(cache))
            .output()
            .unwrap();
        json_ok("cache stats", &o)
    };
    let entries = |cache: &str| stats(cache)["entries"].as_u64().unwrap();

    let f = download("on", "a.bin", &[]);
    assert!(fetched(&f) >= size as u64 && from_cache(&f) == 0, "{f}");
    let s = stats("on");
    assert!(s["entries"].as_u64().unwrap() > 0, "{s}");
    // The downloaded file is shared with the cache, not copied into it.
    assert_eq!(s["linked_files"], 1, "{s}");
    assert_eq!(s["linked_bytes"], size as u64, "{s}");
    let gets = proxy.matching("GET", XORB_DATA).len();
    let f = download("on", "b.bin", &[]);
    assert_eq!((fetched(&f), from_cache(&f)), (0, size as u64), "{f}");
    assert_eq!(
        proxy.matching("GET", XORB_DATA).len(),
        gets,
        "nothing fetched"
    );

    for dest in ["c.bin", "d.bin"] {
        let f = download("off", dest, &["--chunk-cache-size", "0"]);
        assert!(fetched(&f) >= size as u64 && from_cache(&f) == 0, "{f}");
    }
    assert_eq!(entries("off"), 0);

    // --chunk-cache-copies: the cache keeps its own copy, which survives the
    // downloaded file being changed.
    let f = download("copies", "e.bin", &["--chunk-cache-copies"]);
    assert!(fetched(&f) >= size as u64, "{f}");
    let s = stats("copies");
    assert_eq!(s["linked_files"], 0, "{s}");
    assert!(s["bytes"].as_u64().unwrap() > size as u64, "{s}");
    std::fs::write(tmp.path().join("e.bin"), b"changed").unwrap();
    let f = download("copies", "f.bin", &["--chunk-cache-copies"]);
    assert_eq!((fetched(&f), from_cache(&f)), (0, size as u64), "{f}");

    let o = xet(&["download", "--chunk-cache-size", "10X", &hash])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "{o:?}");
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("unknown size suffix"), "{err}");
}
