//! `xet serve --store s3://BUCKET/PREFIX` on a real object store (SeaweedFS on loopback,
//! started here; see `xet_testdata::S3Server`): `xet upload --endpoint` and
//! `xet download --endpoint` through it, a second `xet serve` on the same bucket serving
//! what the first stored, clear failures for a missing or unreachable bucket and a wrong
//! secret, and an upload that survives the object store being killed and restarted.
//!
//! Without SeaweedFS the tests print SKIP and pass, unless `XET_REQUIRE_REFERENCE=1`
//! (`cargo xtask test`), which makes them fail.

use crate::common;

use common::Served;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use xet_testdata::{S3Server, private_s3, shared_s3};

/// `xet` with the S3 server's credentials and nothing else from the caller's AWS_*
/// environment.
fn xet(s3: &S3Server) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("AWS_")) {
            c.env_remove(k);
        }
    }
    c.env("AWS_ACCESS_KEY_ID", s3.access_key_id())
        .env("AWS_SECRET_ACCESS_KEY", s3.secret_access_key())
        .env("AWS_REGION", s3.region())
        .env("AWS_ENDPOINT_URL", s3.endpoint())
        .env_remove("XET_STORE")
        .env_remove("XET_ENDPOINT");
    c
}

fn serve(s3: &S3Server, store: &str, extra: &[&str]) -> Served {
    Served::spawn(
        xet(s3)
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

fn download(s3: &S3Server, url: &str, hash: &str, dest: &Path, cache: &Path) {
    let o = xet(s3)
        .args(["--json", "download", "--endpoint", url, hash, "-o"])
        .arg(dest)
        .env("XET_CACHE", cache)
        .output()
        .unwrap();
    ok(&o, &format!("download {hash}"));
}

#[test]
fn upload_and_download_through_xet_serve_on_s3() {
    let Some(s3) = shared_s3() else { return };
    let bucket = s3.fresh_bucket().unwrap();
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

    let server = serve(s3, &store, &[]);
    let o = xet(s3)
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
            s3,
            &server.url,
            &hash_of(name),
            &dest,
            &tmp.path().join("c1"),
        );
        assert_eq!(&std::fs::read(&dest).unwrap(), data, "{name}");
    }
    drop(server);

    // The objects are in the bucket under the prefix; a new server process serves them.
    let server = serve(s3, &store, &["--s3-conditional-put", "on"]);
    for (name, data) in &files {
        let dest = tmp.path().join(format!("out2-{name}"));
        download(
            s3,
            &server.url,
            &hash_of(name),
            &dest,
            &tmp.path().join("c2"),
        );
        assert_eq!(&std::fs::read(&dest).unwrap(), data, "{name}");
    }
    // Uploading the same files again stores nothing new.
    let o = xet(s3)
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
    let Some(s3) = shared_s3() else { return };
    let bucket = s3.fresh_bucket().unwrap();
    let store = format!("s3://{bucket}");
    let a = serve(s3, &store, &[]);
    let b = serve(s3, &store, &["--s3-refresh-secs", "1"]);
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("f");
    let data = xet_testdata::generate(xet_testdata::Kind::Text, 200_000, 77);
    std::fs::write(&file, &data).unwrap();
    let o = xet(s3)
        .args(["--json", "upload", "--endpoint", &a.url])
        .arg(&file)
        .env("XET_CACHE", tmp.path().join("cache-up"))
        .output()
        .unwrap();
    let up = ok(&o, "upload");
    let hash = up["files"][0]["hash"].as_str().unwrap().to_string();
    let dest = tmp.path().join("out");
    // The second server refreshes every second (and on a read miss): a few tries.
    for attempt in 1.. {
        let o = xet(s3)
            .args(["download", "--endpoint", &b.url, &hash, "-o"])
            .arg(&dest)
            .env("XET_CACHE", tmp.path().join("cache-down"))
            .output()
            .unwrap();
        if o.status.success() {
            break;
        }
        assert!(
            attempt < 10,
            "never downloadable through the second server: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    assert_eq!(std::fs::read(&dest).unwrap(), data);
}

#[test]
fn a_missing_or_unreachable_bucket_is_a_clear_error() {
    let Some(s3) = shared_s3() else { return };
    let o = xet(s3)
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
    let o = xet(s3)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "s3://bucket"])
        .args(["--s3-endpoint", &format!("http://127.0.0.1:{port}")])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot reach bucket \"bucket\""), "{err}");
    // An endpoint that takes connections and closes them: the server gives up after a
    // request and two retries.
    let closing = xet_testdata::proxy::ClosingPort::start();
    let o = xet(s3)
        .args(["serve", "--listen", "127.0.0.1:0", "--store", "s3://bucket"])
        .args([
            "--s3-endpoint",
            &format!("http://127.0.0.1:{}", closing.port()),
        ])
        .output()
        .unwrap();
    assert!(!o.status.success());
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("cannot reach bucket \"bucket\""), "{err}");
    let tries = closing.accepted();
    assert!((1..=3).contains(&tries), "{tries} connections: {err}");

    let o = xet(s3)
        .args(["serve", "--store", "s3://Bad_Bucket"])
        .output()
        .unwrap();
    assert_eq!(o.status.code(), Some(2), "a bad URL is a usage error");
    assert!(String::from_utf8_lossy(&o.stderr).contains("invalid bucket name"));
}

/// Run `cmd` to its end, killing it (and failing) if it takes longer than `limit`.
fn output_within(cmd: &mut Command, limit: Duration) -> Output {
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if t.elapsed() > limit {
            let _ = child.kill();
            let o = child.wait_with_output().unwrap();
            panic!(
                "{cmd:?} still running after {limit:?}: {}",
                String::from_utf8_lossy(&o.stderr)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    child.wait_with_output().unwrap()
}

/// The object store checks signatures: `xet serve` with a wrong secret (or an unknown
/// key) fails at start-up, at once (no request retried: counted through a proxy in front
/// of the object store), with exit code 4 and an error naming the store, the endpoint and
/// the server's reason; nothing is written to the bucket.
#[test]
fn a_wrong_secret_is_refused_at_start_up() {
    let Some(s3) = shared_s3() else { return };
    let proxy = xet_testdata::proxy::Proxy::start(&s3.endpoint());
    let bucket = s3.fresh_bucket().unwrap();
    let store = format!("s3://{bucket}/x");
    for (key, secret, reason) in [
        (
            s3.access_key_id(),
            "not-the-secret",
            "SignatureDoesNotMatch",
        ),
        ("no-such-key", s3.secret_access_key(), "InvalidAccessKeyId"),
    ] {
        proxy.clear_log();
        let o = output_within(
            xet(s3)
                .env("AWS_ACCESS_KEY_ID", key)
                .env("AWS_SECRET_ACCESS_KEY", secret)
                .env("AWS_ENDPOINT_URL", &proxy.url)
                .args(["serve", "--listen", "127.0.0.1:0", "--store", &store]),
            Duration::from_secs(60),
        );
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(
            o.status.code(),
            Some(4),
            "refused credentials are an auth failure: {err}"
        );
        assert!(
            err.contains(&store) && err.contains(&proxy.url) && err.contains(reason),
            "{err}"
        );
        assert!(
            err.contains("refused access") && err.contains("AWS_SECRET_ACCESS_KEY"),
            "{err}"
        );
        assert!(!err.contains(secret), "the secret is printed: {err}");
        assert!(
            !proxy.log().is_empty(),
            "the refusal came from the object store"
        );
        let repeated = proxy.repeated();
        assert!(
            repeated.is_empty(),
            "a refused request was retried: {repeated:?}"
        );
    }
    assert_eq!(s3.list_objects(&bucket, "").unwrap(), vec![]);
}

/// The object store is killed (SIGKILL, as a crash) in the middle of an upload through
/// `xet serve` — after its first xorb is stored, before any shard — and restarted on the
/// same data and port two seconds later. The upload completes (the server's S3 retries,
/// then the client's, carry it), and the bucket holds only whole, valid objects: every
/// xorb verifies against its name, every shard parses, and every file downloads byte for
/// byte, through the server that lived through the outage and through a new one that
/// indexes the bucket from scratch.
#[test]
fn an_upload_survives_the_object_store_killed_and_restarted() {
    let Some(mut s3) = private_s3() else { return };
    let bucket = s3.fresh_bucket().unwrap();
    let prefix = "xet/store";
    let store = format!("s3://{bucket}/{prefix}");
    let tmp = tempfile::tempdir().unwrap();
    let input = tmp.path().join("in");
    std::fs::create_dir_all(&input).unwrap();
    // About 160 MB of incompressible data: three xorbs, so the first is stored while the
    // others are still on their way.
    let files: Vec<(String, Vec<u8>)> = (0..4u64)
        .map(|i| {
            let name = format!("f{i}");
            let size = 40_000_000 + i as usize * 1000;
            let data = xet_testdata::generate(xet_testdata::Kind::Random, size, 100 + i);
            std::fs::write(input.join(&name), &data).unwrap();
            (name, data)
        })
        .collect();
    let serve_log = tmp.path().join("serve.log");
    let server = Served::spawn(
        xet(&s3)
            .args(["serve", "--listen", "127.0.0.1:0", "--store", &store])
            .stderr(std::fs::File::create(&serve_log).unwrap()),
    );
    let mut upload = xet(&s3)
        .args(["--json", "upload", "--endpoint", &server.url])
        .arg(&input)
        .env("XET_CACHE", tmp.path().join("cache-up"))
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();

    let t = Instant::now();
    let at_kill = loop {
        let objects = s3.list_objects(&bucket, prefix).unwrap();
        let count = |dir: &str| {
            let dir = format!("{prefix}/{dir}/");
            objects.iter().filter(|(k, _)| k.starts_with(&dir)).count()
        };
        let (xorbs, shards) = (count("xorbs"), count("shards"));
        assert_eq!(shards, 0, "the upload got to its shards before a kill");
        if xorbs > 0 {
            s3.kill();
            break xorbs;
        }
        assert!(
            upload.try_wait().unwrap().is_none(),
            "the upload ended before any xorb was stored"
        );
        assert!(
            t.elapsed() < Duration::from_secs(180),
            "no xorb after 3 min"
        );
        std::thread::sleep(Duration::from_millis(20));
    };
    let killed_at = t.elapsed();
    assert!(
        upload.try_wait().unwrap().is_none(),
        "the upload was over when the object store was killed"
    );
    std::thread::sleep(Duration::from_secs(2));
    s3.restart().unwrap();
    let up_again = t.elapsed();
    let out = upload.wait_with_output().unwrap();
    let done = t.elapsed();
    assert!(
        out.status.success(),
        "upload: {}\nxet serve said:\n{}",
        String::from_utf8_lossy(&out.stderr),
        std::fs::read_to_string(&serve_log).unwrap_or_default()
    );
    eprintln!(
        "object store killed at {killed_at:.1?} with {at_kill} xorb(s) stored, up again at \
         {up_again:.1?}, upload done at {done:.1?}"
    );
    let up: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let hash_of = |name: &str| -> String {
        up["files"]
            .as_array()
            .unwrap()
            .iter()
            .find(|f| f["path"].as_str().unwrap().ends_with(&format!("/{name}")))
            .unwrap_or_else(|| panic!("{name} not in {up}"))["hash"]
            .as_str()
            .unwrap()
            .to_string()
    };

    // Everything in the bucket is a whole store object under the prefix.
    let objects = s3.list_objects(&bucket, "").unwrap();
    let dir = tmp.path().join("objects");
    std::fs::create_dir_all(&dir).unwrap();
    let (mut xorbs, mut shards) = (0, 0);
    for (key, size) in &objects {
        let rel = key
            .strip_prefix(&format!("{prefix}/"))
            .unwrap_or_else(|| panic!("{key}: outside the store's prefix"));
        let bytes = s3
            .get_object(&bucket, key)
            .unwrap()
            .unwrap_or_else(|| panic!("{key} listed but not there"));
        assert_eq!(bytes.len() as u64, *size, "{key}");
        let file = dir.join(rel.replace('/', "_"));
        std::fs::write(&file, &bytes).unwrap();
        let check = if let Some(hash) = rel.strip_prefix("xorbs/") {
            xorbs += 1;
            xet(&s3)
                .args(["xorb", "verify", "--hash", hash])
                .arg(&file)
                .output()
                .unwrap()
        } else if let Some(name) = rel.strip_prefix("shards/") {
            shards += 1;
            assert!(name.ends_with(".mdb"), "{key}");
            xet(&s3)
                .args(["shard", "verify"])
                .arg(&file)
                .output()
                .unwrap()
        } else {
            assert_eq!(rel, "meta/dedup-secret", "unexpected object {key}");
            assert_eq!(bytes.len(), 32);
            continue;
        };
        assert!(
            check.status.success(),
            "{key}: {}",
            String::from_utf8_lossy(&check.stderr)
        );
    }
    assert!(xorbs >= 3 && shards >= 1, "{objects:?}");

    let downloads = |url: &str, round: &str| {
        for (name, data) in &files {
            let dest = tmp.path().join(format!("{round}-{name}"));
            download(&s3, url, &hash_of(name), &dest, &tmp.path().join(round));
            assert!(std::fs::read(&dest).unwrap() == *data, "{name} via {round}");
            std::fs::remove_file(&dest).unwrap();
        }
    };
    downloads(&server.url, "old");
    drop(server);
    let server = serve(&s3, &store, &[]);
    downloads(&server.url, "new");
}
