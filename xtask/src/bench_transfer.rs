//! Upload and download benchmarks: `xet` next to the reference client, on the embedded
//! store / `local://`, and over `xet serve` on loopback. Each run gets fresh stores and
//! caches unless it measures a re-upload.

use crate::bench::{
    BenchSample, Contender, CpuMeter, CpuRuns, Row, Served, TransferOpts, bench_interleaved, fresh,
    warm,
};
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// Takes each row, with the peak RSS bound (MiB) `xet` is held to in it, if any.
type RowFn<'a> = dyn FnMut(Row, Option<u64>) + 'a;

/// Peak RSS bounds of `xet` (MiB): an upload holds a bounded window of the input, a
/// download bounded fetches and write buffers, whatever the file's size (10 GiB peaks
/// were 397 and 322 MiB; `docs/BENCHMARKS.md`).
const UPLOAD_RSS_MIB: u64 = 1024;
const DOWNLOAD_RSS_MIB: u64 = 512;
/// The target of the rows with a CPU goal (issue #26: half the reference's CPU per GiB).
const SPEED_AND_CPU: &str = ">= 2x, CPU <= 0.5x";

/// A row without a server.
fn plain(
    case: String,
    bytes: u64,
    ours: BenchSample,
    reference: BenchSample,
    target: &'static str,
) -> Row {
    Row {
        case,
        bytes,
        ours,
        reference: Some(reference),
        target,
        server_cpu: "-".into(),
    }
}

/// `xet serve --store STORE` on loopback.
fn serve(xet: &Path, store: &Path) -> Result<Served> {
    let mut c = Command::new(xet);
    c.args(["serve", "--listen", "127.0.0.1:0", "--store"])
        .arg(store)
        .stderr(Stdio::null());
    Served::spawn(c, "xet serve")
}

const REF_UPLOAD: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.upload_files([sys.argv[1]], sys.argv[2], None, None, None, 'model')";
/// The reference's upload of every path listed in the file `argv[1]`, in one call.
const REF_UPLOAD_LIST: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.upload_files([l.rstrip('\\n') for l in open(sys.argv[1])], sys.argv[2], None, None, None, 'model')";

const SMALL_FILES: usize = 20_000;
const SMALL_MIN: usize = 64;
const SMALL_MAX: usize = 4096;

/// `count` files of pseudo-random sizes in `sizes` and pseudo-random bytes (from
/// `seed`) in 20 directories under `work`, and a file listing their paths. Returns the
/// tree, the list and the total size.
pub fn small_files(
    work: &Path,
    count: usize,
    sizes: std::ops::RangeInclusive<usize>,
    seed: u64,
) -> Result<(PathBuf, PathBuf, u64)> {
    let tree = work.join("small-files");
    fresh(&tree)?;
    let mut rng = xet_testdata::Rng::new(seed);
    let mut list = String::new();
    let mut total = 0u64;
    let span = (sizes.end() - sizes.start() + 1) as u64;
    for i in 0..count {
        let dir = tree.join(format!("d{:02}", i % 20));
        std::fs::create_dir_all(&dir)?;
        let len = sizes.start() + rng.below(span) as usize;
        let mut data = vec![0u8; len];
        rng.fill(&mut data);
        let path = dir.join(format!("f{i:05}.bin"));
        std::fs::write(&path, &data)?;
        list.push_str(path.to_str().context("path")?);
        list.push('\n');
        total += len as u64;
    }
    let list_path = work.join("small-files.txt");
    std::fs::write(&list_path, list)?;
    Ok((tree, list_path, total))
}

const REF_DOWNLOAD: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.download_files([hf_xet.PyXetDownloadInfo(sys.argv[3], sys.argv[1], int(sys.argv[4]))], sys.argv[2], None, None, None)";

fn py(pyexe: &Path, script: &str, args: &[&str], cache: &Path) -> Command {
    let mut c = Command::new(pyexe);
    c.args(["-c", script]).args(args);
    ref_env(c, cache)
}

/// `py` followed by `sync`, in one timed command: the reference's download until its
/// file is on the disk, as ours is when it ends (ours fsyncs; the reference leaves its
/// writes in the page cache).
fn py_then_sync(pyexe: &Path, script: &str, args: &[&str], cache: &Path) -> Command {
    let mut c = Command::new("sh");
    c.args(["-c", "\"$0\" -c \"$XET_BENCH_SCRIPT\" \"$@\" && sync"])
        .arg(pyexe)
        .args(args)
        .env("XET_BENCH_SCRIPT", script);
    ref_env(c, cache)
}

fn ref_env(mut c: Command, cache: &Path) -> Command {
    c.env("HF_XET_CACHE", cache)
        .env("HF_XET_TELEMETRY_ENABLED", "false");
    c
}

/// The reference's download of `hash` (of `size` bytes) from `endpoint` to `out`, with
/// `sync` after it if asked.
fn ref_download<'a>(
    pyexe: &'a Path,
    [hash, endpoint, out, size]: [String; 4],
    cache: PathBuf,
    sync: bool,
) -> impl FnMut() -> Result<Command> + 'a {
    move || {
        let args = [
            hash.as_str(),
            endpoint.as_str(),
            out.as_str(),
            size.as_str(),
        ];
        Ok(if sync {
            py_then_sync(pyexe, REF_DOWNLOAD, &args, &cache)
        } else {
            py(pyexe, REF_DOWNLOAD, &args, &cache)
        })
    }
}

/// A sample without a meaningful peak RSS (that of a shell around the measured command).
fn without_rss(s: BenchSample) -> BenchSample {
    BenchSample {
        peak_rss_kib: 0,
        ..s
    }
}

fn xetc(xet: &Path, args: &[&str], cache: &Path) -> Command {
    let mut c = Command::new(xet);
    c.args(args)
        .env("XET_CACHE", cache)
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE");
    c
}

pub fn run(
    o: &TransferOpts,
    xet: &Path,
    pyexe: &Path,
    input: &Path,
    size: u64,
    row: &mut RowFn<'_>,
    want: &dyn Fn(&str) -> bool,
) -> Result<()> {
    let work = crate::workspace_root().join("target/bench-work");
    let p = |s: &str| -> PathBuf { work.join(s) };
    let inp = input.to_str().context("input path")?;
    let mib = size >> 20;
    let file_hash = {
        let out = Command::new(xet).args(["hash", "-q", inp]).output()?;
        String::from_utf8(out.stdout)?.trim().to_string()
    };
    let size_s = size.to_string();

    if want("upload") {
        // The reference's upload to its local:// store.
        let ref_local_upload = || {
            Ok(py(
                pyexe,
                REF_UPLOAD,
                &[inp, &format!("local://{}", p("r1").display())],
                &p("rc1"),
            ))
        };
        // First upload, embedded store vs local://.
        let [ours, reference] = pair(bench_interleaved(
            o.runs,
            vec![
                Contender::new(
                    || {
                        Ok(xetc(
                            xet,
                            &["upload", "--store", p("s1").to_str().unwrap(), inp],
                            &p("c1"),
                        ))
                    },
                    || {
                        fresh(&p("s1"))?;
                        fresh(&p("c1"))?;
                        warm(input)
                    },
                ),
                Contender::new(ref_local_upload, || {
                    fresh(&p("r1"))?;
                    fresh(&p("rc1"))?;
                    warm(input)
                }),
            ],
        )?);
        row(
            plain(
                format!("upload {mib} MiB, embedded store / local://"),
                size,
                ours,
                reference,
                SPEED_AND_CPU,
            ),
            Some(UPLOAD_RSS_MIB),
        );
        // Re-upload into the same stores and caches (everything deduplicates), ours
        // plain and with --rehash, the reference's in turn.
        let store = p("s1");
        let reupload = |extra: &'static [&'static str]| {
            let store = store.clone();
            Contender::new(
                move || {
                    let mut args = vec!["upload"];
                    args.extend_from_slice(extra);
                    args.extend(["--store", store.to_str().unwrap(), inp]);
                    Ok(xetc(xet, &args, &p("c1")))
                },
                || warm(input),
            )
        };
        let [ours, rehash, reference] = triple(bench_interleaved(
            o.runs,
            vec![
                reupload(&[]),
                reupload(&["--rehash"]),
                Contender::new(ref_local_upload, || warm(input)),
            ],
        )?);
        row(
            plain(
                format!(
                    "re-upload {mib} MiB, embedded store / local:// (unchanged file, not read)"
                ),
                size,
                ours,
                reference,
                ">= 2x",
            ),
            None,
        );
        // The same with --rehash: the file is read, chunked, hashed and deduplicated.
        row(
            plain(
                format!("re-upload {mib} MiB --rehash, embedded store / local://"),
                size,
                rehash,
                reference,
                ">= 2x",
            ),
            None,
        );

        // Both clients against xet serve, a fresh server and store per run.
        let server: std::cell::RefCell<Option<Served>> = std::cell::RefCell::new(None);
        let restart = |cache: &str| -> Result<()> {
            *server.borrow_mut() = None;
            fresh(&p("srv"))?;
            fresh(&p(cache))?;
            *server.borrow_mut() = Some(serve(xet, &p("srv"))?);
            Ok(())
        };
        let url = || {
            server
                .borrow()
                .as_ref()
                .map(|s| s.url.clone())
                .unwrap_or_default()
        };
        let pid = || server.borrow().as_ref().map(|s| s.child.id());
        let meter = CpuMeter::new(size);
        let (ours_cpu, ref_cpu) = (CpuRuns::default(), CpuRuns::default());
        let [ours, reference] = pair(bench_interleaved(
            o.runs,
            vec![
                Contender::new(
                    || {
                        meter.start(pid())?;
                        Ok(xetc(xet, &["upload", "--endpoint", &url(), inp], &p("c2")))
                    },
                    || {
                        warm(input)?;
                        restart("c2")
                    },
                )
                .after(|| meter.end(pid(), &ours_cpu)),
                Contender::new(
                    || {
                        meter.start(pid())?;
                        Ok(py(pyexe, REF_UPLOAD, &[inp, &url()], &p("rc2")))
                    },
                    || {
                        warm(input)?;
                        restart("rc2")
                    },
                )
                .after(|| meter.end(pid(), &ref_cpu)),
            ],
        )?);
        *server.borrow_mut() = None;
        row(
            Row {
                server_cpu: format!("xet {}, ref {}", ours_cpu.range(), ref_cpu.range()),
                ..plain(
                    format!("upload {mib} MiB to xet serve"),
                    size,
                    ours,
                    reference,
                    SPEED_AND_CPU,
                )
            },
            Some(UPLOAD_RSS_MIB),
        );
    }

    if want("small") {
        // A dataset of many small files: per-file costs rather than bytes.
        let (tree, list, bytes) = small_files(&work, SMALL_FILES, SMALL_MIN..=SMALL_MAX, 7)?;
        let tree_s = tree.to_str().context("tree path")?.to_string();
        let list_s = list.to_str().context("list path")?.to_string();
        let [ours, reference] = pair(bench_interleaved(
            o.runs,
            vec![
                Contender::new(
                    || {
                        Ok(xetc(
                            xet,
                            &[
                                "upload",
                                "-q",
                                "--store",
                                p("m1").to_str().unwrap(),
                                &tree_s,
                            ],
                            &p("mc1"),
                        ))
                    },
                    || {
                        fresh(&p("m1"))?;
                        fresh(&p("mc1"))?;
                        warm(&tree)
                    },
                ),
                Contender::new(
                    || {
                        Ok(py(
                            pyexe,
                            REF_UPLOAD_LIST,
                            &[&list_s, &format!("local://{}", p("mr1").display())],
                            &p("mrc1"),
                        ))
                    },
                    || {
                        fresh(&p("mr1"))?;
                        fresh(&p("mrc1"))?;
                        warm(&tree)
                    },
                ),
            ],
        )?);
        row(
            plain(
                format!(
                    "upload {SMALL_FILES} files of {SMALL_MIN}-{SMALL_MAX} bytes (one directory tree), embedded store / local:// (for information)"
                ),
                bytes,
                ours,
                reference,
                "",
            ),
            None,
        );
    }

    if want("download") {
        // Stores holding the file: ours via xet upload, the reference's via local://.
        fresh(&p("ds"))?;
        fresh(&p("dc"))?;
        let st = xetc(
            xet,
            &["upload", "--store", p("ds").to_str().unwrap(), inp],
            &p("dc"),
        )
        .stdout(Stdio::null())
        .status()?;
        if !st.success() {
            bail!("preparing the download store failed");
        }
        fresh(&p("dr"))?;
        let st = py(
            pyexe,
            REF_UPLOAD,
            &[inp, &format!("local://{}", p("dr").display())],
            &p("drc"),
        )
        .status()?;
        if !st.success() {
            bail!("preparing the reference's local:// store failed");
        }
        let out = p("out.bin");
        let outs = out.to_str().unwrap().to_string();
        let clean = |cache: &str| {
            fresh(&p(cache))?;
            let _ = std::fs::remove_file(&out);
            Ok(())
        };
        let ref_local = |sync: bool| {
            let store = format!("local://{}", p("dr").display());
            let args = [file_hash.clone(), store, outs.clone(), size_s.clone()];
            ref_download(pyexe, args, p("rdc"), sync)
        };
        let [ours, reference, reference_synced] = triple(bench_interleaved(
            o.runs,
            vec![
                Contender::new(
                    || {
                        Ok(xetc(
                            xet,
                            &[
                                "download",
                                "--store",
                                p("ds").to_str().unwrap(),
                                &file_hash,
                                "-o",
                                &outs,
                            ],
                            &p("dlc"),
                        ))
                    },
                    || {
                        warm(&p("ds"))?;
                        clean("dlc")
                    },
                ),
                Contender::new(ref_local(false), || {
                    warm(&p("dr"))?;
                    clean("rdc")
                }),
                Contender::new(ref_local(true), || {
                    warm(&p("dr"))?;
                    clean("rdc")
                }),
            ],
        )?);
        row(
            plain(
                format!("download {mib} MiB, embedded store / local:// (xet verifies)"),
                size,
                ours,
                reference,
                SPEED_AND_CPU,
            ),
            Some(DOWNLOAD_RSS_MIB),
        );
        row(
            plain(
                format!(
                    "download {mib} MiB, embedded store / local://, the reference's followed by sync (both files on disk at the end; for information)"
                ),
                size,
                ours,
                without_rss(reference_synced),
                "",
            ),
            None,
        );

        let server = serve(xet, &p("ds"))?;
        let pid = || Some(server.child.id());
        let meter = CpuMeter::new(size);
        let cpu: [CpuRuns; 5] = Default::default();
        let download = |extra: &[&str], cache: &str| {
            let mut args = vec!["download"];
            args.extend_from_slice(extra);
            args.extend(["--endpoint", &server.url, &file_hash, "-o", &outs]);
            xetc(xet, &args, &p(cache))
        };
        // Ours with the chunk cache (the default: the downloaded file is hard-linked into
        // it, or, where that cannot be, every fetched byte is written to it too) and
        // without it (what the reference does by default), each from an empty cache.
        let ours_with = |extra: &'static [&'static str], runs: &'static str| {
            let (meter, cpu_runs, download, clean) =
                (&meter, &cpu[cpu_index(runs)], &download, &clean);
            Contender::new(
                move || {
                    meter.start(pid())?;
                    Ok(download(extra, "dlc"))
                },
                move || {
                    warm(&p("ds"))?;
                    clean("dlc")
                },
            )
            .after(move || meter.end(pid(), cpu_runs))
        };
        // And again into a cache that holds the file already (filled by one untimed
        // download before the first run; only the output is removed between runs).
        let ours_warm = Contender::new(
            || {
                meter.start(pid())?;
                Ok(download(&[], "dlw"))
            },
            || {
                warm(&p("ds"))?;
                if !p("dlw").exists() {
                    let st = download(&[], "dlw").stdout(Stdio::null()).status()?;
                    if !st.success() {
                        bail!("filling the chunk cache of the warm-cache row failed");
                    }
                }
                let _ = std::fs::remove_file(&out);
                Ok(())
            },
        )
        .after(|| meter.end(pid(), &cpu[cpu_index("warm cache")]));
        let ref_serve = |sync: bool| {
            let args = [
                file_hash.clone(),
                server.url.clone(),
                outs.clone(),
                size_s.clone(),
            ];
            let cpu_runs = &cpu[cpu_index(if sync { "ref synced" } else { "ref" })];
            let meter = &meter;
            let mut make = ref_download(pyexe, args, p("rdc"), sync);
            Contender::new(
                move || {
                    meter.start(pid())?;
                    make()
                },
                || {
                    warm(&p("ds"))?;
                    clean("rdc")
                },
            )
            .after(move || meter.end(pid(), cpu_runs))
        };
        let samples = bench_interleaved(
            o.runs,
            vec![
                ours_with(&[], "cache on"),
                ours_with(&["--chunk-cache-size", "0"], "cache off"),
                ours_warm,
                ref_serve(false),
                ref_serve(true),
            ],
        )?;
        let [
            ours_cached,
            ours_uncached,
            ours_warm,
            reference,
            reference_synced,
        ]: [BenchSample; 5] = samples
            .try_into()
            .unwrap_or_else(|_| unreachable!("five contenders"));
        let server_cpu = |ours: &str, reference: &str| {
            format!(
                "xet {}, ref {}",
                cpu[cpu_index(ours)].range(),
                cpu[cpu_index(reference)].range()
            )
        };
        row(
            Row {
                server_cpu: server_cpu("cache on", "ref"),
                ..plain(
                    format!(
                        "download {mib} MiB from xet serve (xet verifies; chunk cache on, the default)"
                    ),
                    size,
                    ours_cached,
                    reference,
                    SPEED_AND_CPU,
                )
            },
            Some(DOWNLOAD_RSS_MIB),
        );
        row(
            Row {
                server_cpu: server_cpu("cache off", "ref"),
                ..plain(
                    format!(
                        "download {mib} MiB from xet serve (xet verifies; chunk cache off, as the reference)"
                    ),
                    size,
                    ours_uncached,
                    reference,
                    SPEED_AND_CPU,
                )
            },
            Some(DOWNLOAD_RSS_MIB),
        );
        row(
            Row {
                server_cpu: server_cpu("cache off", "ref synced"),
                ..plain(
                    format!(
                        "download {mib} MiB from xet serve, chunk cache off, the reference's followed by sync (both files on disk at the end; for information)"
                    ),
                    size,
                    ours_uncached,
                    without_rss(reference_synced),
                    "",
                )
            },
            None,
        );
        row(
            Row {
                case: format!(
                    "download {mib} MiB from xet serve again, the chunk cache holding it (xet verifies; for information)"
                ),
                bytes: size,
                ours: ours_warm,
                reference: None,
                target: "",
                server_cpu: cpu[cpu_index("warm cache")].range(),
            },
            Some(DOWNLOAD_RSS_MIB),
        );
    }
    std::fs::remove_dir_all(&work).ok();
    Ok(())
}

/// Which of the serve download's server CPU records a contender fills.
fn cpu_index(name: &str) -> usize {
    ["cache on", "cache off", "warm cache", "ref", "ref synced"]
        .iter()
        .position(|n| *n == name)
        .expect("a known contender")
}

fn pair(v: Vec<BenchSample>) -> [BenchSample; 2] {
    v.try_into()
        .unwrap_or_else(|_| unreachable!("two contenders"))
}

fn triple(v: Vec<BenchSample>) -> [BenchSample; 3] {
    v.try_into()
        .unwrap_or_else(|_| unreachable!("three contenders"))
}
