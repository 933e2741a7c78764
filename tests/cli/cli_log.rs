//! Diagnostics on stderr: `XET_LOG`, the default warnings of the client commands, and
//! `xet serve`'s request log; stdout stays what scripts parse, and tokens never appear.

use crate::common;

use common::Served;
use std::path::Path;
use std::process::{Command, Output};

fn xet(dir: &Path, log: Option<&str>, args: &[&str]) -> Output {
    let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
    c.args(args)
        .env("XET_STORE", dir.join("store"))
        .env("XET_CACHE", dir.join("cache"))
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_TOKEN")
        .env_remove("XET_LOG");
    if let Some(l) = log {
        c.env("XET_LOG", l);
    }
    c.output().expect("run xet")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

#[test]
fn xet_log_sends_diagnostics_to_stderr_only() {
    let d = tempfile::tempdir().unwrap();
    let f = d.path().join("f.bin");
    std::fs::write(
        &f,
        xet_testdata::generate(xet_testdata::Kind::Random, 300_000, 1),
    )
    .unwrap();
    let f = f.to_str().unwrap();

    // Nothing goes wrong: nothing on stderr by default (not a terminal: no progress).
    let o = xet(d.path(), None, &["--json", "upload", f]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    assert_eq!(text(&o.stderr), "");

    // Debug events on stderr; stdout is still exactly one JSON document.
    let o = xet(d.path(), Some("debug"), &["--json", "upload", f]);
    assert!(o.status.success(), "{}", text(&o.stderr));
    let err = text(&o.stderr);
    assert!(
        err.contains("DEBUG") && err.contains("local cache loaded"),
        "{err}"
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).expect("stdout is JSON");
    assert_eq!(doc["files"][0]["size"], 300_000);

    // A filter that does not parse is a usage error that names the variable.
    let o = xet(d.path(), Some("=nonsense="), &["upload", f]);
    assert_eq!(o.status.code(), Some(2));
    assert!(text(&o.stderr).contains("XET_LOG"), "{}", text(&o.stderr));
}

#[test]
fn serve_logs_requests_and_no_one_logs_the_token() {
    const TOKEN: &str = "s3cr3t-token-f00d";
    let d = tempfile::tempdir().unwrap();
    let serve_log = d.path().join("serve.log");
    let server = Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token",
                TOKEN,
                "--store",
            ])
            .arg(d.path().join("served"))
            .env_remove("XET_LOG")
            // A file, not a pipe nobody reads: a full pipe would stall the server.
            .stderr(std::fs::File::create(&serve_log).unwrap()),
    );
    let url = server.url.clone();

    let f = d.path().join("f.bin");
    std::fs::write(
        &f,
        xet_testdata::generate(xet_testdata::Kind::Random, 2_000_000, 2),
    )
    .unwrap();
    let f = f.to_str().unwrap();
    // The most verbose client there is (every library's trace events).
    let up = xet(
        d.path(),
        Some("trace"),
        &["upload", "--endpoint", &url, "--token", TOKEN, f],
    );
    assert!(up.status.success(), "{}", text(&up.stderr));
    let wrong = xet(
        d.path(),
        None,
        &["upload", "--endpoint", &url, "--token", "wrong", f],
    );
    assert_eq!(wrong.status.code(), Some(4), "{}", text(&wrong.stderr));
    drop(server);

    let served = std::fs::read_to_string(&serve_log).unwrap();
    // One line per request: method, path, status.
    assert!(
        served.lines().any(|l| l.contains("request")
            && l.contains("POST")
            && l.contains("/shards")
            && l.contains("status=200")),
        "{served}"
    );
    assert!(served.contains("status=401"), "{served}");
    let client = text(&up.stderr);
    assert!(client.contains("TRACE"), "the client logged at trace level");
    for (who, log) in [("server", &served), ("client", &client)] {
        assert!(!log.contains(TOKEN), "the {who} logged the token:\n{log}");
    }
}
