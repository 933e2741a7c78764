//! The store's lifecycle (issue 38) with the real `hf` CLI against `xet serve`, which
//! keeps serving while `xet store gc` runs: a deleted repository, an overwritten and a
//! removed bucket file; the collection frees the bytes only they held, `check
//! --read-data` passes, every live file downloads identical, and the deleted content
//! uploaded again with empty client caches comes back identical.

use std::path::Path;

use crate::hub_buckets::{tree_of, xet, xet_ok};
use crate::hub_serve::{Py, pseudo_random, serve};

/// Files of `sizes` (bytes) under `dir`, content from `seed`.
fn files(dir: &Path, sizes: &[usize], seed: u64) -> u64 {
    for (i, n) in sizes.iter().enumerate() {
        std::fs::write(
            dir.join(format!("f{i}.bin")),
            pseudo_random(*n, seed + i as u64),
        )
        .unwrap();
    }
    sizes.iter().map(|n| *n as u64).sum()
}

/// The files `hf download --local-dir` left, without its `.cache/`.
fn downloaded(dir: &Path) -> Vec<(String, Vec<u8>)> {
    tree_of(dir)
        .into_iter()
        .filter(|(p, _)| !p.starts_with(".cache/"))
        .collect()
}

pub(crate) fn store_json(home: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "store"];
    all.extend_from_slice(args);
    // The store commands need no server; the URL is not used.
    let o = xet_ok("http://127.0.0.1:9", home, &all);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

#[test]
fn gc_frees_what_deletes_left_and_keeps_every_live_byte() {
    let store = tempfile::tempdir().unwrap();
    let store_s = store.path().to_str().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let home = tempfile::tempdir().unwrap();
    let mib = 1 << 20;

    let keep = tempfile::tempdir().unwrap();
    files(keep.path(), &[2 * mib, mib + 7, 300_000], 1);
    let gone = tempfile::tempdir().unwrap();
    let mut dead = files(gone.path(), &[3 * mib, 3 * mib + 11], 10);
    py.hf_ok(url, &["upload", "org/keep", keep.path().to_str().unwrap()]);
    py.hf_ok(url, &["upload", "org/gone", gone.path().to_str().unwrap()]);

    // A bucket file overwritten, another removed.
    py.hf_ok(url, &["buckets", "create", "org/ckpt"]);
    let work = tempfile::tempdir().unwrap();
    let put = |name: &str, n: usize, seed: u64, to: &str| {
        let f = work.path().join(name);
        std::fs::write(&f, pseudo_random(n, seed)).unwrap();
        xet_ok(url, home.path(), &["cp", f.to_str().unwrap(), to]);
    };
    put("old.bin", 2 * mib, 20, "hf://buckets/org/ckpt/state.bin");
    put(
        "new.bin",
        2 * mib + 5,
        21,
        "hf://buckets/org/ckpt/state.bin",
    );
    put("tmp.bin", mib, 22, "hf://buckets/org/ckpt/tmp.bin");
    xet_ok(url, home.path(), &["rm", "hf://buckets/org/ckpt/tmp.bin"]);
    dead += 3 * mib as u64;
    py.hf_ok(url, &["repos", "delete", "org/gone", "-y"]);
    assert!(
        !py.hf(
            url,
            Some(crate::hub_serve::WRITE),
            &["download", "org/gone"]
        )
        .status
        .success()
    );

    let before = store_json(home.path(), &["stats", "--store", store_s]);
    let r = store_json(home.path(), &["gc", "--grace", "0s", "--store", store_s]);
    let freed = r["gc"]["freed_bytes"].as_u64().unwrap();
    assert!(freed * 10 >= dead * 9, "freed {freed} of {dead}: {r}");
    let after = store_json(home.path(), &["stats", "--store", store_s]);
    let xorb_bytes = |s: &serde_json::Value| s["stats"]["xorbs"]["bytes"].as_u64().unwrap();
    assert!(
        xorb_bytes(&before) - xorb_bytes(&after) >= dead * 9 / 10,
        "{before}\n{after}"
    );
    assert_eq!(
        after["stats"]["live_file_bytes"],
        before["stats"]["live_file_bytes"]
    );
    let check = xet(
        url,
        home.path(),
        &["store", "check", "--read-data", "--store", store_s],
        None,
    );
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );

    // Every live file, through the server that kept running.
    let down = tempfile::tempdir().unwrap();
    py.hf_ok(
        url,
        &[
            "download",
            "org/keep",
            "--local-dir",
            down.path().to_str().unwrap(),
        ],
    );
    let got = downloaded(down.path());
    assert_eq!(got, tree_of(keep.path()));
    let state = xet_ok(
        url,
        home.path(),
        &["cp", "hf://buckets/org/ckpt/state.bin", "-"],
    );
    assert_eq!(state.stdout, pseudo_random(2 * mib + 5, 21));

    // The deleted content again, from clients with empty caches: whole.
    let fresh = Py::new();
    fresh.hf_ok(url, &["upload", "org/again", gone.path().to_str().unwrap()]);
    let back = tempfile::tempdir().unwrap();
    fresh.hf_ok(
        url,
        &[
            "download",
            "org/again",
            "--local-dir",
            back.path().to_str().unwrap(),
        ],
    );
    let got = downloaded(back.path());
    assert_eq!(got, tree_of(gone.path()));
    let fresh_home = tempfile::tempdir().unwrap();
    put(
        "old-again.bin",
        2 * mib,
        20,
        "hf://buckets/org/ckpt/again.bin",
    );
    let again = xet_ok(
        url,
        fresh_home.path(),
        &["cp", "hf://buckets/org/ckpt/again.bin", "-"],
    );
    assert_eq!(again.stdout, pseudo_random(2 * mib, 20));
    let check = xet(
        url,
        home.path(),
        &["store", "check", "--read-data", "--store", store_s],
        None,
    );
    assert!(
        check.status.success(),
        "{}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn serve_collects_on_its_own_with_gc_interval() {
    use std::process::{Command, Stdio};
    let store = tempfile::tempdir().unwrap();
    let server = crate::common::Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(store.path())
            .args([
                "--gc-interval",
                "1s",
                // Not 0s: a zero grace is for quiet stores (no settle, no second mark
                // protects an upload in flight: its xorbs may go before its commit).
                "--gc-grace",
                "3s",
                "--refresh-secs",
                "1",
            ])
            .args(["--token", &format!("write:{}", crate::hub_serve::WRITE)])
            .stderr(Stdio::null()),
    );
    let url = server.url.as_str();
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    files(src.path(), &[1 << 20], 40);
    py.hf_ok(url, &["upload", "org/brief", src.path().to_str().unwrap()]);
    let xorbs = || {
        std::fs::read_dir(store.path().join("xorbs"))
            .unwrap()
            .count()
    };
    assert!(xorbs() > 0);
    // Live: several runs later (past the grace), still there.
    std::thread::sleep(std::time::Duration::from_secs(8));
    assert!(xorbs() > 0, "a live xorb was collected");
    py.hf_ok(url, &["repos", "delete", "org/brief", "-y"]);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while xorbs() > 0 {
        assert!(std::time::Instant::now() < deadline, "never collected");
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// `xet --json store ARGS` against the S3 server's credentials.
fn store_s3_json(s3: &xet_testdata::S3Server, args: &[&str]) -> (bool, serde_json::Value) {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_xet"));
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("AWS_")) {
            cmd.env_remove(k);
        }
    }
    let o = cmd
        .env("AWS_ACCESS_KEY_ID", s3.access_key_id())
        .env("AWS_SECRET_ACCESS_KEY", s3.secret_access_key())
        .env("AWS_REGION", s3.region())
        .env("AWS_ENDPOINT_URL", s3.endpoint())
        .args(["--json", "store"])
        .args(args)
        .output()
        .unwrap();
    let doc = serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stderr)));
    (o.status.success(), doc)
}

#[test]
fn gc_on_seaweedfs_while_two_servers_serve() {
    let Some(s3) = xet_testdata::shared_s3() else {
        return;
    };
    let store = format!("s3://{}/gc", s3.fresh_bucket().unwrap());
    let (a, b) = (
        crate::hub_serve::serve_on_s3(s3, &store),
        crate::hub_serve::serve_on_s3(s3, &store),
    );
    let py = Py::new();
    let mib = 1 << 20;
    let keep = tempfile::tempdir().unwrap();
    files(keep.path(), &[mib, 200_000], 50);
    let gone = tempfile::tempdir().unwrap();
    let dead = files(gone.path(), &[2 * mib, mib + 3], 60);
    py.hf_ok(
        &a.url,
        &["upload", "org/keep", keep.path().to_str().unwrap()],
    );
    py.hf_ok(
        &b.url,
        &["upload", "org/gone", gone.path().to_str().unwrap()],
    );
    py.hf_ok(&a.url, &["repos", "delete", "org/gone", "-y"]);

    let (ok, r) = store_s3_json(s3, &["gc", "--grace", "0s", "--store", &store]);
    assert!(ok, "{r}");
    let freed = r["gc"]["freed_bytes"].as_u64().unwrap();
    assert!(freed * 10 >= dead * 9, "freed {freed} of {dead}: {r}");
    let (ok, c) = store_s3_json(s3, &["check", "--read-data", "--store", &store]);
    assert!(ok, "{c}");

    for (server, dir) in [(&a, &keep), (&b, &keep)] {
        let down = tempfile::tempdir().unwrap();
        py.hf_ok(
            &server.url,
            &[
                "download",
                "org/keep",
                "--local-dir",
                down.path().to_str().unwrap(),
            ],
        );
        let got = downloaded(down.path());
        assert_eq!(got, tree_of(dir.path()));
    }
    // Uploaded again through one server (which indexed the old shards), read through
    // the other.
    let fresh = Py::new();
    fresh.hf_ok(
        &b.url,
        &["upload", "org/again", gone.path().to_str().unwrap()],
    );
    let back = tempfile::tempdir().unwrap();
    fresh.hf_ok(
        &a.url,
        &[
            "download",
            "org/again",
            "--local-dir",
            back.path().to_str().unwrap(),
        ],
    );
    let got = downloaded(back.path());
    assert_eq!(got, tree_of(gone.path()));
}
