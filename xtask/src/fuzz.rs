//! `cargo xtask fuzz`: build the coverage-guided fuzz targets of `fuzz/` (libFuzzer via
//! `libfuzzer-sys`) on the stable toolchain and run each for a while.
//!
//! ```text
//! cargo xtask fuzz [--time 10m|90s|SECS] [--smoke] [--replay] [--seed] [--list] [TARGET...] [-- LIBFUZZER-ARGS]
//! ```
//!
//! * No nightly and no `cargo fuzz`: the targets are built with the sanitizer-coverage
//!   LLVM passes through `RUSTFLAGS` (`-Cpasses=sancov-module` + `-Cllvm-args=...`), which
//!   stable rustc accepts with `RUSTC_BOOTSTRAP=1`, for the host `--target` only (so build
//!   scripts and proc macros are not instrumented). libFuzzer's C++ part is built by
//!   `libfuzzer-sys` with the system C++ compiler.
//! * Build output goes to `fuzz/target` (its own workspace and lock file, `fuzz/Cargo.lock`).
//! * Each target first replays its seeds (`fuzz/corpus/<t>/`) and regression inputs
//!   (`fuzz/regressions/<t>/`), then fuzzes for `--time` (default 60 s; `--smoke`: 15 s)
//!   with a working corpus in `fuzz/target/corpus/<t>/` (grows across runs, never
//!   checked in). `--replay` only replays (no fuzzing: a regression test of a few
//!   seconds). Crash inputs go to `fuzz/artifacts/<t>/`; copy each into
//!   `fuzz/regressions/<t>/` once understood, so every later run replays it.
//! * `--seed` (re)writes the seed corpora with `xet-fuzz-seed` (also done for any target
//!   whose seed directory is missing).
//! * Prints per target: executions, coverage (`cov` = edges, `ft` = features), corpus
//!   size, crashes; fails if any target crashed.

use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

pub const USAGE: &str = "cargo xtask fuzz [--time 10m|90s|SECS] [--smoke] [--replay] [--seed] [--list] [TARGET...] [-- LIBFUZZER-ARGS]";

const DEFAULT_SECS: u64 = 60;
const SMOKE_SECS: u64 = 15;

/// Sanitizer coverage as `cargo fuzz` sets it up, plus the checks we want on in fuzzed
/// code. `--cfg fuzzing` lets code under test know (none uses it yet).
const RUSTFLAGS: &[&str] = &[
    "-Cpasses=sancov-module",
    "-Cllvm-args=-sanitizer-coverage-level=4",
    "-Cllvm-args=-sanitizer-coverage-inline-8bit-counters",
    "-Cllvm-args=-sanitizer-coverage-pc-table",
    "-Cllvm-args=-sanitizer-coverage-trace-compares",
    "--cfg",
    "fuzzing",
    "-Cdebug-assertions",
    "-Coverflow-checks",
    "-Cforce-frame-pointers",
];

struct Opts {
    secs: u64,
    seed: bool,
    list: bool,
    targets: Vec<String>,
    extra: Vec<String>,
}

fn parse_duration(s: &str) -> Result<u64> {
    let (num, mult) = match s.char_indices().last() {
        Some((i, 's')) => (&s[..i], 1),
        Some((i, 'm')) => (&s[..i], 60),
        Some((i, 'h')) => (&s[..i], 3600),
        _ => (s, 1),
    };
    let n: u64 = num
        .parse()
        .with_context(|| format!("bad duration {s:?} (e.g. 60, 90s, 10m, 1h)"))?;
    Ok(n * mult)
}

fn parse_args(args: &[String]) -> Result<Opts> {
    let mut o = Opts {
        secs: DEFAULT_SECS,
        seed: false,
        list: false,
        targets: Vec::new(),
        extra: Vec::new(),
    };
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--time" => o.secs = parse_duration(it.next().context("--time needs a value")?)?,
            s if s.starts_with("--time=") => o.secs = parse_duration(&s[7..])?,
            "--smoke" => o.secs = SMOKE_SECS,
            "--replay" => o.secs = 0,
            "--seed" => o.seed = true,
            "--list" => o.list = true,
            "--" => {
                o.extra = it.by_ref().cloned().collect();
            }
            s if s.starts_with('-') => bail!("unknown option {s}\nusage: {USAGE}"),
            t => o.targets.push(t.to_string()),
        }
    }
    Ok(o)
}

fn fuzz_dir() -> PathBuf {
    crate::workspace_root().join("fuzz")
}

/// Every `fuzz/fuzz_targets/<name>.rs`, sorted.
pub fn all_targets() -> Result<Vec<String>> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(fuzz_dir().join("fuzz_targets"))? {
        let p = e?.path();
        if p.extension().is_some_and(|x| x == "rs")
            && let Some(s) = p.file_stem().and_then(|s| s.to_str())
        {
            out.push(s.to_string());
        }
    }
    out.sort();
    Ok(out)
}

fn host_triple() -> Result<String> {
    let out = Command::new("rustc")
        .arg("-vV")
        .output()
        .context("rustc -vV")?;
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .find_map(|l| l.strip_prefix("host: ").map(str::to_string))
        .context("no host in rustc -vV")
}

fn cargo(fuzz: &Path) -> Command {
    let mut cmd = Command::new(env!("CARGO"));
    crate::clean_cargo_env(&mut cmd);
    cmd.current_dir(fuzz)
        .env("CARGO_TARGET_DIR", fuzz.join("target"))
        .env_remove("RUSTFLAGS")
        .env_remove("CARGO_ENCODED_RUSTFLAGS");
    cmd
}

fn seed(fuzz: &Path) -> Result<()> {
    eprintln!("$ cargo run -p xet-fuzz-seed (fuzz/) -> fuzz/corpus");
    let st = cargo(fuzz)
        .args(["run", "-q", "-p", "xet-fuzz-seed", "--"])
        .arg(fuzz.join("corpus"))
        .status()?;
    if !st.success() {
        bail!("seed generator failed: {st}");
    }
    Ok(())
}

fn build(fuzz: &Path, triple: &str, targets: &[String]) -> Result<PathBuf> {
    eprintln!(
        "$ RUSTC_BOOTSTRAP=1 RUSTFLAGS='{}' cargo build --release --target {triple} (fuzz/)",
        RUSTFLAGS.join(" ")
    );
    let mut cmd = cargo(fuzz);
    cmd.args(["build", "--release", "-p", "xet-fuzz", "--target", triple])
        .env("RUSTC_BOOTSTRAP", "1")
        .env("RUSTFLAGS", RUSTFLAGS.join(" "));
    for t in targets {
        cmd.args(["--bin", t]);
    }
    let st = cmd.status()?;
    if !st.success() {
        bail!("building the fuzz targets failed: {st}");
    }
    Ok(fuzz.join("target").join(triple).join("release"))
}

#[derive(Default, Debug)]
struct Outcome {
    replayed: usize,
    execs: u64,
    cov: u64,
    ft: u64,
    corpus: u64,
    crash: Option<String>,
    secs: f64,
}

fn files_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .map(|rd| {
            rd.filter_map(|e| e.ok().map(|e| e.path()))
                .filter(|p| p.is_file())
                .collect()
        })
        .unwrap_or_default();
    v.sort();
    v
}

fn num_after(line: &str, key: &str) -> Option<u64> {
    let rest = &line[line.find(key)? + key.len()..];
    let digits: String = rest
        .trim_start()
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

fn run_one(bin_dir: &Path, fuzz: &Path, t: &str, secs: u64, extra: &[String]) -> Result<Outcome> {
    let bin = bin_dir.join(t);
    let seeds = fuzz.join("corpus").join(t);
    let regress = fuzz.join("regressions").join(t);
    let work = fuzz.join("target/corpus").join(t);
    let artifacts = fuzz.join("artifacts").join(t);
    let logs = fuzz.join("target/logs");
    for d in [&work, &artifacts, &logs] {
        std::fs::create_dir_all(d)?;
    }
    let mut o = Outcome::default();

    // 1. Replay seeds and regression inputs: each must pass.
    let inputs: Vec<PathBuf> = files_in(&seeds)
        .into_iter()
        .chain(files_in(&regress))
        .collect();
    o.replayed = inputs.len();
    if !inputs.is_empty() {
        let out = Command::new(&bin)
            .args(&inputs)
            .stdin(Stdio::null())
            .output()
            .with_context(|| format!("running {}", bin.display()))?;
        if !out.status.success() {
            let log = logs.join(format!("{t}.replay.log"));
            std::fs::write(&log, &out.stderr)?;
            o.crash = Some(format!(
                "replay of seeds/regressions failed, see {}",
                log.display()
            ));
            return Ok(o);
        }
    }

    if secs == 0 {
        return Ok(o);
    }

    // 2. Fuzz.
    let log = logs.join(format!("{t}.log"));
    let started = Instant::now();
    let mut cmd = Command::new(&bin);
    cmd.arg(&work);
    if seeds.is_dir() {
        cmd.arg(&seeds);
    }
    if regress.is_dir() {
        cmd.arg(&regress);
    }
    cmd.arg(format!("-max_total_time={secs}"))
        .arg(format!("-artifact_prefix={}/", artifacts.display()))
        .arg("-print_final_stats=1")
        .arg("-timeout=10")
        .arg("-rss_limit_mb=2048")
        .arg("-max_len=65536")
        .arg("-len_control=200")
        .args(extra)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(std::fs::File::create(&log)?);
    let st = cmd
        .status()
        .with_context(|| format!("running {}", bin.display()))?;
    o.secs = started.elapsed().as_secs_f64();
    let text = std::fs::read_to_string(&log).unwrap_or_default();
    for line in text.lines() {
        if line.contains(" cov: ") {
            o.cov = num_after(line, " cov:").unwrap_or(o.cov);
            o.ft = num_after(line, " ft:").unwrap_or(o.ft);
            o.corpus = num_after(line, " corp:").unwrap_or(o.corpus);
            if let Some(n) = line.strip_prefix('#').and_then(|l| num_after(l, "")) {
                o.execs = n;
            }
        }
        if let Some(n) = num_after(line, "stat::number_of_executed_units:") {
            o.execs = n;
        }
        if let Some((_, path)) = line.split_once("Test unit written to ") {
            o.crash = Some(path.trim().to_string());
        }
    }
    if !st.success() && o.crash.is_none() {
        o.crash = Some(format!("exit {st}, see {}", log.display()));
    }
    Ok(o)
}

pub fn run(args: &[String]) -> Result<()> {
    let o = parse_args(args)?;
    let fuzz = fuzz_dir();
    let all = all_targets()?;
    if o.list {
        for t in &all {
            println!("{t}");
        }
        return Ok(());
    }
    let targets = if o.targets.is_empty() {
        all.clone()
    } else {
        o.targets.clone()
    };
    for t in &targets {
        if !all.contains(t) {
            bail!("no fuzz target {t:?}; targets: {}", all.join(" "));
        }
    }
    if o.seed
        || targets
            .iter()
            .any(|t| !fuzz.join("corpus").join(t).is_dir())
    {
        seed(&fuzz)?;
    }
    let triple = host_triple()?;
    let bin_dir = build(&fuzz, &triple, &targets)?;
    let total = Duration::from_secs(o.secs * targets.len() as u64);
    eprintln!(
        "fuzzing {} target(s), {} s each (~{} min)",
        targets.len(),
        o.secs,
        total.as_secs().div_ceil(60)
    );

    let mut rows = Vec::new();
    for t in &targets {
        eprintln!("--- {t}");
        let r = run_one(&bin_dir, &fuzz, t, o.secs, &o.extra)?;
        eprintln!(
            "    {} execs, cov {} ft {}, corpus {}, {}",
            r.execs,
            r.cov,
            r.ft,
            r.corpus,
            r.crash.as_deref().unwrap_or("no crash")
        );
        rows.push((t.clone(), r));
    }

    println!(
        "\n| target | seconds | executions | exec/s | cov | ft | corpus | replayed | crashes |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    let mut crashed = Vec::new();
    for (t, r) in &rows {
        let rate = if r.secs > 0.0 {
            r.execs as f64 / r.secs
        } else {
            0.0
        };
        println!(
            "| {t} | {:.0} | {} | {:.0} | {} | {} | {} | {} | {} |",
            r.secs,
            r.execs,
            rate,
            r.cov,
            r.ft,
            r.corpus,
            r.replayed,
            r.crash
                .as_deref()
                .map_or("0".to_string(), |c| format!("1: {c}"))
        );
        if r.crash.is_some() {
            crashed.push(t.as_str());
        }
    }
    for (t, r) in &rows {
        if let Some(c) = &r.crash
            && let Ok(bytes) = std::fs::read(c)
        {
            let hex: String = bytes.iter().take(512).map(|b| format!("{b:02x}")).collect();
            let more = if bytes.len() > 512 { "..." } else { "" };
            println!("\n{t}: {c} ({} bytes)\n  hex: {hex}{more}", bytes.len());
            println!("  log: fuzz/target/logs/{t}.log");
        }
    }
    if !crashed.is_empty() {
        bail!(
            "fuzz targets crashed: {} (inputs under fuzz/artifacts/<target>/)",
            crashed.join(" ")
        );
    }
    Ok(())
}
