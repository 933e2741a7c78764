//! Chaos with garbage collection (issue 38): two `xet serve` on one store directory, each
//! killed with SIGKILL and restarted now and then, while clients put files into a bucket
//! (sharing content, so dedup points at older xorbs), remove some, read others, and
//! `xet store gc` runs again and again with a short grace, itself killed at random
//! moments. What must hold: every file a client put and did not remove downloads
//! identical afterwards, every read that reported success was exact, and the store checks
//! clean (`check --read-data`). The figures are printed.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use crate::common::Served;
use crate::hub_serve::{WRITE, pseudo_random};

fn serve(store: &Path, listen: &str) -> Served {
    Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args([
                "serve",
                "--listen",
                listen,
                "--refresh-secs",
                "1",
                "--store",
            ])
            .arg(store)
            .args(["--token", &format!("write:{WRITE}")])
            .stderr(Stdio::null()),
    )
}

fn xet(url: &str, home: &Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(args)
        .env("HF_ENDPOINT", url)
        .env("HF_TOKEN", WRITE)
        .env("HF_HOME", home.join("hf-home"))
        .env("XET_CACHE", home.join("xet-cache"))
        .env("XET_STALL_TIMEOUT", "5")
        .env_remove("HF_TOKEN_PATH")
        .env_remove("XET_TOKEN")
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .stdin(Stdio::null())
        .output()
        .unwrap()
}

/// A file sharing its first 300 kB with every fifth other (dedup reaches older xorbs),
/// then its own bytes.
fn content(seed: u64) -> Vec<u8> {
    let mut v = pseudo_random(300_000, 7_000 + seed % 5);
    v.extend(pseudo_random(
        100_000 + (seed as usize * 7919) % 600_000,
        seed,
    ));
    v
}

#[derive(Default)]
struct Figures {
    puts: AtomicU64,
    puts_ok: AtomicU64,
    removes_ok: AtomicU64,
    reads: AtomicU64,
    reads_ok: AtomicU64,
    gc_runs: AtomicU64,
    gc_killed: AtomicU64,
    /// Shards and xorbs deleted by runs that finished.
    gc_deleted: AtomicU64,
}

/// Bucket path → content, of the files put and not removed.
type Live = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

/// Bucket path → content, of the files whose removal failed: a server killed after
/// committing the removal and before answering leaves it gone, so each of these is
/// either absent or exact at the end.
type Uncertain = Arc<Mutex<Vec<(String, Vec<u8>)>>>;

struct Ctx {
    urls: [String; 2],
    dir: PathBuf,
    stop: AtomicBool,
    live: Live,
    uncertain: Uncertain,
    figures: Figures,
}

fn putter(ctx: Arc<Ctx>, id: u64) {
    let home = ctx.dir.join(format!("putter-{id}"));
    let mut n = 0u64;
    while !ctx.stop.load(Ordering::SeqCst) {
        n += 1;
        let seed = id * 1_000_000 + n;
        let bytes = content(seed);
        let local = ctx.dir.join(format!("in-{seed}"));
        std::fs::write(&local, &bytes).unwrap();
        let path = format!("p{id}/f{n}.bin");
        let url = &ctx.urls[(n % 2) as usize];
        ctx.figures.puts.fetch_add(1, Ordering::SeqCst);
        let target = format!("hf://buckets/org/chaos/{path}");
        if xet(url, &home, &["cp", local.to_str().unwrap(), &target])
            .status
            .success()
        {
            ctx.figures.puts_ok.fetch_add(1, Ordering::SeqCst);
            ctx.live.lock().unwrap().push((path, bytes));
        }
        let _ = std::fs::remove_file(&local);
        // Every third round, remove one of this putter's files: garbage for the GC.
        if n.is_multiple_of(3) {
            let victim = {
                let l = ctx.live.lock().unwrap();
                l.iter()
                    .find(|(p, _)| p.starts_with(&format!("p{id}/")))
                    .map(|(p, _)| p.clone())
            };
            if let Some(p) = victim {
                let target = format!("hf://buckets/org/chaos/{p}");
                let removed = xet(url, &home, &["rm", &target]).status.success();
                let mut live = ctx.live.lock().unwrap();
                let at = live.iter().position(|(q, _)| *q == p).unwrap();
                let entry = live.remove(at);
                if removed {
                    ctx.figures.removes_ok.fetch_add(1, Ordering::SeqCst);
                } else {
                    ctx.uncertain.lock().unwrap().push(entry);
                }
            }
        }
    }
}

fn reader(ctx: Arc<Ctx>) {
    let home = ctx.dir.join("reader");
    let mut n = 0usize;
    while !ctx.stop.load(Ordering::SeqCst) {
        n += 1;
        let pick = {
            let l = ctx.live.lock().unwrap();
            (!l.is_empty()).then(|| l[(n * 31) % l.len()].clone())
        };
        let Some((path, bytes)) = pick else {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        };
        ctx.figures.reads.fetch_add(1, Ordering::SeqCst);
        let url = &ctx.urls[n % 2];
        let o = xet(
            url,
            &home,
            &["cp", &format!("hf://buckets/org/chaos/{path}"), "-"],
        );
        // A file removed since it was picked may fail; a success must be exact.
        if o.status.success() {
            ctx.figures.reads_ok.fetch_add(1, Ordering::SeqCst);
            assert!(
                o.stdout == bytes,
                "a read of {path} reported success with wrong bytes"
            );
        }
    }
}

/// `xet store gc` again and again with a 2 s grace, two runs in three killed at a
/// random moment.
fn collector(ctx: Arc<Ctx>, store: PathBuf) {
    let mut k = 0u64;
    while !ctx.stop.load(Ordering::SeqCst) {
        k += 1;
        let mut child = Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["--json", "store", "gc", "--grace", "2s", "--store"])
            .arg(&store)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        if !k.is_multiple_of(3) {
            std::thread::sleep(Duration::from_millis(50 + (k * 397) % 2000));
            if child.try_wait().unwrap().is_none() {
                child.kill().unwrap();
                ctx.figures.gc_killed.fetch_add(1, Ordering::SeqCst);
            }
        }
        let out = child.wait_with_output().unwrap();
        if out.status.success() {
            let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            let deleted = doc["gc"]["deleted_shards"].as_u64().unwrap()
                + doc["gc"]["deleted_xorbs"].as_u64().unwrap();
            ctx.figures.gc_deleted.fetch_add(deleted, Ordering::SeqCst);
        }
        ctx.figures.gc_runs.fetch_add(1, Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
    }
}

#[test]
fn gc_under_kills_keeps_every_live_file() {
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let first = [serve(&store, "127.0.0.1:0"), serve(&store, "127.0.0.1:0")];
    let urls = [first[0].url.clone(), first[1].url.clone()];
    let setup = tmp.path().join("setup");
    crate::hub_serve::Py::new().hf_ok(&urls[0], &["buckets", "create", "org/chaos"]);
    let ctx = Arc::new(Ctx {
        urls: urls.clone(),
        dir: tmp.path().to_path_buf(),
        stop: AtomicBool::new(false),
        live: Arc::default(),
        uncertain: Arc::default(),
        figures: Figures::default(),
    });
    let mut threads = Vec::new();
    for id in 0..2 {
        let c = ctx.clone();
        threads.push(std::thread::spawn(move || putter(c, id)));
    }
    let c = ctx.clone();
    threads.push(std::thread::spawn(move || reader(c)));
    let (c, s) = (ctx.clone(), store.clone());
    threads.push(std::thread::spawn(move || collector(c, s)));

    // Kill one server or the other every 1 to 2 s, restarting it on its port.
    let [a, b] = first;
    let mut servers = [Some(a), Some(b)];
    let kills = 10;
    for k in 0..kills {
        std::thread::sleep(Duration::from_millis(1000 + (k as u64 * 331) % 1000));
        let i = k % 2;
        drop(servers[i].take()); // SIGKILL, then wait
        let listen = urls[i].trim_start_matches("http://");
        servers[i] = Some(serve(&store, listen));
    }
    std::thread::sleep(Duration::from_millis(1500));
    ctx.stop.store(true, Ordering::SeqCst);
    for t in threads {
        t.join().expect("a client thread panicked");
    }

    // Quiet now: collect for good, then every live file is whole.
    let o = xet(
        &urls[0],
        &setup,
        &[
            "store",
            "gc",
            "--grace",
            "0s",
            "--store",
            store.to_str().unwrap(),
        ],
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let live = ctx.live.lock().unwrap().clone();
    for (path, bytes) in &live {
        let o = xet(
            &urls[1],
            &setup,
            &["cp", &format!("hf://buckets/org/chaos/{path}"), "-"],
        );
        assert!(
            o.status.success(),
            "{path}, put with success, does not download: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(o.stdout == *bytes, "{path} differs");
    }
    // A removal that failed may have happened: such a file is gone or exact.
    let uncertain = ctx.uncertain.lock().unwrap().clone();
    let mut took_effect = 0;
    for (path, bytes) in &uncertain {
        let o = xet(
            &urls[1],
            &setup,
            &["cp", &format!("hf://buckets/org/chaos/{path}"), "-"],
        );
        if o.status.success() {
            assert!(o.stdout == *bytes, "{path} differs");
        } else {
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(err.contains("no such file"), "{path}: {err}");
            took_effect += 1;
        }
    }
    let check = xet(
        &urls[0],
        &setup,
        &[
            "store",
            "check",
            "--read-data",
            "--store",
            store.to_str().unwrap(),
        ],
    );
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
    let f = &ctx.figures;
    println!(
        "chaos gc: {kills} server kills; puts {} ok of {}; removes {}; {} failed removals ({took_effect} took effect); reads {} ok of {}; gc runs {} ({} killed, {} objects deleted by the others); {} live files checked",
        f.puts_ok.load(Ordering::SeqCst),
        f.puts.load(Ordering::SeqCst),
        f.removes_ok.load(Ordering::SeqCst),
        uncertain.len(),
        f.reads_ok.load(Ordering::SeqCst),
        f.reads.load(Ordering::SeqCst),
        f.gc_runs.load(Ordering::SeqCst),
        f.gc_killed.load(Ordering::SeqCst),
        f.gc_deleted.load(Ordering::SeqCst),
        live.len()
    );
    assert!(
        !live.is_empty(),
        "no put ever succeeded: the test proved nothing"
    );
    assert!(
        f.gc_runs.load(Ordering::SeqCst) > 2,
        "the collector hardly ran"
    );
}
