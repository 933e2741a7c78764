//! The measuring loop: child processes sampled until they exit (wall time, peak RSS, and
//! CPU time read from the zombie), and contenders whose runs are taken in turn.

use super::proc::{self, unix_ns};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// One measured run of a child process (or, best of several, the least time and CPU and
/// the largest peak RSS).
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub secs: f64,
    pub peak_rss_kib: u64,
    /// CPU seconds (user + system) of the process, all its threads and the children it
    /// waited for.
    pub cpu_secs: f64,
}

/// A run with when it happened (for matching the proxy's events to it) and, where a
/// server is named, the server's CPU seconds during it.
#[derive(Clone, Copy, Debug)]
pub struct Run {
    pub sample: Sample,
    pub server_cpu: Option<f64>,
    pub start_ns: u64,
    pub end_ns: u64,
}

/// A child being sampled.
struct Running {
    cmd: Command,
    child: Child,
    stderr: PathBuf,
    run: Option<Run>,
}

/// Run every command at once, its stderr to its file (a pipe nobody reads could fill and
/// stall it; shown if it fails), and sample each every `poll` until it exits. `tick` is
/// called at every sampling round, for sampling another process meanwhile. A child's CPU
/// time is read from its zombie, before it is reaped: afterwards it is gone.
pub fn measure(
    jobs: Vec<(Command, PathBuf)>,
    poll: Duration,
    mut tick: impl FnMut(),
) -> Result<Vec<Run>> {
    let (start, start_ns) = (Instant::now(), unix_ns());
    let mut running = Vec::with_capacity(jobs.len());
    for (mut cmd, stderr) in jobs {
        let child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr)?)
            .spawn()
            .with_context(|| format!("spawning bench command {cmd:?}"))?;
        running.push(Running {
            cmd,
            child,
            stderr,
            run: None,
        });
    }
    let mut peaks = vec![0u64; running.len()];
    while running.iter().any(|r| r.run.is_none()) {
        tick();
        for (r, peak) in running.iter_mut().zip(&mut peaks) {
            if r.run.is_some() {
                continue;
            }
            if let Some(k) = proc::status_kib(r.child.id(), "VmHWM:") {
                *peak = (*peak).max(k);
            }
            if let Err(e) = sample(r, start, start_ns, *peak) {
                // The others are not left running behind the error.
                for r in running.iter_mut().filter(|r| r.run.is_none()) {
                    let _ = r.child.kill();
                    let _ = r.child.wait();
                }
                return Err(e);
            }
        }
        if running.iter().any(|r| r.run.is_none()) {
            std::thread::sleep(poll);
        }
    }
    Ok(running.into_iter().filter_map(|r| r.run).collect())
}

/// Reaps `r` if it has exited (its CPU time read first), leaving it be if not.
fn sample(r: &mut Running, start: Instant, start_ns: u64, peak_rss_kib: u64) -> Result<()> {
    // Not reaped before it is a zombie (or its stat cannot be read at all).
    let cpu = match proc::stat(r.child.id()) {
        Some(('Z' | 'X', cpu)) => Some(cpu),
        Some(_) => return Ok(()),
        None => None,
    };
    let (secs, end_ns) = (start.elapsed().as_secs_f64(), unix_ns());
    let status = r.child.wait()?;
    let Some(cpu_secs) = cpu.filter(|_| status.success()) else {
        let err = std::fs::read_to_string(&r.stderr).unwrap_or_default();
        bail!(
            "bench command {:?} failed ({status}): {}",
            r.cmd,
            err.trim()
        );
    };
    r.run = Some(Run {
        sample: Sample {
            secs,
            peak_rss_kib,
            cpu_secs,
        },
        server_cpu: None,
        start_ns,
        end_ns,
    });
    Ok(())
}

/// `cmds` at once, sampled every 20 ms, their stderr in a temporary directory.
pub fn measure_at_once(cmds: Vec<Command>, tick: impl FnMut()) -> Result<Vec<Run>> {
    let errs = crate::tempdir("bench-stderr")?;
    let jobs = cmds
        .into_iter()
        .enumerate()
        .map(|(i, c)| (c, errs.join(i.to_string())))
        .collect();
    let runs = measure(jobs, Rounds::LOOPBACK_POLL, tick)?;
    std::fs::remove_dir_all(&errs).ok();
    Ok(runs)
}

/// What a contender does right after each of its runs.
type AfterRun<'a> = Box<dyn FnMut(&Run) -> Result<()> + 'a>;

/// One side of an interleaved measurement: the command of a run, what to do before
/// (and after) each run, and which server's CPU time the run is charged with.
pub struct Contender<'a> {
    make: Box<dyn FnMut() -> Result<Command> + 'a>,
    before: Box<dyn FnMut() -> Result<()> + 'a>,
    after: Option<AfterRun<'a>>,
    server: Option<Box<dyn Fn() -> Option<u32> + 'a>>,
}

impl<'a> Contender<'a> {
    pub fn new(
        make: impl FnMut() -> Result<Command> + 'a,
        before: impl FnMut() -> Result<()> + 'a,
    ) -> Self {
        Contender {
            make: Box::new(make),
            before: Box::new(before),
            after: None,
            server: None,
        }
    }

    /// What to do right after each run, before the next one starts (reading what the
    /// run left, such as the server's request log).
    pub fn after(mut self, f: impl FnMut(&Run) -> Result<()> + 'a) -> Self {
        self.after = Some(Box::new(f));
        self
    }

    /// The server whose CPU time is read right before and right after each run (its
    /// pid, read after `before`, which may have restarted it).
    pub fn server(mut self, pid: impl Fn() -> Option<u32> + 'a) -> Self {
        self.server = Some(Box::new(pid));
        self
    }
}

/// How the rounds of an interleaved measurement run.
pub struct Rounds<'a> {
    /// Measured runs per contender.
    pub runs: usize,
    /// How often a running child is sampled.
    pub poll: Duration,
    /// Where each run's stderr is kept (`stderr-ROUND-SIDE.txt`), with a line per run on
    /// the terminal; `None`: a temporary directory, removed.
    pub log: Option<&'a Path>,
}

impl Rounds<'_> {
    /// Loopback runs last seconds; 20 ms between samples keeps the sampling cheap.
    const LOOPBACK_POLL: Duration = Duration::from_millis(20);

    pub fn loopback(runs: usize) -> Rounds<'static> {
        Rounds {
            runs,
            poll: Self::LOOPBACK_POLL,
            log: None,
        }
    }
}

/// Every run of each contender, their runs taken in turn: this VM's speed drifts by the
/// minute, and taking turns lets the drift touch every contender alike instead of
/// whichever happened to run during a slow spell. The order rotates each round (a b c,
/// b c a, c a b, ...), since a run is also affected by the one just before it.
pub fn interleave(
    rounds: &Rounds<'_>,
    mut contenders: Vec<Contender<'_>>,
) -> Result<Vec<Vec<Run>>> {
    let dir = match rounds.log {
        Some(d) => d.to_path_buf(),
        None => crate::tempdir("bench-stderr")?,
    };
    let n = contenders.len();
    let mut out = vec![Vec::new(); n];
    for round in 0..rounds.runs.max(1) {
        for k in 0..n {
            let i = (round + k) % n;
            let c = &mut contenders[i];
            (c.before)()?;
            // Settle what earlier runs left (dirty pages, deleted files' blocks: this
            // disk is mounted with `discard`) so no run pays for another's writes.
            let _ = Command::new("sync").status();
            let server = match &c.server {
                Some(pid) => Some(pid().context("no server running")?),
                None => None,
            };
            let server_before = server.map(proc::cpu_secs).transpose()?;
            let job = ((c.make)()?, dir.join(format!("stderr-{round}-{i}.txt")));
            let mut run = measure(vec![job], rounds.poll, || {})?.remove(0);
            if let (Some(pid), Some(before)) = (server, server_before) {
                run.server_cpu = Some(proc::cpu_secs(pid)? - before);
            }
            if let Some(after) = &mut c.after {
                after(&run)?;
            }
            if rounds.log.is_some() {
                eprintln!(
                    "  run {round} side {i}: {:.2} s, client CPU {:.2} s, server CPU {:.2} s",
                    run.sample.secs,
                    run.sample.cpu_secs,
                    run.server_cpu.unwrap_or(0.0)
                );
            }
            out[i].push(run);
        }
    }
    if rounds.log.is_none() {
        std::fs::remove_dir_all(&dir).ok();
    }
    Ok(out)
}

/// The best of the runs: the least time and CPU (each the least disturbed run's) and the
/// largest peak RSS.
pub fn best(runs: &[Run]) -> Sample {
    runs.iter()
        .map(|r| r.sample)
        .reduce(|p, s| Sample {
            secs: p.secs.min(s.secs),
            peak_rss_kib: p.peak_rss_kib.max(s.peak_rss_kib),
            cpu_secs: p.cpu_secs.min(s.cpu_secs),
        })
        .expect("at least one run")
}

/// The runs of `N` contenders, one array element each.
pub fn sides<const N: usize, T>(v: Vec<T>) -> [T; N] {
    let len = v.len();
    v.try_into()
        .unwrap_or_else(|_| unreachable!("{N} contenders, {len} results"))
}
