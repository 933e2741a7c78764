//! The one atomic replace: a file is written under a temporary name beside its
//! destination, fsynced, renamed over the destination and the directory fsynced, so a
//! reader sees the old file or the whole new one, and after a crash the destination
//! holds one of them (never a torn mix; at worst a stray temporary file is left).
//!
//! Files that must never replace another (the store's objects, placed with a
//! no-clobber link) or that are written in place (a download's `.part`, renamed with
//! [`rename_durably`] once verified) use the pieces: [`sync_dir`] and
//! [`rename_durably`].

use std::fs::File;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// Replace `path` with a file holding `bytes` (see the module docs).
pub fn write_replace(path: &Path, bytes: &[u8]) -> io::Result<()> {
    replace_with(path, |f| f.write_all(bytes))
}

/// Replace `path` with a file that `fill` writes (see the module docs). The temporary
/// file, `.<name>.<pid>.<n>.tmp` beside `path`, is removed if anything fails.
pub fn replace_with(path: &Path, fill: impl FnOnce(&mut File) -> io::Result<()>) -> io::Result<()> {
    let (tmp, mut file) = create_beside(path)?;
    let res = fill(&mut file)
        .and_then(|()| file.sync_all())
        .and_then(|()| {
            drop(file);
            rename_durably(&tmp, path)
        });
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// Rename `tmp` (written and fsynced by the caller) over `dst`, then make the rename
/// durable by syncing `dst`'s directory. A failed directory sync is not reported:
/// some filesystems cannot sync a directory, and the rename itself has happened.
pub fn rename_durably(tmp: &Path, dst: &Path) -> io::Result<()> {
    std::fs::rename(tmp, dst)?;
    let _ = sync_dir(parent_of(dst));
    Ok(())
}

/// Make the creations, renames and removals in `dir` durable (fsync the directory).
/// Where directories cannot be opened as files (not Unix) this does nothing.
pub fn sync_dir(dir: &Path) -> io::Result<()> {
    let dir = if dir.as_os_str().is_empty() {
        Path::new(".")
    } else {
        dir
    };
    if cfg!(unix) {
        File::open(dir)?.sync_all()
    } else {
        Ok(())
    }
}

/// The directory holding `path` (`.` for a bare name).
fn parent_of(path: &Path) -> &Path {
    match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p,
        _ => Path::new("."),
    }
}

/// A new file beside `path` that no other writer uses: `.<name>.<pid>.<n>.tmp`.
fn create_beside(path: &Path) -> io::Result<(PathBuf, File)> {
    static N: AtomicU64 = AtomicU64::new(0);
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy())
        .unwrap_or_default();
    loop {
        let n = N.fetch_add(1, Ordering::Relaxed);
        let tmp = path.with_file_name(format!(".{name}.{}.{n}.tmp", std::process::id()));
        match std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&tmp)
        {
            Ok(f) => return Ok((tmp, f)),
            // Left by a process that had this pid before.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(e),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(dir: &Path) -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_replace_leaves_the_new_bytes_and_nothing_else() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_replace(&p, b"first").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"first");
        write_replace(&p, b"second, longer").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"second, longer");
        assert_eq!(names(dir.path()), ["f.json"]);
    }

    #[test]
    fn a_failed_write_keeps_the_old_file_and_removes_the_temporary_one() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f.json");
        write_replace(&p, b"old").unwrap();
        let e = replace_with(&p, |f| {
            f.write_all(b"half")?;
            Err(io::Error::other("the writer failed"))
        })
        .unwrap_err();
        assert_eq!(e.to_string(), "the writer failed");
        assert_eq!(std::fs::read(&p).unwrap(), b"old");
        assert_eq!(names(dir.path()), ["f.json"]);
    }

    #[test]
    fn a_replace_into_a_missing_directory_fails_and_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("missing").join("f");
        assert!(write_replace(&p, b"x").is_err());
        assert!(names(dir.path()).is_empty());
    }

    #[test]
    fn a_stale_temporary_name_is_skipped() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        // The next names this process would take, left behind by a dead namesake: take
        // a name to learn the counter, then plant the following ones.
        let n = {
            let (tmp, _f) = create_beside(&p).unwrap();
            std::fs::remove_file(&tmp).unwrap();
            tmp.to_string_lossy()
                .rsplit('.')
                .nth(1)
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        for k in 1..=3 {
            let planted = dir
                .path()
                .join(format!(".f.{}.{}.tmp", std::process::id(), n + k));
            std::fs::write(planted, b"stale").unwrap();
        }
        write_replace(&p, b"new").unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), b"new");
        assert_eq!(
            names(dir.path()).len(),
            4,
            "the stale files are not touched"
        );
    }

    #[test]
    fn sync_dir_syncs_a_directory_and_the_current_one() {
        let dir = tempfile::tempdir().unwrap();
        sync_dir(dir.path()).unwrap();
        sync_dir(Path::new("")).unwrap();
        assert!(sync_dir(&dir.path().join("missing")).is_err() || cfg!(not(unix)));
    }
}
