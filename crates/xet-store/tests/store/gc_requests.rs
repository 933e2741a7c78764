//! What a garbage collection asks of its backend, counted as the requests S3 would see
//! (a listing is a request per 1,000 keys, a HEAD-then-DELETE delete two, a bulk delete
//! a request per 1,000 keys): the bench's store (`xtask/src/bench/gc.rs`: one xorb and
//! one shard per file, a fifth of the files named by no commit) in small, opened as
//! `xet store gc` opens it, then collected with a zero grace.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use xet_cas::{ByteRange, Result};
use xet_cas_conformance::gc_store::GcStore;
use xet_store::{
    AgedObject, GcOptions, MemoryBackend, ObjectBackend, ObjectKey, StoreCas, StoreConfig,
};

/// A memory backend counting what S3 would be asked, by call and object kind.
#[derive(Clone, Default)]
struct Counting {
    inner: MemoryBackend,
    counts: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Counting {
    fn note(&self, call: &str, what: &str, requests: u64) {
        let kind = what.split('/').next().unwrap_or("");
        *self
            .counts
            .lock()
            .unwrap()
            .entry(format!("{call} {kind}"))
            .or_default() += requests;
    }

    fn take(&self) -> BTreeMap<String, u64> {
        std::mem::take(&mut *self.counts.lock().unwrap())
    }
}

fn pages(n: usize) -> u64 {
    n.div_ceil(1000).max(1) as u64
}

#[async_trait::async_trait]
impl ObjectBackend for Counting {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        self.note("PUT", key.as_str(), 1);
        self.inner.put_if_absent(key, data).await
    }
    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
        self.note("GET", key.as_str(), 1);
        self.inner.get(key).await
    }
    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
        self.note("GET range", key.as_str(), 1);
        self.inner.get_range(key, range).await
    }
    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
        self.note("HEAD", key.as_str(), 1);
        self.inner.size(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
        let out = self.inner.list(prefix).await?;
        self.note("LIST", prefix, pages(out.len()));
        Ok(out)
    }
    async fn list_aged(&self, prefix: &str) -> Result<Vec<AgedObject>> {
        let out = self.inner.list_aged(prefix).await?;
        self.note("LIST", prefix, pages(out.len()));
        Ok(out)
    }
    async fn delete(&self, key: &ObjectKey) -> Result<bool> {
        self.note("HEAD+DELETE", key.as_str(), 2);
        self.inner.delete(key).await
    }
    async fn delete_many(&self, keys: &[ObjectKey]) -> Result<()> {
        // DeleteObjects: 1,000 keys per request (counted under the first key's kind).
        if let Some(first) = keys.first() {
            self.note("DELETE bulk", first.as_str(), pages(keys.len()));
        }
        self.inner.delete_many(keys).await
    }
}

/// The bench's store in small: 500 files, a fifth garbage, 50 folders.
const SHAPE: GcStore = GcStore {
    files: 500,
    garbage_every: 5,
    folders: 50,
    at_once: 1,
};

#[tokio::test]
async fn gc_requests_per_object() {
    let backend = Counting::default();
    let store = Arc::new(StoreCas::open(backend.clone()).await.unwrap());
    SHAPE.populate(store).await.unwrap();
    backend.take();
    tokio::time::sleep(Duration::from_millis(5)).await;

    // As `xet store gc` opens it: not indexed.
    let config = StoreConfig {
        index_on_open: false,
        ..StoreConfig::default()
    };
    let store = Arc::new(StoreCas::open_with(backend.clone(), config).await.unwrap());
    let open = backend.take();
    let r = store
        .gc(GcOptions::with_grace(Duration::ZERO))
        .await
        .unwrap();
    let gc = backend.take();
    let objects = 2 * SHAPE.files as u64;
    let garbage = 2 * SHAPE.files.div_ceil(SHAPE.garbage_every) as u64;
    assert_eq!(r.deleted_shards + r.deleted_xorbs, garbage, "{r:?}");
    let sum = |m: &BTreeMap<String, u64>| m.values().sum::<u64>();
    eprintln!("{objects} objects, {garbage} garbage");
    eprintln!("open: {} requests {open:#?}", sum(&open));
    eprintln!("gc: {} requests {gc:#?}", sum(&gc));
    let total = sum(&open) + sum(&gc);
    eprintln!(
        "total {:.2} requests per object",
        total as f64 / objects as f64
    );
    // Each shard read once, no per-object HEAD or DELETE: about one request per stored
    // shard plus the roots (it was 3.8 per object with the index built on open, both
    // marks reading every shard and a HEAD and a DELETE per deleted object).
    assert_eq!(gc.get("GET shards"), Some(&(SHAPE.files as u64)), "{gc:?}");
    assert!(
        !gc.contains_key("HEAD+DELETE shards") && !gc.contains_key("HEAD+DELETE xorbs"),
        "{gc:?}"
    );
    assert!(
        total < objects,
        "{total} requests for {objects} objects: {open:?} {gc:?}"
    );
}
