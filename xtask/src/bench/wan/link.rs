//! The emulated link: two network namespaces joined by a veth pair, `tc tbf` on each
//! end's egress, and the delay proxies in the server namespace (in front of `xet serve`
//! and of the probe server that checks the link). See `mod.rs` for the picture.

use super::proxy::Event;
use anyhow::{Context, Result, bail};
use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};

/// The client side of the veth pair.
pub const CLIENT_IP: &str = "10.77.0.1";
/// The server side of the veth pair, where the proxies listen.
pub const SERVER_IP: &str = "10.77.0.2";
/// `xet serve`'s address inside the server namespace, and the proxy port in front of it.
pub const SERVE_ADDR: &str = "127.0.0.1:8080";
const SERVE_PROXY_PORT: u16 = 80;
/// The probe server's address inside the server namespace, and its proxy's port.
const PROBE_ADDR: &str = "127.0.0.1:8081";
const PROBE_PROXY_PORT: u16 = 81;

/// Bytes in flight per connection and direction (the emulated TCP window): Linux's
/// default send buffer maximum (`net.ipv4.tcp_wmem`'s third field, 4 MiB), which bounds
/// what a sender has unacknowledged. See `proxy.rs`.
pub const WINDOW: usize = 4 << 20;

/// One emulated link.
#[derive(Clone, Copy, Debug)]
pub struct Profile {
    pub rtt_ms: u64,
    pub rate_mbit: u64,
    /// The big-file rows' size on this profile unless `--size-mib` is given.
    pub big_mib: Option<u64>,
}

impl Profile {
    pub const ALL: [Profile; 4] = [
        Profile {
            rtt_ms: 20,
            rate_mbit: 1000,
            big_mib: None,
        },
        Profile {
            rtt_ms: 80,
            rate_mbit: 200,
            big_mib: None,
        },
        Profile {
            rtt_ms: 200,
            rate_mbit: 100,
            big_mib: None,
        },
        // Issue #26's long fat link: 1 GiB at 90% of it needs several windows at once.
        Profile {
            rtt_ms: 200,
            rate_mbit: 1000,
            big_mib: Some(1024),
        },
    ];

    /// `200ms/1g`, `80ms/200m`: what `--only` matches (with the RTT alone, `200ms`,
    /// naming every profile of that RTT).
    pub fn key(&self) -> String {
        if self.rate_mbit >= 1000 && self.rate_mbit.is_multiple_of(1000) {
            format!("{}ms/{}g", self.rtt_ms, self.rate_mbit / 1000)
        } else {
            format!("{}ms/{}m", self.rtt_ms, self.rate_mbit)
        }
    }

    /// Whether `--only PATTERN` selects case `case` of this profile: PATTERN is part of
    /// `RTT/RATE/CASE` (`200ms/1g/download`) or of `RTT/CASE` (`80ms/small`).
    pub fn selects(&self, pattern: &str, case: &str) -> bool {
        format!("{}/{case}", self.key()).contains(pattern)
            || format!("{}ms/{case}", self.rtt_ms).contains(pattern)
    }

    /// The most one connection carries: the window per round trip, in Mbit/s.
    pub fn window_mbit(&self, window: usize) -> f64 {
        window as f64 * 8.0 / (self.rtt_ms as f64 / 1000.0) / 1e6
    }

    pub fn label(&self) -> String {
        if self.rate_mbit >= 1000 {
            format!("{} ms / {} Gbit", self.rtt_ms, self.rate_mbit / 1000)
        } else {
            format!("{} ms / {} Mbit", self.rtt_ms, self.rate_mbit)
        }
    }

    pub fn bytes_per_sec(&self) -> f64 {
        self.rate_mbit as f64 * 1e6 / 8.0
    }

    /// tbf's bucket: at least 64 KiB (one GSO packet of veth, which tbf would otherwise
    /// split), and one millisecond of the rate.
    pub fn tbf_burst(&self) -> u64 {
        (64 << 10).max(self.bytes_per_sec() as u64 / 1000)
    }

    /// How long a packet may wait in tbf's queue. The queue sits between the client's
    /// TCP and the delay line, so it adds to the round trip of whatever waits behind a
    /// bulk transfer; kept short, as losses there are recovered at veth speed.
    pub const TBF_LATENCY_MS: u64 = 10;

    /// The delay line's bound per connection and direction: twice the one-way
    /// bandwidth-delay product (the first RTT of a connection is held too) plus 256 KiB.
    pub fn line_bytes(&self) -> usize {
        let oneway = self.bytes_per_sec() * self.rtt_ms as f64 / 2000.0;
        (2.0 * oneway) as usize + (256 << 10)
    }
}

fn sh(cmd: &mut Command) -> Result<()> {
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .with_context(|| format!("running {cmd:?}"))?;
    if !out.status.success() {
        bail!(
            "{cmd:?} failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(())
}

fn ip(args: &[&str]) -> Result<()> {
    sh(Command::new("ip").args(args))
}

/// The two namespaces, the veth pair and the qdiscs of one profile; the proxies in
/// front of `xet serve` and of the probe server. Dropping it stops the proxies and the
/// probe server and deletes the namespaces.
pub struct Link {
    pub profile: Profile,
    /// Bytes in flight per connection and direction ([`WINDOW`] unless overridden).
    pub window: usize,
    pub client_ns: String,
    pub server_ns: String,
    children: Vec<Child>,
    pub events: Arc<Mutex<Vec<Event>>>,
}

impl Link {
    /// Builds the emulation for `p` with `window` bytes in flight per connection and
    /// direction. `exe` is the xtask binary that runs the proxies.
    pub fn up(p: Profile, window: usize, exe: &Path) -> Result<Link> {
        let id = std::process::id();
        let mut link = Link {
            profile: p,
            window,
            client_ns: format!("xwc{id}"),
            server_ns: format!("xws{id}"),
            children: Vec::new(),
            events: Arc::default(),
        };
        // Left over by a run of this pid that was killed: start clean.
        let _ = ip(&["netns", "del", &link.client_ns]);
        let _ = ip(&["netns", "del", &link.server_ns]);
        let (c, s) = (link.client_ns.clone(), link.server_ns.clone());
        ip(&["netns", "add", &c]).context("creating a network namespace (run as root)")?;
        ip(&["netns", "add", &s])?;
        ip(&[
            "-n", &c, "link", "add", "veth0", "type", "veth", "peer", "name", "veth1", "netns", &s,
        ])?;
        ip(&[
            "-n",
            &c,
            "addr",
            "add",
            &format!("{CLIENT_IP}/24"),
            "dev",
            "veth0",
        ])?;
        ip(&[
            "-n",
            &s,
            "addr",
            "add",
            &format!("{SERVER_IP}/24"),
            "dev",
            "veth1",
        ])?;
        for (ns, dev) in [(&c, "veth0"), (&s, "veth1")] {
            ip(&["-n", ns, "link", "set", "lo", "up"])?;
            ip(&["-n", ns, "link", "set", dev, "up"])?;
            sh(link
                .exec_in(ns, "tc")
                .args(["qdisc", "add", "dev", dev, "root", "tbf", "rate"])
                .arg(format!("{}mbit", p.rate_mbit))
                .arg("burst")
                .arg(p.tbf_burst().to_string())
                .arg("latency")
                .arg(format!("{}ms", Profile::TBF_LATENCY_MS)))?;
        }
        link.start_proxy(exe, SERVE_PROXY_PORT, SERVE_ADDR)?;
        link.start_proxy(exe, PROBE_PROXY_PORT, PROBE_ADDR)?;
        let mut probe = link.exec_in(&s, exe);
        probe
            .args(["bench", "--wan-helper", "probe-server", PROBE_ADDR])
            .stdout(Stdio::piped());
        link.children.push(spawn_ready(probe, "probe server")?.0);
        Ok(link)
    }

    /// `program` run in namespace `ns` (`ip netns exec` execs it in place: the child is
    /// the program itself, so its `/proc` times are its own).
    pub fn exec_in(&self, ns: &str, program: impl AsRef<std::ffi::OsStr>) -> Command {
        let mut c = Command::new("ip");
        c.args(["netns", "exec", ns]).arg(program);
        c
    }

    pub fn client(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.exec_in(&self.client_ns, program)
    }

    pub fn server(&self, program: impl AsRef<std::ffi::OsStr>) -> Command {
        self.exec_in(&self.server_ns, program)
    }

    /// The URL clients use for `xet serve`, through the link and the proxy.
    pub fn serve_url(&self) -> String {
        format!("http://{SERVER_IP}:{SERVE_PROXY_PORT}")
    }

    fn start_proxy(&mut self, exe: &Path, port: u16, target: &str) -> Result<()> {
        let mut c = self.server(exe);
        c.args(["bench", "--wan-helper", "proxy"])
            .arg(format!("{SERVER_IP}:{port}"))
            .arg(target)
            .arg(self.profile.rtt_ms.to_string())
            .arg(self.profile.line_bytes().to_string())
            .arg(self.window.to_string())
            .stdout(Stdio::piped());
        let (child, lines) = spawn_ready(c, "delay proxy")?;
        self.children.push(child);
        if port == SERVE_PROXY_PORT {
            let events = self.events.clone();
            std::thread::spawn(move || {
                for l in lines.lines().map_while(|l| l.ok()) {
                    if let Some(e) = Event::parse(&l) {
                        events.lock().expect("events").push(e);
                    }
                }
            });
        }
        Ok(())
    }

    /// Connections the link check's bulk transfers use: twice as many as it takes for
    /// their windows to cover the bandwidth-delay product.
    pub fn check_connections(&self) -> usize {
        let bdp = self.profile.bytes_per_sec() * self.profile.rtt_ms as f64 / 1000.0;
        2 * (bdp / self.window.max(1) as f64).ceil().max(1.0) as usize
    }

    /// Round trip and raw throughput through the link, measured by the probe client in
    /// the client namespace against the probe server behind its own proxy: bulk over
    /// [`Link::check_connections`] connections, and one connection's download.
    pub fn check(&self, exe: &Path) -> Result<String> {
        let bytes = (self.profile.bytes_per_sec() * 2.0) as u64;
        let out = self
            .client(exe)
            .args(["bench", "--wan-helper", "probe"])
            .arg(format!("{SERVER_IP}:{PROBE_PROXY_PORT}"))
            .arg(bytes.to_string())
            .arg(self.check_connections().to_string())
            .arg(self.window.to_string())
            .output()?;
        if !out.status.success() {
            bail!(
                "the link check failed: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        Ok(String::from_utf8(out.stdout)?.trim().to_string())
    }
}

impl Drop for Link {
    fn drop(&mut self) {
        for c in &mut self.children {
            let _ = c.kill();
            let _ = c.wait();
        }
        let _ = ip(&["netns", "del", &self.client_ns]);
        let _ = ip(&["netns", "del", &self.server_ns]);
    }
}

/// Spawns a helper that prints `ready` on its first line once it listens; returns the
/// child and the rest of its stdout.
fn spawn_ready(
    mut c: Command,
    what: &str,
) -> Result<(Child, std::io::BufReader<std::process::ChildStdout>)> {
    let mut child = c
        .stdin(Stdio::null())
        .spawn()
        .with_context(|| format!("starting the {what}"))?;
    let mut out = std::io::BufReader::new(child.stdout.take().expect("piped stdout"));
    let mut line = String::new();
    out.read_line(&mut line)?;
    if line.trim() != "ready" {
        let _ = child.kill();
        let _ = child.wait();
        bail!("the {what} did not start (it printed {line:?})");
    }
    Ok((child, out))
}

/// The link check's figures, parsed from the probe's line.
pub struct Check {
    pub rtt_min_ms: f64,
    pub rtt_median_ms: f64,
    pub new_conn_ms: f64,
    pub down_mbit: f64,
    pub up_mbit: f64,
    /// One connection's download, past its first window.
    pub one_conn_mbit: f64,
}

impl Check {
    pub fn parse(s: &str) -> Result<Check> {
        let v: Vec<f64> = s
            .split_whitespace()
            .map(str::parse)
            .collect::<Result<_, _>>()
            .with_context(|| format!("the link check printed {s:?}"))?;
        let [
            rtt_min_ms,
            rtt_median_ms,
            new_conn_ms,
            down_mbit,
            up_mbit,
            one_conn_mbit,
        ] = v[..]
        else {
            bail!("the link check printed {s:?}");
        };
        Ok(Check {
            rtt_min_ms,
            rtt_median_ms,
            new_conn_ms,
            down_mbit,
            up_mbit,
            one_conn_mbit,
        })
    }

    /// The check as printed above each profile's rows.
    pub fn line(&self, link: &Link) -> String {
        let (p, c) = (&link.profile, self);
        format!(
            "{}: echo RTT min {:.1} ms, median {:.1} ms; new connection + first echo {:.1} ms; \
TCP bulk over {} connections down {:.0} Mbit/s ({:.0}%), up {:.0} Mbit/s ({:.0}%); \
one connection down {:.0} Mbit/s (window {} KiB / RTT = {:.0} Mbit/s)",
            p.label(),
            c.rtt_min_ms,
            c.rtt_median_ms,
            c.new_conn_ms,
            link.check_connections(),
            c.down_mbit,
            100.0 * c.down_mbit / p.rate_mbit as f64,
            c.up_mbit,
            100.0 * c.up_mbit / p.rate_mbit as f64,
            c.one_conn_mbit,
            link.window >> 10,
            p.window_mbit(link.window)
        )
    }
}

/// A copy of the running xtask binary for the helpers, so a rebuild of `target/release/xtask`
/// by someone else during the run does not change them.
pub fn helper_exe(work: &Path) -> Result<PathBuf> {
    // /proc/self/exe, not the path: a rebuild may already have replaced that file.
    let dst = work.join("xtask-wan");
    std::fs::copy("/proc/self/exe", &dst)
        .with_context(|| format!("copying this xtask binary to {}", dst.display()))?;
    Ok(dst)
}
