//! The two sides of a sync, as [`Listing`]s by relative path.
//!
//! Local: every file below the root (symbolic links to files followed, links to folders
//! not entered, as Python's `os.walk` does), or only the paths the other side has when
//! nothing will be deleted. Remote: one recursive listing of the bucket prefix, paths
//! made relative to it (`hf`: the prefix itself is a file named by its last segment).

use std::path::{Path, PathBuf};

use futures_util::{StreamExt, TryStreamExt};
use xet_hash::MerkleHash;
use xet_hub::api::buckets::BucketEntry;
use xet_hub::time::parse_rfc3339_ms;
use xet_hub::{RepoPath, RepoRef};

use super::{Filter, Listing, SideFile};
use crate::bucket_transfer::mtime_ms;
use crate::client::HubClient;
use crate::error::{HubError, RepoTarget, Result};

/// Every file below `root` that `filter` keeps, by `/`-separated relative path.
pub fn walk_local(root: &Path, filter: &Filter) -> Result<Listing> {
    let mut out = Listing::new();
    let mut dirs = vec![root.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let entries =
            std::fs::read_dir(&dir).map_err(|e| HubError::local("cannot list", &dir, e))?;
        for entry in entries {
            let entry = entry.map_err(|e| HubError::local("cannot list", &dir, e))?;
            let path = entry.path();
            let kind = entry
                .file_type()
                .map_err(|e| HubError::local("cannot read", &path, e))?;
            if kind.is_dir() {
                dirs.push(path);
                continue;
            }
            // A link is followed to what it names; a dangling one is no file.
            let Ok(meta) = std::fs::metadata(&path) else {
                continue;
            };
            if meta.is_dir() {
                continue;
            }
            let rel = relative(root, &path)?;
            if filter.matches(&rel) {
                out.insert(rel, side_of(&meta));
            }
        }
    }
    Ok(out)
}

/// The local files at the `paths` the other side has (missing ones and folders left out):
/// a download without `--delete` needs no walk of what may be a large folder.
pub fn stat_local<'a>(root: &Path, paths: impl Iterator<Item = &'a String>) -> Listing {
    let mut out = Listing::new();
    for rel in paths {
        if let Ok(meta) = std::fs::metadata(root.join(rel))
            && !meta.is_dir()
        {
            out.insert(rel.clone(), side_of(&meta));
        }
    }
    out
}

fn side_of(meta: &std::fs::Metadata) -> SideFile {
    SideFile {
        size: meta.len(),
        mtime_ms: mtime_ms(meta).unwrap_or(0),
        xet_hash: None,
    }
}

/// `path` below `root` as a `/`-separated string.
fn relative(root: &Path, path: &Path) -> Result<String> {
    let rel = path.strip_prefix(root).unwrap_or(path);
    let mut parts = Vec::new();
    for c in rel.components() {
        match c.as_os_str().to_str() {
            Some(s) => parts.push(s),
            None => {
                return Err(HubError::local(
                    "has a name that is not UTF-8:",
                    path,
                    std::io::Error::other("rename it or leave it out (--exclude)"),
                ));
            }
        }
    }
    Ok(parts.join("/"))
}

/// The bucket path of relative path `rel` below `prefix`, checked; `local` names the
/// file in the error.
pub fn bucket_path(prefix: Option<&RepoPath>, rel: &str, local: &Path) -> Result<RepoPath> {
    let joined = match prefix {
        Some(p) => format!("{p}/{rel}"),
        None => rel.to_string(),
    };
    RepoPath::parse(&joined).map_err(|source| HubError::LocalName {
        path: local.to_path_buf(),
        source,
    })
}

/// What the bucket holds at or below `prefix`, by path relative to it, that `filter`
/// keeps; `Ok(None)` when the bucket does not exist.
pub async fn list_remote(
    client: &HubClient,
    bucket: &RepoRef,
    prefix: Option<&RepoPath>,
    filter: &Filter,
) -> Result<Option<Listing>> {
    let entries = match client.list_bucket_tree(bucket, prefix, true).await {
        Ok(e) => e,
        Err(HubError::RepoNotFound { .. }) => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut out = Listing::new();
    for e in entries {
        let BucketEntry::File {
            path,
            size,
            xet_hash,
            mtime,
            ..
        } = e
        else {
            continue;
        };
        let rel = match prefix {
            Some(p) if path == p.as_str() => path.rsplit('/').next().unwrap_or(&path).to_string(),
            Some(p) => path[p.as_str().len() + 1..].to_string(),
            None => path.clone(),
        };
        if !filter.matches(&rel) {
            continue;
        }
        let hash = MerkleHash::from_hex(&xet_hash).map_err(|e| HubError::BadAnswer {
            action: "listing",
            subject: RepoTarget::repo(bucket).path(&path),
            url: client.endpoint().to_string(),
            why: format!("the Xet hash {xet_hash:?} is not valid: {e}"),
        })?;
        let side = SideFile {
            size,
            mtime_ms: mtime.as_deref().and_then(parse_rfc3339_ms).unwrap_or(0),
            xet_hash: Some(hash),
        };
        out.insert(rel, side);
    }
    Ok(Some(out))
}

/// Computes the Xet hash of every local file in `local` that `other` has at the same
/// size (nothing is uploaded; the CPU work runs on blocking threads, a few at a time).
pub async fn hash_local(root: &Path, local: &mut Listing, other: &Listing) -> Result<()> {
    let wanted: Vec<(String, PathBuf)> = local
        .iter()
        .filter(|(rel, f)| other.get(*rel).is_some_and(|o| o.size == f.size))
        .map(|(rel, _)| (rel.clone(), root.join(rel)))
        .collect();
    let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
    let hashes: Vec<(String, MerkleHash)> = futures_util::stream::iter(wanted)
        .map(|(rel, path)| async move {
            let hashed = tokio::task::spawn_blocking(move || {
                xet_upload::scan::scan_file(&path, false)
                    .map(|s| s.file_hash())
                    .map_err(|e| HubError::local("cannot read", &path, e))
            })
            .await
            .map_err(|source| HubError::Internal {
                what: "hashing local files",
                source,
            })??;
            Ok::<_, HubError>((rel, hashed))
        })
        .buffer_unordered(workers)
        .try_collect()
        .await?;
    for (rel, h) in hashes {
        if let Some(f) = local.get_mut(&rel) {
            f.xet_hash = Some(h);
        }
    }
    Ok(())
}
