//! `cargo xtask bench --wan`: `xet` and the reference client side by side over an
//! emulated wide-area link, for RTT 20 ms / 1 Gbit, 80 ms / 200 Mbit, 200 ms / 100 Mbit
//! and 200 ms / 1 Gbit.
//!
//! ```text
//!  namespace xwc<pid> (clients)            namespace xws<pid> (server side)
//!  xet / hf_xet ──→ veth0 10.77.0.1 ══════ veth1 10.77.0.2 ──→ delay proxy :80 ──→ xet serve 127.0.0.1:8080
//!                   tbf (upload rate)       tbf (download rate)   RTT/2 each way     probe server 127.0.0.1:8081
//!                                                                 window W per conn  (proxy :81)
//! ```
//!
//! Two namespaces rather than one next to the host's: nothing on the host's network
//! changes (no interface, address or qdisc appears there), deleting the namespaces takes
//! the veth pair with it, and two bench runs at once do not see each other. `sch_netem`
//! is not available here, hence the delay proxy (`proxy.rs`, with the emulated TCP
//! window, 4 MiB per connection).
//!
//! Rows per profile, the two clients' runs taken in turn (the order rotating each
//! round), best time of `--runs`: a big-file upload and download (MB/s and fraction of
//! the link rate; 1 GiB on 200 ms / 1 Gbit), an upload of 2,000 files of 1-64 KiB next
//! to the time their bytes need on the link (not on 200 ms / 1 Gbit unless asked for),
//! and the time to the first xorb byte of the download; on 80 ms, `xet download hf://`
//! next to `hf download` of a repository of 1,000 of those files, and `xet sync` next to
//! `hf sync` of the 2,000 files up into an empty bucket and down into an empty folder
//! (the requests each made, from the server's request log). Every client talks to a
//! release `xet serve` (directory store) in the server namespace through the link and
//! the delay proxy. CPU seconds per GiB are the client's user + system time (its
//! `/proc/<pid>/stat` read when it has exited, before it is reaped) and the server's over
//! the same run.

mod cases;
mod doc;
mod first_byte;
pub mod link;
mod probe;
pub mod proxy;

use super::inputs::{build_release, file_hash, fresh, input_file, small_files};
use super::measure::Rounds;
use super::opts::Opts;
use super::report::{WanRow, wan_table, write_wan};
use super::serve::Slot;
use anyhow::{Context, Result, bail};
use cases::{Ctx, SMALL_FILES, SMALL_MAX, SMALL_MIN};
use link::{Check, Link, Profile, WINDOW, helper_exe};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

/// The runs here are a few round trips long: a child is sampled every 2 ms.
const POLL: Duration = Duration::from_millis(2);

pub fn run(o: &Opts) -> Result<()> {
    let root = crate::workspace_root();
    if o.check_only {
        return check_only(&root, o);
    }
    let py = crate::reference::python()?;
    let built = match &o.xet {
        Some(x) => std::path::absolute(x)?,
        None => build_release(&root)?,
    };
    // Per process, so two runs at once (each with its own namespaces) do not collide.
    let work = root.join(format!("target/bench-wan/{}", std::process::id()));
    fresh(&work)?;
    let exe = helper_exe(&work)?;
    // A copy: others' builds replace target/release/xet, and the runs must all measure
    // the same binary.
    let xet = work.join("xet");
    std::fs::copy(&built, &xet).with_context(|| format!("copying {}", built.display()))?;
    let (tree, list, small_bytes) = small_files(&work, SMALL_FILES, SMALL_MIN..=SMALL_MAX, 26)?;

    let mut rows = Vec::new();
    let mut checks = Vec::new();
    for p in Profile::ALL {
        let cases = ["upload", "download", "small", "hub", "buckets"].map(|c| wanted(o, &p, c));
        if !cases.iter().any(|&c| c) {
            continue;
        }
        let size_mib = o.size_mib.or(p.big_mib).unwrap_or(256);
        let size = size_mib << 20;
        let (input, hash) = if cases[0] || cases[1] {
            let input = input_file(&root, size_mib)?;
            let hash = file_hash(&xet, &input)?;
            (input, hash)
        } else {
            Default::default()
        };
        eprintln!("== {}: building the link", p.label());
        let link = Link::up(p, o.window, &exe)?;
        let check = Check::parse(&link.check(&exe)?)?.line(&link);
        eprintln!("{check}");
        checks.push(check);
        let ctx = Ctx {
            link: &link,
            exe: &exe,
            xet: &xet,
            py: &py,
            work: &work,
            rounds: Rounds {
                runs: o.runs,
                poll: POLL,
                log: Some(&work),
            },
            server: Slot::default(),
        };
        // Each row is printed as it is measured, too.
        let mut add = |new: Vec<WanRow>| {
            for r in new {
                eprintln!("{}", r.line());
                rows.push(r);
            }
        };
        if cases[0] {
            add(vec![cases::big_upload(&ctx, &input, size)?]);
        }
        if cases[1] {
            add(cases::big_download(&ctx, &input, size, &hash)?.into());
        }
        if cases[2] {
            add(vec![cases::small_upload(&ctx, &tree, &list, small_bytes)?]);
        }
        if cases[3] {
            add(vec![cases::hub_download(&ctx, &list)?]);
        }
        if cases[4] {
            add(cases::bucket_sync(&ctx, &tree, SMALL_FILES, small_bytes)?.into());
        }
        let _ = std::fs::remove_dir_all(work.join("dstore"));
    }
    let table = wan_table(&checks, &rows);
    println!("{table}");
    if o.write && o.only.is_none() {
        write_wan(&root, o, o.window != WINDOW, &table, doc::method)?;
    }
    if o.keep {
        eprintln!("kept {}", work.display());
    } else {
        std::fs::remove_dir_all(&work).ok();
    }
    Ok(())
}

/// Whether case `case` of profile `p` runs: those `--only` selects (all without it),
/// except that the Hub and bucket rows run on the 80 ms profile only (the issues') and
/// the small files not on 200 ms / 1 Gbit (the big file is that profile's point), unless
/// the pattern names them.
fn wanted(o: &Opts, p: &Profile, case: &str) -> bool {
    let named = o.only.as_deref().is_some_and(|w| w.contains(case));
    let by_default = match case {
        "hub" | "buckets" => p.rtt_ms == 80,
        "small" => p.big_mib.is_none(),
        _ => true,
    };
    o.only.as_deref().is_none_or(|w| p.selects(w, case)) && (by_default || named)
}

/// `--check`: each profile's link check, nothing else.
fn check_only(root: &Path, o: &Opts) -> Result<()> {
    let work = root.join(format!("target/bench-wan/{}", std::process::id()));
    fresh(&work)?;
    let exe = helper_exe(&work)?;
    for p in Profile::ALL {
        if o.only
            .as_deref()
            .is_some_and(|w| !p.key().contains(w) && !format!("{}ms", p.rtt_ms).contains(w))
        {
            continue;
        }
        let link = Link::up(p, o.window, &exe)?;
        println!("{}", Check::parse(&link.check(&exe)?)?.line(&link));
    }
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

/// `bench --wan-helper proxy|probe-server|probe|create-bucket ...`: the processes the
/// link runs in its namespaces (this same binary).
pub fn helper(args: &[String]) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let a = |i: usize| -> Result<&str> {
        args.get(i)
            .map(String::as_str)
            .with_context(|| format!("--wan-helper: argument {i} missing"))
    };
    match a(0)? {
        "proxy" => {
            let listen: SocketAddr = a(1)?.parse()?;
            let target: SocketAddr = a(2)?.parse()?;
            let shape = proxy::Shape {
                rtt: Duration::from_millis(a(3)?.parse()?),
                line_bytes: a(4)?.parse()?,
                window: a(5)?.parse()?,
            };
            rt.block_on(proxy::serve(listen, target, shape))
        }
        "probe-server" => rt.block_on(probe::server(a(1)?.parse()?)),
        "probe" => rt.block_on(probe::client(
            a(1)?.parse()?,
            a(2)?.parse()?,
            a(3)?.parse()?,
            a(4)?.parse()?,
        )),
        // Bucket rows: an empty bucket made on the server's side of the link.
        "create-bucket" => super::buckets::create_bucket(a(1)?, a(2)?),
        other => bail!("unknown --wan-helper {other}"),
    }
}
