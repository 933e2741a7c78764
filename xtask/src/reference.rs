//! The reference client (`hf_xet` from PyPI) in a private virtualenv. It is a test and
//! benchmark peer only: `xet` itself never calls or links it.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;

/// The pinned reference version the vectors and the spec notes were made with.
pub const HF_XET_VERSION: &str = "1.8.0";

/// Path to the venv's python with `hf_xet` importable, creating the venv if needed.
pub fn python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XET_REF_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = crate::workspace_root().join("target/refvenv");
    let py = venv.join("bin/python");
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", &format!("import importlib.metadata as m, sys; sys.exit(m.version('hf-xet') != '{HF_XET_VERSION}')")])
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if ok {
        return Ok(py);
    }
    eprintln!("creating {} with hf-xet=={HF_XET_VERSION}", venv.display());
    let st = Command::new("python3")
        .args(["-m", "venv"])
        .arg(&venv)
        .status()
        .context("python3 -m venv")?;
    if !st.success() {
        bail!("python3 -m venv {} failed", venv.display());
    }
    let st = Command::new(venv.join("bin/pip"))
        .args(["install", "-q", &format!("hf-xet=={HF_XET_VERSION}")])
        .status()
        .context("pip install hf-xet")?;
    if !st.success() {
        bail!("pip install hf-xet=={HF_XET_VERSION} failed");
    }
    Ok(py)
}
