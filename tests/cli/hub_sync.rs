//! `xet sync` (issue 37) against `xet serve`, crossed with the real `hf` CLI 2.4.0: up
//! into a bucket it creates, down, nothing re-sent after a round trip (downloads keep the
//! bucket's times, which `hf sync` does not), `--checksum`, `--delete` both ways,
//! filters, plan files written by one tool and applied by the other, and hostile plans.

use std::path::Path;
use std::time::SystemTime;

use crate::hub_buckets::{checkpoint, tree_of, xet, xet_ok};
use crate::hub_serve::{Py, pseudo_random, serve};

/// `xet --json sync ARGS`: its document.
fn sync_json(url: &str, home: &Path, args: &[&str]) -> serde_json::Value {
    let mut all = vec!["--json", "sync"];
    all.extend_from_slice(args);
    let o = xet_ok(url, home, &all);
    serde_json::from_slice(&o.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&o.stdout)))
}

fn counts(doc: &serde_json::Value) -> (u64, u64, u64) {
    let s = &doc["summary"];
    (
        s["uploads"].as_u64().unwrap(),
        s["downloads"].as_u64().unwrap(),
        s["deletes"].as_u64().unwrap(),
    )
}

fn mtime(p: &Path) -> SystemTime {
    std::fs::metadata(p).unwrap().modified().unwrap()
}

fn set_mtime(p: &Path, t: SystemTime) {
    std::fs::File::options()
        .write(true)
        .open(p)
        .unwrap()
        .set_modified(t)
        .unwrap();
}

fn ms(t: SystemTime) -> u128 {
    t.duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis()
}

#[test]
fn xet_sync_both_ways_crossed_with_hf_sync() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let home = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let files = checkpoint(src.path(), 5);
    // Written an hour ago: a download given "now" is newer by far more than the window.
    let hour_ago = SystemTime::now() - std::time::Duration::from_secs(3600);
    for (p, _) in &files {
        set_mtime(&src.path().join(p), hour_ago);
    }
    let src_s = src.path().to_str().unwrap();
    let bucket = "hf://buckets/org/runs/ckpt";

    // Up into a bucket that does not exist: created (private), every file sent.
    let doc = sync_json(url, home.path(), &[src_s, bucket]);
    assert_eq!(counts(&doc), (files.len() as u64, 0, 0), "{doc}");
    assert_eq!(doc["done"]["created_bucket"], true, "{doc}");
    let info = py.hf_ok(url, &["buckets", "info", "org/runs", "--format", "json"]);
    let info: serde_json::Value = serde_json::from_str(&info).unwrap();
    assert_eq!(info["private"], true, "{info}");
    assert_eq!(info["total_files"], files.len(), "{info}");

    // hf reads what xet wrote.
    let by_hf = tempfile::tempdir().unwrap();
    py.hf_ok(url, &["sync", bucket, by_hf.path().to_str().unwrap()]);
    assert_eq!(tree_of(by_hf.path()), files);

    // Nothing changed: nothing planned, nothing sent.
    let doc = sync_json(url, home.path(), &[src_s, bucket]);
    assert_eq!(counts(&doc), (0, 0, 0), "{doc}");
    assert_eq!(doc["summary"]["skips"], files.len(), "{doc}");

    // Down with xet: the same bytes and the source's times, so going back up sends
    // nothing (after hf's download every file would be "local newer").
    let down = tempfile::tempdir().unwrap();
    let down_s = down.path().to_str().unwrap();
    let doc = sync_json(url, home.path(), &[bucket, down_s]);
    assert_eq!(counts(&doc), (0, files.len() as u64, 0), "{doc}");
    assert_eq!(tree_of(down.path()), files);
    for (p, _) in &files {
        assert_eq!(
            ms(mtime(&down.path().join(p))),
            ms(mtime(&src.path().join(p))),
            "{p}"
        );
    }
    let doc = sync_json(url, home.path(), &[down_s, bucket]);
    assert_eq!(counts(&doc), (0, 0, 0), "{doc}");
    let hf_plan = py.hf_ok(
        url,
        &["sync", by_hf.path().to_str().unwrap(), bucket, "--dry-run"],
    );
    assert!(
        hf_plan.contains("local newer"),
        "hf re-sends what it downloaded: {hf_plan}"
    );

    // Same size, same time, other bytes: only --checksum sees it.
    let cfg = down.path().join("config.json");
    let before = mtime(&cfg);
    let old = std::fs::read(&cfg).unwrap();
    let mut changed = old.clone();
    changed[2] ^= 1;
    std::fs::write(&cfg, &changed).unwrap();
    set_mtime(&cfg, before);
    let doc = sync_json(url, home.path(), &[down_s, bucket]);
    assert_eq!(counts(&doc), (0, 0, 0), "{doc}");
    let doc = sync_json(url, home.path(), &["--checksum", down_s, bucket]);
    assert_eq!(counts(&doc), (1, 0, 0), "{doc}");
    assert_eq!(doc["operations"][0]["reason"], "checksum differs", "{doc}");
    let doc = sync_json(url, home.path(), &["--checksum", down_s, bucket]);
    assert_eq!(counts(&doc), (0, 0, 0), "{doc}");

    // --delete up: a file gone locally goes from the bucket; hf sees it gone.
    std::fs::remove_file(down.path().join("optim/state-1.bin")).unwrap();
    let doc = sync_json(url, home.path(), &["--delete", down_s, bucket]);
    assert_eq!(counts(&doc), (0, 0, 1), "{doc}");
    let listed = py.hf_ok(url, &["buckets", "ls", "org/runs", "-R"]);
    assert!(!listed.contains("state-1.bin"), "{listed}");
    assert!(listed.contains("state-0.bin"), "{listed}");

    // hf adds a file; xet sync --delete down fetches it and removes the local file the
    // bucket no longer has, with the folder it leaves empty.
    let extra = tempfile::tempdir().unwrap();
    std::fs::write(extra.path().join("new.bin"), pseudo_random(5000, 7)).unwrap();
    py.hf_ok(
        url,
        &[
            "buckets",
            "cp",
            extra.path().join("new.bin").to_str().unwrap(),
            "hf://buckets/org/runs/ckpt/logs/new.bin",
        ],
    );
    std::fs::create_dir_all(src.path().join("stale")).unwrap();
    std::fs::write(src.path().join("stale/old.txt"), b"old").unwrap();
    let doc = sync_json(url, home.path(), &["--delete", bucket, src_s]);
    // state-1.bin and stale/old.txt go, logs/new.bin comes; config.json (other bytes,
    // same size and time) is left by the default rules and caught by --checksum.
    assert_eq!(counts(&doc), (0, 1, 2), "{doc}");
    assert!(
        !src.path().join("stale").exists(),
        "an emptied folder stays"
    );
    assert!(!src.path().join("optim/state-1.bin").exists());
    assert_eq!(
        std::fs::read(src.path().join("logs/new.bin")).unwrap(),
        pseudo_random(5000, 7)
    );
    assert_eq!(std::fs::read(src.path().join("config.json")).unwrap(), old);
    let doc = sync_json(url, home.path(), &["--checksum", bucket, src_s]);
    assert_eq!(counts(&doc), (0, 1, 0), "{doc}");
    assert_eq!(
        std::fs::read(src.path().join("config.json")).unwrap(),
        changed
    );
}

#[test]
fn xet_sync_filters_flags_and_plans_shared_with_hf() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let home = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    checkpoint(src.path(), 8);
    let src_s = src.path().to_str().unwrap();
    let bucket = "hf://buckets/org/f";
    py.hf_ok(url, &["buckets", "create", "org/f"]);

    // Filters: the same paths as hf plans for the same flags.
    let rules = src.path().join("rules.txt");
    std::fs::write(
        &rules,
        "# keep one optimizer state\n+ optim/state-0.bin\n- optim/*\n",
    )
    .unwrap();
    let flags = [
        "--exclude",
        "*.json",
        "--filter-from",
        rules.to_str().unwrap(),
        "--exclude",
        "rules.txt",
    ];
    let paths_of = |plan: &str| -> Vec<String> {
        let mut v: Vec<String> = plan
            .lines()
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|v| v["type"] == "operation")
            .map(|v| {
                format!(
                    "{} {}",
                    v["action"].as_str().unwrap(),
                    v["path"].as_str().unwrap()
                )
            })
            .collect();
        v.sort();
        v
    };
    let mut args = vec!["sync", "--dry-run", src_s, bucket];
    args.extend_from_slice(&flags);
    let ours = paths_of(&String::from_utf8_lossy(
        &xet_ok(url, home.path(), &args).stdout,
    ));
    let theirs = paths_of(&py.hf_ok(url, &args));
    assert_eq!(
        ours,
        [
            "upload empty.txt",
            "upload model.safetensors",
            "upload optim/state-0.bin"
        ]
    );
    assert_eq!(ours, theirs);

    // A plan xet writes, hf applies; nothing has run before --apply.
    let plan = home.path().join("plan.jsonl");
    let mut args = vec!["sync", src_s, bucket, "--plan", plan.to_str().unwrap()];
    args.extend_from_slice(&flags);
    xet_ok(url, home.path(), &args);
    let listed = py.hf_ok(url, &["buckets", "ls", "org/f", "-R"]);
    assert!(!listed.contains("model.safetensors"), "{listed}");
    py.hf_ok(url, &["sync", "--apply", plan.to_str().unwrap()]);
    let listed = py.hf_ok(url, &["buckets", "ls", "org/f", "-R"]);
    for p in ["empty.txt", "model.safetensors", "optim/state-0.bin"] {
        assert!(listed.contains(p), "{p}: {listed}");
    }
    assert!(!listed.contains("state-1.bin"), "{listed}");

    // A plan hf writes (--existing: only files the bucket has), xet applies.
    let newer = src.path().join("model.safetensors");
    std::fs::write(&newer, pseudo_random(1000, 99)).unwrap();
    let hf_plan = home.path().join("hf-plan.jsonl");
    py.hf_ok(
        url,
        &[
            "sync",
            src_s,
            bucket,
            "--existing",
            "--plan",
            hf_plan.to_str().unwrap(),
        ],
    );
    let doc = sync_json(url, home.path(), &["--apply", hf_plan.to_str().unwrap()]);
    assert_eq!(counts(&doc), (1, 0, 0), "{doc}");
    let back = tempfile::tempdir().unwrap();
    xet_ok(
        url,
        home.path(),
        &["sync", "hf://buckets/org/f", back.path().to_str().unwrap()],
    );
    assert_eq!(
        std::fs::read(back.path().join("model.safetensors")).unwrap(),
        pseudo_random(1000, 99)
    );

    // Other bytes, same size and time: --ignore-existing, --ignore-times, --ignore-sizes
    // and the default all leave it (only --checksum would look).
    let t = mtime(&newer);
    std::fs::write(&newer, pseudo_random(1000, 100)).unwrap();
    set_mtime(&newer, t);
    let doc = sync_json(
        url,
        home.path(),
        &["--ignore-existing", src_s, bucket, "--include", "model*"],
    );
    assert_eq!(counts(&doc), (0, 0, 0), "{doc}");
    let doc = sync_json(
        url,
        home.path(),
        &["--ignore-times", src_s, bucket, "--include", "model*"],
    );
    assert_eq!(counts(&doc), (0, 0, 0), "{doc}");
    let doc = sync_json(
        url,
        home.path(),
        &["--ignore-sizes", src_s, bucket, "--include", "model*"],
    );
    assert_eq!(
        (counts(&doc), &doc["summary"]["skips"]),
        ((0, 0, 0), &1.into()),
        "{doc}"
    );
    let doc = sync_json(
        url,
        home.path(),
        &["--checksum", src_s, bucket, "--include", "model*"],
    );
    assert_eq!(counts(&doc), (1, 0, 0), "{doc}");
}

#[test]
fn xet_sync_refuses_what_cannot_work() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let home = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    checkpoint(src.path(), 2);
    let src_s = src.path().to_str().unwrap();
    let code = |args: &[&str]| xet(url, home.path(), args, None).status.code();

    assert_eq!(code(&["sync", src_s, src_s]), Some(2), "local to local");
    assert_eq!(
        code(&["sync", "hf://buckets/o/a", "hf://buckets/o/b"]),
        Some(2)
    );
    assert_eq!(
        code(&["sync", src_s, "hf://o/model"]),
        Some(2),
        "a repository"
    );
    assert_eq!(
        code(&[
            "sync",
            "--existing",
            "--ignore-existing",
            src_s,
            "hf://buckets/o/a"
        ]),
        Some(2)
    );
    assert_eq!(
        code(&["sync", "--apply", "x", src_s]),
        Some(2),
        "--apply takes no SRC"
    );
    // Down from a bucket that does not exist; into a path that is a file.
    assert_eq!(code(&["sync", "hf://buckets/o/none", src_s]), Some(5));
    xet_ok(url, home.path(), &["sync", src_s, "hf://buckets/o/a"]);
    let file = src.path().join("config.json");
    assert_eq!(
        code(&["sync", "hf://buckets/o/a", file.to_str().unwrap()]),
        Some(2)
    );

    // A plan that names a path outside the folder: refused before anything is done.
    let outside = tempfile::tempdir().unwrap();
    let victim = outside.path().join("victim.txt");
    std::fs::write(&victim, b"keep me").unwrap();
    let down = outside.path().join("down");
    std::fs::create_dir_all(&down).unwrap();
    for evil in ["../victim.txt", "/etc/passwd", "a//b", ""] {
        let plan = outside.path().join("evil.jsonl");
        let header = serde_json::json!({"type": "header", "source": "hf://buckets/o/a",
            "dest": down.to_str().unwrap(), "timestamp": "t"});
        let op = serde_json::json!({"type": "operation", "action": "delete", "path": evil,
            "reason": "x"});
        std::fs::write(&plan, format!("{header}\n{op}\n")).unwrap();
        let o = xet(
            url,
            home.path(),
            &["sync", "--apply", plan.to_str().unwrap()],
            None,
        );
        assert_eq!(
            o.status.code(),
            Some(3),
            "{evil}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(std::fs::read(&victim).unwrap(), b"keep me");
    }
    // Not a plan at all.
    let junk = outside.path().join("junk");
    std::fs::write(&junk, "not json\n").unwrap();
    assert_eq!(code(&["sync", "--apply", junk.to_str().unwrap()]), Some(3));
}
