//! Hub benchmarks (group `hub`): `xet download/upload hf://` next to the real `hf` CLI
//! (`huggingface_hub` with `hf_xet`, from the test virtualenv), both against a release
//! `xet serve` on loopback speaking the Hub API, and a plain `curl` of a resolve URL.
//!
//! Besides each client's speed, peak RSS and CPU time, each row reports the server's CPU seconds
//! per GiB moved: `utime + stime` of the `xet serve` process (all its threads, from
//! `/proc/<pid>/stat`) read just before and just after each measured run, as a range
//! over the runs.

use crate::bench::{
    BenchSample, Contender, CpuMeter, CpuRuns, Served, TransferOpts, bench_interleaved, fresh, warm,
};
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// The user token of the bench server (write access); every client sends it.
const TOKEN: &str = "hf_bench_write";

/// One row of the hub group.
pub struct HubRow {
    pub case: String,
    pub bytes: u64,
    pub ours: BenchSample,
    pub reference: Option<BenchSample>,
    /// Server CPU seconds per GiB, as shown in the table.
    pub server_cpu: String,
}

/// A release `xet serve` with a write token, on loopback.
fn serve(xet: &Path, store: &Path) -> Result<Served> {
    let mut c = Command::new(xet);
    c.args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store)
        .args(["--token", &format!("write:{TOKEN}")])
        .env_remove("XET_TOKEN")
        .stderr(Stdio::null());
    Served::spawn(c, "xet serve")
}

/// `xet` against the Hub at `url`, with the bench token, caches and HF homes of its own.
fn xet_cmd(xet: &Path, url: &str, args: &[&str], home: &Path) -> Command {
    let mut c = Command::new(xet);
    c.args(args)
        .env("HF_ENDPOINT", url)
        .env("HF_TOKEN", TOKEN)
        .env("HF_HOME", home.join("hf-home"))
        .env("HF_HUB_CACHE", home.join("hub-cache"))
        .env("XET_CACHE", home.join("xet-cache"))
        .env_remove("HF_TOKEN_PATH")
        .env_remove("XET_TOKEN")
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_TOKEN_URL");
    c
}

/// The `hf` CLI against the Hub at `url`, with `HF_HOME` (and so its caches) in `home`,
/// no update check, telemetry or progress bars.
fn hf_cmd(hf: &Path, url: &str, args: &[&str], home: &Path) -> Command {
    let mut c = Command::new(hf);
    c.args(args)
        .env("HF_ENDPOINT", url)
        .env("HF_TOKEN", TOKEN)
        .env("HF_HOME", home)
        .env("HF_HUB_DISABLE_UPDATE_CHECK", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_XET_TELEMETRY_ENABLED", "0")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        .env_remove("HF_HUB_CACHE")
        .env_remove("HF_XET_CACHE")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("HF_TOKEN_PATH");
    c
}

pub fn run(
    o: &TransferOpts,
    xet: &Path,
    input: &Path,
    size: u64,
    want: &dyn Fn(&str) -> bool,
) -> Result<Vec<HubRow>> {
    let mut rows = Vec::new();
    if !want("hub") {
        return Ok(rows);
    }
    let hf = xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?;
    let work = crate::workspace_root().join("target/bench-hub");
    fresh(&work)?;
    let p = |s: &str| -> PathBuf { work.join(s) };
    let inp = input.to_str().context("input path")?;
    let file_name = input
        .file_name()
        .and_then(|n| n.to_str())
        .context("input file name")?
        .to_string();
    let mib = size >> 20;
    let server: RefCell<Option<Served>> = RefCell::new(None);
    let url = || {
        server
            .borrow()
            .as_ref()
            .map(|s| s.url.clone())
            .unwrap_or_default()
    };
    let pid = || server.borrow().as_ref().map(|s| s.child.id());
    let meter = CpuMeter::new(size);

    // Downloads: one server whose store holds org/bench, uploaded once before timing.
    fresh(&p("store"))?;
    *server.borrow_mut() = Some(serve(xet, &p("store"))?);
    fresh(&p("prep"))?;
    let st = xet_cmd(xet, &url(), &["upload", inp, "hf://org/bench"], &p("prep"))
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("uploading {inp} to hf://org/bench failed");
    }
    let (ours_cpu, ref_cpu) = (CpuRuns::default(), CpuRuns::default());
    let [ours, reference] = pair(bench_interleaved(
        o.runs,
        vec![
            Contender::new(
                || {
                    meter.start(pid())?;
                    Ok(xet_cmd(
                        xet,
                        &url(),
                        &["download", "hf://org/bench"],
                        &p("xd"),
                    ))
                },
                || {
                    warm(&p("store"))?;
                    fresh(&p("xd"))
                },
            )
            .after(|| meter.end(pid(), &ours_cpu)),
            Contender::new(
                || {
                    meter.start(pid())?;
                    Ok(hf_cmd(&hf, &url(), &["download", "org/bench"], &p("hd")))
                },
                || {
                    warm(&p("store"))?;
                    fresh(&p("hd"))
                },
            )
            .after(|| meter.end(pid(), &ref_cpu)),
        ],
    )?);
    rows.push(HubRow {
        case: format!(
            "hub download {mib} MiB into the HF cache (`xet download hf://` / `hf download`, from xet serve)"
        ),
        bytes: size,
        ours,
        reference: Some(reference),
        server_cpu: format!("xet {}, hf {}", ours_cpu.range(), ref_cpu.range()),
    });

    // A plain HTTP client: the server reconstructs the file and streams it.
    let curl_ok = Command::new("curl")
        .arg("--version")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if curl_ok {
        let curl_cpu = CpuRuns::default();
        let resolve = format!("{}/org/bench/resolve/main/{file_name}", url());
        let ours = bench_interleaved(
            o.runs,
            vec![
                Contender::new(
                    || {
                        meter.start(pid())?;
                        let mut c = Command::new("curl");
                        c.args(["-sS", "-f", "-o", "/dev/null", "-H"])
                            .arg(format!("Authorization: Bearer {TOKEN}"))
                            .arg(&resolve);
                        Ok(c)
                    },
                    || warm(&p("store")),
                )
                .after(|| meter.end(pid(), &curl_cpu)),
            ],
        )?
        .remove(0);
        rows.push(HubRow {
            case: format!("resolve GET {mib} MiB (curl)"),
            bytes: size,
            ours,
            reference: None,
            server_cpu: curl_cpu.range(),
        });
    } else {
        eprintln!("note: curl not found; the `resolve GET` row is left out");
    }
    *server.borrow_mut() = None;

    // Uploads: a fresh store and server for every run (else dedup makes later runs
    // trivial), fresh caches for the client.
    let restart = |client_dir: &str| -> Result<()> {
        *server.borrow_mut() = None;
        fresh(&p("store"))?;
        fresh(&p(client_dir))?;
        *server.borrow_mut() = Some(serve(xet, &p("store"))?);
        Ok(())
    };
    let repo = format!("org/bench{mib}");
    let addr = format!("hf://{repo}");
    let (ours_cpu, ref_cpu) = (CpuRuns::default(), CpuRuns::default());
    let [ours, reference] = pair(bench_interleaved(
        o.runs,
        vec![
            Contender::new(
                || {
                    meter.start(pid())?;
                    Ok(xet_cmd(xet, &url(), &["upload", inp, &addr], &p("xu")))
                },
                || {
                    warm(input)?;
                    restart("xu")
                },
            )
            .after(|| meter.end(pid(), &ours_cpu)),
            Contender::new(
                || {
                    meter.start(pid())?;
                    Ok(hf_cmd(&hf, &url(), &["upload", &repo, inp], &p("hu")))
                },
                || {
                    warm(input)?;
                    restart("hu")
                },
            )
            .after(|| meter.end(pid(), &ref_cpu)),
        ],
    )?);
    *server.borrow_mut() = None;
    rows.push(HubRow {
        case: format!("hub upload {mib} MiB (`xet upload hf://` / `hf upload`, to xet serve)"),
        bytes: size,
        ours,
        reference: Some(reference),
        server_cpu: format!("xet {}, hf {}", ours_cpu.range(), ref_cpu.range()),
    });
    std::fs::remove_dir_all(&work).ok();
    Ok(rows)
}

fn pair(v: Vec<BenchSample>) -> [BenchSample; 2] {
    v.try_into()
        .unwrap_or_else(|_| unreachable!("two contenders"))
}
