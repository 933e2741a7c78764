//! The upload pipeline against the filesystem store (the embedded default).

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Counting, reassemble, write_golden};
use xet_cas::Cas;
use xet_upload::{NoProgress, UploadError, UploadOptions, upload};

async fn fs_store(dir: &std::path::Path) -> Arc<dyn Cas> {
    Arc::new(xet_store::open_store(dir).await.expect("open fs store"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corpus_into_the_fs_store() {
    let d = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let opts = UploadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    };

    let store = fs_store(root.path()).await;
    let r = upload(store.clone(), &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap();
    for (f, g) in r.files.iter().zip(&golden) {
        assert_eq!(f.hash.to_string(), g.2.hash, "{}", g.2.name);
    }

    // A new process opening the same directory sees every file.
    drop(store);
    let store = fs_store(root.path()).await;
    for (f, g) in r.files.iter().zip(&golden) {
        assert!(
            reassemble(store.as_ref(), &f.hash).await == g.1,
            "{}",
            g.2.name
        );
    }

    // Again: nothing new to send, with the local cache or with global dedup only.
    for opts in [opts.clone(), UploadOptions::default()] {
        let cas = Counting::new(store.clone());
        let again = upload(cas.clone(), &paths, &opts, Arc::new(NoProgress))
            .await
            .unwrap();
        for f in &again.files {
            if f.new_bytes > 0 {
                eprintln!("{:?} {} new {}", f.path, f.size, f.new_bytes);
            }
        }
        eprintln!("{:?}", again.totals);
        assert_eq!(cas.xorbs(), 0, "cache: {:?}", opts.cache_dir);
        assert_eq!(again.totals.new_bytes, 0);
        assert_eq!(
            again.files,
            r.files
                .iter()
                .map(|f| xet_upload::FileReport {
                    new_bytes: 0,
                    deduped_bytes: f.size,
                    ..f.clone()
                })
                .collect::<Vec<_>>()
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_against_the_fs_store() {
    let d = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let opts = UploadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        xorb_max_bytes: 1 << 20,
        max_xorbs_in_flight: 1,
        // One upload at a time: exactly the five before the failure are stored.
        max_xorb_uploads: 1,
        ..Default::default()
    };
    let store = fs_store(root.path()).await;
    let failing = Counting::failing(store.clone(), Some(5));
    let err = upload(failing, &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap_err();
    assert!(matches!(err, UploadError::Cas(_)), "{err}");

    let store = fs_store(root.path()).await;
    let cas = Counting::new(store.clone());
    let r = upload(cas.clone(), &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap();
    assert_eq!(r.totals.xorbs_resumed, 5);
    assert_eq!(cas.xorbs(), r.totals.xorbs_new - 5);
    for (f, g) in r.files.iter().zip(&golden) {
        assert_eq!(f.hash.to_string(), g.2.hash);
        assert!(reassemble(store.as_ref(), &f.hash).await == g.1);
    }
}

/// A file recorded as unchanged is only skipped while the CAS still has it: a store that
/// lost its shards (the file registrations) gets the files read and registered again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unchanged_files_are_confirmed_with_the_store() {
    let d = tempfile::tempdir().unwrap();
    let root = tempfile::tempdir().unwrap();
    let cache = tempfile::tempdir().unwrap();
    let golden = write_golden(d.path());
    let paths: Vec<PathBuf> = golden.iter().map(|g| g.0.clone()).collect();
    let opts = UploadOptions {
        cache_dir: Some(cache.path().to_path_buf()),
        ..Default::default()
    };
    // Outside the racy window, so the identities recorded now are trusted later.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let store = fs_store(root.path()).await;
    let first = upload(store.clone(), &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap();
    let again = upload(store.clone(), &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap();
    assert!(again.totals.files_unchanged > 0);
    drop(store);

    std::fs::remove_dir_all(root.path().join("shards")).unwrap();
    let store = fs_store(root.path()).await;
    let third = upload(store.clone(), &paths, &opts, Arc::new(NoProgress))
        .await
        .unwrap();
    assert_eq!(
        third.totals.files_unchanged, 0,
        "nothing trusted the store lost"
    );
    assert!(third.totals.shards_sent >= 1);
    for (f, want) in third.files.iter().zip(&first.files) {
        assert_eq!(f.hash, want.hash);
        assert_eq!(
            reassemble(store.as_ref(), &f.hash).await,
            std::fs::read(&f.path).unwrap()
        );
    }
}
