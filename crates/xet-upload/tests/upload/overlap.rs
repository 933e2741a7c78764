//! Uploads of many small files do not wait for every global dedup answer before sending
//! bytes (issue #26): the first xorb is stored while answers are still outstanding.

use crate::common;

use std::collections::HashSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use bytes::Bytes;
use common::memory_store;
use xet_cas::{ByteRange, Cas, Reconstruction, Result, XorbBody, XorbFetch};
use xet_hash::MerkleHash;
use xet_upload::{NoProgress, UploadOptions, upload};

/// A real store behind a wrapper that holds the global dedup answers for the chunks in
/// `hold` until a xorb has been stored, or until it has looked `ATTEMPTS` times (then
/// it answers anyway and records that it gave up).
struct HoldAnswers {
    inner: Arc<dyn Cas>,
    hold: HashSet<MerkleHash>,
    queries: AtomicUsize,
    xorb_stored: AtomicBool,
    gave_up: AtomicBool,
    /// Answers given once a xorb was stored.
    answered_after_xorb: AtomicUsize,
}

/// How many times a held query looks for a stored xorb, `PAUSE` apart.
const ATTEMPTS: u32 = 200;
const PAUSE: std::time::Duration = std::time::Duration::from_millis(50);

#[async_trait::async_trait]
impl Cas for HoldAnswers {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> Result<bool> {
        let r = self.inner.put_xorb(hash, body).await;
        if r.is_ok() {
            self.xorb_stored.store(true, Ordering::SeqCst);
        }
        r
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    async fn put_shard(&self, shard: Bytes) -> Result<bool> {
        self.inner.put_shard(shard).await
    }
    async fn file_size(&self, file: &MerkleHash) -> Result<Option<u64>> {
        self.inner.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction> {
        self.inner.reconstruction(file, range).await
    }
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> Result<Bytes> {
        self.inner.fetch_xorb_range(fetch).await
    }
    async fn dedup_shard(&self, chunk: &MerkleHash) -> Result<Option<Bytes>> {
        self.queries.fetch_add(1, Ordering::SeqCst);
        if self.hold.contains(chunk) {
            let mut attempts = 0;
            while !self.xorb_stored.load(Ordering::SeqCst) {
                attempts += 1;
                if attempts > ATTEMPTS {
                    self.gave_up.store(true, Ordering::SeqCst);
                    break;
                }
                tokio::time::sleep(PAUSE).await;
            }
        }
        let answer = self.inner.dedup_shard(chunk).await;
        if self.xorb_stored.load(Ordering::SeqCst) {
            self.answered_after_xorb.fetch_add(1, Ordering::SeqCst);
        }
        answer
    }
}

/// 600 files of 16-48 KiB (about 19 MiB, under one full xorb): the answers for the last
/// 100 files (queried for their first chunks) are held until a xorb is stored. The
/// pipeline must pack and send the first files' new chunks meanwhile; one that sends
/// its xorbs only once every file is decided never stores one, and the wrapper gives up.
/// (Fewer held than query slots: a held query keeps its slot, and the readers run far
/// enough ahead to ask for every file before the first xorb is sealed.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn first_xorb_is_stored_before_the_last_dedup_answer() {
    let d = tempfile::tempdir().unwrap();
    let mut rng = xet_testdata::Rng::new(26);
    let mut paths = Vec::new();
    let mut total = 0u64;
    let mut hold = HashSet::new();
    for i in 0..600 {
        let len = (16 << 10) + (rng.next_u64() % (32 << 10)) as usize;
        let mut data = vec![0u8; len];
        rng.fill(&mut data);
        if i >= 500 {
            hold.insert(xet_chunk::chunk_data(&data)[0].hash);
        }
        let p = d.path().join(format!("f{i:04}"));
        std::fs::write(&p, &data).unwrap();
        paths.push(p);
        total += len as u64;
    }
    assert!(total < 64 << 20, "less than one full xorb");
    let cas = Arc::new(HoldAnswers {
        inner: memory_store().await,
        hold,
        queries: AtomicUsize::new(0),
        xorb_stored: AtomicBool::new(false),
        gave_up: AtomicBool::new(false),
        answered_after_xorb: AtomicUsize::new(0),
    });
    let report = upload(
        cas.clone(),
        &paths,
        &UploadOptions {
            max_dedup_queries_in_flight: 128,
            ..Default::default()
        },
        Arc::new(NoProgress),
    )
    .await
    .unwrap();
    assert!(
        !cas.gave_up.load(Ordering::SeqCst),
        "no xorb was stored while the last 100 files' dedup answers were held \
         ({ATTEMPTS} looks, {PAUSE:?} apart): the upload waited for every answer before \
         sending a xorb"
    );
    let after = cas.answered_after_xorb.load(Ordering::SeqCst);
    assert!(
        after >= 100,
        "{after} answers after the first xorb was stored"
    );
    assert_eq!(
        cas.queries.load(Ordering::SeqCst),
        600,
        "one query per file"
    );
    assert_eq!(report.totals.files, 600);
    assert_eq!(report.totals.new_bytes, total);
    assert!(report.totals.xorbs_sent > 1);
}
