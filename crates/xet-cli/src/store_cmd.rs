//! `xet store gc|check|stats`: a store's lifecycle, on a directory or an S3 bucket that
//! servers may be serving meanwhile (`docs/STORE.md`, "Deletion and garbage
//! collection"). The work is `xet_store::StoreCas::{gc, check, store_stats}`.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{Context, anyhow};
use serde_json::json;

use crate::exit::{CliResult, Code, Failure};
use crate::output::Out;

#[derive(clap::Subcommand, Debug)]
pub enum StoreAction {
    /// Reclaim the xorbs and shards nothing references any more: condemn what a mark
    /// finds dead, delete it in a run at least --grace later if still dead.
    Gc {
        #[command(flatten)]
        store: StoreArgs,
        /// Objects younger than this are kept, and condemned ones are deleted once
        /// condemned this long ago (`90s`, `12h`, `1d`; `0s` does both at once, for
        /// stores nothing writes to meanwhile).
        #[arg(long, default_value = "1d", value_parser = parse_duration)]
        grace: Duration,
        /// Report what would be condemned and deleted; change nothing.
        #[arg(long)]
        dry_run: bool,
    },
    /// Check that every reference resolves (and with --read-data, that every object
    /// hashes to its name); problems one per line, exit 3 if any.
    Check {
        #[command(flatten)]
        store: StoreArgs,
        /// Read every xorb, shard, commit and tree and check its hash.
        #[arg(long)]
        read_data: bool,
    },
    /// Objects and bytes by kind, bytes of live files, the dedup ratio, and each
    /// repository's and bucket's files.
    Stats {
        #[command(flatten)]
        store: StoreArgs,
    },
}

#[derive(clap::Args, Debug)]
pub struct StoreArgs {
    /// Store directory (default: the embedded store) or `s3://BUCKET[/PREFIX]`
    /// (credentials and endpoint from the AWS_* environment).
    #[arg(long, env = "XET_STORE")]
    store: Option<PathBuf>,
    /// Endpoint of the S3-compatible server for `--store s3://…` (overrides
    /// AWS_ENDPOINT_URL).
    #[arg(long, value_name = "URL")]
    s3_endpoint: Option<String>,
    /// Conditional writes for `--store s3://…` (auto, on, off), as for `xet serve`.
    #[arg(long, default_value = "auto", value_name = "auto|on|off")]
    s3_conditional_put: xet_store_s3::ConditionalPut,
}

/// `90s`, `15m`, `12h`, `7d`, or plain seconds.
pub(crate) fn parse_duration(s: &str) -> Result<Duration, String> {
    let (digits, unit) = s.split_at(s.find(|c: char| !c.is_ascii_digit()).unwrap_or(s.len()));
    let n: u64 = digits
        .parse()
        .map_err(|_| format!("{s:?} is not a duration (like 90s, 15m, 12h, 1d)"))?;
    let secs = match unit {
        "" | "s" => 1,
        "m" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => return Err(format!("{s:?}: the unit is s, m, h or d")),
    };
    n.checked_mul(secs)
        .map(Duration::from_secs)
        .ok_or_else(|| format!("{s:?} is too long"))
}

/// What to do once the store is open.
#[derive(Clone, Copy)]
enum Job {
    Gc(xet_store::GcOptions),
    Check { read_data: bool },
    Stats,
}

impl Job {
    /// How the store opens: gc reads everything it needs from the backend, so it does
    /// not index the shards first (on S3 that was most of its requests).
    fn store_config(self) -> xet_store::StoreConfig {
        xet_store::StoreConfig {
            index_on_open: !matches!(self, Job::Gc(_)),
            ..xet_store::StoreConfig::default()
        }
    }

    async fn run<B: xet_store::ObjectBackend>(
        self,
        out: &Out,
        store: Arc<xet_store::StoreCas<B>>,
    ) -> CliResult {
        match self {
            Job::Gc(opts) => gc(out, store, opts).await,
            Job::Check { read_data } => check(out, store, read_data).await,
            Job::Stats => stats(out, store).await,
        }
    }
}

pub async fn run(out: &Out, action: StoreAction) -> CliResult {
    let (args, job) = match action {
        StoreAction::Gc {
            store,
            grace,
            dry_run,
        } => (
            store,
            Job::Gc(xet_store::GcOptions {
                dry_run,
                ..xet_store::GcOptions::with_grace(grace)
            }),
        ),
        StoreAction::Check { store, read_data } => (store, Job::Check { read_data }),
        StoreAction::Stats { store } => (store, Job::Stats),
    };
    let path = args
        .store
        .clone()
        .unwrap_or_else(crate::remote::default_store_dir);
    if let Some(url) = path.to_str().filter(|u| xet_store_s3::is_s3_url(u)) {
        let mut config = xet_store_s3::S3Config::from_url(url)
            .map_err(|e| Failure::new(Code::Usage, anyhow!("--store: {e}")))?;
        if let Some(e) = &args.s3_endpoint {
            config.endpoint = Some(e.clone());
        }
        config.conditional_put = args.s3_conditional_put;
        let store = xet_store_s3::open_store_with(config, job.store_config())
            .await
            .with_context(|| format!("cannot open the store at {url}"))
            .map_err(|e| Failure::new(Code::Failure, e))?;
        return job.run(out, Arc::new(store)).await;
    }
    job.run(out, Arc::new(open_dir(&path, job.store_config()).await?))
        .await
}

/// An existing store directory (a bundle is read-only and has no lifecycle).
async fn open_dir(
    dir: &Path,
    config: xet_store::StoreConfig,
) -> CliResult<xet_store::StoreCas<xet_store::FsBackend>> {
    if xet_bundle::is_bundle(dir) {
        return Err(Failure::new(
            Code::ReadOnly,
            anyhow!(
                "{} is a bundle: it is read-only and never collected",
                dir.display()
            ),
        ));
    }
    if !dir.is_dir() {
        return Err(Failure::input(anyhow!(
            "{} is not a store directory",
            dir.display()
        )));
    }
    xet_store::open_store_with(dir, config)
        .await
        .with_context(|| format!("cannot open the store at {}", dir.display()))
        .map_err(|e| Failure::new(Code::Failure, e))
}

fn store_failure(what: &str, e: xet_cas::CasError) -> Failure {
    Failure::new(
        crate::remote::cas_code(&e),
        anyhow::Error::new(e).context(what.to_string()),
    )
}

async fn gc<B: xet_store::ObjectBackend>(
    out: &Out,
    store: Arc<xet_store::StoreCas<B>>,
    opts: xet_store::GcOptions,
) -> CliResult {
    let r = store
        .gc(opts)
        .await
        .map_err(|e| store_failure("garbage collection stopped; the store is unchanged past what it reports, and the next run finishes", e))?;
    let verb = if opts.dry_run {
        "would condemn"
    } else {
        "condemned"
    };
    out.line(format!(
        "live: {} files, {} shards, {} xorbs",
        r.live_files, r.live_shards, r.live_xorbs
    ));
    out.line(format!(
        "{verb}: {} shards, {} xorbs ({} bytes)",
        r.condemned_shards, r.condemned_xorbs, r.condemned_bytes
    ));
    out.line(format!(
        "deleted: {} shards, {} xorbs, {} bytes freed; {} objects wait for their grace period; {:.1} s",
        r.deleted_shards,
        r.deleted_xorbs,
        r.freed_bytes,
        r.pending_objects,
        r.elapsed_ms as f64 / 1000.0
    ));
    out.doc(
        &json!({"ok": true, "dry_run": opts.dry_run, "grace_secs": opts.grace.as_secs(), "gc": r}),
    );
    Ok(())
}

async fn check<B: xet_store::ObjectBackend>(
    out: &Out,
    store: Arc<xet_store::StoreCas<B>>,
    read_data: bool,
) -> CliResult {
    let r = store
        .check(read_data)
        .await
        .map_err(|e| store_failure("the check could not read the store", e))?;
    for p in &r.problems {
        out.line(p);
    }
    out.doc(&json!({"ok": r.problems.is_empty(), "check": r}));
    if r.problems.is_empty() {
        out.line(format!(
            "ok: {} repositories and buckets, {} shards, {} xorbs{}",
            r.repos,
            r.shards,
            r.xorbs,
            if read_data {
                format!(", {} objects read and hashed", r.objects_read)
            } else {
                String::new()
            }
        ));
        return Ok(());
    }
    Err(Failure::input(anyhow!(
        "{} problem(s) found in the store",
        r.problems.len()
    )))
}

async fn stats<B: xet_store::ObjectBackend>(
    out: &Out,
    store: Arc<xet_store::StoreCas<B>>,
) -> CliResult {
    let s = store
        .store_stats()
        .await
        .map_err(|e| store_failure("cannot read the store", e))?;
    for (what, c) in [
        ("xorbs", s.xorbs),
        ("shards", s.shards),
        ("hub", s.hub),
        ("meta", s.meta),
    ] {
        out.line(format!(
            "{what:<8} {:>10} objects {:>16} bytes",
            c.objects, c.bytes
        ));
    }
    out.line(format!(
        "live files: {} ({} bytes) in {} bytes of xorbs: ratio {:.2}",
        s.live_files, s.live_file_bytes, s.live_xorb_bytes, s.dedup_ratio
    ));
    for r in &s.repos {
        out.line(format!(
            "{:<8} {:<40} {:>8} files {:>16} bytes",
            r.kind, r.id, r.files, r.file_bytes
        ));
    }
    out.doc(&json!({"ok": true, "stats": s}));
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_duration("90"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("15m"), Ok(Duration::from_secs(900)));
        assert_eq!(parse_duration("1d"), Ok(Duration::from_secs(86_400)));
        for bad in ["", "d", "1w", "1.5h", "-1s", "99999999999999999999d"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
    }
}
