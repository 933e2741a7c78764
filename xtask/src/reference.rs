//! The reference client (`hf_xet` from PyPI) in a private virtualenv. It is a test and
//! benchmark peer only: `xet` itself never calls or links it. The same virtualenv holds
//! `moto[server]`, the S3-compatible server the S3 backend tests run against.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;

/// The pinned reference version the vectors and the spec notes were made with.
pub const HF_XET_VERSION: &str = "1.8.0";

/// Path to the venv's python with `hf_xet` and moto importable, creating the venv or
/// installing what is missing if needed.
pub fn python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XET_REF_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = crate::workspace_root().join("target/refvenv");
    let py = venv.join("bin/python");
    let moto = xet_testdata::MOTO_VERSION;
    let ok = py.exists()
        && Command::new(&py)
            .args(["-c", &format!("import importlib.metadata as m, sys; import moto.moto_server.threaded_moto_server; sys.exit(m.version('hf-xet') != '{HF_XET_VERSION}' or m.version('moto') != '{moto}')")])
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if ok {
        return Ok(py);
    }
    let moto_req = xet_testdata::moto_requirement();
    eprintln!(
        "setting up {} with hf-xet=={HF_XET_VERSION} and {moto_req}",
        venv.display()
    );
    if !py.exists() {
        let st = Command::new("python3")
            .args(["-m", "venv"])
            .arg(&venv)
            .status()
            .context("python3 -m venv")?;
        if !st.success() {
            bail!("python3 -m venv {} failed", venv.display());
        }
    }
    let st = Command::new(venv.join("bin/pip"))
        .args([
            "install",
            "-q",
            &format!("hf-xet=={HF_XET_VERSION}"),
            &moto_req,
        ])
        .status()
        .context("pip install hf-xet moto")?;
    if !st.success() {
        bail!("pip install hf-xet=={HF_XET_VERSION} {moto_req} failed");
    }
    Ok(py)
}
