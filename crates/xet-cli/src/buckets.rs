//! Storage buckets (`hf://buckets/NS/NAME[/PATH]`): `xet ls`, `xet cp` and `xet rm`.
//! The work is in `xet-hub-client` (`buckets`, `bucket_transfer`); here are the
//! arguments, the rules for where a copy goes, the output and the exit codes.
//!
//! `xet cp SRC DST`:
//! - local file → bucket: DST without a path puts it at the root under its name, DST
//!   ending in `/` below that folder, else at DST's path exactly;
//! - `-` → bucket: standard input, to the file DST names;
//! - bucket file → local: into DST (a folder, or ending in `/`: under the file's name),
//!   `.` when DST is absent, `-` for standard output; the bucket's mtime is kept;
//! - bucket or repository file → bucket: a server-side copy by Xet hash, no bytes move.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use xet_hub::api::TreeEntry;
use xet_hub::api::buckets::{BatchLine, BucketEntry};
use xet_hub::{RepoPath, RepoType};
use xet_hub_client::bucket_transfer::{
    BucketOptions, FromBucket, ToBucket, apply_batches, download_from_bucket, upload_to_bucket,
};
use xet_hub_client::buckets::entry_path;
use xet_hub_client::{HfAddress, HubClient, HubEnv, HubError, RepoTarget};

use crate::exit::{CliResult, Failure};
use crate::hub_client::{client, failure, usage};
use crate::output::Out;

/// `xet cp SRC [DST]`.
#[derive(clap::Args, Debug)]
pub struct CpArgs {
    /// A local file, `-` (standard input), or hf://buckets/NS/NAME/PATH (or a repository
    /// file, hf://[datasets/|spaces/]NS/NAME[@REV]/PATH, copied into a bucket).
    src: String,
    /// A local path, `-` (standard output), or hf://buckets/NS/NAME[/PATH][/].
    dst: Option<String>,
    /// Hub token (else HF_TOKEN, else the token file of `hf auth login`).
    #[arg(long, hide_env_values = true)]
    token: Option<String>,
}

/// `xet rm hf://buckets/NS/NAME/PATH`.
#[derive(clap::Args, Debug)]
pub struct RmArgs {
    /// hf://buckets/NS/NAME/PATH (with -r, a folder or the whole bucket).
    target: String,
    /// Remove everything below a folder (or in the whole bucket).
    #[arg(short, long)]
    recursive: bool,
    /// Hub token (else HF_TOKEN, else the token file of `hf auth login`).
    #[arg(long, hide_env_values = true)]
    token: Option<String>,
}

fn bucket_address(s: &str) -> CliResult<HfAddress> {
    let a = HfAddress::parse(s).map_err(|e| usage(e.to_string()))?;
    if a.repo.kind != RepoType::Bucket {
        return Err(usage(format!(
            "{s} is a repository; this takes a bucket (hf://buckets/NS/NAME/...)"
        )));
    }
    Ok(a)
}

fn options() -> BucketOptions {
    BucketOptions {
        upload: xet_upload::UploadOptions::default(),
        download: xet_download::DownloadOptions::default(),
        idle_timeout: None,
    }
}

/// `xet ls hf://buckets/...`: one level, or everything below with `-r`. Printed a page
/// at a time as pages arrive (the `--json` document too), so a listing of any size takes
/// the memory of one page.
pub async fn ls(out: &Out, client: &HubClient, addr: &HfAddress, recursive: bool) -> CliResult {
    use std::io::Write as _;
    let stdout = std::io::stdout();
    let mut w = std::io::BufWriter::with_capacity(1 << 16, stdout.lock());
    let head = json!({"ok": true, "bucket": addr.repo.id.to_string()}).to_string();
    let mut first = true;
    let mut io_error = None;
    let listed = client
        .each_bucket_page(&addr.repo, addr.path.as_ref(), recursive, |page| {
            for e in &page {
                let r = if out.json {
                    let sep = if first {
                        // The document's head, then the entries as they come.
                        format!("{},\"entries\":[", head.trim_end_matches('}'))
                    } else {
                        ",".to_string()
                    };
                    write!(w, "{sep}{}", entry_doc(e))
                } else {
                    writeln!(w, "{}", entry_line(e))
                };
                first = false;
                if let Err(err) = r {
                    io_error.get_or_insert(err);
                }
            }
            Ok(())
        })
        .await;
    if let Err(e) = listed {
        // What was printed stays; the document (if any) is left open, which no reader
        // takes for a complete one, and the error follows on stderr.
        let _ = w.flush();
        return Err(failure(e));
    }
    let end = if !out.json {
        Ok(())
    } else if first {
        writeln!(w, "{},\"entries\":[]}}", head.trim_end_matches('}'))
    } else {
        writeln!(w, "]}}")
    };
    let flushed = end.and_then(|()| w.flush());
    match io_error.map_or(flushed, Err) {
        Ok(()) => Ok(()),
        Err(e) => Err(Failure::input(
            anyhow::Error::new(e).context("cannot write the listing"),
        )),
    }
}

/// One entry as `xet ls` prints it.
fn entry_line(e: &BucketEntry) -> String {
    match e {
        BucketEntry::File {
            path,
            size,
            xet_hash,
            mtime,
            ..
        } => format!(
            "{path}  {size:>12}  {xet_hash}  {}",
            mtime.as_deref().unwrap_or("-")
        ),
        BucketEntry::Directory { path, .. } => format!("{path}/"),
    }
}

/// One entry of the `--json` document.
fn entry_doc(e: &BucketEntry) -> serde_json::Value {
    match e {
        BucketEntry::File {
            path,
            size,
            xet_hash,
            mtime,
            ..
        } => json!({"type": "file", "path": path, "size": size, "hash": xet_hash, "mtime": mtime}),
        BucketEntry::Directory { path, .. } => json!({"type": "directory", "path": path}),
    }
}

pub async fn rm(out: &Out, a: RmArgs) -> CliResult {
    let addr = bucket_address(&a.target)?;
    let client = client(&HubEnv::from_process(), a.token.as_deref())?;
    let bucket = &addr.repo;
    let paths: Vec<String> = match (&addr.path, a.recursive) {
        (None, false) => {
            return Err(usage(format!(
                "{} names the whole bucket: add -r to remove every file in it",
                a.target
            )));
        }
        (Some(p), false) => match file_entry(&client, &addr, p).await? {
            Some(_) => vec![p.to_string()],
            None => {
                return Err(usage(format!(
                    "{} is not a file of the bucket (a folder needs -r)",
                    a.target
                )));
            }
        },
        (path, true) => client
            .list_bucket_tree(bucket, path.as_ref(), true)
            .await
            .map_err(failure)?
            .iter()
            .filter(|e| matches!(e, BucketEntry::File { .. }))
            .map(|e| entry_path(e).to_string())
            .collect(),
    };
    let lines: Vec<BatchLine> = paths
        .iter()
        .map(|p| BatchLine::DeleteFile { path: p.clone() })
        .collect();
    apply_batches(&client, bucket, &lines)
        .await
        .map_err(failure)?;
    for p in &paths {
        out.line(format!("removed hf://buckets/{}/{p}", bucket.id));
    }
    out.doc(&json!({"ok": true, "bucket": bucket.id.to_string(), "removed": paths}));
    Ok(())
}

/// The file entry at `path`, if it is one.
async fn file_entry(
    client: &HubClient,
    addr: &HfAddress,
    path: &RepoPath,
) -> CliResult<Option<BucketEntry>> {
    let found = client
        .bucket_paths_info(&addr.repo, std::slice::from_ref(path))
        .await
        .map_err(failure)?;
    Ok(found
        .into_iter()
        .find(|e| matches!(e, BucketEntry::File { path: p, .. } if p == path.as_str())))
}

pub async fn cp(out: &Out, a: CpArgs) -> CliResult {
    let client = client(&HubEnv::from_process(), a.token.as_deref())?;
    let dst = a.dst.clone().unwrap_or_else(|| ".".to_string());
    match (HfAddress::is_hf(&a.src), HfAddress::is_hf(&dst)) {
        (false, false) => Err(usage(
            "one side of xet cp must be hf://buckets/...: local-to-local copies are cp's job",
        )),
        (false, true) => upload(out, &client, &a.src, &dst).await,
        (true, false) => download(out, &client, &a.src, &dst).await,
        (true, true) => remote_copy(out, &client, &a.src, &dst).await,
    }
}

/// The bucket path a file named `name` goes to for destination `dst`.
fn target_path(dst: &str, addr: &HfAddress, name: Option<&str>) -> CliResult<RepoPath> {
    let joined = match (&addr.path, dst.ends_with('/'), name) {
        (None, _, Some(n)) => n.to_string(),
        (Some(p), true, Some(n)) => format!("{p}/{n}"),
        (Some(p), _, _) => p.to_string(),
        (None, _, None) => {
            return Err(usage(format!(
                "{dst} names no file: give the path to write (hf://buckets/NS/NAME/PATH)"
            )));
        }
    };
    RepoPath::parse(&joined).map_err(|e| usage(format!("{dst}: {e}")))
}

async fn upload(out: &Out, client: &HubClient, src: &str, dst: &str) -> CliResult {
    let addr = bucket_address(dst)?;
    // Standard input goes through a temporary file, so the upload pipeline reads it
    // like any file (and resumes like one).
    let (local, name, _stdin) = if src == "-" {
        let tmp = tempfile::NamedTempFile::new().map_err(Failure::input)?;
        let mut f = tmp.reopen().map_err(Failure::input)?;
        std::io::copy(&mut std::io::stdin().lock(), &mut f).map_err(Failure::input)?;
        (tmp.path().to_path_buf(), None, Some(tmp))
    } else {
        let p = PathBuf::from(src);
        let meta = std::fs::metadata(&p).map_err(|e| {
            Failure::input(anyhow::Error::new(e).context(format!("cannot read {src}")))
        })?;
        if meta.is_dir() {
            return Err(usage(format!(
                "{src} is a folder: xet cp copies one file (xet upload takes folders)"
            )));
        }
        let name = p.file_name().map(|n| n.to_string_lossy().into_owned());
        (p, name, None)
    };
    let path = target_path(dst, &addr, name.as_deref())?;
    let files = [ToBucket {
        local: local.clone(),
        path: path.clone(),
    }];
    let sent = upload_to_bucket(
        client,
        &addr.repo,
        &files,
        &[],
        &options(),
        Arc::new(xet_upload::NoProgress),
    )
    .await
    .map_err(failure)?;
    let f = &sent[0];
    out.line(format!(
        "uploaded {src} to hf://buckets/{}/{path} ({} bytes, {})",
        addr.repo.id, f.size, f.xet_hash
    ));
    out.doc(
        &json!({"ok": true, "bucket": addr.repo.id.to_string(), "path": path.as_str(),
                    "size": f.size, "hash": f.xet_hash}),
    );
    Ok(())
}

async fn download(out: &Out, client: &HubClient, src: &str, dst: &str) -> CliResult {
    let addr = bucket_address(src)?;
    let Some(path) = &addr.path else {
        return Err(usage(format!("{src} names no file of the bucket")));
    };
    let Some(BucketEntry::File {
        size,
        xet_hash,
        mtime,
        ..
    }) = file_entry(client, &addr, path).await?
    else {
        return Err(failure(HubError::EntryNotFound {
            subject: RepoTarget::repo(&addr.repo).path(path.as_str()),
        }));
    };
    let hash = xet_hash::MerkleHash::from_hex(&xet_hash)
        .map_err(|e| usage(format!("the server lists hash {xet_hash:?}: {e}")))?;
    let name = path.as_str().rsplit('/').next().unwrap_or(path.as_str());
    let to_stdout = dst == "-";
    let tmp = if to_stdout {
        Some(tempfile::tempdir().map_err(Failure::input)?)
    } else {
        None
    };
    let local = match &tmp {
        Some(t) => t.path().join(name),
        None if Path::new(dst).is_dir() || dst.ends_with('/') => Path::new(dst).join(name),
        None => PathBuf::from(dst),
    };
    let mtime_ms = mtime.as_deref().and_then(xet_hub::time::parse_rfc3339_ms);
    let files = [FromBucket {
        path: path.to_string(),
        local: local.clone(),
        xet_hash: hash,
        size,
        mtime_ms,
    }];
    download_from_bucket(client, &addr.repo, &files, &options(), None)
        .await
        .map_err(failure)?;
    if to_stdout {
        let mut f = std::fs::File::open(&local).map_err(Failure::input)?;
        std::io::copy(&mut f, &mut std::io::stdout().lock()).map_err(Failure::input)?;
        return Ok(());
    }
    out.line(format!(
        "downloaded {src} to {} ({size} bytes)",
        local.display()
    ));
    out.doc(&json!({"ok": true, "path": local, "size": size, "hash": xet_hash}));
    Ok(())
}

/// A server-side copy into a bucket: the source file's Xet hash, named in the
/// destination's batch; no bytes move.
async fn remote_copy(out: &Out, client: &HubClient, src: &str, dst: &str) -> CliResult {
    let from = HfAddress::parse(src).map_err(|e| usage(e.to_string()))?;
    let to = bucket_address(dst)?;
    let Some(path) = &from.path else {
        return Err(usage(format!("{src} names no file to copy")));
    };
    let hash = if from.repo.kind == RepoType::Bucket {
        match file_entry(client, &from, path).await? {
            Some(BucketEntry::File { xet_hash, .. }) => xet_hash,
            _ => {
                return Err(failure(HubError::EntryNotFound {
                    subject: RepoTarget::repo(&from.repo).path(path.as_str()),
                }));
            }
        }
    } else {
        let rev = from.revision_or_default();
        let entries = client
            .paths_info(&from.repo, rev, std::slice::from_ref(path))
            .await
            .map_err(failure)?;
        match entries.into_iter().find(|e| e.path() == path.as_str()) {
            Some(TreeEntry::File {
                xet_hash: Some(h), ..
            }) => h,
            Some(TreeEntry::File { .. }) => {
                return Err(usage(format!(
                    "{src} is stored in git, not in Xet: download it and xet cp the file"
                )));
            }
            _ => {
                return Err(failure(HubError::EntryNotFound {
                    subject: RepoTarget::repo(&from.repo).at(rev).path(path.as_str()),
                }));
            }
        }
    };
    let name = path.as_str().rsplit('/').next();
    let target = target_path(dst, &to, name)?;
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let line = BatchLine::CopyFile {
        path: target.to_string(),
        xet_hash: hash.clone(),
        mtime: Some(now_ms),
        content_type: None,
        source_repo_type: from.repo.kind.as_str().to_string(),
        source_repo_id: from.repo.id.to_string(),
    };
    apply_batches(client, &to.repo, &[line])
        .await
        .map_err(failure)?;
    out.line(format!(
        "copied {src} to hf://buckets/{}/{target}",
        to.repo.id
    ));
    out.doc(
        &json!({"ok": true, "bucket": to.repo.id.to_string(), "path": target.as_str(),
                    "hash": hash}),
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn where_a_copy_goes() {
        let a = |s: &str| bucket_address(s).unwrap();
        let at =
            |dst: &str, name: Option<&str>| target_path(dst, &a(dst), name).map(|p| p.to_string());
        assert_eq!(at("hf://buckets/o/b", Some("f.bin")).unwrap(), "f.bin");
        assert_eq!(
            at("hf://buckets/o/b/dir/", Some("f.bin")).unwrap(),
            "dir/f.bin"
        );
        assert_eq!(
            at("hf://buckets/o/b/dir/x.bin", Some("f.bin")).unwrap(),
            "dir/x.bin"
        );
        assert!(at("hf://buckets/o/b", None).is_err());
        assert!(bucket_address("hf://o/model").is_err());
    }
}
