//! `file_stream` and `file_sha256`: a stored file's bytes (or a range of them) in order,
//! from a memory store; a lying reconstruction or corrupt data ends the stream with an
//! error naming the file and the xorb, never a panic.

use crate::common;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use bytes::Bytes;
use common::*;
use sha2::Digest as _;
use xet_cas::{ByteRange, Cas, CasError, Reconstruction, XorbBody, XorbFetch};
use xet_download::{ChunkHashes, file_sha256, file_stream, file_stream_checked};
use xet_hash::MerkleHash;

/// Every piece of the stream, or the error that ended it (with the bytes before it).
async fn collect(
    cas: Arc<dyn Cas>,
    file: MerkleHash,
    range: Option<ByteRange>,
) -> (Vec<u8>, Option<CasError>) {
    collect_from(file_stream(cas, file, range)).await
}

async fn collect_from(
    mut rx: tokio::sync::mpsc::Receiver<Result<Bytes, CasError>>,
) -> (Vec<u8>, Option<CasError>) {
    let mut out = Vec::new();
    while let Some(piece) = rx.recv().await {
        match piece {
            Ok(b) => {
                assert!(!b.is_empty(), "an empty piece");
                out.extend_from_slice(&b);
            }
            Err(e) => {
                assert!(rx.recv().await.is_none(), "the stream goes on after {e}");
                return (out, Some(e));
            }
        }
    }
    (out, None)
}

async fn bytes_of(cas: Arc<dyn Cas>, file: MerkleHash, range: Option<ByteRange>) -> Vec<u8> {
    let (out, err) = collect(cas, file, range).await;
    assert!(err.is_none(), "{err:?}");
    out
}

/// Two files sharing chunks (so the second has terms from several xorbs), in xorbs of
/// at most 256 KiB.
fn corpus() -> Corpus {
    let a = random(1 << 20, 41);
    let mut b = text(300_000, 42);
    b.extend_from_slice(&a[200_000..700_000]);
    b.extend_from_slice(&random(100_000, 43));
    build(&[a, b], 256 << 10)
}

#[tokio::test]
async fn whole_files_and_their_sha256() {
    let c = corpus();
    let (store, _) = store(&c).await;
    for f in &c.files {
        assert!(!f.term_bounds.is_empty(), "one term only");
        assert_eq!(bytes_of(store.clone(), f.hash, None).await, f.data);
        let (sha, size) = file_sha256(store.clone(), f.hash).await.unwrap();
        assert_eq!(sha, <[u8; 32]>::from(sha2::Sha256::digest(&f.data)));
        assert_eq!(size, f.data.len() as u64);
    }
}

#[tokio::test]
async fn ranges_on_boundaries_inside_chunks_and_at_the_end() {
    let c = corpus();
    let (store, _) = store(&c).await;
    for f in &c.files {
        let size = f.data.len() as u64;
        let ends = &f.chunk_ends;
        let t = &f.term_bounds;
        let mut ranges = vec![
            // Chunk boundaries: one chunk, several.
            (0, ends[0]),
            (ends[0], ends[1]),
            (ends[1], ends[ends.len() - 2]),
            // Term boundaries: a whole term, across one.
            (t[0], t[t.len() - 1].max(t[0] + 1)),
            (t[0] - 1, t[0] + 1),
            // Inside chunks: within one, across several.
            (10, 20),
            (ends[0] + 5, ends[0] + 6),
            (ends[0] - 3, ends[3] + 3),
            // At the end: the last byte, the last chunk and a bit, past the end.
            (size - 1, size),
            (ends[ends.len() - 2] - 7, size),
        ];
        ranges.extend(t.iter().map(|&b| (b, size)));
        for (s, e) in ranges {
            let got = bytes_of(store.clone(), f.hash, Some(ByteRange::new(s, e))).await;
            assert!(
                got == f.data[s as usize..e as usize],
                "range {s}..{e} of {size}"
            );
        }
        // A range reaching past the end yields what the file has.
        let got = bytes_of(
            store.clone(),
            f.hash,
            Some(ByteRange::new(size - 5, size + 100)),
        )
        .await;
        assert_eq!(got, f.data[size as usize - 5..]);
        // A range starting past it is the store's error.
        let (_, e) = collect(store.clone(), f.hash, Some(ByteRange::new(size, size + 1))).await;
        assert!(
            matches!(e, Some(CasError::RangeNotSatisfiable { .. })),
            "{e:?}"
        );
    }
}

#[tokio::test]
async fn the_empty_file_yields_nothing_without_a_request() {
    let c = corpus();
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    assert_eq!(bytes_of(w.clone(), MerkleHash::default(), None).await, b"");
    let (sha, size) = file_sha256(w.clone(), MerkleHash::default()).await.unwrap();
    assert_eq!(sha, <[u8; 32]>::from(sha2::Sha256::digest(b"")));
    assert_eq!(size, 0);
    assert_eq!(w.reconstructions.load(Ordering::SeqCst), 0);
    assert_eq!(w.attempts.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn unknown_files_and_missing_xorbs_are_the_stores_errors() {
    let c = corpus();
    let (store, backend) = store(&c).await;
    let (_, e) = collect(store.clone(), xet_hash::chunk_hash(b"no such"), None).await;
    assert!(matches!(e, Some(CasError::NotFound { .. })), "{e:?}");
    // A stored xorb damaged: its chunks do not decode (or decode to other lengths).
    let f = &c.files[0];
    corrupt(&backend, &c.xorbs[1].hash(), 3).await;
    let (got, e) = collect(store.clone(), f.hash, None).await;
    let e = e.expect("an error");
    assert!(matches!(e, CasError::Corrupt { .. }), "{e:?}");
    let text = e.to_string();
    assert!(text.contains(&f.hash.to_string()), "{text}");
    assert!(text.contains(&c.xorbs[1].hash().to_string()), "{text}");
    // What came before the damaged xorb came, and was right.
    assert!(got.len() < f.data.len() && f.data.starts_with(&got));
}

/// A `Cas` whose reconstructions are edited before they are answered.
struct Lying {
    inner: Arc<dyn Cas>,
    edit: Box<dyn Fn(&mut Reconstruction) + Send + Sync>,
}

#[async_trait::async_trait]
impl Cas for Lying {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> xet_cas::Result<bool> {
        self.inner.put_xorb(hash, body).await
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    async fn put_shard(&self, shard: Bytes) -> xet_cas::Result<bool> {
        self.inner.put_shard(shard).await
    }
    async fn file_size(&self, file: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> xet_cas::Result<Reconstruction> {
        let mut rec = self.inner.reconstruction(file, range).await?;
        (self.edit)(&mut rec);
        Ok(rec)
    }
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> xet_cas::Result<Bytes> {
        self.inner.fetch_xorb_range(fetch).await
    }
    async fn dedup_shard(&self, chunk: &MerkleHash) -> xet_cas::Result<Option<Bytes>> {
        self.inner.dedup_shard(chunk).await
    }
}

fn lying(
    inner: Arc<dyn Cas>,
    edit: impl Fn(&mut Reconstruction) + Send + Sync + 'static,
) -> Arc<dyn Cas> {
    Arc::new(Lying {
        inner,
        edit: Box::new(edit),
    })
}

/// Each lie ends the stream with a corrupt error naming the file and the xorb: terms
/// longer or shorter than what decodes, chunks beyond their fetch, empty terms, fetches
/// listing more chunks or bytes than they hold, an unknown xorb.
#[tokio::test]
async fn a_lying_reconstruction_is_an_error_not_a_panic() {
    let c = corpus();
    let (store, _) = store(&c).await;
    let f = &c.files[1];
    type Lie = fn(&mut Reconstruction);
    let lies: &[(&str, Lie)] = &[
        ("term longer", |r| r.terms[1].unpacked_length += 1),
        ("term shorter", |r| r.terms[0].unpacked_length -= 1),
        ("term past its fetch", |r| {
            r.terms[1].chunks.end += 1;
        }),
        ("term and fetch past the xorb", |r| {
            let x = r.terms[1].xorb;
            r.terms[1].chunks.end += 1;
            for f in r.fetches.iter_mut().filter(|f| f.xorb == x) {
                f.chunks.end += 1;
            }
        }),
        ("fetch listing a chunk it does not hold", |r| {
            r.fetches[0].chunks.end += 1;
        }),
        ("fetch shorter than its chunks", |r| {
            r.fetches[0].bytes.end -= 1
        }),
        ("empty term", |r| {
            r.terms[1].chunks.end = r.terms[1].chunks.start;
        }),
        ("term of another xorb", |r| {
            r.terms[1].xorb = xet_hash::chunk_hash(b"other");
        }),
        ("term before its fetch", |r| {
            let x = r.terms[0].xorb;
            for f in r.fetches.iter_mut().filter(|f| f.xorb == x) {
                f.chunks.start += 1;
            }
        }),
        ("no fetches", |r| r.fetches.clear()),
    ];
    for (what, lie) in lies {
        let cas = lying(store.clone(), *lie);
        let (got, e) = collect(cas, f.hash, None).await;
        let e = e.unwrap_or_else(|| panic!("{what}: no error"));
        assert!(matches!(e, CasError::Corrupt { .. }), "{what}: {e:?}");
        let text = e.to_string();
        assert!(
            text.contains(&f.hash.to_string()) && text.contains("xorb "),
            "{what}: {text}"
        );
        assert!(
            f.data.starts_with(&got),
            "{what}: wrong bytes before the error"
        );
    }
    // An offset into the first range past everything the terms hold: nothing, no panic.
    let cas = lying(store.clone(), |r| r.offset_into_first_range = u64::MAX);
    assert_eq!(bytes_of(cas, f.hash, None).await, b"");
}

/// Terms that one fetch serves are decoded from one fetch: a term split in two gives
/// the same bytes for one fetch, not two.
#[tokio::test]
async fn consecutive_terms_in_one_fetch_share_its_decode() {
    let c = corpus();
    let (store, _) = store(&c).await;
    let f = &c.files[0];
    let whole = store.reconstruction(&f.hash, None).await.unwrap();
    assert!(whole.terms[0].chunks.len() >= 2, "{:?}", whole.terms[0]);
    // The file's first term starts with its first chunk.
    let first_len = f.chunk_ends[0];
    let cas = lying(store.clone(), move |r| {
        let t = r.terms[0].clone();
        let mut a = t.clone();
        a.chunks.end = t.chunks.start + 1;
        a.unpacked_length = first_len;
        let mut b = t;
        b.chunks.start += 1;
        b.unpacked_length -= first_len;
        r.terms.splice(0..1, [a, b]);
    });
    let w = Wrapper::new(cas);
    assert_eq!(bytes_of(w.clone(), f.hash, None).await, f.data);
    assert_eq!(w.fetches(), whole.fetches.len() as u64);
}

/// A dropped receiver stops the work: the fetches after it are never made.
#[tokio::test]
async fn a_dropped_receiver_stops_the_work() {
    let c = build(&[random(16 << 20, 44)], 256 << 10);
    let (store, _) = store(&c).await;
    let f = &c.files[0];
    let w = Wrapper::new(store);
    let mut rx = file_stream(w.clone(), f.hash, None);
    let first = rx.recv().await.unwrap().unwrap();
    assert!(f.data.starts_with(&first));
    drop(rx);
    tokio::time::sleep(Duration::from_millis(300)).await;
    let n = w.fetches();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(w.fetches(), n, "still fetching");
    // What may have been fetched: the piece received, four waiting, one being joined
    // (about 1 MiB each), the fetch being handed out and the one decoded ahead: about
    // 8 MiB of the file's 16 MiB, so well under all of its fetches.
    assert!(
        (n as usize) <= c.xorbs.len() / 2 + 2,
        "{n} fetches of {}",
        c.xorbs.len()
    );
}

/// Checked, a stream ends at a chunk whose hash is not its xorb's, before handing out
/// any of its fetch; unchecked, a flipped byte of a stored (uncompressed) chunk decodes.
#[tokio::test]
async fn a_checked_stream_ends_at_a_chunk_that_is_not_its_xorbs() {
    let c = build(&[random(1_000_000, 13)], 1 << 26);
    let (store, backend) = store(&c).await;
    let (f, x) = (&c.files[0], &c.xorbs[0]);
    let range = Some(ByteRange::new(1_000, 900_000));
    let checked = || Some(Arc::new(ChunkHashes::default()));
    let good = collect_from(file_stream_checked(store.clone(), f.hash, range, checked())).await;
    assert!(good.1.is_none(), "{:?}", good.1);
    assert_eq!(good.0, f.data[1_000..900_000]);
    let victim = x.info().chunks[7];
    corrupt(&backend, &x.hash(), (victim.offset + 8 + 64) as usize).await;
    let (got, e) = collect(store.clone(), f.hash, range).await;
    assert!(
        e.is_none() && got != f.data[1_000..900_000],
        "unchecked: decodes"
    );
    let (got, e) = collect_from(file_stream_checked(store.clone(), f.hash, range, checked())).await;
    let e = e.expect("an error");
    assert!(matches!(e, CasError::Corrupt { .. }), "{e:?}");
    let text = e.to_string();
    assert!(
        text.contains(&format!("chunk 7 of xorb {}", x.hash())),
        "{text}"
    );
    assert!(got.is_empty(), "nothing of the fetch was handed out");
}

/// Readers of the same xorb at once share one footer request, and later ones use the
/// kept footer.
#[tokio::test]
async fn concurrent_checked_streams_ask_for_a_footer_once() {
    let c = build(&[random(1_000_000, 15)], 1 << 26);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    w.serve_footers.store(true, Ordering::SeqCst);
    let f = &c.files[0];
    let hashes = Arc::new(ChunkHashes::default());
    let read = |a: u64, b: u64| {
        let rx = file_stream_checked(
            w.clone(),
            f.hash,
            Some(ByteRange::new(a, b)),
            Some(hashes.clone()),
        );
        collect_from(rx)
    };
    let got =
        futures_util::future::join_all((0..8u64).map(|k| read(k * 100_000, k * 100_000 + 50_000)))
            .await;
    for (k, (bytes, e)) in got.into_iter().enumerate() {
        assert!(e.is_none(), "{e:?}");
        assert_eq!(bytes, f.data[k * 100_000..k * 100_000 + 50_000]);
    }
    let (bytes, e) = read(0, 1_000_000).await;
    assert!(e.is_none() && bytes == f.data);
    assert_eq!(
        w.footers_asked.load(Ordering::SeqCst),
        1,
        "one xorb, one request"
    );
}
