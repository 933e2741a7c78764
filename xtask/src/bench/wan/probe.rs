//! The link check: a probe server behind its own delay proxy, and the client that times a
//! one-byte echo and a bulk transfer each way through it.

use anyhow::{Context, Result, bail};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

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
