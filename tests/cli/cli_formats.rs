//! Black-box tests of the format commands: the real `xet` binary on real files, checked
//! against golden vectors generated with the reference client.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn xet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(args)
        .output()
        .expect("run xet")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn write_corpus(dir: &Path) -> Vec<(PathBuf, xet_testdata::GoldenFile)> {
    xet_testdata::golden_files()
        .into_iter()
        .map(|(c, g)| {
            let p = dir.join(&g.name);
            std::fs::write(&p, c.bytes()).unwrap();
            (p, g)
        })
        .collect()
}

fn ref_xorb() -> PathBuf {
    xet_testdata::reference_artifacts("xorbs").remove(0)
}

#[test]
fn hash_matches_reference_for_every_golden_file() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_corpus(dir.path());
    let mut args = vec!["hash", "--json", "--sha256"];
    let paths: Vec<String> = files.iter().map(|(p, _)| p.display().to_string()).collect();
    args.extend(paths.iter().map(String::as_str));
    let o = xet(&args);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let out = doc["files"].as_array().unwrap();
    assert_eq!(out.len(), files.len());
    for ((_, g), d) in files.iter().zip(out) {
        assert_eq!(d["hash"], g.hash, "{}", g.name);
        assert_eq!(d["size"], g.size, "{}", g.name);
        // The reference records zeros as the empty file's sha256; we print the real digest.
        if g.size > 0 {
            assert_eq!(d["sha256"], g.sha256, "{}", g.name);
        }
    }
}

#[test]
fn hash_text_and_quiet_forms() {
    let dir = tempfile::tempdir().unwrap();
    let files = write_corpus(dir.path());
    let (p, g) = &files.iter().find(|(_, g)| g.name == "random_5m").unwrap();
    let o = xet(&["hash", p.to_str().unwrap()]);
    assert!(o.status.success());
    let line = stdout(&o);
    assert!(
        line.starts_with(&g.hash) && line.contains(&g.size.to_string()),
        "{line}"
    );
    let o = xet(&["hash", "-q", p.to_str().unwrap()]);
    assert_eq!(stdout(&o).trim(), g.hash);
}

#[test]
fn chunk_lists_reference_boundaries() {
    let dir = tempfile::tempdir().unwrap();
    for (p, g) in write_corpus(dir.path()) {
        let o = xet(&["chunk", "--json", p.to_str().unwrap()]);
        assert!(o.status.success());
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let got: Vec<(u64, u64, String)> = doc["chunks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    c["offset"].as_u64().unwrap(),
                    c["len"].as_u64().unwrap(),
                    c["hash"].as_str().unwrap().to_string(),
                )
            })
            .collect();
        let want: Vec<(u64, u64, String)> = g
            .chunks
            .iter()
            .map(|c| (c.offset, c.len, c.hash.clone()))
            .collect();
        assert_eq!(got, want, "{}", g.name);
    }
}

#[test]
fn missing_input_is_an_input_error() {
    let o = xet(&["hash", "/nonexistent/file"]);
    assert_eq!(o.status.code(), Some(3));
    assert!(stderr(&o).contains("/nonexistent/file"), "{}", stderr(&o));
    let o = xet(&["hash", "--json", "/nonexistent/file"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["ok"], false);
    assert_eq!(doc["error"]["kind"], "input");
}

#[test]
fn bad_flags_are_usage_errors() {
    assert_eq!(xet(&["hash"]).status.code(), Some(2));
    assert_eq!(xet(&["hash", "--no-such-flag", "x"]).status.code(), Some(2));
    assert_eq!(xet(&["frobnicate"]).status.code(), Some(2));
    assert_eq!(
        xet(&[
            "xorb",
            "verify",
            &ref_xorb().display().to_string(),
            "--hash",
            "xyz"
        ])
        .status
        .code(),
        Some(2)
    );
    assert!(xet(&["--help"]).status.success());
}

#[test]
fn reference_xorb_verifies_in_both_forms() {
    let path = ref_xorb();
    let name_hash = path
        .file_name()
        .unwrap()
        .to_str()
        .unwrap()
        .trim_start_matches("default.")
        .to_string();
    let o = xet(&[
        "xorb",
        "verify",
        "--json",
        path.to_str().unwrap(),
        "--hash",
        &name_hash,
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["hash"], name_hash);
    assert_eq!(doc["form"], "footered");

    // The upload form: the same bytes without the footer.
    let bytes = std::fs::read(&path).unwrap();
    let info = u32::from_le_bytes(bytes[bytes.len() - 4..].try_into().unwrap()) as usize;
    let body = &bytes[..bytes.len() - 4 - info];
    let dir = tempfile::tempdir().unwrap();
    let bp = dir.path().join("body");
    std::fs::write(&bp, body).unwrap();
    let o = xet(&["xorb", "verify", bp.to_str().unwrap(), "--hash", &name_hash]);
    assert!(o.status.success(), "{}", stderr(&o));

    let o = xet(&["xorb", "inspect", "--json", bp.to_str().unwrap()]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["form"], "upload body");
    let schemes: std::collections::BTreeSet<&str> = doc["chunks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["scheme"].as_str().unwrap())
        .collect();
    assert_eq!(
        schemes.len(),
        3,
        "reference xorb uses all three schemes: {schemes:?}"
    );

    // One flipped byte in a chunk payload: the hash no longer matches.
    let mut bad = body.to_vec();
    bad[20_000] ^= 0x40;
    std::fs::write(&bp, &bad).unwrap();
    let o = xet(&["xorb", "verify", bp.to_str().unwrap(), "--hash", &name_hash]);
    assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
    let err = stderr(&o);
    assert_eq!(err.trim().lines().count(), 1, "one-line reason: {err}");
    // Truncated footered xorb.
    std::fs::write(&bp, &bytes[..bytes.len() - 7]).unwrap();
    assert_eq!(
        xet(&["xorb", "verify", bp.to_str().unwrap()]).status.code(),
        Some(3)
    );
}

#[test]
fn reference_shards_verify_and_corruption_is_caught() {
    for sub in ["shards", "shard-cache"] {
        for path in xet_testdata::reference_artifacts(sub) {
            let o = xet(&["shard", "verify", "--json", path.to_str().unwrap()]);
            assert!(o.status.success(), "{}: {}", path.display(), stderr(&o));
            let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert!(doc["checked_file_hashes"].as_u64().unwrap() >= 3);
            let o = xet(&["shard", "inspect", "--json", path.to_str().unwrap()]);
            let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
            assert_eq!(doc["form"], "stored");
            assert_eq!(
                doc["hash"].as_str().unwrap(),
                path.file_stem().unwrap().to_str().unwrap()
            );

            let bytes = std::fs::read(&path).unwrap();
            let dir = tempfile::tempdir().unwrap();
            let bp = dir.path().join("bad.mdb");
            // Truncated.
            std::fs::write(&bp, &bytes[..bytes.len() / 2]).unwrap();
            let o = xet(&["shard", "verify", bp.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(3));
            // A flipped byte in the second file's verification entry (header 48, empty file 96, then header, term, verification).
            let mut bad = bytes.clone();
            bad[48 * 5 + 10] ^= 1;
            std::fs::write(&bp, &bad).unwrap();
            let o = xet(&["shard", "verify", bp.to_str().unwrap()]);
            assert_eq!(o.status.code(), Some(3), "{}", stdout(&o));
        }
    }
}
