//! The Hugging Face cache, laid out as `huggingface_hub` lays it out
//! (`file_download.py`, `_snapshot_download.py`, `_tree_cache.py`), so that
//! `hf_hub_download`, `snapshot_download` and `from_pretrained` find what `xet`
//! downloaded, offline:
//!
//! ```text
//! <hub cache>/CACHEDIR.TAG
//! <hub cache>/models--NS--NAME/            (datasets--, spaces--)
//!     blobs/<etag>                         sha256 for LFS/Xet files, git blob id otherwise
//!     snapshots/<commit>/<path>            relative symbolic link to ../../(..)/blobs/<etag>
//!     refs/<revision>                      the commit id (no newline), for branch/tag names
//!     trees/<commit>.json                  the commit's whole file listing (format 1)
//! ```
//!
//! Blobs appear under their final name only once verified (they are written elsewhere
//! and renamed), refs are replaced atomically, so a reader never sees half of either.

use std::path::{Path, PathBuf};

use xet_hub::{CommitId, RepoPath, RepoRef};

use crate::tree::{Content, RemoteFile};

/// What `huggingface_hub` writes into `CACHEDIR.TAG`.
const CACHEDIR_TAG: &str = "Signature: 8a477f597d28d172789f06886806bc55\n\
    # This file is a cache directory tag created by huggingface_hub.\n\
    # For information about cache directory tags, see:\n\
    #\thttps://bford.info/cachedir/\n";

/// The folder of one repository in the hub cache.
#[derive(Debug, Clone)]
pub struct RepoCache {
    root: PathBuf,
    dir: PathBuf,
}

/// `models--NS--NAME`, `datasets--NS--NAME`, `spaces--NS--NAME`.
pub fn repo_folder_name(repo: &RepoRef) -> String {
    format!(
        "{}--{}--{}",
        repo.kind.plural(),
        repo.id.namespace(),
        repo.id.name()
    )
}

fn io_err(what: &str, path: &Path, e: std::io::Error) -> std::io::Error {
    std::io::Error::new(e.kind(), format!("{what} {}: {e}", path.display()))
}

impl RepoCache {
    pub fn new(hub_cache: &Path, repo: &RepoRef) -> RepoCache {
        RepoCache {
            root: hub_cache.to_path_buf(),
            dir: hub_cache.join(repo_folder_name(repo)),
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `blobs/<etag>`. Etags are hex (checked when the listing is read), so they
    /// cannot name anything outside `blobs/`.
    pub fn blob_path(&self, etag: &str) -> PathBuf {
        self.dir.join("blobs").join(etag)
    }

    /// `snapshots/<commit>/<path>`.
    pub fn pointer_path(&self, commit: &CommitId, path: &RepoPath) -> PathBuf {
        let mut p = self.dir.join("snapshots").join(commit.to_string());
        p.extend(path.as_str().split('/'));
        p
    }

    /// The snapshot's folder.
    pub fn snapshot_dir(&self, commit: &CommitId) -> PathBuf {
        self.dir.join("snapshots").join(commit.to_string())
    }

    /// Whether `path` of `commit` is in the cache: its link leads to a blob of the
    /// expected size (a cut-short blob does not count).
    pub fn is_cached(&self, commit: &CommitId, file: &RemoteFile) -> bool {
        std::fs::metadata(self.pointer_path(commit, &file.path))
            .is_ok_and(|m| m.is_file() && m.len() == file.size)
    }

    /// Whether the blob is there with the expected size.
    pub fn has_blob(&self, file: &RemoteFile) -> bool {
        std::fs::metadata(self.blob_path(file.etag()))
            .is_ok_and(|m| m.is_file() && m.len() == file.size)
    }

    /// Create the folders and the cache's `CACHEDIR.TAG` (once).
    pub fn prepare(&self) -> std::io::Result<()> {
        for d in ["blobs", "snapshots", "refs"] {
            let p = self.dir.join(d);
            std::fs::create_dir_all(&p).map_err(|e| io_err("cannot create", &p, e))?;
        }
        let tag = self.root.join("CACHEDIR.TAG");
        if !tag.exists() {
            // As huggingface_hub: a tag that cannot be written is no reason to fail.
            let _ = std::fs::write(&tag, CACHEDIR_TAG);
        }
        Ok(())
    }

    /// Point `snapshots/<commit>/<path>` at `blobs/<etag>` with a relative link
    /// (the cache stays valid when moved), replacing whatever link was there.
    pub fn link(&self, commit: &CommitId, file: &RemoteFile) -> std::io::Result<()> {
        let pointer = self.pointer_path(commit, &file.path);
        let parent = pointer.parent().expect("a pointer is below snapshots/");
        std::fs::create_dir_all(parent).map_err(|e| io_err("cannot create", parent, e))?;
        // snapshots/<commit>/a/b/file → ../../../../blobs/<etag>: one `..` per folder
        // between the link and the repository folder.
        let depth = 2 + file.path.as_str().matches('/').count();
        let mut target = PathBuf::new();
        for _ in 0..depth {
            target.push("..");
        }
        target.push("blobs");
        target.push(file.etag());
        match std::fs::symlink_metadata(&pointer) {
            Ok(m) if m.is_dir() => {
                return Err(io_err(
                    "cannot link",
                    &pointer,
                    std::io::Error::other("a folder is in the way"),
                ));
            }
            Ok(_) => {
                std::fs::remove_file(&pointer).map_err(|e| io_err("cannot replace", &pointer, e))?
            }
            Err(_) => {}
        }
        symlink(&target, &pointer).map_err(|e| io_err("cannot link", &pointer, e))
    }

    /// `refs/<revision>` ← `commit`, unless the revision is the commit itself.
    pub fn write_ref(&self, revision: &str, commit: &CommitId) -> std::io::Result<()> {
        if revision == commit.to_string() {
            return Ok(());
        }
        let mut path = self.dir.join("refs");
        path.extend(revision.split('/'));
        if std::fs::read_to_string(&path).is_ok_and(|c| c == commit.to_string()) {
            return Ok(());
        }
        write_atomic(&path, commit.to_string().as_bytes())
    }

    /// `trees/<commit>.json`: the listing `snapshot_download` checks a cached snapshot
    /// against when offline. Only the commit's whole listing may be written here: a
    /// partial one would make an incomplete snapshot look complete.
    pub fn write_tree(&self, commit: &CommitId, files: &[RemoteFile]) -> std::io::Result<()> {
        let mut map = serde_json::Map::new();
        for f in files {
            let mut info = serde_json::json!({ "size": f.size, "blob_id": f.git_oid });
            if let Some(sha) = f.sha256() {
                info["lfs_sha256"] = sha.into();
                info["lfs_size"] = f.size.into();
            }
            if let Content::Xet { hash, .. } = &f.content {
                info["xet_hash"] = hash.to_string().into();
            }
            map.insert(f.path.to_string(), info);
        }
        let doc = serde_json::json!({ "format_version": 1, "files": map });
        let path = self.dir.join("trees").join(format!("{commit}.json"));
        let text = serde_json::to_vec_pretty(&doc).map_err(std::io::Error::other)?;
        write_atomic(&path, &text)
    }
}

/// Replace `path` with `bytes` by the one atomic replace (`xet_mmap::durable`: temporary
/// file, fsync, rename, folder fsync), creating its folder first.
fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    let parent = path.parent().expect("a file has a folder");
    std::fs::create_dir_all(parent).map_err(|e| io_err("cannot create", parent, e))?;
    xet_mmap::durable::write_replace(path, bytes).map_err(|e| io_err("cannot write", path, e))
}

#[cfg(unix)]
fn symlink(target: &Path, link: &Path) -> std::io::Result<()> {
    std::os::unix::fs::symlink(target, link)
}

#[cfg(not(unix))]
fn symlink(_target: &Path, _link: &Path) -> std::io::Result<()> {
    Err(std::io::Error::new(
        std::io::ErrorKind::Unsupported,
        "the HF cache needs symbolic links; use -o DIR on this system",
    ))
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use xet_hub::{RepoId, RepoType};

    fn file(path: &str, etag_byte: &str, size: u64) -> RemoteFile {
        RemoteFile {
            path: RepoPath::parse(path).unwrap(),
            size,
            git_oid: etag_byte.repeat(20),
            content: Content::Git,
        }
    }

    #[test]
    fn layout_matches_huggingface_hub() {
        let dir = tempfile::tempdir().unwrap();
        let repo = RepoRef::new(RepoType::Dataset, RepoId::parse("org/d").unwrap());
        let c = RepoCache::new(dir.path(), &repo);
        assert_eq!(c.dir(), dir.path().join("datasets--org--d"));
        c.prepare().unwrap();
        assert!(dir.path().join("CACHEDIR.TAG").is_file());
        let commit = CommitId::parse(&"ab".repeat(20)).unwrap();
        let f = file("a/b/c.txt", "0f", 3);
        assert!(!c.is_cached(&commit, &f) && !c.has_blob(&f));
        std::fs::write(c.blob_path(f.etag()), b"abc").unwrap();
        assert!(c.has_blob(&f));
        c.link(&commit, &f).unwrap();
        let pointer = c.pointer_path(&commit, &f.path);
        assert_eq!(
            std::fs::read_link(&pointer).unwrap(),
            Path::new("../../../../blobs").join("0f".repeat(20))
        );
        assert_eq!(std::fs::read(&pointer).unwrap(), b"abc");
        assert!(c.is_cached(&commit, &f));
        // Relinking replaces the link.
        c.link(&commit, &f).unwrap();
        // A blob of the wrong size is not a cached file.
        assert!(!c.is_cached(&commit, &file("a/b/c.txt", "0f", 4)));
        c.write_ref("main", &commit).unwrap();
        c.write_ref("refs/pr/1", &commit).unwrap();
        c.write_ref(&commit.to_string(), &commit).unwrap();
        assert_eq!(
            std::fs::read_to_string(c.dir().join("refs/main")).unwrap(),
            commit.to_string()
        );
        assert!(c.dir().join("refs/refs/pr/1").is_file());
        assert!(!c.dir().join("refs").join(commit.to_string()).exists());
        c.write_tree(&commit, &[f]).unwrap();
        let t: serde_json::Value = serde_json::from_slice(
            &std::fs::read(c.dir().join("trees").join(format!("{commit}.json"))).unwrap(),
        )
        .unwrap();
        assert_eq!(t["format_version"], 1);
        assert_eq!(t["files"]["a/b/c.txt"]["size"], 3);
        // No temporary file is left behind.
        let left: Vec<_> = std::fs::read_dir(c.dir().join("refs"))
            .unwrap()
            .filter_map(|e| e.ok())
            .filter(|e| e.file_name().to_string_lossy().ends_with(".tmp"))
            .collect();
        assert!(left.is_empty());
    }
}
