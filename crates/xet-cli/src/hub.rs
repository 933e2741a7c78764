//! `hf://` addresses: `xet download hf://...`, `xet upload PATH... hf://...` and
//! `xet ls hf://...` against the Hugging Face Hub (or any server speaking its API).
//! The work is in `xet-hub-client`; here are the arguments, the output and the exit
//! codes.
//!
//! The Hub token comes from `--token`, `HF_TOKEN` or the token file `hf auth login`
//! writes, and goes to the Hub only. `XET_TOKEN` (the CAS token of plain `xet`
//! commands) is never sent to the Hub.

use crate::exit::CliResult;
use crate::hub_client::{client, failure, usage};
use crate::output::Out;
use crate::remote::{self, RemoteArgs};
use serde_json::json;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xet_hub::{RepoType, api::TreeEntry};
use xet_hub_client::{HfAddress, HubEnv, download, upload};

/// `xet download` flags that apply to `hf://` addresses.
#[derive(clap::Args, Debug, Default)]
pub struct HubDownloadArgs {
    /// With an hf:// address: download only files matching this glob (`*` spans folders;
    /// `dir/` means everything below dir). Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub include: Vec<String>,
    /// With an hf:// address: skip files matching this glob. Repeatable.
    #[arg(long, value_name = "GLOB")]
    pub exclude: Vec<String>,
    /// With an hf:// address: the repository type (model, dataset, space), for addresses
    /// without a datasets/ or spaces/ prefix.
    #[arg(long, value_name = "TYPE")]
    pub repo_type: Option<String>,
}

/// `xet upload` flags that apply to an `hf://` destination.
#[derive(clap::Args, Debug, Default)]
pub struct HubUploadArgs {
    /// With an hf:// destination: the repository type (model, dataset, space).
    #[arg(long, value_name = "TYPE")]
    pub repo_type: Option<String>,
    /// With an hf:// destination: create the repository private (if it is created).
    #[arg(long)]
    pub private: bool,
    /// With an hf:// destination: the commit's summary.
    #[arg(long, short = 'm', value_name = "TEXT")]
    pub message: Option<String>,
    /// With an hf:// destination: the commit's description.
    #[arg(long, value_name = "TEXT")]
    pub description: Option<String>,
    /// With an hf:// destination: open a pull request onto the revision with the
    /// changes instead of committing to it; prints the pull request.
    #[arg(long)]
    pub create_pr: bool,
}

/// `xet ls hf://...`.
#[derive(clap::Args, Debug)]
pub struct LsArgs {
    /// hf://[datasets/|spaces/]NS/NAME[@REV][/PATH]
    address: String,
    /// List folders' contents recursively.
    #[arg(short, long)]
    recursive: bool,
    /// The repository type (model, dataset, space), for addresses without a prefix.
    #[arg(long, value_name = "TYPE")]
    repo_type: Option<String>,
    /// Hub token (else HF_TOKEN, else the token file of `hf auth login`).
    #[arg(long, hide_env_values = true)]
    token: Option<String>,
}

/// What `xet download` passes over when its first argument is an `hf://` address.
pub struct DownloadInput<'a> {
    pub targets: &'a [String],
    pub output: Option<&'a Path>,
    /// Flags given that have no meaning with an `hf://` address.
    pub unsupported: Vec<&'static str>,
    pub hub: &'a HubDownloadArgs,
    pub remote: &'a RemoteArgs,
    pub chunk_cache_size: Option<u64>,
    pub chunk_cache_copies: bool,
}

/// What `xet upload` passes over when its last argument is an `hf://` address.
pub struct UploadInput<'a> {
    pub paths: &'a [PathBuf],
    pub files_from: Option<&'a Path>,
    pub unsupported: Vec<&'static str>,
    pub hub: &'a HubUploadArgs,
    pub remote: &'a RemoteArgs,
}

/// Parse the address and apply `--repo-type`.
fn address(s: &str, repo_type: Option<&str>) -> CliResult<HfAddress> {
    let mut a = HfAddress::parse(s).map_err(|e| usage(e.to_string()))?;
    if let Some(t) = repo_type {
        let t = RepoType::parse(Some(t)).map_err(|e| usage(format!("--repo-type: {e}")))?;
        match a.repo.kind {
            RepoType::Model => a.repo.kind = t,
            k if k != t => {
                return Err(usage(format!(
                    "{s} is a {k} repository, but --repo-type says {t}"
                )));
            }
            _ => {}
        }
    }
    Ok(a)
}

/// `--token` meant for the Hub: the flag's value, unless it merely came from
/// `XET_TOKEN` (a CAS token, which must not go to the Hub).
fn hub_token_flag(r: &RemoteArgs) -> Option<&str> {
    let from_env = std::env::var("XET_TOKEN").ok();
    r.token
        .as_deref()
        .filter(|t| from_env.as_deref() != Some(*t))
}

fn refuse_unsupported(flags: &[&'static str]) -> CliResult {
    match flags {
        [] => Ok(()),
        fs => Err(usage(format!(
            "{} cannot be used with an hf:// address",
            fs.join(", ")
        ))),
    }
}

/// One progress bar for the whole transfer.
fn bar(out: &Out, enabled: bool, what: &str) -> (indicatif::ProgressBar, download::ProgressFn) {
    let pb = crate::progress::bar(enabled && !out.json && !out.quiet, 0, what);
    let pbc = pb.clone();
    let f: download::ProgressFn = Arc::new(move |p| match p {
        download::Progress::Total(n) => pbc.set_length(n),
        download::Progress::Bytes(n) => pbc.inc(n),
    });
    (pb, f)
}

pub async fn download(out: &Out, i: DownloadInput<'_>) -> CliResult {
    refuse_unsupported(&i.unsupported)?;
    let [target] = i.targets else {
        return Err(usage("give one hf:// address per download"));
    };
    let addr = address(target, i.hub.repo_type.as_deref())?;
    let env = HubEnv::from_process();
    let client = client(&env, hub_token_flag(i.remote))?;
    let output = match i.output {
        None => download::Output::Cache(env.hub_cache()),
        Some(p) if p == Path::new("-") => download::Output::Stdout,
        Some(p) => download::Output::Path(p.to_path_buf()),
    };
    let to_stdout = matches!(output, download::Output::Stdout);
    let cancel = xet_upload::CancellationToken::new();
    crate::run::cancel_on_signal(cancel.clone());
    let defaults = xet_download::DownloadOptions::default();
    let pipeline = xet_download::DownloadOptions {
        cache: (i.chunk_cache_size != Some(0)).then(|| {
            let c = xet_download::CacheConfig::new(remote::cache_dir(&i.remote.cache_dir))
                .with_link_files(!i.chunk_cache_copies);
            i.chunk_cache_size
                .map_or(c.clone(), |m| c.with_max_bytes(m))
        }),
        stall_timeout: i.remote.stall_timeout().unwrap_or(defaults.stall_timeout),
        // The HTTP client retries each request itself.
        max_retries: 1,
        cancel: Some(cancel),
        ..defaults
    };
    let opts = download::Options {
        pipeline,
        idle_timeout: i.remote.stall_timeout(),
        concurrency: 8,
    };
    let spec = download::DownloadSpec {
        address: addr,
        include: i.hub.include.clone(),
        exclude: i.hub.exclude.clone(),
        output,
    };
    let (pb, progress) = bar(out, !to_stdout, "download");
    let res = download::download(&client, spec, opts, progress).await;
    pb.finish_and_clear();
    let o = res.map_err(failure)?;
    if !to_stdout {
        print_download(out, &o);
    }
    Ok(())
}

fn print_download(out: &Out, o: &download::DownloadOutcome) {
    for f in &o.files {
        let id = f.xet_hash.as_deref().unwrap_or(&f.git_oid);
        if out.quiet {
            out.line(f.local.display().to_string());
        } else {
            out.line(format!("{}  {id}  {:>12}", f.local.display(), f.size));
        }
    }
    if !out.quiet {
        out.line(format!(
            "{} files, {} bytes of {} at commit {} in {:.2}s; fetched {} bytes, {} from the chunk cache, {} already in place",
            o.files.len(),
            o.bytes,
            o.repo,
            o.commit,
            o.elapsed,
            o.bytes_fetched,
            o.bytes_from_cache,
            o.files.iter().filter(|f| f.source == "cache").count()
        ));
    }
    let files: Vec<_> = o
        .files
        .iter()
        .map(|f| {
            json!({ "path": f.local, "repo_path": f.path, "hash": f.xet_hash, "sha256": f.sha256,
                    "git_oid": f.git_oid, "size": f.size, "source": f.source })
        })
        .collect();
    out.doc(&json!({
        "ok": true, "repo": o.repo, "revision": o.revision, "commit": o.commit, "files": files,
        "totals": { "files": o.files.len(), "bytes": o.bytes, "bytes_fetched": o.bytes_fetched,
                    "bytes_from_cache": o.bytes_from_cache, "elapsed": o.elapsed }
    }));
}

pub async fn upload(out: &Out, i: UploadInput<'_>) -> CliResult {
    refuse_unsupported(&i.unsupported)?;
    let Some((target, sources)) = i.paths.split_last() else {
        return Err(usage("give the files to upload, then the hf:// address"));
    };
    let target = target
        .to_str()
        .ok_or_else(|| usage("the hf:// address is not UTF-8"))?;
    if let Some(p) = sources
        .iter()
        .find(|p| p.to_str().is_some_and(HfAddress::is_hf))
    {
        return Err(usage(format!(
            "{} : only the last argument may be an hf:// address",
            p.display()
        )));
    }
    let addr = address(target, i.hub.repo_type.as_deref())?;
    let mut sources: Vec<upload::Source> = sources
        .iter()
        .cloned()
        .map(upload::Source::argument)
        .collect();
    if let Some(src) = i.files_from {
        for (n, entry) in crate::run::read_list(src)? {
            let source = upload::Source::listed(&entry)
                .map_err(|e| usage(format!("--files-from {} line {n}: {e}", src.display())))?;
            sources.push(source);
        }
    }
    let env = HubEnv::from_process();
    let client = client(&env, hub_token_flag(i.remote))?;
    let cancel = xet_upload::CancellationToken::new();
    crate::run::cancel_on_signal(cancel.clone());
    let pipeline = xet_upload::UploadOptions {
        // Shard cache and resume records per Hub: its repositories share one CAS.
        cache_dir: Some(xet_upload::cache_dir_for(
            &remote::cache_dir(&i.remote.cache_dir),
            &format!("hf-hub:{}", client.endpoint()),
        )),
        cancel: Some(cancel),
        ..Default::default()
    };
    let opts = upload::Options {
        pipeline,
        idle_timeout: i.remote.stall_timeout(),
    };
    let spec = upload::UploadSpec {
        address: addr,
        sources,
        private: i.hub.private,
        message: i.hub.message.clone(),
        description: i.hub.description.clone().unwrap_or_default(),
        create_pr: i.hub.create_pr,
    };
    let (pb, progress) = bar(out, true, "upload");
    let res = upload::upload(&client, spec, opts, progress).await;
    pb.finish_and_clear();
    let o = res.map_err(failure)?;
    print_upload(out, &o);
    Ok(())
}

fn print_upload(out: &Out, o: &upload::UploadOutcome) {
    for f in &o.files {
        if out.quiet {
            continue;
        }
        let state = if f.new { "new" } else { "unchanged" };
        out.line(format!(
            "{}  {}  {:>12}  {}  {} {state}",
            f.path, f.xet_hash, f.size, f.sha256, f.mode
        ));
    }
    match (o.commits.last(), &o.commit) {
        (Some(_), _) if o.pull_request.is_some() => {
            if let Some(pr) = &o.pull_request {
                out.line(format!(
                    "pull request #{} ({}): {}",
                    pr.num, pr.revision, pr.url
                ));
            }
        }
        (Some(c), _) => out.line(c.url.clone()),
        (None, Some(head)) if !out.quiet => out.line(format!(
            "no changes: nothing committed ({} at revision {} is commit {head})",
            o.repo, o.revision
        )),
        _ => {}
    }
    let files: Vec<_> = o
        .files
        .iter()
        .map(|f| {
            json!({ "path": f.path, "local": f.local, "hash": f.xet_hash, "sha256": f.sha256,
                    "size": f.size, "mode": f.mode, "new": f.new })
        })
        .collect();
    out.doc(&json!({
        "ok": true, "repo": o.repo, "revision": o.revision, "created_repo": o.created_repo,
        "commit": o.commit, "commit_url": o.commits.last().map(|c| &c.url), "commits": o.commits,
        "files": files, "pull_request": o.pull_request,
        "totals": { "files": o.files.len(), "new": o.files.iter().filter(|f| f.new).count(),
                    "bytes": o.files.iter().map(|f| f.size).sum::<u64>(), "elapsed": o.elapsed }
    }));
}

pub async fn ls(out: &Out, a: LsArgs) -> CliResult {
    let addr = address(&a.address, a.repo_type.as_deref())?;
    let env = HubEnv::from_process();
    let client = client(&env, a.token.as_deref())?;
    if addr.repo.kind == RepoType::Bucket {
        return crate::buckets::ls(out, &client, &addr, a.recursive).await;
    }
    let rev = addr.revision_or_default();
    let (commit, _) = client.repo_info(&addr.repo, rev).await.map_err(failure)?;
    let at = commit.to_string();
    let mut entries = match &addr.path {
        Some(p) => {
            let info = client
                .paths_info(&addr.repo, &at, std::slice::from_ref(p))
                .await
                .map_err(failure)?;
            match info.iter().find(|e| e.path() == p.as_str()) {
                Some(TreeEntry::File { .. }) => info,
                _ => client
                    .list_tree(&addr.repo, &at, Some(p), a.recursive)
                    .await
                    .map_err(failure)?,
            }
        }
        None => client
            .list_tree(&addr.repo, &at, None, a.recursive)
            .await
            .map_err(failure)?,
    };
    entries.sort_by(|x, y| x.path().cmp(y.path()));
    print_ls(out, &addr, &at, &entries);
    Ok(())
}

fn print_ls(out: &Out, addr: &HfAddress, commit: &str, entries: &[TreeEntry]) {
    let mut docs = Vec::with_capacity(entries.len());
    for e in entries {
        match e {
            TreeEntry::File {
                oid,
                path,
                size,
                lfs,
                xet_hash,
            } => {
                let sha = lfs.as_ref().map(|l| l.oid.as_str());
                out.line(format!(
                    "{path}  {size:>12}  {}  {}",
                    xet_hash.as_deref().unwrap_or("-"),
                    sha.unwrap_or("-")
                ));
                docs.push(
                    json!({ "type": "file", "path": path, "size": size, "hash": xet_hash,
                                  "sha256": sha, "git_oid": oid }),
                );
            }
            TreeEntry::Directory { path, .. } => {
                out.line(format!("{path}/"));
                docs.push(json!({ "type": "directory", "path": path }));
            }
        }
    }
    out.doc(
        &json!({ "ok": true, "repo": addr.repo.to_string(), "revision": addr.revision_or_default(),
                     "commit": commit, "entries": docs }),
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exit::Code;

    #[test]
    fn repo_type_applies_to_addresses_without_a_prefix() {
        let a = address("hf://o/d", Some("dataset")).unwrap();
        assert_eq!(a.repo.kind, RepoType::Dataset);
        let a = address("hf://datasets/o/d", Some("dataset")).unwrap();
        assert_eq!(a.repo.kind, RepoType::Dataset);
        let e = address("hf://spaces/o/d", Some("dataset")).unwrap_err();
        assert_eq!(e.code, Code::Usage);
        assert_eq!(
            address("hf://o/d", Some("nope")).unwrap_err().code,
            Code::Usage
        );
    }
}
