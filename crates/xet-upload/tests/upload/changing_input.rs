//! Inputs that change while they are uploaded: a file truncated or rewritten in place
//! during the upload is refused with an input error naming it, nothing registers it, and
//! the upload never crashes (a truncated memory-mapped input used to kill the client
//! with SIGBUS) or blames the CAS (a rewritten one used to end in a rejected xorb).
//!
//! The change is made from the progress hook when the dedup stage reports its first
//! block: the file is open, its first blocks are hashed, and its reader (bounded by the
//! pipeline's queues to a few blocks ahead) is far from its end. So the change always
//! lands in the middle of the read.

use crate::common;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use common::Counting;
use xet_store::MemoryStore;
use xet_upload::{InputChanged, Progress, UploadError, UploadOptions, upload};

/// 256 blocks of the smallest block size: the reader stays a few blocks ahead of the
/// dedup stage, so it has read a small fraction when the change is made.
const FILE_LEN: usize = 16 << 20;
const BLOCK: usize = 64 << 10;

/// Runs `change` on the file once, on the first progress report.
struct ChangeOnFirstBlock {
    path: PathBuf,
    change: fn(&Path),
    done: AtomicBool,
}

impl Progress for ChangeOnFirstBlock {
    fn processed(&self, _bytes: u64) {
        if !self.done.swap(true, Ordering::SeqCst) {
            (self.change)(&self.path);
        }
    }
}

/// A random file whose modification time is an hour ago, so that any write to it
/// during the test gives it a different one, whatever the timestamp granularity.
fn input(dir: &Path) -> (PathBuf, Vec<u8>) {
    let path = dir.join("input.bin");
    let data = xet_testdata::generate(xet_testdata::Kind::Random, FILE_LEN, 24);
    std::fs::write(&path, &data).unwrap();
    let f = std::fs::File::options().write(true).open(&path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
    (path, data)
}

fn truncate(path: &Path) {
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_len(1 << 20).unwrap();
}

/// Rewrite the first 4 MiB in place: same size, other bytes, including the chunks
/// already hashed.
fn overwrite(path: &Path) {
    use std::io::Write;
    let other = xet_testdata::generate(xet_testdata::Kind::Random, 4 << 20, 25);
    let mut f = std::fs::File::options().write(true).open(path).unwrap();
    f.write_all(&other).unwrap();
}

/// Upload the input while `change` is applied to it; check the outcome and return the
/// error's message.
async fn upload_while(change: fn(&Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = input(dir.path());
    let store = Arc::new(MemoryStore::in_memory().await.unwrap());
    let cas = Counting::new(store.clone());
    let progress = Arc::new(ChangeOnFirstBlock {
        path: path.clone(),
        change,
        done: AtomicBool::new(false),
    });
    // Small xorbs, so some are sealed and sent while the file is still being read.
    let opts = UploadOptions {
        block_size: BLOCK,
        xorb_max_bytes: 1 << 20,
        global_dedup: false,
        ..Default::default()
    };
    let res = upload(
        cas.clone(),
        std::slice::from_ref(&path),
        &opts,
        progress.clone(),
    )
    .await;
    assert!(
        progress.done.load(Ordering::SeqCst),
        "the file was never changed"
    );

    let err = match res {
        Ok(r) => panic!("the changed file was uploaded: {:?}", r.files),
        Err(e) => e,
    };
    let UploadError::Input { path: named, cause } = &err else {
        panic!("expected an input error naming the file, got {err:?}");
    };
    assert_eq!(named, &path);
    assert!(
        cause
            .get_ref()
            .is_some_and(|c| c.downcast_ref::<InputChanged>().is_some()),
        "the cause is not InputChanged: {cause:?}"
    );
    // Nothing registers the file, in any version: no shard was sent.
    assert_eq!(cas.shard_count(), 0);
    assert_eq!(store.stats().files, 0);
    let original = xet_chunk::file_hash(&data);
    assert_eq!(
        xet_cas::Cas::file_size(store.as_ref(), &original)
            .await
            .map_err(|e| xet_cas::error_chain(&e)),
        Ok(None)
    );
    err.to_string()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_truncated_while_it_is_uploaded_is_refused() {
    let msg = upload_while(truncate).await;
    assert!(msg.contains("input.bin: changed during upload"), "{msg}");
    assert!(
        msg.contains(&format!("from {FILE_LEN} to {} bytes", 1 << 20)),
        "{msg}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_rewritten_in_place_while_it_is_uploaded_is_refused() {
    let msg = upload_while(overwrite).await;
    assert!(msg.contains("input.bin: changed during upload"), "{msg}");
    assert!(msg.contains("written to while it was read"), "{msg}");
}

/// The same file, unchanged, uploads: the hook alone changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_upload_without_a_change_succeeds() {
    let dir = tempfile::tempdir().unwrap();
    let (path, data) = input(dir.path());
    let store = Arc::new(MemoryStore::in_memory().await.unwrap());
    let seen = Arc::new(Mutex::new(0u64));
    struct Count(Arc<Mutex<u64>>);
    impl Progress for Count {
        fn processed(&self, bytes: u64) {
            *self.0.lock().unwrap() += bytes;
        }
    }
    let opts = UploadOptions {
        block_size: BLOCK,
        xorb_max_bytes: 1 << 20,
        global_dedup: false,
        ..Default::default()
    };
    let r = upload(store.clone(), &[path], &opts, Arc::new(Count(seen.clone())))
        .await
        .unwrap();
    assert_eq!(r.files[0].hash, xet_chunk::file_hash(&data));
    assert_eq!(*seen.lock().unwrap(), FILE_LEN as u64);
    assert_eq!(store.stats().files, 1);
}
