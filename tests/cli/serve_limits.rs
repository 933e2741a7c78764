//! `xet serve` under `ulimit -n 1024` with more idle connections than it has file
//! descriptors (no token needed to open them): it keeps its connections under the cap,
//! closing the longest idle ones, so `/health` and a real upload and download through it
//! keep working, and it never runs out of descriptors.

use crate::common;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The server's descriptor limit, and how many idle connections are thrown at it.
const SERVER_FDS: u64 = 1024;
const IDLE: usize = 1100;

/// The soft open-file limit of this process (from `/proc/self/limits`; unknown: `None`).
fn own_fd_limit() -> Option<u64> {
    let limits = std::fs::read_to_string("/proc/self/limits").ok()?;
    limits
        .lines()
        .find(|l| l.starts_with("Max open files"))?
        .split_whitespace()
        .nth(3)?
        .parse()
        .ok()
}

/// `GET /health` on a fresh connection: its status line, or why there was none.
fn health(addr: &str) -> Result<String, String> {
    let mut c = TcpStream::connect_timeout(&addr.parse().unwrap(), Duration::from_secs(10))
        .map_err(|e| format!("connect: {e}"))?;
    c.set_read_timeout(Some(Duration::from_secs(15))).unwrap();
    c.set_write_timeout(Some(Duration::from_secs(15))).unwrap();
    c.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n")
        .map_err(|e| format!("write: {e}"))?;
    let mut answer = Vec::new();
    c.read_to_end(&mut answer)
        .map_err(|e| format!("read: {e}"))?;
    let text = String::from_utf8_lossy(&answer);
    Ok(text.lines().next().unwrap_or("").to_string())
}

/// Run `cmd`, killing it after `limit`; its output (stdout and stderr through files, so
/// nothing blocks on a full pipe).
fn run(cmd: &mut Command, dir: &Path, limit: Duration) -> Output {
    let out = dir.join("run.stdout");
    let err = dir.join("run.stderr");
    let mut child = cmd
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&err).unwrap())
        .spawn()
        .expect("run xet");
    let deadline = Instant::now() + limit;
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            let _ = child.wait();
            panic!("{cmd:?} did not finish in {limit:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    Output {
        status,
        stdout: std::fs::read(&out).unwrap(),
        stderr: std::fs::read(&err).unwrap(),
    }
}

#[test]
fn idle_connections_beyond_the_fd_limit_do_not_lock_clients_out() {
    let tmp = tempfile::tempdir().unwrap();
    let bin = env!("CARGO_BIN_EXE_xet");
    // Enough descriptors here for the idle connections, or fewer connections (still more
    // than the server's connection cap, which is then set lower).
    let own = own_fd_limit().unwrap_or(SERVER_FDS * 2);
    let idle = IDLE.min(own.saturating_sub(100) as usize);
    let mut extra: Vec<String> = Vec::new();
    if idle <= 600 {
        extra = vec!["--max-connections".into(), (idle / 2).max(1).to_string()];
    }
    let server_log = tmp.path().join("serve.log");
    let served = common::Served::spawn(
        Command::new("sh")
            .args([
                "-c",
                &format!("ulimit -n {SERVER_FDS} && exec \"$0\" \"$@\""),
                bin,
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--store",
            ])
            .arg(tmp.path().join("store"))
            .args(&extra)
            .env_remove("XET_LOG")
            .stderr(std::fs::File::create(&server_log).unwrap()),
    );
    let addr = served.url.strip_prefix("http://").unwrap().to_string();
    let limits =
        std::fs::read_to_string(format!("/proc/{}/limits", served.child.id())).unwrap_or_default();
    assert!(
        limits.is_empty()
            || limits
                .lines()
                .any(|l| l.starts_with("Max open files") && l.contains(&SERVER_FDS.to_string())),
        "{limits}"
    );
    assert!(health(&addr).unwrap().contains(" 200 "));

    // Idle connections, never sending a byte (no token needed for that).
    let mut conns = Vec::with_capacity(idle);
    let sa = addr.parse().unwrap();
    for _ in 0..idle {
        if let Ok(c) = TcpStream::connect_timeout(&sa, Duration::from_secs(2)) {
            conns.push(c);
        }
    }
    assert!(conns.len() > idle / 2, "only {} connected", conns.len());

    // The server still answers, at once.
    for _ in 0..3 {
        let status = health(&addr).unwrap_or_else(|e| panic!("/health: {e}"));
        assert!(status.contains(" 200 "), "{status}");
    }

    // And a real upload and download through it.
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 1_500_000, 21);
    let src = tmp.path().join("in.bin");
    std::fs::write(&src, &data).unwrap();
    let xet = |args: &[&str]| {
        let mut c = Command::new(bin);
        c.args(args)
            .env("XET_CACHE", tmp.path().join("cache"))
            .env_remove("XET_STORE")
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_TOKEN")
            .env_remove("XET_TOKEN_URL")
            .env_remove("XET_LOG")
            .stdin(Stdio::null());
        c
    };
    let o = run(
        xet(&["--json", "upload", "--endpoint", &served.url]).arg(&src),
        tmp.path(),
        Duration::from_secs(120),
    );
    assert!(
        o.status.success(),
        "upload: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let up: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let hash = up["files"][0]["hash"].as_str().unwrap().to_string();
    assert_eq!(hash, xet_chunk::file_hash(&data).to_string());
    let dest = tmp.path().join("out.bin");
    let o = run(
        xet(&["download", "--endpoint", &served.url, &hash, "-o"]).arg(&dest),
        tmp.path(),
        Duration::from_secs(120),
    );
    assert!(
        o.status.success(),
        "download: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        std::fs::read(&dest).unwrap() == data,
        "downloaded bytes differ"
    );

    // The server closed idle connections to stay under its cap instead of running out
    // of descriptors.
    let mut closed = 0;
    for c in &mut conns {
        c.set_nonblocking(true).unwrap();
        let mut b = [0u8; 16];
        match c.read(&mut b) {
            Ok(0) => closed += 1,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
            _ => closed += 1,
        }
    }
    assert!(
        closed >= conns.len() - SERVER_FDS as usize / 2,
        "{closed} of {} idle connections closed",
        conns.len()
    );
    drop(conns);
    assert!(health(&addr).unwrap().contains(" 200 "));
    drop(served);
    let log = std::fs::read_to_string(&server_log).unwrap();
    assert!(!log.contains("Too many open files"), "{log}");
}
