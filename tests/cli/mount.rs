//! `xet mount` (issue 40) over real FUSE against `xet serve`, with the real `hf` CLI on
//! the other side: a repository's tree, sizes and bytes, 1,000 random reads, a tensor
//! read by `safetensors`; a bucket written with `cp`, `mv`, `rm` and read back by `hf
//! buckets sync`, another writer's file appearing; kill -9 mid-upload leaving the
//! bucket whole; a server killed mid-read giving `EIO`, not a hang.
//!
//! FUSE must be usable (root with /dev/fuse, or `fusermount3`, which the setup installs
//! when missing); otherwise these tests skip, and fail under `XET_REQUIRE_REFERENCE=1`.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::hub_buckets::{checkpoint, tree_of};
use crate::hub_serve::{Py, WRITE, pseudo_random, serve};

/// A running `xet mount`; unmounted (SIGTERM) when dropped.
struct Mount {
    child: Child,
    dir: PathBuf,
    log: PathBuf,
    _work: tempfile::TempDir,
}

/// Whether FUSE can be used; `false` skips the test (a failure when the reference
/// setup is required).
fn fuse_or_skip() -> bool {
    match xet_testdata::hub::fuse_usable() {
        Ok(()) => true,
        Err(why) if std::env::var("XET_REQUIRE_REFERENCE").as_deref() == Ok("1") => {
            panic!("FUSE is required (XET_REQUIRE_REFERENCE=1) but unusable: {why}")
        }
        Err(why) => {
            eprintln!("skipped: FUSE unusable here: {why}");
            false
        }
    }
}

impl Mount {
    /// `xet --json mount SOURCE DIR ARGS` against `url`, waiting for its line.
    fn start(url: &str, source: &str, args: &[&str]) -> Mount {
        let work = tempfile::tempdir().unwrap();
        let dir = work.path().join("mnt");
        std::fs::create_dir(&dir).unwrap();
        let log = work.path().join("mount.log");
        let mut child = Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["--json", "mount", source])
            .arg(&dir)
            .args(args)
            .env("HF_ENDPOINT", url)
            .env("HF_TOKEN", WRITE)
            .env("XET_CACHE", work.path().join("cache"))
            .env("TMPDIR", work.path())
            .env_remove("XET_LOG")
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("run xet mount");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&line).unwrap_or_else(|_| {
            let _ = child.wait();
            panic!(
                "xet mount said {line:?}; stderr: {}",
                std::fs::read_to_string(&log).unwrap_or_default()
            )
        });
        assert_eq!(doc["ok"], true, "{doc}");
        assert_eq!(doc["dir"], dir.to_str().unwrap(), "{doc}");
        Mount {
            child,
            dir,
            log,
            _work: work,
        }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.dir.join(rel)
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// SIGTERM, and the exit it makes (within 20 s).
    fn stop(&mut self) -> Option<std::process::ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .stderr(Stdio::null())
            .status();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline {
            if let Ok(Some(s)) = self.child.try_wait() {
                return Some(s);
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        None
    }

    fn is_mounted(&self) -> bool {
        let dir = self.dir.to_str().unwrap().to_string();
        std::fs::read_to_string("/proc/self/mounts")
            .unwrap()
            .lines()
            .any(|l| l.split(' ').nth(1) == Some(dir.as_str()))
    }
}

impl Drop for Mount {
    fn drop(&mut self) {
        if self.stop().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        if self.is_mounted() {
            let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
        }
    }
}

/// A model-like repository: a 24 MiB "weights" file, a safetensors file, small files,
/// nesting, an empty file.
fn model(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let files = vec![
        ("config.json".to_string(), b"{\"layers\": 2}\n".to_vec()),
        ("empty.txt".to_string(), Vec::new()),
        ("weights.bin".to_string(), pseudo_random(24 << 20, 3)),
        ("sub/deeper/notes.md".to_string(), pseudo_random(70_000, 4)),
        ("model.safetensors".to_string(), safetensors_file()),
    ];
    for (p, d) in &files {
        let path = dir.join(p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, d).unwrap();
    }
    let mut files = files;
    files.sort();
    files
}

/// A safetensors file (the format: header length, JSON header, data) of two tensors:
/// `a` f32 [1024, 1024] (4 MiB) then `b` f32 [256] with b[i] = i.
fn safetensors_file() -> Vec<u8> {
    let a_len = 1024 * 1024 * 4;
    let b_len = 256 * 4;
    let header = format!(
        "{{\"a\":{{\"dtype\":\"F32\",\"shape\":[1024,1024],\"data_offsets\":[0,{a_len}]}},\
         \"b\":{{\"dtype\":\"F32\",\"shape\":[256],\"data_offsets\":[{a_len},{}]}}}}",
        a_len + b_len
    );
    let mut out = (header.len() as u64).to_le_bytes().to_vec();
    out.extend_from_slice(header.as_bytes());
    out.extend(pseudo_random(a_len, 11));
    for i in 0..256u32 {
        out.extend_from_slice(&(i as f32).to_le_bytes());
    }
    out
}

fn hf_upload(py: &Py, url: &str, repo: &str, dir: &Path, message: &str) {
    py.hf_ok(
        url,
        &[
            "upload",
            repo,
            dir.to_str().unwrap(),
            ".",
            "--commit-message",
            message,
        ],
    );
}

#[test]
fn mount_repo_tree_bytes_random_reads_and_pinned_commit() {
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = model(src.path());
    py.hf_ok(url, &["repos", "create", "org/model"]);
    hf_upload(&py, url, "org/model", src.path(), "first");

    let m = Mount::start(url, "hf://org/model", &[]);
    // The tree, every size and every byte.
    assert_eq!(tree_of(&m.dir), files);
    let meta = std::fs::metadata(m.path("weights.bin")).unwrap();
    assert_eq!(meta.len(), 24 << 20);
    assert!(
        meta.permissions().readonly(),
        "a repository mount is read-only"
    );
    assert!(std::fs::metadata(m.path("sub/deeper")).unwrap().is_dir());
    // find, du and ls -l see what the listing says.
    let found = Command::new("find")
        .arg(&m.dir)
        .args(["-type", "f"])
        .output()
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&found.stdout).lines().count(),
        files.len()
    );
    let du = Command::new("du").arg("-sb").arg(&m.dir).output().unwrap();
    let du: u64 = String::from_utf8_lossy(&du.stdout)
        .split_whitespace()
        .next()
        .unwrap()
        .parse()
        .unwrap();
    let total: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    assert_eq!(du, total, "du -sb of the mount");
    let ls = Command::new("ls").arg("-l").arg(&m.dir).output().unwrap();
    let ls = String::from_utf8_lossy(&ls.stdout);
    assert!(
        ls.lines()
            .any(|l| l.starts_with("-r--r--r--") && l.contains(&(24u64 << 20).to_string())),
        "{ls}"
    );
    // Writes are refused with EROFS.
    let e = std::fs::write(m.path("new.txt"), b"x").unwrap_err();
    assert_eq!(e.raw_os_error(), Some(30), "{e}");

    // 1,000 random reads, each compared with the source.
    let weights = &files.iter().find(|(p, _)| p == "weights.bin").unwrap().1;
    let f = std::fs::File::open(m.path("weights.bin")).unwrap();
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    for _ in 0..1000 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let off = (x % weights.len() as u64) as usize;
        let len = 1 + (x >> 40) as usize % (256 << 10);
        let mut buf = vec![0; len];
        let n = f.read_at(&mut buf, off as u64).unwrap();
        let want = &weights[off..(off + len).min(weights.len())];
        assert_eq!(n, want.len(), "read of {len} at {off}");
        assert!(
            buf[..n] == *want,
            "bytes differ in a read of {len} at {off}"
        );
    }

    drop(f);
    drop(m);

    // Eight sequential readers at once within 8 MiB of read-ahead: all complete, all
    // right (windows shrink to fit rather than wait for each other).
    let m = Mount::start(url, "hf://org/model", &["--max-memory", "8M", "--no-cache"]);
    let readers: Vec<_> = (0..8)
        .map(|_| {
            let p = m.path("weights.bin");
            std::thread::spawn(move || std::fs::read(p))
        })
        .collect();
    for r in readers {
        let got = r.join().unwrap().expect("a concurrent reader failed");
        assert!(got == *weights, "a concurrent reader got other bytes");
    }

    // A new commit on main: the mount stays at the commit it was mounted at.
    std::fs::write(src.path().join("config.json"), b"{\"layers\": 3}\n").unwrap();
    hf_upload(&py, url, "org/model", src.path(), "second");
    assert_eq!(
        std::fs::read(m.path("config.json")).unwrap(),
        b"{\"layers\": 2}\n"
    );
    drop(m);

    // Mounted with --refresh, the new commit shows within a few seconds.
    let m = Mount::start(url, "hf://org/model", &["--refresh", "1"]);
    assert_eq!(
        std::fs::read(m.path("config.json")).unwrap(),
        b"{\"layers\": 3}\n"
    );
}

#[test]
fn mount_safetensors_reads_one_tensor_of_a_mounted_model() {
    if !fuse_or_skip() {
        return;
    }
    let python =
        xet_testdata::hub::safetensors_python().expect("safetensors in the test virtualenv");
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    model(src.path());
    py.hf_ok(url, &["repos", "create", "org/st"]);
    hf_upload(&py, url, "org/st", src.path(), "weights");
    let m = Mount::start(url, "hf://org/st", &[]);
    let code = "import sys\nfrom safetensors import safe_open\n\
                with safe_open(sys.argv[1], framework='numpy') as f:\n    \
                keys = sorted(f.keys())\n    b = f.get_tensor('b')\n\
                print(','.join(keys), b.shape[0], float(b[0]), float(b[255]), float(b.sum()))";
    let out = Command::new(python)
        .arg("-c")
        .arg(code)
        .arg(m.path("model.safetensors"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sum: u32 = (0..256).sum();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        format!("a,b 256 0.0 255.0 {:.1}", f64::from(sum))
    );
}

fn run(cmd: &mut Command) {
    let out = cmd.output().unwrap();
    assert!(
        out.status.success(),
        "{cmd:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn mount_bucket_written_with_cp_mv_rm_is_what_hf_sync_reads_back() {
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let mut files = checkpoint(src.path(), 5);
    py.hf_ok(url, &["buckets", "create", "org/rw"]);
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            src.path().to_str().unwrap(),
            "hf://buckets/org/rw",
        ],
    );
    let m = Mount::start(url, "hf://buckets/org/rw", &["--refresh", "1"]);
    assert_eq!(tree_of(&m.dir), files);
    assert!(
        !std::fs::metadata(m.path("config.json"))
            .unwrap()
            .permissions()
            .readonly()
    );

    // cp in, over an existing file, into a new folder; mv a file and a folder; rm.
    let local = tempfile::tempdir().unwrap();
    let new = local.path().join("new.bin");
    let new_bytes = pseudo_random((3 << 20) + 5, 21);
    std::fs::write(&new, &new_bytes).unwrap();
    run(Command::new("cp").arg(&new).arg(m.path("new.bin")));
    let over = pseudo_random(123_456, 22);
    std::fs::write(local.path().join("over"), &over).unwrap();
    run(Command::new("cp")
        .arg(local.path().join("over"))
        .arg(m.path("config.json")));
    std::fs::create_dir(m.path("logs")).unwrap();
    run(Command::new("cp").arg(&new).arg(m.path("logs/run.bin")));
    run(Command::new("mv")
        .arg(m.path("logs/run.bin"))
        .arg(m.path("logs/run-1.bin")));
    run(Command::new("mv")
        .arg(m.path("optim"))
        .arg(m.path("optimizer")));
    run(Command::new("rm").arg(m.path("empty.txt")));
    // Read back through the mount at once.
    assert_eq!(std::fs::read(m.path("logs/run-1.bin")).unwrap(), new_bytes);
    assert_eq!(std::fs::read(m.path("config.json")).unwrap(), over);

    for f in &mut files {
        if f.0 == "config.json" {
            f.1 = over.clone();
        }
        if let Some(rest) = f.0.strip_prefix("optim/") {
            f.0 = format!("optimizer/{rest}");
        }
    }
    files.retain(|(p, _)| p != "empty.txt");
    files.push(("new.bin".to_string(), new_bytes.clone()));
    files.push(("logs/run-1.bin".to_string(), new_bytes.clone()));
    files.sort();

    // hf buckets sync elsewhere reads exactly that.
    let down = tempfile::tempdir().unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            "hf://buckets/org/rw",
            down.path().to_str().unwrap(),
        ],
    );
    assert_eq!(tree_of(down.path()), files);

    // df shows the bucket's size as used.
    let total: u64 = files.iter().map(|(_, d)| d.len() as u64).sum();
    let df = Command::new("df")
        .args(["-B1", "--output=used"])
        .arg(&m.dir)
        .output()
        .unwrap();
    let used: u64 = String::from_utf8_lossy(&df.stdout)
        .lines()
        .nth(1)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(
        used >= total && used < total + 4096 * files.len() as u64,
        "df used {used}, bucket {total}"
    );

    // Another writer's file appears within the refresh interval.
    let other = local.path().join("other.txt");
    std::fs::write(&other, b"from elsewhere\n").unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            other.to_str().unwrap(),
            "hf://buckets/org/rw/other.txt",
        ],
    );
    let deadline = Instant::now() + Duration::from_secs(15);
    while std::fs::read(m.path("other.txt")).ok().as_deref() != Some(b"from elsewhere\n".as_slice())
    {
        assert!(
            Instant::now() < deadline,
            "other.txt did not appear in the mount"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Another writer's deletion of the only file of a folder: file and folder go.
    py.hf_ok(url, &["buckets", "rm", "org/rw/logs/run-1.bin", "-y"]);
    let deadline = Instant::now() + Duration::from_secs(15);
    while m.path("logs").exists() {
        assert!(
            Instant::now() < deadline,
            "logs/ stayed after its file was deleted"
        );
        std::thread::sleep(Duration::from_millis(200));
    }

    // Unlink of a missing file is ENOENT; SIGTERM unmounts and exits 0.
    let e = std::fs::remove_file(m.path("nope")).unwrap_err();
    assert_eq!(e.raw_os_error(), Some(2));
    let mut m = m;
    let status = m.stop().expect("xet mount exits on SIGTERM");
    assert!(status.success(), "{status}: {}", m.log());
    assert!(!m.is_mounted());
}

#[test]
fn mount_killed_mid_upload_leaves_the_bucket_whole() {
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    py.hf_ok(url, &["buckets", "create", "org/k"]);
    let mut m = Mount::start(url, "hf://buckets/org/k", &[]);
    let small = pseudo_random(10_000, 1);
    std::fs::write(m.path("first.bin"), &small).unwrap();
    let big = pseudo_random(48 << 20, 2);
    let target = m.path("big.bin");
    let data = big.clone();
    // The write ends with close, which uploads; the mount is killed during it.
    let writer = std::thread::spawn(move || std::fs::write(target, data));
    // Killed once the whole file is staged (the mount's TMPDIR is its work folder):
    // the close, and so the upload, is under way or about to be.
    let deadline = Instant::now() + Duration::from_secs(30);
    while !staged_whole(m._work.path(), big.len() as u64) {
        assert!(Instant::now() < deadline, "big.bin was never staged");
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(20));
    m.child.kill().unwrap();
    m.child.wait().unwrap();
    let _ = Command::new("umount").arg("-l").arg(&m.dir).status();
    let _ = writer.join();

    // The bucket holds first.bin and either all of big.bin or nothing of it, and its
    // totals agree with its listing.
    let down = tempfile::tempdir().unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            "hf://buckets/org/k",
            down.path().to_str().unwrap(),
        ],
    );
    let got = tree_of(down.path());
    assert!(got.contains(&("first.bin".to_string(), small)));
    match got.iter().find(|(p, _)| p == "big.bin") {
        None => assert_eq!(got.len(), 1),
        Some((_, d)) => assert!(*d == big, "big.bin is there but not whole"),
    }
    eprintln!(
        "killed mid-upload: big.bin {}",
        if got.len() == 2 {
            "added whole"
        } else {
            "not added"
        }
    );
    let info: serde_json::Value =
        serde_json::from_str(&py.hf_ok(url, &["buckets", "info", "org/k", "--format", "json"]))
            .unwrap();
    assert_eq!(info["total_files"], got.len(), "{info}");
    let total: usize = got.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(info["size"], total, "{info}");
}

#[test]
fn mount_server_stalled_or_killed_mid_read_gives_eio_not_a_hang() {
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let mut server = serve(store.path());
    let url = server.url.clone();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let big = pseudo_random(40 << 20, 8);
    std::fs::write(src.path().join("big.bin"), &big).unwrap();
    py.hf_ok(&url, &["repos", "create", "org/dead"]);
    hf_upload(&py, &url, "org/dead", src.path(), "big");
    let m = Mount::start(
        &url,
        "hf://org/dead",
        &["--stall-timeout", "2", "--no-cache"],
    );
    let f = std::fs::File::open(m.path("big.bin")).unwrap();
    let mut buf = vec![0; 64 << 10];
    f.read_at(&mut buf, 0).unwrap();
    assert!(buf[..] == big[..64 << 10]);

    // The server stalls (stopped): a read far from what was fetched fails with EIO
    // after the stall limits. Then it dies: EIO again. Never a hang.
    let pid = server.child.id().to_string();
    let signal = |sig: &str| {
        let _ = Command::new("kill").args([sig, &pid]).status();
    };
    signal("-STOP");
    let f = Arc::new(f);
    let e = read_fails_in_time(&f, 30 << 20, "the server stalled");
    assert_eq!(e.raw_os_error(), Some(5), "{e}");
    signal("-CONT");
    let _ = server.child.kill();
    let _ = server.child.wait();
    let e = read_fails_in_time(&f, 20 << 20, "the server died");
    assert_eq!(e.raw_os_error(), Some(5), "{e}");
    let log = m.log();
    assert!(
        log.contains("big.bin") && log.contains(&url),
        "the log names the file and the server:\n{log}"
    );
}

/// A read of 64 KiB at `offset` that must fail, and within 60 s.
fn read_fails_in_time(f: &Arc<std::fs::File>, offset: u64, why: &str) -> std::io::Error {
    let (tx, rx) = std::sync::mpsc::channel();
    let f = Arc::clone(f);
    std::thread::spawn(move || {
        let mut buf = vec![0; 64 << 10];
        let _ = tx.send(f.read_at(&mut buf, offset));
    });
    let started = Instant::now();
    let r = rx
        .recv_timeout(Duration::from_secs(60))
        .unwrap_or_else(|_| panic!("the read hung after {why}"));
    eprintln!("{why}: the read ended after {:?}", started.elapsed());
    r.expect_err(why)
}

/// Whether a staged file of `len` bytes is in `dir`.
fn staged_whole(dir: &Path, len: u64) -> bool {
    std::fs::read_dir(dir).unwrap().flatten().any(|e| {
        e.file_name().to_string_lossy().starts_with(".tmp")
            && e.metadata().is_ok_and(|m| m.is_file() && m.len() == len)
    })
}

/// How long `done` took to turn true, polled every 50 ms; a failure naming `what`
/// after `limit`.
fn within(what: &str, limit: Duration, done: impl Fn() -> bool) -> Duration {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < limit, "{what}: not within {limit:?}");
        std::thread::sleep(Duration::from_millis(50));
    }
    let took = started.elapsed();
    eprintln!("{what}: {took:?}");
    took
}

/// Another writer's add, overwrite and removal (`xet cp`, `xet rm`) show in bucket
/// mounts within seconds through the bucket's events feed: with `--refresh 60`, no poll
/// could explain it. A mount of a folder of the bucket sees what changes below it, at
/// its own paths, and nothing else.
#[test]
fn mount_bucket_follows_another_writers_changes_through_the_events_feed() {
    use crate::hub_buckets::xet_ok;
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    py.hf_ok(url, &["buckets", "create", "org/live"]);
    let home = tempfile::tempdir().unwrap();
    let local = tempfile::tempdir().unwrap();
    let put = |name: &str, bytes: &[u8], to: &str| {
        let f = local.path().join(name);
        std::fs::write(&f, bytes).unwrap();
        xet_ok(url, home.path(), &["cp", f.to_str().unwrap(), to]);
    };
    put("keep.txt", b"kept\n", "hf://buckets/org/live/sub/keep.txt");
    let m = Mount::start(url, "hf://buckets/org/live", &["--refresh", "60"]);
    let sub = Mount::start(url, "hf://buckets/org/live/sub", &["--refresh", "60"]);
    let limit = Duration::from_secs(15);
    let reads = |m: &Mount, rel: &str, want: &[u8]| {
        std::fs::read(m.path(rel)).ok().as_deref() == Some(want)
    };

    put("a.txt", b"one\n", "hf://buckets/org/live/sub/new/a.txt");
    let added = within("an add shows", limit, || {
        reads(&m, "sub/new/a.txt", b"one\n") && reads(&sub, "new/a.txt", b"one\n")
    });
    let two = pseudo_random(300_000, 41);
    put("a2.txt", &two, "hf://buckets/org/live/sub/new/a.txt");
    let overwritten = within("an overwrite shows", limit, || {
        reads(&m, "sub/new/a.txt", &two) && reads(&sub, "new/a.txt", &two)
    });
    put("top.txt", b"top\n", "hf://buckets/org/live/top.txt");
    xet_ok(
        url,
        home.path(),
        &["rm", "hf://buckets/org/live/sub/new/a.txt"],
    );
    // The folder goes with its only file; the file outside `sub` shows in the whole
    // bucket's mount only.
    let removed = within("a removal shows", limit, || {
        !m.path("sub/new").exists() && !sub.path("new").exists() && reads(&m, "top.txt", b"top\n")
    });
    assert!(!sub.path("top.txt").exists());
    assert_eq!(
        tree_of(&sub.dir),
        vec![("keep.txt".to_string(), b"kept\n".to_vec())]
    );
    for t in [added, overwritten, removed] {
        assert!(
            t < Duration::from_secs(10),
            "{t:?}: no faster than polling would be"
        );
    }
    for mount in [&m, &sub] {
        let log = mount.log();
        assert!(!log.contains("polling"), "the feed was followed:\n{log}");
    }
}

/// `--daemon` returns once mounted, its JSON naming the background pid and its log; the
/// folder serves the files; `umount DIR` ends that process. A mount that cannot start
/// fails at once with the mount's own error and exit code, and leaves nothing running.
#[test]
fn mount_daemon_returns_once_mounted_and_umount_ends_it() {
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let work = tempfile::tempdir().unwrap();
    let src = work.path().join("src");
    std::fs::create_dir(&src).unwrap();
    let bytes = pseudo_random(3 << 20, 41);
    std::fs::write(src.join("w.bin"), &bytes).unwrap();
    let xet = |args: &[&str]| crate::hub_buckets::xet(url, work.path(), args, None);
    let up = xet(&["upload", src.to_str().unwrap(), "hf://org/bg"]);
    assert!(
        up.status.success(),
        "{}",
        String::from_utf8_lossy(&up.stderr)
    );

    let dir = work.path().join("mnt");
    std::fs::create_dir(&dir).unwrap();
    let _unmount = LazyUnmount(dir.clone());
    let started = Instant::now();
    let out = xet(&[
        "--json",
        "mount",
        "--daemon",
        "hf://org/bg",
        dir.to_str().unwrap(),
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["ok"], true, "{doc}");
    let pid = doc["pid"].as_u64().unwrap();
    let log = PathBuf::from(doc["log"].as_str().unwrap());
    assert!(
        log.starts_with(work.path().join("xet-cache")),
        "{}",
        log.display()
    );
    let alive = || Path::new(&format!("/proc/{pid}")).exists();
    assert!(alive(), "the background mount is running");
    assert_eq!(std::fs::read(dir.join("w.bin")).unwrap(), bytes);
    eprintln!("--daemon returned after {:?}", started.elapsed());

    let st = Command::new("umount").arg(&dir).status().unwrap();
    assert!(st.success());
    within(
        "the background mount ends after umount",
        Duration::from_secs(10),
        || {
            !alive()
                || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                    .is_ok_and(|s| s.contains(") Z"))
        },
    );

    // Nothing to mount: the mount's own error, its exit code, nothing left running.
    let here = xet(&["mount", "hf://org/missing", dir.to_str().unwrap()]);
    assert!(!here.status.success());
    let out = xet(&[
        "mount",
        "--daemon",
        "hf://org/missing",
        dir.to_str().unwrap(),
    ]);
    assert_eq!(
        out.status.code(),
        here.status.code(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("org/missing") && err.contains("ended before it was ready"),
        "{err}"
    );

    // In text, with a log file of one's own (not passed on to the mount itself).
    let log = work.path().join("my.log");
    let out = xet(&[
        "mount",
        "--daemon",
        "--log-file",
        log.to_str().unwrap(),
        "hf://org/bg",
        dir.to_str().unwrap(),
    ]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.starts_with("mounted hf://org/bg"), "{text}");
    assert!(text.contains(&format!("log {}", log.display())), "{text}");
    assert!(log.exists());
    assert_eq!(std::fs::read(dir.join("w.bin")).unwrap(), bytes);
    let st = Command::new("umount").arg(&dir).status().unwrap();
    assert!(st.success());
}

/// Detaches whatever is still mounted at its folder when dropped: a background mount
/// outlives a test that fails half way, and its folder would stay mounted.
struct LazyUnmount(PathBuf);

impl Drop for LazyUnmount {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(&self.0)
            .stderr(Stdio::null())
            .status();
    }
}

/// A range read through the mount is checked chunk by chunk against its xorb's hashes
/// (from the xorb's footer, which `xet serve` serves at the end of the xorb's URL): a
/// stored chunk with one byte changed (random data is stored uncompressed, so it still
/// decodes to the right length) fails the read with `EIO`, whether it is read at random
/// or streamed to a sequential reader, and the log names the chunk and the xorb.
#[test]
fn mount_reads_fail_on_a_chunk_that_is_not_its_xorbs() {
    if !fuse_or_skip() {
        return;
    }
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.clone();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let data = pseudo_random(24 << 20, 9);
    std::fs::write(src.path().join("data.bin"), &data).unwrap();
    py.hf_ok(&url, &["repos", "create", "org/damaged"]);
    hf_upload(&py, &url, "org/damaged", src.path(), "data");
    let at = damage_a_stored_chunk(store.path(), 12 << 20);

    let m = Mount::start(&url, "hf://org/damaged", &["--no-cache"]);
    let f = std::fs::File::open(m.path("data.bin")).unwrap();
    let mut buf = vec![0; 64 << 10];
    // Away from the damage: right.
    f.read_at(&mut buf, 1 << 20).unwrap();
    assert!(buf[..] == data[1 << 20..(1 << 20) + buf.len()]);
    // A random read of the damaged chunk.
    let e = f
        .read_at(&mut buf, at)
        .expect_err("a random read of the damaged chunk");
    assert_eq!(e.raw_os_error(), Some(5), "{e}");
    // A sequential reader reaches it in a streamed window.
    let f = std::fs::File::open(m.path("data.bin")).unwrap();
    let mut read = 0u64;
    let e = loop {
        match f.read_at(&mut buf, read) {
            Ok(0) => panic!("the whole file was read, damage and all"),
            Ok(n) => {
                assert!(
                    buf[..n] == data[read as usize..read as usize + n],
                    "at {read}"
                );
                read += n as u64;
            }
            Err(e) => break e,
        }
    };
    assert_eq!(e.raw_os_error(), Some(5), "{e}");
    assert!(read <= at, "read {read} bytes, the damage is at {at}");
    let log = m.log();
    assert!(
        log.contains("data.bin") && log.contains("the xorb's footer says"),
        "the log names the file and the check:\n{log}"
    );
}

/// Change one payload byte of the stored chunk of `store`'s only xorb that holds the
/// file's byte `near` (the file is the xorb's only data, stored uncompressed); the
/// file offset of the changed byte.
fn damage_a_stored_chunk(store: &Path, near: u64) -> u64 {
    let xorbs: Vec<PathBuf> = crate::chaos::files_below(store)
        .into_iter()
        .filter(|p| {
            p.parent()
                .and_then(|d| d.file_name())
                .is_some_and(|n| n == "xorbs")
        })
        .collect();
    assert_eq!(xorbs.len(), 1, "one xorb: {xorbs:?}");
    let mut bytes = std::fs::read(&xorbs[0]).unwrap();
    // Walk the chunk headers (version, compressed size u24, scheme, size u24).
    let (mut pos, mut unpacked) = (0usize, 0u64);
    loop {
        let h = &bytes[pos..pos + 8];
        let stored = u32::from_le_bytes([h[1], h[2], h[3], 0]) as usize;
        let size = u64::from(u32::from_le_bytes([h[5], h[6], h[7], 0]));
        assert_eq!((h[0], h[4]), (0, 0), "an uncompressed chunk at {pos}");
        if unpacked + size > near {
            bytes[pos + 8 + 100] ^= 0x5a;
            let mut perms = std::fs::metadata(&xorbs[0]).unwrap().permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perms.set_readonly(false);
            std::fs::set_permissions(&xorbs[0], perms).unwrap();
            std::fs::write(&xorbs[0], &bytes).unwrap();
            return unpacked + 100;
        }
        pos += 8 + stored;
        unpacked += size;
    }
}
