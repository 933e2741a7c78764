//! `DownloadRequest::with_sha256`: the content's sha256 is checked before the file is
//! placed, whatever order its bytes arrive in, over resumed bytes too, and for every
//! kind of destination.

use crate::common;

use std::time::Duration;

use common::*;
use sha2::Digest as _;
use xet_download::*;

fn opts() -> DownloadOptions {
    DownloadOptions {
        retry_base_delay: Duration::from_millis(10),
        ..Default::default()
    }
}

fn sha(b: &[u8]) -> [u8; 32] {
    sha2::Sha256::digest(b).into()
}

/// Files of every size, the largest (21 MiB, written directly, in parallel fetches that
/// land out of order) included: the right sha256 passes, a wrong one is a verification
/// error that names both and leaves nothing behind.
#[tokio::test]
async fn the_sha256_is_checked_before_the_file_is_placed() {
    let c = build(
        &[
            random(21 << 20, 31),
            random(3_000_000, 32),
            vec![7],
            Vec::new(),
        ],
        1_500_000,
    );
    let (store, _) = store(&c).await;
    let dir = tempfile::tempdir().unwrap();
    for (i, f) in c.files.iter().enumerate() {
        let p = dir.path().join(format!("ok{i}"));
        let rq = DownloadRequest::to_path(f.hash, &p).with_sha256(sha(&f.data));
        download(store.clone(), vec![rq], opts(), None)
            .await
            .unwrap();
        assert!(std::fs::read(&p).unwrap() == f.data, "file {i}");

        let p = dir.path().join(format!("bad{i}"));
        let mut wrong = sha(&f.data);
        wrong[31] ^= 1;
        let rq = DownloadRequest::to_path(f.hash, &p).with_sha256(wrong);
        let e = download(store.clone(), vec![rq], opts(), None)
            .await
            .unwrap_err();
        assert_eq!(e.kind(), ErrorKind::Verification, "file {i}: {e}");
        let msg = e.to_string();
        assert!(msg.contains(&xet_hash::hex::encode(&wrong)), "{msg}");
        if !f.data.is_empty() {
            assert!(msg.contains(&xet_hash::hex::encode(&sha(&f.data))), "{msg}");
        }
    }
    let want: Vec<String> = (0..c.files.len()).map(|i| format!("ok{i}")).collect();
    assert_eq!(
        leftovers(dir.path()),
        want,
        "no part, journal or bad file left"
    );
}

#[tokio::test]
async fn writers_are_checked_and_ranges_refused() {
    let c = build(&[random(3_000_000, 33)], 500_000);
    let (store, _) = store(&c).await;
    let f = &c.files[0];
    let tmp = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        temp_dir: Some(tmp.path().to_path_buf()),
        ..opts()
    };
    let out = xet_testdata::SharedBuf::default();
    let rq = DownloadRequest::to_writer(f.hash, Box::new(out.clone())).with_sha256(sha(&f.data));
    download(store.clone(), vec![rq], o.clone(), None)
        .await
        .unwrap();
    assert!(out.contents() == f.data);

    let out = xet_testdata::SharedBuf::default();
    let rq = DownloadRequest::to_writer(f.hash, Box::new(out.clone())).with_sha256([0; 32]);
    let e = download(store.clone(), vec![rq], o.clone(), None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::Verification, "{e}");
    assert!(out.contents().is_empty(), "nothing reaches the writer");
    assert!(
        leftovers(tmp.path()).is_empty(),
        "{:?}",
        leftovers(tmp.path())
    );

    let rq = DownloadRequest::to_path(f.hash, tmp.path().join("r"))
        .with_range(FileRange::new(1, Some(99)))
        .with_sha256(sha(&f.data[1..100]));
    let e = download(store.clone(), vec![rq], o, None)
        .await
        .unwrap_err();
    assert_eq!(e.kind(), ErrorKind::InvalidRequest, "{e}");
}

/// An interrupted download's rerun checks the sha256 over the bytes it resumed (read
/// from the part) and those it fetched; a wrong expectation on the rerun still fails.
#[tokio::test]
async fn resumed_bytes_count_in_the_sha256() {
    let c = build(&[random(3_000_000, 34)], 250_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let f = &c.files[0];
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Fixed(1),
        ..opts()
    };
    let rq = || DownloadRequest::to_path(f.hash, &p).with_sha256(sha(&f.data));
    for wrong_on_rerun in [true, false] {
        w.reset();
        w.set_fault(Fault::FailAfter(4));
        download(w.clone(), vec![rq()], o.clone(), None)
            .await
            .unwrap_err();
        assert!(dir.path().join("f.part.jsonl").exists());
        w.set_fault(Fault::None);
        w.reset();
        let rerun = if wrong_on_rerun {
            DownloadRequest::to_path(f.hash, &p).with_sha256([1; 32])
        } else {
            rq()
        };
        let r = download(w.clone(), vec![rerun], o.clone(), None).await;
        if wrong_on_rerun {
            let e = r.unwrap_err();
            assert_eq!(e.kind(), ErrorKind::Verification, "{e}");
            assert!(
                leftovers(dir.path()).is_empty(),
                "{:?}",
                leftovers(dir.path())
            );
        } else {
            let r = r.unwrap();
            assert!(r.files[0].bytes_resumed > 0);
            assert!(std::fs::read(&p).unwrap() == f.data);
        }
    }
}
