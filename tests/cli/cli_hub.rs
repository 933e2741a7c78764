//! Black-box `hf://` tests: `xet upload/download/ls hf://...` against a real `xet serve`
//! (its Hub API and CAS on one loopback listener), in both directions with the real `hf`
//! CLI (huggingface_hub 2.4.0 + hf_xet 1.8.0), and the cache `xet` writes read back by
//! `huggingface_hub` offline.

use crate::common;

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Served;
use xet_testdata::proxy::{Fault, Match, Proxy, Seen};

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

/// A Hub nothing listens at fails at once with the network code (6), naming the
/// endpoint, without retries (the CAS client's rule): no "retrying" warning.
#[test]
fn a_refused_hub_connection_fails_at_once() {
    let hub = Hub::start();
    let closed = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    for args in [vec!["ls", "hf://org/m"], vec!["download", "hf://org/m"]] {
        let o = hub
            .xet_cmd(&args)
            .env("HF_ENDPOINT", &closed)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(6), "{args:?}: {err}");
        assert!(err.contains(&closed), "{args:?}: {err}");
        assert!(!err.contains("retrying"), "{args:?}: {err}");
    }
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

/// What `proxy` saw since the last call, once every connection is done. The Hub builds
/// the CAS URL it hands out from the request's `Host`, which the proxy passes through,
/// so the CAS traffic of a command run through the proxy is seen too.
fn take(proxy: &Proxy) -> Vec<Seen> {
    let start = Instant::now();
    while proxy.open() > 0 {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "proxy connections still open"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let seen = proxy.log();
    proxy.clear_log();
    seen
}

/// Body bytes sent to the CAS (everything outside `/api/`) in successful requests.
fn cas_bytes_sent(seen: &[Seen]) -> u64 {
    seen.iter()
        .filter(|s| !s.path.starts_with("/api/") && (200..300).contains(&s.status))
        .map(|s| s.request_bytes)
        .sum()
}

/// Every answer through `proxy` with `from` replaced by `to` (of the same length).
fn rewrite(proxy: &Proxy, from: &str, to: &str) {
    let (from, to) = (from.as_bytes().to_vec(), to.as_bytes().to_vec());
    proxy.inject(Match::prefix("/"), Fault::Rewrite { from, to }, usize::MAX);
}

/// The server's record of one repository (a test's only one), read from its store
/// (docs/STORE.md): the commits of the history of `head`, newest first (each
/// `hub/repos/<rk>/commits/<id>`, checked against its id), and how many times a branch
/// moved (`hub/repos/<rk>/branches/<bk>/<version>`, one version per move).
///
/// The history is walked from the head because the store may hold commit objects no
/// branch reaches: creating a repository stores its empty initial commit before it
/// learns that the repository exists (the `409` every upload's create-if-missing gets),
/// so such a commit stays behind whenever its timestamp differs.
fn history(store: &Path, head: &str) -> (Vec<(String, xet_hub::commit::Commit)>, usize) {
    let repos: Vec<PathBuf> = std::fs::read_dir(store.join("hub/repos"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    let [repo] = &repos[..] else {
        panic!("one repository expected in the store: {repos:?}")
    };
    let moves = std::fs::read_dir(repo.join("branches"))
        .unwrap()
        .map(|b| std::fs::read_dir(b.unwrap().path()).unwrap().count())
        .sum();
    let mut chain = Vec::new();
    let mut next = Some(head.to_string());
    while let Some(id) = next {
        let bytes = std::fs::read(repo.join("commits").join(&id)).unwrap();
        let parsed = xet_hub::CommitId::parse(&id).expect("a commit id");
        let xet_hub::commit::Stored::Git(commit) =
            xet_hub::commit::Commit::decode(&parsed, &bytes).unwrap()
        else {
            panic!("commit {id} is not a git commit")
        };
        next = commit.parent.map(|p| p.to_string());
        chain.push((id, commit));
    }
    (chain, moves)
}

/// The paths of the files of `commit`'s tree, read from the store's `trees/` and
/// `facts/` of its one repository, sorted.
fn files_of(store: &Path, commit: &xet_hub::commit::Commit) -> Vec<String> {
    let repo = std::fs::read_dir(store.join("hub/repos"))
        .unwrap()
        .next()
        .unwrap()
        .unwrap()
        .path();
    let mut out = Vec::new();
    let mut todo = vec![(String::new(), commit.tree)];
    while let Some((prefix, id)) = todo.pop() {
        let tree = std::fs::read(repo.join("trees").join(id.to_string())).unwrap();
        let facts = std::fs::read(repo.join("facts").join(id.to_string())).unwrap();
        let body = xet_hub::git::unframe("tree", &id, &tree).unwrap();
        for (name, item) in xet_hub::Folder::decode(body, &facts).unwrap().entries {
            match item {
                xet_hub::Item::File(_) => out.push(format!("{prefix}{name}")),
                xet_hub::Item::Folder(sub) => todo.push((format!("{prefix}{name}/"), sub)),
            }
        }
    }
    out.sort();
    out
}

/// The head of `main` as the Hub API tells it (`xet ls`, which resolves the revision).
fn head(hub: &Hub, addr: &str) -> String {
    hub.xet_json(&["ls", addr])["commit"]
        .as_str()
        .unwrap()
        .to_string()
}

/// Issue #23: "the upload killed between the CAS upload and the commit, then rerun: one
/// commit, every file there". The first run goes through a proxy that refuses the commit:
/// every byte reaches the CAS, the commit never reaches the server, and `xet` exits 6
/// (the server's failure persisted after retries). The same command again makes exactly
/// one commit on top of the branch's head, with every file, sending next to nothing to
/// the CAS.
#[test]
fn an_upload_cut_before_its_commit_resumes_with_one_commit() {
    let hub = Hub::start();
    let store = hub.path("store");
    // The repository's first commit, made directly.
    let notes = hub.path("notes.txt");
    std::fs::write(&notes, b"first commit\n").unwrap();
    let first = hub.xet_json(&["upload", notes.to_str().unwrap(), "hf://org/resume"]);
    let first = first["commit"].as_str().unwrap().to_string();
    let (before, moves_before) = history(&store, &first);
    // The repository's creation made an empty initial commit below it.
    assert_eq!(before.len(), 2);

    let src = hub.path("model");
    make_model(&src);
    // A proxy that refuses every Hub commit with `503` and `Retry-After: 0`, so the
    // client's retries fail at once and the server never sees the commit.
    let proxy = Proxy::start(&hub.server.url);
    proxy.inject(
        Match::method("POST", "/api/").containing("/commit/"),
        Fault::StatusRetryAfter(503, "0".into()),
        usize::MAX,
    );
    let through_proxy = || {
        let mut c = hub.xet_cmd(&["upload", src.to_str().unwrap(), "hf://org/resume", "--json"]);
        c.env("HF_ENDPOINT", &proxy.url);
        c.output().unwrap()
    };
    let cut = through_proxy();
    let err = String::from_utf8_lossy(&cut.stderr);
    assert_eq!(cut.status.code(), Some(6), "{err}");
    let seen = take(&proxy);
    let commits: Vec<&Seen> = seen
        .iter()
        .filter(|s| s.method == "POST" && s.path.contains("/commit/"))
        .collect();
    assert!(
        !commits.is_empty() && commits.iter().all(|s| s.status == 503),
        "{seen:#?}"
    );
    // The CAS part was done: the Xet files' bytes were sent and accepted (at least the
    // incompressible weights; the text file above the inline limit compresses), and so
    // was the shard that names them.
    let weights = std::fs::metadata(src.join("sub/nested/weights.bin"))
        .unwrap()
        .len();
    let first_cas = cas_bytes_sent(&seen);
    assert!(first_cas >= weights, "{first_cas} < {weights}: {seen:#?}");
    assert!(
        seen.iter()
            .any(|s| s.path.contains("/shards") && (200..300).contains(&s.status)),
        "{seen:#?}"
    );
    // Nothing was committed: the branch did not move.
    assert_eq!(head(&hub, "hf://org/resume"), first);
    assert_eq!(history(&store, &first).1, moves_before);

    // The same command, the proxy now letting commits through.
    proxy.clear();
    let again = through_proxy();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    let seen = take(&proxy);
    assert_eq!(doc["commits"].as_array().unwrap().len(), 1, "{doc}");
    let second = doc["commit"].as_str().unwrap().to_string();
    assert!(
        doc["files"]
            .as_array()
            .unwrap()
            .iter()
            .all(|f| f["new"] == true),
        "{doc}"
    );
    // Next to nothing went to the CAS: what it holds was not sent again.
    let second_cas = cas_bytes_sent(&seen);
    assert!(
        second_cas < 64 << 10,
        "the rerun sent {second_cas} bytes to the CAS (the cut run {first_cas}): {seen:#?}"
    );
    // Exactly one new commit, on top of the first; the branch moved once, to it.
    assert_eq!(head(&hub, "hf://org/resume"), second);
    let (after, moves) = history(&store, &second);
    assert_eq!(moves, moves_before + 1);
    assert_eq!(after[1..], before[..]);
    let mut want: BTreeMap<String, Vec<u8>> = tree(&src);
    want.insert("notes.txt".into(), b"first commit\n".to_vec());
    assert_eq!(
        files_of(&store, &after[0].1),
        want.keys().cloned().collect::<Vec<_>>()
    );
    // Every file is there, byte for byte, for the real client.
    let out = hub.path("hf-out");
    hub.hf(&[
        "download",
        "org/resume",
        "--local-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(tree(&out), want);
}

/// Issue #23: "`--files-from` works here too, so a scripted dataset push is one command".
/// The list's paths (blank lines and `#` comments skipped) go below the address's path,
/// in one commit: a relative path keeps its folders (a listed file at the same path, a
/// listed folder's contents below it), an absolute one goes under its name as a PATH
/// argument would; files not listed stay out. A relative path leaving the working
/// directory, and two entries that would be the same repository path, are refused
/// before anything is committed.
#[test]
fn files_from_pushes_exactly_the_listed_paths_in_one_commit() {
    let hub = Hub::start();
    let ds = hub.path("ds");
    let random = |n, seed| xet_testdata::generate(xet_testdata::Kind::Random, n, seed);
    let files: [(&str, Vec<u8>); 7] = [
        ("README.md", b"---\nlicense: mit\n---\n# data\n".to_vec()),
        ("raw/2024/01/train-00000.bin", random(2 << 20, 11)),
        ("raw/2024/02/train-00001.bin", random(300 << 10, 12)),
        (
            "splits/test/labels.csv",
            b"id,label\n1,cat\n2,dog\n".to_vec(),
        ),
        ("images/a/x.bin", random(70 << 10, 13)),
        ("images/y.txt", b"y\n".to_vec()),
        ("raw/2024/unlisted.bin", random(10 << 10, 14)),
    ];
    for (p, bytes) in &files {
        let p = ds.join(p);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, bytes).unwrap();
    }
    let list = hub.path("list.txt");
    std::fs::write(
        &list,
        format!(
            "# the dataset's files\nREADME.md\n\nraw/2024/01/train-00000.bin\n  raw/2024/02/train-00001.bin  \n{}\nimages\n",
            ds.join("splits/test/labels.csv").display()
        ),
    )
    .unwrap();
    let content = |p: &str| files.iter().find(|f| f.0 == p).unwrap().1.clone();
    let want: BTreeMap<String, Vec<u8>> = [
        ("data/README.md", "README.md"),
        (
            "data/raw/2024/01/train-00000.bin",
            "raw/2024/01/train-00000.bin",
        ),
        (
            "data/raw/2024/02/train-00001.bin",
            "raw/2024/02/train-00001.bin",
        ),
        ("data/labels.csv", "splits/test/labels.csv"),
        ("data/images/a/x.bin", "images/a/x.bin"),
        ("data/images/y.txt", "images/y.txt"),
    ]
    .into_iter()
    .map(|(repo, local)| (repo.to_string(), content(local)))
    .collect();

    let o = hub
        .xet_cmd(&[
            "upload",
            "--files-from",
            list.to_str().unwrap(),
            "hf://datasets/org/ds/data",
            "--json",
        ])
        .current_dir(&ds)
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["commits"].as_array().unwrap().len(), 1, "{doc}");
    let commit = doc["commit"].as_str().unwrap().to_string();
    let reported: Vec<&str> = doc["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        reported,
        want.keys().map(String::as_str).collect::<Vec<_>>()
    );
    assert_eq!(
        file_entry(&doc, "data/raw/2024/01/train-00000.bin")["mode"],
        "lfs"
    );
    assert_eq!(file_entry(&doc, "data/labels.csv")["mode"], "regular");
    // The repository has exactly these files, in one commit on top of the empty
    // initial commit its creation made.
    assert_eq!(head(&hub, "hf://datasets/org/ds"), commit);
    let (chain, moves) = history(&hub.path("store"), &commit);
    assert_eq!((chain.len(), moves), (2, 2));
    assert!(files_of(&hub.path("store"), &chain[1].1).is_empty());
    assert_eq!(
        files_of(&hub.path("store"), &chain[0].1),
        want.keys().cloned().collect::<Vec<_>>()
    );
    let ls = hub.xet_json(&["ls", "hf://datasets/org/ds", "-r"]);
    let listed: Vec<&str> = ls["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["type"] == "file")
        .map(|e| e["path"].as_str().unwrap())
        .collect();
    assert_eq!(listed, want.keys().map(String::as_str).collect::<Vec<_>>());
    let out = hub.path("hf-out");
    hub.hf(&[
        "download",
        "org/ds",
        "--repo-type",
        "dataset",
        "--local-dir",
        out.to_str().unwrap(),
    ]);
    assert_eq!(tree(&out), want);

    // Refused, nothing committed: two entries that would both be `data/x.bin` (an
    // absolute path goes under its name), and a relative path out of the directory.
    std::fs::write(ds.join("x.bin"), b"other").unwrap();
    let refused = [
        (
            format!("x.bin\n{}\n", ds.join("images/a/x.bin").display()),
            "would both be data/x.bin".to_string(),
        ),
        (
            "README.md\n../list.txt\n".to_string(),
            format!("--files-from {} line 2: ../list.txt", list.display()),
        ),
    ];
    for (text, want_err) in refused {
        std::fs::write(&list, text).unwrap();
        let o = hub
            .xet_cmd(&[
                "upload",
                "--files-from",
                list.to_str().unwrap(),
                "hf://datasets/org/ds/data",
            ])
            .current_dir(&ds)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(err.contains(&want_err), "{want_err} in {err}");
    }
    assert_eq!(head(&hub, "hf://datasets/org/ds"), commit);
    assert_eq!(history(&hub.path("store"), &commit).1, 2);
}

/// A listing whose sha256 of a Xet file disagrees with its Xet hash: the download
/// fails verification (exit code 7) naming the file, and the cache gets neither the
/// blob nor a snapshot link for it.
#[test]
fn a_xet_file_whose_listed_sha256_is_wrong_is_not_placed() {
    let hub = Hub::start();
    let src = hub.path("model");
    make_model(&src);
    let up = hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/lie"]);
    let sha = file_entry(&up, "sub/nested/weights.bin")["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let wrong: String = sha.chars().rev().collect();
    assert_ne!(wrong, sha);
    let proxy = Proxy::start(&hub.server.url);
    rewrite(&proxy, &sha, &wrong);
    let o = hub
        .xet_cmd(&["download", "hf://org/lie"])
        .env("HF_ENDPOINT", &proxy.url)
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(7), "{err}");
    assert!(err.contains("sub/nested/weights.bin"), "{err}");
    assert!(err.contains(&sha) && err.contains(&wrong), "{err}");
    let repo_dir = hub.path("hub-cache/models--org--lie");
    let blobs: Vec<String> = std::fs::read_dir(repo_dir.join("blobs"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(
        !blobs.iter().any(|b| b.contains(&sha) || b.contains(&wrong)),
        "{blobs:?}"
    );
    let commit = up["commit"].as_str().unwrap();
    let weights = repo_dir
        .join("snapshots")
        .join(commit)
        .join("sub/nested/weights.bin");
    assert!(std::fs::symlink_metadata(&weights).is_err());

    // Through the server directly, the same command places it.
    let ok = hub.xet(&["download", "hf://org/lie"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(weights.is_file());
}

/// A hostile Hub lists files under a `.git` folder (the proxy renames a harmless folder
/// in every answer): `xet download` refuses, into a folder or the cache, with exit code
/// 3, naming the path, and writes nothing. Through the server itself the same
/// repository downloads whole.
#[test]
fn a_listing_that_plants_a_git_folder_is_refused_and_nothing_is_written() {
    let hub = Hub::start();
    let src = hub.path("planted");
    for dir in ["a/xgit", "b/gitx1"] {
        std::fs::create_dir_all(src.join(dir)).unwrap();
        std::fs::write(
            src.join(dir).join("config"),
            b"[core]\n\tfsmonitor = touch pwned\n",
        )
        .unwrap();
    }
    std::fs::write(src.join("README.md"), b"# planted\n").unwrap();
    hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/planted"]);
    let proxy = Proxy::start(&hub.server.url);
    let cases = [
        ("a/xgit/", "a/.git/", None),
        ("a/xgit/", "a/.GIT/", Some("out")),
        ("b/gitx1/", "b/git~1/", Some("out")),
        ("b/gitx1/", "b/.git./", None),
    ];
    for (i, (from, to, into)) in cases.into_iter().enumerate() {
        proxy.clear();
        rewrite(&proxy, from, to);
        let mut args = vec!["download", "hf://org/planted"];
        let out = hub.path(&format!("out{i}"));
        if into.is_some() {
            args.extend(["-o", out.to_str().unwrap()]);
        }
        let o = hub
            .xet_cmd(&args)
            .env("HF_ENDPOINT", &proxy.url)
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&o.stderr);
        assert_eq!(o.status.code(), Some(3), "{to}: {err}");
        assert!(err.contains(&format!("{to}config")), "{to}: {err}");
        assert!(err.contains("git refuses"), "{to}: {err}");
        assert!(!out.exists() || tree(&out).is_empty(), "{to}");
        let snapshots = hub.path("hub-cache/models--org--planted/snapshots");
        assert!(
            !snapshots.exists() || tree(&snapshots).is_empty(),
            "{to}: {:?}",
            tree(&snapshots).keys()
        );
    }

    let out = hub.path("direct");
    hub.xet_json(&["download", "hf://org/planted", "-o", out.to_str().unwrap()]);
    assert_eq!(tree(&out), tree(&src));
}

/// A Hub download cut off in the middle (the proxy answers xorb reads `404` after the
/// first few) leaves the pipeline's part file and journal beside the blob, and the same
/// command resumes from them: what it fetches and takes from the chunk cache is less
/// than the file.
#[test]
fn an_interrupted_hub_download_resumes_from_its_part_file() {
    let hub = Hub::start();
    let src = hub.path("big.bin");
    let size = 40u64 << 20;
    std::fs::write(
        &src,
        xet_testdata::generate(xet_testdata::Kind::Random, size as usize, 7),
    )
    .unwrap();
    let up = hub.xet_json(&["upload", src.to_str().unwrap(), "hf://org/cut"]);
    let sha = file_entry(&up, "big.bin")["sha256"]
        .as_str()
        .unwrap()
        .to_string();
    let proxy = Proxy::start(&hub.server.url);
    let xorb_reads = Match::method("GET", "/_xorb/");
    proxy.pass(xorb_reads.clone(), 2);
    proxy.inject(xorb_reads, Fault::Status(404), usize::MAX);
    let through_proxy = || {
        let mut c = hub.xet_cmd(&["download", "hf://org/cut", "--json"]);
        c.env("HF_ENDPOINT", &proxy.url);
        c.output().unwrap()
    };
    let cut = through_proxy();
    assert!(!cut.status.success(), "the download was not cut");
    let blobs = hub.path("hub-cache/models--org--cut/blobs");
    assert!(blobs.join(format!("{sha}.part")).is_file());
    assert!(blobs.join(format!("{sha}.part.jsonl")).is_file());
    assert!(!blobs.join(&sha).exists());

    proxy.clear();
    let again = through_proxy();
    assert!(
        again.status.success(),
        "{}",
        String::from_utf8_lossy(&again.stderr)
    );
    let doc: serde_json::Value = serde_json::from_slice(&again.stdout).unwrap();
    let moved = doc["totals"]["bytes_fetched"].as_u64().unwrap()
        + doc["totals"]["bytes_from_cache"].as_u64().unwrap();
    assert!(moved < size, "nothing was resumed: {doc}");
    assert!(std::fs::read(blobs.join(&sha)).unwrap() == std::fs::read(&src).unwrap());
    assert!(!blobs.join(format!("{sha}.part")).exists());
}
