//! Group `mount`: `xet mount` of a model repository next to `xet download` and `hf
//! download` of the same files, same run (issue 40). A release `xet serve` on loopback
//! (Hub mode, directory store, its request log kept) holds `bench/mount`: a 1 GiB file
//! of pseudo-random bytes and a 1 GiB safetensors file of 32 tensors of 32 MiB. Every
//! run starts cold: a fresh mount with an empty chunk cache, fresh homes for the others.
//!
//! Rows:
//! - one 1 MiB read in the middle of the 1 GiB file through the mount: the bytes the
//!   server sent for it (the sum of the request log's `bytes`), goal at most 16 MiB;
//! - the first byte of a cold 4 KiB read at a random offset, the mount's server behind
//!   the bench's delay proxy (80 ms round trip, `wan/proxy.rs`, on loopback: no rate
//!   cap, the round trips are what counts), from `open` to the read's return, in round
//!   trips; goal at most 4;
//! - `cat` of the 1 GiB file through the mount next to `xet download hf://` and `hf
//!   download` of it (each into the Hugging Face cache of a fresh home); the mount's CPU is `cat`'s plus the mount process's over the run,
//!   and its peak RSS (`VmHWM`) is shown (each run's, with its minor faults, on stderr);
//!   goal: the mount at least 70% of `xet download`'s rate;
//! - one tensor of the safetensors file loaded with `safetensors` (`safe_open` on the
//!   mounted path, `get_tensor`) next to `hf download` of the whole file: time and bytes
//!   the server sent.
//!
//! Prints its own table and writes it to `docs/BENCHMARKS.md` under "Mount".

use super::inputs::{fresh, input_file, path_str};
use super::measure::{Contender, Rounds, Run, best, interleave, sides};
use super::serve::{RequestLog, Serve, ServeProcess, hf_quiet, hub_client};
use super::wan::proxy;
use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::io::{BufRead as _, Write as _};
use std::os::unix::fs::FileExt as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The repository the bench mounts.
const REPO: &str = "bench/mount";
/// The big file's name in it, and the safetensors file's.
const BIG: &str = "random-1g.bin";
const MODEL: &str = "model.safetensors";
/// Tensors of the safetensors file, and the bytes of each (f32).
const TENSORS: usize = 32;
const TENSOR_BYTES: usize = 32 << 20;
/// The tensor loaded.
const TENSOR: &str = "layer.17.weight";
/// The emulated round trip of the first-byte row.
const RTT: Duration = Duration::from_millis(80);
/// The goals.
const MID_READ_MIB: f64 = 16.0;
const FIRST_BYTE_RTTS: f64 = 4.0;
const CAT_RATIO: f64 = 0.70;

/// What the rows share.
struct Bench {
    xet: PathBuf,
    hf: PathBuf,
    work: PathBuf,
    url: String,
    log: RequestLog,
    big_size: u64,
    model_size: u64,
}

pub fn run(xet: &Path, runs: usize, write: bool) -> Result<()> {
    if !Path::new("/dev/fuse").exists() {
        bail!("the mount bench needs FUSE: /dev/fuse is missing");
    }
    let root = crate::workspace_root();
    let work = root.join("target/bench-mount");
    fresh(&work)?;
    let store = work.join("store");
    std::fs::create_dir_all(&store)?;
    let log = RequestLog(work.join("requests.log"));
    let server = Serve::loopback(xet, &store)
        .hub()
        .log(log.0.clone())
        .start()?;
    let files = work.join("repo");
    std::fs::create_dir_all(&files)?;
    link_or_copy(&input_file(&root, 1024)?, &files.join(BIG))?;
    write_safetensors(&files.join(MODEL))?;
    let b = Bench {
        xet: xet.to_path_buf(),
        hf: xet_testdata::hub::hf_cli().map_err(anyhow::Error::msg)?,
        url: server.url.trim_end_matches('/').to_string(),
        log,
        big_size: std::fs::metadata(files.join(BIG))?.len(),
        model_size: std::fs::metadata(files.join(MODEL))?.len(),
        work,
    };
    b.upload(&files)?;
    let mut rows = vec![b.mid_read(runs)?, b.first_byte(&server, runs)?];
    rows.push(b.cat(runs)?);
    rows.push(b.tensor(runs)?);
    drop(server);
    let table = table(&rows);
    println!("{table}");
    if write {
        let section = format!(
            "## Mount\n\n`cargo xtask bench --only mount` (best of {runs} cold runs; see `xtask/src/bench/mount.rs` for the method).\n\n{table}"
        );
        super::report::write_section(&root, "## Mount", &section)?;
    }
    std::fs::remove_dir_all(&b.work).ok();
    let missed: Vec<&str> = rows
        .iter()
        .filter(|r| !r.met)
        .map(|r| r.case.as_str())
        .collect();
    if !missed.is_empty() {
        eprintln!("goals missed: {}", missed.join("; "));
    }
    Ok(())
}

/// One row of the table.
struct MountRow {
    case: String,
    mount: String,
    xet: String,
    hf: String,
    target: String,
    met: bool,
}

fn table(rows: &[MountRow]) -> String {
    let mut t = String::from(
        "| case | xet mount | xet download | hf download | goal | met |\n|---|---|---|---|---|---|\n",
    );
    for r in rows {
        t.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} |\n",
            r.case,
            r.mount,
            r.xet,
            r.hf,
            r.target,
            if r.met { "yes" } else { "**no**" }
        ));
    }
    t
}

fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to).with_context(|| format!("copying {}", from.display()))?;
    }
    Ok(())
}

/// A safetensors file (8-byte header length, JSON header, data) of [`TENSORS`] f32
/// tensors of pseudo-random bytes.
fn write_safetensors(path: &Path) -> Result<()> {
    let elems = TENSOR_BYTES / 4;
    let mut header = String::from("{");
    for i in 0..TENSORS {
        let (a, z) = (i * TENSOR_BYTES, (i + 1) * TENSOR_BYTES);
        header.push_str(&format!(
            "\"layer.{i}.weight\":{{\"dtype\":\"F32\",\"shape\":[{elems}],\"data_offsets\":[{a},{z}]}},"
        ));
    }
    header.pop();
    header.push('}');
    // The data starts 8-byte aligned, as safetensors writes it.
    while (header.len() + 8) % 8 != 0 {
        header.push(' ');
    }
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    f.write_all(&(header.len() as u64).to_le_bytes())?;
    f.write_all(header.as_bytes())?;
    let mut rng = xet_testdata::Rng::new(0x5AFE);
    let mut buf = vec![0u8; 8 << 20];
    for _ in 0..TENSORS * TENSOR_BYTES / buf.len() {
        rng.fill(&mut buf);
        // Floats, not NaNs: keep the exponent's top bit clear.
        for w in buf.chunks_exact_mut(4) {
            w[3] &= 0x3F;
        }
        f.write_all(&buf)?;
    }
    f.flush()?;
    Ok(())
}

/// A running `xet mount`, unmounted (SIGTERM) when dropped.
struct Mounted {
    child: Child,
    dir: PathBuf,
}

impl Mounted {
    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status();
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = Command::new("umount").arg("-l").arg(&self.dir).status();
    }
}

impl Bench {
    fn p(&self, name: &str) -> PathBuf {
        self.work.join(name)
    }

    /// `xet ARGS` against `url`, everything under the fresh home `home`.
    fn xet(&self, url: &str, args: &[&str], home: &str) -> Result<Command> {
        fresh(&self.p(home))?;
        let mut c = Command::new(&self.xet);
        c.args(args);
        hub_client(&mut c, url, &self.p(home));
        Ok(c)
    }

    /// `hf ARGS`, everything under the fresh home `home`.
    fn hf(&self, args: &[&str], home: &str) -> Result<Command> {
        fresh(&self.p(home))?;
        let mut c = Command::new(&self.hf);
        c.args(args);
        hub_client(&mut c, &self.url, &self.p(home));
        hf_quiet(&mut c);
        Ok(c)
    }

    fn upload(&self, files: &Path) -> Result<()> {
        let st = self
            .xet(
                &self.url,
                &["upload", path_str(files)?, &format!("hf://{REPO}")],
                "prep",
            )?
            .stdout(Stdio::null())
            .status()?;
        if !st.success() {
            bail!("uploading {} to hf://{REPO} failed", files.display());
        }
        Ok(())
    }

    /// `xet mount hf://REPO` through `url`, cold (a fresh home and chunk cache), once it
    /// says it is mounted.
    fn mount(&self, url: &str) -> Result<Mounted> {
        let dir = self.p("mnt");
        fresh(&dir)?;
        let mut cmd = self.xet(
            url,
            &["mount", &format!("hf://{REPO}"), path_str(&dir)?],
            "mount-home",
        )?;
        let mut child = cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(std::fs::File::create(self.p("mount-stderr.txt"))?)
            .spawn()
            .context("starting xet mount")?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().context("stdout")?).read_line(&mut line)?;
        let m = Mounted { child, dir };
        if !line.starts_with("mounted") {
            let err = std::fs::read_to_string(self.p("mount-stderr.txt")).unwrap_or_default();
            bail!(
                "xet mount did not mount (it printed {line:?}): {}",
                err.trim()
            );
        }
        Ok(m)
    }

    /// Bytes the server sent since the log was cleared (each request's line is written
    /// when its answer is done; a moment is allowed for the last one).
    fn served(&self) -> Result<(u64, usize)> {
        std::thread::sleep(Duration::from_millis(300));
        let text = std::fs::read_to_string(&self.log.0).unwrap_or_default();
        let mut bytes = 0u64;
        let mut requests = 0;
        for l in text.lines().filter(|l| l.contains("request")) {
            requests += 1;
            if let Some(n) = l
                .split_whitespace()
                .find_map(|w| w.strip_prefix("bytes="))
                .and_then(|n| n.parse::<u64>().ok())
            {
                bytes += n;
            }
        }
        Ok((bytes, requests))
    }

    /// One 1 MiB read at the middle of the cold big file: bytes the server sent.
    fn mid_read(&self, runs: usize) -> Result<MountRow> {
        let mut most = 0u64;
        let mut secs = f64::MAX;
        let mut reqs = 0;
        for _ in 0..runs.max(1) {
            let m = self.mount(&self.url)?;
            let f = std::fs::File::open(m.path(BIG))?;
            self.log.clear()?;
            let mut buf = vec![0u8; 1 << 20];
            let at = self.big_size / 2 + 12_345;
            let t = Instant::now();
            f.read_exact_at(&mut buf, at)
                .context("reading 1 MiB through the mount")?;
            secs = secs.min(t.elapsed().as_secs_f64());
            let (bytes, n) = self.served()?;
            most = most.max(bytes);
            reqs = reqs.max(n);
        }
        let mib = most as f64 / f64::from(1 << 20);
        Ok(MountRow {
            case: "one 1 MiB read in the middle of a cold 1 GiB file: bytes the server sent".into(),
            mount: format!("{mib:.1} MiB in {reqs} requests, {:.0} ms", secs * 1e3),
            xet: "-".into(),
            hf: "-".into(),
            target: format!("≤ {MID_READ_MIB} MiB"),
            met: mib <= MID_READ_MIB,
        })
    }

    /// A cold 4 KiB read at a random offset, the server 80 ms away: `open` to data.
    fn first_byte(&self, server: &ServeProcess, runs: usize) -> Result<MountRow> {
        let target = server
            .url
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .parse()
            .context("the server's address")?;
        let (proxy_url, _rt) = start_proxy(target)?;
        let mut best = f64::MAX;
        let mut reqs = 0;
        let mut rng = xet_testdata::Rng::new(0xF1);
        for _ in 0..runs.max(1) {
            let m = self.mount(&proxy_url)?;
            // Let the mount's own requests settle; the read is what is timed.
            std::thread::sleep(Duration::from_millis(500));
            self.log.clear()?;
            let at = rng.next_u64() % (self.big_size - 4096);
            let mut buf = vec![0u8; 4096];
            let t = Instant::now();
            let f = std::fs::File::open(m.path(BIG))?;
            f.read_exact_at(&mut buf, at)
                .context("reading 4 KiB through the mount")?;
            best = best.min(t.elapsed().as_secs_f64());
            reqs = reqs.max(self.served()?.1);
        }
        let rtts = best / RTT.as_secs_f64();
        Ok(MountRow {
            case: format!(
                "first byte of a cold 4 KiB read at a random offset, {} ms round trip (`open` to data)",
                RTT.as_millis()
            ),
            mount: format!(
                "{:.0} ms = {rtts:.1} round trips, {reqs} requests",
                best * 1e3
            ),
            xet: "-".into(),
            hf: "-".into(),
            target: format!("≤ {FIRST_BYTE_RTTS} round trips"),
            met: rtts <= FIRST_BYTE_RTTS,
        })
    }

    /// `cat` of the cold big file through the mount, `xet download`, `hf download`.
    fn cat(&self, runs: usize) -> Result<MountRow> {
        let mounted: RefCell<Option<Mounted>> = RefCell::new(None);
        let mount_cpu = RefCell::new(Vec::new());
        let mount_rss = RefCell::new(Vec::new());
        let rounds = Rounds::loopback(runs);
        let [m, x, h] = sides(interleave(
            &rounds,
            vec![
                Contender::new(
                    || {
                        let dir = self.p("mnt");
                        let mut c = Command::new("cat");
                        c.arg(dir.join(BIG));
                        Ok(c)
                    },
                    || {
                        *mounted.borrow_mut() = Some(self.mount(&self.url)?);
                        Ok(())
                    },
                )
                .server(|| mounted.borrow().as_ref().map(Mounted::pid))
                .after(|run: &Run| {
                    let cpu = run.server_cpu.unwrap_or(0.0);
                    mount_cpu.borrow_mut().push(cpu);
                    if let Some(pid) = mounted.borrow().as_ref().map(Mounted::pid) {
                        let hwm = super::proc::status_kib(pid, "VmHWM:").unwrap_or(0);
                        let faults = super::proc::minor_faults(pid).unwrap_or(0);
                        mount_rss.borrow_mut().push(hwm);
                        eprintln!(
                            "mount cat: {:.2} s, the mount {cpu:.2} CPU s, peak RSS {} MiB, \
                             {faults} minor faults",
                            run.sample.secs,
                            hwm / 1024
                        );
                    }
                    *mounted.borrow_mut() = None;
                    Ok(())
                }),
                Contender::new(
                    || {
                        let what = format!("hf://{REPO}/{BIG}");
                        self.xet(&self.url, &["download", &what], "xd")
                    },
                    || Ok(()),
                ),
                Contender::new(|| self.hf(&["download", REPO, BIG], "hd"), || Ok(())),
            ],
        )?);
        let size = self.big_size;
        let rate = |r: &[Run]| size as f64 / best(r).secs / 1e6;
        let cpu_gib = |cpu: f64| cpu / (size as f64 / f64::from(1 << 30));
        let least_mount_cpu = m
            .iter()
            .zip(mount_cpu.borrow().iter())
            .map(|(r, extra)| r.sample.cpu_secs + extra)
            .fold(f64::MAX, f64::min);
        let ratio = rate(&m) / rate(&x);
        let cell = |r: &[Run], cpu: f64| {
            format!(
                "{:.0} MB/s ({:.2} s), CPU {:.2} s/GiB",
                rate(r),
                best(r).secs,
                cpu_gib(cpu)
            )
        };
        Ok(MountRow {
            case: "`cat` of a cold 1 GiB file (mount: `cat`'s CPU and the mount's)".into(),
            mount: format!(
                "{}; {:.0}% of xet download; the mount's peak RSS {} MiB",
                cell(&m, least_mount_cpu),
                ratio * 100.0,
                mount_rss.borrow().iter().max().copied().unwrap_or(0) / 1024
            ),
            xet: cell(&x, best(&x).cpu_secs),
            hf: cell(&h, best(&h).cpu_secs),
            target: format!("mount ≥ {:.0}% of xet download", CAT_RATIO * 100.0),
            met: ratio >= CAT_RATIO,
        })
    }

    /// One tensor through the mount (cold) next to `hf download` of the whole file.
    fn tensor(&self, runs: usize) -> Result<MountRow> {
        let py = xet_testdata::hub::safetensors_python().map_err(anyhow::Error::msg)?;
        let code = format!(
            "import sys\nfrom safetensors import safe_open\n\
             with safe_open(sys.argv[1], framework='numpy') as f:\n    \
             t = f.get_tensor('{TENSOR}')\n    assert t.nbytes == {TENSOR_BYTES}, t.nbytes\n"
        );
        let (mut m_best, mut m_bytes) = (f64::MAX, 0u64);
        let (mut h_best, mut h_bytes) = (f64::MAX, 0u64);
        for _ in 0..runs.max(1) {
            let m = self.mount(&self.url)?;
            self.log.clear()?;
            let t = Instant::now();
            let st = Command::new(&py)
                .args(["-c", &code])
                .arg(m.path(MODEL))
                .stdout(Stdio::null())
                .status()?;
            if !st.success() {
                bail!("loading {TENSOR} through the mount failed");
            }
            m_best = m_best.min(t.elapsed().as_secs_f64());
            m_bytes = m_bytes.max(self.served()?.0);
            drop(m);

            let mut c = self.hf(&["download", REPO, MODEL], "hd")?;
            self.log.clear()?;
            let t = Instant::now();
            if !c.stdout(Stdio::null()).status()?.success() {
                bail!("hf download {REPO} {MODEL} failed");
            }
            h_best = h_best.min(t.elapsed().as_secs_f64());
            h_bytes = h_bytes.max(self.served()?.0);
        }
        let mib = |b: u64| b as f64 / f64::from(1 << 20);
        Ok(MountRow {
            case: format!(
                "load one 32 MiB tensor of a cold {} MiB safetensors file (python `safe_open`, `get_tensor`)",
                self.model_size >> 20
            ),
            mount: format!("{:.2} s, {:.1} MiB sent", m_best, mib(m_bytes)),
            xet: "-".into(),
            hf: format!(
                "whole file: {:.2} s, {:.1} MiB sent ({:.1}× the mount's time)",
                h_best,
                mib(h_bytes),
                h_best / m_best
            ),
            target: "fewer bytes and less time than the whole file".into(),
            met: m_bytes < h_bytes && m_best < h_best,
        })
    }
}

/// The delay proxy on loopback in front of `target`, on a runtime of its own (kept
/// alive by the returned value): its URL.
fn start_proxy(target: std::net::SocketAddr) -> Result<(String, tokio::runtime::Runtime)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()?;
    let listener = rt.block_on(tokio::net::TcpListener::bind("127.0.0.1:0"))?;
    let addr = listener.local_addr()?;
    let shape = proxy::Shape {
        rtt: RTT,
        line_bytes: 64 << 20,
        window: super::wan::link::WINDOW,
    };
    let (tx, mut rx) = tokio::sync::mpsc::channel::<String>(4096);
    rt.spawn(async move { while rx.recv().await.is_some() {} });
    rt.spawn(async move {
        if let Err(e) = proxy::accept_loop(listener, target, shape, tx).await {
            eprintln!("the delay proxy stopped: {e:#}");
        }
    });
    Ok((format!("http://{addr}"), rt))
}
