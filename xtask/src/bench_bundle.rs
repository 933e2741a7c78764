//! Bundle benchmarks (group `bundle`): `xet bundle create --all` and `xet bundle import`
//! of a store holding the input file, the SWH hash function (CHD_PH) built for 1 M and
//! 10 M keys in this process, and `xet download` of the file served from the bundle next
//! to the same from the store directory, embedded (`--store`) and over loopback
//! (`xet serve --store`).
//!
//! The commands are child processes measured as every other row (`measure_all`: wall
//! time, peak RSS, CPU from `/proc/<pid>/stat` before the child is reaped); MB/s and
//! CPU s/GiB are per byte of the bundle file for create and import, per byte of the file
//! for downloads. The hash function rows are in-process: the best wall time over the
//! runs and this process's CPU time during that run; their "MB/s" is of the 32-byte keys.

use crate::bench::{
    BenchSample, Contender, CpuMeter, CpuRuns, Row, Served, TransferOpts, bench_interleaved, fresh,
    proc_cpu_secs, warm,
};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// A release `xet serve --store STORE` on loopback.
fn serve(xet: &Path, store: &Path) -> Result<Served> {
    let mut c = xetc(xet, &["serve", "--listen", "127.0.0.1:0", "--store"], None);
    c.arg(store).stderr(Stdio::null());
    Served::spawn(c, &format!("xet serve --store {}", store.display()))
}

/// `xet ARGS` with its chunk cache in `cache` (or none) and no endpoint or store from the
/// environment.
fn xetc(xet: &Path, args: &[&str], cache: Option<&Path>) -> Command {
    let mut c = Command::new(xet);
    c.args(args)
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_TOKEN");
    if let Some(cache) = cache {
        c.env("XET_CACHE", cache);
    }
    c
}

fn row(case: String, bytes: u64, ours: BenchSample, server_cpu: String) -> Row {
    Row {
        case,
        bytes,
        ours,
        reference: None,
        target: "",
        server_cpu,
    }
}

pub fn run(
    o: &TransferOpts,
    xet: &Path,
    input: &Path,
    size: u64,
    want: &dyn Fn(&str) -> bool,
) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    if !want("bundle") {
        return Ok(rows);
    }
    let work = crate::workspace_root().join("target/bench-bundle");
    fresh(&work)?;
    let p = |s: &str| -> PathBuf { work.join(s) };
    let inp = input.to_str().context("input path")?;
    let mib = size >> 20;

    // The store: the input uploaded once, untimed.
    let st = xetc(
        xet,
        &["upload", "--store", path_str(&p("store"))?, inp],
        Some(&p("prep")),
    )
    .stdout(Stdio::null())
    .status()?;
    if !st.success() {
        bail!("preparing the bundle bench store failed");
    }
    let file_hash = {
        let out = xetc(xet, &["hash", "-q", inp], None).output()?;
        String::from_utf8(out.stdout)?.trim().to_string()
    };

    let (create, import, bundle_len) = create_and_import(o, xet, &p)?;
    rows.push(row(
        format!("bundle create --all, store of {mib} MiB (MB/s of the bundle)"),
        bundle_len,
        create,
        "-".into(),
    ));
    rows.push(row(
        format!("bundle import into an empty store, {mib} MiB (MB/s of the bundle)"),
        bundle_len,
        import,
        "-".into(),
    ));

    rows.extend(downloads(o, xet, &p, &file_hash, size)?);
    // Last: its 10 M keys take this process's memory (about 1 GB at its peak).
    rows.extend(hash_function_rows(o)?);
    std::fs::remove_dir_all(&work).ok();
    Ok(rows)
}

fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}

/// `xet bundle create --all` of the store, then `xet bundle import` of that bundle into
/// an empty store; the bundle (left by the last create) and its length.
fn create_and_import(
    o: &TransferOpts,
    xet: &Path,
    p: &dyn Fn(&str) -> PathBuf,
) -> Result<(BenchSample, BenchSample, u64)> {
    let (store, bundle, target) = (p("store"), p("b.swh"), p("imported"));
    let create = bench_interleaved(
        o.runs,
        vec![Contender::new(
            || {
                let (b, s) = (path_str(&bundle)?, path_str(&store)?);
                let args = ["bundle", "create", b, "--all", "--store", s, "-q"];
                Ok(xetc(xet, &args, None))
            },
            || {
                warm(&store)?;
                let _ = std::fs::remove_file(&bundle);
                Ok(())
            },
        )],
    )?
    .remove(0);
    let bundle_len = std::fs::metadata(&bundle)
        .with_context(|| format!("bundle create left no {}", bundle.display()))?
        .len();
    let import = bench_interleaved(
        o.runs,
        vec![Contender::new(
            || {
                let (b, t) = (path_str(&bundle)?, path_str(&target)?);
                Ok(xetc(
                    xet,
                    &["bundle", "import", b, "--store", t, "-q"],
                    None,
                ))
            },
            || {
                warm(&bundle)?;
                fresh(&target)
            },
        )],
    )?
    .remove(0);
    Ok((create, import, bundle_len))
}

/// The file downloaded from the bundle and from the store directory, embedded and over
/// loopback, the four taken in turn.
fn downloads(
    o: &TransferOpts,
    xet: &Path,
    p: &dyn Fn(&str) -> PathBuf,
    file_hash: &str,
    size: u64,
) -> Result<Vec<Row>> {
    let mib = size >> 20;
    let (bundle, store, out) = (p("b.swh"), p("store"), p("out.bin"));
    let outs = path_str(&out)?.to_string();
    let from_bundle = serve(xet, &bundle)?;
    let from_store = serve(xet, &store)?;
    let meter = CpuMeter::new(size);
    let cpu: [CpuRuns; 2] = Default::default();
    let cache = p("dl-cache");
    // Before each run: the source in the page cache, no output, an empty chunk cache.
    let before = |source: &Path| -> Result<()> {
        warm(source)?;
        let _ = std::fs::remove_file(&out);
        fresh(&cache)
    };
    let embedded = |source: &Path| {
        let args = [
            "download",
            "--store",
            path_str(source)?,
            file_hash,
            "-o",
            &outs,
        ];
        Ok(xetc(xet, &args, Some(&cache)))
    };
    let served = |i: usize| {
        let (server, source) = [(&from_bundle, &bundle), (&from_store, &store)][i];
        let (meter, before, cache, outs, runs) = (&meter, &before, &cache, &outs, &cpu[i]);
        let (url, pid) = (server.url.clone(), Some(server.child.id()));
        Contender::new(
            move || {
                meter.start(pid)?;
                let args = ["download", "--endpoint", &url, file_hash, "-o", outs];
                Ok(xetc(xet, &args, Some(cache)))
            },
            move || before(source),
        )
        .after(move || meter.end(pid, runs))
    };
    let samples = bench_interleaved(
        o.runs,
        vec![
            Contender::new(|| embedded(&bundle), || before(&bundle)),
            Contender::new(|| embedded(&store), || before(&store)),
            served(0),
            served(1),
        ],
    )?;
    let _ = std::fs::remove_file(&out);
    let case = |how: &str| format!("download {mib} MiB, {how}");
    Ok(vec![
        row(
            case("--store BUNDLE (embedded)"),
            size,
            samples[0],
            "-".into(),
        ),
        row(
            case("--store DIR (embedded), for comparison"),
            size,
            samples[1],
            "-".into(),
        ),
        row(
            case("xet serve --store BUNDLE, loopback"),
            size,
            samples[2],
            cpu[0].range(),
        ),
        row(
            case("xet serve --store DIR, loopback, for comparison"),
            size,
            samples[3],
            cpu[1].range(),
        ),
    ])
}

/// `m` pseudo-random, distinct-with-overwhelming-odds 32-byte keys (a splitmix64 stream).
fn keys(m: usize) -> Vec<[u8; 32]> {
    let mut x = 0x0123_4567_89ab_cdefu64;
    (0..m)
        .map(|_| {
            std::array::from_fn::<u8, 32, _>(|i| {
                if i % 8 == 0 {
                    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
                }
                let mut z = x ^ (i as u64);
                z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
                z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
                (z ^ (z >> 31)) as u8
            })
        })
        .collect()
}

/// `ChdPh::build` with swh-shard's seeds for 1 M and 10 M keys, best of the runs; each
/// built function is checked to be perfect (every key its own slot) outside the timing.
fn hash_function_rows(o: &TransferOpts) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for m in [1_000_000usize, 10_000_000] {
        let ks = keys(m);
        let mut best: Option<BenchSample> = None;
        for _ in 0..o.runs.max(1) {
            let me = std::process::id();
            let cpu0 = proc_cpu_secs(me)?;
            let t = Instant::now();
            let f = xet_swh::ChdPh::build(&ks, &xet_swh::SeedPolicy::Swh)
                .with_context(|| format!("building the hash function of {m} keys"))?;
            let secs = t.elapsed().as_secs_f64();
            let cpu_secs = proc_cpu_secs(me)? - cpu0;
            check_perfect(&f, &ks)?;
            let s = BenchSample {
                secs,
                peak_rss_kib: 0,
                cpu_secs,
            };
            if best.is_none_or(|b| s.secs < b.secs) {
                best = Some(s);
            }
        }
        let s = best.expect("at least one run");
        rows.push(row(
            format!(
                "SWH hash function (CHD_PH) build, {} M keys: {:.2} s, CPU {:.2} s (MB/s of keys)",
                m / 1_000_000,
                s.secs,
                s.cpu_secs
            ),
            32 * m as u64,
            s,
            "-".into(),
        ));
    }
    Ok(rows)
}

fn check_perfect(f: &xet_swh::ChdPh, ks: &[[u8; 32]]) -> Result<()> {
    let mut seen = vec![false; f.n() as usize];
    for k in ks {
        let s = f.search32(k) as usize;
        if s >= seen.len() || std::mem::replace(&mut seen[s], true) {
            bail!(
                "the hash function of {} keys is not perfect (slot {s})",
                ks.len()
            );
        }
    }
    Ok(())
}
