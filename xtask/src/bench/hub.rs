//! Group `hub`: `xet download/upload hf://` next to the real `hf` CLI (`huggingface_hub`
//! with `hf_xet`, from the test virtualenv), both against a release `xet serve` on
//! loopback speaking the Hub API, and a plain `curl` of a resolve URL.
//!
//! Besides each client's speed, peak RSS and CPU time, each row reports the server's CPU
//! seconds per GiB moved: `utime + stime` of the `xet serve` process (all its threads,
//! from `/proc/<pid>/stat`) read just before and just after each measured run, as a
//! range over the runs.

use super::inputs::{Setup, fresh, warm};
use super::measure::{Contender, Rounds, Run, best, interleave, sides};
use super::report::{Row, cpu_range};
use super::serve::{HUB_TOKEN, Serve, Slot, hf_quiet, hub_client, xet_client};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// What the cases share: the server at hand, the clients and their homes.
struct Hub<'a> {
    s: &'a Setup,
    hf: PathBuf,
    work: PathBuf,
    server: Slot,
    rounds: Rounds<'static>,
}

impl Hub<'_> {
    fn p(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// `xet ARGS` against the server, everything under `home`.
    fn xet(&self, args: &[&str], home: &str) -> Command {
        let mut c = xet_client(Command::new(&self.s.xet), args, None);
        hub_client(&mut c, &self.server.url(), &self.p(home));
        c
    }

    /// `hf ARGS` against the server, everything under `home`.
    fn hf(&self, args: &[&str], home: &str) -> Command {
        let mut c = Command::new(&self.hf);
        c.args(args);
        hub_client(&mut c, &self.server.url(), &self.p(home));
        hf_quiet(&mut c);
        c
    }

    /// The server cell of a row with both clients.
    fn server_cpu(&self, x: &[Run], h: &[Run]) -> String {
        let size = self.s.size;
        format!("xet {}, hf {}", cpu_range(x, size), cpu_range(h, size))
    }
}

pub fn rows(s: &Setup) -> Result<Vec<Row>> {
    let work = crate::workspace_root().join("target/bench-hub");
    fresh(&work)?;
    let hub = Hub {
        s,
        hf: xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?,
        work,
        server: Slot::default(),
        rounds: Rounds::loopback(s.runs),
    };
    // Downloads: one server whose store holds org/bench, uploaded once before timing.
    fresh(&hub.p("store"))?;
    hub.server
        .set(Serve::loopback(&s.xet, hub.p("store")).hub().start()?);
    fresh(&hub.p("prep"))?;
    let inp = s.input_str()?;
    let st = hub
        .xet(&["upload", inp, "hf://org/bench"], "prep")
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("uploading {inp} to hf://org/bench failed");
    }
    let mut rows = vec![download(&hub)?];
    rows.extend(resolve(&hub, &s.input)?);
    hub.server.stop();
    rows.push(upload(&hub)?);
    std::fs::remove_dir_all(&hub.work).ok();
    Ok(rows)
}

fn download(hub: &Hub<'_>) -> Result<Row> {
    let pid = || hub.server.pid();
    let [x, h] = sides(interleave(
        &hub.rounds,
        vec![
            Contender::new(
                || Ok(hub.xet(&["download", "hf://org/bench"], "xd")),
                || {
                    warm(&hub.p("store"))?;
                    fresh(&hub.p("xd"))
                },
            )
            .server(pid),
            Contender::new(
                || Ok(hub.hf(&["download", "org/bench"], "hd")),
                || {
                    warm(&hub.p("store"))?;
                    fresh(&hub.p("hd"))
                },
            )
            .server(pid),
        ],
    )?);
    let case = format!(
        "hub download {} MiB into the HF cache (`xet download hf://` / `hf download`, from xet serve)",
        hub.s.mib()
    );
    Ok(Row::vs(case, hub.s.size, best(&x), best(&h), "").server_cpu(hub.server_cpu(&x, &h)))
}

/// A plain HTTP client: the server reconstructs the file and streams it. No row without
/// `curl`.
fn resolve(hub: &Hub<'_>, input: &Path) -> Result<Option<Row>> {
    let curl_ok = Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !curl_ok {
        eprintln!("note: curl not found; the `resolve GET` row is left out");
        return Ok(None);
    }
    let file_name = input
        .file_name()
        .and_then(|n| n.to_str())
        .context("input file name")?;
    let resolve = format!("{}/org/bench/resolve/main/{file_name}", hub.server.url());
    let [runs] = sides(interleave(
        &hub.rounds,
        vec![
            Contender::new(
                || {
                    let mut c = Command::new("curl");
                    c.args(["-sS", "-f", "-o", "/dev/null", "-H"])
                        .arg(format!("Authorization: Bearer {HUB_TOKEN}"))
                        .arg(&resolve);
                    Ok(c)
                },
                || warm(&hub.p("store")),
            )
            .server(|| hub.server.pid()),
        ],
    )?);
    let case = format!("resolve GET {} MiB (curl)", hub.s.mib());
    Ok(Some(
        Row::xet(case, hub.s.size, best(&runs)).server_cpu(cpu_range(&runs, hub.s.size)),
    ))
}

/// Uploads: a fresh store and server for every run (else dedup makes later runs
/// trivial), fresh caches for the client.
fn upload(hub: &Hub<'_>) -> Result<Row> {
    let s = hub.s;
    let inp = s.input_str()?;
    let restart = |client: &str| -> Result<()> {
        warm(&s.input)?;
        fresh(&hub.p(client))?;
        let serve = |store: &Path| Serve::loopback(&s.xet, store).hub();
        hub.server.restart(&hub.p("store"), serve)
    };
    let pid = || hub.server.pid();
    let repo = format!("org/bench{}", s.mib());
    let addr = format!("hf://{repo}");
    let [x, h] = sides(interleave(
        &hub.rounds,
        vec![
            Contender::new(
                || Ok(hub.xet(&["upload", inp, &addr], "xu")),
                || restart("xu"),
            )
            .server(pid),
            Contender::new(
                || Ok(hub.hf(&["upload", &repo, inp], "hu")),
                || restart("hu"),
            )
            .server(pid),
        ],
    )?);
    hub.server.stop();
    let case = format!(
        "hub upload {} MiB (`xet upload hf://` / `hf upload`, to xet serve)",
        s.mib()
    );
    Ok(Row::vs(case, s.size, best(&x), best(&h), "").server_cpu(hub.server_cpu(&x, &h)))
}
