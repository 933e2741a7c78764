//! Black-box `hf://` tests: `xet upload/download/ls hf://...` against a real `xet serve`
//! (its Hub API and CAS on one loopback listener), in both directions with the real `hf`
//! CLI (huggingface_hub 2.4.0 + hf_xet 1.8.0), and the cache `xet` writes read back by
//! `huggingface_hub` offline.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use common::Served;

const WRITE: &str = "hub-write-token";
const READ: &str = "hub-read-token";

struct Hub {
    dir: tempfile::TempDir,
    server: Served,
}

impl Hub {
    fn start() -> Hub {
        let dir = tempfile::tempdir().unwrap();
        let server = Served::spawn(
            Command::new(env!("CARGO_BIN_EXE_xet"))
                .args(["serve", "--listen", "127.0.0.1:0", "--store"])
                .arg(dir.path().join("store"))
                .args(["--token", WRITE, "--token", &format!("read:{READ}")])
                .stderr(Stdio::null()),
        );
        Hub { dir, server }
    }

    fn path(&self, p: &str) -> PathBuf {
        self.dir.path().join(p)
    }

    /// `xet` with the Hub's environment: endpoint, write token, and caches of its own.
    fn xet_cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
        c.args(args)
            .env("HF_ENDPOINT", &self.server.url)
            .env("HF_TOKEN", WRITE)
            .env("HF_HOME", self.path("xet-hf-home"))
            .env("HF_HUB_CACHE", self.path("hub-cache"))
            .env("XET_CACHE", self.path("xet-cache"))
            .env_remove("HF_TOKEN_PATH")
            .env_remove("XET_TOKEN")
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_TOKEN_URL");
        c
    }

    fn xet(&self, args: &[&str]) -> Output {
        self.xet_cmd(args).output().expect("run xet")
    }

    /// `xet ... --json`, which must succeed: its document.
    fn xet_json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.push("--json");
        let o = self.xet(&all);
        assert!(
            o.status.success(),
            "xet {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }

    /// The `hf` CLI (or the venv's python with `-c`), isolated from the user's setup.
    fn hf_cmd(&self, program: PathBuf, home: &str) -> Command {
        let mut c = Command::new(program);
        c.env("HF_ENDPOINT", &self.server.url)
            .env("HF_TOKEN", WRITE)
            .env("HF_HOME", self.path(home))
            .env("HF_HUB_DISABLE_UPDATE_CHECK", "1")
            .env("HF_HUB_DISABLE_TELEMETRY", "1")
            .env_remove("HF_HUB_CACHE")
            .env_remove("HF_TOKEN_PATH");
        c
    }

    fn hf(&self, args: &[&str]) {
        let hf = xet_testdata::hub::hf_cli().expect("the hf CLI");
        let o = self.hf_cmd(hf, "hf-home").args(args).output().unwrap();
        assert!(
            o.status.success(),
            "hf {args:?}: {}\n{}",
            String::from_utf8_lossy(&o.stdout),
            String::from_utf8_lossy(&o.stderr)
        );
    }

    /// Python with huggingface_hub, offline, on the cache `xet` wrote.
    fn python_offline(&self, code: &str) -> String {
        let py = xet_testdata::hub::hub_python().expect("python with huggingface_hub");
        let o = self
            .hf_cmd(py, "py-home")
            .env("HF_HUB_CACHE", self.path("hub-cache"))
            .env("HF_HUB_OFFLINE", "1")
            .args(["-c", code])
            .output()
            .unwrap();
        assert!(
            o.status.success(),
            "python: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        String::from_utf8(o.stdout).unwrap()
    }
}

/// Every file below `dir`, by its `/`-separated relative path (symbolic links followed).
fn tree(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            let rel = p
                .strip_prefix(dir)
                .unwrap()
                .to_string_lossy()
                .replace('\\', "/");
            if rel.starts_with(".cache") {
                continue;
            }
            if p.is_dir() {
                stack.push(p);
            } else {
                out.insert(rel, std::fs::read(&p).unwrap());
            }
        }
    }
    out
}

/// A folder with a README, a small regular file, files just below and above the
/// regular/lfs size threshold, a nested binary and an empty file.
fn make_model(dir: &Path) {
    let threshold = xet_hub::mode::REGULAR_MAX_SIZE as usize;
    let text = |n, seed| xet_testdata::generate(xet_testdata::Kind::Text, n, seed);
    std::fs::create_dir_all(dir.join("sub/nested")).unwrap();
    std::fs::write(
        dir.join("README.md"),
        b"---\nlicense: mit\n---\n# test model\n",
    )
    .unwrap();
    std::fs::write(dir.join("config.json"), br#"{"hidden_size": 8}"#).unwrap();
    std::fs::write(dir.join("below.txt"), text(threshold, 1)).unwrap();
    std::fs::write(dir.join("above.txt"), text(threshold + 1, 2)).unwrap();
    std::fs::write(
        dir.join("sub/nested/weights.bin"),
        xet_testdata::generate(xet_testdata::Kind::Random, 3 << 20, 3),
    )
    .unwrap();
    std::fs::write(dir.join("empty.txt"), b"").unwrap();
}

fn file_entry<'a>(doc: &'a serde_json::Value, path: &str) -> &'a serde_json::Value {
    doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == path)
        .unwrap_or_else(|| panic!("{path} not in {doc}"))
}

#[test]
fn xet_upload_then_hf_download_and_xet_download_into_the_cache() {
    let hub = Hub::start();
    let src = hub.path("model");
    make_model(&src);
    let up = hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/model"]);
    let commit = up["commit"].as_str().unwrap().to_string();
    assert_eq!(up["commits"].as_array().unwrap().len(), 1, "{up}");
    assert!(
        up["commit_url"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/org/model/commit/{commit}"))
    );
    assert_eq!(file_entry(&up, "above.txt")["mode"], "lfs");
    assert_eq!(file_entry(&up, "below.txt")["mode"], "regular");
    assert_eq!(file_entry(&up, "empty.txt")["mode"], "regular");
    assert_eq!(file_entry(&up, "sub/nested/weights.bin")["mode"], "lfs");
    assert!(
        up["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["new"] == true)
    );

    // The same folder again: no commit.
    let again = hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/model"]);
    assert!(again["commits"].as_array().unwrap().is_empty(), "{again}");
    assert_eq!(again["commit"], commit.as_str());
    assert!(
        again["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["new"] == false)
    );

    // The real client reads every file back byte for byte.
    let out = hub.path("hf-out");
    hub.hf(&[
        "download",
        "org/model",
        "--local-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(tree(&out), tree(&src));

    // Into the HF cache, laid out as huggingface_hub lays it out.
    let down = hub.xet_json(&["download", "hf://org/model"]);
    assert_eq!(down["commit"], commit.as_str());
    let repo_dir = hub.path("hub-cache/models--org--model");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("refs/main")).unwrap(),
        commit
    );
    let snapshot = repo_dir.join("snapshots").join(&commit);
    assert_eq!(tree(&snapshot), tree(&src));
    let weights = snapshot.join("sub/nested/weights.bin");
    let sha = file_entry(&up, "sub/nested/weights.bin")["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(
        std::fs::read_link(&weights).unwrap(),
        Path::new("../../../../blobs").join(&sha)
    );
    let config_oid =
        xet_hub::commit::git_blob_oid(&std::fs::read(src.join("config.json")).unwrap());
    assert!(repo_dir.join("blobs").join(config_oid).is_file());
    assert!(
        repo_dir
            .join("trees")
            .join(format!("{commit}.json"))
            .is_file()
    );

    // huggingface_hub finds it offline.
    let got = hub.python_offline(
        "import huggingface_hub as h\n\
         print(h.snapshot_download('org/model', local_files_only=True))\n\
         print(h.hf_hub_download('org/model', 'sub/nested/weights.bin', local_files_only=True))",
    );
    let lines: Vec<&str> = got.lines().collect();
    assert_eq!(tree(Path::new(lines[0])), tree(&src));
    assert_eq!(
        std::fs::read(lines[1]).unwrap(),
        std::fs::read(src.join("sub/nested/weights.bin")).unwrap()
    );

    // A second download fetches nothing.
    let again = hub.xet_json(&["download", "hf://org/model"]);
    assert_eq!(again["totals"]["bytes_fetched"], 0, "{again}");
    assert!(
        again["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["source"] == "cache")
    );

    // A changed file makes a commit with only that file.
    std::fs::write(src.join("config.json"), br#"{"hidden_size": 16}"#).unwrap();
    let changed = hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/model"]);
    let new: Vec<_> = changed["files"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|f| f["new"] == true)
        .collect();
    assert_eq!(new.len(), 1, "{changed}");
    assert_eq!(new[0]["path"], "config.json");
    assert_ne!(changed["commit"], commit.as_str());

    // `ls` shows what is there.
    let ls = hub.xet_json(&["ls", "hf://org/model", "-r"]);
    let entries = ls["entries"].as_array().unwrap();
    let w = entries
        .iter()
        .find(|e| e["path"] == "sub/nested/weights.bin")
        .unwrap();
    assert_eq!(w["sha256"], sha.as_str());
    assert_eq!(w["hash"], file_entry(&up, "sub/nested/weights.bin")["hash"]);
}

#[test]
fn hf_upload_then_xet_download_of_a_branch_a_folder_and_a_file() {
    let hub = Hub::start();
    let src = hub.path("data");
    make_model(&src);
    hub.hf(&[
        "upload",
        "org/data",
        src.to_str().unwrap(),
        "--repo-type",
        "dataset",
    ]);
    hub.hf(&[
        "upload",
        "org/data",
        src.to_str().unwrap(),
        "--repo-type",
        "dataset",
        "--revision",
        "dev",
    ]);
    // The whole repository at a branch, into a plain folder.
    let all = hub.path("all");
    hub.xet_json(&[
        "download",
        "hf://datasets/org/data@dev",
        "-o",
        all.to_str().unwrap(),
    ]);
    assert_eq!(tree(&all), tree(&src));
    // A nested folder with --include.
    let part = hub.path("part");
    hub.xet_json(&[
        "download",
        "hf://datasets/org/data/sub",
        "-o",
        part.to_str().unwrap(),
        "--include",
        "*.bin",
    ]);
    let got = tree(&part);
    assert_eq!(got.keys().collect::<Vec<_>>(), ["sub/nested/weights.bin"]);
    assert_eq!(
        got["sub/nested/weights.bin"],
        std::fs::read(src.join("sub/nested/weights.bin")).unwrap()
    );
    // One file to a file name, and one to stdout.
    let one = hub.path("one.txt");
    hub.xet_json(&[
        "download",
        "hf://datasets/org/data/below.txt",
        "-o",
        one.to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(&one).unwrap(),
        std::fs::read(src.join("below.txt")).unwrap()
    );
    let o = hub.xet(&["download", "hf://datasets/org/data/above.txt", "-o", "-"]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert_eq!(o.stdout, std::fs::read(src.join("above.txt")).unwrap());
}

#[test]
fn xet_upload_to_a_space_and_a_branch_then_hf_download() {
    let hub = Hub::start();
    let src = hub.path("app");
    make_model(&src);
    hub.xet_json(&[
        "upload",
        src.to_str().unwrap(),
        "hf://spaces/org/app@feature%2Fx/nested/dir",
    ]);
    let out = hub.path("out");
    hub.hf(&[
        "download",
        "org/app",
        "--repo-type",
        "space",
        "--revision",
        "feature/x",
        "--local-dir",
        out.to_str().unwrap(),
    ]);
    let want: BTreeMap<String, Vec<u8>> = tree(&src)
        .into_iter()
        .map(|(k, v)| (format!("nested/dir/{k}"), v))
        .collect();
    assert_eq!(tree(&out), want);
}

#[test]
fn errors_name_what_was_asked_and_exit_with_the_documented_codes() {
    let hub = Hub::start();
    let src = hub.path("m");
    make_model(&src);
    hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/m"]);
    // A read-only token cannot upload: auth (4).
    let o = hub
        .xet_cmd(&["upload", src.to_str().unwrap(), "hf://org/m2"])
        .env("HF_TOKEN", READ)
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(String::from_utf8_lossy(&o.stderr).contains("write access"));
    // A repository, revision or path that does not exist: 5, naming it.
    for (addr, names) in [
        ("hf://org/nope", "org/nope"),
        ("hf://org/m@nobranch", "nobranch"),
        ("hf://org/m/no/such/file.bin", "no/such/file.bin"),
    ] {
        let o = hub.xet(&["download", addr, "-o", hub.path("x").to_str().unwrap()]);
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(5), "{addr}: {err}");
        assert!(err.contains(names), "{addr}: {err}");
    }
    // No token at all against a server that requires one: 4.
    let o = hub
        .xet_cmd(&["ls", "hf://org/m"])
        .env_remove("HF_TOKEN")
        .output()
        .unwrap();
    assert_eq!(
        o.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
}

/// `-o DIR` treats what is already there as `xet download HASH -o` does: a symbolic link
/// to a file is followed (the link stays, its target gets the bytes), and a link that
/// would lead a repository path out of DIR is refused before anything is written.
#[cfg(unix)]
#[test]
fn plain_downloads_follow_links_and_never_leave_the_folder() {
    let hub = Hub::start();
    let src = hub.path("m");
    make_model(&src);
    hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/links"]);
    let want = tree(&src);
    // A link inside the folder, to a file inside it.
    let out = hub.path("out");
    std::fs::create_dir_all(&out).unwrap();
    std::fs::write(out.join("real-readme"), b"old").unwrap();
    std::os::unix::fs::symlink(out.join("real-readme"), out.join("README.md")).unwrap();
    hub.xet_json(&["download", "hf://org/links", "-o", out.to_str().unwrap()]);
    assert!(
        std::fs::symlink_metadata(out.join("README.md"))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(
        std::fs::read(out.join("real-readme")).unwrap(),
        want["README.md"]
    );
    // A folder of the repository that is a link out of DIR: refused, nothing written there.
    let (out2, elsewhere) = (hub.path("out2"), hub.path("elsewhere"));
    std::fs::create_dir_all(&out2).unwrap();
    std::fs::create_dir_all(&elsewhere).unwrap();
    let folder = want
        .keys()
        .find_map(|p| p.split_once('/').map(|(d, _)| d.to_string()))
        .expect("the model has a folder");
    std::os::unix::fs::symlink(&elsewhere, out2.join(&folder)).unwrap();
    let o = hub.xet(&["download", "hf://org/links", "-o", out2.to_str().unwrap()]);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("leads out of"), "{err}");
    assert_eq!(
        std::fs::read_dir(&elsewhere).unwrap().count(),
        0,
        "wrote outside -o"
    );
}
