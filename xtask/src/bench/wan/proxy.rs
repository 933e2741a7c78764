//! The delay proxy: a TCP relay in the server namespace that holds every piece it reads
//! for half the round trip before writing it on, in both directions, so the round trip
//! through it is the profile's. It keeps reading while earlier pieces wait (a delay line,
//! not stop-and-wait), within a bounded buffer per direction (twice the one-way
//! bandwidth-delay product plus 256 KiB). A half-close is passed on after the delay, like
//! data. A new connection costs one round trip before its first byte moves on, as its
//! handshake would over the real link: the client's connect completes against the proxy
//! at once, so the proxy holds the first client bytes until one RTT after the accept.
//!
//! **The window.** The clients' TCP sees the short veth round trip, so without more one
//! connection would carry the whole link at any RTT. The proxy therefore caps the bytes
//! in flight per connection and direction as a TCP window would: a byte it reads counts
//! as in flight until its acknowledgement would be back, one RTT after it was read (or
//! half an RTT after it was written on, if writing it took longer), and the proxy stops
//! reading from that side while the window's bytes are in flight. One connection then
//! carries at most `WINDOW / RTT`, and a client needs parallel connections to fill a
//! link whose bandwidth-delay product is larger. The window (`link::WINDOW`) is 4 MiB,
//! this machine's Linux default send buffer maximum (`net.ipv4.tcp_wmem` = 4096 16384
//! 4194304): a sender's unacknowledged bytes live in its send buffer, so that is the most
//! one connection has in flight. The receive side allows more (`net.ipv4.tcp_rmem` max 32
//! MiB, half of it advertised with `tcp_adv_win_scale` 1), so the send buffer binds,
//! both for the client's uploads and for the server's answers.
//!
//! What a relay does not emulate: slow start and loss recovery happen at LAN speed
//! (the window is reached at once and kept); only the request/response round trips,
//! the per-connection window and the link's rate are those of the profile.

use crate::bench::proc::unix_ns;
use anyhow::{Context, Result};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Semaphore, mpsc};

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
    /// One line of the proxy's stdout (see [`serve`]).
    pub fn parse(l: &str) -> Option<Event> {
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
struct Window(Option<Arc<Semaphore>>);

impl Window {
    /// A window of `bytes` (0: none; at least one piece, so reading never stops).
    fn new(bytes: usize) -> Window {
        Window((bytes > 0).then(|| Arc::new(Semaphore::new(bytes.max(PIECE)))))
    }

    /// Room for a read of up to `n` bytes (`None` without a window).
    async fn take(&self, n: usize) -> Result<Option<tokio::sync::OwnedSemaphorePermit>> {
        match &self.0 {
            Some(s) => Ok(Some(s.clone().acquire_many_owned(n as u32).await?)),
            None => Ok(None),
        }
    }

    /// When a byte read so that it is written on at `due`, and written at
    /// `written`, is acknowledged: a round trip after it was read (`acked`, which is
    /// `due + oneway`), or half one after it was written if the receiver took it
    /// later (a full link or a slow reader: the sender's window waits on them too).
    fn acked_at(
        acked: tokio::time::Instant,
        written: tokio::time::Instant,
        oneway: Duration,
    ) -> tokio::time::Instant {
        acked.max(written + oneway)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

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
        let shape = Shape {
            rtt,
            line_bytes,
            window: 0,
        };
        tokio::spawn(accept_loop(l, target, shape, tx));
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
        let shape = Shape {
            rtt,
            line_bytes: 64 << 20,
            window: W,
        };
        tokio::spawn(accept_loop(l, target, shape, tx));
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
