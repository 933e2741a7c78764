//! Against the shard hf_xet 1.8.0 wrote for the artifact corpus (`tests/vectors/ref`).

use crate::common;

use std::path::PathBuf;
use std::sync::Arc;

use common::{Counting, memory_store};
use xet_shard::{Limits, Shard};
use xet_upload::{NoProgress, UploadOptions, upload};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn same_shard_content_as_the_reference() {
    let d = tempfile::tempdir().unwrap();
    let mut paths = Vec::new();
    for c in xet_testdata::artifact_corpus() {
        let p: PathBuf = d.path().join(c.name);
        std::fs::write(&p, c.bytes()).unwrap();
        paths.push(p);
    }
    // The reference was given the files in name order (as `collect_files` lists a directory).
    paths.sort();
    let cas = Counting::new(memory_store().await);
    upload(
        cas.clone(),
        &paths,
        &UploadOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    .unwrap();
    let ours = Shard::parse(&cas.shards.lock().unwrap()[0], &Limits::default()).unwrap();

    let ref_path = &xet_testdata::reference_artifacts("shards")[0];
    let ref_bytes = std::fs::read(ref_path).unwrap();
    // Byte for byte once given the local:// store's form (footer, eligible-chunk flags).
    let mut local = ours.clone();
    local.mark_global_dedup_chunks();
    let local = local
        .into_stored(xet_shard::StoredOptions::local_store())
        .unwrap()
        .to_bytes()
        .unwrap();
    assert!(
        local == ref_bytes,
        "stored form differs from the reference shard"
    );
    let mut theirs = Shard::parse(&ref_bytes, &Limits::default()).unwrap();
    // The local:// store flags eligible chunks and has a footer; HTTP uploads do not.
    theirs.footer = None;
    for c in &mut theirs.cas {
        for ch in &mut c.chunks {
            ch.flags = 0;
        }
    }
    assert_eq!(ours.files, theirs.files);
    assert_eq!(ours.cas.len(), 1);
    assert_eq!(ours.cas.len(), theirs.cas.len());
    for (a, b) in ours.cas.iter().zip(&theirs.cas) {
        assert_eq!(a.xorb_hash, b.xorb_hash);
        assert_eq!(a.chunks, b.chunks);
        assert_eq!(a.num_bytes_in_cas, b.num_bytes_in_cas);
    }
}
