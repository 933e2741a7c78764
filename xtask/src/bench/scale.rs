//! Group `scale`: the Hub core at the sizes of real dataset repositories, against a
//! release `xet serve` on a directory store (issue 36's rows). The repositories are
//! written through the library (`xet_hub::Repos` over `xet_store`), which is what the
//! server's commit route calls, so a 100,000-file tree takes seconds to make; every
//! measurement is then HTTP against the server:
//!
//! - a tree page (the first 1,000 entries) of the root of 50,000 one-file folders, while
//!   three clients list it in a loop, and `/health`'s p99 meanwhile;
//! - the store's growth from a one-file commit (through the commit route) on a
//!   100,000-file tree, and resolves (`HEAD`) of one file there, per second, four at once;
//! - repo info on a repository with one commit and after 2,000 commits;
//! - 100 anonymous clients each sending the headers of a 16 MiB validate-yaml body and
//!   1 MiB of it, then stalling: the server's peak RSS;
//! - three commits at once, each of one 320 MiB inline file (427 MiB of base64 on one
//!   line, 1.25 GiB of bodies): the server's peak RSS, which must not follow the bodies
//!   (what is left is the upload pipeline's buffers: a xorb being built per file).
//!
//! Prints its own table (goal next to measured) and writes it to `docs/BENCHMARKS.md`
//! under "Hub at scale".

use super::inputs::fresh;
use super::proc::{cpu_secs, status_kib};
use super::serve::{HUB_TOKEN, Serve, ServeProcess};
use anyhow::{Context, Result, bail};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};
use xet_hub::{
    BranchName, CommitMeta, FileEntry, Operation, RepoId, RepoPath, RepoRef, RepoType, Repos,
    Sha256,
};

/// One row: what, measured, goal, whether it is met.
struct ScaleRow {
    case: &'static str,
    measured: String,
    goal: &'static str,
    met: bool,
}

pub fn run(xet: &Path, write: bool) -> Result<()> {
    let work = crate::workspace_root().join("target/bench-scale");
    fresh(&work)?;
    let store = work.join("store");
    std::fs::create_dir_all(&store)?;
    let t = Instant::now();
    populate(&store)?;
    eprintln!(
        "scale: repositories written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let server = Serve::loopback(xet, &store).hub().start()?;
    let addr = server
        .url
        .strip_prefix("http://")
        .context("the server's URL")?
        .trim_end_matches('/')
        .to_string();
    let mut rows = vec![tree_page(&addr)?];
    rows.extend(big_tree(&addr, &store, &server)?);
    rows.push(repo_info(&addr, &store, &server)?);
    drop(server);
    rows.push(stalled_bodies(xet, &store)?);
    rows.push(large_inline_commits(xet, &store)?);
    let table = render(&rows);
    println!("{table}");
    if write {
        write_doc(&table)?;
    }
    if let Some(r) = rows.iter().find(|r| !r.met) {
        bail!("{}: {} (goal {})", r.case, r.measured, r.goal);
    }
    Ok(())
}

fn repo(name: &str) -> RepoRef {
    RepoRef::new(
        RepoType::Model,
        RepoId::new("org", name).expect("a bench name"),
    )
}

fn lfs(i: u64) -> FileEntry {
    let mut sha = [0u8; 32];
    sha[24..].copy_from_slice(&i.to_be_bytes());
    FileEntry::lfs(
        xet_hash::chunk_hash(&i.to_le_bytes()),
        Sha256::from_bytes(sha),
        1 << 20,
    )
}

fn meta(summary: &str) -> CommitMeta {
    CommitMeta {
        summary: summary.into(),
        author: "bench".into(),
        created_at: 1_800_000_000,
        ..CommitMeta::default()
    }
}

/// `org/wide` (50,000 one-file folders), `org/big` (100,000 files in 100 folders) and
/// `org/long` (one commit; 1,999 more are added later).
fn populate(store: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let cas = Arc::new(xet_store::open_store(store).await?);
        let repos = Repos::new(cas);
        let main = BranchName::main();
        for (name, n, folder) in [("wide", 50_000u64, 1u64), ("big", 100_000, 1000)] {
            let r = repo(name);
            repos.create(&r, "bench", false, 1).await?;
            let ops: Vec<Operation> = (0..n)
                .map(|i| Operation::Add {
                    path: RepoPath::parse(&format!("d{:05}/f{i:06}.bin", i / folder))
                        .expect("a bench path"),
                    entry: lfs(i),
                })
                .collect();
            repos
                .commit_to_branch(&r, &main, None, &ops, &meta(name))
                .await?;
        }
        repos.create(&repo("long"), "bench", false, 1).await?;
        anyhow::Ok(())
    })
}

/// `METHOD PATH` over one connection; the status and the seconds it took.
fn request(addr: &str, method: &str, path: &str, token: bool) -> Result<(u16, f64)> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    let auth = if token {
        format!("Authorization: Bearer {HUB_TOKEN}\r\n")
    } else {
        String::new()
    };
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\n{auth}Connection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let status = std::str::from_utf8(&buf[..buf.len().min(12)])
        .ok()
        .and_then(|l| l.get(9..12))
        .and_then(|c| c.parse().ok())
        .with_context(|| format!("{method} {path}: no status line"))?;
    Ok((status, t.elapsed().as_secs_f64()))
}

fn percentile(v: &mut [f64], p: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    v[((v.len() - 1) as f64 * p).round() as usize]
}

fn tree_page(addr: &str) -> Result<ScaleRow> {
    let path = "/api/models/org/wide/tree/main";
    let stop = Arc::new(AtomicBool::new(false));
    let listers: Vec<_> = (0..3)
        .map(|_| {
            let (addr, stop) = (addr.to_string(), Arc::clone(&stop));
            std::thread::spawn(move || -> Result<Vec<f64>> {
                let mut times = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let (status, secs) = request(&addr, "GET", path, true)?;
                    if status != 200 {
                        bail!("{path}: {status}");
                    }
                    times.push(secs);
                }
                Ok(times)
            })
        })
        .collect();
    let mut health = Vec::new();
    let t = Instant::now();
    while t.elapsed() < Duration::from_secs(5) {
        health.push(request(addr, "GET", "/health", false)?.1);
        std::thread::sleep(Duration::from_millis(10));
    }
    stop.store(true, Ordering::Relaxed);
    let mut pages = Vec::new();
    for l in listers {
        pages.extend(l.join().expect("a lister")?);
    }
    let (page_p50, health_p99) = (percentile(&mut pages, 0.5), percentile(&mut health, 0.99));
    Ok(ScaleRow {
        case: "tree page of 50,000 folders (3 clients listing), /health p99 meanwhile",
        measured: format!(
            "page p50 {:.0} ms, max {:.0} ms ({} pages); /health p99 {:.1} ms",
            page_p50 * 1e3,
            pages.last().copied().unwrap_or(0.0) * 1e3,
            pages.len(),
            health_p99 * 1e3
        ),
        goal: "≤ 1 s, /health p99 ≤ 200 ms",
        met: pages.last().copied().unwrap_or(0.0) <= 1.0 && health_p99 <= 0.2,
    })
}

fn dir_bytes(dir: &Path) -> u64 {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return 0;
    };
    rd.flatten()
        .map(|e| match e.file_type() {
            Ok(t) if t.is_dir() => dir_bytes(&e.path()),
            _ => e.metadata().map_or(0, |m| m.len()),
        })
        .sum()
}

/// A one-line inline commit through the commit route.
fn commit_one_file(addr: &str, repo: &str, path: &str) -> Result<()> {
    let body = format!(
        "{{\"key\":\"header\",\"value\":{{\"summary\":\"one file\"}}}}\n\
         {{\"key\":\"file\",\"value\":{{\"path\":\"{path}\",\"content\":\"aGVsbG8K\",\"encoding\":\"base64\"}}}}\n"
    );
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "POST /api/models/{repo}/commit/main HTTP/1.1\r\nHost: {addr}\r\n\
         Authorization: Bearer {HUB_TOKEN}\r\nContent-Type: application/x-ndjson\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut out = String::new();
    s.read_to_string(&mut out)?;
    if !out.starts_with("HTTP/1.1 200") {
        bail!("commit to {repo}: {}", out.lines().next().unwrap_or(""));
    }
    Ok(())
}

fn big_tree(addr: &str, store: &Path, server: &ServeProcess) -> Result<Vec<ScaleRow>> {
    let hub = store.join("hub");
    let before = dir_bytes(&hub);
    commit_one_file(addr, "org/big", "d00050/new.txt")?;
    let growth = dir_bytes(&hub) - before;
    let path = "/org/big/resolve/main/d00050/f050500.bin";
    let cpu0 = cpu_secs(server.pid())?;
    let done = Arc::new(AtomicU64::new(0));
    let t = Instant::now();
    let workers: Vec<_> = (0..4)
        .map(|_| {
            let (addr, done) = (addr.to_string(), Arc::clone(&done));
            std::thread::spawn(move || -> Result<()> {
                while t.elapsed() < Duration::from_secs(5) {
                    let (status, _) = request(&addr, "HEAD", path, true)?;
                    if status != 200 {
                        bail!("HEAD {path}: {status}");
                    }
                    done.fetch_add(1, Ordering::Relaxed);
                }
                Ok(())
            })
        })
        .collect();
    for w in workers {
        w.join().expect("a resolver")?;
    }
    let secs = t.elapsed().as_secs_f64();
    let n = done.load(Ordering::Relaxed);
    let cpu_ms = (cpu_secs(server.pid())? - cpu0) * 1e3 / n.max(1) as f64;
    let rate = n as f64 / secs;
    Ok(vec![
        ScaleRow {
            case: "store growth of a one-file commit on a 100,000-file tree",
            measured: format!("{:.1} KiB", growth as f64 / 1024.0),
            goal: "≤ 1 MiB",
            met: growth <= 1 << 20,
        },
        ScaleRow {
            case: "resolve (HEAD) of one file of that tree, 4 at once",
            measured: format!("{rate:.0} req/s, server CPU {cpu_ms:.2} ms a request"),
            goal: "≥ 200 req/s",
            met: rate >= 200.0,
        },
    ])
}

/// Median time of 50 repo info requests.
fn info_ms(addr: &str) -> Result<f64> {
    let mut v = Vec::new();
    for _ in 0..50 {
        let (status, secs) = request(addr, "GET", "/api/models/org/long", true)?;
        if status != 200 {
            bail!("repo info: {status}");
        }
        v.push(secs);
    }
    Ok(percentile(&mut v, 0.5) * 1e3)
}

fn repo_info(addr: &str, store: &Path, _server: &ServeProcess) -> Result<ScaleRow> {
    let first = info_ms(addr)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let cas = Arc::new(xet_store::open_store(store).await?);
        let repos = Repos::new(cas);
        let (r, main) = (repo("long"), BranchName::main());
        for i in 0..1_999u64 {
            let op = Operation::Add {
                path: RepoPath::parse(&format!("f{}.bin", i % 50)).expect("a bench path"),
                entry: lfs(i),
            };
            repos
                .commit_to_branch(&r, &main, None, &[op], &meta("again"))
                .await?;
        }
        anyhow::Ok(())
    })?;
    let after = info_ms(addr)?;
    Ok(ScaleRow {
        case: "repo info, 1 commit and after 2,000 commits",
        measured: format!("{first:.2} ms → {after:.2} ms"),
        goal: "flat",
        met: after <= first * 2.0 + 1.0,
    })
}

fn stalled_bodies(xet: &Path, store: &Path) -> Result<ScaleRow> {
    let server = Serve::loopback(xet, store).hub().start()?;
    let addr = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/');
    let mut conns = Vec::new();
    let chunk = vec![b'a'; 1 << 20];
    for _ in 0..100 {
        let mut s = TcpStream::connect(addr)?;
        write!(
            s,
            "POST /api/validate-yaml HTTP/1.1\r\nHost: {addr}\r\n\
             Content-Type: application/json\r\nContent-Length: {}\r\n\r\n",
            16 << 20
        )?;
        // The server may answer (401) and close before reading it all: fine.
        let _ = s.write_all(&chunk);
        conns.push(s);
    }
    std::thread::sleep(Duration::from_secs(2));
    let hwm = status_kib(server.pid(), "VmHWM:").context("the server's VmHWM")?;
    drop(conns);
    Ok(ScaleRow {
        case: "100 stalled anonymous 16 MiB validate-yaml bodies (1 MiB sent each)",
        measured: format!("server peak RSS {} MiB", hwm >> 10),
        goal: "≤ 256 MiB",
        met: hwm >> 10 <= 256,
    })
}

fn large_inline_commits(xet: &Path, store: &Path) -> Result<ScaleRow> {
    const SIZE: usize = 320 << 20;
    let server = Serve::loopback(xet, store).hub().start()?;
    let addr = server
        .url
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_string();
    // Pseudo-random bytes (nothing to deduplicate), base64 by hand-rolled table: the
    // xtask has no base64 crate and needs none but this.
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let data: Vec<u8> = (0..SIZE)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let b64 = Arc::new(base64(&data));
    drop(data);
    let t = Instant::now();
    let clients: Vec<_> = (0..3)
        .map(|i| {
            let (addr, b64) = (addr.clone(), Arc::clone(&b64));
            std::thread::spawn(move || -> Result<()> {
                let head = format!(
                    "{{\"key\":\"header\",\"value\":{{\"summary\":\"large\"}}}}\n\
                     {{\"key\":\"file\",\"value\":{{\"path\":\"large-{i}.bin\",\"encoding\":\"base64\",\"content\":\""
                );
                let tail = "\"}}\n";
                let len = head.len() + b64.len() + tail.len();
                let mut s = TcpStream::connect(&addr)?;
                write!(
                    s,
                    "POST /api/models/org/big/commit/main HTTP/1.1\r\nHost: {addr}\r\n\
                     Authorization: Bearer {HUB_TOKEN}\r\nContent-Type: application/x-ndjson\r\n\
                     Content-Length: {len}\r\nConnection: close\r\n\r\n{head}"
                )?;
                s.write_all(b64.as_bytes())?;
                s.write_all(tail.as_bytes())?;
                let mut out = String::new();
                s.read_to_string(&mut out)?;
                if !out.starts_with("HTTP/1.1 200") {
                    bail!("large commit {i}: {}", out.lines().next().unwrap_or(""));
                }
                Ok(())
            })
        })
        .collect();
    for c in clients {
        c.join().expect("a committer")?;
    }
    let secs = t.elapsed().as_secs_f64();
    let hwm = status_kib(server.pid(), "VmHWM:").context("the server's VmHWM")?;
    Ok(ScaleRow {
        case: "3 commits at once, each one 320 MiB inline file (base64, one line)",
        measured: format!("server peak RSS {} MiB, {secs:.1} s", hwm >> 10),
        goal: "≤ 512 MiB (bodies 1.25 GiB)",
        met: hwm >> 10 <= 512,
    })
}

/// Standard base64 with padding.
fn base64(data: &[u8]) -> String {
    const T: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for c in data.chunks(3) {
        let n = (u32::from(c[0]) << 16)
            | (u32::from(*c.get(1).unwrap_or(&0)) << 8)
            | u32::from(*c.get(2).unwrap_or(&0));
        for (k, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if k <= c.len() {
                out.push(T[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

fn render(rows: &[ScaleRow]) -> String {
    let mut s = String::from("| case | measured | goal | met |\n|---|---|---|---|\n");
    for r in rows {
        s.push_str(&format!(
            "| {} | {} | {} | {} |\n",
            r.case,
            r.measured,
            r.goal,
            if r.met { "yes" } else { "**no**" }
        ));
    }
    s
}

/// Replace the "Hub at scale" section of the benchmarks doc (added at the end if
/// missing) with `table`.
fn write_doc(table: &str) -> Result<()> {
    let head = "## Hub at scale";
    let section = format!(
        "{head}\n\n`cargo xtask bench --only scale` (see `xtask/src/bench/scale.rs`), on this \
         machine, one run. Before git trees (issue 36's findings) a tree page there took \
         16.5 s with `/health` at 2.1 s p50, a one-file commit added 23 MiB to the store, \
         and a resolve cost 95 ms of CPU (21 req/s). Repo info lists every file \
         (`siblings`), so its row grows with the 50 files the 2,000 commits leave. Commit \
         bodies used to be held whole and decoded in memory: the last row's three commits \
         would have held over 2.2 GiB.\n\n{table}\n"
    );
    super::report::write_section(&crate::workspace_root(), head, &section)
}
