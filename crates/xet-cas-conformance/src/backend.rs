//! Conformance of [`ObjectBackend`] implementations: put-if-absent, ranged reads,
//! listing, deletion, racing writers, and no partially written object ever visible.
//! Each function takes an **empty** backend; [`run_all`] runs them in sequence on one
//! (they use disjoint keys).

use bytes::Bytes;
use xet_hash::MerkleHash;

use super::fixture::random_bytes;
use crate::text_err;
use xet_cas::{ByteRange, CasError};
use xet_store::{ObjectBackend, ObjectKey};

fn key_hash(case: &str, i: u64) -> MerkleHash {
    xet_hash::chunk_hash(format!("{case}/{i}").as_bytes())
}

/// All backend cases on one empty backend.
pub async fn run_all(b: &dyn ObjectBackend) {
    put_if_absent(b).await;
    put_parts(b).await;
    ranged_reads(b).await;
    listing(b).await;
    deletion(b).await;
    bulk_deletion(b).await;
    racing_writers(b).await;
    no_partial_objects(b).await;
}

/// First put wins; later puts change nothing.
pub async fn put_if_absent(b: &dyn ObjectBackend) {
    let key = ObjectKey::xorb(&key_hash("put", 0));
    assert_eq!(text_err(b.get(&key).await), Ok(None), "missing object");
    assert_eq!(
        text_err(b.size(&key).await),
        Ok(None),
        "size of a missing object"
    );
    assert_eq!(
        text_err(b.exists(&key).await),
        Ok(false),
        "exists on a missing object"
    );
    let data = Bytes::from(random_bytes(10_000, 1));
    assert_eq!(
        text_err(b.put_if_absent(&key, data.clone()).await),
        Ok(true),
        "first put"
    );
    assert_eq!(
        text_err(b.put_if_absent(&key, Bytes::from_static(b"other")).await),
        Ok(false),
        "second put"
    );
    assert_eq!(
        text_err(b.get(&key).await),
        Ok(Some(data.clone())),
        "content after a second put"
    );
    assert_eq!(text_err(b.size(&key).await), Ok(Some(10_000)), "size");
    assert_eq!(text_err(b.exists(&key).await), Ok(true), "exists");
    let empty = ObjectKey::meta("empty-object");
    assert_eq!(
        text_err(b.put_if_absent(&empty, Bytes::new()).await),
        Ok(true),
        "empty object"
    );
    assert_eq!(
        text_err(b.get(&empty).await),
        Ok(Some(Bytes::new())),
        "empty object content"
    );
    assert_eq!(
        text_err(b.size(&empty).await),
        Ok(Some(0)),
        "empty object size"
    );
}

/// An object put in parts is their concatenation (empty parts included), and the parts
/// call has the same first-put-wins rule.
pub async fn put_parts(b: &dyn ObjectBackend) {
    let key = ObjectKey::xorb(&key_hash("parts", 0));
    let data = random_bytes(300_000, 7);
    let parts = vec![
        Bytes::copy_from_slice(&data[..100_000]),
        Bytes::new(),
        Bytes::copy_from_slice(&data[100_000..299_990]),
        Bytes::copy_from_slice(&data[299_990..]),
    ];
    assert_eq!(
        text_err(b.put_parts_if_absent(&key, parts).await),
        Ok(true),
        "first put in parts"
    );
    assert_eq!(
        text_err(
            b.put_parts_if_absent(&key, vec![Bytes::from_static(b"other")])
                .await
        ),
        Ok(false),
        "second put in parts"
    );
    assert_eq!(
        text_err(b.put_if_absent(&key, Bytes::from_static(b"other")).await),
        Ok(false),
        "whole put after a put in parts"
    );
    assert_eq!(
        text_err(b.get(&key).await),
        Ok(Some(Bytes::from(data))),
        "content of an object put in parts"
    );
    let none = ObjectKey::xorb(&key_hash("parts", 1));
    assert_eq!(
        text_err(b.put_parts_if_absent(&none, Vec::new()).await),
        Ok(true)
    );
    assert_eq!(
        text_err(b.size(&none).await),
        Ok(Some(0)),
        "object of no parts"
    );
}

/// Ranged reads return exactly the bytes asked for; past the end is an error.
pub async fn ranged_reads(b: &dyn ObjectBackend) {
    let key = ObjectKey::shard(&key_hash("range", 0));
    let data = random_bytes(3_000_000, 2);
    assert_eq!(
        text_err(b.put_if_absent(&key, Bytes::from(data.clone())).await),
        Ok(true)
    );
    let n = data.len() as u64;
    for (s, e) in [
        (0, 0),
        (0, 1),
        (0, n),
        (1, 3),
        (n - 1, n),
        (n, n),
        (1_000_000, 2_500_001),
    ] {
        let got = b.get_range(&key, ByteRange::new(s, e)).await;
        assert_eq!(
            text_err(got),
            Ok(Some(Bytes::copy_from_slice(&data[s as usize..e as usize]))),
            "range {s}..{e}"
        );
    }
    for (s, e) in [(0, n + 1), (n - 1, n + 1), (n + 1, n + 2), (5, 4)] {
        let got = b.get_range(&key, ByteRange::new(s, e)).await;
        assert!(
            matches!(got, Err(CasError::Storage { .. })),
            "range {s}..{e} of {n}: {got:?}"
        );
    }
    let missing = ObjectKey::shard(&key_hash("range", 1));
    assert_eq!(
        text_err(b.get_range(&missing, ByteRange::new(0, 1)).await),
        Ok(None),
        "range of a missing object"
    );
}

/// Listing by prefix, sorted, only complete objects.
pub async fn listing(b: &dyn ObjectBackend) {
    let mut xorbs: Vec<ObjectKey> = (0..5)
        .map(|i| ObjectKey::xorb(&key_hash("list", i)))
        .collect();
    let mut shards: Vec<ObjectKey> = (0..3)
        .map(|i| ObjectKey::shard(&key_hash("list-shard", i)))
        .collect();
    for k in xorbs.iter().chain(&shards) {
        b.put_if_absent(k, Bytes::from_static(b"x"))
            .await
            .expect("put");
    }
    xorbs.sort();
    shards.sort();
    let listed = b.list("xorbs/").await.expect("list xorbs");
    for k in &xorbs {
        assert!(listed.contains(k), "xorb listing misses {k}");
    }
    assert!(
        listed.iter().all(|k| k.as_str().starts_with("xorbs/")),
        "xorb listing: {listed:?}"
    );
    assert!(listed.windows(2).all(|w| w[0] < w[1]), "listing is sorted");
    let listed = b.list("shards/").await.expect("list shards");
    for k in &shards {
        assert!(listed.contains(k), "shard listing misses {k}");
    }
    assert!(
        listed.iter().all(|k| k.shard_hash().is_some()),
        "shard listing: {listed:?}"
    );
    let prefix = &xorbs[0].as_str()[..12];
    let narrow = b.list(prefix).await.expect("list narrow prefix");
    assert!(
        narrow.contains(&xorbs[0]) && narrow.iter().all(|k| k.as_str().starts_with(prefix)),
        "{prefix}: {narrow:?}"
    );
    let everything = b.list("").await.expect("list all");
    assert!(
        xorbs.iter().chain(&shards).all(|k| everything.contains(k)),
        "listing everything"
    );
}

/// Deletion (maintenance only).
pub async fn deletion(b: &dyn ObjectBackend) {
    let key = ObjectKey::xorb(&key_hash("delete", 0));
    assert_eq!(
        text_err(b.delete(&key).await),
        Ok(false),
        "deleting a missing object"
    );
    b.put_if_absent(&key, Bytes::from_static(b"first"))
        .await
        .expect("put");
    assert_eq!(text_err(b.delete(&key).await), Ok(true), "deleting");
    assert_eq!(text_err(b.get(&key).await), Ok(None), "after delete");
    assert!(
        !b.list("xorbs/").await.expect("list").contains(&key),
        "listed after delete"
    );
    assert_eq!(
        text_err(b.put_if_absent(&key, Bytes::from_static(b"second")).await),
        Ok(true),
        "put after delete"
    );
    assert_eq!(
        text_err(b.get(&key).await),
        Ok(Some(Bytes::from_static(b"second")))
    );
}

/// Bulk deletion: present keys of every shape go, absent and repeated keys are no
/// error, more keys than one S3 request takes (1,000) all go, and a key not named
/// stays.
pub async fn bulk_deletion(b: &dyn ObjectBackend) {
    assert_eq!(
        text_err(b.delete_many(&[]).await),
        Ok(()),
        "deleting nothing"
    );
    let kept = ObjectKey::xorb(&key_hash("bulk-kept", 0));
    b.put_if_absent(&kept, Bytes::from_static(b"kept"))
        .await
        .expect("put");
    let file = key_hash("bulk-file", 0);
    let mut present: Vec<ObjectKey> = (0..1_003)
        .map(|i| ObjectKey::xorb(&key_hash("bulk", i)))
        .collect();
    present.extend([
        ObjectKey::shard(&key_hash("bulk-shard", 0)),
        ObjectKey::meta("conformance-bulk-delete"),
        ObjectKey::hub_file_reference(&file, &[0xab; 16]),
        ObjectKey::hub_sha256(&[0xcd; 32]),
    ]);
    for k in &present {
        b.put_if_absent(k, Bytes::from_static(b"doomed"))
            .await
            .expect("put");
    }
    let absent = ObjectKey::xorb(&key_hash("bulk-absent", 0));
    let mut keys = vec![absent.clone(), present[0].clone()];
    keys.extend(present.iter().cloned());
    keys.push(present[1_002].clone());
    keys.push(absent);
    assert_eq!(text_err(b.delete_many(&keys).await), Ok(()), "bulk delete");
    for k in [
        &present[0],
        &present[1_002],
        &present[1_003],
        &present[1_006],
    ] {
        assert_eq!(
            text_err(b.get(k).await),
            Ok(None),
            "{k} after a bulk delete"
        );
    }
    let left = b.list("").await.expect("list");
    assert!(
        present.iter().all(|k| !left.contains(k)),
        "listed after a bulk delete"
    );
    assert!(left.contains(&kept), "a key not named is kept");
    assert_eq!(
        text_err(b.delete_many(&present[..2]).await),
        Ok(()),
        "deleting again"
    );
    assert_eq!(text_err(b.delete(&kept).await), Ok(true), "cleanup");
}

/// Concurrent puts of one key: exactly one wins and its content is complete.
pub async fn racing_writers(b: &dyn ObjectBackend) {
    for round in 0..4 {
        let key = ObjectKey::xorb(&key_hash("race", round));
        let datas: Vec<Bytes> = (0..6)
            .map(|i| Bytes::from(random_bytes(200_000 + i * 1000, 10 + i as u64)))
            .collect();
        let put = |i: usize| b.put_if_absent(&key, datas[i].clone());
        let (r0, r1, r2, r3, r4, r5) = tokio::join!(put(0), put(1), put(2), put(3), put(4), put(5));
        let results = [r0, r1, r2, r3, r4, r5].map(|r| r.expect("racing put"));
        assert_eq!(
            results.iter().filter(|w| **w).count(),
            1,
            "round {round}: winners {results:?}"
        );
        let winner = results.iter().position(|w| *w).expect("a winner");
        assert_eq!(
            text_err(b.get(&key).await),
            Ok(Some(datas[winner].clone())),
            "round {round}: content is the winner's"
        );
    }
}

/// While a large object is written, readers see nothing or all of it.
pub async fn no_partial_objects(b: &dyn ObjectBackend) {
    let data = Bytes::from(random_bytes(16 << 20, 3));
    let key = ObjectKey::xorb(&key_hash("partial", 0));
    let writer = b.put_if_absent(&key, data.clone());
    let reader = async {
        let mut seen_complete = false;
        for _ in 0..200 {
            match b.get(&key).await.expect("get") {
                None => assert!(!seen_complete, "object disappeared"),
                Some(got) => {
                    assert_eq!(got.len(), data.len(), "partial object visible");
                    assert!(got == data, "object content differs while being written");
                    seen_complete = true;
                }
            }
            if let Some(n) = b.size(&key).await.expect("size") {
                assert_eq!(n, data.len() as u64, "partial size visible");
            }
            if b.list("xorbs/").await.expect("list").contains(&key) {
                assert_eq!(
                    b.size(&key).await.expect("size"),
                    Some(data.len() as u64),
                    "listed before complete"
                );
            }
            tokio::task::yield_now().await;
        }
    };
    let (w, ()) = tokio::join!(writer, reader);
    assert_eq!(text_err(w), Ok(true));
    assert_eq!(text_err(b.get(&key).await), Ok(Some(data)));
}
