//! The download pipeline against the filesystem store (`xet_store::open_store`), as the
//! embedded CLI store uses it.

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use xet_cas::Cas;
use xet_download::*;
use xet_store::ObjectKey;

fn opts() -> DownloadOptions {
    DownloadOptions {
        retry_base_delay: Duration::from_millis(10),
        ..Default::default()
    }
}

#[tokio::test]
async fn downloads_from_the_fs_store_and_detects_a_flipped_byte() {
    let c = build(
        &[random(900_000, 1), text(700_000, 2), random(2_000, 3)],
        400_000,
    );
    let root = tempfile::tempdir().unwrap();
    {
        let store = xet_store::open_store(root.path()).await.unwrap();
        put(&store as &dyn Cas, &c).await;
    }
    // A fresh open (as another process would) serves the files.
    let store = Arc::new(xet_store::open_store(root.path()).await.unwrap());
    let out = tempfile::tempdir().unwrap();
    let reqs = c
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| DownloadRequest::to_path(f.hash, out.path().join(format!("f{i}"))))
        .collect();
    let r = download(store.clone(), reqs, opts(), None).await.unwrap();
    for (i, f) in c.files.iter().enumerate() {
        assert_eq!(
            std::fs::read(out.path().join(format!("f{i}"))).unwrap(),
            f.data
        );
        assert_eq!(r.files[i].verification, Verification::FileHash);
    }

    // Flip one byte inside a chunk's data in the stored xorb file of the first file.
    let x = &c.xorbs[0];
    let victim = x.num_chunks() / 2;
    let info = x.info().chunks[victim];
    let path = store.backend().path_of(&ObjectKey::xorb(&x.hash()));
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[(info.offset + 8 + info.compressed_size as u64 / 2) as usize] ^= 0x01;
    let mut perms = std::fs::metadata(&path).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&path, perms).unwrap();
    std::fs::write(&path, bytes).unwrap();

    let dest = out.path().join("corrupt");
    let e = download(
        store.clone(),
        vec![DownloadRequest::to_path(c.files[0].hash, &dest)],
        opts(),
        None,
    )
    .await
    .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Verification, "{e}");
    let msg = e.to_string();
    assert!(
        msg.contains(&format!("chunk {victim} of xorb {}", x.hash())),
        "{msg}"
    );
    assert!(!dest.exists());
    assert!(!out.path().join("corrupt.part").exists());
    assert!(!out.path().join("corrupt.part.jsonl").exists());
}
