//! The flags of `cargo xtask bench` and `bench --wan`: one parser, the wide-area flags
//! accepted only with `--wan`.

use super::wan::link::WINDOW;
use anyhow::{Context, Result, bail};
use std::path::PathBuf;

pub const USAGE: &str =
    "usage: cargo xtask bench [--size-mib N] [--runs N] [--only GROUP] [--no-write]
  --size-mib N   input size for the upload/download cases (default 1024)
  --runs N       measured runs per contender, best taken (default 2)
  --only GROUP   only one group of cases: micro, hash, upload, small, download, hub, bundle,
                 load, scale (the Hub at scale: its own table of goals), buckets
                 (Storage Buckets next to `hf`: its own table), gc (the store's
                 lifecycle commands: its own table), web (the web pages under 32
                 clients: its own table) or mount (`xet mount` next to the downloads,
                 cold: its own table)
  --no-write     print the table without rewriting docs/BENCHMARKS.md
  --wan          the emulated wide-area link instead (see `cargo xtask bench --wan --help`)";

const WAN_USAGE: &str =
    "usage: cargo xtask bench --wan [--size-mib N] [--runs N] [--only PATTERN] [--no-write]
  --size-mib N     big-file size (default 256, and 1024 on 200ms/1g)
  --runs N         runs per contender, best taken (default 2)
  --only PATTERN   rows whose key contains PATTERN: keys are RTT/RATE/CASE or RTT/CASE,
                   RTT/RATE one of 20ms/1g, 80ms/200m, 200ms/100m, 200ms/1g and CASE one
                   of upload, download, small, hub, buckets (e.g. --only 80ms/small,
                   --only 200ms/1g; 200ms names both 200 ms profiles; the download rows
                   give the first-byte row; hub and buckets run on 80ms only and small
                   not on 200ms/1g unless PATTERN names them)
  --window-kib N   bytes in flight per connection and direction (default 4096: the
                   emulated TCP window, see bench/wan/proxy.rs)
  --no-write       do not update docs/BENCHMARKS.md (also not with --only)
  --keep           keep the work directory (target/bench-wan/PID): each run's client
                   stderr (stderr-ROUND-SIDE.txt) and the server's request log
                   (store.log); set XET_LOG for more
  --xet PATH       measure this xet binary instead of building target/release/xet
                   (e.g. a copy of a baseline build, for a before/after)
  --check          only build each profile's link and print its check (no clients)";

pub struct Opts {
    /// `--wan`: the emulated wide-area link instead of loopback.
    pub wan: bool,
    /// `None`: the default, 1024 MiB on loopback; 256 MiB or the profile's own with `--wan`.
    pub size_mib: Option<u64>,
    pub runs: usize,
    pub only: Option<String>,
    pub write: bool,
    /// With `--wan`: bytes in flight per connection and direction.
    pub window: usize,
    pub keep: bool,
    pub check_only: bool,
    pub xet: Option<PathBuf>,
}

pub fn parse(args: &[String]) -> Result<Opts> {
    let mut args = args.to_vec();
    let wan = match args.iter().position(|a| a == "--wan") {
        Some(i) => {
            args.remove(i);
            true
        }
        None => false,
    };
    let usage = if wan { WAN_USAGE } else { USAGE };
    let mut o = Opts {
        wan,
        size_mib: None,
        runs: 2,
        only: None,
        write: true,
        window: WINDOW,
        keep: false,
        check_only: false,
        xet: None,
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        let mut val = || {
            it.next()
                .cloned()
                .with_context(|| format!("{a} needs a value"))
        };
        match a.as_str() {
            "--size-mib" => o.size_mib = Some(val()?.parse()?),
            "--runs" => o.runs = val()?.parse()?,
            "--only" => o.only = Some(val()?),
            "--no-write" => o.write = false,
            "--window-kib" if wan => o.window = val()?.parse::<usize>()? << 10,
            "--keep" if wan => o.keep = true,
            "--check" if wan => o.check_only = true,
            "--xet" if wan => o.xet = Some(PathBuf::from(val()?)),
            "-h" | "--help" => {
                println!("{usage}");
                std::process::exit(0);
            }
            // The wording each command has always had.
            _ if wan => bail!("unknown flag {a}\n{usage}"),
            _ => bail!("unknown bench flag {a}\n{usage}"),
        }
    }
    Ok(o)
}
