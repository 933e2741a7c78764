//! `xet bundle` through the real binary: bundles read by the real swh-shard 2.2.1, round
//! trips into empty stores, selections, read-only serving to the reference client, and
//! damaged bundles.

use crate::common;

use common::Served;
use serde_json::Value;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

struct Env {
    dir: tempfile::TempDir,
}

/// A corpus file as written to disk: its path, hash string and content.
#[derive(Clone)]
struct File {
    path: PathBuf,
    hash: String,
    data: Vec<u8>,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
        c.args(args)
            .env("XET_CACHE", self.path("cache"))
            .env_remove("XET_STORE")
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_TOKEN")
            .env_remove("XET_TOKEN_URL");
        c
    }
    fn xet(&self, args: &[&str]) -> Output {
        let o = self.command(args).output().expect("run xet");
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(!err.contains("panicked"), "xet {args:?} panicked: {err}");
        o
    }
    /// Run, expect success, parse the `--json` document.
    fn json(&self, args: &[&str]) -> Value {
        let mut a = args.to_vec();
        a.push("--json");
        let o = self.xet(&a);
        assert!(
            o.status.success(),
            "xet {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }
    /// Run, expect exit `code`; stderr.
    fn fails(&self, code: i32, args: &[&str]) -> String {
        let o = self.xet(args);
        let err = String::from_utf8_lossy(&o.stderr).to_string();
        assert_eq!(o.status.code(), Some(code), "xet {args:?}: {err}");
        err
    }
    /// Write corpus files under `dir` and upload them into `store` in one run.
    fn upload(&self, store: &Path, dir: &str, names: &[&str]) -> Vec<File> {
        let d = self.path(dir);
        std::fs::create_dir_all(&d).unwrap();
        let files: Vec<File> = xet_testdata::corpus()
            .into_iter()
            .filter(|c| names.is_empty() || names.contains(&c.name))
            .map(|c| {
                let data = c.bytes();
                let path = d.join(c.name);
                std::fs::write(&path, &data).unwrap();
                let hash = xet_chunk::file_hash(&data).to_string();
                File { path, hash, data }
            })
            .collect();
        let mut args = vec!["upload", "--store", store.to_str().unwrap()];
        args.extend(files.iter().map(|f| f.path.to_str().unwrap()));
        self.json(&args);
        files
    }
    /// Download every file from `--store`/`--endpoint` `source`, compare byte for byte.
    fn downloads_identical(&self, flag: &str, source: &str, files: &[File]) {
        let out = self.path(&format!("out-{}", files.len()));
        let _ = std::fs::remove_dir_all(&out);
        let mut args = vec!["download", flag, source, "-o"];
        let out_arg = format!("{}/", out.display());
        args.push(&out_arg);
        args.extend(files.iter().map(|f| f.hash.as_str()));
        self.json(&args);
        for f in files {
            let got = std::fs::read(out.join(&f.hash)).unwrap();
            assert!(got == f.data, "{} differs", f.path.display());
        }
    }
}

fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The raw bytes of a hash string, as plain hex: each 16-digit word byte-reversed.
fn raw_hex(hash: &str) -> String {
    (0..4)
        .map(|w| {
            let word = &hash[16 * w..16 * w + 16];
            (0..8)
                .rev()
                .map(|i| &word[2 * i..2 * i + 2])
                .collect::<String>()
        })
        .collect()
}

/// The objects `xet bundle ls --json` lists: (kind, hash, key, size).
fn objects(env: &Env, bundle: &Path) -> Vec<(String, String, String, u64)> {
    env.json(&["bundle", "ls", s(bundle)])["objects"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| {
            (
                o["kind"].as_str().unwrap().to_string(),
                o["hash"].as_str().unwrap().to_string(),
                o["key"].as_str().unwrap().to_string(),
                o["size"].as_u64().unwrap(),
            )
        })
        .collect()
}

/// Where the store directory keeps an object.
fn stored_path(store: &Path, kind: &str, hash: &str) -> PathBuf {
    match kind {
        "xorb" => store.join("xorbs").join(hash),
        _ => store.join("shards").join(format!("{hash}.mdb")),
    }
}

/// Reads every key of a shard with the real swh-shard: writes `key ‖ u64 size ‖ value` for
/// each key of the keys file, and checks iteration gives exactly those keys.
const SWH_READ: &str = r#"
import sys
from swh.shard import Shard
shard, keys_path, out_path = sys.argv[1:4]
raw = open(keys_path, "rb").read()
keys = [raw[i:i + 32] for i in range(0, len(raw), 32)]
with Shard(shard) as s, open(out_path, "wb") as out:
    listed = sorted(s)
    assert listed == sorted(keys), f"iteration gives {len(listed)} keys, expected {len(keys)}"
    for k in keys:
        v = s[k]
        out.write(k + len(v).to_bytes(8, "big") + v)
"#;

fn hex_bytes(h: &str) -> Vec<u8> {
    (0..h.len() / 2)
        .map(|i| u8::from_str_radix(&h[2 * i..2 * i + 2], 16).unwrap())
        .collect()
}

#[test]
fn swh_shard_reads_every_object_of_a_bundle_byte_for_byte() {
    let python = xet_testdata::swh::swh_python().expect("swh-shard in the reference venv");
    let env = Env::new();
    let store = env.path("store");
    env.upload(&store, "src", &[]);
    let bundle = env.path("all.swh");
    let made = env.json(&[
        "bundle",
        "create",
        s(&bundle),
        "--all",
        "--store",
        s(&store),
    ]);
    let listed = objects(&env, &bundle);
    assert_eq!(made["objects"].as_u64(), Some(listed.len() as u64 + 1));
    let manifest_key = env.json(&["bundle", "ls", s(&bundle)])["manifest_key"]
        .as_str()
        .unwrap()
        .to_string();
    let mut keys = hex_bytes(&manifest_key);
    let mut expected = Vec::new();
    for (kind, hash, key, size) in &listed {
        assert_eq!(
            *key,
            raw_hex(hash),
            "{kind} {hash}: the key is the raw bytes"
        );
        assert_ne!(key, hash);
        let value = std::fs::read(stored_path(&store, kind, hash)).unwrap();
        assert_eq!(value.len() as u64, *size);
        keys.extend(hex_bytes(key));
        expected.push((hex_bytes(key), value));
    }
    let keys_path = env.path("keys");
    std::fs::write(&keys_path, &keys).unwrap();
    let out_path = env.path("read");
    let o = Command::new(&python)
        .args(["-c", SWH_READ, s(&bundle), s(&keys_path), s(&out_path)])
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "swh-shard: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let got = std::fs::read(&out_path).unwrap();
    // The manifest first (its key came first), then every object as the store holds it.
    let manifest_len = u64::from_be_bytes(got[32..40].try_into().unwrap()) as usize;
    let manifest: Value = serde_json::from_slice(&got[40..40 + manifest_len]).unwrap();
    assert_eq!(manifest["format"], "xet-bundle");
    let mut rest = &got[40 + manifest_len..];
    for (key, value) in expected {
        assert_eq!(&rest[..32], &key[..]);
        let n = u64::from_be_bytes(rest[32..40].try_into().unwrap()) as usize;
        assert!(rest[40..40 + n] == value[..], "value of key {key:02x?}");
        rest = &rest[40 + n..];
    }
    assert!(rest.is_empty());
    let check = Command::new(&python)
        .args(["-m", "swh.shard.cli", "check", s(&bundle)])
        .output()
        .unwrap();
    assert!(
        check.status.success(),
        "swh-shard check: {}",
        String::from_utf8_lossy(&check.stdout)
    );
}

#[test]
fn a_store_survives_a_round_trip_through_a_bundle() {
    let env = Env::new();
    let store = env.path("store");
    let files = env.upload(&store, "src", &[]);
    let bundle = env.path("all.swh");
    let made = env.json(&[
        "bundle",
        "create",
        s(&bundle),
        "--all",
        "--store",
        s(&store),
    ]);
    assert_eq!(made["files"].as_u64(), Some(files.len() as u64));
    // A file to hand on: the mode any new file gets here, not a temporary file's 0600.
    let umask = std::process::Command::new("sh")
        .args(["-c", "umask"])
        .output()
        .unwrap();
    let umask = u32::from_str_radix(String::from_utf8_lossy(&umask.stdout).trim(), 8).unwrap();
    let mode =
        std::os::unix::fs::PermissionsExt::mode(&std::fs::metadata(&bundle).unwrap().permissions());
    assert_eq!(mode & 0o777, 0o666 & !umask, "{mode:o}");
    let again = env.path("again.swh");
    env.json(&["bundle", "create", s(&again), "--all", "--store", s(&store)]);
    assert!(
        std::fs::read(&bundle).unwrap() == std::fs::read(&again).unwrap(),
        "not deterministic"
    );
    env.json(&["bundle", "verify", s(&bundle)]);

    let copy = env.path("copy");
    let first = env.json(&["bundle", "import", s(&bundle), "--store", s(&copy)]);
    assert!(first["xorbs"]["stored"].as_u64().unwrap() > 0, "{first}");
    assert_eq!(first["xorbs"]["rejected"], 0);
    env.downloads_identical("--store", s(&copy), &files);
    let second = env.json(&["bundle", "import", s(&bundle), "--store", s(&copy)]);
    assert_eq!(second["xorbs"]["stored"], 0, "{second}");
    assert_eq!(second["shards"]["stored"], 0, "{second}");
    assert_eq!(second["bytes_stored"], 0);
    assert_eq!(second["xorbs"]["present"], first["xorbs"]["stored"]);
    // Served straight from the bundle, too.
    env.downloads_identical("--store", s(&bundle), &files);
}

#[test]
fn a_bundle_of_some_files_holds_just_what_they_need() {
    let env = Env::new();
    let store = env.path("store");
    // Two uploads: the files of the second live in xorbs of their own.
    let kept = env.upload(&store, "a", &["text_300k", "float32_1m"]);
    let before: Vec<_> = std::fs::read_dir(store.join("xorbs"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    let others = env.upload(&store, "b", &["random_5m", "insert_base_3m"]);
    let list = env.path("list");
    std::fs::write(
        &list,
        format!(
            "{} weights/text.txt\n# a comment\n{}\n",
            kept[0].hash, kept[1].hash
        ),
    )
    .unwrap();
    let bundle = env.path("some.swh");
    let made = env.json(&[
        "bundle",
        "create",
        s(&bundle),
        "--files-from",
        s(&list),
        "--store",
        s(&store),
    ]);
    assert_eq!(made["files"], 2);
    let ls = env.json(&["bundle", "ls", s(&bundle)]);
    assert_eq!(ls["files"][0]["name"], "weights/text.txt");
    assert!(ls["files"][1]["name"].is_null());
    let xorbs: Vec<String> = objects(&env, &bundle)
        .into_iter()
        .filter(|o| o.0 == "xorb")
        .map(|o| o.1)
        .collect();
    assert!(!xorbs.is_empty());
    for x in &xorbs {
        assert!(
            before.iter().any(|n| n.to_str() == Some(x.as_str())),
            "xorb {x} of the second upload came along"
        );
    }
    let copy = env.path("copy");
    env.json(&["bundle", "import", s(&bundle), "--store", s(&copy)]);
    env.downloads_identical("--store", s(&copy), &kept);
    for f in &others {
        env.fails(
            5,
            &[
                "download",
                "--store",
                s(&copy),
                &f.hash,
                "-o",
                s(&env.path("x")),
            ],
        );
    }
    let missing = "0123456789abcdef".repeat(4);
    let err = env.fails(
        5,
        &[
            "bundle",
            "create",
            s(&env.path("none.swh")),
            &missing,
            "--store",
            s(&store),
        ],
    );
    assert!(err.contains(&missing), "{err}");
    assert!(!env.path("none.swh").exists());
}

/// `POST path` with `body`; the status and the answer's body.
fn post(url: &str, path: &str, body: &[u8]) -> (u16, String) {
    let addr = url.strip_prefix("http://").unwrap().trim_end_matches('/');
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    write!(
        c,
        "POST {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        body.len()
    )
    .unwrap();
    c.write_all(body).unwrap();
    let mut answer = String::new();
    let mut raw = Vec::new();
    c.read_to_end(&mut raw).unwrap();
    answer.push_str(&String::from_utf8_lossy(&raw));
    let status = answer.split(' ').nth(1).unwrap().parse().unwrap();
    (
        status,
        answer.split("\r\n\r\n").nth(1).unwrap_or("").to_string(),
    )
}

const HF_DOWNLOAD: &str = "import sys, json, warnings, hf_xet; warnings.filterwarnings('ignore'); \
items = json.loads(sys.argv[2]); \
hf_xet.download_files([hf_xet.PyXetDownloadInfo(p, h, s) for h, s, p in items], sys.argv[1], None, None, None)";

#[test]
fn xet_serve_serves_a_bundle_read_only_to_the_reference_client() {
    let py = xet_testdata::reference_python().expect("reference client");
    let env = Env::new();
    let store = env.path("store");
    let files = env.upload(&store, "src", &[]);
    let bundle = env.path("all.swh");
    env.json(&[
        "bundle",
        "create",
        s(&bundle),
        "--all",
        "--store",
        s(&store),
    ]);
    let server = Served::spawn(
        env.command(&["serve", "--listen", "127.0.0.1:0", "--store", s(&bundle)])
            .stderr(Stdio::null()),
    );
    let out = env.path("hf-out");
    std::fs::create_dir_all(&out).unwrap();
    let items: Vec<(String, u64, String)> = files
        .iter()
        .map(|f| {
            (
                f.hash.clone(),
                f.data.len() as u64,
                s(&out.join(&f.hash)).to_string(),
            )
        })
        .collect();
    let o = Command::new(&py)
        .args([
            "-c",
            HF_DOWNLOAD,
            &server.url,
            &serde_json::to_string(&items).unwrap(),
        ])
        .env("HF_XET_CACHE", env.path("hc"))
        .env("HF_XET_TELEMETRY_ENABLED", "false")
        .output()
        .unwrap();
    assert!(
        o.status.success(),
        "hf_xet: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    for f in &files {
        assert!(
            std::fs::read(out.join(&f.hash)).unwrap() == f.data,
            "{}",
            f.path.display()
        );
    }
    env.downloads_identical("--endpoint", &server.url, &files);

    // A bundle made through a server: the files downloaded and packed anew, beside OUT.
    let picked: Vec<File> = files
        .iter()
        .filter(|f| f.data.len() > 1 << 20)
        .take(2)
        .cloned()
        .collect();
    let hashes: Vec<&str> = picked.iter().map(|f| f.hash.as_str()).collect();
    let made = |name: &str| {
        let p = env.path(name);
        let mut args = vec!["bundle", "create", s(&p)];
        args.extend(&hashes);
        args.extend(["--endpoint", server.url.as_str()]);
        env.json(&args);
        std::fs::read(&p).unwrap()
    };
    assert!(
        made("remote.swh") == made("remote-again.swh"),
        "not deterministic"
    );
    let staged = std::fs::read_dir(env.dir.path()).unwrap().filter(|e| {
        e.as_ref()
            .unwrap()
            .file_name()
            .to_string_lossy()
            .starts_with(".xet-bundle")
    });
    assert_eq!(staged.count(), 0, "staging left behind");
    let copy = env.path("copy");
    env.json(&[
        "bundle",
        "import",
        s(&env.path("remote.swh")),
        "--store",
        s(&copy),
    ]);
    env.downloads_identical("--store", s(&copy), &picked);
    let err = env.fails(
        2,
        &[
            "bundle",
            "create",
            s(&env.path("x.swh")),
            "--all",
            "--endpoint",
            &server.url,
        ],
    );
    assert!(err.contains("--all needs a store"), "{err}");
    // A file the server does not have: the download's exit code (rejected), the file
    // named, nothing staged left behind.
    let absent = "ab".repeat(32);
    let err = env.fails(
        5,
        &[
            "bundle",
            "create",
            s(&env.path("y.swh")),
            &absent,
            "--endpoint",
            &server.url,
        ],
    );
    assert!(err.contains(&absent) && err.contains("not found"), "{err}");
    assert!(!env.path("y.swh").exists());
    let staged = std::fs::read_dir(env.dir.path())
        .unwrap()
        .filter(|e| {
            e.as_ref()
                .unwrap()
                .file_name()
                .to_string_lossy()
                .starts_with(".xet-bundle")
        })
        .count();
    assert_eq!(staged, 0, "staging left behind");

    // A valid xorb the bundle does not have: refused with 405, for being read-only.
    let other = env.path("other");
    let extra = env.path("extra.bin");
    std::fs::write(
        &extra,
        xet_testdata::generate(xet_testdata::Kind::Random, 200_000, 4242),
    )
    .unwrap();
    env.json(&["upload", "--store", s(&other), s(&extra)]);
    let xorb = std::fs::read_dir(other.join("xorbs"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap();
    let name = xorb.file_name().to_str().unwrap().to_string();
    let (status, answer) = post(
        &server.url,
        &format!("/v1/xorbs/default/{name}"),
        &std::fs::read(xorb.path()).unwrap(),
    );
    assert_eq!(status, 405, "{answer}");
    assert!(
        answer.contains("read_only") && answer.contains("read-only"),
        "{answer}"
    );
    let err = env.fails(8, &["upload", "--endpoint", &server.url, s(&extra)]);
    assert!(err.contains("405"), "{err}");
    let err = env.fails(8, &["upload", "--store", s(&bundle), s(&extra)]);
    assert!(err.contains("read-only"), "{err}");
    let err = env.fails(8, &["bundle", "import", s(&bundle), "--store", s(&bundle)]);
    assert!(err.contains("read-only"), "{err}");
}

/// Offset of `needle` in `hay`.
fn find(hay: &[u8], needle: &[u8]) -> usize {
    hay.windows(needle.len())
        .position(|w| w == needle)
        .expect("present")
}

#[test]
fn a_damaged_bundle_is_refused_or_imported_without_its_bad_objects() {
    let env = Env::new();
    let store = env.path("store");
    let first = env.upload(&store, "a", &["text_300k", "float32_1m"]);
    let before: Vec<String> = std::fs::read_dir(store.join("xorbs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    let second = env.upload(&store, "b", &["random_5m"]);
    let bundle = env.path("all.swh");
    env.json(&[
        "bundle",
        "create",
        s(&bundle),
        "--all",
        "--store",
        s(&store),
    ]);
    let bytes = std::fs::read(&bundle).unwrap();
    let damaged = |name: &str, b: &[u8]| -> PathBuf {
        let p = env.path(name);
        std::fs::write(&p, b).unwrap();
        p
    };

    // One flipped byte in a xorb only the second upload uses.
    let bad = objects(&env, &bundle)
        .into_iter()
        .find(|o| o.0 == "xorb" && !before.contains(&o.1))
        .unwrap()
        .1;
    let xorb = std::fs::read(store.join("xorbs").join(&bad)).unwrap();
    let mut b = bytes.clone();
    b[find(&bytes, &xorb[..64]) + 1000] ^= 0x10;
    let flipped = damaged("flipped.swh", &b);
    let err = env.fails(3, &["bundle", "verify", s(&flipped)]);
    assert!(err.contains(&format!("xorb {bad}")), "{err}");
    let copy = env.path("copy");
    let err = env.fails(3, &["bundle", "import", s(&flipped), "--store", s(&copy)]);
    assert!(
        err.contains(&format!("xorb {bad}")) && err.contains("rejected"),
        "{err}"
    );
    assert!(!copy.join("xorbs").join(&bad).exists());
    env.downloads_identical("--store", s(&copy), &first);
    env.fails(
        5,
        &[
            "download",
            "--store",
            s(&copy),
            &second[0].hash,
            "-o",
            s(&env.path("x")),
        ],
    );
    // Every object in the store is one the bundle had intact.
    for e in std::fs::read_dir(copy.join("xorbs")).unwrap() {
        let e = e.unwrap();
        assert!(
            std::fs::read(e.path()).unwrap()
                == std::fs::read(store.join("xorbs").join(e.file_name())).unwrap()
        );
    }

    // The header, the index, the hash section; a truncation; hostile counts.
    let header =
        |i: usize| u64::from_be_bytes(bytes[32 + 8 * i..40 + 8 * i].try_into().unwrap()) as usize;
    let (index, hash) = (header(4), header(6));
    for (name, at) in [
        ("magic", 3),
        ("header", 32 + 8 * 3 + 7),
        ("index", index + 40 + 35),
        ("hash", hash + 30),
    ] {
        let mut b = bytes.clone();
        b[at] ^= 0x01;
        let p = damaged(&format!("{name}.swh"), &b);
        let ls = env.xet(&["bundle", "ls", s(&p)]);
        let err = if ls.status.success() {
            env.fails(3, &["bundle", "verify", s(&p)])
        } else {
            assert_eq!(ls.status.code(), Some(3), "{name}");
            String::from_utf8_lossy(&ls.stderr).to_string()
        };
        assert!(err.contains(s(&p)), "{name}: {err}");
        // Damage outside every object may leave them all importable; whatever is
        // imported is exactly what was bundled.
        let target = env.path(&format!("into-{name}"));
        let o = env.xet(&["bundle", "import", s(&p), "--store", s(&target)]);
        assert!(
            o.status.success() || o.status.code() == Some(3),
            "{name}: {o:?}"
        );
        if let Ok(dir) = std::fs::read_dir(target.join("xorbs")) {
            for e in dir {
                let e = e.unwrap();
                let original = std::fs::read(store.join("xorbs").join(e.file_name())).unwrap();
                assert!(std::fs::read(e.path()).unwrap() == original, "{name}");
            }
        }
    }
    let cut = damaged("cut.swh", &bytes[..bytes.len() / 2]);
    let err = env.fails(3, &["bundle", "ls", s(&cut)]);
    assert!(
        err.contains("truncated") || err.contains("hash section"),
        "{err}"
    );
    let mut b = bytes.clone();
    b[40..48].copy_from_slice(&u64::MAX.to_be_bytes());
    let hostile = damaged("hostile.swh", &b);
    let err = env.fails(3, &["bundle", "verify", s(&hostile)]);
    assert!(err.contains("objects_count"), "{err}");
    let err = env.fails(
        3,
        &["serve", "--listen", "127.0.0.1:0", "--store", s(&hostile)],
    );
    assert!(err.contains("objects_count"), "{err}");
}
