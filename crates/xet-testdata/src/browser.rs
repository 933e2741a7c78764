//! A real headless browser for the web page tests: Debian's `chromium-headless-shell`
//! (the `chromium-headless-shell` package, Chromium's headless shell without the UI
//! toolkits), installed with `apt-get` when it is missing and this process may.
//!
//! [`headless_shell`] finds or installs it; [`require_browser`] applies the rule of the
//! reference tools: without one a test prints SKIP and passes, unless
//! `XET_REQUIRE_REFERENCE=1` (as `cargo xtask test` sets), which makes it fail.

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::OnceLock;

/// The Debian package.
pub const PACKAGE: &str = "chromium-headless-shell";
/// Where the package puts its binary (`/usr/bin/chromium-headless-shell` links to it).
const PATHS: [&str; 2] = [
    "/usr/bin/chromium-headless-shell",
    "/usr/lib/chromium/chromium-headless-shell",
];

fn find() -> Option<PathBuf> {
    if let Some(p) = std::env::var_os("XET_HEADLESS_SHELL").map(PathBuf::from) {
        return p.is_file().then_some(p);
    }
    PATHS
        .iter()
        .map(Path::new)
        .find(|p| p.is_file())
        .map(Path::to_path_buf)
}

fn install() -> Result<(), String> {
    let apt = |args: &[&str]| {
        Command::new("apt-get")
            .args(args)
            .env("DEBIAN_FRONTEND", "noninteractive")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .output()
            .map_err(|e| format!("apt-get: {e}"))
    };
    let out = apt(&["install", "-y", "--no-install-recommends", PACKAGE])?;
    if out.status.success() {
        return Ok(());
    }
    // The package lists may be missing or stale: once more after an update.
    let _ = apt(&["update"]);
    let out = apt(&["install", "-y", "--no-install-recommends", PACKAGE])?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "apt-get install {PACKAGE} failed: {}",
            String::from_utf8_lossy(&out.stderr).trim()
        ))
    }
}

/// The headless shell's binary, installed first if it is missing (once per process).
pub fn headless_shell() -> Result<PathBuf, String> {
    static FOUND: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    FOUND
        .get_or_init(|| {
            if let Some(p) = find() {
                return Ok(p);
            }
            install()?;
            find().ok_or_else(|| format!("{PACKAGE} installed, but no binary at {PATHS:?}"))
        })
        .clone()
}

/// [`headless_shell`], or `None` after printing SKIP; panics instead when
/// `XET_REQUIRE_REFERENCE=1`.
pub fn require_browser() -> Option<PathBuf> {
    match headless_shell() {
        Ok(p) => Some(p),
        Err(e) if std::env::var("XET_REQUIRE_REFERENCE").is_ok_and(|v| v == "1") => {
            panic!("headless browser ({PACKAGE}) unavailable: {e}")
        }
        Err(e) => {
            eprintln!("SKIP: headless browser ({PACKAGE}) unavailable: {e}");
            None
        }
    }
}
