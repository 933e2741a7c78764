//! `xet serve` as a Hugging Face Hub, driven by the real `hf` CLI and `huggingface_hub`
//! (pinned in the test virtualenv, `xet_testdata::hub`), and by raw HTTP where a test
//! needs to see the wire (a `curl` of a resolve URL, hostile commits).

use crate::common;

use common::Served;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

pub(crate) const WRITE: &str = "hub-write-token";
pub(crate) const READ: &str = "hub-read-token";

pub(crate) fn serve(store: &Path) -> Served {
    serve_tokens(store, &[&format!("write:{WRITE}"), &format!("read:{READ}")])
}

/// A server on `store` taking these `--token` values.
pub(crate) fn serve_tokens(store: &Path, tokens: &[&str]) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xet"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store)
        .stderr(Stdio::null());
    for t in tokens {
        cmd.args(["--token", t]);
    }
    Served::spawn(&mut cmd)
}

/// The Python side: `hf` and the interpreter of the pinned virtualenv, each run with an
/// isolated `HF_HOME` and no network beyond the server.
pub(crate) struct Py {
    python: PathBuf,
    hf: PathBuf,
    home: tempfile::TempDir,
}

impl Py {
    pub(crate) fn new() -> Py {
        let python =
            xet_testdata::hub::hub_python().expect("huggingface_hub in the test virtualenv");
        let hf = xet_testdata::hub::hf_cli().expect("hf CLI");
        Py {
            python,
            hf,
            home: tempfile::tempdir().unwrap(),
        }
    }

    /// With pandas and pyarrow too (the dataframe tests).
    pub(crate) fn with_pandas() -> Py {
        let python = xet_testdata::hub::pandas_python().expect("pandas in the test virtualenv");
        Py {
            python,
            ..Py::new()
        }
    }

    fn env(&self, cmd: &mut Command, endpoint: &str, token: Option<&str>) {
        cmd.env("HF_ENDPOINT", endpoint)
            .env("HF_HOME", self.home.path())
            .env("HF_HUB_DISABLE_UPDATE_CHECK", "1")
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
            .env("HF_XET_TELEMETRY_ENABLED", "0")
            .env_remove("HF_TOKEN")
            .env_remove("HF_HUB_OFFLINE")
            .env_remove("HF_HUB_CACHE");
        if let Some(t) = token {
            cmd.env("HF_TOKEN", t);
        }
    }

    pub(crate) fn hf(&self, endpoint: &str, token: Option<&str>, args: &[&str]) -> Output {
        let mut cmd = Command::new(&self.hf);
        self.env(&mut cmd, endpoint, token);
        cmd.args(args).output().expect("run hf")
    }

    pub(crate) fn hf_ok(&self, endpoint: &str, args: &[&str]) -> String {
        let out = self.hf(endpoint, Some(WRITE), args);
        assert!(
            out.status.success(),
            "hf {args:?} failed:\n{}\n{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    pub(crate) fn python(
        &self,
        endpoint: &str,
        token: Option<&str>,
        code: &str,
        args: &[&str],
    ) -> Output {
        let mut cmd = Command::new(&self.python);
        self.env(&mut cmd, endpoint, token);
        cmd.arg("-c")
            .arg(code)
            .args(args)
            .output()
            .expect("run python")
    }
}

/// A raw HTTP exchange through Python's urllib: status, headers (lowercase names) and
/// body.
struct Http {
    status: u16,
    headers: serde_json::Map<String, serde_json::Value>,
    body: Vec<u8>,
}

const HTTP_PY: &str = r#"
import sys, json, base64, urllib.request, urllib.error
method, url, headers, body = sys.argv[1], sys.argv[2], json.loads(sys.argv[3]), base64.b64decode(sys.argv[4])
req = urllib.request.Request(url, data=body if method in ("POST", "PUT") else None, method=method, headers=headers)
try:
    r = urllib.request.urlopen(req)
    status, hdrs, data = r.status, r.headers, r.read()
except urllib.error.HTTPError as e:
    status, hdrs, data = e.code, e.headers, e.read()
print(json.dumps({"status": status, "headers": {k.lower(): v for k, v in hdrs.items()}, "body": base64.b64encode(data).decode()}))
"#;

fn http(py: &Py, method: &str, url: &str, headers: &[(&str, &str)], body: &[u8]) -> Http {
    use base64::Engine as _;
    let h: serde_json::Map<String, serde_json::Value> = headers
        .iter()
        .map(|(k, v)| (k.to_string(), serde_json::Value::from(*v)))
        .collect();
    let b64 = base64::engine::general_purpose::STANDARD;
    let out = py.python(
        "http://unused",
        None,
        HTTP_PY,
        &[
            method,
            url,
            &serde_json::Value::Object(h).to_string(),
            &b64.encode(body),
        ],
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    Http {
        status: v["status"].as_u64().unwrap() as u16,
        headers: v["headers"].as_object().unwrap().clone(),
        body: b64.decode(v["body"].as_str().unwrap()).unwrap(),
    }
}

fn bearer(t: &str) -> String {
    format!("Bearer {t}")
}

/// A folder like a model's: README with YAML front matter, JSON, an empty file, nested
/// folders, binaries of a few MiB (Xet) and small text (inline).
fn model_folder(dir: &Path, seed: u64) -> Vec<(String, Vec<u8>)> {
    let mut files = vec![
        (
            "README.md".to_string(),
            b"---\nlicense: mit\n---\n# A model\n".to_vec(),
        ),
        (
            "config.json".to_string(),
            format!("{{\"seed\": {seed}}}\n").into_bytes(),
        ),
        ("empty.txt".to_string(), Vec::new()),
        (
            "nested/deeper/notes.txt".to_string(),
            b"hello from below\n".to_vec(),
        ),
        ("weights.bin".to_string(), pseudo_random(3 << 20, seed)),
        (
            "sub/model.safetensors".to_string(),
            pseudo_random((5 << 20) + 123, seed + 1),
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

pub(crate) fn pseudo_random(n: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..n)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

fn assert_tree_equals(dir: &Path, files: &[(String, Vec<u8>)]) {
    for (p, data) in files {
        let got = std::fs::read(dir.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
        assert!(
            got == *data,
            "{p} differs ({} vs {} bytes)",
            got.len(),
            data.len()
        );
    }
}

fn head_commit(py: &Py, url: &str, repo_api: &str, rev: &str) -> String {
    let r = http(
        py,
        "GET",
        &format!("{url}/api/{repo_api}/revision/{rev}"),
        &[("authorization", &bearer(READ))],
        b"",
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v: serde_json::Value = serde_json::from_slice(&r.body).unwrap();
    v["sha"].as_str().unwrap().to_string()
}

#[test]
fn hf_upload_and_download_every_repo_type() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = model_folder(src.path(), 1);
    let src_s = src.path().to_str().unwrap();
    for (kind, api) in [
        ("model", "models"),
        ("dataset", "datasets"),
        ("space", "spaces"),
    ] {
        let repo = format!("org/{kind}-repo");
        py.hf_ok(&server.url, &["upload", &repo, src_s, "--repo-type", kind]);
        let first = head_commit(&py, &server.url, &format!("{api}/{repo}"), "main");
        // The same upload again changes nothing.
        py.hf_ok(&server.url, &["upload", &repo, src_s, "--repo-type", kind]);
        assert_eq!(
            head_commit(&py, &server.url, &format!("{api}/{repo}"), "main"),
            first,
            "{kind}: a no-op upload made a commit"
        );
        let out = tempfile::tempdir().unwrap();
        py.hf_ok(
            &server.url,
            &[
                "download",
                &repo,
                "--repo-type",
                kind,
                "--local-dir",
                out.path().to_str().unwrap(),
            ],
        );
        assert_tree_equals(out.path(), &files);
    }
    // A single file, --include, and snapshot_download into the HF cache.
    let one = tempfile::tempdir().unwrap();
    py.hf_ok(
        &server.url,
        &[
            "download",
            "org/model-repo",
            "sub/model.safetensors",
            "--local-dir",
            one.path().to_str().unwrap(),
        ],
    );
    assert_tree_equals(
        one.path(),
        &files[files
            .iter()
            .position(|(p, _)| p == "sub/model.safetensors")
            .unwrap()..][..1],
    );
    let inc = tempfile::tempdir().unwrap();
    py.hf_ok(
        &server.url,
        &[
            "download",
            "org/model-repo",
            "--include",
            "nested/*",
            "--local-dir",
            inc.path().to_str().unwrap(),
        ],
    );
    assert!(inc.path().join("nested/deeper/notes.txt").exists());
    assert!(!inc.path().join("weights.bin").exists());
    let snap = py.python(
        &server.url,
        Some(READ),
        "import sys; from huggingface_hub import snapshot_download; print(snapshot_download('org/model-repo'))",
        &[],
    );
    assert!(
        snap.status.success(),
        "{}",
        String::from_utf8_lossy(&snap.stderr)
    );
    let snap_dir = PathBuf::from(String::from_utf8_lossy(&snap.stdout).trim());
    assert_tree_equals(&snap_dir, &files);
}

#[test]
fn hf_upload_to_a_new_branch_and_curl_a_resolve_url() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = model_folder(src.path(), 7);
    py.hf_ok(
        &server.url,
        &[
            "upload",
            "org/branchy",
            src.path().to_str().unwrap(),
            "--revision",
            "dev",
        ],
    );
    let dev = head_commit(&py, &server.url, "models/org/branchy", "dev");
    assert_ne!(
        dev,
        head_commit(&py, &server.url, "models/org/branchy", "main")
    );
    // The resolve URL of a Xet file, whole and a slice, as curl would get them.
    let (_, weights) = files.iter().find(|(p, _)| p == "weights.bin").unwrap();
    let url = format!("{}/org/branchy/resolve/dev/weights.bin", server.url);
    let auth = bearer(READ);
    let whole = http(&py, "GET", &url, &[("authorization", &auth)], b"");
    assert_eq!(whole.status, 200);
    assert!(whole.body == *weights);
    assert!(whole.headers.contains_key("x-xet-hash"));
    assert_eq!(whole.headers["x-repo-commit"], dev.as_str());
    let part = http(
        &py,
        "GET",
        &url,
        &[("authorization", &auth), ("range", "bytes=1000-70000")],
        b"",
    );
    assert_eq!(part.status, 206);
    assert!(part.body == weights[1000..=70000]);
    let head = http(&py, "HEAD", &url, &[("authorization", &auth)], b"");
    assert_eq!(
        head.headers["x-linked-size"],
        weights.len().to_string().as_str()
    );
    let link = head.headers["link"].as_str().unwrap();
    assert!(
        link.contains(&format!(
            "<{}/api/models/org/branchy/xet-read-token/{dev}>; rel=\"xet-auth\"",
            server.url
        )),
        "{link}"
    );
    let missing = http(
        &py,
        "HEAD",
        &format!("{}/org/branchy/resolve/dev/nope.bin", server.url),
        &[("authorization", &auth)],
        b"",
    );
    assert_eq!(missing.status, 404);
    assert_eq!(missing.headers["x-error-code"], "EntryNotFound");
}

#[test]
fn two_servers_on_one_store_and_eight_concurrent_uploads() {
    let store = tempfile::tempdir().unwrap();
    let a = serve(store.path());
    let b = serve(store.path());
    let py = Py::new();
    py.hf_ok(&a.url, &["repos", "create", "org/shared"]);
    let srcs: Vec<tempfile::TempDir> = (0..8).map(|_| tempfile::tempdir().unwrap()).collect();
    let children: Vec<_> = srcs
        .iter()
        .enumerate()
        .map(|(i, d)| {
            let f = d.path().join(format!("file-{i}.bin"));
            std::fs::write(&f, pseudo_random(100_000 + i, i as u64 + 50)).unwrap();
            let mut cmd = Command::new(&py.hf);
            py.env(
                &mut cmd,
                if i % 2 == 0 { &a.url } else { &b.url },
                Some(WRITE),
            );
            cmd.args([
                "upload",
                "org/shared",
                f.to_str().unwrap(),
                &format!("file-{i}.bin"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap()
        })
        .collect();
    for c in children {
        let out = c.wait_with_output().unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    // Every file is in the final tree, read through either server.
    for url in [&a.url, &b.url] {
        let out = tempfile::tempdir().unwrap();
        py.hf_ok(
            url,
            &[
                "download",
                "org/shared",
                "--local-dir",
                out.path().to_str().unwrap(),
            ],
        );
        for i in 0..8 {
            let got = std::fs::read(out.path().join(format!("file-{i}.bin"))).unwrap();
            assert!(got == pseudo_random(100_000 + i, i as u64 + 50), "file-{i}");
        }
    }
}

#[test]
fn bad_requests_change_nothing() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    model_folder(src.path(), 3);
    py.hf_ok(
        &server.url,
        &["upload", "org/guarded", src.path().to_str().unwrap()],
    );
    let head = head_commit(&py, &server.url, "models/org/guarded", "main");
    let commit_url = format!("{}/api/models/org/guarded/commit/main", server.url);
    let ndjson = |lines: &[serde_json::Value]| -> Vec<u8> {
        lines
            .iter()
            .map(|l| format!("{l}\n"))
            .collect::<String>()
            .into_bytes()
    };
    let header = serde_json::json!({"key": "header", "value": {"summary": "x"}});
    let post = |body: &[u8], token: Option<&str>| {
        let auth = token.map(bearer);
        let mut h = vec![("content-type", "application/x-ndjson")];
        if let Some(a) = &auth {
            h.push(("authorization", a));
        }
        http(&py, "POST", &commit_url, &h, body)
    };
    let cases: Vec<(&str, Vec<u8>, Option<&str>, u16)> = vec![
        (
            "malformed NDJSON",
            b"{not json\n".to_vec(),
            Some(WRITE),
            400,
        ),
        (
            "a sha256 never uploaded",
            ndjson(&[
                header.clone(),
                serde_json::json!({"key": "lfsFile", "value": {"path": "x.bin", "algo": "sha256", "oid": "ab".repeat(32), "size": 10}}),
            ]),
            Some(WRITE),
            422,
        ),
        (
            "a path with ..",
            ndjson(&[
                header.clone(),
                serde_json::json!({"key": "file", "value": {"path": "a/../b", "content": "aGk=", "encoding": "base64"}}),
            ]),
            Some(WRITE),
            400,
        ),
        (
            "an absolute path",
            ndjson(&[
                header.clone(),
                serde_json::json!({"key": "file", "value": {"path": "/etc/x", "content": "aGk=", "encoding": "base64"}}),
            ]),
            Some(WRITE),
            400,
        ),
        (
            "an empty segment",
            ndjson(&[
                header.clone(),
                serde_json::json!({"key": "file", "value": {"path": "a//b", "content": "aGk=", "encoding": "base64"}}),
            ]),
            Some(WRITE),
            400,
        ),
        (
            "a stale parentCommit",
            ndjson(&[
                serde_json::json!({"key": "header", "value": {"summary": "x", "parentCommit": "0".repeat(40)}}),
                serde_json::json!({"key": "file", "value": {"path": "n.txt", "content": "aGk=", "encoding": "base64"}}),
            ]),
            Some(WRITE),
            412,
        ),
        (
            "a read token",
            ndjson(&[
                header.clone(),
                serde_json::json!({"key": "file", "value": {"path": "n.txt", "content": "aGk=", "encoding": "base64"}}),
            ]),
            Some(READ),
            403,
        ),
        (
            "no token",
            ndjson(&[
                header.clone(),
                serde_json::json!({"key": "file", "value": {"path": "n.txt", "content": "aGk=", "encoding": "base64"}}),
            ]),
            None,
            401,
        ),
    ];
    for (what, body, token, status) in cases {
        let r = post(&body, token);
        assert_eq!(
            r.status,
            status,
            "{what}: {}",
            String::from_utf8_lossy(&r.body)
        );
        let v: serde_json::Value =
            serde_json::from_slice(&r.body).unwrap_or_else(|_| panic!("{what}: body is not JSON"));
        assert!(
            v["error"].as_str().is_some_and(|e| !e.is_empty()),
            "{what}: {v}"
        );
        assert_eq!(
            head_commit(&py, &server.url, "models/org/guarded", "main"),
            head,
            "{what} changed the branch"
        );
    }
    // A read token gets no write CAS token, and no route that writes.
    let r = http(
        &py,
        "GET",
        &format!("{}/api/models/org/guarded/xet-write-token/main", server.url),
        &[("authorization", &bearer(READ))],
        b"",
    );
    assert_eq!(r.status, 403);
    let r = http(
        &py,
        "POST",
        &format!("{}/api/models/org/guarded/preupload/main", server.url),
        &[
            ("authorization", &bearer(READ)),
            ("content-type", "application/json"),
        ],
        br#"{"files":[]}"#,
    );
    assert_eq!(r.status, 403);
    let r = http(
        &py,
        "POST",
        &format!("{}/api/repos/create", server.url),
        &[
            ("authorization", &bearer(READ)),
            ("content-type", "application/json"),
        ],
        br#"{"name":"x","organization":"org"}"#,
    );
    assert_eq!(r.status, 403);
    let r = http(
        &py,
        "POST",
        &format!("{}/api/models/org/guarded/branch/b2", server.url),
        &[
            ("authorization", &bearer(READ)),
            ("content-type", "application/json"),
        ],
        b"{}",
    );
    assert_eq!(r.status, 403);
    // The read CAS token it does get cannot upload to the CAS.
    let r = http(
        &py,
        "GET",
        &format!("{}/api/models/org/guarded/xet-read-token/main", server.url),
        &[("authorization", &bearer(READ))],
        b"",
    );
    assert_eq!(r.status, 200);
    let cas_token = r.headers["x-xet-access-token"]
        .as_str()
        .unwrap()
        .to_string();
    let shard = http(
        &py,
        "POST",
        &format!("{}/v1/shards", server.url),
        &[("authorization", &bearer(&cas_token))],
        b"junk",
    );
    assert_eq!(shard.status, 403);
    // Unknown repository and revision carry their error codes.
    let r = http(
        &py,
        "GET",
        &format!("{}/api/models/org/nope/revision/main", server.url),
        &[("authorization", &bearer(READ))],
        b"",
    );
    assert_eq!(
        (r.status, r.headers["x-error-code"].as_str().unwrap()),
        (404, "RepoNotFound")
    );
    let r = http(
        &py,
        "GET",
        &format!("{}/api/models/org/guarded/revision/nobranch", server.url),
        &[("authorization", &bearer(READ))],
        b"",
    );
    assert_eq!(
        (r.status, r.headers["x-error-code"].as_str().unwrap()),
        (404, "RevisionNotFound")
    );
}

const PLANT_PY: &str = r#"
import sys
from huggingface_hub import HfApi, CommitOperationAdd
from huggingface_hub.errors import HfHubHTTPError
api = HfApi()
for path in sys.argv[1:]:
    try:
        api.create_commit("org/planted", [CommitOperationAdd(path, b"[core]\n\tfsmonitor = x\n")], commit_message="plant")
        print(f"ACCEPTED {path}")
    except HfHubHTTPError as e:
        print(f"{e.response.status_code} {path} {e.response.text}")
"#;

/// The spellings of `.git` that huggingface_hub's own check lets through (it refuses
/// only a lowercase `.git` segment) reach `xet serve` from the real client and are
/// refused there (`400`, naming git); the branch does not move. `hf upload` of a folder
/// holding a nested repository still uploads the rest.
#[test]
fn planted_git_folders_are_refused_from_the_real_client() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(src.path().join("nested/.git")).unwrap();
    std::fs::write(src.path().join("nested/.git/config"), b"[core]\n").unwrap();
    std::fs::write(src.path().join("nested/a.txt"), b"a\n").unwrap();
    py.hf_ok(
        &server.url,
        &["upload", "org/planted", src.path().to_str().unwrap()],
    );
    let head = head_commit(&py, &server.url, "models/org/planted", "main");
    let planted = [
        "sub/.GIT/config",
        "sub/git~1/config",
        "sub/.git./config",
        "sub/.Git/hooks/post-checkout",
    ];
    let out = py.python(&server.url, Some(WRITE), PLANT_PY, &planted);
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for path in planted {
        let line = stdout
            .lines()
            .find(|l| l.contains(path))
            .unwrap_or_else(|| panic!("{path} in {stdout}"));
        assert!(line.starts_with("400 "), "{line}");
        assert!(line.contains("git refuses"), "{line}");
    }
    assert_eq!(
        head_commit(&py, &server.url, "models/org/planted", "main"),
        head
    );
    let copy = src.path().join("copy");
    py.hf_ok(
        &server.url,
        &[
            "download",
            "org/planted",
            "--local-dir",
            copy.to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(copy.join("nested/a.txt")).unwrap(), b"a\n");
    assert!(!copy.join("nested/.git").exists());
}

const JS: &str = r#"
import { uploadFile, downloadFile } from "@huggingface/hub";
import fs from "node:fs";
const [hubUrl, accessToken, mode, name, path, file] = process.argv.slice(2);
const repo = { type: "model", name };
if (mode === "upload") {
  await uploadFile({ repo, accessToken, hubUrl, file: { path, content: new Blob([fs.readFileSync(file)]) } });
} else {
  const blob = await downloadFile({ repo, path, accessToken, hubUrl });
  if (!blob) { console.error(`${path}: not found`); process.exit(3); }
  fs.writeFileSync(file, Buffer.from(await blob.arrayBuffer()));
}
"#;

/// A second, independent client: `@huggingface/hub` (npm) uploads through the LFS batch
/// answer with `"transfer": "xet"` and downloads what `hf upload` put there; each side
/// reads the other's files byte-identical.
#[test]
fn huggingface_js_uploads_and_downloads() {
    let dir = xet_testdata::hub::hub_js().expect("@huggingface/hub from npm");
    let script = dir.join("hub-test.mjs");
    std::fs::write(&script, JS).unwrap();
    let store = tempfile::tempdir().unwrap();
    // huggingface.js insists on tokens that look like the Hub's.
    let token = "hf_js_write_token";
    let server = Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(store.path())
            .args(["--token", &format!("write:{token}")])
            .stderr(Stdio::null()),
    );
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = model_folder(src.path(), 11);
    let hf = |args: &[&str]| {
        let out = py.hf(&server.url, Some(token), args);
        assert!(
            out.status.success(),
            "hf {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    hf(&["upload", "org/js", src.path().to_str().unwrap()]);
    let node = |args: &[&str]| {
        let out = Command::new("node")
            .current_dir(&dir)
            .arg(&script)
            .args(args)
            .output()
            .expect("run node");
        assert!(
            out.status.success(),
            "node {args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    let tmp = tempfile::tempdir().unwrap();
    for (path, data) in files.iter().filter(|(_, d)| !d.is_empty()) {
        let out = tmp.path().join("got");
        node(&[
            &server.url,
            token,
            "download",
            "org/js",
            path,
            out.to_str().unwrap(),
        ]);
        assert!(
            std::fs::read(&out).unwrap() == *data,
            "{path} read by huggingface.js"
        );
    }
    let upload = tmp.path().join("from-js.bin");
    let data = pseudo_random(2_500_000, 99);
    std::fs::write(&upload, &data).unwrap();
    node(&[
        &server.url,
        token,
        "upload",
        "org/js",
        "js/from-js.bin",
        upload.to_str().unwrap(),
    ]);
    let out = tempfile::tempdir().unwrap();
    hf(&[
        "download",
        "org/js",
        "js/from-js.bin",
        "--local-dir",
        out.path().to_str().unwrap(),
    ]);
    assert!(std::fs::read(out.path().join("js/from-js.bin")).unwrap() == data);
}

/// Two `xet serve` on one S3 bucket (SeaweedFS on loopback): a commit through one is
/// downloadable through the other at once.
/// `xet serve` on `store` (`s3://BUCKET/PREFIX`) of the shared S3 server, with the write
/// token and no AWS settings but the server's.
pub(crate) fn serve_on_s3(s3: &xet_testdata::S3Server, store: &str) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xet"));
    for (k, _) in std::env::vars_os() {
        if k.to_str().is_some_and(|k| k.starts_with("AWS_")) {
            cmd.env_remove(k);
        }
    }
    cmd.env("AWS_ACCESS_KEY_ID", s3.access_key_id())
        .env("AWS_SECRET_ACCESS_KEY", s3.secret_access_key())
        .env("AWS_REGION", s3.region())
        .env("AWS_ENDPOINT_URL", s3.endpoint())
        .args(["serve", "--listen", "127.0.0.1:0", "--store", store])
        .args(["--token", &format!("write:{WRITE}")])
        .stderr(Stdio::null());
    Served::spawn(&mut cmd)
}

#[test]
fn two_servers_on_one_s3_bucket() {
    let Some(s3) = xet_testdata::shared_s3() else {
        return;
    };
    let bucket = s3.fresh_bucket().unwrap();
    let store = format!("s3://{bucket}/hub");
    let (a, b) = (serve_on_s3(s3, &store), serve_on_s3(s3, &store));
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let files = model_folder(src.path(), 21);
    py.hf_ok(
        &a.url,
        &["upload", "org/on-s3", src.path().to_str().unwrap()],
    );
    let out = tempfile::tempdir().unwrap();
    py.hf_ok(
        &b.url,
        &[
            "download",
            "org/on-s3",
            "--local-dir",
            out.path().to_str().unwrap(),
        ],
    );
    assert_tree_equals(out.path(), &files);
}

/// Issue 36, item 4, with the real client: a token scoped to `team/*` creates, uploads
/// to (through the CAS tokens minted for its repository) and downloads its repositories,
/// and gets "not found" for any other; an open server on the same store serves public
/// repositories and never a private one's files.
#[test]
fn scoped_tokens_and_an_open_server_beside_a_token_server() {
    const SCOPED: &str = "hub-team-token";
    let store = tempfile::tempdir().unwrap();
    let scoped = serve_tokens(
        store.path(),
        &[&format!("write:{WRITE}"), &format!("write:{SCOPED}:team/*")],
    );
    let py = Py::new();
    let src = tempfile::tempdir().unwrap();
    let weights = pseudo_random(300_000, 36);
    std::fs::write(src.path().join("weights.bin"), &weights).unwrap();
    let run = |url: &str, token: Option<&str>, args: &[&str]| {
        let out = py.hf(url, token, args);
        let text = format!(
            "{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        (out.status.success(), text)
    };
    std::fs::write(src.path().join("secret.bin"), pseudo_random(200_000, 37)).unwrap();
    for (repo, token, private, file) in [
        ("team/model", SCOPED, false, "weights.bin"),
        ("other/secret", WRITE, true, "secret.bin"),
    ] {
        let path = src.path().join(file);
        let mut create = vec!["repos", "create", repo];
        if private {
            create.push("--private");
        }
        let (ok, text) = run(&scoped.url, Some(token), &create);
        assert!(ok, "{text}");
        let (ok, text) = run(
            &scoped.url,
            Some(token),
            &["upload", repo, path.to_str().unwrap(), "weights.bin"],
        );
        assert!(ok, "upload to {repo}: {text}");
    }
    // In scope: downloads whole. Out of scope: not found, nothing written.
    let out = tempfile::tempdir().unwrap();
    let dir = out.path().join("mine");
    let (ok, text) = run(
        &scoped.url,
        Some(SCOPED),
        &[
            "download",
            "team/model",
            "--local-dir",
            dir.to_str().unwrap(),
        ],
    );
    assert!(ok, "{text}");
    assert!(std::fs::read(dir.join("weights.bin")).unwrap() == weights);
    let theirs = out.path().join("theirs");
    let (ok, text) = run(
        &scoped.url,
        Some(SCOPED),
        &[
            "download",
            "other/secret",
            "--local-dir",
            theirs.to_str().unwrap(),
        ],
    );
    assert!(!ok, "a scoped token downloaded another repository: {text}");
    assert!(
        text.contains("not found") || text.contains("NotFound"),
        "{text}"
    );
    assert!(!theirs.join("weights.bin").exists());
    let (ok, text) = run(
        &scoped.url,
        Some(SCOPED),
        &["repos", "create", "other/mine"],
    );
    assert!(
        !ok,
        "a scoped token created a repository outside its scope: {text}"
    );

    // An open server on the same store: the public repository, never the private one.
    let open = Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(store.path())
            .stderr(Stdio::null()),
    );
    let public = out.path().join("public");
    let (ok, text) = run(
        &open.url,
        None,
        &[
            "download",
            "team/model",
            "--local-dir",
            public.to_str().unwrap(),
        ],
    );
    assert!(ok, "{text}");
    assert!(std::fs::read(public.join("weights.bin")).unwrap() == weights);
    let private = out.path().join("private");
    let (ok, text) = run(
        &open.url,
        None,
        &[
            "download",
            "other/secret",
            "--local-dir",
            private.to_str().unwrap(),
        ],
    );
    assert!(!ok, "an open server served a private repository: {text}");
    assert!(!private.join("weights.bin").exists());
}
