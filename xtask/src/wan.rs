//! The emulated wide-area link of `cargo xtask bench --wan`: two network namespaces, a
//! veth pair, `tc tbf` on each end's egress, and a delay proxy.
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
//! the veth pair with it, and two bench runs at once do not see each other.
//!
//! `sch_netem` is not available here, hence the delay proxy ([`proxy`]): a TCP relay in
//! the server namespace that holds every piece it reads for half the round trip before
//! writing it on, in both directions, so the round trip through it is the profile's.
//! It keeps reading while earlier pieces wait (a delay line, not stop-and-wait), within a
//! bounded buffer per direction (twice the one-way bandwidth-delay product plus 256
//! KiB). A half-close is passed on after the delay, like data. A new connection costs
//! one round trip before its first byte moves on, as its handshake would over the real
//! link: the client's connect completes against the proxy at once, so the proxy holds
//! the first client bytes until one RTT after the accept.
//!
//! **The window.** The clients' TCP sees the short veth round trip, so without more one
//! connection would carry the whole link at any RTT. The proxy therefore caps the bytes
//! in flight per connection and direction as a TCP window would: a byte it reads counts
//! as in flight until its acknowledgement would be back, one RTT after it was read (or
//! half an RTT after it was written on, if writing it took longer), and the proxy stops
//! reading from that side while [`WINDOW`] bytes are in flight. One connection then
//! carries at most `WINDOW / RTT`, and a client needs parallel connections to fill a
//! link whose bandwidth-delay product is larger. [`WINDOW`] is 4 MiB, this machine's
//! Linux default send buffer maximum (`net.ipv4.tcp_wmem` = 4096 16384 4194304): a
//! sender's unacknowledged bytes live in its send buffer, so that is the most one
//! connection has in flight. The receive side allows more (`net.ipv4.tcp_rmem` max 32
//! MiB, half of it advertised with `tcp_adv_win_scale` 1), so the send buffer binds,
//! both for the client's uploads and for the server's answers.
//!
//! What a relay does not emulate: slow start and loss recovery happen at LAN speed
//! (the window is reached at once and kept); only the request/response round trips,
//! the per-connection window and the link's rate are those of the profile.

use anyhow::{Context, Result, bail};
use std::io::{BufRead, Read, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

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
/// what a sender has unacknowledged. See the module docs.
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

fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

/// What the proxy in front of `xet serve` saw, for the time-to-first-byte rows.
#[derive(Clone, Debug)]
pub enum Event {
    /// A client connected.
    Conn { at_ns: u64 },
    /// The first line of a request, when the proxy read it from the client.
    Request { conn: u64, at_ns: u64, line: String },
    /// The first byte of the answer to the connection's last request, when the proxy
    /// had written it to the client (after the delay).
    FirstByte { conn: u64, at_ns: u64 },
}

impl Event {
    fn parse(l: &str) -> Option<Event> {
        let mut f = l.splitn(4, ' ');
        let (kind, conn, at) = (f.next()?, f.next()?.parse().ok()?, f.next()?.parse().ok()?);
        Some(match kind {
            "conn" => Event::Conn { at_ns: at },
            "req" => Event::Request {
                conn,
                at_ns: at,
                line: f.next().unwrap_or("").to_string(),
            },
            "first" => Event::FirstByte { conn, at_ns: at },
            _ => return None,
        })
    }

    pub fn at_ns(&self) -> u64 {
        match self {
            Event::Conn { at_ns, .. }
            | Event::Request { at_ns, .. }
            | Event::FirstByte { at_ns, .. } => *at_ns,
        }
    }
}

/// `bench --wan-helper proxy|probe-server|probe ...`: the processes the link runs in its
/// namespaces (this same binary).
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
            let rtt = Duration::from_millis(a(3)?.parse()?);
            let shape = proxy::Shape {
                rtt,
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
        other => bail!("unknown --wan-helper {other}"),
    }
}

/// The delay proxy.
pub mod proxy {
    use super::*;

    /// How late tokio's timer fires, on average.
    const TIMER_LATE: Duration = Duration::from_micros(900);

    /// The most one read takes from a socket.
    const PIECE: usize = 64 << 10;

    /// What the proxy does to each connection.
    #[derive(Clone, Copy, Debug)]
    pub struct Shape {
        /// The round trip it adds (half each way).
        pub rtt: Duration,
        /// Bytes held per direction while they wait (the delay line's buffer).
        pub line_bytes: usize,
        /// Bytes in flight per direction until their acknowledgement would be back (the
        /// emulated TCP window); 0: no window.
        pub window: usize,
    }

    /// A piece of data on its way, with when it may be written on; `None` data is the
    /// sender's half-close. `_line` is its share of the line's byte budget; `window`
    /// its share of the window, given back at `acked` at the earliest.
    struct Piece {
        due: tokio::time::Instant,
        acked: tokio::time::Instant,
        data: Option<Vec<u8>>,
        _line: Option<tokio::sync::OwnedSemaphorePermit>,
        window: Option<tokio::sync::OwnedSemaphorePermit>,
    }

    /// Accepts connections on `listen` and relays each to `target`, each direction
    /// delayed by `rtt / 2` and held to the window. Prints `ready`, then one line per
    /// event (see [`Event`]).
    pub async fn serve(listen: SocketAddr, target: SocketAddr, shape: Shape) -> Result<()> {
        let l = TcpListener::bind(listen)
            .await
            .with_context(|| format!("binding the delay proxy to {listen}"))?;
        // Events go to stdout through one writer task; a bounded queue, so a stalled
        // reader slows the proxy instead of growing its memory.
        let (ev_tx, mut ev_rx) = mpsc::channel::<String>(4096);
        tokio::spawn(async move {
            let mut out = tokio::io::stdout();
            while let Some(l) = ev_rx.recv().await {
                if out.write_all(l.as_bytes()).await.is_err() {
                    break;
                }
                let _ = out.flush().await;
            }
        });
        println!("ready");
        std::io::stdout().flush()?;
        accept_loop(l, target, shape, ev_tx).await
    }

    /// Relays every connection `l` accepts; events (one line each) go to `ev_tx`.
    pub async fn accept_loop(
        l: TcpListener,
        target: SocketAddr,
        shape: Shape,
        ev_tx: mpsc::Sender<String>,
    ) -> Result<()> {
        let next_id = AtomicU64::new(0);
        loop {
            let (client, _) = l.accept().await?;
            let accepted = tokio::time::Instant::now();
            let id = next_id.fetch_add(1, Ordering::Relaxed);
            let ev = ev_tx.clone();
            let _ = ev.send(format!("conn {id} {}\n", unix_ns())).await;
            tokio::spawn(async move {
                if let Err(e) = relay(client, target, accepted, shape, id, ev).await {
                    eprintln!("delay proxy: connection {id}: {e:#}");
                }
            });
        }
    }

    async fn relay(
        client: TcpStream,
        target: SocketAddr,
        accepted: tokio::time::Instant,
        shape: Shape,
        id: u64,
        ev: mpsc::Sender<String>,
    ) -> Result<()> {
        let server = TcpStream::connect(target)
            .await
            .with_context(|| format!("connecting to {target}"))?;
        client.set_nodelay(true)?;
        server.set_nodelay(true)?;
        let (cr, cw) = client.into_split();
        let (sr, sw) = server.into_split();
        // tokio's timer fires on the first whole millisecond after a deadline: about
        // one millisecond late per direction (measured by the link check), taken off.
        let oneway = (shape.rtt / 2).saturating_sub(TIMER_LATE);
        // Whether the client's next bytes start a request (HTTP/1.1, one request at a
        // time per connection): true at first and again once an answer is delivered.
        let tap = Arc::new(Tap {
            id,
            ev,
            awaiting_request: AtomicBool::new(true),
            awaiting_answer: AtomicBool::new(false),
        });
        // The client's first bytes wait one round trip after the accept: the handshake
        // the relay answered locally.
        let up = delay_line(
            cr,
            sw,
            oneway,
            accepted + shape.rtt,
            shape,
            tap.clone(),
            Dir::Up,
        );
        let down = delay_line(sr, cw, oneway, accepted, shape, tap, Dir::Down);
        let (u, d) = tokio::join!(up, down);
        u.and(d)
    }

    #[derive(Clone, Copy, PartialEq)]
    enum Dir {
        Up,
        Down,
    }

    struct Tap {
        id: u64,
        ev: mpsc::Sender<String>,
        awaiting_request: AtomicBool,
        awaiting_answer: AtomicBool,
    }

    impl Tap {
        async fn read_up(&self, data: &[u8]) {
            if self.awaiting_request.swap(false, Ordering::AcqRel) {
                let end = data
                    .windows(2)
                    .position(|w| w == b"\r\n")
                    .unwrap_or(data.len())
                    .min(200);
                let line = String::from_utf8_lossy(&data[..end]).replace('\n', " ");
                self.awaiting_answer.store(true, Ordering::Release);
                let _ = self
                    .ev
                    .send(format!("req {} {} {line}\n", self.id, unix_ns()))
                    .await;
            }
        }

        async fn wrote_down(&self) {
            self.awaiting_request.store(true, Ordering::Release);
            if self.awaiting_answer.swap(false, Ordering::AcqRel) {
                let _ = self
                    .ev
                    .send(format!("first {} {}\n", self.id, unix_ns()))
                    .await;
            }
        }
    }

    /// Reads `from` and writes each piece to `to` once `oneway` has passed since it was
    /// read (and not before `not_before + oneway`), keeping at most `shape.line_bytes`
    /// waiting and `shape.window` in flight ([`Window`]). The reader, the writer and
    /// the acknowledgements are separate tasks, so reading goes on while earlier pieces
    /// wait.
    async fn delay_line(
        mut from: tokio::net::tcp::OwnedReadHalf,
        mut to: tokio::net::tcp::OwnedWriteHalf,
        oneway: Duration,
        not_before: tokio::time::Instant,
        shape: Shape,
        tap: Arc<Tap>,
        dir: Dir,
    ) -> Result<()> {
        let line = Arc::new(Semaphore::new(shape.line_bytes.max(2 * PIECE)));
        let window = Window::new(shape.window);
        // Pieces are bounded by the byte budget; the count bound only caps the queue's
        // bookkeeping if reads come back small.
        let (tx, mut rx) = mpsc::channel::<Piece>(16384);
        let (ack_tx, mut ack_rx) =
            mpsc::channel::<(tokio::time::Instant, tokio::sync::OwnedSemaphorePermit)>(16384);
        let read_tap = tap.clone();
        let reader = async move {
            loop {
                let mut line_permit = line.clone().acquire_many_owned(PIECE as u32).await?;
                let mut window_permit = window.take(PIECE).await?;
                let mut buf = vec![0u8; PIECE];
                // A reset ends this direction as a close would.
                let n = from.read(&mut buf).await.unwrap_or(0);
                let due = tokio::time::Instant::now().max(not_before) + oneway;
                let acked = due + oneway;
                if n == 0 {
                    let _ = tx
                        .send(Piece {
                            due,
                            acked,
                            data: None,
                            _line: None,
                            window: None,
                        })
                        .await;
                    return anyhow::Ok(());
                }
                buf.truncate(n);
                let kept_line = line_permit.split(n);
                drop(line_permit);
                let kept_window = window_permit.as_mut().and_then(|p| p.split(n));
                drop(window_permit);
                if dir == Dir::Up {
                    read_tap.read_up(&buf).await;
                }
                let piece = Piece {
                    due,
                    acked,
                    data: Some(buf),
                    _line: kept_line,
                    window: kept_window,
                };
                if tx.send(piece).await.is_err() {
                    return Ok(());
                }
            }
        };
        let writer = async move {
            while let Some(p) = rx.recv().await {
                tokio::time::sleep_until(p.due).await;
                match p.data {
                    Some(d) => {
                        if to.write_all(&d).await.is_err() {
                            break;
                        }
                        if dir == Dir::Down {
                            tap.wrote_down().await;
                        }
                        if let Some(w) = p.window {
                            let at = Window::acked_at(p.acked, tokio::time::Instant::now(), oneway);
                            if ack_tx.send((at, w)).await.is_err() {
                                break;
                            }
                        }
                    }
                    None => {
                        let _ = to.shutdown().await;
                        break;
                    }
                }
            }
            // Dropping `rx` stops the reader at its next piece.
            anyhow::Ok(())
        };
        // Acknowledgements come back in order: each gives its bytes back to the window.
        let acks = async move {
            while let Some((at, permit)) = ack_rx.recv().await {
                tokio::time::sleep_until(at).await;
                drop(permit);
            }
        };
        let (r, w, ()) = tokio::join!(reader, writer, acks);
        r.and(w)
    }

    /// The emulated TCP window of one direction: bytes read count against it until
    /// their acknowledgement would be back.
    pub(super) struct Window(Option<Arc<Semaphore>>);

    impl Window {
        /// A window of `bytes` (0: none; at least one piece, so reading never stops).
        pub(super) fn new(bytes: usize) -> Window {
            Window((bytes > 0).then(|| Arc::new(Semaphore::new(bytes.max(PIECE)))))
        }

        /// Room for a read of up to `n` bytes (`None` without a window).
        pub(super) async fn take(
            &self,
            n: usize,
        ) -> Result<Option<tokio::sync::OwnedSemaphorePermit>> {
            match &self.0 {
                Some(s) => Ok(Some(s.clone().acquire_many_owned(n as u32).await?)),
                None => Ok(None),
            }
        }

        /// When a byte read so that it is written on at `due`, and written at
        /// `written`, is acknowledged: a round trip after it was read (`acked`, which is
        /// `due + oneway`), or half one after it was written if the receiver took it
        /// later (a full link or a slow reader: the sender's window waits on them too).
        pub(super) fn acked_at(
            acked: tokio::time::Instant,
            written: tokio::time::Instant,
            oneway: Duration,
        ) -> tokio::time::Instant {
            acked.max(written + oneway)
        }
    }
}

/// The link check: a probe server behind its own delay proxy, and the client that times
/// a one-byte echo and a bulk transfer each way.
pub mod probe {
    use super::*;

    /// Commands, the first byte a probe client sends.
    const ECHO: u8 = b'e';
    const DOWN: u8 = b'd';
    const UP: u8 = b'u';

    pub async fn server(addr: SocketAddr) -> Result<()> {
        let l = TcpListener::bind(addr).await?;
        println!("ready");
        std::io::stdout().flush()?;
        loop {
            let (s, _) = l.accept().await?;
            tokio::spawn(async move {
                if let Err(e) = serve_one(s).await {
                    eprintln!("probe server: {e}");
                }
            });
        }
    }

    /// Reads `s` to its end, calling `each` with the length of every read; the total.
    async fn drain(s: &mut TcpStream, mut each: impl FnMut(u64)) -> std::io::Result<u64> {
        let mut buf = vec![0u8; 256 << 10];
        let mut total = 0u64;
        loop {
            let n = s.read(&mut buf).await? as u64;
            if n == 0 {
                return Ok(total);
            }
            total += n;
            each(n);
        }
    }

    async fn serve_one(mut s: TcpStream) -> std::io::Result<()> {
        s.set_nodelay(true)?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        match b[0] {
            ECHO => {
                while s.read(&mut b).await? == 1 {
                    s.write_all(&b).await?;
                }
            }
            DOWN => {
                let mut n = [0u8; 8];
                s.read_exact(&mut n).await?;
                let mut left = u64::from_le_bytes(n);
                let buf = vec![0u8; 256 << 10];
                while left > 0 {
                    let k = left.min(buf.len() as u64) as usize;
                    s.write_all(&buf[..k]).await?;
                    left -= k as u64;
                }
                s.shutdown().await?;
            }
            UP => {
                let total = drain(&mut s, |_| {}).await?;
                s.write_all(&total.to_le_bytes()).await?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Prints one line: the echo round trip (min and median of 20 on one connection),
    /// a new connection's first echo, the bulk rates each way over `bytes` spread over
    /// `conns` connections, and one connection's download rate past its first window.
    pub async fn client(addr: SocketAddr, bytes: u64, conns: usize, window: u64) -> Result<()> {
        let t0 = Instant::now();
        let mut s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        s.write_all(&[ECHO, 1]).await?;
        let mut b = [0u8; 1];
        s.read_exact(&mut b).await?;
        let first = t0.elapsed();
        let mut rtts = Vec::new();
        for _ in 0..20 {
            let t = Instant::now();
            s.write_all(&[1]).await?;
            s.read_exact(&mut b).await?;
            rtts.push(t.elapsed());
        }
        rtts.sort();
        let (min, med) = (rtts[0], rtts[rtts.len() / 2]);
        drop(s);

        let conns = conns.max(1);
        let each = bytes.div_ceil(conns as u64);
        let down = bulk_down(addr, each, conns, 0).await?;
        let up = bulk_up(addr, each, conns, min).await?;
        // One connection, timed once its first window is in: what the window lets
        // through per round trip (the first window arrives in one burst).
        let one = bulk_down(addr, 8 * window.max(1), 1, window).await?;
        println!(
            "{:.1} {:.1} {:.1} {down:.0} {up:.0} {one:.0}",
            min.as_secs_f64() * 1e3,
            med.as_secs_f64() * 1e3,
            first.as_secs_f64() * 1e3
        );
        Ok(())
    }

    /// Downloads `each` bytes on each of `conns` connections at once; Mbit/s from the
    /// moment `skip` bytes (all connections together) are in to the last byte, so the
    /// round trips before the first byte do not count against the rate.
    async fn bulk_down(addr: SocketAddr, each: u64, conns: usize, skip: u64) -> Result<f64> {
        let got = Arc::new(AtomicU64::new(0));
        let started: Arc<Mutex<Option<(Instant, u64)>>> = Arc::default();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..conns {
            let (got, started) = (got.clone(), started.clone());
            tasks.spawn(async move {
                let mut s = TcpStream::connect(addr).await?;
                let mut cmd = vec![DOWN];
                cmd.extend_from_slice(&each.to_le_bytes());
                s.write_all(&cmd).await?;
                let mine = drain(&mut s, |n| {
                    let total = got.fetch_add(n, Ordering::AcqRel) + n;
                    let mut st = started.lock().expect("start");
                    if st.is_none() && total >= skip.max(1) {
                        *st = Some((Instant::now(), total));
                    }
                })
                .await?;
                if mine != each {
                    bail!("probe download: {mine} bytes of {each}");
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let (t, at) = started.lock().expect("start").context("no byte arrived")?;
        let moved = got.load(Ordering::Acquire) - at;
        Ok(moved as f64 * 8.0 / t.elapsed().as_secs_f64() / 1e6)
    }

    /// Uploads `each` bytes on each of `conns` connections at once; Mbit/s from the
    /// first connect to the last count from the server, less one round trip (`rtt`:
    /// the last byte's way there and the count's way back; the emulated handshake is
    /// hidden, as the client keeps sending into the line meanwhile).
    async fn bulk_up(addr: SocketAddr, each: u64, conns: usize, rtt: Duration) -> Result<f64> {
        let t = Instant::now();
        let mut tasks = tokio::task::JoinSet::new();
        for _ in 0..conns {
            tasks.spawn(async move {
                let mut s = TcpStream::connect(addr).await?;
                s.write_all(&[UP]).await?;
                let chunk = vec![0u8; 256 << 10];
                let mut left = each;
                while left > 0 {
                    let k = left.min(chunk.len() as u64) as usize;
                    s.write_all(&chunk[..k]).await?;
                    left -= k as u64;
                }
                s.shutdown().await?;
                let mut n = [0u8; 8];
                s.read_exact(&mut n).await?;
                if u64::from_le_bytes(n) != each {
                    bail!(
                        "probe upload: the server counted {} bytes of {each}",
                        u64::from_le_bytes(n)
                    );
                }
                anyhow::Ok(())
            });
        }
        while let Some(r) = tasks.join_next().await {
            r??;
        }
        let secs = t.elapsed().as_secs_f64() - rtt.as_secs_f64();
        Ok((each * conns as u64) as f64 * 8.0 / secs / 1e6)
    }
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

/// User + system CPU seconds of process `pid` and its reaped children, from
/// `/proc/<pid>/stat`, and whether it has exited (a zombie, not yet reaped).
pub fn proc_cpu(pid: u32, tick: f64) -> Result<(f64, bool)> {
    let mut s = String::new();
    std::fs::File::open(format!("/proc/{pid}/stat"))?.read_to_string(&mut s)?;
    // After the command name (in parentheses, may hold spaces): state is field 3, utime
    // 14, stime 15, cutime 16, cstime 17.
    let rest = &s[s.rfind(')').context("/proc/pid/stat")? + 1..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    let n = |i: usize| -> Result<f64> {
        Ok(f.get(i)
            .context("/proc/pid/stat is short")?
            .parse::<u64>()? as f64)
    };
    let cpu = (n(11)? + n(12)? + n(13)? + n(14)?) / tick;
    Ok((cpu, f.first() == Some(&"Z")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A proxy with `rtt` and `line_bytes` (no window) in front of an echo-like upstream
    /// that reads the whole request up to the client's half-close, then answers with
    /// its bytes reversed and closes; returns the proxy's address and its events.
    async fn proxy_to_reverser(
        rtt: Duration,
        line_bytes: usize,
    ) -> (SocketAddr, mpsc::Receiver<String>) {
        let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = up.local_addr().unwrap();
        tokio::spawn(async move {
            loop {
                let (mut s, _) = up.accept().await.unwrap();
                tokio::spawn(async move {
                    let mut all = Vec::new();
                    s.read_to_end(&mut all).await.unwrap();
                    all.reverse();
                    s.write_all(&all).await.unwrap();
                    s.shutdown().await.unwrap();
                });
            }
        });
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, rx) = mpsc::channel(64);
        let shape = proxy::Shape {
            rtt,
            line_bytes,
            window: 0,
        };
        tokio::spawn(proxy::accept_loop(l, target, shape, tx));
        (addr, rx)
    }

    /// Every byte arrives, in order, both ways, through a line far smaller than the
    /// data (so the reader waits on the budget), and each half-close is passed on: the
    /// upstream sees the end of the request, the client the end of the answer.
    #[tokio::test]
    async fn relays_everything_and_half_closes_through_a_small_line() {
        let (addr, _ev) = proxy_to_reverser(Duration::from_millis(4), 0).await;
        let mut data = vec![0u8; 3 << 20];
        xet_testdata::Rng::new(1).fill(&mut data);
        let mut c = TcpStream::connect(addr).await.unwrap();
        let (mut r, mut w) = c.split();
        let send = async {
            w.write_all(&data).await.unwrap();
            w.shutdown().await.unwrap();
        };
        let mut got = Vec::new();
        let recv = r.read_to_end(&mut got);
        // A guard against a hang (a half-close not passed on), not a speed check.
        let ((), n) =
            tokio::time::timeout(Duration::from_secs(120), async { tokio::join!(send, recv) })
                .await
                .expect("a half-close was not passed on");
        assert_eq!(n.unwrap(), data.len());
        data.reverse();
        assert!(got == data, "the answer differs from the request reversed");
    }

    /// The events of one connection: its accept, the request's first line as read from
    /// the client, and the first byte of its answer.
    #[tokio::test]
    async fn reports_requests_and_first_answer_bytes() {
        let (addr, mut ev) = proxy_to_reverser(Duration::from_millis(2), 1 << 20).await;
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(b"GET /_xorb/abc HTTP/1.1\r\nHost: x\r\n\r\n")
            .await
            .unwrap();
        c.shutdown().await.unwrap();
        let mut got = Vec::new();
        c.read_to_end(&mut got).await.unwrap();
        let mut kinds = Vec::new();
        for _ in 0..3 {
            let l = ev.recv().await.unwrap();
            match Event::parse(l.trim_end()).unwrap() {
                Event::Conn { .. } => kinds.push("conn".to_string()),
                Event::Request { conn, line, .. } => {
                    assert_eq!(conn, 0);
                    kinds.push(format!("req {line}"));
                }
                Event::FirstByte { conn, .. } => {
                    assert_eq!(conn, 0);
                    kinds.push("first".into());
                }
            }
        }
        assert_eq!(kinds, ["conn", "req GET /_xorb/abc HTTP/1.1", "first"]);
    }

    /// The window: of a client's bytes, at most one window reaches the upstream within
    /// the round trip after the first of them, as the rest waits for acknowledgements;
    /// and all arrive, in order. (A slow machine only delays the later bytes more, so
    /// this bound holds however loaded the machine is; without the window the proxy's
    /// large line lets everything through within that round trip.)
    #[tokio::test]
    async fn at_most_one_window_arrives_per_round_trip() {
        const W: usize = 256 << 10;
        let rtt = Duration::from_millis(400);
        let up = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let target = up.local_addr().unwrap();
        // The upstream notes, per read, when the bytes arrived.
        let upstream = tokio::spawn(async move {
            let (mut s, _) = up.accept().await.unwrap();
            let mut all = Vec::new();
            let mut arrivals = Vec::new();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = s.read(&mut buf).await.unwrap();
                if n == 0 {
                    break;
                }
                arrivals.push((Instant::now(), n));
                all.extend_from_slice(&buf[..n]);
            }
            (all, arrivals)
        });
        let l = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (tx, _rx) = mpsc::channel(64);
        let shape = proxy::Shape {
            rtt,
            line_bytes: 64 << 20,
            window: W,
        };
        tokio::spawn(proxy::accept_loop(l, target, shape, tx));
        let mut data = vec![0u8; 4 * W];
        xet_testdata::Rng::new(3).fill(&mut data);
        let mut c = TcpStream::connect(addr).await.unwrap();
        c.write_all(&data).await.unwrap();
        c.shutdown().await.unwrap();
        let (got, arrivals) = upstream.await.unwrap();
        assert!(got == data, "the upstream got other bytes than were sent");
        let first = arrivals[0].0;
        let early: usize = arrivals
            .iter()
            .filter(|(t, _)| *t < first + rtt / 2)
            .map(|(_, n)| n)
            .sum();
        assert!(
            early <= W,
            "{early} bytes arrived within half a round trip of the first, more than the {W}-byte window"
        );
    }
}
