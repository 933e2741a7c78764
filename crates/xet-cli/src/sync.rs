//! `xet sync SRC DST`: a local folder and `hf://buckets/NS/NAME[/PREFIX]` made alike, one
//! way, with the flags and the plan files of `hf buckets sync`; the work is in
//! `xet_hub_client::sync`. Output: `hf`'s summary lines (`-v` adds a line per path), the
//! plan as JSONL with `--dry-run`, one JSON document with `--json`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::json;
use xet_hub::RepoType;
use xet_hub_client::bucket_transfer::BucketOptions;
use xet_hub_client::sync::run::{Done, Ends, SyncProgress, execute, plan};
use xet_hub_client::sync::{Action, Direction, Filter, Plan, Rules, plan_file};
use xet_hub_client::{HfAddress, HubClient, HubEnv};

use crate::exit::{CliResult, Failure};
use crate::hub_client::{client, failure, usage};
use crate::output::Out;

/// `xet sync`.
#[derive(clap::Args, Debug)]
pub struct SyncArgs {
    /// A local folder or hf://buckets/NS/NAME[/PREFIX].
    src: Option<String>,
    /// The other side: hf://buckets/NS/NAME[/PREFIX] or a local folder.
    dst: Option<String>,
    /// Delete destination files the source does not have.
    #[arg(long)]
    delete: bool,
    /// Compare sizes only.
    #[arg(long, conflicts_with = "ignore_sizes")]
    ignore_times: bool,
    /// Compare modification times only.
    #[arg(long)]
    ignore_sizes: bool,
    /// Only update files the destination has.
    #[arg(long, conflicts_with = "ignore_existing")]
    existing: bool,
    /// Never touch files the destination has.
    #[arg(long)]
    ignore_existing: bool,
    /// Compare sizes and Xet hashes (computed locally) instead of times.
    #[arg(long, conflicts_with_all = ["ignore_times", "ignore_sizes"])]
    checksum: bool,
    /// Only paths matching PATTERN (fnmatch; `*` matches `/` too). Repeatable.
    #[arg(long, value_name = "PATTERN")]
    include: Vec<String>,
    /// Leave out paths matching PATTERN. Repeatable.
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Rules from FILE, first match decides: `+ PATTERN` includes, `- PATTERN` excludes.
    #[arg(long, value_name = "FILE")]
    filter_from: Option<PathBuf>,
    /// Print the plan (JSONL) and do nothing.
    #[arg(long, conflicts_with = "plan")]
    dry_run: bool,
    /// Write the plan to FILE and do nothing (run it later with --apply FILE).
    #[arg(long, value_name = "FILE")]
    plan: Option<PathBuf>,
    /// Carry out a plan written by --plan (xet's or hf's); takes no other arguments.
    #[arg(long, value_name = "FILE", conflicts_with_all = [
        "src", "dst", "delete", "ignore_times", "ignore_sizes", "existing", "ignore_existing",
        "checksum", "include", "exclude", "filter_from", "dry_run", "plan"])]
    apply: Option<PathBuf>,
    /// A line per path: what is done to it and why.
    #[arg(short, long)]
    verbose: bool,
    /// Hub token (else HF_TOKEN, else the token file of `hf auth login`).
    #[arg(long, hide_env_values = true)]
    token: Option<String>,
}

pub async fn sync(out: &Out, a: SyncArgs) -> CliResult {
    let client = client(&HubEnv::from_process(), a.token.as_deref())?;
    if let Some(file) = &a.apply {
        return apply(out, &client, file, a.verbose).await;
    }
    let (Some(src), Some(dst)) = (&a.src, &a.dst) else {
        return Err(usage("xet sync takes SRC and DST (or --apply FILE)"));
    };
    let ends = ends(src, dst)?;
    let rules = Rules {
        delete: a.delete,
        ignore_times: a.ignore_times,
        ignore_sizes: a.ignore_sizes,
        existing: a.existing,
        ignore_existing: a.ignore_existing,
        checksum: a.checksum,
    };
    if let Some(what) = rules.conflict() {
        return Err(usage(format!("{what} cannot be used together")));
    }
    let mut filter = Filter::new(&a.include, &a.exclude);
    if let Some(f) = &a.filter_from {
        filter = filter.with_rules_from(f).map_err(|e| {
            Failure::input(anyhow::Error::new(e).context(format!("cannot read {}", f.display())))
        })?;
    }
    let planned = plan(&client, &ends, &rules, &filter)
        .await
        .map_err(failure)?;
    let p = &planned.plan;
    if a.dry_run {
        print!("{}", plan_file::write(p));
        return Ok(());
    }
    if let Some(file) = &a.plan {
        std::fs::write(file, plan_file::write(p)).map_err(|e| {
            Failure::input(
                anyhow::Error::new(e).context(format!("cannot write {}", file.display())),
            )
        })?;
        summary(out, p);
        say(out, format!("Plan saved to: {}", file.display()));
        if !out.json && !out.quiet {
            eprintln!(
                "Run `xet sync --apply {}` to execute this plan.",
                file.display()
            );
        }
        out.doc(&document(p, None, Some(file)));
        return Ok(());
    }
    summary(out, p);
    if p.is_noop() {
        verbose_lines(out, p, a.verbose);
        say(out, "Nothing to sync.");
        out.doc(&document(p, Some(&Done::default()), None));
        return Ok(());
    }
    say(out, "Syncing...");
    verbose_lines(out, p, a.verbose);
    let (pb, progress) = bars(out, p);
    let done = execute(&client, &ends, p, Some(&planned), &options(), progress).await;
    pb.finish_and_clear();
    finished(out, p, &done.map_err(failure)?);
    Ok(())
}

async fn apply(out: &Out, client: &HubClient, file: &Path, verbose: bool) -> CliResult {
    let text = std::fs::read_to_string(file).map_err(|e| {
        Failure::input(anyhow::Error::new(e).context(format!("cannot read {}", file.display())))
    })?;
    let p = plan_file::read(&text).map_err(|e| {
        Failure::input(
            anyhow::Error::new(e).context(format!("{} is not a sync plan", file.display())),
        )
    })?;
    let ends = ends(&p.source, &p.dest)?;
    summary(out, &p);
    say(out, "Executing plan...");
    verbose_lines(out, &p, verbose);
    let (pb, progress) = bars(out, &p);
    let done = execute(client, &ends, &p, None, &options(), progress).await;
    pb.finish_and_clear();
    finished(out, &p, &done.map_err(failure)?);
    Ok(())
}

/// Which side is the bucket: exactly one of the two.
fn ends(src: &str, dst: &str) -> CliResult<Ends> {
    let (direction, local, remote) = match (HfAddress::is_hf(src), HfAddress::is_hf(dst)) {
        (true, true) => {
            return Err(usage(
                "remote to remote sync is not supported: one side of xet sync is a local folder",
            ));
        }
        (false, false) => {
            return Err(usage(
                "one side of xet sync must be hf://buckets/NS/NAME[/PREFIX]",
            ));
        }
        (false, true) => (Direction::Upload, src, dst),
        (true, false) => (Direction::Download, dst, src),
    };
    let addr = HfAddress::parse(remote).map_err(|e| usage(e.to_string()))?;
    if addr.repo.kind != RepoType::Bucket {
        return Err(usage(format!(
            "{remote} is a repository; xet sync works with buckets (hf://buckets/NS/NAME/...); use xet upload or xet download"
        )));
    }
    Ok(Ends {
        direction,
        local: PathBuf::from(local),
        bucket: addr.repo,
        prefix: addr.path,
        source_text: src.to_string(),
        dest_text: dst.to_string(),
    })
}

/// A status line, unless `-q`.
fn say(out: &Out, s: impl AsRef<str>) {
    if !out.quiet {
        out.line(s);
    }
}

fn options() -> BucketOptions {
    BucketOptions::default()
}

/// One bar (on a terminal, not with --json or -q) for the bytes the plan moves.
fn bars(out: &Out, p: &Plan) -> (indicatif::ProgressBar, SyncProgress) {
    let total = p.summary().total_size;
    let pb = crate::progress::bar(!out.json && !out.quiet, total, "sync");
    let down = pb.clone();
    let download: xet_download::ProgressFn = Arc::new(move |e| {
        if let xet_download::ProgressEvent::Written { bytes, .. } = e {
            down.inc(*bytes);
        }
    });
    let progress = SyncProgress {
        upload: Arc::new(crate::transfer::UploadBar(pb.clone())),
        download: Some(download),
    };
    (pb, progress)
}

/// `hf`'s summary: `Sync plan: SRC -> DST` and the counts.
fn summary(out: &Out, p: &Plan) {
    let s = p.summary();
    say(out, format!("Sync plan: {} -> {}", p.source, p.dest));
    say(out, format!("  Uploads: {}", s.uploads));
    say(out, format!("  Downloads: {}", s.downloads));
    say(out, format!("  Deletes: {}", s.deletes));
    say(out, format!("  Skips: {}", s.skips));
}

fn verbose_lines(out: &Out, p: &Plan, verbose: bool) {
    if !verbose || out.quiet {
        return;
    }
    for op in &p.ops {
        say(
            out,
            format!("  {}: {} ({})", op.action.verb(), op.path, op.reason),
        );
    }
}

fn finished(out: &Out, p: &Plan, done: &Done) {
    if done.created_bucket {
        say(out, format!("Created the private bucket {}", p.dest));
    }
    say(out, "Sync completed.");
    out.doc(&document(p, Some(done), None));
}

/// The `--json` document: the plan's counts, what was done, and every path not skipped.
fn document(p: &Plan, done: Option<&Done>, plan_file: Option<&Path>) -> serde_json::Value {
    let ops: Vec<serde_json::Value> = p
        .ops
        .iter()
        .filter(|o| o.action != Action::Skip)
        .map(|o| json!({"action": o.action.as_str(), "path": o.path, "reason": o.reason, "size": o.size}))
        .collect();
    let mut doc = json!({
        "ok": true,
        "source": p.source,
        "dest": p.dest,
        "summary": p.summary(),
        "operations": ops,
    });
    if let Some(d) = done {
        doc["done"] = json!(d);
    }
    if let Some(f) = plan_file {
        doc["plan_file"] = json!(f);
    }
    doc
}
