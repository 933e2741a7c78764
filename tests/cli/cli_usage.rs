//! Black-box tests of the command line's surface: usage errors under `--json`, help
//! text, and `xet serve`'s announcement.

use std::io::BufRead;
use std::process::{Command, Output, Stdio};

fn xet(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(args)
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_LOG")
        .output()
        .expect("run xet")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// Every failure under `--json` is one document on stdout of the same shape, clap's
/// own argument errors included; without `--json` stdout stays empty.
#[test]
fn usage_errors_with_json_are_one_json_document() {
    for args in [
        &["--json", "hash"][..],
        &["hash", "--json", "--no-such-flag", "x"],
        &["--json", "frobnicate"],
        &["download", "--json", "--size", "many", &"ab".repeat(32)],
        &["serve", "--json", "--s3-conditional-put", "sometimes"],
    ] {
        let o = xet(args);
        assert_eq!(o.status.code(), Some(2), "{args:?}: {}", text(&o.stderr));
        let doc: serde_json::Value = serde_json::from_slice(&o.stdout)
            .unwrap_or_else(|e| panic!("{args:?}: stdout is not JSON ({e}): {}", text(&o.stdout)));
        assert_eq!(doc["ok"], false, "{args:?}");
        assert_eq!(doc["error"]["kind"], "usage", "{args:?}");
        assert_eq!(doc["error"]["code"], 2, "{args:?}");
        let message = doc["error"]["message"].as_str().unwrap();
        assert!(
            !message.is_empty() && !message.contains('\n') && !message.contains("--help"),
            "{args:?}: {message:?}"
        );
        // Humans still get clap's own explanation on stderr.
        assert!(text(&o.stderr).contains("--help"), "{}", text(&o.stderr));
    }
    let o = xet(&["--json", "hash"]);
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("<FILES>"),
        "{doc}"
    );

    // Without --json, or with it only after `--` (an operand then), stdout stays empty.
    let o = xet(&["hash", "--no-such-flag", "x"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    let o = xet(&["frobnicate", "--", "--json"]);
    assert_eq!(o.status.code(), Some(2));
    assert!(o.stdout.is_empty(), "{}", text(&o.stdout));
    // Help is not an error: still text, exit 0.
    let o = xet(&["--json", "--help"]);
    assert!(o.status.success());
    assert!(text(&o.stdout).contains("Usage:"));
}

/// Positional arguments are explained in `--help`, not just named.
#[test]
fn positional_arguments_have_help_text() {
    for cmd in [
        &["hash"][..],
        &["chunk"],
        &["xorb", "inspect"],
        &["xorb", "verify"],
        &["shard", "inspect"],
        &["shard", "verify"],
        &["upload"],
        &["download"],
    ] {
        let mut args = cmd.to_vec();
        args.push("--help");
        let o = xet(&args);
        assert!(o.status.success(), "{cmd:?}");
        let help = text(&o.stdout);
        let section = help
            .split_once("Arguments:\n")
            .unwrap_or_else(|| panic!("{cmd:?}: no Arguments section:\n{help}"))
            .1
            .split("\n\n")
            .next()
            .unwrap();
        for line in section.lines() {
            let words: Vec<&str> = line.split_whitespace().collect();
            assert!(words.len() > 1, "{cmd:?}: {line:?} has no help text");
        }
    }
}

/// A `xet serve` child, killed when dropped.
struct Child(std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[test]
fn serve_announces_its_url_as_json_with_json() {
    let d = tempfile::tempdir().unwrap();
    for json_first in [true, false] {
        let mut args = vec!["serve", "--listen", "127.0.0.1:0", "--store"];
        if json_first {
            args.insert(0, "--json");
        } else {
            args.insert(1, "--json");
        }
        let mut child = Child(
            Command::new(env!("CARGO_BIN_EXE_xet"))
                .args(&args)
                .arg(d.path().join("store"))
                .env_remove("XET_LOG")
                .stdout(Stdio::piped())
                .stderr(Stdio::null())
                .spawn()
                .unwrap(),
        );
        let mut line = String::new();
        std::io::BufReader::new(child.0.stdout.take().unwrap())
            .read_line(&mut line)
            .unwrap();
        let doc: serde_json::Value = serde_json::from_str(&line)
            .unwrap_or_else(|e| panic!("first line is not JSON ({e}): {line:?}"));
        let url = doc["listening"].as_str().unwrap();
        assert!(url.starts_with("http://127.0.0.1:"), "{line}");
        // It is the server's URL: an unknown file is "not found" (5), not a network error.
        let o = xet(&["download", "--endpoint", url, &"ab".repeat(32)]);
        assert_eq!(o.status.code(), Some(5), "{}", text(&o.stderr));
        drop(child);
    }
}

#[test]
fn serving_a_public_address_without_a_token_says_which_flags_give_one() {
    let d = tempfile::tempdir().unwrap();
    let store = d.path().join("store");
    let o = xet(&[
        "serve",
        "--listen",
        "0.0.0.0:0",
        "--store",
        store.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", text(&o.stderr));
    assert!(
        text(&o.stderr).contains("pass --token or --token-file"),
        "{}",
        text(&o.stderr)
    );
}

/// `xet upload hf://org/repo ./dir`, destination first as with `cp` reversed: a usage
/// error (2) that says the destination goes last, not "No such file or directory".
#[test]
fn an_hf_destination_given_first_is_named_as_the_destination() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("a.txt"), b"a").unwrap();
    let o = xet(&["upload", "hf://org/repo", dir.path().to_str().unwrap()]);
    let err = text(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("goes last"), "{err}");
    assert!(!err.contains("No such file"), "{err}");
}
