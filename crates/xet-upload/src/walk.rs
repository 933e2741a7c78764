//! Expanding directories into file lists.

use std::io;
use std::path::{Path, PathBuf};

use crate::error::{Result, UploadError};

/// Expand `roots` into the files to upload: a file is taken as is; a directory is
/// walked recursively, entries of each directory in byte order of their names, so the
/// order is stable. Symbolic links are followed (a link to a file uploads the target's
/// content under the link's path). Nothing is skipped silently: an unreadable entry, a
/// special file (socket, FIFO, device) or a directory symlink loop is an
/// [`UploadError::Input`] naming the path.
pub fn collect_files(roots: &[PathBuf]) -> Result<Vec<PathBuf>> {
    let mut out = Vec::new();
    for root in roots {
        let mut ancestors = Vec::new();
        visit(root, &mut ancestors, &mut out)?;
    }
    Ok(out)
}

fn visit(path: &Path, ancestors: &mut Vec<PathBuf>, out: &mut Vec<PathBuf>) -> Result<()> {
    let meta = std::fs::metadata(path).map_err(|e| UploadError::input(path, explain(path, e)))?;
    if meta.is_file() {
        out.push(path.to_path_buf());
        return Ok(());
    }
    if !meta.is_dir() {
        return Err(UploadError::input(
            path,
            io::Error::new(
                io::ErrorKind::InvalidInput,
                "not a regular file or directory",
            ),
        ));
    }
    let canonical = std::fs::canonicalize(path).map_err(|e| UploadError::input(path, e))?;
    if ancestors.contains(&canonical) {
        return Err(UploadError::input(
            path,
            io::Error::new(io::ErrorKind::InvalidInput, "directory symlink loop"),
        ));
    }
    let mut entries: Vec<PathBuf> = std::fs::read_dir(path)
        .map_err(|e| UploadError::input(path, e))?
        .map(|e| {
            e.map(|e| e.path())
                .map_err(|err| UploadError::input(path, err))
        })
        .collect::<Result<_>>()?;
    entries.sort_by(|a, b| a.file_name().cmp(&b.file_name()));
    ancestors.push(canonical);
    for e in &entries {
        visit(e, ancestors, out)?;
    }
    ancestors.pop();
    Ok(())
}

/// `e` from following `path`, said plainly when `path` is a symbolic link whose target
/// does not exist (the bare "No such file or directory" reads as if the link were missing).
fn explain(path: &Path, e: io::Error) -> io::Error {
    if e.kind() != io::ErrorKind::NotFound {
        return e;
    }
    match std::fs::read_link(path) {
        Ok(target) => io::Error::new(
            io::ErrorKind::NotFound,
            format!(
                "symbolic link to {}, which does not exist (remove the link or point it at a file)",
                target.display()
            ),
        ),
        Err(_) => e,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_in_stable_order() {
        let d = tempfile::tempdir().unwrap();
        let root = d.path();
        std::fs::create_dir_all(root.join("b/inner")).unwrap();
        std::fs::create_dir_all(root.join("a")).unwrap();
        for p in ["z.txt", "b/inner/x", "b/y", "a/1", "a/0"] {
            std::fs::write(root.join(p), p).unwrap();
        }
        let got = collect_files(&[root.to_path_buf()]).unwrap();
        let rel: Vec<String> = got
            .iter()
            .map(|p| p.strip_prefix(root).unwrap().to_string_lossy().into_owned())
            .collect();
        assert_eq!(rel, ["a/0", "a/1", "b/inner/x", "b/y", "z.txt"]);
    }

    #[test]
    fn missing_path_is_named() {
        let d = tempfile::tempdir().unwrap();
        let p = d.path().join("nope");
        match collect_files(std::slice::from_ref(&p)) {
            Err(UploadError::Input { path, .. }) => assert_eq!(path, p),
            other => panic!("{other:?}"),
        }
    }

    #[cfg(unix)]
    #[test]
    fn symlink_loop_is_an_error() {
        let d = tempfile::tempdir().unwrap();
        std::fs::create_dir(d.path().join("sub")).unwrap();
        std::os::unix::fs::symlink(d.path(), d.path().join("sub/up")).unwrap();
        let err = collect_files(&[d.path().to_path_buf()]).unwrap_err();
        assert!(err.to_string().contains("loop"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_broken_symlink_is_named_as_one() {
        let d = tempfile::tempdir().unwrap();
        std::fs::write(d.path().join("a"), "a").unwrap();
        std::os::unix::fs::symlink(d.path().join("gone"), d.path().join("b")).unwrap();
        let err = collect_files(&[d.path().to_path_buf()]).unwrap_err();
        match &err {
            UploadError::Input { path, cause } => {
                assert_eq!(path, &d.path().join("b"));
                assert_eq!(cause.kind(), io::ErrorKind::NotFound);
            }
            other => panic!("{other:?}"),
        }
        let msg = err.to_string();
        assert!(
            msg.contains("symbolic link to") && msg.contains("gone"),
            "{msg}"
        );
    }
}
