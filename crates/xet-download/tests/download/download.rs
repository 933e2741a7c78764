//! The download pipeline against a real `StoreCas<MemoryBackend>` holding real xorbs and
//! shards built with the format crates.

use crate::common;

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use xet_cas::Cas;
use xet_download::*;
use xet_hash::MerkleHash;

fn opts() -> DownloadOptions {
    DownloadOptions {
        retry_base_delay: Duration::from_millis(10),
        ..Default::default()
    }
}

fn req(f: &TestFile, path: &Path) -> DownloadRequest {
    DownloadRequest::to_path(f.hash, path)
}

async fn get(
    cas: Arc<dyn Cas>,
    reqs: Vec<DownloadRequest>,
    o: DownloadOptions,
) -> Result<DownloadReport> {
    download(cas, reqs, o, None).await
}

/// A corpus exercising multi-xorb files, in-file repetition, shared chunks, tiny files.
fn corpus() -> Corpus {
    let a = random(1_500_000, 1);
    let mut b = a[..600_000].to_vec(); // shares a's leading chunks
    b.extend(random(400_000, 2));
    let zeros = vec![0u8; 700_000]; // one chunk repeated: terms reuse chunks
    let t = text(900_000, 3);
    build(
        &[a, b, zeros, t, random(3_000, 4), vec![0x42], Vec::new()],
        700_000,
    )
}

#[tokio::test]
async fn whole_files_are_byte_identical_and_verified() {
    let c = corpus();
    assert!(c.xorbs.len() >= 4, "corpus spans several xorbs");
    let (store, _) = store(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let reqs: Vec<_> = c
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| req(f, &dir.path().join(format!("f{i}"))))
        .collect();
    let events = Arc::new(Mutex::new(Vec::new()));
    let ev = events.clone();
    let progress: ProgressFn =
        Arc::new(move |e: &ProgressEvent| ev.lock().unwrap().push(e.clone()));
    let report = download(store, reqs, opts(), Some(progress)).await.unwrap();
    for (i, f) in c.files.iter().enumerate() {
        assert_eq!(
            std::fs::read(dir.path().join(format!("f{i}"))).unwrap(),
            f.data,
            "file {i}"
        );
        assert_eq!(report.files[i].hash, f.hash);
        assert_eq!(report.files[i].size, f.data.len() as u64);
    }
    assert_eq!(report.files[6].verification, Verification::Empty);
    assert_eq!(report.files[6].fetches, 0);
    assert!(
        report.files[..6]
            .iter()
            .all(|f| f.verification == Verification::FileHash)
    );
    assert_eq!(
        report.totals.bytes,
        c.files.iter().map(|f| f.data.len() as u64).sum::<u64>()
    );
    assert!(report.totals.bytes_fetched > 0 && report.totals.bytes_from_cache == 0);
    // No .part or journal left behind.
    assert_eq!(leftovers(dir.path()).len(), 7);
    // Progress adds up per file.
    let events = events.lock().unwrap();
    for i in 0..7 {
        let written: u64 = events
            .iter()
            .filter_map(|e| match e {
                ProgressEvent::Written { index, bytes, .. } if *index == i => Some(*bytes),
                _ => None,
            })
            .sum();
        assert_eq!(written, c.files[i].data.len() as u64);
        assert!(events.contains(&ProgressEvent::FileFinished { index: i }));
    }
    let json = serde_json::to_value(&report).unwrap();
    assert!(json["files"][0]["elapsed"].is_number());
}

#[tokio::test]
async fn empty_file_needs_no_request() {
    let w = Wrapper::new(Arc::new(xet_store::MemoryStore::in_memory().await.unwrap()));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sub/empty");
    let r = get(
        w.clone(),
        vec![DownloadRequest::to_path(MerkleHash::ZERO, &p)],
        opts(),
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), b"");
    assert_eq!(r.files[0].size, 0);
    assert_eq!(
        w.reconstructions.load(Ordering::SeqCst) + w.attempts.load(Ordering::SeqCst),
        0
    );
}

#[tokio::test]
async fn segmented_reconstruction_and_one_fetch_per_range() {
    let c = build(&[random(2_000_000, 7)], 300_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        segment_bytes: 250_000,
        ..opts()
    };
    let r = get(w.clone(), vec![req(&c.files[0], &p)], o).await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    assert!(
        w.reconstructions.load(Ordering::SeqCst) >= 5,
        "queried in segments"
    );
    // No byte range of any xorb was downloaded twice.
    let ranges = w.fetched_ranges.lock().unwrap().clone();
    for (i, a) in ranges.iter().enumerate() {
        for b in &ranges[i + 1..] {
            assert!(
                a.0 != b.0 || a.1.end <= b.1.start || b.1.end <= a.1.start,
                "overlapping fetches {a:?} {b:?}"
            );
        }
    }
    assert_eq!(r.totals.fetches, ranges.len() as u64);
}

/// A download of a whole file whose size is not given asks for its first segment
/// first (four segments long): a file smaller than that costs that one query, a larger
/// one the size query after it, and the first answer is used, not asked for again.
#[tokio::test]
async fn no_request_before_the_reconstruction_query() {
    let c = build(
        &[
            random(600_000, 9),
            random(2_000_000, 10),
            random(5_000_000, 11),
        ],
        300_000,
    );
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        segment_bytes: 1_000_000,
        ..opts()
    };
    // Below one segment, and above one segment but below the first (4 MB): one query.
    for (i, name) in [(0, "small"), (1, "two segments")] {
        let p = dir.path().join(name);
        get(w.clone(), vec![req(&c.files[i], &p)], o.clone())
            .await
            .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), c.files[i].data);
        assert_eq!(*w.queries.lock().unwrap(), ["reconstruction"], "{name}");
        w.queries.lock().unwrap().clear();
    }
    let large = dir.path().join("large");
    get(w.clone(), vec![req(&c.files[2], &large)], o)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&large).unwrap(), c.files[2].data);
    assert_eq!(
        *w.queries.lock().unwrap(),
        ["reconstruction", "size", "reconstruction"],
        "a first segment of 4 MB, asked for once, then one of 1 MB"
    );
}

#[tokio::test]
async fn untrimmed_answers_overlapping_earlier_segments() {
    // Later segments come back starting before the query: the overlap is dropped on
    // chunk boundaries and the file hash still checks out.
    let c = build(&[random(2_000_000, 8), text(1_000_000, 9)], 300_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.set_fault(Fault::Untrimmed(150_000));
    let dir = tempfile::tempdir().unwrap();
    for (i, f) in c.files.iter().enumerate() {
        let p = dir.path().join(format!("f{i}"));
        let o = DownloadOptions {
            segment_bytes: 200_000,
            ..opts()
        };
        let r = get(w.clone(), vec![req(f, &p)], o.clone()).await.unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), f.data);
        assert_eq!(r.files[0].verification, Verification::FileHash);
        let p = dir.path().join(format!("r{i}"));
        get(
            w.clone(),
            vec![req(f, &p).with_range(FileRange::new(250_001, Some(900_000)))],
            o,
        )
        .await
        .unwrap();
        assert_eq!(std::fs::read(&p).unwrap(), &f.data[250_001..=900_000]);
    }
}

#[tokio::test]
async fn file_with_repeated_chunks_fetches_each_range_once() {
    // 700 KB of zeros: one 128 KiB chunk used over and over, in several terms.
    let c = build(&[vec![0u8; 700_000]], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let r = get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("z"))],
        opts(),
    )
    .await
    .unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("z")).unwrap(),
        c.files[0].data
    );
    assert_eq!(
        r.totals.fetches, 1,
        "the zero chunk and the tail are adjacent: one fetch"
    );
}

async fn range_of(
    cas: Arc<dyn Cas>,
    f: &TestFile,
    start: u64,
    end: Option<u64>,
    dir: &Path,
) -> Vec<u8> {
    let p = dir.join(format!("r-{start}-{end:?}"));
    let rq = req(f, &p).with_range(FileRange::new(start, end));
    let rep = get(
        cas,
        vec![rq],
        DownloadOptions {
            segment_bytes: 200_000,
            ..opts()
        },
    )
    .await
    .unwrap();
    assert_eq!(
        rep.files[0].verification,
        if start == 0 && end.is_none_or(|e| e + 1 >= f.data.len() as u64) {
            Verification::FileHash
        } else {
            Verification::TermLengths
        }
    );
    std::fs::read(p).unwrap()
}

#[tokio::test]
async fn ranges_at_chunk_xorb_and_file_boundaries() {
    let c = corpus();
    let (store, _) = store(&c).await;
    let dir = tempfile::tempdir().unwrap();
    for f in &c.files[..4] {
        let n = f.data.len() as u64;
        let ce = &f.chunk_ends;
        let mut cases: Vec<(u64, Option<u64>)> = vec![
            (0, Some(0)),
            (0, Some(n - 1)),
            (0, None),
            (n - 1, None),
            (n - 1, Some(n + 100)),
            (1, Some(n - 2)),
            (ce[0], Some(ce[1] - 1)),      // exactly the second chunk
            (ce[0] - 1, Some(ce[0])),      // straddles the first chunk boundary
            (ce[2], None),                 // from a chunk boundary to the end
            (n / 2, Some(n / 2 + 70_000)), // mid-chunk to mid-chunk
        ];
        for &b in &f.term_bounds {
            cases.push((b, Some(b + 10)));
            cases.push((b - 10, Some(b - 1)));
            cases.push((b - 5, Some(b + 5)));
        }
        for (s, e) in cases {
            let got = range_of(store.clone(), f, s, e, dir.path()).await;
            let end = e.map_or(n, |e| (e + 1).min(n));
            assert_eq!(
                got,
                &f.data[s as usize..end as usize],
                "range {s}..={e:?} of a {n}-byte file"
            );
        }
    }
}

#[tokio::test]
async fn bad_ranges_and_missing_files() {
    let c = corpus();
    let (store, _) = store(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let f = &c.files[0];
    let n = f.data.len() as u64;
    let e = get(
        store.clone(),
        vec![req(f, &dir.path().join("x")).with_range(FileRange::new(n, None))],
        opts(),
    )
    .await
    .unwrap_err();
    assert!(
        matches!(e, DownloadError::RangeNotSatisfiable { .. }),
        "{e}"
    );
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    let e = get(
        store.clone(),
        vec![req(f, &dir.path().join("x")).with_range(FileRange::new(10, Some(5)))],
        opts(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest);
    let missing = xet_hash::chunk_hash(b"no such file");
    let e = get(
        store,
        vec![DownloadRequest::to_path(missing, dir.path().join("m"))],
        opts(),
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::NotFound);
    assert!(e.to_string().contains(&missing.to_string()));
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
}

#[tokio::test]
async fn corrupt_payload_byte_names_the_chunk_and_leaves_nothing() {
    // Random data is stored uncompressed, so a flipped payload byte decodes fine and only
    // the file hash can catch it.
    let c = build(&[random(1_000_000, 11)], 1 << 26);
    let (store, backend) = store(&c).await;
    let x = &c.xorbs[0];
    let victim = 5;
    let info = x.info().chunks[victim];
    corrupt(&backend, &x.hash(), (info.offset + 8 + 100) as usize).await;
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        cache: Some(CacheConfig::new(cache.path())),
        ..opts()
    };
    let e = get(store, vec![req(&c.files[0], &p)], o).await.unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Verification, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("chunk {victim} of xorb {}", x.hash())),
        "{msg}"
    );
    assert!(!p.exists());
    assert!(
        leftovers(dir.path()).is_empty(),
        "{:?}",
        leftovers(dir.path())
    );
    assert_eq!(
        cache_stats(cache.path()).unwrap().entries,
        0,
        "bad data is not left in the cache"
    );
}

#[tokio::test]
async fn corrupt_chunk_header_names_the_chunk() {
    let c = build(&[text(600_000, 12)], 1 << 26);
    let (store, backend) = store(&c).await;
    let x = &c.xorbs[0];
    let info = x.info().chunks[3];
    corrupt(&backend, &x.hash(), info.offset as usize + 4).await; // the scheme byte
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let e = get(store, vec![req(&c.files[0], &p)], opts())
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Verification, "{e}");
    assert!(
        e.to_string()
            .contains(&format!("chunk 3 of xorb {}", x.hash())),
        "{e}"
    );
    assert!(leftovers(dir.path()).is_empty());
}

/// One file of `len` random bytes in xorbs of `xorb_len`, one fetch at a time: how many
/// fetches a clean download takes, then a download cut after `fail_after` fetches, then
/// its rerun (which must be right).
struct Rerun {
    total: u64,
    /// The first run's error, and whether its part file and journal were left.
    error: String,
    part_left: bool,
    journal_left: bool,
    /// Fetches the rerun made, and its report.
    fetched: u64,
    report: DownloadReport,
}

async fn interrupt_and_rerun(len: usize, seed: u64, xorb_len: u64, fail_after: u64) -> Rerun {
    let c = build(&[random(len, seed)], xorb_len);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        ..opts()
    };
    let clean = get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("clean"))],
        o.clone(),
    )
    .await
    .unwrap();
    std::fs::remove_file(dir.path().join("clean")).unwrap();
    w.reset();

    w.set_fault(Fault::FailAfter(fail_after));
    let e = get(w.clone(), vec![req(&c.files[0], &p)], o.clone())
        .await
        .unwrap_err();
    assert!(!p.exists());
    assert_eq!(w.fetches(), fail_after);
    let (part_left, journal_left) = (
        dir.path().join("f.part").exists(),
        dir.path().join("f.part.jsonl").exists(),
    );

    w.set_fault(Fault::None);
    w.reset();
    let report = get(w.clone(), vec![req(&c.files[0], &p)], o).await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    assert_eq!(report.totals.fetches, w.fetches());
    assert_eq!(report.files[0].verification, Verification::FileHash);
    assert_eq!(
        leftovers(dir.path()),
        vec!["f".to_string()],
        "nothing else left"
    );
    Rerun {
        total: clean.totals.fetches,
        // The whole chain, as the CLI prints it: the CAS error is the cause.
        error: xet_cas::error_chain(&e),
        part_left,
        journal_left,
        fetched: w.fetches(),
        report,
    }
}

#[tokio::test]
async fn interrupted_download_resumes_fetching_only_what_is_missing() {
    let r = interrupt_and_rerun(3_000_000, 21, 250_000, 4).await;
    assert!(r.total >= 10, "{}", r.total);
    assert!(r.error.contains("injected"), "{}", r.error);
    assert!(r.part_left && r.journal_left);
    assert_eq!(
        r.fetched,
        r.total - 4,
        "only the missing ranges are fetched"
    );
    assert!(r.report.files[0].bytes_resumed > 0);
}

/// Under 1 MiB a download keeps no resume journal (syncing one for every small file cost
/// more than fetching it again): an interrupted one leaves its part file only, and the
/// rerun fetches everything and is right.
#[tokio::test]
async fn small_download_keeps_no_journal_and_reruns_whole() {
    let r = interrupt_and_rerun(900_000, 22, 100_000, 2).await;
    assert!(r.total >= 3, "{}", r.total);
    assert!(!r.journal_left);
    assert_eq!(r.fetched, r.total);
    assert_eq!(r.report.files[0].bytes_resumed, 0);
}

/// A larger file (21 MiB in 15 xorbs): a whole download with fetches in parallel, then
/// an interrupted one whose rerun fetches only what the first run did not record.
#[tokio::test]
async fn larger_file_interrupted_and_resumed() {
    let c = build(&[random(21 << 20, 24)], 1_500_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");

    let clean = get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("clean"))],
        opts(),
    )
    .await
    .unwrap();
    assert!(std::fs::read(dir.path().join("clean")).unwrap() == c.files[0].data);
    let total = clean.totals.fetches;
    assert!(total >= 10, "{total}");
    w.reset();

    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        ..opts()
    };
    w.set_fault(Fault::FailAfter(5));
    get(w.clone(), vec![req(&c.files[0], &p)], o.clone())
        .await
        .unwrap_err();
    let first = w.fetches();
    assert_eq!(first, 5);
    w.set_fault(Fault::None);
    w.reset();
    let r = get(w.clone(), vec![req(&c.files[0], &p)], o).await.unwrap();
    assert!(std::fs::read(&p).unwrap() == c.files[0].data);
    assert_eq!(
        r.totals.fetches,
        total - first,
        "only the missing ranges are fetched"
    );
    assert_eq!(r.files[0].verification, Verification::FileHash);
}

#[tokio::test]
async fn tampered_part_file_is_refetched_on_resume() {
    let c = build(&[random(2_000_000, 22)], 250_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        ..opts()
    };
    w.set_fault(Fault::FailAfter(3));
    get(w.clone(), vec![req(&c.files[0], &p)], o.clone())
        .await
        .unwrap_err();
    // Flip a byte at the start of the .part file (first term, recorded as done).
    let part = dir.path().join("f.part");
    let mut bytes = std::fs::read(&part).unwrap();
    bytes[10] ^= 1;
    std::fs::write(&part, bytes).unwrap();
    w.set_fault(Fault::None);
    w.reset();
    get(w.clone(), vec![req(&c.files[0], &p)], o).await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    let ranges = w.fetched_ranges.lock().unwrap().clone();
    assert!(
        ranges.iter().any(|r| r.1.start == 0),
        "the tampered term was fetched again"
    );
}

#[tokio::test]
async fn range_downloads_resume_too() {
    let c = build(&[random(2_000_000, 23)], 200_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        ..opts()
    };
    let rq = || req(&c.files[0], &p).with_range(FileRange::new(123_456, Some(1_765_432)));
    w.set_fault(Fault::FailAfter(3));
    get(w.clone(), vec![rq()], o.clone()).await.unwrap_err();
    w.set_fault(Fault::None);
    w.reset();
    let r = get(w.clone(), vec![rq()], o).await.unwrap();
    assert_eq!(
        std::fs::read(&p).unwrap(),
        &c.files[0].data[123_456..=1_765_432]
    );
    assert!(r.files[0].bytes_resumed > 0);
}

#[tokio::test]
async fn chunk_cache_serves_repeat_and_shared_downloads() {
    chunk_cache_serves_repeat_and_shared_downloads_with(true).await;
}

#[tokio::test]
async fn chunk_cache_with_copies_serves_repeat_and_shared_downloads() {
    chunk_cache_serves_repeat_and_shared_downloads_with(false).await;
}

async fn chunk_cache_serves_repeat_and_shared_downloads_with(link_files: bool) {
    let a = random(1_200_000, 31);
    let mut b = a[..800_000].to_vec();
    b.extend(random(200_000, 32));
    let c = build(&[a], 1 << 26);
    let c2 = build(&[b], 1 << 26); // its own xorb; shares no xorb with c
    let (store, _) = store(&c).await;
    put(store.as_ref(), &c2).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        cache: Some(CacheConfig::new(cache.path()).with_link_files(link_files)),
        ..opts()
    };

    let r1 = get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("1"))],
        o.clone(),
    )
    .await
    .unwrap();
    assert!(r1.totals.fetches > 0);
    let stats = cache_stats(cache.path()).unwrap();
    assert!(stats.entries > 0 && stats.bytes > c.files[0].data.len() as u64);
    assert_eq!(stats.linked_files, u64::from(link_files));
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        let links = std::fs::metadata(dir.path().join("1")).unwrap().nlink();
        assert_eq!(links, if link_files { 2 } else { 1 });
    }
    w.reset();
    let r2 = get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("2"))],
        o.clone(),
    )
    .await
    .unwrap();
    assert_eq!(w.fetches(), 0, "second download fetches nothing");
    assert_eq!(r2.totals.bytes_fetched, 0);
    assert_eq!(r2.totals.bytes_from_cache, c.files[0].data.len() as u64);
    assert_eq!(
        std::fs::read(dir.path().join("2")).unwrap(),
        c.files[0].data
    );

    // A range of the cached file: nothing fetched either.
    w.reset();
    let p = dir.path().join("r");
    get(
        w.clone(),
        vec![req(&c.files[0], &p).with_range(FileRange::new(1000, Some(500_000)))],
        o.clone(),
    )
    .await
    .unwrap();
    assert_eq!(w.fetches(), 0);
    assert_eq!(std::fs::read(&p).unwrap(), &c.files[0].data[1000..=500_000]);

    let cleared = cache_clear(cache.path()).unwrap();
    assert_eq!(cleared.entries, stats.entries);
    assert_eq!(cache_stats(cache.path()).unwrap().entries, 0);
    w.reset();
    get(w.clone(), vec![req(&c.files[0], &dir.path().join("3"))], o)
        .await
        .unwrap();
    assert!(w.fetches() > 0);
}

/// A wrapped store holding `c`, an output directory, a cache directory, and options
/// that use it.
async fn with_cache(
    c: &Corpus,
) -> (
    Arc<Wrapper>,
    tempfile::TempDir,
    tempfile::TempDir,
    DownloadOptions,
) {
    let (store, _) = store(c).await;
    let cache = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        cache: Some(CacheConfig::new(cache.path())),
        ..opts()
    };
    (Wrapper::new(store), tempfile::tempdir().unwrap(), cache, o)
}

#[tokio::test]
#[cfg(unix)]
async fn a_linked_download_changed_in_place_is_refetched_where_it_changed() {
    let a = random(1_500_000, 35);
    let c = build(&[a], 400_000);
    let (w, dir, cache, o) = with_cache(&c).await;
    let first = dir.path().join("first");
    get(w.clone(), vec![req(&c.files[0], &first)], o.clone())
        .await
        .unwrap();
    assert_eq!(cache_stats(cache.path()).unwrap().linked_files, 1);
    let fetched_first = w.fetched_ranges.lock().unwrap().len();
    assert!(fetched_first >= 3, "{fetched_first} fetches");

    // Change one byte of the downloaded file in place (the cache shares its inode).
    let mut bytes = std::fs::read(&first).unwrap();
    bytes[1_200_000] ^= 0x55;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&first)
        .and_then(|f| {
            std::os::unix::fs::FileExt::write_all_at(&f, &bytes[1_200_000..1_200_001], 1_200_000)
        })
        .unwrap();

    w.reset();
    let second = dir.path().join("second");
    let r = get(w.clone(), vec![req(&c.files[0], &second)], o)
        .await
        .unwrap();
    assert_eq!(std::fs::read(&second).unwrap(), c.files[0].data);
    let fetched = w.fetched_ranges.lock().unwrap().clone();
    assert_eq!(
        fetched.len(),
        1,
        "only the changed term is fetched again: {fetched:?}"
    );
    assert!(
        r.totals.bytes_from_cache > 0 && r.totals.bytes_fetched > 0,
        "{r:?}"
    );
}

#[tokio::test]
async fn cache_shared_between_files_using_the_same_xorb() {
    // Both files in one corpus: b's leading terms live in a's xorbs.
    let a = random(1_000_000, 33);
    let mut b = a[..700_000].to_vec();
    b.extend(random(100_000, 34));
    let c = build(&[a, b], 400_000);
    let (w, dir, _cache, o) = with_cache(&c).await;
    get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("a"))],
        o.clone(),
    )
    .await
    .unwrap();
    w.reset();
    let r = get(w.clone(), vec![req(&c.files[1], &dir.path().join("b"))], o)
        .await
        .unwrap();
    assert_eq!(
        std::fs::read(dir.path().join("b")).unwrap(),
        c.files[1].data
    );
    assert!(r.totals.bytes_from_cache > 0, "{r:?}");
    // Only the xorb holding b's new chunks is fetched.
    let a_xorbs: Vec<MerkleHash> = c.xorbs.iter().map(|x| x.hash()).collect();
    let fetched = w.fetched_ranges.lock().unwrap().clone();
    assert!(
        fetched.iter().all(|(x, _)| *x == *a_xorbs.last().unwrap()),
        "{fetched:?}"
    );
}

#[tokio::test]
async fn stalled_fetch_fails_within_the_stall_limit() {
    let c = build(&[random(500_000, 41)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.set_fault(Fault::Stall);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        stall_timeout: Duration::from_millis(200),
        min_throughput: 0,
        max_retries: 2,
        ..opts()
    };
    let res = tokio::time::timeout(
        Duration::from_secs(10),
        get(w.clone(), vec![req(&c.files[0], &p)], o),
    )
    .await;
    let e = res.expect("the download must not hang").unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&c.files[0].hash.to_string()) && msg.contains(&c.xorbs[0].hash().to_string()),
        "{msg}"
    );
    assert!(
        msg.contains("stalled") && msg.contains("3 attempt"),
        "{msg}"
    );
    assert_eq!(w.attempts.load(Ordering::SeqCst), 3);
    assert!(!p.exists());
}

#[tokio::test]
async fn expired_urls_requery_the_reconstruction() {
    let c = build(&[random(1_500_000, 51)], 400_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.set_fault(Fault::ExpireOnce);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    get(w.clone(), vec![req(&c.files[0], &p)], opts())
        .await
        .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    let recon = w.reconstructions.load(Ordering::SeqCst);
    assert!(
        recon > c.xorbs.len() as u64,
        "one re-query per expired URL: {recon}"
    );
}

#[tokio::test]
async fn retryable_errors_are_retried() {
    let c = build(&[random(800_000, 61)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.set_fault(Fault::Flaky(2));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        ..opts()
    };
    get(w.clone(), vec![req(&c.files[0], &p)], o.clone())
        .await
        .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    // Too many failures: a network error naming the file and xorb.
    let w = Wrapper::new(w.inner.clone());
    w.set_fault(Fault::Flaky(100));
    let e = get(
        w.clone(),
        vec![req(&c.files[0], &dir.path().join("g"))],
        DownloadOptions {
            max_retries: 2,
            ..o
        },
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network);
    // The transport's error is kept as the source, not flattened into the text.
    assert!(e.to_string().contains("the transfer broke"), "{e}");
    let source = std::error::Error::source(&e).expect("a source");
    let io = source
        .downcast_ref::<std::io::Error>()
        .expect("the io::Error");
    assert_eq!(io.kind(), std::io::ErrorKind::ConnectionReset);
    assert!(!e.to_string().contains(&io.to_string()), "{e}");
}

/// A CAS that retries each request itself (the HTTP client) returns final errors: the
/// pipeline does not multiply its attempts.
#[tokio::test]
async fn errors_of_a_cas_that_retries_itself_are_not_retried_again() {
    let c = build(&[random(800_000, 62)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.set_fault(Fault::Flaky(100));
    w.retries_requests
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let dir = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        max_retries: 3,
        ..opts()
    };
    let e = get(w.clone(), vec![req(&c.files[0], &dir.path().join("f"))], o)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network);
    assert_eq!(w.attempts.load(std::sync::atomic::Ordering::SeqCst), 1);
}

#[tokio::test]
async fn writer_destination_gets_verified_bytes() {
    let c = corpus();
    let (store, backend) = store(&c).await;
    let tmp = tempfile::tempdir().unwrap();
    let out = xet_testdata::SharedBuf::default();
    let o = DownloadOptions {
        temp_dir: Some(tmp.path().to_path_buf()),
        ..opts()
    };
    let r = get(
        store.clone(),
        vec![DownloadRequest::to_writer(
            c.files[3].hash,
            Box::new(out.clone()),
        )],
        o.clone(),
    )
    .await
    .unwrap();
    assert_eq!(r.files[0].path, std::path::Path::new("-"));
    assert_eq!(out.contents(), c.files[3].data);
    // A range to a writer.
    let out2 = xet_testdata::SharedBuf::default();
    let rq = DownloadRequest::to_writer(c.files[3].hash, Box::new(out2.clone()))
        .with_range(FileRange::new(5, Some(99)));
    get(store.clone(), vec![rq], o.clone()).await.unwrap();
    assert_eq!(out2.contents(), &c.files[3].data[5..100]);
    // A corrupt file writes nothing to the writer.
    let x = c
        .xorbs
        .iter()
        .find(|x| x.info().unpacked_len() > 300_000)
        .unwrap();
    let target = c.files.iter().position(|f| {
        // a file using this xorb
        f.data.len() > 1000
    });
    assert!(target.is_some());
    corrupt(
        &backend,
        &x.hash(),
        x.info().chunks[1].offset as usize + 8 + 7,
    )
    .await;
    let out3 = xet_testdata::SharedBuf::default();
    let mut failed = 0;
    for f in &c.files[..4] {
        let rq = DownloadRequest::to_writer(f.hash, Box::new(out3.clone()));
        if get(store.clone(), vec![rq], o.clone()).await.is_err() {
            failed += 1;
        }
    }
    assert!(failed >= 1);
    assert!(out3.contents().len() < c.files[..4].iter().map(|f| f.data.len()).sum::<usize>());
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );
}

/// A FIFO or a symbolic link named as a path destination is never replaced: the FIFO's
/// reader gets the verified bytes (of the empty file too), the link's target gets the
/// file and the link stays.
#[cfg(unix)]
#[tokio::test]
async fn fifos_and_symlinks_are_written_through_not_replaced() {
    use std::os::unix::fs::FileTypeExt;
    let c = corpus();
    let (store, _) = store(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("pipe");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .unwrap();
    assert!(made.success());
    for f in [&c.files[3], &c.files[6]] {
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || std::fs::read(fifo).unwrap())
        };
        get(store.clone(), vec![req(f, &fifo)], opts())
            .await
            .unwrap();
        let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
        // Checked before joining: a replaced FIFO would leave the reader waiting.
        assert!(kind.is_fifo(), "the FIFO stays");
        assert_eq!(reader.join().unwrap(), f.data);
    }

    let target = dir.path().join("target.bin");
    std::fs::write(&target, b"old").unwrap();
    let link = dir.path().join("link.bin");
    std::os::unix::fs::symlink("target.bin", &link).unwrap();
    get(store.clone(), vec![req(&c.files[4], &link)], opts())
        .await
        .unwrap();
    let kind = std::fs::symlink_metadata(&link).unwrap().file_type();
    assert!(kind.is_symlink(), "the link stays");
    assert_eq!(std::fs::read(&target).unwrap(), c.files[4].data);
    let mut left = leftovers(dir.path());
    left.sort();
    assert_eq!(left, ["link.bin", "pipe", "target.bin"]);
}

#[tokio::test]
async fn fetch_concurrency_and_memory_are_bounded() {
    let c = build(&[random(3_000_000, 71)], 150_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    *w.delay.lock().unwrap() = Some(Duration::from_millis(20));
    let dir = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(3),
        ..opts()
    };
    get(w.clone(), vec![req(&c.files[0], &dir.path().join("a"))], o)
        .await
        .unwrap();
    let m = w.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=3).contains(&m), "max in flight {m}");

    // A tiny memory budget serializes fetches but still completes (one fetch may
    // always proceed).
    let w = Wrapper::new(w.inner.clone());
    *w.delay.lock().unwrap() = Some(Duration::from_millis(5));
    let o = DownloadOptions {
        memory_budget: 1,
        fetch_concurrency: FetchConcurrency::Fixed(8),
        ..opts()
    };
    get(w.clone(), vec![req(&c.files[0], &dir.path().join("b"))], o)
        .await
        .unwrap();
    assert_eq!(w.max_in_flight.load(Ordering::SeqCst), 1);
    assert_eq!(
        std::fs::read(dir.path().join("b")).unwrap(),
        c.files[0].data
    );
}

#[tokio::test]
async fn cancellation_interrupts_and_keeps_the_part_file() {
    let c = build(&[random(1_000_000, 81)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.set_fault(Fault::Stall);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let token = cancel_token();
    let o = DownloadOptions {
        cancel: Some(token.clone()),
        ..opts()
    };
    let t = token.clone();
    tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(100)).await;
        t.cancel();
    });
    let e = get(w.clone(), vec![req(&c.files[0], &p)], o)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Interrupted);
    assert!(!p.exists());
    assert!(dir.path().join("f.part").exists());
}

#[tokio::test]
async fn several_files_at_once_share_the_limits() {
    let files: Vec<Vec<u8>> = (0..12)
        .map(|i| random(100_000 + i * 37_000, 90 + i as u64))
        .collect();
    let c = build(&files, 500_000);
    let (store, _) = store(&c).await;
    let dir = tempfile::tempdir().unwrap();
    let reqs = c
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| req(f, &dir.path().join(format!("{i}"))))
        .collect();
    let o = DownloadOptions {
        max_concurrent_files: 3,
        fetch_concurrency: FetchConcurrency::Fixed(2),
        ..opts()
    };
    let r = get(store, reqs, o).await.unwrap();
    assert_eq!(r.files.len(), 12);
    for (i, f) in c.files.iter().enumerate() {
        assert_eq!(
            std::fs::read(dir.path().join(format!("{i}"))).unwrap(),
            f.data
        );
        assert_eq!(r.files[i].hash, f.hash);
    }
}

mod prop {
    use super::*;
    use proptest::prelude::*;
    use std::sync::OnceLock;

    struct Fixture {
        rt: tokio::runtime::Runtime,
        corpus: Corpus,
        store: Arc<Store>,
    }

    fn fixture() -> &'static Fixture {
        static F: OnceLock<Fixture> = OnceLock::new();
        F.get_or_init(|| {
            let rt = tokio::runtime::Runtime::new().unwrap();
            let mut d = random(700_000, 100);
            d.extend(text(500_000, 101));
            let corpus = build(&[d], 250_000);
            let (store, _) = rt.block_on(store(&corpus));
            Fixture { rt, corpus, store }
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]
        #[test]
        fn any_range_equals_the_slice(a in 0u64..1_200_000, len in 1u64..400_000, seg in 50_000u64..600_000) {
            let f = fixture();
            let file = &f.corpus.files[0];
            let n = file.data.len() as u64;
            let start = a.min(n - 1);
            let end = (start + len - 1).min(n + 10);
            let dir = tempfile::tempdir().unwrap();
            let p = dir.path().join("r");
            let o = DownloadOptions { segment_bytes: seg, ..opts() };
            let rq = req(file, &p).with_range(FileRange::new(start, Some(end)));
            f.rt.block_on(get(f.store.clone(), vec![rq], o)).unwrap();
            let got = std::fs::read(&p).unwrap();
            prop_assert_eq!(&got[..], &file.data[start as usize..(end + 1).min(n) as usize]);
        }
    }
}

/// The serialized bytes of every xorb range the reconstruction of `f` asks for.
async fn serialized_len(cas: &dyn Cas, f: &TestFile) -> u64 {
    let r = cas.reconstruction(&f.hash, None).await.unwrap();
    r.fetches.iter().map(|x| x.bytes.len()).sum()
}

#[tokio::test]
async fn ranges_streamed_in_any_pieces_download_identically() {
    let c = corpus();
    let (store, _) = store(&c).await;
    for piece in [1 << 20, 65_536, 4_093, 7] {
        let w = Wrapper::new(store.clone());
        w.stream_in(piece, None);
        let dir = tempfile::tempdir().unwrap();
        // A tiny piece size on the small files only, to keep the test quick.
        let files: Vec<&TestFile> = c
            .files
            .iter()
            .filter(|f| piece > 100 || f.data.len() < 10_000)
            .collect();
        let reqs = files
            .iter()
            .enumerate()
            .map(|(i, f)| req(f, &dir.path().join(format!("f{i}"))))
            .collect();
        let report = get(w.clone(), reqs, opts()).await.unwrap();
        for (i, f) in files.iter().enumerate() {
            assert_eq!(
                std::fs::read(dir.path().join(format!("f{i}"))).unwrap(),
                f.data,
                "piece {piece}, file {i}"
            );
            let checked = if f.data.is_empty() {
                Verification::Empty
            } else {
                Verification::FileHash
            };
            assert_eq!(report.files[i].verification, checked);
        }
        if piece > 100 {
            assert!(!w.streamed_ranges.lock().unwrap().is_empty());
            // Byte ranges cutting terms and chunks, with the pieces cutting them too.
            let a = &c.files[0];
            for (start, end) in [(1u64, 7_000u64), (250_001, 900_000), (1_499_000, 1_499_999)] {
                let p = dir.path().join(format!("r{start}"));
                let rq = req(a, &p).with_range(FileRange::new(start, Some(end)));
                get(w.clone(), vec![rq], opts()).await.unwrap();
                let got = std::fs::read(&p).unwrap();
                assert!(
                    got == a.data[start as usize..=end as usize],
                    "piece {piece}, range {start}-{end}"
                );
            }
        }
    }
}

/// A stream broken mid-range twice: each retry asks only for the rest, the file is
/// identical, and no byte is fetched twice.
#[tokio::test]
async fn a_broken_stream_resumes_where_it_broke() {
    let c = build(&[random(900_000, 71)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.stream_in(10_000, Some((MidStream::Break, 250_000, 2)));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        max_retries: 2,
        ..opts()
    };
    let report = get(w.clone(), vec![req(&c.files[0], &p)], o).await.unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    let asked = w.streamed_ranges.lock().unwrap().clone();
    assert_eq!(asked.len(), 3, "{asked:?}");
    let (first, total) = (asked[0].1, asked[0].1.len());
    assert!(total > 500_000, "{asked:?}");
    assert_eq!(
        asked[1].1,
        xet_cas::ByteRange::new(first.start + 250_000, first.end)
    );
    assert_eq!(
        asked[2].1,
        xet_cas::ByteRange::new(first.start + 500_000, first.end)
    );
    assert_eq!(
        report.totals.bytes_fetched,
        serialized_len(&*w, &c.files[0]).await
    );
    assert_eq!(report.totals.fetches, 1);
}

/// A stream that stops delivering mid-range is cut at the stall limit and the rest
/// is fetched; one that keeps breaking fails after the retries, naming the file.
#[tokio::test]
async fn a_stream_stalled_mid_range_is_cut_and_resumed() {
    let c = build(&[random(700_000, 72)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.stream_in(8_192, Some((MidStream::Stall, 300_000, 1)));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let o = DownloadOptions {
        stall_timeout: Duration::from_millis(300),
        min_throughput: 0,
        max_retries: 1,
        ..opts()
    };
    tokio::time::timeout(
        Duration::from_secs(10),
        get(w.clone(), vec![req(&c.files[0], &p)], o.clone()),
    )
    .await
    .expect("the download must not hang")
    .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    let asked = w.streamed_ranges.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[1].1.start, asked[0].1.start + 300_000);

    // Breaking on every attempt: a network error after max_retries + 1 attempts, and
    // the part and journal stay (nothing journaled: no term was complete).
    w.stream_in(8_192, Some((MidStream::Break, 100_000, 100)));
    w.streamed_ranges.lock().unwrap().clear();
    let q = dir.path().join("g");
    let e = get(w.clone(), vec![req(&c.files[0], &q)], o)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Network, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&c.files[0].hash.to_string()) && msg.contains("2 attempt"),
        "{msg}"
    );
    assert_eq!(w.streamed_ranges.lock().unwrap().len(), 2);
    assert!(!q.exists());
}

/// A URL that expires mid-range: the reconstruction is queried again and the rest
/// comes from the fresh URL.
#[tokio::test]
async fn a_url_expiring_mid_range_goes_on_with_a_fresh_one() {
    let c = build(&[random(600_000, 73)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.stream_in(16_384, Some((MidStream::Expire, 200_000, 1)));
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let before = w.reconstructions.load(Ordering::SeqCst);
    get(w.clone(), vec![req(&c.files[0], &p)], opts())
        .await
        .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    assert_eq!(w.reconstructions.load(Ordering::SeqCst) - before, 2);
    let asked = w.streamed_ranges.lock().unwrap().clone();
    assert_eq!(asked.len(), 2, "{asked:?}");
    assert_eq!(asked[1].1.start, asked[0].1.start + 200_000);
}

/// One fetch serving several terms of a file, across several write batches: a file
/// made of the first half of another and then its last three quarters, so the two
/// overlapping terms are served by one fetch, the second starting 5 MiB into it.
#[tokio::test]
async fn a_fetch_serving_several_terms_across_write_batches() {
    let x = random(20 << 20, 81);
    let mut y = x[..10 << 20].to_vec();
    y.extend_from_slice(&x[5 << 20..]);
    let c = build(&[x, y], 1 << 26);
    assert_eq!(c.xorbs.len(), 1);
    let (store, _) = store(&c).await;
    let f = &c.files[1];
    let terms = f.term_bounds.len() as u64 + 1;
    for piece in [None, Some(65_536)] {
        let w = Wrapper::new(store.clone());
        if let Some(p) = piece {
            w.stream_in(p, None);
        }
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("y");
        let report = get(w.clone(), vec![req(f, &p)], opts()).await.unwrap();
        assert!(std::fs::read(&p).unwrap() == f.data, "pieces {piece:?}");
        assert_eq!(report.files[0].verification, Verification::FileHash);
        assert!(
            w.fetches() < terms,
            "a fetch serves several of the {terms} terms"
        );
    }
}

/// A range asked for in parts whose streams break: each part is resumed on its own for
/// the bytes it has not delivered, the file is identical, and no byte is fetched twice.
/// (A small file first: ranges are asked for whole until one has arrived in pieces.)
#[tokio::test]
async fn parts_of_a_large_range_resume_where_they_broke() {
    let files = [random(2_000_000, 81), random(30_000_000, 82)];
    let c = build(&files, 64 << 20);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    // Four streams break after 3 MiB each: the small file's (its only stream, which the
    // retry finishes) and the first parts of the large one.
    w.stream_in(64 << 10, Some((MidStream::Break, 3 << 20, 4)));
    let dir = tempfile::tempdir().unwrap();
    let reqs = vec![
        req(&c.files[0], &dir.path().join("a")),
        req(&c.files[1], &dir.path().join("b")),
    ];
    let o = DownloadOptions {
        max_concurrent_files: 1,
        ..opts()
    };
    let report = get(w.clone(), reqs, o).await.unwrap();
    assert!(std::fs::read(dir.path().join("a")).unwrap() == files[0]);
    assert!(std::fs::read(dir.path().join("b")).unwrap() == files[1]);
    let large = serialized_len(&*w, &c.files[1]).await;
    assert_eq!(report.files[1].bytes_fetched, large);
    // The large file's requests: its parts (at most 8 MiB, tiling its range) and, for
    // each break, the rest of the part from where it broke (3 MiB further on).
    let asked = w.streamed_ranges.lock().unwrap().clone();
    let small_end = asked[0].1.end;
    let mut seen: Vec<xet_cas::ByteRange> = Vec::new();
    let (mut parts, mut rests) = (Vec::new(), 0);
    for (_, r) in asked.iter().filter(|(_, r)| r.start >= small_end) {
        match seen.iter().rev().find(|p| p.end == r.end) {
            Some(p) => {
                assert_eq!(r.start, p.start + (3 << 20), "{asked:?}");
                rests += 1;
            }
            None => parts.push(*r),
        }
        seen.push(*r);
    }
    // The small file's stream took one of the four breaks (it is shorter than 3 MiB).
    assert_eq!(rests, 3, "{asked:?}");
    parts.sort_by_key(|r| r.start);
    assert_eq!(parts.len() as u64, large.div_ceil(8 << 20), "{asked:?}");
    assert!(parts.iter().all(|r| r.len() <= 8 << 20), "{asked:?}");
    assert_eq!(parts[0].start, small_end);
    assert_eq!(parts.last().unwrap().end, small_end + large);
    assert!(
        parts.windows(2).all(|w| w[0].end == w[1].start),
        "{asked:?}"
    );
}

/// A range has no file hash to be checked against; with `chunk_hashes` every chunk is
/// checked against its xorb's footer, fetched or read from the cache, so a flipped
/// payload byte that decodes fine is caught (and without it, is not).
#[tokio::test]
async fn a_range_is_checked_against_its_xorbs_chunk_hashes() {
    let c = build(&[random(1_000_000, 12)], 1 << 26);
    let (store, backend) = store(&c).await;
    let x = &c.xorbs[0];
    let f = &c.files[0];
    let (victim, next) = (x.info().chunks[5], x.info().chunks[6]);
    let in_victim = victim.unpacked_offset + 10;
    let range = FileRange::new(in_victim - 5_000, Some(next.unpacked_offset + 20_000));
    let dir = tempfile::tempdir().unwrap();
    let checked = |cache: Option<&Path>| DownloadOptions {
        chunk_hashes: Some(Arc::new(ChunkHashes::default())),
        cache: cache.map(CacheConfig::new),
        ..opts()
    };
    let p = dir.path().join("good");
    let rep = get(
        store.clone(),
        vec![req(f, &p).with_range(range)],
        checked(None),
    )
    .await
    .unwrap();
    assert_eq!(rep.files[0].verification, Verification::ChunkHashes);
    let (a, b) = (range.start as usize, range.end.unwrap() as usize + 1);
    assert_eq!(std::fs::read(&p).unwrap(), f.data[a..b]);

    corrupt(&backend, &x.hash(), (victim.offset + 8 + 100) as usize).await;
    // Unchecked, the damage goes through: only the file hash would catch it.
    let cache = tempfile::tempdir().unwrap();
    let p = dir.path().join("unchecked");
    let o = DownloadOptions {
        cache: Some(CacheConfig::new(cache.path())),
        ..opts()
    };
    let rep = get(store.clone(), vec![req(f, &p).with_range(range)], o)
        .await
        .unwrap();
    assert_eq!(rep.files[0].verification, Verification::TermLengths);
    assert_ne!(std::fs::read(&p).unwrap(), f.data[a..b]);
    // Checked, from the network and then from the cache the unchecked run filled.
    for (name, cache) in [("fetched", None), ("cached", Some(cache.path()))] {
        let p = dir.path().join(name);
        let e = get(
            store.clone(),
            vec![req(f, &p).with_range(range)],
            checked(cache),
        )
        .await
        .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Verification, "{name}: {e}");
        let msg = e.to_string();
        let chunk = format!("chunk 5 of xorb {}", x.hash());
        assert!(
            msg.contains(&chunk) && msg.contains("footer"),
            "{name}: {msg}"
        );
        assert!(!p.exists(), "{name}");
    }
    assert_eq!(
        cache_stats(cache.path()).unwrap().entries,
        0,
        "the bad entry is evicted"
    );
}

/// A CAS that serves no footers leaves ranges checked by decoding (and says so in the
/// report); after three such answers in a row it is not asked again.
#[tokio::test]
async fn a_cas_without_footers_is_asked_three_times_then_no_more() {
    let c = corpus();
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let hashes = Arc::new(ChunkHashes::default());
    for (i, f) in c
        .files
        .iter()
        .enumerate()
        .filter(|(_, f)| f.data.len() > 10)
    {
        let p = dir.path().join(format!("r{i}"));
        let n = f.data.len() as u64;
        let o = DownloadOptions {
            chunk_hashes: Some(hashes.clone()),
            ..opts()
        };
        let rq = req(f, &p).with_range(FileRange::new(1, Some(n - 2)));
        let rep = get(w.clone(), vec![rq], o).await.unwrap();
        assert_eq!(rep.files[0].verification, Verification::TermLengths);
        assert_eq!(std::fs::read(&p).unwrap(), f.data[1..n as usize - 1]);
    }
    assert!(
        w.attempts.load(Ordering::SeqCst) > 3,
        "more fetches than asks"
    );
    assert_eq!(w.footers_asked.load(Ordering::SeqCst), 3);
}
