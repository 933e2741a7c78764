//! Group `bundle`: `xet bundle create --all` and `xet bundle import` of a store holding
//! the input file, the SWH hash function (CHD_PH) built for 1 M and 10 M keys in this
//! process, and `xet download` of the file served from the bundle next to the same from
//! the store directory, embedded (`--store`) and over loopback (`xet serve --store`).
//!
//! The commands are child processes measured as every other row (wall time, peak RSS,
//! CPU from `/proc/<pid>/stat` before the child is reaped); MB/s and CPU s/GiB are per
//! byte of the bundle file for create and import, per byte of the file for downloads.
//! The hash function rows are in-process: the best wall time over the runs and this
//! process's CPU time during that run; their "MB/s" is of the 32-byte keys.

use super::inputs::{Setup, file_hash, fresh, path_str, warm};
use super::measure::{Contender, Rounds, Sample, best, interleave, sides};
use super::proc::cpu_secs;
use super::report::{Row, cpu_range};
use super::serve::{Serve, xet_client};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

/// The group's paths and clients.
struct Bundle<'a> {
    s: &'a Setup,
    work: PathBuf,
    rounds: Rounds<'static>,
}

impl Bundle<'_> {
    fn p(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// `xet ARGS` with its chunk cache in `cache` (or none).
    fn xet(&self, args: &[&str], cache: Option<&Path>) -> Command {
        xet_client(Command::new(&self.s.xet), args, cache)
    }

    /// Best of the runs of one command, `before` each.
    fn best_of(
        &self,
        make: impl FnMut() -> Result<Command>,
        before: impl FnMut() -> Result<()>,
    ) -> Result<Sample> {
        let [runs] = sides(interleave(
            &self.rounds,
            vec![Contender::new(make, before)],
        )?);
        Ok(best(&runs))
    }
}

pub fn rows(s: &Setup) -> Result<Vec<Row>> {
    let b = Bundle {
        s,
        work: crate::workspace_root().join("target/bench-bundle"),
        rounds: Rounds::loopback(s.runs),
    };
    fresh(&b.work)?;
    let mib = s.mib();
    // The store: the input uploaded once, untimed.
    let store = b.p("store");
    let st = b
        .xet(
            &["upload", "--store", path_str(&store)?, s.input_str()?],
            Some(&b.p("prep")),
        )
        .stdout(Stdio::null())
        .status()?;
    if !st.success() {
        bail!("preparing the bundle bench store failed");
    }
    let hash = file_hash(&s.xet, &s.input)?;

    let (create, import, bundle_len) = create_and_import(&b)?;
    let mut rows = vec![
        Row::xet(
            format!("bundle create --all, store of {mib} MiB (MB/s of the bundle)"),
            bundle_len,
            create,
        ),
        Row::xet(
            format!("bundle import into an empty store, {mib} MiB (MB/s of the bundle)"),
            bundle_len,
            import,
        ),
    ];
    rows.extend(downloads(&b, &hash)?);
    // Last: its 10 M keys take this process's memory (about 1 GB at its peak).
    rows.extend(hash_function_rows(s.runs)?);
    std::fs::remove_dir_all(&b.work).ok();
    Ok(rows)
}

/// `xet bundle create --all` of the store, then `xet bundle import` of that bundle into
/// an empty store; the bundle (left by the last create) and its length.
fn create_and_import(b: &Bundle<'_>) -> Result<(Sample, Sample, u64)> {
    let (store, bundle, target) = (b.p("store"), b.p("b.swh"), b.p("imported"));
    let (store_s, bundle_s, target_s) = (path_str(&store)?, path_str(&bundle)?, path_str(&target)?);
    let create = b.best_of(
        || {
            let args = [
                "bundle", "create", bundle_s, "--all", "--store", store_s, "-q",
            ];
            Ok(b.xet(&args, None))
        },
        || {
            warm(&store)?;
            let _ = std::fs::remove_file(&bundle);
            Ok(())
        },
    )?;
    let bundle_len = std::fs::metadata(&bundle)
        .with_context(|| format!("bundle create left no {}", bundle.display()))?
        .len();
    let import = b.best_of(
        || {
            let args = ["bundle", "import", bundle_s, "--store", target_s, "-q"];
            Ok(b.xet(&args, None))
        },
        || {
            warm(&bundle)?;
            fresh(&target)
        },
    )?;
    Ok((create, import, bundle_len))
}

/// The file downloaded from the bundle and from the store directory, embedded and over
/// loopback, the four taken in turn.
fn downloads(b: &Bundle<'_>, hash: &str) -> Result<Vec<Row>> {
    let (mib, size) = (b.s.mib(), b.s.size);
    let (bundle, store, out, cache) = (b.p("b.swh"), b.p("store"), b.p("out.bin"), b.p("dl-cache"));
    let outs = path_str(&out)?;
    let servers = [
        Serve::loopback(&b.s.xet, &bundle).start()?,
        Serve::loopback(&b.s.xet, &store).start()?,
    ];
    // Before each run: the source in the page cache, no output, an empty chunk cache.
    let before = |source: &Path| -> Result<()> {
        warm(source)?;
        let _ = std::fs::remove_file(&out);
        fresh(&cache)
    };
    let embedded = |source: &Path| -> Result<Command> {
        let args = ["download", "--store", path_str(source)?, hash, "-o", outs];
        Ok(b.xet(&args, Some(&cache)))
    };
    let sources = [bundle.as_path(), store.as_path()];
    let served = |i: usize| {
        let (server, source) = (&servers[i], sources[i]);
        Contender::new(
            || {
                let args = ["download", "--endpoint", &server.url, hash, "-o", outs];
                Ok(b.xet(&args, Some(&cache)))
            },
            move || before(source),
        )
        .server(move || Some(server.pid()))
    };
    let [from_bundle, from_store, served_bundle, served_store] = sides(interleave(
        &b.rounds,
        vec![
            Contender::new(|| embedded(&bundle), || before(&bundle)),
            Contender::new(|| embedded(&store), || before(&store)),
            served(0),
            served(1),
        ],
    )?);
    let _ = std::fs::remove_file(&out);
    let case = |how: &str| format!("download {mib} MiB, {how}");
    Ok(vec![
        Row::xet(case("--store BUNDLE (embedded)"), size, best(&from_bundle)),
        Row::xet(
            case("--store DIR (embedded), for comparison"),
            size,
            best(&from_store),
        ),
        Row::xet(
            case("xet serve --store BUNDLE, loopback"),
            size,
            best(&served_bundle),
        )
        .server_cpu(cpu_range(&served_bundle, size)),
        Row::xet(
            case("xet serve --store DIR, loopback, for comparison"),
            size,
            best(&served_store),
        )
        .server_cpu(cpu_range(&served_store, size)),
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
fn hash_function_rows(runs: usize) -> Result<Vec<Row>> {
    let mut rows = Vec::new();
    for m in [1_000_000usize, 10_000_000] {
        let ks = keys(m);
        let mut best: Option<Sample> = None;
        for _ in 0..runs.max(1) {
            let me = std::process::id();
            let cpu0 = cpu_secs(me)?;
            let t = Instant::now();
            let f = xet_swh::ChdPh::build(&ks, &xet_swh::SeedPolicy::Swh)
                .with_context(|| format!("building the hash function of {m} keys"))?;
            let secs = t.elapsed().as_secs_f64();
            let cpu = cpu_secs(me)? - cpu0;
            check_perfect(&f, &ks)?;
            let s = Sample {
                secs,
                peak_rss_kib: 0,
                cpu_secs: cpu,
            };
            if best.is_none_or(|b| s.secs < b.secs) {
                best = Some(s);
            }
        }
        let s = best.expect("at least one run");
        let case = format!(
            "SWH hash function (CHD_PH) build, {} M keys: {:.2} s, CPU {:.2} s (MB/s of keys)",
            m / 1_000_000,
            s.secs,
            s.cpu_secs
        );
        rows.push(Row::xet(case, 32 * m as u64, s));
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
