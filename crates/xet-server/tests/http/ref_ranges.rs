//! Byte ranges downloaded by the reference client from this server, compared with slices
//! of the originals.
//!
//! `hf_xet` 1.8.0 downloads ranges through its session streaming API:
//! `XetDownloadStreamGroup.download_stream(info, start, end)` (and
//! `download_unordered_stream`), which asks `GET /v2/reconstructions/{file}` (or `/v1/…`
//! when v2 is 404) with `Range: bytes=S-E` and fetches only the xorb ranges of the answer.
//! The legacy `download_files` has no range parameter. Ranges start and end on chunk
//! boundaries, on term (xorb) boundaries of a file whose terms come from three xorbs, one
//! byte either side of those, at the file's ends, past its end, and open at either side.
//!
//! With the file size given, hf_xet rejects a start at or past it before asking the
//! server; with the size unknown it asks, the server answers 416 and hf_xet yields no
//! bytes. Both cases run (the latter asserted through the server's request log).

use crate::common;
use crate::reference;

use common::*;
use reference::*;
use std::path::Path;
use std::sync::Arc;
use xet_cas::Cas;
use xet_hash::MerkleHash;
use xet_server::{ServerConfig, Token};
use xet_store::MemoryStore;
use xet_testdata::{Kind, generate};

struct File {
    name: &'static str,
    data: Vec<u8>,
    hash: MerkleHash,
}

#[derive(Debug, Clone, Copy)]
struct Want {
    start: Option<u64>,
    end: Option<u64>,
    size_known: bool,
}

impl Want {
    fn expected<'a>(&self, data: &'a [u8]) -> &'a [u8] {
        let n = data.len() as u64;
        let s = self.start.unwrap_or(0).min(n);
        let e = self.end.unwrap_or(n).min(n);
        if s >= e {
            &[]
        } else {
            &data[s as usize..e as usize]
        }
    }
}

/// Term boundaries (offsets where the next term starts, with 0 and the size) of a stored file.
async fn term_bounds(cas: &dyn Cas, f: &File) -> (Vec<u64>, usize) {
    let rec = cas.reconstruction(&f.hash, None).await.unwrap();
    let mut b = vec![0u64];
    for t in &rec.terms {
        b.push(b.last().unwrap() + t.unpacked_length);
    }
    assert_eq!(*b.last().unwrap(), f.data.len() as u64, "{}", f.name);
    let xorbs = rec
        .terms
        .iter()
        .map(|t| t.xorb)
        .collect::<std::collections::BTreeSet<_>>()
        .len();
    (b, xorbs)
}

/// The ranges to ask for one file, given its chunk and term boundaries.
fn ranges_for(n: u64, chunks: &[u64], terms: &[u64]) -> Vec<(Option<u64>, Option<u64>)> {
    let mut v = vec![(None, None), (Some(0), Some(1)), (Some(0), Some(n + 1))];
    let s = |x: u64| Some(x);
    if n > 1 {
        v.extend([
            (s(n - 1), None),
            (s(n - 1), s(n)),
            (None, s(n - 1)),
            (s(1), None),
        ]);
    }
    if n > 10 {
        v.extend([(s(n - 5), s(n + 100)), (s(n / 2), s(n / 2))]);
    }
    // Chunk boundaries: first, second, a middle one and the last interior one.
    let interior: Vec<u64> = chunks.iter().copied().filter(|&c| c < n).collect();
    let mut picked: Vec<usize> = vec![0, 1, interior.len() / 2, interior.len().saturating_sub(1)];
    picked.dedup();
    for i in picked.into_iter().filter(|&i| i < interior.len()) {
        let c = interior[i];
        let prev = if i == 0 { 0 } else { interior[i - 1] };
        let next = interior.get(i + 1).copied().unwrap_or(n);
        v.extend([
            (s(prev), s(c)),      // exactly chunk i
            (s(c), s(next)),      // exactly chunk i + 1
            (s(c - 1), s(c + 1)), // one byte either side of the boundary
            (s(c), s(c + 1)),
            (s(c - 1), s(c)),
            (s(c), None),
            (None, s(c)),
        ]);
    }
    // Term (xorb) boundaries.
    for w in terms.windows(2) {
        let (a, b) = (w[0], w[1]);
        v.push((s(a), s(b))); // exactly one term
        if b - a > 2 {
            v.push((s(a + 1), s(b - 1))); // inside one term
        }
        if b < n {
            v.extend([
                (s(b - 1), s(b + 1)),
                (s(b), None),
                (None, s(b)),
                (s(a), s(b + 1)),
            ]);
        }
    }
    if terms.len() > 3 {
        // From the end of the first term into the start of the last.
        let (a, b) = (terms[1], terms[terms.len() - 2]);
        v.push((s(a - 1), s(b + 1)));
    }
    v.sort();
    v.dedup();
    v
}

async fn upload_set(
    py: &Path,
    work: &Path,
    url: &str,
    set: &str,
    files: &[&File],
) -> serde_json::Value {
    for f in files {
        let p = work.join(set).join(f.name);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, &f.data).unwrap();
    }
    // One cache for every upload: hf_xet deduplicates against its earlier shards.
    must(
        step(
            py,
            work,
            "cache-up",
            &[
                "upload",
                "--endpoint",
                url,
                "--token",
                "tok-w",
                "--set",
                set,
            ],
            &[],
        )
        .await,
        &format!("upload {set}"),
    )
}

/// Ask hf_xet for every range of every file (alternately ordered / unordered streams),
/// compare with the originals, and return how many requests were past the end.
async fn download_ranges(
    py: &Path,
    work: &Path,
    url: &str,
    tag: &str,
    files: &[File],
    plans: &[Vec<Want>],
) -> usize {
    let mut spec = Vec::new();
    let mut expect = Vec::new();
    let mut past_end = 0;
    for (f, plan) in files.iter().zip(plans) {
        for (i, w) in plan.iter().enumerate() {
            let out = format!("{tag}/{}.{i}", f.name);
            spec.push(serde_json::json!({
                "hash": f.hash.to_string(),
                "size": w.size_known.then_some(f.data.len()),
                "start": w.start,
                "end": w.end,
                "out": out,
                "unordered": (spec.len() % 2) == 1,
            }));
            if w.start.is_some_and(|s| s >= f.data.len() as u64) && !w.size_known {
                past_end += 1;
            }
            expect.push((out, f, *w));
        }
    }
    let spec_path = work.join(format!("{tag}.json"));
    std::fs::write(&spec_path, serde_json::to_vec(&spec).unwrap()).unwrap();
    let r = must(
        step(
            py,
            work,
            &format!("cache-{tag}"),
            &[
                "ranges",
                "--endpoint",
                url,
                "--token",
                "tok-r",
                "--spec",
                spec_path.to_str().unwrap(),
            ],
            &[],
        )
        .await,
        &format!("ranges {tag}"),
    );
    assert_eq!(r["ranges"], spec.len());
    for (out, f, w) in &expect {
        let got = std::fs::read(work.join(out)).unwrap();
        let want = w.expected(&f.data);
        assert!(
            got == want,
            "{tag}: {} range {w:?} of {} bytes: got {} bytes, want {}",
            f.name,
            f.data.len(),
            got.len(),
            want.len()
        );
    }
    past_end
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hf_xet_downloads_byte_ranges() {
    let Some(py) = python() else { return };
    let tmp = tempfile::tempdir().unwrap();
    let work = tmp.path();
    let cas = Arc::new(MemoryStore::in_memory().await.unwrap());
    let config = ServerConfig {
        tokens: vec![Token::write("tok-w"), Token::read("tok-r")],
        ..Default::default()
    };

    // `a` and `b` in two uploads (two xorbs); `c` splices pieces of both around new data,
    // so its terms alternate between three xorbs.
    let file = |name, data: Vec<u8>| File {
        name,
        hash: xet_chunk::file_hash(&data),
        data,
    };
    let a = generate(Kind::Random, 3 * 1024 * 1024 + 123, 31);
    let b = generate(Kind::Text, 1024 * 1024 + 7, 32);
    let c = [
        &a[..1_000_000],
        &generate(Kind::Random, 200_000, 33),
        &b[300_000..],
        &a[2_000_000..],
    ]
    .concat();
    let files = vec![
        file("a.bin", a),
        file("b.txt", b),
        file("c.bin", c),
        file("one.bin", vec![b'z']),
        file("empty.bin", Vec::new()),
    ];

    let log = RequestLog::default();
    let server = TestServer::start_recorded(config.clone(), cas.clone(), log.clone()).await;
    for (set, idx) in [("ra", &[0usize, 3, 4][..]), ("rb", &[1]), ("rc", &[2])] {
        let picked: Vec<&File> = idx.iter().map(|&i| &files[i]).collect();
        let up = upload_set(&py, work, &server.url, set, &picked).await;
        let manifest = up["files"].as_array().unwrap();
        assert_eq!(manifest.len(), picked.len());
        for f in &picked {
            let m = manifest.iter().find(|m| m["name"] == f.name).unwrap();
            assert_eq!(
                m["hash"].as_str().unwrap(),
                f.hash.to_string(),
                "{}",
                f.name
            );
        }
    }

    let mut plans = Vec::new();
    for f in &files {
        let n = f.data.len() as u64;
        let chunks: Vec<u64> = xet_chunk::chunk_boundaries(&f.data)
            .into_iter()
            .map(|x| x as u64)
            .collect();
        let terms = if n == 0 {
            vec![0]
        } else {
            let (terms, xorbs) = term_bounds(&*cas, f).await;
            if f.name == "c.bin" {
                assert!(
                    xorbs >= 3 && terms.len() >= 5,
                    "c.bin is not spliced from three xorbs: {terms:?}"
                );
            }
            terms
        };
        let mut plan: Vec<Want> = ranges_for(n, &chunks, &terms)
            .into_iter()
            .enumerate()
            .map(|(i, (start, end))| Want {
                start,
                end,
                // hf_xet refuses a start at or past a known size itself.
                size_known: i % 3 != 0 && start.is_none_or(|s| s < n),
            })
            .collect();
        // Past the end, size unknown: the server is asked.
        plan.extend(
            [(n, None), (n, Some(n + 10)), (n + 1000, Some(n + 2000))].map(|(s, e)| Want {
                start: Some(s),
                end: e,
                size_known: false,
            }),
        );
        plans.push(plan);
    }
    eprintln!(
        "ranges per file: {:?}",
        files
            .iter()
            .zip(&plans)
            .map(|(f, p)| (f.name, p.len()))
            .collect::<Vec<_>>()
    );

    log.clear();
    download_ranges(&py, work, &server.url, "v2", &files, &plans).await;
    check_requests(&log.records(), "/v2/reconstructions/", &files, &plans);
    assert_eq!(log.count("GET", "/v1/", None), 0);
    server.stop().await.unwrap();

    // The same over /v1 (v2 answered 404).
    let server = TestServer::start_recorded(
        ServerConfig {
            allow_v2: false,
            ..config
        },
        cas.clone(),
        log.clone(),
    )
    .await;
    log.clear();
    download_ranges(&py, work, &server.url, "v1", &files, &plans).await;
    check_requests(&log.records(), "/v1/reconstructions/", &files, &plans);
    server.stop().await.unwrap();
}

/// hf_xet asked the server for each range rather than for the whole file: a
/// reconstruction request with a `Range` starting at the range's start answered 200 for
/// every non-empty range, 416 for every range past the end.
fn check_requests(records: &[Record], route: &str, files: &[File], plans: &[Vec<Want>]) {
    let dump = || {
        records
            .iter()
            .filter(|r| r.path.starts_with(route))
            .map(|r| {
                format!(
                    "{} {:?} {}",
                    &r.path[route.len()..route.len() + 8],
                    r.range,
                    r.status
                )
            })
            .collect::<Vec<_>>()
            .join("\n")
    };
    let asked = |f: &File, start: u64, status: u16| {
        let path = format!("{route}{}", f.hash);
        let prefix = format!("bytes={start}-");
        records.iter().any(|r| {
            r.path == path
                && r.status == status
                && r.range.as_deref().is_some_and(|r| r.starts_with(&prefix))
        })
    };
    let mut checked = 0;
    for (f, plan) in files.iter().zip(plans) {
        let n = f.data.len() as u64;
        for w in plan {
            let start = w.start.unwrap_or(0);
            if start >= n && n > 0 {
                assert!(
                    asked(f, start, 416),
                    "{} {w:?}: no 416 for {start}-\n{}",
                    f.name,
                    dump()
                );
                checked += 1;
            } else if !w.expected(&f.data).is_empty() {
                assert!(
                    asked(f, start, 200),
                    "{} {w:?}: no 200 for {start}-\n{}",
                    f.name,
                    dump()
                );
                checked += 1;
            }
        }
    }
    assert!(checked >= 100, "{checked}");
}
