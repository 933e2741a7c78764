//! The real Software Heritage shard package (PyPI `swh-shard`, C core with cmph linked in),
//! the interop peer of `xet-swh`'s tests, installed into the reference virtualenv
//! (`target/refvenv`, see [`crate::reference_python`]).

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::OnceLock;

/// The swh-shard version the interop tests run against.
pub const SWH_SHARD_VERSION: &str = "2.2.1";

/// What `pip install` is given for it.
pub fn swh_shard_requirement() -> String {
    format!("swh-shard=={SWH_SHARD_VERSION}")
}

fn has_swh_shard(python: &Path) -> bool {
    Command::new(python)
        .args([
            "-c",
            &format!(
                "import sys, importlib.metadata as m; \
                 import swh.shard, swh.shard.cli; \
                 sys.exit(m.version('swh-shard') != '{SWH_SHARD_VERSION}')"
            ),
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// Whether `python` is `venv`'s own interpreter (its directory resolved, not the file: a
/// venv's python is a link to the system one).
fn is_venv_python(python: &Path, venv: &Path) -> bool {
    let dir = |p: &Path| p.parent().and_then(|d| d.canonicalize().ok());
    let ours = venv.join("bin/python");
    python.file_name() == ours.file_name() && dir(python).is_some() && dir(python) == dir(&ours)
}

/// A Python interpreter with `swh-shard` [`SWH_SHARD_VERSION`]: `$XET_REF_PYTHON` if it has
/// it, else `target/refvenv/bin/python`, created with `python3 -m venv` and given the
/// package with pip if missing (also when `$XET_REF_PYTHON` names that same interpreter,
/// as `cargo xtask test` sets it; any other `$XET_REF_PYTHON` without the package is an
/// error). The package's CLI is `python -m swh.shard.cli`. Found (or installed) once per
/// process, so parallel tests do not run pip together.
pub fn swh_python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON.get_or_init(find_or_install).clone()
}

fn find_or_install() -> Result<PathBuf, String> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/refvenv");
    let python = venv.join("bin/python");
    if let Some(p) = std::env::var_os("XET_REF_PYTHON") {
        let p = PathBuf::from(p);
        if has_swh_shard(&p) {
            return Ok(p);
        }
        if !is_venv_python(&p, &venv) {
            return Err(format!(
                "{} (XET_REF_PYTHON) has no {}",
                p.display(),
                swh_shard_requirement()
            ));
        }
    }
    if has_swh_shard(&python) {
        return Ok(python);
    }
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &swh_shard_requirement(),
    ]))?;
    if has_swh_shard(&python) {
        Ok(python)
    } else {
        Err(format!(
            "{} still lacks {} after pip install",
            python.display(),
            swh_shard_requirement()
        ))
    }
}
