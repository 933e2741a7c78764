//! `xet serve --store s3://BUCKET/PREFIX` on a real S3-compatible server (moto on
//! loopback, started here; see `xet_testdata::MotoServer`): `xet upload --endpoint` and
//! `xet download --endpoint` through it, a second `xet serve` on the same bucket serving
//! what the first stored, and clear failures for a missing or unreachable bucket.
//!
//! Without moto the tests print SKIP and pass, unless `XET_REQUIRE_REFERENCE=1`
//! (`cargo xtask test`), which makes them fail.

mod common;

use common::Served;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use xet_testdata::{MotoServer, shared_moto};

/// `xet` with moto's credentials and nothing else from the caller's AWS_* environment.
fn xet(moto: &MotoServer) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("AWS_")) {
            c.env_remove(k);
        }
    }
    c.env("AWS_ACCESS_KEY_ID", "testing")
        .env("AWS_SECRET_ACCESS_KEY", "testing")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_ENDPOINT_URL", moto.endpoint())
        .env_remove("XET_STORE")
        .env_remove("XET_ENDPOINT");
    c
}

fn serve(moto: &MotoServer, store: &str, extra: &[&str]) -> Served {
    Served::spawn(
        xet(moto)
            .args(["serve", "--listen", "127.0.0.1:0", "--store", store])
            .args(extra)
            .stderr(Stdio::null()),
    )
}

fn ok(o: &Output, what: &str) -> serde_json::Value {
    assert!(
        o.status.success(),
        "{what}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    serde_json::from_slice(&o.stdout).unwrap_or_else(|e| panic!("{what}: {e}"))
}

fn download(moto: &MotoServer, url: &str, hash: &str, dest: &Path, cache: &Path) {
    let o = xet(moto)
        .args(["--json", "download", "--endpoint", url, hash, "-o"])
        .arg(dest)
        .env("XET_CACHE", cache)
        .output()
        .unwrap();
    ok(&o, &format!("download {hash}"));
}

#[test]
fn upload_and_download_through_xet_serve_on_s3() {
    let Some(moto) = shared_moto() else { return };
    let bucket = moto.fresh_bucket().unwrap();
    let store = format!("s3://{bucket}/xet/store");
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    let files: Vec<(String, Vec<u8>)> = [
        ("text", xet_testdata::Kind::Text, 3_000_000, 1),
        ("random", xet_testdata::Kind::Random, 1_500_000, 2),
        ("small", xet_testdata::Kind::Random, 1000, 3),
        ("empty", xet_testdata::Kind::Zeros, 0, 4),
    ]
    .into_iter()
    .map(|(name, kind, size, seed)| {
        let data = xet_testdata::generate(kind, size, seed);
        std::fs::write(input.join(name), &data).unwrap();
        (name.to_string(), data)
    })
    .collect();

    let server = serve(moto, &store, &[]);
    let o = xet(moto)
        .args(["--json", "upload", "--endpoint", &server.url])
        .arg(&input)
        .env("XET_CACHE", tmp.path().join("cache-up"))
        .output()
        .unwrap();
    let up = ok(&o, "upload");
    let uploaded = up["files"].as_array().unwrap();
    assert_eq!(uploaded.len(), files.len());
    let hash_of = |name: &str| -> String {
        uploaded
            .iter()
            .find(|f| f["path"].as_str().unwrap().ends_with(&format!("/{name}")))
            .unwrap_or_else(|| panic!("{name} not in {up}"))["hash"]
            .as_str()
            .unwrap()
            .to_string()
    };
    for (name, data) in &files {
        let dest = tmp.path().join(format!("out1-{name}"));
        download(
            moto,
            &server.url,
            &hash_of(name),
            &dest,
            &tmp.path().join("c1"),
        );
        assert_eq!(&std::fs::read(&dest).unwrap(), data, "{name}");
    }
    drop(server);

    // The objects are in the bucket under the prefix; a new server process serves them.
    let server = serve(moto, &store, &["--s3-conditional-put", "on"]);
    for (name, data) in &files {
        let dest = tmp.path().join(format!("out2-{name}"));
        download(
            moto,
            &server.url,
            &hash_of(name),
            &dest,
            &tmp.path().join("c2"),
        );
        assert_eq!(&std::fs::read(&dest).unwrap(), data, "{name}");
    }
    // Uploading the same files again stores nothing new.
    let o = xet(moto)
        .args(["--json", "upload", "--endpoint", &server.url])
        .arg(&input)
        .env("XET_CACHE", tmp.path().join("cache-up2"))
        .output()
        .unwrap();
    let again = ok(&o, "second upload");
    assert_eq!(again["totals"]["new_bytes"], 0, "{again}");
}

/// Two servers on one bucket at once: what is uploaded through one becomes downloadable
/// through the other (it indexes new shards every `--s3-refresh-secs`).
#[test]
fn two_servers_share_a_bucket() {
    let Some(moto) = shared_moto() else { return };
    let bucket = moto.fresh_bucket().unwrap();
    let store = format!("s3://{bucket}");
    let a = serve(moto, &store, &[]);
    let b = serve(moto, &store, &["--s3-refresh-secs", "1"]);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    let data = xet_testdata::generate(xet_testdata::Kind::Text, 200_000, 77);
    std::fs::write(&file, &data).unwrap();
    let o = xet(moto)
        .args(["--json", "upload", "--endpoint", &a.url])
        .arg(&file)
        .env("XET_CACHE", tmp.path().join("cache-up"))
        .output()
        .unwrap();
    let up = ok(&o, "upload");
    let hash = up["files"][0]["hash"].as_str().unwrap().to_string();
    let dest = tmp.path().join("out");
    let t = Instant::now();
    loop {
        let o = xet(moto)
            .args(["download", "--endpoint", &b.url, &hash, "-o"])
            .arg(&dest)
            .env("XET_CACHE", tmp.path().join("cache-down"))
            .output()
            .unwrap();
        if o.status.success() {
            break;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "never downloadable through the second server: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(300));
    }
    assert_eq!(std::fs::read(&dest).unwrap(), data);
}

#[test]
fn a_missing_or_unreachable_bucket_is_a_clear_error() {
    let Some(moto) = shared_moto() else { return };
    let o = xet(moto)
        .args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg("s3://no-such-bucket/x")
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(
        err.contains("s3://no-such-bucket/x") && err.contains("does not exist"),
        "{err}"
    );

    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let o = xet(moto)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "s3://bucket"])
        .args(["--s3-endpoint", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot reach bucket \"bucket\""), "{err}");
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());

    let o = xet(moto)
        .args(["serve", "--store", "s3://Bad_Bucket"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "a bad URL is a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid bucket name"));
}
