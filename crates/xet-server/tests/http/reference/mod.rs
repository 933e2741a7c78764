//! Running the reference client (`hf_xet` 1.8.0 from PyPI) from tests: the interpreter
//! (skip or fail when it is unavailable) and steps of `tests/ref/hf_xet_driver.py`.
//!
//! The Python interpreter is `$XET_REF_PYTHON`, else `target/refvenv/bin/python`, which is
//! created (`python3 -m venv` + `pip install hf-xet==1.8.0`) when missing. If that is
//! impossible (no python3, no network) the tests print SKIP and pass, unless
//! `XET_REQUIRE_REFERENCE=1`, which makes them fail instead.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

pub const HF_XET_VERSION: &str = xet_testdata::HF_XET_VERSION;

pub fn driver() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/ref/hf_xet_driver.py")
}

/// The interpreter, or `None` (after printing SKIP) when the reference is unavailable.
pub fn python() -> Option<PathBuf> {
    static PY: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    match PY.get_or_init(xet_testdata::reference_python) {
        Ok(p) => Some(p.clone()),
        Err(e) => {
            if std::env::var("XET_REQUIRE_REFERENCE").is_ok_and(|v| v == "1") {
                panic!("reference client hf_xet {HF_XET_VERSION} unavailable: {e}");
            }
            eprintln!("SKIP: reference client hf_xet {HF_XET_VERSION} unavailable: {e}");
            None
        }
    }
}

pub struct Run {
    pub ok: bool,
    pub stdout: String,
    pub stderr: String,
}

/// Run one driver step with its own `HF_XET_CACHE` (`work/cache`), killed after `limit`.
pub async fn step_within(
    limit: Duration,
    python: &Path,
    work: &Path,
    cache: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    let mut cmd = tokio::process::Command::new(python);
    cmd.arg(driver()).args(args).arg("--work").arg(work);
    cmd.env("HF_XET_CACHE", work.join(cache));
    cmd.env("RUST_LOG", "warn");
    for (k, v) in env {
        cmd.env(k, v);
    }
    cmd.kill_on_drop(true);
    let out = tokio::time::timeout(limit, cmd.output())
        .await
        .unwrap_or_else(|_| panic!("driver step {args:?} did not finish within {limit:?}"))
        .expect("run driver");
    Run {
        ok: out.status.success(),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// [`step_within`] ten minutes.
pub async fn step(
    python: &Path,
    work: &Path,
    cache: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> Run {
    step_within(Duration::from_secs(600), python, work, cache, args, env).await
}

/// The step's last stdout line as JSON; panics (with both outputs) if it failed.
pub fn must(r: Run, what: &str) -> serde_json::Value {
    assert!(
        r.ok,
        "{what} failed\nstdout:\n{}\nstderr:\n{}",
        r.stdout, r.stderr
    );
    let last = r.stdout.lines().last().unwrap_or("");
    serde_json::from_str(last).unwrap_or_else(|e| panic!("{what}: bad driver output {last:?}: {e}"))
}
