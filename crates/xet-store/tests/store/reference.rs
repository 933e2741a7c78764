//! The store accepts what the reference client (hf_xet 1.8.0) writes: its xorbs (with
//! and without footer) and its shards, and reconstructs the files they describe.

use std::path::PathBuf;

use bytes::Bytes;
use xet_cas::{ByteRange, Cas};
use xet_cas_conformance as conformance;
use xet_hash::MerkleHash;
use xet_store::MemoryStore;

fn artifacts(sub: &str) -> Vec<PathBuf> {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("../../tests/vectors/ref")
        .join(sub);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| !p.to_string_lossy().ends_with(".tagset"))
        .collect();
    v.sort();
    v
}

/// `default.<hash>` → hash.
fn xorb_hash(p: &std::path::Path) -> MerkleHash {
    let name = p.file_name().unwrap().to_str().unwrap();
    MerkleHash::from_hex(name.trim_start_matches("default.")).expect("xorb file name")
}

#[tokio::test]
async fn reference_xorbs_and_shards_are_accepted() {
    let xorbs = artifacts("xorbs");
    let shards = artifacts("shards");
    assert!(!xorbs.is_empty() && !shards.is_empty());
    // Footered, as `local://` stores them.
    let store = MemoryStore::in_memory().await.unwrap();
    for p in &xorbs {
        let bytes = std::fs::read(p).unwrap();
        assert_eq!(
            xet_cas_conformance::text_err(
                store
                    .put_xorb(&xorb_hash(p), Bytes::from(bytes).into())
                    .await
            ),
            Ok(true),
            "{}",
            p.display()
        );
    }
    for p in &shards {
        let bytes = std::fs::read(p).unwrap();
        assert_eq!(
            xet_cas_conformance::text_err(store.put_shard(Bytes::from(bytes)).await),
            Ok(true),
            "{}",
            p.display()
        );
    }
    assert!(store.stats().files > 0);
    // Every corpus file the reference shard registers reconstructs to the original bytes.
    let mut checked = 0;
    for (corpus, golden) in xet_testdata::golden_files() {
        let hash = MerkleHash::from_hex(&golden.hash).unwrap();
        let Some(size) = store.file_size(&hash).await.unwrap() else {
            continue;
        };
        assert_eq!(size, golden.size, "{}", golden.name);
        let data = corpus.bytes();
        let got = conformance::read_file(&store, &hash, size, None)
            .await
            .unwrap();
        assert!(got == data, "{}: reconstructed bytes differ", golden.name);
        if size > 2 {
            let range = ByteRange::new(1, size - 1);
            let got = conformance::read_file(&store, &hash, size, Some(range))
                .await
                .unwrap();
            assert!(got == data[1..size as usize - 1], "{}: range", golden.name);
        }
        checked += 1;
    }
    assert!(checked > 0, "no corpus file found in the reference shard");
    // Footer-less bodies, as hf_xet uploads them: same sizes.
    let store2 = MemoryStore::in_memory().await.unwrap();
    for p in &xorbs {
        let h = xorb_hash(p);
        let size = store.xorb_size(&h).await.unwrap().unwrap();
        let bytes = std::fs::read(p).unwrap();
        let body = Bytes::copy_from_slice(&bytes[..size as usize]);
        assert_eq!(
            xet_cas_conformance::text_err(store2.put_xorb(&h, body.into()).await),
            Ok(true)
        );
        assert_eq!(
            xet_cas_conformance::text_err(store2.xorb_size(&h).await),
            Ok(Some(size))
        );
    }
}
