//! The conformance suites against the in-memory store and backend.

use std::time::Duration;

use bytes::Bytes;
use xet_cas::Cas;
use xet_cas_conformance::{self as conformance, UnderTest};
use xet_store::{DedupKeys, MemoryBackend, MemoryStore, ObjectBackend, StoreCas, StoreConfig};

async fn make() -> UnderTest {
    UnderTest::new(MemoryStore::in_memory().await.expect("open"))
}

async fn make_unkeyed() -> UnderTest {
    let config = StoreConfig {
        dedup_keys: DedupKeys::Unkeyed,
        ..StoreConfig::default()
    };
    UnderTest::new(
        StoreCas::open_with(MemoryBackend::new(), config)
            .await
            .expect("open"),
    )
}

mod memory_keyed {
    xet_cas_conformance::cas_conformance_tests!(super::make);
}

mod memory_unkeyed {
    xet_cas_conformance::cas_conformance_tests!(super::make_unkeyed);
}

/// Two stores over one in-memory backend: two processes sharing a store.
async fn make_twins() -> conformance::repos::Twins {
    let backend = MemoryBackend::new();
    let a = StoreCas::open(backend.clone()).await.expect("open a");
    let b = StoreCas::open(backend).await.expect("open b");
    conformance::repos::Twins::new(a, b)
}

mod memory_repos {
    xet_cas_conformance::repo_store_conformance_tests!(super::make_twins);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_backend_conformance() {
    conformance::backend::run_all(&MemoryBackend::new()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reopen_over_the_same_backend_keeps_everything() {
    let backend = MemoryBackend::new();
    let store = StoreCas::open(backend.clone()).await.expect("open");
    conformance::populate(&store).await;
    let stats = store.stats();
    drop(store);
    let store = StoreCas::open(backend.clone()).await.expect("reopen");
    assert_eq!(store.stats().files, stats.files);
    assert_eq!(store.stats().shards, stats.shards);
    assert_eq!(store.stats().dedup_chunks, stats.dedup_chunks);
    conformance::check_populated(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refresh_picks_up_shards_written_by_another_instance() {
    let backend = MemoryBackend::new();
    let reader = StoreCas::open(backend.clone()).await.expect("open");
    let writer = StoreCas::open(backend.clone()).await.expect("open");
    conformance::populate(&writer).await;
    assert_eq!(reader.stats().files, 0);
    assert_eq!(reader.refresh().await.expect("refresh"), 2);
    conformance::check_populated(&reader).await;
}

/// The periodic refresh works over any shared backend, and its task ends with the store.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_refresh_picks_up_another_instances_files() {
    let backend = MemoryBackend::new();
    let writer = StoreCas::open(backend.clone()).await.expect("open");
    let reader = std::sync::Arc::new(StoreCas::open(backend).await.expect("open"));
    let task = reader.spawn_refresh(Duration::from_millis(20));
    conformance::populate(&writer).await;
    // 2,000 looks 10 ms apart: about 1,000 refresh periods.
    let mut looks = 0;
    while reader.stats().shards < 2 {
        looks += 1;
        assert!(looks < 2000, "not refreshed");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    conformance::check_populated(&*reader).await;
    drop(reader);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the refresh task ends with its store")
        .unwrap();
}

#[tokio::test]
async fn dedup_keys_are_stable_across_reopen_and_rotate_with_config() {
    let backend = MemoryBackend::new();
    let store = StoreCas::open(backend.clone()).await.expect("open");
    conformance::populate(&store).await;
    let secret = store
        .backend()
        .get(&xet_store::ObjectKey::meta(xet_store::DEDUP_SECRET_KEY))
        .await
        .unwrap();
    drop(store);
    let store = StoreCas::open(backend.clone()).await.expect("reopen");
    let again = store
        .backend()
        .get(&xet_store::ObjectKey::meta(xet_store::DEDUP_SECRET_KEY))
        .await
        .unwrap();
    assert_eq!(secret, again, "the dedup secret persists");
    // A one-second period still answers (the key is whatever the current epoch gives).
    let config = StoreConfig {
        dedup_keys: DedupKeys::Rotating {
            period: Duration::from_secs(1),
        },
        ..Default::default()
    };
    let fast = StoreCas::open_with(backend, config).await.expect("open");
    conformance::check_populated(&fast).await;
}

#[tokio::test]
async fn oversized_shard_is_rejected_before_parsing() {
    let config = StoreConfig {
        max_shard_bytes: 100,
        ..StoreConfig::default()
    };
    let store = StoreCas::open_with(MemoryBackend::new(), config)
        .await
        .expect("open");
    let e = store
        .put_shard(Bytes::from(vec![0u8; 101]))
        .await
        .unwrap_err();
    assert!(matches!(e, xet_cas::CasError::InvalidShard { .. }), "{e:?}");
}
