//! `xet mount SOURCE DIR`: a Hub repository (read-only) or bucket (read-write) as a
//! folder over FUSE, in the foreground until SIGINT, SIGTERM or `umount DIR`; the
//! filesystem is `xet_mount`'s.

use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;
use xet_hub_client::{HfAddress, HubEnv};
use xet_mount::{MountOptions, Source};

mod daemon;

use crate::exit::{CliResult, Code, Failure};
use crate::hub_client::{client, usage};
use crate::output::Out;

/// `xet mount`.
#[derive(clap::Args, Debug)]
pub struct MountArgs {
    /// hf://[datasets/|spaces/]NS/NAME[@REV][/PATH] (read-only, at the commit REV names
    /// now) or hf://buckets/NS/NAME[/PREFIX] (read-write).
    source: String,
    /// An existing empty folder.
    dir: PathBuf,
    /// Follow changes made elsewhere: a bucket's other writers through its events feed
    /// as they happen (resumed within SECS when the stream breaks), or by polling every
    /// SECS seconds when the server has no feed; a branch's new commits by polling.
    /// Default: 10 for a bucket, never for a repository (pinned). 0: never.
    #[arg(long, value_name = "SECS")]
    refresh: Option<u64>,
    /// Most bytes of read-ahead held in memory across all open files ("512M", "2G").
    #[arg(long, default_value = "1G", value_parser = crate::transfer::parse_size)]
    max_memory: u64,
    /// A read that gets no byte for this many seconds is retried, and fails with EIO
    /// after a few.
    #[arg(long, default_value_t = 20, value_name = "SECS")]
    stall_timeout: u64,
    /// Cache directory (the chunk cache `xet download` shares).
    #[arg(long, env = "XET_CACHE")]
    cache_dir: Option<PathBuf>,
    /// No chunk cache on disk.
    #[arg(long)]
    no_cache: bool,
    /// Mount a bucket read-only too.
    #[arg(long)]
    read_only: bool,
    /// Hub token (else HF_TOKEN, else the token file of `hf auth login`).
    #[arg(long, hide_env_values = true)]
    token: Option<String>,
    /// Run in the background: return once mounted, printing the mount's pid and log
    /// file; `umount DIR` (or SIGTERM to the pid) stops it.
    #[arg(long)]
    daemon: bool,
    /// With --daemon: the mount's log (default: CACHE_DIR/mounts/SECS-PID.log).
    #[arg(long, value_name = "FILE", requires = "daemon")]
    log_file: Option<PathBuf>,
}

pub async fn mount(out: &Out, a: MountArgs) -> CliResult {
    let addr = HfAddress::parse(&a.source).map_err(|e| usage(e.to_string()))?;
    if a.daemon {
        let log = (a.log_file.clone()).unwrap_or_else(|| daemon::default_log(&a.cache_dir));
        return daemon::start(out, &a.dir, log).await;
    }
    let source = Source::from_address(addr);
    let client = client(&HubEnv::from_process(), a.token.as_deref())?;
    let bucket = matches!(source, Source::Bucket { .. });
    let refresh = match (a.refresh, bucket) {
        (Some(0), _) | (None, false) => None,
        (Some(s), _) => Some(Duration::from_secs(s)),
        (None, true) => Some(Duration::from_secs(10)),
    };
    let cache = (!a.no_cache).then(|| {
        xet_download::CacheConfig::new(crate::remote::cache_dir(&a.cache_dir))
            .with_link_files(false)
    });
    let opts = MountOptions {
        refresh,
        max_memory: a.max_memory.max(8 << 20),
        stall_timeout: Duration::from_secs(a.stall_timeout.max(1)),
        cache,
        staging_dir: None,
        read_only: a.read_only,
    };
    let mounted = xet_mount::mount(client, source, &a.dir, opts)
        .await
        .map_err(|e| Failure::new(Code::Failure, anyhow::Error::new(e)))?;
    let shown = mounted.source.to_string();
    if out.json {
        // One line, at once: whoever waits for the mount reads it.
        println!(
            "{}",
            json!({"ok": true, "mounted": shown, "dir": a.dir, "commit": mounted.commit, "files": mounted.files})
        );
    } else {
        out.line(format!("mounted {shown} at {}", a.dir.display()));
    }
    wait(&mounted).await;
    mounted.unmount().await;
    Ok(())
}

/// Until SIGINT, SIGTERM, or the mount is gone (`umount DIR`).
async fn wait(mounted: &xet_mount::Mounted) {
    use tokio::signal::unix::{SignalKind, signal};
    let (Ok(mut term), Ok(mut int)) = (
        signal(SignalKind::terminate()),
        signal(SignalKind::interrupt()),
    ) else {
        // No signal handlers: wait for the unmount alone.
        while !mounted.ended() {
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        return;
    };
    loop {
        tokio::select! {
            _ = term.recv() => return,
            _ = int.recv() => return,
            _ = tokio::time::sleep(Duration::from_millis(200)) => {
                if mounted.ended() {
                    return;
                }
            }
        }
    }
}
