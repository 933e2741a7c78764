//! The web pages of `xet serve` in a real headless browser (Debian's
//! `chromium-headless-shell`, `xet_testdata::browser`), driven over the DevTools
//! protocol by `web_cdp.py` (standard library only): what each page shows, a private
//! repository invisible until signing in through the real form, and hostile content
//! (a README's script, `onerror` image and `javascript:` link, a file name and a commit
//! title holding markup) that runs nothing. Without the browser the tests print SKIP,
//! unless `XET_REQUIRE_REFERENCE=1`.

use crate::common;

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, ChildStdout, Command, Output, Stdio};
use std::time::{Duration, Instant};

use common::Served;
use serde_json::{Value, json};

const WRITE: &str = "web-write-token";
const READ: &str = "web-read-token";
const PWNED: &str = "pwned";

/// The browser, one command a line (see `web_cdp.py`).
struct Browser {
    child: Child,
    input: ChildStdin,
    output: BufReader<ChildStdout>,
    _script: tempfile::TempDir,
}

impl Browser {
    fn start() -> Option<Browser> {
        let exe = xet_testdata::browser::require_browser()?;
        let dir = tempfile::tempdir().unwrap();
        let script = dir.path().join("web_cdp.py");
        std::fs::write(&script, include_str!("web_cdp.py")).unwrap();
        let mut child = Command::new(python())
            .arg(&script)
            .arg(exe)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("run the browser driver");
        let input = child.stdin.take().unwrap();
        let output = BufReader::new(child.stdout.take().unwrap());
        Some(Browser {
            child,
            input,
            output,
            _script: dir,
        })
    }

    fn send(&mut self, cmd: Value) -> Value {
        writeln!(self.input, "{cmd}").unwrap();
        self.input.flush().unwrap();
        let mut line = String::new();
        self.output.read_line(&mut line).unwrap();
        let answer: Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("the driver answered {line:?} to {cmd}: {e}"));
        if let Some(e) = answer.get("error") {
            panic!("{cmd}: {e}");
        }
        answer["value"].clone()
    }

    fn go(&mut self, url: &str) -> String {
        self.send(json!({ "go": url }))
            .as_str()
            .unwrap()
            .to_string()
    }

    fn eval(&mut self, js: &str) -> Value {
        self.send(json!({ "eval": js }))
    }

    fn text(&mut self, selector: &str) -> String {
        let js = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.innerText : null; }})()",
            json!(selector)
        );
        match self.eval(&js) {
            Value::String(s) => s,
            other => panic!("no {selector} on {}: {other}", self.eval("location.href")),
        }
    }

    /// The text of `selector` whether shown or not (a closed `<details>`).
    fn text_content(&mut self, selector: &str) -> String {
        let js = format!(
            "(() => {{ const e = document.querySelector({}); return e ? e.textContent : null; }})()",
            json!(selector)
        );
        self.eval(&js).as_str().unwrap_or_default().to_string()
    }

    fn body(&mut self) -> String {
        self.text("body")
    }

    fn title(&mut self) -> String {
        self.eval("document.title").as_str().unwrap().to_string()
    }

    /// Nothing hostile survived into the DOM, and nothing ran.
    fn assert_inert(&mut self) {
        let found = self.eval(
            "[document.querySelectorAll('script').length, \
              document.querySelectorAll('[onerror],[onclick],[onload]').length, \
              document.querySelectorAll('a[href^=\"javascript\" i]').length, \
              document.querySelectorAll('iframe,object,embed').length]",
        );
        assert_eq!(found, json!([0, 0, 0, 0]), "hostile markup in the DOM");
        assert_ne!(self.title(), PWNED, "a script ran");
    }
}

impl Drop for Browser {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An interpreter for the driver (standard library only): the test virtualenv's if
/// there is one, else the system's.
fn python() -> PathBuf {
    std::env::var_os("XET_REF_PYTHON")
        .map(PathBuf::from)
        .filter(|p| p.is_file())
        .unwrap_or_else(|| PathBuf::from("python3"))
}

fn serve(store: &Path, tokens: bool, log: &Path) -> Served {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_xet"));
    cmd.args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store)
        .env("XET_LOG", "debug")
        .stderr(std::fs::File::create(log).unwrap());
    if tokens {
        cmd.args([
            "--token",
            &format!("write:{WRITE}"),
            "--token",
            &format!("read:{READ}"),
        ]);
    }
    Served::spawn(&mut cmd)
}

fn xet(url: &str, home: &Path, args: &[&str]) -> Output {
    let out = Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(args)
        .env("HF_ENDPOINT", url)
        .env("HF_TOKEN", WRITE)
        .env("HF_HOME", home.join("hf-home"))
        .env("HF_HUB_CACHE", home.join("hub-cache"))
        .env("XET_CACHE", home.join("xet-cache"))
        .env_remove("HF_TOKEN_PATH")
        .env_remove("XET_TOKEN")
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_TOKEN_URL")
        .output()
        .expect("run xet");
    assert!(
        out.status.success(),
        "xet {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    out
}

fn curl(args: &[&str]) -> Output {
    Command::new("curl")
        .args(["-sS", "--max-time", "30"])
        .args(args)
        .output()
        .expect("run curl")
}

fn sha256_hex(path: &Path) -> String {
    let out = Command::new("sha256sum").arg(path).output().unwrap();
    String::from_utf8(out.stdout).unwrap()[..64].to_string()
}

/// The hostile README: front matter, then markup that would change the title if it ran.
const README: &str = "---\nlicense: mit\nlanguage: en\n---\n# A test model\n\nIt has **weights**.\n\n\
<script>document.title='pwned'</script>\n\n\
<img src=\"x\" onerror=\"document.title='pwned'\">\n\n\
[click me](javascript:document.title='pwned')\n\n\
<a href=\"JaVaScRiPt:document.title='pwned'\">and me</a>\n\n\
| a | b |\n|---|---|\n| 1 | 2 |\n";

const HOSTILE_NAME: &str = "<img src=x onerror=document.title='pwned'>.txt";

fn make_model(dir: &Path) {
    std::fs::create_dir_all(dir.join("sub")).unwrap();
    std::fs::write(dir.join("README.md"), README).unwrap();
    std::fs::write(
        dir.join("config.json"),
        br#"{"hidden_size": 8, "note": "<b>x</b>"}"#,
    )
    .unwrap();
    std::fs::write(
        dir.join("weights.bin"),
        xet_testdata::generate(xet_testdata::Kind::Random, 3_000_000, 7),
    )
    .unwrap();
    std::fs::write(dir.join("sub/nested.txt"), b"nested text\n").unwrap();
    std::fs::write(dir.join(HOSTILE_NAME), b"hostile name\n").unwrap();
}

fn poll<T>(what: &str, mut f: impl FnMut() -> Option<T>) -> T {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = f() {
            return v;
        }
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(250));
    }
}

#[test]
fn web_pages_show_repositories_files_commits_buckets_and_run_nothing_hostile() {
    let Some(mut b) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let server = serve(&dir.path().join("store"), false, &log);
    let url = server.url.clone();
    let home = dir.path().join("home");
    let model = dir.path().join("model");
    make_model(&model);
    let m = model.to_str().unwrap();
    xet(
        &url,
        &home,
        &["upload", m, "hf://org/model", "-m", "First commit"],
    );
    std::fs::write(model.join("sub/nested.txt"), b"nested text, changed\n").unwrap();
    let hostile_title = "<script>document.title='pwned'</script> Second commit";
    xet(
        &url,
        &home,
        &["upload", m, "hf://org/model", "-m", hostile_title],
    );
    // A dataset of 450 files: three pages of its folder.
    let many = dir.path().join("many");
    std::fs::create_dir_all(&many).unwrap();
    for i in 0..450 {
        std::fs::write(many.join(format!("f{i:04}.txt")), format!("file {i}\n")).unwrap();
    }
    xet(
        &url,
        &home,
        &["upload", many.to_str().unwrap(), "hf://datasets/org/many"],
    );
    // A branch, and a bucket with a file in a folder.
    let o = curl(&[
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        "{}",
        &format!("{url}/api/models/org/model/branch/dev"),
    ]);
    assert!(o.status.success());
    // A tag, shown in the switcher beside the branches.
    let o = curl(&[
        "-f",
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        r#"{"tag": "v1"}"#,
        &format!("{url}/api/models/org/model/tag/main"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let o = curl(&[
        "-f",
        "-X",
        "POST",
        "-H",
        "content-type: application/json",
        "-d",
        "{}",
        &format!("{url}/api/buckets/org/bkt"),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let blob = dir.path().join("a.bin");
    std::fs::write(
        &blob,
        xet_testdata::generate(xet_testdata::Kind::Random, 12_345, 9),
    )
    .unwrap();
    xet(
        &url,
        &home,
        &[
            "cp",
            blob.to_str().unwrap(),
            "hf://buckets/org/bkt/dir/a.bin",
        ],
    );

    // The front page: repositories, buckets, search, the store's figures.
    b.go(&format!("{url}/"));
    assert_eq!(b.title(), "xet serve");
    let repos = b.text("#repos");
    assert!(
        repos.contains("org/model") && repos.contains("org/many"),
        "{repos}"
    );
    assert!(b.text("#buckets").contains("org/bkt"));
    b.go(&format!("{url}/?q=MAN"));
    let repos = b.text("#repos");
    assert!(
        repos.contains("org/many") && !repos.contains("org/model"),
        "{repos}"
    );
    let figures = poll("the store's figures", || {
        b.go(&format!("{url}/"));
        let f = b.text("#figures");
        (!f.contains('…')).then_some(f)
    });
    assert!(
        figures.contains("dedup ratio") && figures.contains('×'),
        "{figures}"
    );
    assert!(figures.contains("MB"), "{figures}");
    b.assert_inert();

    // The model: files with sizes, the last commit, the README rendered, metadata apart.
    b.go(&format!("{url}/org/model"));
    assert_eq!(b.title(), "org/model");
    let files = b.text("#files");
    for name in [
        "README.md",
        "config.json",
        "weights.bin",
        "sub",
        HOSTILE_NAME,
    ] {
        assert!(files.contains(name), "{name} not in {files}");
    }
    assert!(files.contains("3.0 MB"), "{files}");
    let last = b.text("#last-commit");
    assert!(last.contains(hostile_title), "{last}");
    assert_eq!(b.text("#readme h1"), "A test model");
    assert_eq!(b.text("#readme strong"), "weights");
    assert!(b.text("#readme table").contains('2'));
    let meta = b.text("#readme-meta");
    assert!(meta.contains("license: mit"), "{meta}");
    assert!(!b.text("#readme").contains("license"));
    assert!(b.text_content("#refs").contains("dev"));
    b.assert_inert();
    // Leave the hostile image time to fail loading (its onerror, were it kept, would run).
    std::thread::sleep(Duration::from_millis(300));
    b.assert_inert();

    // A folder, reached through its link; a branch through the switcher.
    let sub =
        b.eval("[...document.querySelectorAll('#files a')].find(a => a.innerText === 'sub').href");
    b.go(sub.as_str().unwrap());
    assert!(b.text("#files").contains("nested.txt"));
    let dev =
        b.eval("[...document.querySelectorAll('#refs a')].find(a => a.textContent === 'dev').href");
    assert!(
        dev.as_str().unwrap().ends_with("/org/model/tree/dev/sub"),
        "{dev}"
    );
    b.go(dev.as_str().unwrap());
    assert!(b.text("#files").contains("nested.txt"));
    let tag = b.eval(
        "[...document.querySelectorAll('#refs a')].find(a => a.textContent === 'tag: v1').href",
    );
    assert!(
        tag.as_str().unwrap().ends_with("/org/model/tree/v1/sub"),
        "{tag}"
    );
    b.go(tag.as_str().unwrap());
    assert!(b.text("#files").contains("nested.txt"));

    // A file: facts, the download link (fetched by the browser, its sha256 checked).
    b.go(&format!("{url}/org/model/blob/main/weights.bin"));
    let sha = sha256_hex(&model.join("weights.bin"));
    assert_eq!(b.text("#sha256"), sha);
    assert_eq!(b.text("#size"), "3.0 MB");
    let xet_hash = b.text("#xet-hash");
    assert_eq!(xet_hash.len(), 64);
    let got = b.eval(
        "(async () => { const r = await fetch(document.querySelector('#download').href); \
           const d = await crypto.subtle.digest('SHA-256', await r.arrayBuffer()); \
           return r.status + ' ' + [...new Uint8Array(d)].map(x => x.toString(16).padStart(2, '0')).join(''); })()",
    );
    assert_eq!(got, json!(format!("200 {sha}")));
    // Small text inline, escaped.
    b.go(&format!("{url}/org/model/blob/main/config.json"));
    assert_eq!(b.text("#text"), r#"{"hidden_size": 8, "note": "<b>x</b>"}"#);
    // The hostile name's own page.
    let link = b.eval("[...document.querySelectorAll('#files a, a')].length");
    assert!(link.as_u64().is_some());
    b.go(&format!("{url}/org/model"));
    let hostile = b.eval(&format!(
        "[...document.querySelectorAll('#files a')].find(a => a.innerText === {}).href",
        json!(HOSTILE_NAME)
    ));
    b.go(hostile.as_str().unwrap());
    assert_eq!(b.text("#text").trim_end(), "hostile name");
    b.assert_inert();

    // History, newest first.
    b.go(&format!("{url}/org/model/commits/main"));
    let commits = b.text("#commits");
    let second = commits.find("Second commit").expect("second commit");
    let first = commits.find("First commit").expect("first commit");
    assert!(second < first, "{commits}");
    b.assert_inert();

    // A folder of 450 files in pages of 200.
    b.go(&format!("{url}/datasets/org/many"));
    let rows = |b: &mut Browser| b.eval("document.querySelectorAll('#files tr').length");
    assert_eq!(rows(&mut b), json!(200));
    let next = b.eval("document.querySelector('#next').href");
    b.go(next.as_str().unwrap());
    assert_eq!(rows(&mut b), json!(200));
    assert!(b.text("#files").starts_with("f0200.txt"));
    let next = b.eval("document.querySelector('#next').href");
    b.go(next.as_str().unwrap());
    assert_eq!(rows(&mut b), json!(50));
    assert_eq!(b.eval("document.querySelector('#next')"), Value::Null);

    // The bucket and its folder.
    b.go(&format!("{url}/buckets/org/bkt"));
    assert!(b.text("#files").contains("dir"));
    b.go(&format!("{url}/buckets/org/bkt/tree/dir"));
    let files = b.text("#files");
    assert!(
        files.contains("a.bin") && files.contains("12.3 kB"),
        "{files}"
    );

    // A missing repository: a page saying so, 404.
    b.go(&format!("{url}/org/nope"));
    assert_eq!(b.text("h1"), "404");

    if let Some(shots) = std::env::var_os("XET_WEB_SCREENSHOTS") {
        let shots = PathBuf::from(shots);
        b.go(&format!("{url}/"));
        b.send(json!({ "screenshot": shots.join("web-front.png") }));
        b.go(&format!("{url}/org/model"));
        b.send(json!({ "screenshot": shots.join("web-repo.png") }));
    }

    // The APIs answer as before, whatever the Accept header.
    let api = curl(&[
        "-f",
        "-H",
        "accept: text/html",
        &format!("{url}/api/models/org/model"),
    ]);
    let info: Value = serde_json::from_slice(&api.stdout).expect("JSON from the API");
    assert_eq!(info["id"], "org/model");
    let raw = curl(&[
        "-f",
        "-H",
        "accept: text/html",
        &format!("{url}/org/model/resolve/main/config.json"),
    ]);
    assert_eq!(
        raw.stdout,
        std::fs::read(model.join("config.json")).unwrap()
    );
    // Pages forbid scripts on top of sanitizing (the browser above bypassed that).
    let head = curl(&[
        "-sI",
        "-H",
        "accept: text/html",
        &format!("{url}/org/model"),
    ]);
    let head = String::from_utf8_lossy(&head.stdout).to_lowercase();
    assert!(
        head.contains("content-security-policy: default-src 'none'"),
        "{head}"
    );
    let json_page = curl(&[
        "-H",
        "accept: application/json",
        "-o",
        "/dev/null",
        "-w",
        "%{http_code} %{content_type}",
        &format!("{url}/org/model"),
    ]);
    assert!(!String::from_utf8_lossy(&json_page.stdout).contains("text/html"));
    drop(server);
}

#[test]
fn web_private_repositories_appear_only_after_signing_in() {
    let Some(mut b) = Browser::start() else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("serve.log");
    let server = serve(&dir.path().join("store"), true, &log);
    let url = server.url.clone();
    let home = dir.path().join("home");
    let model = dir.path().join("model");
    make_model(&model);
    let m = model.to_str().unwrap();
    xet(&url, &home, &["upload", m, "hf://org/open"]);
    xet(&url, &home, &["upload", m, "hf://org/secret", "--private"]);

    // Anonymous: nothing of the private one (on a server with tokens, nothing at all:
    // the pages show what the API would answer).
    b.go(&format!("{url}/"));
    assert!(!b.body().contains("org/secret"));
    assert!(
        b.eval("document.querySelector('#signin') !== null")
            .as_bool()
            .unwrap()
    );
    b.go(&format!("{url}/org/secret"));
    assert!(!b.body().contains("weights.bin"));
    b.go(&format!("{url}/org/secret/blob/main/weights.bin"));
    assert!(!b.body().contains(&sha256_hex(&model.join("weights.bin"))));

    // A wrong token: refused, no cookie.
    b.go(&format!("{url}/-/signin"));
    b.send(json!({ "submit": "document.querySelector('#token').value = 'not-a-token'; document.querySelector('#signin-submit').click()" }));
    assert!(b.text("#error").contains("not a token"));
    assert_eq!(b.send(json!({ "cookies": true })), json!([]));

    // The read token through the form: both repositories, the private one marked.
    b.go(&format!("{url}/-/signin"));
    let at = b.send(json!({ "submit": format!("document.querySelector('#token').value = '{READ}'; document.querySelector('#signin-submit').click()") }));
    assert_eq!(at, json!(format!("{url}/")));
    let repos = b.text("#repos");
    assert!(
        repos.contains("org/secret") && repos.contains("org/open"),
        "{repos}"
    );
    assert!(repos.contains("private"));
    let cookies = b.send(json!({ "cookies": true }));
    let c = &cookies[0];
    assert_eq!(c["name"], "xet_session");
    assert_eq!(c["httpOnly"], true);
    assert_eq!(c["sameSite"], "Strict");
    assert_eq!(c["secure"], false);
    assert_eq!(
        b.eval("document.cookie"),
        json!(""),
        "scripts cannot read it"
    );
    b.go(&format!("{url}/org/secret"));
    assert!(b.text("#files").contains("weights.bin"));
    assert!(b.text("h1").contains("private"));
    // The download link works signed in.
    b.go(&format!("{url}/org/secret/blob/main/config.json"));
    let got = b.eval("(async () => { const r = await fetch(document.querySelector('#download').href); return r.status + ' ' + await r.text(); })()");
    assert_eq!(
        got,
        json!(format!(
            "200 {}",
            std::fs::read_to_string(model.join("config.json")).unwrap()
        ))
    );

    // Signing out forgets it.
    b.go(&format!("{url}/"));
    b.send(json!({ "submit": "document.querySelector('#signout').click()" }));
    assert_eq!(b.send(json!({ "cookies": true })), json!([]));
    assert!(!b.body().contains("org/secret"));
    b.go(&format!("{url}/org/secret"));
    assert!(!b.body().contains("weights.bin"));

    // A sign-in posted from another site is refused.
    let o = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        "origin: http://evil.example",
        "-d",
        &format!("token={READ}"),
        &format!("{url}/-/signin"),
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "400");
    // The API still wants its bearer token, and never reads the cookie.
    let cookie = format!("cookie: xet_session={}", base64_url(READ));
    let o = curl(&[
        "-o",
        "/dev/null",
        "-w",
        "%{http_code}",
        "-H",
        &cookie,
        &format!("{url}/api/models/org/secret"),
    ]);
    assert_eq!(String::from_utf8_lossy(&o.stdout), "401");
    drop(server);
    // The log holds neither the token nor the cookie.
    let logged = std::fs::read_to_string(&log).unwrap();
    assert!(!logged.is_empty());
    assert!(
        !logged.contains(READ) && !logged.contains(&base64_url(READ)),
        "{logged}"
    );
}

fn base64_url(s: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(s)
}
