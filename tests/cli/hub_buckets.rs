//! Storage buckets on `xet serve`, driven by the real `hf` CLI 2.4.0 and `hf_xet` 1.8.0
//! (issue 37): create, `hf sync` up and down (`--delete` too), `hf buckets ls -R`, `cp`
//! both ways, `rm`, `info` totals, `delete`; `HfFileSystem` reads with seeks; every byte
//! compared; two servers on one store see each other's writes at once.

use std::path::Path;

use crate::hub_serve::{Py, READ, WRITE, pseudo_random, serve};

/// A checkpoint-like folder: shards of a few MiB, small JSON, an empty file, nesting.
pub(crate) fn checkpoint(dir: &Path, seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        (
            "config.json".to_string(),
            format!("{{\"step\": {seed}}}\n").into_bytes(),
        ),
        ("empty.txt".to_string(), Vec::new()),
        (
            "optim/state-0.bin".to_string(),
            pseudo_random((2 << 20) + 17, seed),
        ),
        (
            "optim/state-1.bin".to_string(),
            pseudo_random(300_000, seed + 1),
        ),
        (
            "model.safetensors".to_string(),
            pseudo_random(3 << 20, seed + 2),
        ),
    ];
    for (p, data) in &mut files {
        let path = dir.join(&*p);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, &*data).unwrap();
    }
    files.sort();
    files
}

/// Every regular file below `dir`, relative path → bytes, sorted.
pub(crate) fn tree_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
    fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, Vec<u8>)>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            if p.is_dir() {
                walk(root, &p, out);
            } else {
                let rel = p
                    .strip_prefix(root)
                    .unwrap()
                    .to_string_lossy()
                    .replace('\\', "/");
                out.push((rel, std::fs::read(&p).unwrap()));
            }
        }
    }
    let mut out = Vec::new();
    walk(dir, dir, &mut out);
    out.sort();
    out
}

/// `python -c code` with the write token, which must succeed: its standard output.
pub(crate) fn python_ok(py: &Py, url: &str, code: &str, args: &[&str]) -> String {
    let out = py.python(url, Some(WRITE), code, args);
    assert!(
        out.status.success(),
        "python failed:\n{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn info(py: &Py, url: &str, bucket: &str) -> serde_json::Value {
    let text = py.hf_ok(url, &["buckets", "info", bucket, "--format", "json"]);
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{e}: {text}"))
}

#[test]
fn hf_buckets_sync_cp_ls_rm_info_delete_against_xet_serve() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let mut files = checkpoint(src.path(), 1);
    let src_s = src.path().to_str().unwrap();

    py.hf_ok(url, &["buckets", "create", "org/ckpt"]);
    py.hf_ok(url, &["buckets", "sync", src_s, "hf://buckets/org/ckpt"]);
    let i = info(&py, url, "org/ckpt");
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(i["total_files"], files.len(), "{i}");
    assert_eq!(i["size"], total, "{i}");

    // Listed recursively: every path.
    let listed = py.hf_ok(url, &["buckets", "ls", "org/ckpt", "-R"]);
    for (p, _) in &files {
        assert!(listed.contains(p.as_str()), "{p} not in:\n{listed}");
    }

    // Down into an empty folder: the same bytes.
    let down = tempfile::tempdir().unwrap();
    let down_s = down.path().to_str().unwrap();
    py.hf_ok(url, &["buckets", "sync", "hf://buckets/org/ckpt", down_s]);
    assert_eq!(tree_of(down.path()), files);

    // cp both ways, one file.
    let one = src.path().join("extra.bin");
    std::fs::write(&one, pseudo_random(1 << 20, 9)).unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            one.to_str().unwrap(),
            "hf://buckets/org/ckpt/extra/one.bin",
        ],
    );
    let back = down.path().join("one-back.bin");
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            "hf://buckets/org/ckpt/extra/one.bin",
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&one).unwrap());
    std::fs::remove_file(&back).unwrap();
    std::fs::remove_file(&one).unwrap();

    // A local change and a deletion, synced with --delete: the bucket follows.
    std::fs::remove_file(src.path().join("optim/state-1.bin")).unwrap();
    files.retain(|(p, _)| p != "optim/state-1.bin");
    let changed = pseudo_random(500_000, 77);
    std::fs::write(src.path().join("config.json"), &changed).unwrap();
    for f in &mut files {
        if f.0 == "config.json" {
            f.1 = changed.clone();
        }
    }
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            src_s,
            "hf://buckets/org/ckpt",
            "--delete",
        ],
    );
    let i = info(&py, url, "org/ckpt");
    assert_eq!(
        i["total_files"],
        files.len(),
        "extra/one.bin and state-1 deleted: {i}"
    );
    let down2 = tempfile::tempdir().unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            "hf://buckets/org/ckpt",
            down2.path().to_str().unwrap(),
        ],
    );
    assert_eq!(tree_of(down2.path()), files);

    // HfFileSystem: seek and read inside a file.
    let code = r#"
from huggingface_hub import HfFileSystem
fs = HfFileSystem()
with fs.open("hf://buckets/org/ckpt/model.safetensors", "rb") as f:
    f.seek(1_000_000)
    print(f.read(16).hex())
print(sorted(fs.ls("hf://buckets/org/ckpt/optim", detail=False)))
"#;
    let out = python_ok(&py, url, code, &[]);
    let model = &files
        .iter()
        .find(|(p, _)| p == "model.safetensors")
        .unwrap()
        .1;
    let want: String = model[1_000_000..1_000_016]
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert!(out.contains(&want), "{out}");
    assert!(out.contains("buckets/org/ckpt/optim/state-0.bin"), "{out}");

    // rm one file, then the bucket.
    py.hf_ok(url, &["buckets", "rm", "org/ckpt/empty.txt", "-y"]);
    let i = info(&py, url, "org/ckpt");
    assert_eq!(i["total_files"], files.len() - 1, "{i}");
    py.hf_ok(url, &["buckets", "delete", "org/ckpt", "-y"]);
    let gone = py.hf(url, Some(READ), &["buckets", "info", "org/ckpt"]);
    assert!(!gone.status.success());
}

#[test]
fn two_servers_on_one_store_see_each_others_bucket_writes() {
    let store = tempfile::tempdir().unwrap();
    let (a, b) = (serve(store.path()), serve(store.path()));
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = checkpoint(src.path(), 5);
    py.hf_ok(&a.url, &["buckets", "create", "org/shared"]);
    py.hf_ok(
        &a.url,
        &[
            "buckets",
            "sync",
            src.path().to_str().unwrap(),
            "hf://buckets/org/shared",
        ],
    );
    let down = tempfile::tempdir().unwrap();
    py.hf_ok(
        &b.url,
        &[
            "buckets",
            "sync",
            "hf://buckets/org/shared",
            down.path().to_str().unwrap(),
        ],
    );
    assert_eq!(tree_of(down.path()), files);
    let i = info(&py, &b.url, "org/shared");
    assert_eq!(i["total_files"], files.len());
}

/// `xet` against `url` with the write token and caches under `home`.
pub(crate) fn xet(
    url: &str,
    home: &Path,
    args: &[&str],
    stdin: Option<&[u8]>,
) -> std::process::Output {
    use std::io::Write as _;
    let mut c = std::process::Command::new(env!("CARGO_BIN_EXE_xet"));
    c.args(args)
        .env("HF_ENDPOINT", url)
        .env("HF_TOKEN", WRITE)
        .env("HF_HOME", home.join("hf-home"))
        .env("XET_CACHE", home.join("xet-cache"))
        .env_remove("HF_TOKEN_PATH")
        .env_remove("XET_TOKEN")
        .env_remove("XET_ENDPOINT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = c.spawn().expect("run xet");
    let mut input = child.stdin.take().unwrap();
    if let Some(data) = stdin {
        input.write_all(data).unwrap();
    }
    drop(input);
    child.wait_with_output().unwrap()
}

pub(crate) fn xet_ok(url: &str, home: &Path, args: &[&str]) -> std::process::Output {
    let o = xet(url, home, args, None);
    assert!(
        o.status.success(),
        "xet {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    o
}

#[test]
fn xet_cp_ls_rm_crossed_with_hf() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let home = tempfile::tempdir().unwrap();
    let work = tempfile::tempdir().unwrap();
    py.hf_ok(url, &["buckets", "create", "org/x"]);

    // xet up, hf down.
    let a = work.path().join("a.bin");
    std::fs::write(&a, pseudo_random(700_000, 3)).unwrap();
    xet_ok(
        url,
        home.path(),
        &["cp", a.to_str().unwrap(), "hf://buckets/org/x/dir/"],
    );
    let back = work.path().join("a-by-hf.bin");
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            "hf://buckets/org/x/dir/a.bin",
            back.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(&back).unwrap(), std::fs::read(&a).unwrap());

    // hf up, xet down: same bytes, and the bucket's mtime (hf sends the file's).
    let b = work.path().join("b.bin");
    std::fs::write(&b, pseudo_random(1_300_000, 4)).unwrap();
    let old =
        std::time::SystemTime::UNIX_EPOCH + std::time::Duration::from_millis(1_700_000_000_250);
    std::fs::File::options()
        .write(true)
        .open(&b)
        .unwrap()
        .set_modified(old)
        .unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            b.to_str().unwrap(),
            "hf://buckets/org/x/b.bin",
        ],
    );
    let down = work.path().join("down");
    std::fs::create_dir(&down).unwrap();
    xet_ok(
        url,
        home.path(),
        &["cp", "hf://buckets/org/x/b.bin", down.to_str().unwrap()],
    );
    let got = down.join("b.bin");
    assert_eq!(std::fs::read(&got).unwrap(), std::fs::read(&b).unwrap());
    assert_eq!(std::fs::metadata(&got).unwrap().modified().unwrap(), old);

    // A server-side copy, read to standard output; standard input in.
    xet_ok(
        url,
        home.path(),
        &[
            "cp",
            "hf://buckets/org/x/b.bin",
            "hf://buckets/org/x/copy.bin",
        ],
    );
    let o = xet_ok(
        url,
        home.path(),
        &["cp", "hf://buckets/org/x/copy.bin", "-"],
    );
    assert_eq!(o.stdout, std::fs::read(&b).unwrap());
    let o = xet(
        url,
        home.path(),
        &["cp", "-", "hf://buckets/org/x/notes.txt"],
        Some(b"from stdin\n"),
    );
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let notes = work.path().join("notes.txt");
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            "hf://buckets/org/x/notes.txt",
            notes.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(&notes).unwrap(), b"from stdin\n");

    // ls: one level, recursive, JSON.
    let o = xet_ok(url, home.path(), &["ls", "hf://buckets/org/x", "--json"]);
    let v: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let listed: Vec<String> = v["entries"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["type"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect();
    assert_eq!(
        listed,
        [
            "file:b.bin",
            "file:copy.bin",
            "directory:dir",
            "file:notes.txt"
        ]
    );
    let o = xet_ok(url, home.path(), &["ls", "-r", "hf://buckets/org/x/dir"]);
    assert!(String::from_utf8_lossy(&o.stdout).contains("dir/a.bin"));

    // rm: a folder needs -r; with it, everything below goes.
    let o = xet(url, home.path(), &["rm", "hf://buckets/org/x/dir"], None);
    assert_eq!(
        o.status.code(),
        Some(2),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    xet_ok(url, home.path(), &["rm", "-r", "hf://buckets/org/x/dir"]);
    xet_ok(url, home.path(), &["rm", "hf://buckets/org/x/copy.bin"]);
    let listed = py.hf_ok(url, &["buckets", "ls", "org/x", "-R"]);
    assert!(
        !listed.contains("dir/a.bin") && !listed.contains("copy.bin"),
        "{listed}"
    );
    assert!(
        listed.contains("b.bin") && listed.contains("notes.txt"),
        "{listed}"
    );
    // A missing file: refused, nothing written.
    let o = xet(
        url,
        home.path(),
        &[
            "cp",
            "hf://buckets/org/x/none.bin",
            work.path().join("none").to_str().unwrap(),
        ],
        None,
    );
    assert!(!o.status.success());
    assert!(!work.path().join("none").exists());
}

/// Two servers on one SeaweedFS bucket (the shared S3 test server): a bucket written
/// through one is read, whole and with exact totals, through the other.
#[test]
fn two_servers_on_one_s3_store_share_buckets() {
    let Some(s3) = xet_testdata::shared_s3() else {
        return;
    };
    let store = format!("s3://{}/buckets", s3.fresh_bucket().unwrap());
    let (a, b) = (
        crate::hub_serve::serve_on_s3(s3, &store),
        crate::hub_serve::serve_on_s3(s3, &store),
    );
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = checkpoint(src.path(), 9);
    py.hf_ok(&a.url, &["buckets", "create", "org/s3-ckpt"]);
    py.hf_ok(
        &a.url,
        &[
            "buckets",
            "sync",
            src.path().to_str().unwrap(),
            "hf://buckets/org/s3-ckpt",
        ],
    );
    let down = tempfile::tempdir().unwrap();
    py.hf_ok(
        &b.url,
        &[
            "buckets",
            "sync",
            "hf://buckets/org/s3-ckpt",
            down.path().to_str().unwrap(),
        ],
    );
    assert_eq!(tree_of(down.path()), files);
    let i = info(&py, &b.url, "org/s3-ckpt");
    let total: usize = files.iter().map(|(_, d)| d.len()).sum();
    assert_eq!(
        (i["total_files"].clone(), i["size"].clone()),
        (files.len().into(), total.into())
    );
}

/// `hf buckets settings --private/--public` and `hf buckets move` against `xet serve`:
/// `info` follows each change; the moved bucket keeps its files, totals and creation
/// time, the old name is gone, and created again it is empty; a taken name is refused.
#[test]
fn hf_buckets_settings_and_move_against_xet_serve() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = checkpoint(src.path(), 21);
    py.hf_ok(url, &["buckets", "create", "org/before"]);
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            src.path().to_str().unwrap(),
            "hf://buckets/org/before",
        ],
    );
    assert_eq!(info(&py, url, "org/before")["private"], false);
    let out = py.hf_ok(url, &["buckets", "settings", "org/before", "--private"]);
    assert!(out.contains("Bucket settings updated"), "{out}");
    assert_eq!(info(&py, url, "org/before")["private"], true);
    py.hf_ok(url, &["buckets", "settings", "org/before", "--public"]);
    let before = info(&py, url, "org/before");
    assert_eq!(before["private"], false);

    let out = py.hf_ok(url, &["buckets", "move", "org/before", "org/after"]);
    assert!(out.contains("Bucket moved"), "{out}");
    let after = info(&py, url, "org/after");
    assert_eq!(after["id"], "org/after");
    for key in ["total_files", "size", "created_at", "private"] {
        assert_eq!(after[key], before[key], "{key}: {after}");
    }
    let gone = py.hf(url, Some(READ), &["buckets", "info", "org/before"]);
    assert!(!gone.status.success(), "the old name is gone");
    let down = tempfile::tempdir().unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "sync",
            "hf://buckets/org/after",
            down.path().to_str().unwrap(),
        ],
    );
    assert_eq!(tree_of(down.path()), files);

    py.hf_ok(url, &["buckets", "create", "org/before"]);
    let fresh = info(&py, url, "org/before");
    assert_eq!(
        (fresh["total_files"].clone(), fresh["size"].clone()),
        (0.into(), 0.into())
    );
    let taken = py.hf(
        url,
        Some(WRITE),
        &["buckets", "move", "org/after", "org/before"],
    );
    assert!(!taken.status.success(), "moving onto an existing bucket");
    assert_eq!(info(&py, url, "org/after")["total_files"], files.len());
}

/// `HfFileSystem(live_follow=True)` follows a bucket's events feed: a file another client
/// (`hf buckets cp`, another process) adds shows in a listing the filesystem had cached,
/// without any `invalidate_cache`.
#[test]
fn hf_file_system_live_follow_sees_another_clients_change() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let work = tempfile::tempdir().unwrap();
    let first = work.path().join("first.txt");
    std::fs::write(&first, b"first\n").unwrap();
    let new = work.path().join("new.txt");
    std::fs::write(&new, b"new\n").unwrap();
    py.hf_ok(url, &["buckets", "create", "org/live"]);
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            first.to_str().unwrap(),
            "hf://buckets/org/live/first.txt",
        ],
    );
    let code = r#"
import os, sys, time, subprocess
from huggingface_hub import HfFileSystem
from huggingface_hub import _bucket_live_follow as lf
fs = HfFileSystem(live_follow=True)
print("before", sorted(fs.ls("hf://buckets/org/live", detail=False)), flush=True)
follower = lf.BUCKET_FOLLOWERS[(fs.endpoint, fs.token, "org/live")][0]
t = time.time()
while not follower.subscribed:
    assert follower.is_alive(), "the follower gave up"
    assert time.time() - t < 60, "never subscribed"
    time.sleep(0.05)
hf = os.path.join(os.path.dirname(sys.executable), "hf")
subprocess.run([hf, "buckets", "cp", sys.argv[1], "hf://buckets/org/live/new.txt"], check=True, capture_output=True)
t = time.time()
while True:
    names = sorted(fs.ls("hf://buckets/org/live", detail=False))
    if "buckets/org/live/new.txt" in names:
        break
    assert time.time() - t < 60, f"the change never showed: {names}"
    time.sleep(0.1)
print("after", names)
"#;
    let out = py.python(url, Some(WRITE), code, &[new.to_str().unwrap()]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("before ['buckets/org/live/first.txt']"),
        "{stdout}"
    );
    assert!(
        stdout.contains("after ['buckets/org/live/first.txt', 'buckets/org/live/new.txt']"),
        "{stdout}"
    );
}
