//! The Python side of the Hub tests: `huggingface_hub` with `hf_xet`, pinned, in the
//! same virtualenv as the reference client.

use std::path::PathBuf;

/// The `huggingface_hub` version the Hub interop tests use (its `hf` CLI included).
pub const HUGGINGFACE_HUB_VERSION: &str = "2.4.0";

fn has_hub(python: &std::path::Path) -> bool {
    std::process::Command::new(python)
        .args([
            "-c",
            &format!(
                "import importlib.metadata as m, sys; \
                 sys.exit(m.version('huggingface-hub') != '{HUGGINGFACE_HUB_VERSION}' \
                 or m.version('hf-xet') != '{}')",
                crate::HF_XET_VERSION
            ),
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

/// A Python interpreter with `huggingface_hub` and `hf_xet` at the pinned versions (the
/// reference virtualenv, installed into on first use). Its `bin/` holds the `hf` CLI.
pub fn hub_python() -> Result<PathBuf, String> {
    let python = crate::reference_python()?;
    if has_hub(&python) {
        return Ok(python);
    }
    let out = std::process::Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
            &format!("huggingface_hub=={HUGGINGFACE_HUB_VERSION}"),
            &format!("hf-xet=={}", crate::HF_XET_VERSION),
        ])
        .output()
        .map_err(|e| format!("running pip: {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "pip install huggingface_hub=={HUGGINGFACE_HUB_VERSION} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    if has_hub(&python) {
        Ok(python)
    } else {
        Err(format!(
            "{} still lacks huggingface_hub {HUGGINGFACE_HUB_VERSION} after pip install",
            python.display()
        ))
    }
}

/// The `hf` CLI next to [`hub_python`].
pub fn hf_cli() -> Result<PathBuf, String> {
    let python = hub_python()?;
    let hf = python.with_file_name("hf");
    if hf.exists() {
        Ok(hf)
    } else {
        Err(format!("{} has no `hf` beside it", python.display()))
    }
}

/// The `@huggingface/hub` version the JavaScript interop test uses (from npm).
pub const HUGGINGFACE_JS_VERSION: &str = "2.15.0";

/// A directory whose `node_modules` holds `@huggingface/hub` at the pinned version
/// (`target/hubjs`, installed with `npm` on first use). Run scripts from there with
/// `node`.
pub fn hub_js() -> Result<PathBuf, String> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/hubjs");
    let manifest = dir.join("node_modules/@huggingface/hub/package.json");
    let installed = std::fs::read_to_string(&manifest)
        .ok()
        .and_then(|t| serde_json::from_str::<serde_json::Value>(&t).ok())
        .is_some_and(|v| v["version"] == HUGGINGFACE_JS_VERSION);
    if installed {
        return Ok(dir);
    }
    std::fs::create_dir_all(&dir).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    let out = std::process::Command::new("npm")
        .args(["install", "--silent", "--no-audit", "--no-fund", "--prefix"])
        .arg(&dir)
        .arg(format!("@huggingface/hub@{HUGGINGFACE_JS_VERSION}"))
        .output()
        .map_err(|e| format!("running npm (Node.js is needed for this test): {e}"))?;
    if !out.status.success() {
        return Err(format!(
            "npm install @huggingface/hub@{HUGGINGFACE_JS_VERSION} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(dir)
}
