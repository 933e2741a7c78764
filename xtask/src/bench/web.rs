//! Group `web`: the web pages of `xet serve` under load. A release `xet serve` (with a
//! token, so every page checks the sign-in cookie) on a directory store holding a
//! repository of 10,000 files in its root folder (written through the library, as the
//! `scale` group does) and a few small ones; [`CLIENTS`] clients at once each fetch a
//! page over a fresh connection, `Accept: text/html`, signed in by cookie, until
//! [`REQUESTS`] pages are done. Rows: pages per second (all clients) and the p99 time of
//! one page (connect to last byte), for the front page and the 10,000-file repository's
//! page (its first 200 entries; the listing is paged).
//!
//! Prints its own table and writes it to `docs/BENCHMARKS.md` under "Web pages".

use super::inputs::fresh;
use super::serve::{HUB_TOKEN, Serve};
use anyhow::{Context, Result, bail};
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Instant;
use xet_hub::{
    BranchName, CommitMeta, FileEntry, Operation, RepoId, RepoPath, RepoRef, RepoType, Repos,
    Sha256,
};

/// Clients at once.
const CLIENTS: usize = 32;
/// Pages fetched per row (after a warm-up of one page per client).
const REQUESTS: usize = 3_200;
/// Files in the big repository's root folder.
const FILES: u64 = 10_000;

pub fn run(xet: &Path, write: bool) -> Result<()> {
    let work = crate::workspace_root().join("target/bench-web");
    fresh(&work)?;
    let store = work.join("store");
    std::fs::create_dir_all(&store)?;
    populate(&store)?;
    let server = Serve::loopback(xet, &store).hub().start()?;
    let addr = server
        .url
        .strip_prefix("http://")
        .context("the server's URL")?
        .trim_end_matches('/')
        .to_string();
    let mut rows = Vec::new();
    for (case, path, expect) in [
        ("front page `/` (12 repositories)", "/", "org/files10k"),
        (
            "repository page of 10,000 files `/org/files10k` (first 200 entries)",
            "/org/files10k",
            "f00199.bin",
        ),
    ] {
        rows.push((case, load(&addr, path, expect)?));
    }
    drop(server);
    let mut table = String::from("| case | pages/s | p50 | p99 |\n|---|---|---|---|\n");
    for (case, (rate, p50, p99)) in &rows {
        table.push_str(&format!(
            "| {case}, {CLIENTS} clients | {rate:.0} | {p50:.1} ms | {p99:.1} ms |\n"
        ));
    }
    println!("{table}");
    if write {
        let head = "## Web pages";
        let section = format!(
            "{head}\n\n`cargo xtask bench --only web` (see `xtask/src/bench/web.rs`): a \
             release `xet serve` with a token, {CLIENTS} clients at once, each page over a \
             fresh loopback connection with the sign-in cookie, {REQUESTS} pages a row; \
             time is connect to last byte.\n\n{table}\n"
        );
        super::report::write_section(&crate::workspace_root(), head, &section)?;
    }
    Ok(())
}

fn lfs(i: u64) -> FileEntry {
    let mut sha = [0u8; 32];
    sha[24..].copy_from_slice(&i.to_be_bytes());
    FileEntry::lfs(
        xet_hash::chunk_hash(&i.to_le_bytes()),
        Sha256::from_bytes(sha),
        (i + 1) * 1000,
    )
}

/// `org/files10k` (10,000 files in its root) and eleven repositories of one file.
fn populate(store: &Path) -> Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let cas = Arc::new(xet_store::open_store(store).await?);
        let repos = Repos::new(cas);
        let main = BranchName::main();
        let meta = CommitMeta {
            summary: "bench".into(),
            author: "bench".into(),
            created_at: 1_800_000_000,
            ..CommitMeta::default()
        };
        for (name, n) in std::iter::once(("files10k".to_string(), FILES))
            .chain((0..11).map(|i| (format!("small{i:02}"), 1)))
        {
            let r = RepoRef::new(RepoType::Model, RepoId::new("org", &name)?);
            repos.create(&r, "bench", false, 1).await?;
            let ops: Vec<Operation> = (0..n)
                .map(|i| Operation::Add {
                    path: RepoPath::parse(&format!("f{i:05}.bin")).expect("a bench path"),
                    entry: lfs(i),
                })
                .collect();
            repos.commit_to_branch(&r, &main, None, &ops, &meta).await?;
        }
        anyhow::Ok(())
    })
}

/// One page over a fresh connection: the seconds it took; its body must hold `expect`.
fn page(addr: &str, path: &str, cookie: &str, expect: &str) -> Result<f64> {
    let t = Instant::now();
    let mut s = TcpStream::connect(addr)?;
    write!(
        s,
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nAccept: text/html\r\nCookie: xet_session={cookie}\r\nConnection: close\r\n\r\n"
    )?;
    let mut buf = Vec::new();
    s.read_to_end(&mut buf)?;
    let secs = t.elapsed().as_secs_f64();
    let text = String::from_utf8_lossy(&buf);
    if !text.starts_with("HTTP/1.1 200") || !text.contains(expect) {
        bail!("GET {path}: {}", text.lines().next().unwrap_or("no answer"));
    }
    Ok(secs)
}

/// [`REQUESTS`] pages of `path` by [`CLIENTS`] clients: pages/s, p50 and p99 (ms).
fn load(addr: &str, path: &str, expect: &str) -> Result<(f64, f64, f64)> {
    let cookie = base64url(HUB_TOKEN.as_bytes());
    for _ in 0..CLIENTS {
        page(addr, path, &cookie, expect)?;
    }
    let left = Arc::new(AtomicUsize::new(REQUESTS));
    let start = Instant::now();
    let times: Vec<Result<Vec<f64>>> = std::thread::scope(|s| {
        let handles: Vec<_> = (0..CLIENTS)
            .map(|_| {
                let left = Arc::clone(&left);
                let cookie = cookie.clone();
                s.spawn(move || {
                    let mut mine = Vec::new();
                    while left
                        .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1))
                        .is_ok()
                    {
                        mine.push(page(addr, path, &cookie, expect)?);
                    }
                    Ok(mine)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("a bench client"))
            .collect()
    });
    let wall = start.elapsed().as_secs_f64();
    let mut all = Vec::with_capacity(REQUESTS);
    for t in times {
        all.extend(t?);
    }
    all.sort_by(f64::total_cmp);
    let at = |p: f64| all[((all.len() - 1) as f64 * p).round() as usize] * 1000.0;
    Ok((all.len() as f64 / wall, at(0.5), at(0.99)))
}

fn base64url(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for i in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * i) & 63) as usize] as char);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    #[test]
    fn base64url() {
        assert_eq!(super::base64url(b"hf_bench_write"), "aGZfYmVuY2hfd3JpdGU");
        assert_eq!(super::base64url(b"a"), "YQ");
        assert_eq!(super::base64url(b"ab"), "YWI");
    }
}
