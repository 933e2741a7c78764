//! The upload pipeline against the real in-memory store.

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Counting, memory_store, reassemble, write_golden};
use xet_cas::Cas;
use xet_hash::MerkleHash;
use xet_upload::{NoProgress, UploadError, UploadOptions, UploadReport, upload};

async fn run(cas: Arc<dyn Cas>, files: &[PathBuf], opts: &UploadOptions) -> UploadReport {
    upload(cas, files, opts, Arc::new(NoProgress))
        .await
        .expect("upload")
}

fn with_cache(dir: &std::path::Path) -> UploadOptions {
    UploadOptions {
        cache_dir: Some(dir.to_path_buf()),
        ..Default::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_matches_golden_hashes_and_reassembles() {
    let d = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let store = memory_store().await;
    let cas = Counting::new(store.clone());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let report = run(cas.clone(), &paths, &UploadOptions::default()).await;

    assert_eq!(report.files.len(), golden.len());
    for (f, (p, bytes, g)) in report.files.iter().zip(&golden) {
        assert_eq!(&f.path, p);
        assert_eq!(f.hash.to_string(), g.hash, "{}", g.name);
        assert_eq!(f.size, g.size, "{}", g.name);
        if g.size == 0 {
            // The reference records zeros for the empty file; the report gives the digest.
            assert_eq!(
                f.sha256,
                "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
            );
        } else {
            assert_eq!(f.sha256, g.sha256, "{}", g.name);
        }
        let back = reassemble(store.as_ref(), &f.hash).await;
        assert!(back == *bytes, "{} reassembles", g.name);
        if f.size > 0 {
            assert_eq!(store.file_size(&f.hash).await.unwrap(), Some(f.size));
        }
    }
    let t = &report.totals;
    assert_eq!(
        t.bytes,
        golden.iter().map(|g| g.1.len() as u64).sum::<u64>()
    );
    assert_eq!(t.bytes, t.new_bytes + t.deduped_bytes);
    assert!(t.deduped_bytes > 0, "zeros and the insertion pair dedup");
    assert_eq!(t.xorbs_sent, cas.xorbs());
    assert_eq!(t.shards_sent, 1);
    assert_eq!(cas.shard_count(), 1);
    // About 13 MiB new: the first xorb ends at the first file start past 4 MiB, the rest
    // fits the second (8 MiB, or more inside a file).
    assert_eq!(t.xorbs_new, 2);
    let json = serde_json::to_value(&report).unwrap();
    assert_eq!(json["files"][0]["hash"].as_str().unwrap().len(), 64);
}

/// A CAS that takes xorb bodies in pieces (as the HTTP client does) gets the same xorbs,
/// byte for byte, as one that takes them whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_in_pieces_equal_whole_bodies() {
    let d = tempfile::tempdir().unwrap();
    let mut golden = write_golden(d.path());
    // A file large enough to be mapped, so stored chunks are slices of the map.
    let big = xet_testdata::generate(xet_testdata::Kind::Random, 3 << 20, 11);
    let p = d.path().join("big");
    std::fs::write(&p, &big).unwrap();
    golden.push((p, big, golden[0].2.clone()));
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let (whole, pieces) = (memory_store().await, memory_store().await);
    let a = Counting::new(whole.clone());
    let b = Counting::new(pieces.clone());
    b.takes_pieces
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let ra = run(a.clone(), &paths, &UploadOptions::default()).await;
    let rb = run(b.clone(), &paths, &UploadOptions::default()).await;
    assert_eq!(a.max_pieces.load(std::sync::atomic::Ordering::SeqCst), 1);
    assert!(b.max_pieces.load(std::sync::atomic::Ordering::SeqCst) > 2);
    assert_eq!(a.xorbs(), b.xorbs());
    for ((fa, fb), (_, bytes, _)) in ra.files.iter().zip(&rb.files).zip(&golden) {
        assert_eq!(fa.hash, fb.hash);
        assert!(reassemble(pieces.as_ref(), &fb.hash).await == *bytes);
    }
    // Same xorbs, chunk offsets and files registered.
    assert_eq!(*a.shards.lock().unwrap(), *b.shards.lock().unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn uploaded_shard_has_the_reference_layout() {
    let d = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let store = memory_store().await;
    let cas = Counting::new(store.clone());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let report = run(cas.clone(), &paths, &UploadOptions::default()).await;
    let bytes = cas.shards.lock().unwrap()[0].clone();
    let shard = xet_shard::Shard::parse(&bytes, &xet_shard::Limits::default()).unwrap();
    assert!(shard.footer.is_none(), "upload form");
    // Files sorted by hash, unique, flags 0xC0000000, sha256 byte-swapped; empty file present.
    let keys: Vec<_> = shard
        .files
        .iter()
        .map(|f| xet_shard::hash_order_key(&f.file_hash))
        .collect();
    assert!(keys.windows(2).all(|w| w[0] < w[1]));
    let mut uniq: Vec<_> = report.files.iter().map(|f| f.hash).collect();
    uniq.sort();
    uniq.dedup();
    assert_eq!(shard.files.len(), uniq.len());
    for f in &shard.files {
        assert_eq!(f.flags, 0xC000_0000);
        let r = report.files.iter().find(|r| r.hash == f.file_hash).unwrap();
        let digest = f.sha256_digest().unwrap();
        let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
        if r.size == 0 {
            assert!(f.terms.is_empty());
            assert_eq!(digest, [0; 32]);
        } else {
            assert_eq!(hex, r.sha256);
        }
        assert_eq!(f.size(), r.size);
    }
    // zeros_1m: one stored chunk, eight single-chunk terms.
    let z = report
        .files
        .iter()
        .find(|r| r.path.ends_with("zeros_1m"))
        .unwrap();
    let zf = shard.find_file(&z.hash).unwrap();
    assert_eq!(zf.terms.len(), 8);
    assert!(
        zf.terms
            .iter()
            .all(|t| t.num_chunks() == 1 && t.chunk_index_start == zf.terms[0].chunk_index_start)
    );
    // Only the new xorbs, chunk flags 0, num_bytes_on_disk 0.
    assert_eq!(shard.cas.len(), report.totals.xorbs_new);
    for c in &shard.cas {
        assert!(c.chunks.iter().all(|c| c.flags == 0));
        assert_eq!(c.num_bytes_on_disk, 0);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn second_upload_sends_no_xorb() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let store = memory_store().await;
    let first = run(
        Counting::new(store.clone()),
        &paths,
        &with_cache(cache.path()),
    )
    .await;
    assert!(first.totals.xorbs_sent >= 1);

    // Same cache: the local shard cache knows every chunk; no global dedup query either.
    let cas = Counting::new(store.clone());
    let again = run(cas.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(cas.xorbs(), 0);
    assert_eq!(again.totals.xorbs_sent, 0);
    assert_eq!(again.totals.new_bytes, 0);
    assert_eq!(
        cas.dedup_queries.load(std::sync::atomic::Ordering::SeqCst),
        0
    );
    assert_eq!(cas.shard_count(), 1);
    let h = |r: &UploadReport| r.files.iter().map(|f| f.hash).collect::<Vec<_>>();
    assert_eq!(h(&first), h(&again));

    // No local cache: global dedup (keyed answers from the store) finds everything.
    let cas = Counting::new(store.clone());
    let fresh = run(cas.clone(), &paths, &UploadOptions::default()).await;
    assert_eq!(cas.xorbs(), 0, "global dedup alone");
    assert_eq!(fresh.totals.new_bytes, 0);
    assert!(fresh.totals.dedup_answers >= 1);
    assert_eq!(h(&first), h(&fresh));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insertion_sends_only_the_new_chunks() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let find = |n: &str| golden.iter().find(|g| g.2.name == n).unwrap();
    let (base, edited) = (find("insert_base_3m"), find("insert_edited_3m"));
    let store = memory_store().await;
    run(
        Counting::new(store.clone()),
        std::slice::from_ref(&base.0),
        &with_cache(cache.path()),
    )
    .await;

    let cas = Counting::new(store.clone());
    let r = run(
        cas.clone(),
        std::slice::from_ref(&edited.0),
        &with_cache(cache.path()),
    )
    .await;
    assert_eq!(r.files[0].hash.to_string(), edited.2.hash);
    assert_eq!(cas.xorbs(), 1);
    // The insertion touches at most a few chunks (a chunk is 8..128 KiB).
    assert!(
        r.totals.new_chunks <= 3,
        "{} new chunks",
        r.totals.new_chunks
    );
    assert!(
        r.totals.new_bytes < 400_000,
        "{} new bytes",
        r.totals.new_bytes
    );
    assert_eq!(reassemble(store.as_ref(), &r.files[0].hash).await, edited.1);
    // Prefix, new part, suffix.
    assert!(r.files[0].terms <= 3, "{} terms", r.files[0].terms);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dry_run_predicts_the_real_upload() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let store = memory_store().await;
    // Something already stored, so the prediction includes global dedup.
    let base = golden
        .iter()
        .find(|g| g.2.name == "insert_base_3m")
        .unwrap();
    run(
        Counting::new(store.clone()),
        std::slice::from_ref(&base.0),
        &UploadOptions::default(),
    )
    .await;

    let dry_cas = Counting::new(store.clone());
    let opts = UploadOptions {
        dry_run: true,
        xorb_max_bytes: 1 << 20,
        ..with_cache(cache.path())
    };
    let dry = run(dry_cas.clone(), &paths, &opts).await;
    assert!(dry.dry_run);
    assert_eq!(dry_cas.xorbs(), 0);
    assert_eq!(dry_cas.shard_count(), 0);
    assert_eq!(
        std::fs::read_dir(cache.path()).unwrap().count(),
        0,
        "dry run writes nothing"
    );

    let real_cas = Counting::new(store.clone());
    let real = run(
        real_cas.clone(),
        &paths,
        &UploadOptions {
            dry_run: false,
            ..opts
        },
    )
    .await;
    let (a, b) = (&dry.totals, &real.totals);
    assert!(a.xorbs_sent > 1);
    assert_eq!(a.new_bytes, b.new_bytes);
    assert!(a.deduped_bytes >= 3 << 20, "the stored base file is found");
    assert_eq!(a.deduped_bytes, b.deduped_bytes);
    assert_eq!(a.xorbs_sent, b.xorbs_sent);
    assert_eq!(b.xorbs_sent, real_cas.xorbs());
    assert_eq!(a.xorb_bytes_sent, b.xorb_bytes_sent);
    assert_eq!(a.shards_sent, b.shards_sent);
    assert_eq!(a.shard_bytes_sent, b.shard_bytes_sent);
    assert_eq!(dry.files, real.files);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn empty_and_fully_deduplicated_files() {
    let d = tempfile::tempdir().unwrap();
    let empty = d.path().join("empty");
    std::fs::write(&empty, b"").unwrap();
    let store = memory_store().await;

    // Only an empty file: no xorb, a shard listing it.
    let cas = Counting::new(store.clone());
    let r = run(
        cas.clone(),
        std::slice::from_ref(&empty),
        &UploadOptions::default(),
    )
    .await;
    assert_eq!(r.files[0].hash, MerkleHash::ZERO);
    assert_eq!(
        r.files[0].sha256,
        "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
    );
    assert_eq!((cas.xorbs(), cas.shard_count()), (0, 1));
    let shard =
        xet_shard::Shard::parse(&cas.shards.lock().unwrap()[0], &Default::default()).unwrap();
    assert_eq!(shard.files.len(), 1);
    assert!(shard.cas.is_empty());
    assert!(
        reassemble(store.as_ref(), &MerkleHash::ZERO)
            .await
            .is_empty()
    );

    // A file, then a copy of it under another name with the empty file: no xorb.
    let data = xet_testdata::generate(xet_testdata::Kind::Text, 700_000, 3);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::fs::write(&a, &data).unwrap();
    std::fs::write(&b, &data).unwrap();
    let first = run(store.clone(), &[a], &UploadOptions::default()).await;
    let cas = Counting::new(store.clone());
    let r = run(cas.clone(), &[b, empty], &UploadOptions::default()).await;
    assert_eq!(cas.xorbs(), 0);
    assert_eq!(r.totals.new_bytes, 0);
    assert_eq!(r.files[0].hash, first.files[0].hash);
    assert_eq!(r.files[0].deduped_bytes, data.len() as u64);
    assert_eq!(reassemble(store.as_ref(), &r.files[0].hash).await, data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_skips_xorbs_stored_before_a_failure() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let store = memory_store().await;
    // Small xorbs so the corpus makes many; one upload at a time so exactly N are stored.
    let opts = UploadOptions {
        xorb_max_bytes: 512 << 10,
        max_xorbs_in_flight: 1,
        max_xorb_uploads: 1,
        ..with_cache(cache.path())
    };

    let failing = Counting::failing(store.clone(), Some(3));
    let err = upload(failing.clone(), &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap_err();
    assert!(
        matches!(err, UploadError::Cas(xet_cas::CasError::Network { .. })),
        "{err}"
    );
    assert_eq!(failing.shard_count(), 0);
    let journal = std::fs::read_to_string(cache.path().join("xorb-journal")).unwrap();
    assert_eq!(journal.lines().count(), 3);

    let cas = Counting::new(store.clone());
    let r = run(cas.clone(), &paths, &opts).await;
    assert_eq!(r.totals.xorbs_resumed, 3);
    assert_eq!(r.totals.xorbs_sent + 3, r.totals.xorbs_new);
    assert_eq!(cas.xorbs(), r.totals.xorbs_sent);
    for (f, g) in r.files.iter().zip(&golden) {
        assert_eq!(f.hash.to_string(), g.2.hash);
        assert!(reassemble(store.as_ref(), &f.hash).await == g.1);
    }
    // The journal is tidied once the shard is registered.
    assert!(!cache.path().join("xorb-journal").exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn many_xorbs_and_split_shards() {
    let d = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let store = memory_store().await;
    let cas = Counting::new(store.clone());
    let opts = UploadOptions {
        xorb_max_chunks: 7,
        shard_max_bytes: 8 << 10,
        block_size: 64 << 10,
        max_files_in_flight: 3,
        ..Default::default()
    };
    let r = run(cas.clone(), &paths, &opts).await;
    assert!(r.totals.xorbs_sent > 20);
    assert!(r.totals.shards_sent > 1);
    assert!(
        cas.shards
            .lock()
            .unwrap()
            .iter()
            .all(|s| s.len() <= 8 << 10)
    );
    for (f, g) in r.files.iter().zip(&golden) {
        assert_eq!(f.hash.to_string(), g.2.hash);
        assert!(
            reassemble(store.as_ref(), &f.hash).await == g.1,
            "{}",
            g.2.name
        );
    }
}

/// With the default options a large file goes out as several xorbs of at most 16 MiB
/// (`DEFAULT_XORB_MAX_BYTES`), not one 64 MiB xorb: on a long link one xorb is one
/// connection's worth of throughput.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn default_xorbs_hold_at_most_16_mib() {
    let d = tempfile::tempdir().unwrap();
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 40 << 20, 2026);
    let path = d.path().join("big.bin");
    std::fs::write(&path, &data).unwrap();
    let store = memory_store().await;
    let cas = Counting::new(store.clone());
    let r = run(cas.clone(), &[path], &UploadOptions::default()).await;
    let rec = store.reconstruction(&r.files[0].hash, None).await.unwrap();
    let mut per_xorb = std::collections::HashMap::<MerkleHash, u64>::new();
    for t in &rec.terms {
        *per_xorb.entry(t.xorb).or_default() += t.unpacked_length;
    }
    assert_eq!(xet_upload::DEFAULT_XORB_MAX_BYTES, 16 << 20);
    assert_eq!((cas.xorbs(), per_xorb.len()), (3, 3), "40 MiB: 16 + 16 + 8");
    assert!(per_xorb.values().all(|&b| b <= 16 << 20), "{per_xorb:?}");
    assert!(reassemble(store.as_ref(), &r.files[0].hash).await == data);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn errors_name_the_input_and_cancel_interrupts() {
    let d = tempfile::tempdir().unwrap();
    let store = memory_store().await;
    let missing = d.path().join("missing");
    match upload(
        store.clone(),
        std::slice::from_ref(&missing),
        &UploadOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    {
        Err(UploadError::Input { path, .. }) => assert_eq!(path, missing),
        other => panic!("{other:?}"),
    }
    match upload(
        store.clone(),
        &[d.path().to_path_buf()],
        &UploadOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    {
        Err(UploadError::Input { path, .. }) => assert_eq!(path, d.path()),
        other => panic!("{other:?}"),
    }
    let f = d.path().join("f");
    std::fs::write(&f, vec![1u8; 3 << 20]).unwrap();
    let token = xet_upload::CancellationToken::new();
    token.cancel();
    let opts = UploadOptions {
        cancel: Some(token),
        ..Default::default()
    };
    let err = upload(store.clone(), &[f], &opts, Arc::new(NoProgress))
        .await
        .unwrap_err();
    assert!(matches!(err, UploadError::Interrupted), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn progress_reports_every_byte() {
    use std::sync::atomic::{AtomicU64, Ordering};
    #[derive(Default)]
    struct P {
        total: AtomicU64,
        processed: AtomicU64,
        uploaded: AtomicU64,
        files: AtomicU64,
    }
    impl xet_upload::Progress for P {
        fn start(&self, _files: usize, total: u64) {
            self.total.store(total, Ordering::SeqCst);
        }
        fn processed(&self, n: u64) {
            self.processed.fetch_add(n, Ordering::SeqCst);
        }
        fn uploaded(&self, n: u64) {
            self.uploaded.fetch_add(n, Ordering::SeqCst);
        }
        fn file_done(&self, _f: &xet_upload::FileReport) {
            self.files.fetch_add(1, Ordering::SeqCst);
        }
    }
    let d = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let p = Arc::new(P::default());
    let r = upload(
        memory_store().await,
        &paths,
        &UploadOptions::default(),
        p.clone(),
    )
    .await
    .unwrap();
    assert_eq!(p.total.load(Ordering::SeqCst), r.totals.bytes);
    assert_eq!(p.processed.load(Ordering::SeqCst), r.totals.bytes);
    assert_eq!(
        p.uploaded.load(Ordering::SeqCst),
        r.totals.xorb_bytes_sent + r.totals.shard_bytes_sent
    );
    assert_eq!(p.files.load(Ordering::SeqCst), golden.len() as u64);
}

#[tokio::test(flavor = "current_thread")]
async fn works_on_a_current_thread_runtime() {
    let d = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let store = memory_store().await;
    let cache = tempfile::tempdir().unwrap();
    let opts = UploadOptions {
        xorb_max_chunks: 50,
        ..with_cache(cache.path())
    };
    let r = run(store.clone(), &paths, &opts).await;
    assert!(r.totals.xorbs_sent > 3);
    for (f, g) in r.files.iter().zip(&golden) {
        assert_eq!(f.hash.to_string(), g.2.hash);
    }
    let again = run(store, &paths, &opts).await;
    assert_eq!(again.totals.xorbs_sent, 0);
}

/// `rehash` does not take a record's word for a file's content: a record whose hash is
/// not the file's (as after an edit that kept the file's size and times) is caught by
/// hashing the file again, and the file is uploaded with its real hash and sha256.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rehash_uploads_a_file_whose_record_does_not_match_its_content() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let a = d.path().join("a");
    let b = d.path().join("b");
    let data_a = xet_testdata::generate(xet_testdata::Kind::Random, 3_000_000, 31);
    // Same size, so the CAS confirms either record at that size.
    let data_b = xet_testdata::generate(xet_testdata::Kind::Text, 3_000_000, 32);
    std::fs::write(&a, &data_a).unwrap();
    std::fs::write(&b, &data_b).unwrap();
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let paths = vec![a.clone(), b.clone()];
    let store = memory_store().await;
    let first = run(store.clone(), &paths, &with_cache(cache.path())).await;

    // Swap the recorded hashes: each record now names the other file's content.
    let record = cache.path().join("unchanged-files.json");
    let text = std::fs::read_to_string(&record).unwrap();
    let (ha, hb) = (
        first.files[0].hash.to_string(),
        first.files[1].hash.to_string(),
    );
    let swapped = text
        .replace(&ha, "@A@")
        .replace(&hb, &ha)
        .replace("@A@", &hb);
    assert_ne!(swapped, text);
    std::fs::write(&record, swapped).unwrap();

    // Trusted as recorded without --rehash (that is what the record is for)...
    let trusting = run(store.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(trusting.totals.files_unchanged, 2);
    assert_eq!(trusting.files[0].hash, first.files[1].hash);

    // ... and caught with it.
    let opts = UploadOptions {
        rehash: true,
        ..with_cache(cache.path())
    };
    let ids = |r: &UploadReport| {
        r.files
            .iter()
            .map(|f| (f.hash, f.size, f.sha256.clone()))
            .collect::<Vec<_>>()
    };
    let checked = run(store.clone(), &paths, &opts).await;
    assert_eq!(checked.totals.files_verified, 0);
    assert_eq!(checked.totals.files_unchanged, 0);
    assert_eq!(ids(&checked), ids(&first), "real hashes, sizes and sha256");
    // The records are right again.
    let after = run(store.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(after.totals.files_unchanged, 2);
    assert_eq!(ids(&after), ids(&first));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_files_are_not_read_again() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let sizes = |r: &UploadReport| {
        r.files
            .iter()
            .map(|f| (f.hash, f.size, f.sha256.clone(), f.terms))
            .collect::<Vec<_>>()
    };
    let store = memory_store().await;

    // Uploaded right after being written: inside the racy window, so recorded but a
    // re-upload within it would still read them. Let the files settle first.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let first = run(store.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(first.totals.files_unchanged, 0);

    let cas = Counting::new(store.clone());
    let again = run(cas.clone(), &paths, &with_cache(cache.path())).await;
    let nonempty = golden.iter().filter(|g| !g.1.is_empty()).count();
    assert_eq!(
        again.totals.files_unchanged, nonempty,
        "every non-empty file skipped"
    );
    assert_eq!(again.totals.chunks, 0, "nothing was chunked");
    assert_eq!(
        sizes(&first),
        sizes(&again),
        "same hashes, sizes, sha256 and terms, in input order"
    );
    assert_eq!(again.totals.bytes, first.totals.bytes);
    assert_eq!(again.totals.new_bytes, 0);
    assert_eq!(cas.xorbs(), 0);

    // A changed file is read again (and only it); the rest stay skipped.
    let changed = golden.iter().position(|g| g.1.len() > 1000).unwrap();
    let mut data = golden[changed].1.clone();
    data.extend_from_slice(b"one more line");
    std::fs::write(&paths[changed], &data).unwrap();
    let third = run(store.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(third.totals.files_unchanged, nonempty - 1);
    assert_eq!(third.files[changed].hash, xet_chunk::file_hash(&data));
    assert_eq!(
        reassemble(store.as_ref(), &third.files[changed].hash).await,
        data
    );

    // --rehash reads everything.
    let opts = UploadOptions {
        rehash: true,
        ..with_cache(cache.path())
    };
    let fourth = run(store.clone(), &paths, &opts).await;
    assert_eq!(fourth.totals.files_unchanged, 0);
    assert_eq!(
        fourth.totals.files_verified,
        nonempty - 1,
        "recorded files re-read and found the same (the edited one is too recent to be trusted)"
    );
    assert_eq!(sizes(&fourth), sizes(&third));
    // What --rehash read is recorded too.
    let fifth = run(store.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(
        fifth.totals.files_unchanged,
        nonempty - 1,
        "the edited file is too recent"
    );
}

/// A CAS that no longer holds what the local shard cache says it does (a store deleted
/// and created anew, or emptied by its operator): the upload still succeeds, sending
/// what the CAS lacks, and the stale shards leave the cache.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cas_that_lost_cached_xorbs_gets_them_again() {
    let d = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let first = run(
        Counting::new(memory_store().await),
        &paths,
        &with_cache(cache.path()),
    )
    .await;
    assert!(first.totals.xorbs_sent >= 1);

    // A new, empty store behind the same cache directory.
    let store = memory_store().await;
    let cas = Counting::new(store.clone());
    let again = run(cas.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(
        cas.xorbs(),
        first.totals.xorbs_sent as usize,
        "every xorb sent again"
    );
    for (f, (_, bytes, _)) in again.files.iter().zip(&golden) {
        assert!(reassemble(store.as_ref(), &f.hash).await == *bytes);
    }
    let h = |r: &UploadReport| r.files.iter().map(|f| f.hash).collect::<Vec<_>>();
    assert_eq!(h(&first), h(&again));

    // The cache now describes the new store: a third upload sends nothing.
    let cas = Counting::new(store.clone());
    let third = run(cas.clone(), &paths, &with_cache(cache.path())).await;
    assert_eq!(cas.xorbs(), 0);
    assert_eq!(third.totals.new_bytes, 0);
}

/// Small files are read in groups (by count and by bytes) between larger files: every
/// file still gets its own hash, size and sha256, in input order, and reassembles.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn small_files_read_in_groups_keep_their_order_and_content() {
    use sha2::Digest;
    let d = tempfile::tempdir().unwrap();
    let mut sizes: Vec<usize> = Vec::new();
    // More small files in a row than a group holds, with the boundary sizes among them.
    for i in 0..150usize {
        sizes.push([0, 1, 100, 8191, 8192, 8193, 70_000][i % 7]);
    }
    // Small files whose bytes fill several groups, around the small-file limit.
    for i in 0..40usize {
        sizes.push([200_000, 256 << 10, (256 << 10) + 1][i % 3]);
    }
    // Larger files (read, and mapped) between small ones.
    sizes.extend([3 << 20, 5, 1_500_000, 0, 12]);
    let mut paths = Vec::new();
    let mut datas = Vec::new();
    for (i, &n) in sizes.iter().enumerate() {
        let data = xet_testdata::generate(xet_testdata::Kind::Random, n, i as u64);
        let p = d.path().join(format!("f{i:03}"));
        std::fs::write(&p, &data).unwrap();
        paths.push(p);
        datas.push(data);
    }
    let store = memory_store().await;
    let r = run(store.clone(), &paths, &UploadOptions::default()).await;
    assert_eq!(r.files.len(), paths.len());
    for ((f, p), data) in r.files.iter().zip(&paths).zip(&datas) {
        assert_eq!(&f.path, p);
        assert_eq!(f.size, data.len() as u64);
        assert_eq!(f.hash, xet_chunk::file_hash(data), "{}", p.display());
        assert_eq!(f.sha256, hex(&sha2::Sha256::digest(data)));
        if !data.is_empty() {
            assert!(reassemble(store.as_ref(), &f.hash).await == *data);
        }
    }
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
