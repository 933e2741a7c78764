//! What the cache directory holds ([`cache_stats`]), and deleting it ([`cache_clear`]).
//! Both read the directory itself, not an index, so they work while no download runs.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::{Path, PathBuf};

use serde::Serialize;
use xet_hash::MerkleHash;

use super::entry::{chunk_count, parse_entry_name};
use super::layout::{FILES, SUBDIR, scan_xorb_dirs};

/// What `xet cache stats` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct CacheStats {
    /// The cache root that was looked at.
    pub dir: PathBuf,
    /// Cache entries (chunk ranges).
    pub entries: u64,
    /// Distinct xorbs with at least one entry.
    pub xorbs: u64,
    /// Decompressed chunks held.
    pub chunks: u64,
    /// Downloaded files whose data the cache shares by hard link.
    pub linked_files: u64,
    /// Their bytes (counted in `bytes` too, although the disk holds them once while
    /// the downloaded file exists).
    pub linked_bytes: u64,
    /// Bytes held: entry files plus linked files.
    pub bytes: u64,
}

/// The chunk count in an entry's (or reference's) header; 0 if it is unreadable.
fn entry_chunks(path: &Path) -> u64 {
    let mut head = [0u8; 12];
    match File::open(path).and_then(|mut f| f.read_exact(&mut head)) {
        Ok(()) => chunk_count(&head).map_or(0, u64::from),
        Err(_) => 0,
    }
}

/// Statistics of the chunk cache under `dir` (the same directory given as
/// [`crate::CacheConfig::dir`]). A missing cache has zero of everything.
pub fn cache_stats(dir: &Path) -> io::Result<CacheStats> {
    let mut s = CacheStats {
        dir: dir.to_path_buf(),
        ..Default::default()
    };
    for (_, path) in scan_xorb_dirs(&dir.join(SUBDIR))? {
        let mut any = false;
        for f in fs::read_dir(&path)?.flatten() {
            let name = f.file_name();
            if parse_entry_name(&name.to_string_lossy()).is_none() {
                continue;
            }
            any = true;
            s.entries += 1;
            s.bytes += f.metadata().map(|m| m.len()).unwrap_or(0);
            s.chunks += entry_chunks(&f.path());
        }
        s.xorbs += u64::from(any);
    }
    if let Ok(rd) = fs::read_dir(dir.join(SUBDIR).join(FILES)) {
        for f in rd.flatten() {
            if MerkleHash::from_hex(&f.file_name().to_string_lossy()).is_ok() {
                let len = f.metadata().map(|m| m.len()).unwrap_or(0);
                s.linked_files += 1;
                s.linked_bytes += len;
                s.bytes += len;
            }
        }
    }
    Ok(s)
}

/// Delete the chunk cache under `dir` (only its `chunks/` subdirectory; nothing else
/// in `dir` is touched). Returns what was removed.
pub fn cache_clear(dir: &Path) -> io::Result<CacheStats> {
    let stats = cache_stats(dir)?;
    match fs::remove_dir_all(dir.join(SUBDIR)) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_missing_cache_has_zero_of_everything_and_clears_as_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let none = CacheStats {
            dir: dir.path().to_path_buf(),
            ..Default::default()
        };
        assert_eq!(cache_stats(dir.path()).unwrap(), none);
        assert_eq!(cache_clear(dir.path()).unwrap(), none);
        assert!(dir.path().exists(), "only chunks/ is ever removed");
    }

    #[test]
    fn unreadable_entries_count_no_chunks() {
        let dir = tempfile::tempdir().unwrap();
        let xorb_dir = dir
            .path()
            .join(SUBDIR)
            .join(xet_hash::chunk_hash(b"x").to_string());
        fs::create_dir_all(&xorb_dir).unwrap();
        fs::write(xorb_dir.join("0-1"), b"short").unwrap();
        fs::write(xorb_dir.join("not-an-entry"), b"XETCC001\x01\0\0\0").unwrap();
        let s = cache_stats(dir.path()).unwrap();
        assert_eq!((s.entries, s.xorbs, s.chunks, s.bytes), (1, 1, 0, 5));
    }
}
