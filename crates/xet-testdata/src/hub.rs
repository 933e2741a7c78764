//! The Python side of the Hub tests: `huggingface_hub` with `hf_xet`, pinned, in the
//! same virtualenv as the reference client.

use std::path::PathBuf;
use std::sync::OnceLock;

/// The `huggingface_hub` version the Hub interop tests use (its `hf` CLI included).
pub const HUGGINGFACE_HUB_VERSION: &str = "2.4.0";

/// The test virtualenv's interpreter with both pins, and its scripts directory.
fn hub() -> Result<crate::venv::Python, String> {
    static PYTHON: OnceLock<Result<crate::venv::Python, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            crate::venv::python_with(&crate::venv::Pins {
                packages: &[
                    ("huggingface-hub", HUGGINGFACE_HUB_VERSION),
                    ("hf-xet", crate::HF_XET_VERSION),
                ],
                imports: &[],
            })
        })
        .clone()
}

/// A Python interpreter with `huggingface_hub` and `hf_xet` at the pinned versions, from
/// the test virtualenv as for [`crate::reference_python`]. Its scripts hold the `hf` CLI.
pub fn hub_python() -> Result<PathBuf, String> {
    hub().map(|found| found.python)
}

/// The `hf` CLI of [`hub_python`].
pub fn hf_cli() -> Result<PathBuf, String> {
    hub()?.script("hf")
}

/// The pandas and pyarrow versions of the dataframe test (`hf://buckets/...` parquet).
pub const PANDAS_VERSION: &str = "3.1.1";
pub const PYARROW_VERSION: &str = "26.0.1";

/// [`hub_python`] with pandas and pyarrow too, for reading and writing parquet through
/// `huggingface_hub`'s fsspec filesystem.
pub fn pandas_python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<crate::venv::Python, String>> = OnceLock::new();
    hub_python_with(
        &PYTHON,
        &[("pandas", PANDAS_VERSION), ("pyarrow", PYARROW_VERSION)],
        &["pandas", "pyarrow.parquet"],
    )
}

/// [`hub_python`] with `extra` packages too (found or installed once per process,
/// remembered in `cell`), each of `imports` importable.
fn hub_python_with(
    cell: &'static OnceLock<Result<crate::venv::Python, String>>,
    extra: &[(&str, &str)],
    imports: &[&str],
) -> Result<PathBuf, String> {
    cell.get_or_init(|| {
        let mut packages = vec![
            ("huggingface-hub", HUGGINGFACE_HUB_VERSION),
            ("hf-xet", crate::HF_XET_VERSION),
        ];
        packages.extend_from_slice(extra);
        crate::venv::python_with(&crate::venv::Pins {
            packages: &packages,
            imports,
        })
    })
    .clone()
    .map(|found| found.python)
}

/// The safetensors and numpy versions of the mount test (a tensor read from a mounted
/// model file).
pub const SAFETENSORS_VERSION: &str = "0.8.0";
pub const NUMPY_VERSION: &str = "2.4.6";

/// [`hub_python`] with safetensors and numpy too.
pub fn safetensors_python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<crate::venv::Python, String>> = OnceLock::new();
    hub_python_with(
        &PYTHON,
        &[
            ("safetensors", SAFETENSORS_VERSION),
            ("numpy", NUMPY_VERSION),
        ],
        &["safetensors.numpy", "numpy"],
    )
}

/// Whether FUSE mounts can be made here: `/dev/fuse`, and either root (the mount system
/// call) or `fusermount3`, which is installed (Debian's `fuse3`) when missing, best
/// effort. `Err` says what is missing.
pub fn fuse_usable() -> Result<(), String> {
    static USABLE: OnceLock<Result<(), String>> = OnceLock::new();
    USABLE
        .get_or_init(|| {
            if !std::path::Path::new("/dev/fuse").exists() {
                return Err(
                    "/dev/fuse does not exist (no FUSE in this kernel or container)".into(),
                );
            }
            let has = |bin: &str| {
                std::process::Command::new(bin)
                    .arg("--version")
                    .output()
                    .is_ok()
            };
            let root = std::process::Command::new("id")
                .arg("-u")
                .output()
                .is_ok_and(|o| String::from_utf8_lossy(&o.stdout).trim() == "0");
            if root || has("fusermount3") {
                return Ok(());
            }
            let _ = std::process::Command::new("apt-get")
                .args(["install", "-y", "-q", "fuse3"])
                .output();
            if has("fusermount3") {
                Ok(())
            } else {
                Err("not root and no fusermount3 (apt-get install fuse3)".into())
            }
        })
        .clone()
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
