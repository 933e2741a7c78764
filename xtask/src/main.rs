//! Developer automation: `cargo xtask <command>`.
//!
//! - `vectors`: regenerate the golden vectors in `tests/vectors/` with the reference client.
//! - `ref-venv`: create the virtualenv with the reference client (`target/refvenv`).
//! - `bench`: throughput and peak RSS of `xet` next to the reference (see `bench/`;
//!   `bench --wan`, over an emulated wide-area link, in `bench/wan/`).
//! - `test`: the whole suite, as CI runs it: reference venv, fmt check, clippy and rustdoc
//!   with warnings denied, every test (tidy checks included), a smoke run of each fuzz
//!   target.
//! - `fuzz`: build the fuzz targets of `fuzz/` and run each for a while (see `fuzz.rs`).

mod bench;
mod fuzz;
mod reference;

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};

fn main() -> Result<()> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("vectors") => vectors(),
        Some("ref-venv") => {
            println!("{}", reference::python()?.display());
            Ok(())
        }
        Some("bench") => bench::run(&args[1..]),
        Some("test") => test(),
        Some("fuzz") => fuzz::run(&args[1..]),
        _ => bail!(
            "usage: cargo xtask <test|vectors|ref-venv|bench|fuzz>\n{}\n{}",
            bench::USAGE,
            fuzz::USAGE
        ),
    }
}

pub fn workspace_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("xtask sits in the workspace")
        .to_path_buf()
}

/// The whole suite. Installs the reference client first (interop tests drive it), so a
/// fresh clone needs only cargo and python3. Lints and docs are part of it, with
/// warnings denied: what the docs promise, CI enforces.
fn test() -> Result<()> {
    let py = reference::python()?;
    let root = workspace_root();
    let run = |args: &[&str], env: &[(&str, &str)]| -> Result<()> {
        eprintln!("$ cargo {}", args.join(" "));
        let mut cmd = std::process::Command::new(env!("CARGO"));
        cmd.args(args)
            .current_dir(&root)
            .env("XET_REF_PYTHON", &py)
            .env("XET_REQUIRE_REFERENCE", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        clean_cargo_env(&mut cmd);
        let st = cmd.status()?;
        if !st.success() {
            bail!("cargo {} failed: {st}", args.join(" "));
        }
        Ok(())
    };
    run(&["fmt", "--all", "--", "--check"], &[])?;
    run(
        &[
            "clippy",
            "--workspace",
            "--all-targets",
            "--",
            "-D",
            "warnings",
        ],
        &[],
    )?;
    run(
        &["doc", "--workspace", "--no-deps"],
        &[("RUSTDOCFLAGS", "-D warnings")],
    )?;
    run(&["test", "--workspace", "--no-fail-fast"], &[])?;
    // A short run of every fuzz target (seeds and regressions replayed first); the long
    // runs are `cargo xtask fuzz --time ...`.
    fuzz::run(&["--smoke".to_string()])?;
    Ok(())
}

/// `cargo xtask` runs under `cargo run`, which sets variables describing the xtask
/// package (`CARGO_PKG_*`, `CARGO_MANIFEST_DIR`, ...). Passed on, they would make the inner cargo see a different environment than a plain
/// `cargo test` does, and rebuild the workspace for each; only cargo's configuration
/// variables go through.
fn clean_cargo_env(cmd: &mut std::process::Command) {
    const KEEP: &[&str] = &[
        "CARGO_HOME",
        "CARGO_TARGET_DIR",
        "CARGO_BUILD_",
        "CARGO_TERM_",
        "CARGO_NET_",
        "CARGO_HTTP_",
        "CARGO_REGISTRIES_",
        "CARGO_REGISTRY_",
        "CARGO_PROFILE_",
        "CARGO_INCREMENTAL",
    ];
    for (k, _) in std::env::vars_os() {
        let Some(k) = k.to_str() else { continue };
        if k.starts_with("CARGO_") && !KEEP.iter().any(|p| k.starts_with(p)) {
            cmd.env_remove(k);
        }
    }
}

fn write_corpus(dir: &Path, files: &[xet_testdata::CorpusFile]) -> Result<()> {
    std::fs::create_dir_all(dir)?;
    for f in files {
        std::fs::write(dir.join(f.name), f.bytes())
            .with_context(|| format!("writing {}", f.name))?;
    }
    Ok(())
}

fn vectors() -> Result<()> {
    let py = reference::python()?;
    let tmp = tempdir("vectors")?;
    let corpus = tmp.join("corpus");
    let art = tmp.join("artifacts");
    write_corpus(&corpus, &xet_testdata::corpus())?;
    write_corpus(&art, &xet_testdata::artifact_corpus())?;
    let out = workspace_root().join("tests/vectors");
    let script = workspace_root().join("xtask/ref/vectors.py");
    let status = std::process::Command::new(&py)
        .arg(&script)
        .args([&corpus, &art, &tmp.join("work"), &out])
        .status()
        .context("running the reference vector script")?;
    if !status.success() {
        bail!("{} failed: {status}", script.display());
    }
    std::fs::remove_dir_all(&tmp).ok();
    Ok(())
}

/// A fresh directory under `target/xtask-tmp`.
pub fn tempdir(name: &str) -> Result<PathBuf> {
    let dir = workspace_root()
        .join("target/xtask-tmp")
        .join(format!("{name}-{}", std::process::id()));
    if dir.exists() {
        std::fs::remove_dir_all(&dir)?;
    }
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
