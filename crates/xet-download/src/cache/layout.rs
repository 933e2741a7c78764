//! The cache directory's layout: where entries and linked files live, and the scans
//! and clean-up every reader of the directory shares (formats in the [`super`] module
//! docs).

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use xet_hash::MerkleHash;

/// The cache's own subdirectory of the configured cache dir; nothing outside it is
/// ever touched.
pub(super) const SUBDIR: &str = "chunks";
/// Linked files, under `chunks/` (not a hash, so never taken for a xorb directory).
pub(super) const FILES: &str = "files";

/// Remove a `.tmp` file left by a crashed writer once it is an hour old.
pub(super) fn remove_stale_tmp(f: &fs::DirEntry) {
    if let Ok(m) = f.metadata()
        && m.modified()
            .ok()
            .and_then(|t| t.elapsed().ok())
            .is_some_and(|a| a > Duration::from_secs(3600))
    {
        let _ = fs::remove_file(f.path());
    }
}

/// The xorb directories under `root` (`chunks/`), by xorb hash. A missing `root` has
/// none.
pub(super) fn scan_xorb_dirs(root: &Path) -> io::Result<Vec<(MerkleHash, PathBuf)>> {
    let mut out = Vec::new();
    let rd = match fs::read_dir(root) {
        Ok(rd) => rd,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(out),
        Err(e) => return Err(e),
    };
    for d in rd.flatten() {
        if let Some(x) = d
            .file_name()
            .to_str()
            .and_then(|s| MerkleHash::from_hex(s).ok())
        {
            out.push((x, d.path()));
        }
    }
    Ok(out)
}
