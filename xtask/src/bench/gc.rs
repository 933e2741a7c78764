//! Group `gc`: the store's lifecycle commands of a release `xet` (issue 38's rows):
//!
//! - `xet store gc --grace 0s` of a store of 100,000 objects (50,000 files, each its own
//!   xorb and shard), a fifth of them garbage (files no commit names), on a directory and
//!   on SeaweedFS: wall time, CPU, peak RSS and, on S3, the requests it sent (counted by a
//!   proxy in front of SeaweedFS);
//! - `xet store check --read-data` of a directory store of 1 GiB in 64 MiB xorbs, against
//!   reading the same files with plain sequential reads, in the same run, each from the
//!   disk (the page cache dropped before it, as root; else both from memory, and the row
//!   says so).
//!
//! The stores are written through the library (`xet_store` and `xet_hub::Repos`), which
//! is what a server does with uploads and commits, so 100,000 objects take a minute.
//!
//! Prints its own table and writes it to `docs/BENCHMARKS.md` under "Store lifecycle".

use super::inputs::fresh;
use super::measure::{Sample, measure};
use anyhow::{Context, Result, bail};
use std::path::Path;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};
use xet_cas::Cas;

/// Files of the gc rows' store: one xorb and one shard each.
const FILES: usize = 50_000;
/// Every `GARBAGE_EVERY`-th file is named by no commit.
const GARBAGE_EVERY: usize = 5;
/// The check row's store: files of this many MiB, this many of them.
const CHECK_FILE_MIB: usize = 64;
const CHECK_FILES: usize = 16;
/// Objects written at once while a store is made.
const AT_ONCE: usize = 64;

struct GcRow {
    case: String,
    measured: String,
}

pub fn run(xet: &Path, write: bool) -> Result<()> {
    let work = crate::workspace_root().join("target/bench-gc");
    fresh(&work)?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let mut rows = Vec::new();

    let dir = work.join("store");
    let t = Instant::now();
    rt.block_on(async {
        let store = Arc::new(xet_store::open_store(&dir).await?);
        populate(store).await
    })?;
    eprintln!(
        "gc: directory store written in {:.1} s",
        t.elapsed().as_secs_f64()
    );
    let (sample, doc) = gc(xet, &work, &[dir.to_str().context("a UTF-8 path")?], &[])?;
    rows.push(gc_row("directory", &sample, &doc, None)?);

    let s3 = xet_testdata::S3Server::start().map_err(anyhow::Error::msg)?;
    let bucket = s3.fresh_bucket().map_err(anyhow::Error::msg)?;
    let proxy = xet_testdata::proxy::Proxy::start(&s3.endpoint());
    let url = format!("s3://{bucket}/gc");
    let t = Instant::now();
    rt.block_on(async {
        let mut config = xet_store_s3::S3Config::new(&bucket, "gc")?;
        config.endpoint = Some(s3.endpoint());
        config.credentials = Some(xet_store_s3::S3Credentials {
            access_key_id: s3.access_key_id().into(),
            secret_access_key: s3.secret_access_key().into(),
            session_token: None,
        });
        config.region = Some(s3.region().into());
        let store = Arc::new(xet_store_s3::open_store(config).await?);
        populate(store).await
    })?;
    eprintln!("gc: S3 store written in {:.1} s", t.elapsed().as_secs_f64());
    proxy.clear_log();
    let env = s3_env(&s3, &proxy.url);
    let (sample, doc) = gc(xet, &work, &[&url], &env)?;
    let requests = proxy.log().len();
    rows.push(gc_row("S3 (SeaweedFS)", &sample, &doc, Some(requests))?);

    rows.extend(check_rows(xet, &work, &rt)?);
    let table = render(&rows);
    println!("{table}");
    if write {
        write_doc(&table)?;
    }
    Ok(())
}

/// [`FILES`] files, each its own xorb and shard, written [`AT_ONCE`] at a time; all but
/// every [`GARBAGE_EVERY`]-th committed to one model repository.
async fn populate<S>(store: Arc<S>) -> Result<()>
where
    S: Cas + xet_hub::RepoStore + 'static,
{
    let shape = xet_cas_conformance::gc_store::GcStore {
        files: FILES,
        garbage_every: GARBAGE_EVERY,
        folders: 500,
        at_once: AT_ONCE,
    };
    shape.populate(store).await.map_err(|e| anyhow::anyhow!(e))
}

/// The environment `xet` reads the S3 server's credentials from, the endpoint being the
/// counting proxy.
fn s3_env(s3: &xet_testdata::S3Server, endpoint: &str) -> Vec<(String, String)> {
    vec![
        ("AWS_ACCESS_KEY_ID".into(), s3.access_key_id().into()),
        (
            "AWS_SECRET_ACCESS_KEY".into(),
            s3.secret_access_key().into(),
        ),
        ("AWS_REGION".into(), s3.region().into()),
        ("AWS_ENDPOINT_URL".into(), endpoint.into()),
    ]
}

/// `xet --json store ARGS --store STORE`, measured; its JSON answer.
fn store_cmd(
    xet: &Path,
    work: &Path,
    what: &str,
    args: &[&str],
    env: &[(String, String)],
) -> Result<(Sample, serde_json::Value)> {
    let out = work.join(format!("{what}.json"));
    // `exec`, so the process measured is `xet` itself, its answer in a file.
    let mut line = format!("exec {} --json store", shell_quote(&xet.to_string_lossy()));
    for a in args {
        line.push(' ');
        line.push_str(&shell_quote(a));
    }
    line.push_str(&format!(" > {}", shell_quote(&out.to_string_lossy())));
    let mut cmd = Command::new("sh");
    cmd.args(["-c", &line]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let runs = measure(
        vec![(cmd, work.join(format!("{what}.stderr")))],
        Duration::from_millis(20),
        || {},
    )?;
    let doc: serde_json::Value = serde_json::from_slice(&std::fs::read(&out)?)
        .with_context(|| format!("the answer of xet store {what}"))?;
    Ok((runs[0].sample, doc))
}

fn shell_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

fn gc(
    xet: &Path,
    work: &Path,
    store: &[&str],
    env: &[(String, String)],
) -> Result<(Sample, serde_json::Value)> {
    let mut args = vec!["gc", "--grace", "0s", "--store"];
    args.extend_from_slice(store);
    store_cmd(xet, work, "gc", &args, env)
}

fn gc_row(
    place: &str,
    s: &Sample,
    doc: &serde_json::Value,
    requests: Option<usize>,
) -> Result<GcRow> {
    let g = &doc["gc"];
    let freed = g["deleted_xorbs"]
        .as_u64()
        .zip(g["deleted_shards"].as_u64())
        .map(|(x, s)| x + s)
        .with_context(|| format!("gc's answer names no deleted objects: {doc}"))?;
    let want = 2 * FILES.div_ceil(GARBAGE_EVERY) as u64;
    if freed != want {
        bail!("gc on {place} freed {freed} objects, not the {want} garbage ones: {doc}");
    }
    let requests = requests.map_or(String::new(), |r| format!(", {r} requests to S3"));
    Ok(GcRow {
        case: format!(
            "`store gc --grace 0s`, {}k objects, 20% garbage, {place}",
            2 * FILES / 1000
        ),
        measured: format!(
            "{:.2} s, CPU {:.2} s, peak RSS {} MiB, {freed} objects freed{requests}",
            s.secs,
            s.cpu_secs,
            s.peak_rss_kib / 1024
        ),
    })
}

/// `check --read-data` of a 1 GiB store against reading its files.
fn check_rows(xet: &Path, work: &Path, rt: &tokio::runtime::Runtime) -> Result<Vec<GcRow>> {
    let dir = work.join("check-store");
    rt.block_on(async {
        let store = Arc::new(xet_store::open_store(&dir).await?);
        for i in 0..CHECK_FILES {
            xet_cas_conformance::gc_store::put_file(&*store, &big_file(i))
                .await
                .map_err(|e| anyhow::anyhow!(e))?;
        }
        anyhow::Ok(())
    })?;
    let bytes = dir_bytes(&dir)?;
    // From the disk where the page cache can be dropped (root), else both from memory.
    let cold = drop_caches();
    let (read_secs, read_bytes) = read_all(&dir)?;
    drop_caches();
    let (s, doc) = store_cmd(
        xet,
        work,
        "check",
        &[
            "check",
            "--read-data",
            "--store",
            dir.to_str().context("a UTF-8 path")?,
        ],
        &[],
    )?;
    if doc["ok"] != serde_json::Value::Bool(true) {
        bail!("check --read-data found problems in a fresh store: {doc}");
    }
    let mib = |b: u64, secs: f64| b as f64 / (1 << 20) as f64 / secs;
    Ok(vec![GcRow {
        case: format!(
            "`store check --read-data`, {} MiB in {CHECK_FILE_MIB} MiB files, directory ({})",
            bytes >> 20,
            if cold {
                "cold: page cache dropped before each"
            } else {
                "page cache"
            }
        ),
        measured: format!(
            "{:.0} MiB/s ({:.2} s, CPU {:.2} s, peak RSS {} MiB); plain reads of the same files {:.0} MiB/s; ratio {:.2}",
            mib(bytes, s.secs),
            s.secs,
            s.cpu_secs,
            s.peak_rss_kib / 1024,
            mib(read_bytes, read_secs),
            (bytes as f64 / s.secs) / (read_bytes as f64 / read_secs)
        ),
    }])
}

/// Flush and drop the page cache (needs root); whether it was dropped.
fn drop_caches() -> bool {
    let synced = Command::new("sync").status().is_ok_and(|s| s.success());
    synced && std::fs::write("/proc/sys/vm/drop_caches", "3").is_ok()
}

/// A 64 MiB file of incompressible bytes.
fn big_file(i: usize) -> Vec<u8> {
    let mut x = (i as u64 + 1).wrapping_mul(0xD134_2543_DE82_EF95) | 1;
    let mut out = Vec::with_capacity(CHECK_FILE_MIB << 20);
    while out.len() < CHECK_FILE_MIB << 20 {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(&x.to_le_bytes());
    }
    out.truncate(CHECK_FILE_MIB << 20);
    out
}

fn dir_bytes(dir: &Path) -> Result<u64> {
    let mut n = 0;
    for e in std::fs::read_dir(dir)? {
        let e = e?;
        let m = e.metadata()?;
        n += if m.is_dir() {
            dir_bytes(&e.path())?
        } else {
            m.len()
        };
    }
    Ok(n)
}

/// Every file below `dir` read once, sequentially: seconds and bytes.
fn read_all(dir: &Path) -> Result<(f64, u64)> {
    fn walk(dir: &Path, buf: &mut [u8], n: &mut u64) -> Result<()> {
        use std::io::Read as _;
        for e in std::fs::read_dir(dir)? {
            let p = e?.path();
            if p.is_dir() {
                walk(&p, buf, n)?;
                continue;
            }
            let mut f = std::fs::File::open(&p)?;
            loop {
                let got = f.read(buf)?;
                if got == 0 {
                    break;
                }
                *n += got as u64;
            }
        }
        Ok(())
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut n = 0;
    let t = Instant::now();
    walk(dir, &mut buf, &mut n)?;
    Ok((t.elapsed().as_secs_f64(), n))
}

fn render(rows: &[GcRow]) -> String {
    let mut s = String::from("| case | measured |\n|---|---|\n");
    for r in rows {
        s.push_str(&format!("| {} | {} |\n", r.case, r.measured));
    }
    s
}

fn write_doc(table: &str) -> Result<()> {
    let head = "## Store lifecycle";
    let section = format!(
        "{head}\n\n`cargo xtask bench --only gc` (see `xtask/src/bench/gc.rs`), on this \
         machine, one run. The stores are written through the library first; the rows are \
         the release `xet store` commands.\n\n{table}\n"
    );
    super::report::write_section(&crate::workspace_root(), head, &section)
}
