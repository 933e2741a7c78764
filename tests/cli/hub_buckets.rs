//! Storage buckets on `xet serve`, driven by the real `hf` CLI 2.4.0 and `hf_xet` 1.8.0
//! (issue 37): create, `hf sync` up and down (`--delete` too), `hf buckets ls -R`, `cp`
//! both ways, `rm`, `info` totals, `delete`; `HfFileSystem` reads with seeks; every byte
//! compared; two servers on one store see each other's writes at once.

use std::path::Path;

use crate::hub_serve::{Py, READ, WRITE, pseudo_random, serve};

/// A checkpoint-like folder: shards of a few MiB, small JSON, an empty file, nesting.
fn checkpoint(dir: &Path, seed: u64) -> Vec<(String, Vec<u8>)> {
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
fn tree_of(dir: &Path) -> Vec<(String, Vec<u8>)> {
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
fn python_ok(py: &Py, url: &str, code: &str) -> String {
    let out = py.python(url, Some(WRITE), code, &[]);
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
    let out = python_ok(&py, url, code);
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
