//! Groups `hash`, `upload`, `small` and `download`: `xet` next to the reference client,
//! on the embedded store / `local://` and over `xet serve` on loopback. Each run gets
//! fresh stores and caches unless it measures a re-upload.

use super::inputs::{Setup, file_hash, fresh, path_str, small_files, warm};
use super::measure::{Contender, Rounds, Run, Sample, best, interleave, sides};
use super::report::{Row, cpu_range};
use super::serve::{
    REF_DOWNLOAD, REF_UPLOAD, REF_UPLOAD_LIST, Serve, Slot, reference, reference_env, xet_client,
};
use anyhow::{Result, bail};
use std::path::PathBuf;
use std::process::{Command, Stdio};

/// Peak RSS bounds of `xet` (MiB): an upload holds a bounded window of the input, a
/// download bounded fetches and write buffers, whatever the file's size (10 GiB peaks
/// were 397 and 322 MiB; `docs/BENCHMARKS.md`).
const UPLOAD_RSS_MIB: u64 = 1024;
const DOWNLOAD_RSS_MIB: u64 = 512;
/// The target of the rows with a CPU goal (issue #26: half the reference's CPU per GiB).
const SPEED_AND_CPU: &str = ">= 2x, CPU <= 0.5x";

const SMALL_FILES: usize = 20_000;
const SMALL_MIN: usize = 64;
const SMALL_MAX: usize = 4096;

/// What the cases of one group share: the setup and a work directory (removed when the
/// group is done).
struct Work<'a> {
    s: &'a Setup,
    dir: PathBuf,
    inp: &'a str,
}

impl<'a> Work<'a> {
    fn new(s: &'a Setup) -> Result<Work<'a>> {
        Ok(Work {
            s,
            dir: crate::workspace_root().join("target/bench-work"),
            inp: s.input_str()?,
        })
    }

    fn p(&self, name: &str) -> PathBuf {
        self.dir.join(name)
    }

    fn local(&self, name: &str) -> String {
        format!("local://{}", self.p(name).display())
    }

    /// `xet ARGS` with its chunk cache in `cache`.
    fn xet(&self, args: &[&str], cache: &str) -> Command {
        xet_client(Command::new(&self.s.xet), args, Some(&self.p(cache)))
    }

    /// The reference's `script` with `args`, its cache in `cache`.
    fn py(&self, script: &str, args: &[&str], cache: &str) -> Command {
        reference(Command::new(&self.s.py), script, args, &self.p(cache))
    }

    /// `py` followed by `sync`, in one timed command: the reference's download until
    /// its file is on the disk, as ours is when it ends (ours fsyncs; the reference
    /// leaves its writes in the page cache).
    fn py_then_sync(&self, script: &str, args: &[&str], cache: &str) -> Command {
        let mut c = Command::new("sh");
        c.args(["-c", "\"$0\" -c \"$XET_BENCH_SCRIPT\" \"$@\" && sync"])
            .arg(&self.s.py)
            .args(args)
            .env("XET_BENCH_SCRIPT", script);
        reference_env(&mut c, &self.p(cache));
        c
    }

    fn interleave(&self, contenders: Vec<Contender<'_>>) -> Result<Vec<Vec<Run>>> {
        interleave(&Rounds::loopback(self.s.runs), contenders)
    }

    fn done(self) {
        std::fs::remove_dir_all(&self.dir).ok();
    }
}

/// Group `hash`: `xet hash` against `hf_xet.hash_files`.
pub fn hash(s: &Setup) -> Result<Vec<Row>> {
    let rounds = Rounds::loopback(s.runs);
    let warm_input = || warm(&s.input);
    let ours = interleave(
        &rounds,
        vec![Contender::new(
            || {
                let mut c = Command::new(&s.xet);
                c.arg("hash").arg(&s.input);
                Ok(c)
            },
            warm_input,
        )],
    )?;
    let script = "import sys, hf_xet; print(hf_xet.hash_files([sys.argv[1]])[0].hash)";
    let reference = interleave(
        &rounds,
        vec![Contender::new(
            || {
                let mut c = Command::new(&s.py);
                c.args(["-c", script]).arg(&s.input);
                Ok(c)
            },
            warm_input,
        )],
    )?;
    let case = format!("hash {} MiB", s.mib());
    Ok(vec![Row::vs(
        case,
        s.size,
        best(&ours[0]),
        best(&reference[0]),
        ">= 2x",
    )])
}

/// Group `upload`: a first upload and re-uploads, embedded store / `local://`, and an
/// upload to `xet serve`.
pub fn upload(s: &Setup) -> Result<Vec<Row>> {
    let w = Work::new(s)?;
    let mut rows = local_uploads(&w)?;
    rows.push(serve_upload(&w)?);
    w.done();
    Ok(rows)
}

fn local_uploads(w: &Work<'_>) -> Result<Vec<Row>> {
    let (s, mib) = (w.s, w.s.mib());
    let ref_upload = || Ok(w.py(REF_UPLOAD, &[w.inp, &w.local("r1")], "rc1"));
    let store = w.p("s1");
    let store = path_str(&store)?;
    let ours = |extra: &'static [&'static str]| {
        move || {
            let mut args = vec!["upload"];
            args.extend_from_slice(extra);
            args.extend(["--store", store, w.inp]);
            Ok(w.xet(&args, "c1"))
        }
    };
    let [ours_first, ref_first] = sides(w.interleave(vec![
        Contender::new(ours(&[]), || {
            fresh(&w.p("s1"))?;
            fresh(&w.p("c1"))?;
            warm(&s.input)
        }),
        Contender::new(ref_upload, || {
            fresh(&w.p("r1"))?;
            fresh(&w.p("rc1"))?;
            warm(&s.input)
        }),
    ])?);
    // Re-upload into the same stores and caches (everything deduplicates), ours plain
    // and with --rehash, the reference's in turn.
    let [again, rehash, ref_again] = sides(w.interleave(vec![
        Contender::new(ours(&[]), || warm(&s.input)),
        Contender::new(ours(&["--rehash"]), || warm(&s.input)),
        Contender::new(ref_upload, || warm(&s.input)),
    ])?);
    let ref_again = best(&ref_again);
    Ok(vec![
        Row::vs(
            format!("upload {mib} MiB, embedded store / local://"),
            s.size,
            best(&ours_first),
            best(&ref_first),
            SPEED_AND_CPU,
        )
        .bound(UPLOAD_RSS_MIB),
        Row::vs(
            format!("re-upload {mib} MiB, embedded store / local:// (unchanged file, not read)"),
            s.size,
            best(&again),
            ref_again,
            ">= 2x",
        ),
        // The file is read, chunked, hashed and deduplicated.
        Row::vs(
            format!("re-upload {mib} MiB --rehash, embedded store / local://"),
            s.size,
            best(&rehash),
            ref_again,
            ">= 2x",
        ),
    ])
}

/// Both clients against `xet serve`, a fresh server and store per run.
fn serve_upload(w: &Work<'_>) -> Result<Row> {
    let s = w.s;
    let server = Slot::default();
    let restart = |cache: &str| -> Result<()> {
        warm(&s.input)?;
        fresh(&w.p(cache))?;
        server.restart(&w.p("srv"), |store| Serve::loopback(&s.xet, store))
    };
    let pid = || server.pid();
    let [ours, reference] = sides(w.interleave(vec![
        Contender::new(
            || Ok(w.xet(&["upload", "--endpoint", &server.url(), w.inp], "c2")),
            || restart("c2"),
        )
        .server(pid),
        Contender::new(
            || Ok(w.py(REF_UPLOAD, &[w.inp, &server.url()], "rc2")),
            || restart("rc2"),
        )
        .server(pid),
    ])?);
    server.stop();
    let case = format!("upload {} MiB to xet serve", s.mib());
    Ok(
        Row::vs(case, s.size, best(&ours), best(&reference), SPEED_AND_CPU)
            .server_cpu(xet_ref(&ours, &reference, s.size))
            .bound(UPLOAD_RSS_MIB),
    )
}

/// The server CPU cell of a row with both clients.
fn xet_ref(ours: &[Run], reference: &[Run], bytes: u64) -> String {
    format!(
        "xet {}, ref {}",
        cpu_range(ours, bytes),
        cpu_range(reference, bytes)
    )
}

/// Group `small`: a dataset of many small files, per-file costs rather than bytes.
pub fn small(s: &Setup) -> Result<Vec<Row>> {
    let w = Work::new(s)?;
    let (tree, list, bytes) = small_files(&w.dir, SMALL_FILES, SMALL_MIN..=SMALL_MAX, 7)?;
    let (tree_s, list_s) = (path_str(&tree)?, path_str(&list)?);
    let store = w.p("m1");
    let store = path_str(&store)?;
    let [ours, reference] = sides(w.interleave(vec![
        Contender::new(
            || Ok(w.xet(&["upload", "-q", "--store", store, tree_s], "mc1")),
            || {
                fresh(&w.p("m1"))?;
                fresh(&w.p("mc1"))?;
                warm(&tree)
            },
        ),
        Contender::new(
            || Ok(w.py(REF_UPLOAD_LIST, &[list_s, &w.local("mr1")], "mrc1")),
            || {
                fresh(&w.p("mr1"))?;
                fresh(&w.p("mrc1"))?;
                warm(&tree)
            },
        ),
    ])?);
    let case = format!(
        "upload {SMALL_FILES} files of {SMALL_MIN}-{SMALL_MAX} bytes (one directory tree), embedded store / local:// (for information)"
    );
    let row = Row::vs(case, bytes, best(&ours), best(&reference), "");
    w.done();
    Ok(vec![row])
}

/// What the download cases share: the file's hash and size as arguments, the output.
struct Download<'a> {
    w: Work<'a>,
    hash: String,
    size: String,
    out: PathBuf,
    outs: String,
}

impl Download<'_> {
    /// Before a run: the source in the page cache, an empty `cache`, no output.
    fn clean(&self, source: &str, cache: &str) -> Result<()> {
        warm(&self.w.p(source))?;
        fresh(&self.w.p(cache))?;
        let _ = std::fs::remove_file(&self.out);
        Ok(())
    }

    /// The reference's download from `endpoint`, `sync` after it if asked.
    fn reference(&self, endpoint: &str, sync: bool) -> Command {
        let args = [&self.hash, endpoint, &self.outs, &self.size];
        if sync {
            self.w.py_then_sync(REF_DOWNLOAD, &args, "rdc")
        } else {
            self.w.py(REF_DOWNLOAD, &args, "rdc")
        }
    }
}

/// A sample without a meaningful peak RSS (that of a shell around the measured command).
fn without_rss(runs: &[Run]) -> Sample {
    Sample {
        peak_rss_kib: 0,
        ..best(runs)
    }
}

/// Group `download`: from the embedded store / `local://`, and from `xet serve`.
pub fn download(s: &Setup) -> Result<Vec<Row>> {
    let w = Work::new(s)?;
    // Stores holding the file: ours via xet upload, the reference's via local://.
    let ds = w.p("ds");
    fresh(&ds)?;
    fresh(&w.p("dc"))?;
    let st = w.xet(&["upload", "--store", path_str(&ds)?, w.inp], "dc");
    if !run_quietly(st)? {
        bail!("preparing the download store failed");
    }
    fresh(&w.p("dr"))?;
    if !w
        .py(REF_UPLOAD, &[w.inp, &w.local("dr")], "drc")
        .status()?
        .success()
    {
        bail!("preparing the reference's local:// store failed");
    }
    let out = w.p("out.bin");
    let d = Download {
        hash: file_hash(&s.xet, &s.input)?,
        size: s.size.to_string(),
        outs: path_str(&out)?.to_string(),
        out,
        w,
    };
    let mut rows = local_downloads(&d)?;
    rows.extend(serve_downloads(&d)?);
    d.w.done();
    Ok(rows)
}

fn run_quietly(mut c: Command) -> Result<bool> {
    Ok(c.stdout(Stdio::null()).status()?.success())
}

fn local_downloads(d: &Download<'_>) -> Result<Vec<Row>> {
    let (w, mib) = (&d.w, d.w.s.mib());
    let ds = w.p("ds");
    let args = [
        "download",
        "--store",
        path_str(&ds)?,
        &d.hash,
        "-o",
        &d.outs,
    ];
    let local = w.local("dr");
    let [ours, reference, synced] = sides(w.interleave(vec![
        Contender::new(|| Ok(w.xet(&args, "dlc")), || d.clean("ds", "dlc")),
        Contender::new(|| Ok(d.reference(&local, false)), || d.clean("dr", "rdc")),
        Contender::new(|| Ok(d.reference(&local, true)), || d.clean("dr", "rdc")),
    ])?);
    let ours = best(&ours);
    Ok(vec![
        Row::vs(
            format!("download {mib} MiB, embedded store / local:// (xet verifies)"),
            w.s.size,
            ours,
            best(&reference),
            SPEED_AND_CPU,
        )
        .bound(DOWNLOAD_RSS_MIB),
        Row::vs(
            format!(
                "download {mib} MiB, embedded store / local://, the reference's followed by sync (both files on disk at the end; for information)"
            ),
            w.s.size,
            ours,
            without_rss(&synced),
            "",
        ),
    ])
}

/// Ours with the chunk cache (the default: the downloaded file is hard-linked into it,
/// or, where that cannot be, every fetched byte is written to it too) and without it
/// (what the reference does by default), each from an empty cache; ours again into a
/// cache that holds the file already; the reference's, plain and followed by sync.
fn serve_downloads(d: &Download<'_>) -> Result<Vec<Row>> {
    let (w, mib, size) = (&d.w, d.w.s.mib(), d.w.s.size);
    let server = Serve::loopback(&w.s.xet, w.p("ds")).start()?;
    let pid = || Some(server.pid());
    let ours = |extra: &[&str], cache: &str| {
        let mut args = vec!["download"];
        args.extend_from_slice(extra);
        args.extend(["--endpoint", &server.url, &d.hash, "-o", &d.outs]);
        w.xet(&args, cache)
    };
    // The warm cache is filled by one untimed download before the first run; only the
    // output is removed between runs.
    let fill_warm_cache = || -> Result<()> {
        warm(&w.p("ds"))?;
        if !w.p("dlw").exists() && !run_quietly(ours(&[], "dlw"))? {
            bail!("filling the chunk cache of the warm-cache row failed");
        }
        let _ = std::fs::remove_file(&d.out);
        Ok(())
    };
    let [cached, uncached, warm_cache, reference, synced] = sides(w.interleave(vec![
        Contender::new(|| Ok(ours(&[], "dlc")), || d.clean("ds", "dlc")).server(pid),
        Contender::new(
            || Ok(ours(&["--chunk-cache-size", "0"], "dlc")),
            || d.clean("ds", "dlc"),
        )
        .server(pid),
        Contender::new(|| Ok(ours(&[], "dlw")), fill_warm_cache).server(pid),
        Contender::new(|| Ok(d.reference(&server.url, false)), || d.clean("ds", "rdc")).server(pid),
        Contender::new(|| Ok(d.reference(&server.url, true)), || d.clean("ds", "rdc")).server(pid),
    ])?);
    let case = |what: &str| format!("download {mib} MiB from xet serve{what}");
    Ok(vec![
        Row::vs(
            case(" (xet verifies; chunk cache on, the default)"),
            size,
            best(&cached),
            best(&reference),
            SPEED_AND_CPU,
        )
        .server_cpu(xet_ref(&cached, &reference, size))
        .bound(DOWNLOAD_RSS_MIB),
        Row::vs(
            case(" (xet verifies; chunk cache off, as the reference)"),
            size,
            best(&uncached),
            best(&reference),
            SPEED_AND_CPU,
        )
        .server_cpu(xet_ref(&uncached, &reference, size))
        .bound(DOWNLOAD_RSS_MIB),
        Row::vs(
            case(", chunk cache off, the reference's followed by sync (both files on disk at the end; for information)"),
            size,
            best(&uncached),
            without_rss(&synced),
            "",
        )
        .server_cpu(xet_ref(&uncached, &synced, size)),
        Row::xet(
            case(" again, the chunk cache holding it (xet verifies; for information)"),
            size,
            best(&warm_cache),
        )
        .server_cpu(cpu_range(&warm_cache, size))
        .bound(DOWNLOAD_RSS_MIB),
    ])
}
