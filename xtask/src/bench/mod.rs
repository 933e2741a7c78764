//! `cargo xtask bench [--size-mib N] [--runs N] [--only GROUP] [--no-write]`
//!
//! Throughput, peak RSS and CPU time of `xet` next to the reference client, same input,
//! same run. Each case runs as a child process; peak RSS is the child's `VmHWM` from
//! `/proc/<pid>/status`, sampled until it exits, and its CPU time is read from
//! `/proc/<pid>/stat` once it has exited, before it is reaped. The table goes to stdout
//! and to `docs/BENCHMARKS.md` (unless `--no-write`). Rows with a peak RSS bound make
//! the bench fail when `xet` goes above it.
//!
//! Each group of cases is a module ([`GROUPS`]) on a small shared library: `serve.rs`
//! (starting `xet serve`, the clients' commands), `proc.rs` and `measure.rs` (sampling
//! and the measuring loop), `report.rs` (the tables and the doc). `--wan`, the emulated
//! wide-area link, is `wan/`. `scale` (the Hub at scale) and `buckets` (Storage Buckets
//! next to the `hf` CLI) `web` (the web pages under 32 clients) and `mount`
//! (`xet mount` next to the downloads) print tables of their own, each in its own section
//! of the doc.

mod buckets;
mod bundle;
mod gc;
mod hub;
mod inputs;
mod load;
mod measure;
mod micro;
mod mount;
mod opts;
mod proc;
mod report;
mod scale;
mod serve;
mod transfer;
mod wan;
mod web;

pub use opts::USAGE;

use anyhow::Result;
use inputs::Setup;
use report::Row;

type Group = fn(&Setup) -> Result<Vec<Row>>;

/// The loopback groups in table order, by the name `--only` gives.
const GROUPS: [(&str, Group); 8] = [
    ("micro", micro::rows),
    ("hash", transfer::hash),
    ("upload", transfer::upload),
    ("small", transfer::small),
    ("download", transfer::download),
    ("hub", hub::rows),
    ("bundle", bundle::rows),
    ("load", load::rows),
];

pub fn run(args: &[String]) -> Result<()> {
    // The link's helper processes are this binary too.
    if args.first().map(String::as_str) == Some("--wan-helper") {
        return wan::helper(&args[1..]);
    }
    let o = opts::parse(args)?;
    if o.wan {
        return wan::run(&o);
    }
    let root = crate::workspace_root();
    if o.only.as_deref() == Some("scale") {
        // Its own table: goals, not a reference to compare with.
        return scale::run(&inputs::build_release(&root)?, o.write);
    }
    if o.only.as_deref() == Some("gc") {
        // Its own table (the store's lifecycle commands); no input file.
        return gc::run(&inputs::build_release(&root)?, o.write);
    }
    if o.only.as_deref() == Some("web") {
        // Its own table: pages under concurrent clients; no big input file.
        return web::run(&inputs::build_release(&root)?, o.write);
    }
    if o.only.as_deref() == Some("mount") {
        // Its own table: the mount next to the downloads, cold; inputs of its own.
        return mount::run(&inputs::build_release(&root)?, o.runs, o.write);
    }
    if o.only.as_deref() == Some("buckets") {
        // Its own table (times, requests, goals) and section; no big input file.
        return buckets::run(&inputs::build_release(&root)?, o.runs, o.write);
    }
    let size_mib = o.size_mib.unwrap_or(1024);
    let setup = Setup::new(&root, &o, size_mib)?;
    let mut rows = Vec::new();
    // Both sides read from memory: the input is warmed before every run that reads it.
    for (name, group) in GROUPS {
        // A group runs when there is no `--only` or it names that group exactly.
        if o.only.as_deref().is_none_or(|w| w == name) {
            rows.extend(group(&setup)?);
        }
    }
    let table = report::table(&rows);
    println!("{table}");
    if o.write {
        report::write_loopback(&root, &o, size_mib, &table)?;
    }
    if o.only.is_none() {
        // Its peak RSS bound is checked after the scale rows have run too.
        let buckets = buckets::run(&setup.xet, o.runs, o.write);
        scale::run(&setup.xet, o.write)?;
        buckets?;
    }
    report::check_bounds(&rows)
}
