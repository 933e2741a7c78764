//! The `xet` binary and the reference client (`hf_xet`) through one `xet serve` on
//! loopback: each downloads what the other uploaded, byte for byte.

use crate::common;

use common::Served;
use std::process::{Command, Stdio};

fn serve(store: &std::path::Path, extra: &[&str]) -> Served {
    Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(store)
            .args(extra)
            .stderr(Stdio::null()),
    )
}

const UPLOAD: &str = "import sys, json, warnings, hf_xet; warnings.filterwarnings('ignore'); \
r = hf_xet.upload_files(sys.argv[2:], sys.argv[1], None, None, None, 'model'); print(json.dumps([x.hash for x in r]))";
const DOWNLOAD: &str = "import sys, json, warnings, hf_xet; warnings.filterwarnings('ignore'); \
items = json.loads(sys.argv[2]); \
hf_xet.download_files([hf_xet.PyXetDownloadInfo(p, h, s) for h, s, p in items], sys.argv[1], None, None, None)";

fn corpus(dir: &std::path::Path) -> Vec<(std::path::PathBuf, String, u64)> {
    std::fs::create_dir_all(dir).unwrap();
    xet_testdata::corpus()
        .into_iter()
        .map(|c| {
            let p = dir.join(c.name);
            let data = c.bytes();
            std::fs::write(&p, &data).unwrap();
            (
                p,
                xet_chunk::file_hash(&data).to_string(),
                data.len() as u64,
            )
        })
        .collect()
}

fn both_directions(extra: &[&str]) {
    let py = xet_testdata::reference_python().expect("reference client");
    let tmp = tempfile::tempdir().unwrap();
    let server = serve(&tmp.path().join("store"), extra);

    // xet uploads, the reference downloads.
    let ours = corpus(&tmp.path().join("ours"));
    let o = Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(["upload", "--json", "--endpoint", &server.url])
        .arg(tmp.path().join("ours"))
        .env("XET_CACHE", tmp.path().join("xc"))
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let out = tmp.path().join("ref-out");
    std::fs::create_dir_all(&out).unwrap();
    let items: Vec<(String, u64, String)> = ours
        .iter()
        .map(|(p, h, s)| {
            (
                h.clone(),
                *s,
                out.join(p.file_name().unwrap()).display().to_string(),
            )
        })
        .collect();
    let o = Command::new(&py)
        .args([
            "-c",
            DOWNLOAD,
            &server.url,
            &serde_json::to_string(&items).unwrap(),
        ])
        .env("HF_XET_CACHE", tmp.path().join("hc1"))
        .env("HF_XET_TELEMETRY_ENABLED", "false")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "reference download: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (p, _, _) in &ours {
        assert_eq!(
            std::fs::read(out.join(p.file_name().unwrap())).unwrap(),
            std::fs::read(p).unwrap(),
            "{}",
            p.display()
        );
    }

    // The reference uploads other data, xet downloads it (verified).
    let theirs_dir = tmp.path().join("theirs");
    std::fs::create_dir_all(&theirs_dir).unwrap();
    let mut paths = Vec::new();
    for (i, n) in [0usize, 1, 70_000, 2_500_000].iter().enumerate() {
        let p = theirs_dir.join(format!("t{i}"));
        std::fs::write(
            &p,
            xet_testdata::generate(xet_testdata::Kind::Text, *n, 900 + i as u64),
        )
        .unwrap();
        paths.push(p.display().to_string());
    }
    let mut args = vec!["-c".to_string(), UPLOAD.to_string(), server.url.clone()];
    args.extend(paths.iter().cloned());
    let o = Command::new(&py)
        .args(&args)
        .env("HF_XET_CACHE", tmp.path().join("hc2"))
        .env("HF_XET_TELEMETRY_ENABLED", "false")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "reference upload: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let hashes: Vec<String> = serde_json::from_slice(&o.stdout).unwrap();
    for (h, p) in hashes.iter().zip(&paths) {
        let dest = tmp.path().join("x-out");
        let _ = std::fs::remove_file(&dest);
        let o = Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["download", "--endpoint", &server.url, h, "-o"])
            .arg(&dest)
            .env("XET_CACHE", tmp.path().join("xc2"))
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            std::fs::read(p).unwrap(),
            "{p}"
        );
    }
}

#[test]
fn xet_and_reference_interoperate_through_xet_serve() {
    both_directions(&[]);
}

#[test]
fn xet_and_reference_interoperate_on_the_v1_routes() {
    both_directions(&["--no-grants", "--no-v2"]);
}

/// `xet upload` into a store directory with no server, then `xet serve` on that
/// directory: the reference client downloads every file, byte for byte.
#[test]
fn reference_downloads_what_xet_uploaded_into_the_embedded_store() {
    let py = xet_testdata::reference_python().expect("reference client");
    let tmp = tempfile::tempdir().unwrap();
    let store = tmp.path().join("store");
    let xet_upload = |paths: &[&std::path::Path]| -> serde_json::Value {
        let o = Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["upload", "--json", "--store"])
            .arg(&store)
            .args(paths)
            .env("XET_CACHE", tmp.path().join("xc"))
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_TOKEN")
            .env_remove("XET_TOKEN_URL")
            .output()
            .unwrap();
        assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice(&o.stdout).unwrap()
    };

    // The corpus, then (a second run against the same store) a file made of pieces of
    // two corpus files around new bytes: its known parts deduplicate against the store.
    let mut files = corpus(&tmp.path().join("ours"));
    let up = xet_upload(&[&tmp.path().join("ours")]);
    let by_hash = |up: &serde_json::Value, hash: &str| -> serde_json::Value {
        up["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["hash"] == hash)
            .unwrap_or_else(|| panic!("{hash} not in {up}"))
            .clone()
    };
    for (p, h, s) in &files {
        assert_eq!(by_hash(&up, h)["size"], *s, "{}", p.display());
    }
    let base = xet_testdata::corpus();
    let piece = |name: &str| base.iter().find(|c| c.name == name).unwrap().bytes();
    let mixed = [
        &piece("random_5m")[..2_000_000],
        &xet_testdata::generate(xet_testdata::Kind::Random, 300_000, 77)[..],
        &piece("text_300k")[..],
    ]
    .concat();
    let mixed_path = tmp.path().join("mixed.bin");
    std::fs::write(&mixed_path, &mixed).unwrap();
    let mixed_hash = xet_chunk::file_hash(&mixed).to_string();
    let up2 = xet_upload(&[&mixed_path]);
    let m = by_hash(&up2, &mixed_hash);
    assert!(m["deduped_bytes"].as_u64().unwrap() > 1_000_000, "{m}");
    files.push((mixed_path, mixed_hash, mixed.len() as u64));

    // Serve that directory; the reference downloads everything by hash.
    let server = serve(&store, &[]);
    let out = tmp.path().join("ref-out");
    std::fs::create_dir_all(&out).unwrap();
    let items: Vec<(String, u64, String)> = files
        .iter()
        .map(|(p, h, s)| {
            (
                h.clone(),
                *s,
                out.join(p.file_name().unwrap()).display().to_string(),
            )
        })
        .collect();
    let o = Command::new(&py)
        .args([
            "-c",
            DOWNLOAD,
            &server.url,
            &serde_json::to_string(&items).unwrap(),
        ])
        .env("HF_XET_CACHE", tmp.path().join("hc"))
        .env("HF_XET_TELEMETRY_ENABLED", "false")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "reference download: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for (p, _, _) in &files {
        assert!(
            std::fs::read(out.join(p.file_name().unwrap())).unwrap() == std::fs::read(p).unwrap(),
            "{} differs",
            p.display()
        );
    }
}
