//! [`create_from_cas`]: a bundle of files from any [`Cas`] (a server, through its HTTP
//! client), which hands out file contents, never its stored xorbs or shards.

use std::collections::HashSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use xet_cas::Cas;
use xet_hash::MerkleHash;

use crate::import::blocking;
use crate::{BundleError, CreateReport, Progress, Selection, Wanted, create};

/// Write a bundle of `files` from `cas` to `out`. A CAS serves contents, not stored
/// objects, so the files are first downloaded (each verified by `xet-download` against
/// its hash) into a staging directory beside `out` (`.xet-bundle-stage-*`, removed when
/// done, whatever happens), uploaded by `xet-upload` into a filesystem store there
/// (global dedup off, no upload cache: nothing outside the staging directory is read or
/// written), and that store is bundled with [`create`] and
/// [`Selection::Files`]`(files)`. Each file must come out of the upload under the hash
/// it was asked for; the xorbs are packed anew, so they need not be the source's.
///
/// The empty file needs nothing from `cas`. Names in `files` go into the manifest as
/// with [`create`]. A file the CAS does not have is [`BundleError::Download`] with
/// [`xet_download::DownloadError::NotFound`] as its source.
pub async fn create_from_cas(
    cas: Arc<dyn Cas>,
    files: &[Wanted],
    out: &Path,
    progress: Arc<dyn Progress>,
) -> Result<CreateReport, BundleError> {
    let parent = match out.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let p = parent.clone();
    let stage = blocking(move || {
        tempfile::Builder::new()
            .prefix(".xet-bundle-stage-")
            .tempdir_in(&p)
    })
    .await?
    .map_err(|source| BundleError::Stage {
        path: parent,
        source,
    })?;
    let mut seen = HashSet::new();
    let hashes: Vec<MerkleHash> = files
        .iter()
        .map(|w| w.hash)
        .filter(|h| !h.is_zero() && seen.insert(*h))
        .collect();
    let store_dir = stage.path().join("store");
    let staged =
        xet_store::open_store(&store_dir)
            .await
            .map_err(|source| BundleError::StagingStore {
                path: store_dir,
                source,
            })?;
    let staged = Arc::new(staged);
    if !hashes.is_empty() {
        let paths = download_all(cas, &hashes, &stage.path().join("files")).await?;
        reupload(staged.clone(), &paths, &hashes).await?;
    }
    let selection = Selection::Files(files.to_vec());
    let report = create(staged.backend(), &selection, out, progress).await;
    // The staging directory goes on a blocking thread (it holds every file's bytes).
    drop(staged);
    blocking(move || drop(stage)).await?;
    report
}

/// Download each file (verified by the pipeline) to `dir/<hash>`.
async fn download_all(
    cas: Arc<dyn Cas>,
    hashes: &[MerkleHash],
    dir: &Path,
) -> Result<Vec<PathBuf>, BundleError> {
    let d = dir.to_path_buf();
    blocking(move || std::fs::create_dir_all(&d))
        .await?
        .map_err(|source| BundleError::Stage {
            path: dir.to_path_buf(),
            source,
        })?;
    let paths: Vec<PathBuf> = hashes.iter().map(|h| dir.join(h.to_string())).collect();
    let requests = hashes
        .iter()
        .zip(&paths)
        .map(|(h, p)| xet_download::DownloadRequest::to_path(*h, p.clone()))
        .collect();
    xet_download::download(
        cas,
        requests,
        xet_download::DownloadOptions::default(),
        None,
    )
    .await?;
    Ok(paths)
}

/// Upload the downloaded files into the staging store; each must come out as the file
/// asked for (it cannot do otherwise: a file hash is a function of the content).
async fn reupload(
    store: Arc<xet_store::StoreCas<xet_store::FsBackend>>,
    paths: &[PathBuf],
    hashes: &[MerkleHash],
) -> Result<(), BundleError> {
    let options = xet_upload::UploadOptions {
        // Nothing to find elsewhere, and no query whose answer could depend on timing.
        global_dedup: false,
        cache_dir: None,
        ..Default::default()
    };
    let report =
        xet_upload::upload(store, paths, &options, Arc::new(xet_upload::NoProgress)).await?;
    if report.files.len() != hashes.len() {
        return Err(BundleError::StagedFiles {
            asked: hashes.len(),
            stored: report.files.len(),
        });
    }
    for (f, h) in report.files.iter().zip(hashes) {
        if f.hash != *h {
            return Err(BundleError::HashMismatch {
                file: *h,
                content: f.hash,
            });
        }
    }
    Ok(())
}
