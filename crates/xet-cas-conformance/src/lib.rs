//! The conformance suite every [`Cas`] implementation passes: the in-memory store, the
//! filesystem store, and the HTTP client against `xet serve`.
//!
//! Each case is a public async function taking a **fresh, empty** store; failures panic
//! with a message naming the case and what differed. Run them all from any crate's tests
//! with [`cas_conformance_tests!`](crate::cas_conformance_tests) (one `#[tokio::test]`
//! per case) or [`run_all`]. The data are real xorbs and shards built with the format
//! crates from deterministic generated files: several files, one sharing chunks with
//! another, the empty file, a file spanning two xorbs, a file of repeated chunks.
//!
//! [`populate`] and [`check_populated`] split the happy path in two so a persistent store
//! can be dropped and reopened in between.
//!
//! Fetches are only ever taken from reconstruction answers (never fabricated), so an
//! HTTP client that follows presigned URLs passes too.
//!
//! Two more suites: [`backend`] for every `ObjectBackend`, and [`repos`] for every
//! `xet_hub::RepoStore` (run on two instances sharing one backend).

pub mod backend;
mod fixture;
pub use fixture::{Upload, upload_of};
mod format;
pub mod gc_store;
pub mod repos;

use std::any::Any;
use std::collections::HashMap;
use std::future::Future;
use std::ops::Deref;

use bytes::Bytes;
use xet_hash::MerkleHash;

use fixture::{Fixture, FixtureFile, fixture};
use xet_cas::{
    ByteRange, Cas, CasError, ChunkRange, ObjectKind, Reconstruction, XorbBody, XorbPieces,
};
use xet_store::format::{ShardChunk, ShardContent, ShardFile, ShardTerm, ShardXorb};

/// A store under test, plus whatever must outlive it (a temporary directory, a server).
/// Dropped in order: the store first, then the guard.
pub struct UnderTest {
    cas: Box<dyn Cas>,
    _guard: Box<dyn Any + Send + Sync>,
}

impl UnderTest {
    pub fn new(cas: impl Cas + 'static) -> Self {
        UnderTest {
            cas: Box::new(cas),
            _guard: Box::new(()),
        }
    }

    pub fn with_guard(cas: impl Cas + 'static, guard: impl Any + Send + Sync) -> Self {
        UnderTest {
            cas: Box::new(cas),
            _guard: Box::new(guard),
        }
    }
}

impl Deref for UnderTest {
    type Target = dyn Cas;
    fn deref(&self) -> &(dyn Cas + 'static) {
        &*self.cas
    }
}

/// One `#[tokio::test]` per conformance case. `$make` is a function or closure with no
/// arguments returning a future of a [`UnderTest`] holding a fresh, empty store. The
/// calling crate needs `tokio` (macros, multi-thread runtime) as a dev-dependency.
///
/// ```ignore
/// mod conformance {
///     async fn make() -> xet_cas_conformance::UnderTest {
///         xet_cas_conformance::UnderTest::new(xet_store::MemoryStore::in_memory().await.unwrap())
///     }
///     xet_cas_conformance::cas_conformance_tests!(make);
/// }
/// ```
#[macro_export]
macro_rules! cas_conformance_tests {
    ($make:expr) => {
        $crate::cas_conformance_tests!(@cases $make;
            empty_store, xorb_rejections, xorb_uploads, shard_rejections, reconstructions,
            range_errors, empty_file, dedup, fetch_errors, range_streams, concurrent_uploads, xorb_limits,
            xorb_pieces, received_xorbs, xorb_footers);
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let subject = ($make)().await;
                $crate::$case(&*subject).await;
            }
        )*
    };
}

/// Every case, each on a fresh store from `make`.
pub async fn run_all<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = UnderTest>,
{
    empty_store(&*make().await).await;
    xorb_rejections(&*make().await).await;
    xorb_uploads(&*make().await).await;
    shard_rejections(&*make().await).await;
    reconstructions(&*make().await).await;
    range_errors(&*make().await).await;
    empty_file(&*make().await).await;
    dedup(&*make().await).await;
    fetch_errors(&*make().await).await;
    range_streams(&*make().await).await;
    concurrent_uploads(&*make().await).await;
    xorb_limits(&*make().await).await;
    xorb_pieces(&*make().await).await;
    received_xorbs(&*make().await).await;
    xorb_footers(&*make().await).await;
}

// ---------------------------------------------------------------------------------------
// Helpers

#[track_caller]
/// `r` with its error as text (the whole chain), so a test can compare it with an
/// expected `Ok` value and still show the error when it is one: `CasError` has no
/// `PartialEq`, as its causes (any error type) have none.
pub fn text_err<T>(r: xet_cas::Result<T>) -> Result<T, String> {
    r.map_err(|e| xet_cas::error_chain(&e))
}

fn expect_err<T: std::fmt::Debug>(
    r: xet_cas::Result<T>,
    what: &str,
    ok: impl Fn(&CasError) -> bool,
) -> CasError {
    match r {
        Ok(v) => panic!("{what}: expected an error, got Ok({v:?})"),
        Err(e) if ok(&e) => e,
        Err(e) => panic!("{what}: wrong error {e:?}"),
    }
}

fn is_not_found(kind: ObjectKind, hash: MerkleHash) -> impl Fn(&CasError) -> bool {
    move |e| matches!(e, CasError::NotFound { kind: k, hash: h } if *k == kind && *h == hash)
}

fn is_invalid_xorb(e: &CasError) -> bool {
    matches!(e, CasError::InvalidXorb { .. })
}

fn is_invalid_shard(e: &CasError) -> bool {
    matches!(e, CasError::InvalidShard { .. })
}

async fn upload_xorbs(cas: &dyn Cas, f: &Fixture) {
    for (i, x) in f.xorbs.iter().enumerate() {
        let r = cas
            .put_xorb(&x.hash, Bytes::from(x.body.clone()).into())
            .await;
        assert_eq!(
            text_err(r),
            Ok(true),
            "uploading fixture xorb {i} ({})",
            x.hash
        );
    }
}

async fn upload_shards(cas: &dyn Cas, f: &Fixture) {
    for i in 0..f.shards.len() {
        let r = cas.put_shard(Bytes::from(f.shard_bytes(i))).await;
        assert_eq!(text_err(r), Ok(true), "uploading fixture shard {i}");
    }
}

/// Files that no valid upload has registered yet must be unknown.
async fn assert_unregistered(cas: &dyn Cas, files: &[&FixtureFile], after: &str) {
    for file in files.iter().filter(|f| !f.hash.is_zero()) {
        assert_eq!(
            text_err(cas.file_size(&file.hash).await),
            Ok(None),
            "{after}: file_size of {}",
            file.name
        );
        expect_err(
            cas.reconstruction(&file.hash, None).await,
            &format!("{after}: reconstruction of {}", file.name),
            is_not_found(ObjectKind::File, file.hash),
        );
    }
}

/// Download `file` (or bytes `range` of it) through the reconstruction API exactly as a
/// client does: fetch every range, decode the chunks, concatenate the terms, skip
/// `offset_into_first_range`, cut to the range. Checks the answer's structure on the way
/// (every term in a fetch, whole chunks, exact lengths, trimmed first term) and returns
/// the first violation as an error. `size` is the file size, to cut the tail.
pub async fn read_file(
    cas: &dyn Cas,
    file: &MerkleHash,
    size: u64,
    range: Option<ByteRange>,
) -> Result<Vec<u8>, String> {
    let r: Reconstruction = cas
        .reconstruction(file, range)
        .await
        .map_err(|e| format!("reconstruction failed: {e}"))?;
    let mut decoded: HashMap<(MerkleHash, u32), Vec<Vec<u8>>> = HashMap::new();
    for fetch in &r.fetches {
        if fetch.chunks.is_empty() || fetch.bytes.is_empty() {
            return Err(format!("empty fetch {fetch:?}"));
        }
        let bytes = cas
            .fetch_xorb_range(fetch)
            .await
            .map_err(|e| format!("fetching {fetch:?}: {e}"))?;
        if bytes.len() as u64 != fetch.bytes.len() {
            return Err(format!("fetch {fetch:?} returned {} bytes", bytes.len()));
        }
        let chunks = format::decode_chunks(&bytes)
            .map_err(|e| format!("fetch {fetch:?} does not decode: {e}"))?;
        if chunks.len() as u32 != fetch.chunks.len() {
            return Err(format!("fetch {fetch:?} holds {} chunks", chunks.len()));
        }
        decoded.insert((fetch.xorb, fetch.chunks.start), chunks);
    }
    let mut out = Vec::new();
    for (i, t) in r.terms.iter().enumerate() {
        let fetch = r
            .fetch_for(t)
            .ok_or_else(|| format!("term {i} {t:?} is in no fetch"))?;
        let chunks = &decoded[&(fetch.xorb, fetch.chunks.start)];
        let from = (t.chunks.start - fetch.chunks.start) as usize;
        let to = (t.chunks.end - fetch.chunks.start) as usize;
        let before = out.len();
        for c in &chunks[from..to] {
            out.extend_from_slice(c);
        }
        if (out.len() - before) as u64 != t.unpacked_length {
            return Err(format!(
                "term {i} holds {} bytes, unpacked_length says {}",
                out.len() - before,
                t.unpacked_length
            ));
        }
    }
    let skip = r.offset_into_first_range as usize;
    if skip > out.len() {
        return Err(format!(
            "offset_into_first_range {skip} past the {} bytes of the terms",
            out.len()
        ));
    }
    if let (Some(t), Some(_)) = (r.terms.first(), range)
        && r.offset_into_first_range >= t.unpacked_length
    {
        return Err("first term not trimmed to chunk granularity".into());
    }
    let mut out = out.split_off(skip);
    let want = match range {
        Some(rg) => rg.end.min(size).saturating_sub(rg.start) as usize,
        None => size as usize,
    };
    if out.len() < want {
        return Err(format!(
            "reconstruction holds {} bytes, {want} are needed",
            out.len()
        ));
    }
    out.truncate(want);
    Ok(out)
}

/// [`read_file`] on a fixture file, also checking every fetched range against the
/// fixture xorb's chunk region.
async fn download(
    cas: &dyn Cas,
    f: &Fixture,
    file: &FixtureFile,
    range: Option<ByteRange>,
) -> Vec<u8> {
    let what = format!("{} {range:?}", file.name);
    if let Ok(r) = cas.reconstruction(&file.hash, range).await {
        for fetch in &r.fetches {
            let Some(xi) = f.xorb_index(&fetch.xorb) else {
                panic!("{what}: fetch from unknown xorb {fetch:?}")
            };
            let body = &f.xorbs[xi].body;
            assert!(
                fetch.bytes.end <= body.len() as u64,
                "{what}: fetch {fetch:?} past the chunk region"
            );
            let bytes = cas
                .fetch_xorb_range(fetch)
                .await
                .unwrap_or_else(|e| panic!("{what}: fetching {fetch:?}: {e}"));
            assert!(
                bytes.as_ref() == &body[fetch.bytes.start as usize..fetch.bytes.end as usize],
                "{what}: fetch {fetch:?} bytes differ from the xorb's chunk region"
            );
        }
    }
    read_file(cas, &file.hash, file.data.len() as u64, range)
        .await
        .unwrap_or_else(|e| panic!("{what}: {e}"))
}

async fn check_file(cas: &dyn Cas, f: &Fixture, file: &FixtureFile, range: Option<ByteRange>) {
    let got = download(cas, f, file, range).await;
    let (s, e) = match range {
        Some(r) => (r.start as usize, (r.end as usize).min(file.data.len())),
        None => (0, file.data.len()),
    };
    assert!(
        got == file.data[s..e],
        "{} {range:?}: reassembled bytes differ from the original",
        file.name
    );
}

/// Ranges on chunk, xorb and file boundaries (and one byte either side).
fn interesting_ranges(file: &FixtureFile) -> Vec<ByteRange> {
    let n = file.data.len() as u64;
    let mut v = vec![
        ByteRange::new(0, n),
        ByteRange::new(0, 1),
        ByteRange::new(n - 1, n),
        ByteRange::new(n - 1, n + 1000),
        ByteRange::new(n / 3, 2 * n / 3 + 1),
        ByteRange::new(0, u64::MAX),
    ];
    for &(off, len, _) in file.chunks.iter().skip(1) {
        v.push(ByteRange::new(off, off + 1));
        v.push(ByteRange::new(off - 1, off + 1));
        v.push(ByteRange::new(off - 1, off));
        v.push(ByteRange::new(off, (off + len).min(n)));
        v.push(ByteRange::new(off, n));
        v.push(ByteRange::new(0, off));
    }
    v
}

// ---------------------------------------------------------------------------------------
// Cases

/// A new store knows nothing, except the empty file.
pub async fn empty_store(cas: &dyn Cas) {
    let f = fixture();
    let r = cas
        .reconstruction(&MerkleHash::ZERO, None)
        .await
        .expect("empty file reconstructs");
    assert!(
        r.terms.is_empty() && r.fetches.is_empty() && r.offset_into_first_range == 0,
        "empty file: {r:?}"
    );
    let a = f.file("random");
    assert_unregistered(cas, &[a], "empty store").await;
    expect_err(
        cas.reconstruction(&a.hash, Some(ByteRange::new(0, 10)))
            .await,
        "ranged reconstruction of an unknown file",
        is_not_found(ObjectKind::File, a.hash),
    );
    for x in &f.xorbs {
        assert_eq!(
            text_err(cas.xorb_size(&x.hash).await),
            Ok(None),
            "xorb_size of an unknown xorb"
        );
    }
    assert_eq!(
        text_err(cas.dedup_shard(&a.chunks[0].2).await),
        Ok(None),
        "dedup query on an empty store"
    );
}

/// Bad xorb bodies are rejected and leave nothing behind.
pub async fn xorb_rejections(cas: &dyn Cas) {
    let f = fixture();
    let (x0, x1) = (&f.xorbs[0], &f.xorbs[1]);
    let body = &x0.body;
    let mut corrupt = body.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0x55;
    let mut trailing = body.clone();
    trailing.extend_from_slice(&[1, 2, 3]);
    let mut bad_footer = x0.footered.clone();
    let at = body.len() + 8 + 32 + 8 + 4; // first chunk hash in the v1 footer
    bad_footer[at] ^= 1;
    let cases: Vec<(&str, MerkleHash, Vec<u8>)> = vec![
        ("body under another xorb's hash", x1.hash, body.clone()),
        (
            "truncated by one byte",
            x0.hash,
            body[..body.len() - 1].to_vec(),
        ),
        (
            "truncated to half",
            x0.hash,
            body[..body.len() / 2].to_vec(),
        ),
        (
            "truncated inside the first header",
            x0.hash,
            body[..5].to_vec(),
        ),
        ("one byte flipped", x0.hash, corrupt),
        ("trailing garbage", x0.hash, trailing),
        ("empty body", x0.hash, Vec::new()),
        ("footer with a wrong chunk hash", x0.hash, bad_footer),
    ];
    for (what, hash, bytes) in cases {
        expect_err(
            cas.put_xorb(&hash, Bytes::from(bytes).into()).await,
            &format!("xorb {what}"),
            is_invalid_xorb,
        );
        for x in &f.xorbs {
            assert_eq!(
                text_err(cas.xorb_size(&x.hash).await),
                Ok(None),
                "after rejecting a xorb ({what}), xorb_size"
            );
        }
    }
    // The store is unchanged: the real uploads still insert.
    upload_xorbs(cas, f).await;
}

/// Xorb uploads: sizes, idempotency, the footered form.
pub async fn xorb_uploads(cas: &dyn Cas) {
    let f = fixture();
    let (x0, x1) = (&f.xorbs[0], &f.xorbs[1]);
    assert_eq!(
        text_err(
            cas.put_xorb(&x0.hash, Bytes::from(x0.body.clone()).into())
                .await
        ),
        Ok(true),
        "first upload"
    );
    assert_eq!(
        text_err(
            cas.put_xorb(&x0.hash, Bytes::from(x0.body.clone()).into())
                .await
        ),
        Ok(false),
        "second upload"
    );
    assert_eq!(
        text_err(
            cas.put_xorb(&x0.hash, Bytes::from(x0.footered.clone()).into())
                .await
        ),
        Ok(false),
        "footered re-upload"
    );
    assert_eq!(
        text_err(cas.xorb_size(&x0.hash).await),
        Ok(Some(x0.body.len() as u64)),
        "xorb_size is the chunk region length"
    );
    // A footered upload is accepted and sized by its chunk region.
    assert_eq!(
        text_err(
            cas.put_xorb(&x1.hash, Bytes::from(x1.footered.clone()).into())
                .await
        ),
        Ok(true),
        "footered upload"
    );
    assert_eq!(
        text_err(cas.xorb_size(&x1.hash).await),
        Ok(Some(x1.body.len() as u64)),
        "footered upload: xorb_size"
    );
    assert_eq!(
        text_err(
            cas.put_xorb(&x1.hash, Bytes::from(x1.body.clone()).into())
                .await
        ),
        Ok(false),
        "body after footered"
    );
    assert_eq!(
        text_err(cas.xorb_size(&f.xorbs[2].hash).await),
        Ok(None),
        "xorb not uploaded yet"
    );
    // Ranges served from the footered upload are the chunk region's bytes.
    let x2 = &f.xorbs[2];
    assert_eq!(
        text_err(
            cas.put_xorb(&x2.hash, Bytes::from(x2.body.clone()).into())
                .await
        ),
        Ok(true)
    );
    upload_shards(cas, f).await;
    for file in &f.files {
        check_file(cas, f, file, None).await;
    }
}

/// `body` cut at `cuts` (offsets, in order, within the body).
fn pieces_of(body: &[u8], cuts: &[usize]) -> XorbPieces {
    let mut p = XorbPieces::new();
    let mut at = 0;
    for &c in cuts.iter().chain(std::iter::once(&body.len())) {
        p.push(Bytes::copy_from_slice(&body[at..c]));
        at = c;
    }
    p
}

/// Xorb uploads in pieces: cut anywhere (inside chunk headers too), a body is stored as
/// its concatenation; a damaged one is refused and nothing is stored.
/// Two uploads every store refuses: the first fixture xorb with one byte flipped, and
/// its body under the second xorb's hash.
fn bad_xorb_bodies(f: &Fixture) -> [(&'static str, MerkleHash, Vec<u8>); 2] {
    let (x0, x1) = (&f.xorbs[0], &f.xorbs[1]);
    let mut corrupt = x0.body.clone();
    let mid = corrupt.len() / 2;
    corrupt[mid] ^= 0x55;
    [
        ("one byte flipped", x0.hash, corrupt),
        ("body under another xorb's hash", x1.hash, x0.body.clone()),
    ]
}

pub async fn xorb_pieces(cas: &dyn Cas) {
    let f = fixture();
    let x0 = &f.xorbs[0];
    let n = x0.body.len();
    for (what, hash, body) in bad_xorb_bodies(f) {
        expect_err(
            cas.put_xorb(&hash, XorbBody::Pieces(pieces_of(&body, &[1, 9, n / 3])))
                .await,
            &format!("xorb in pieces, {what}"),
            is_invalid_xorb,
        );
        assert_eq!(
            text_err(cas.xorb_size(&hash).await),
            Ok(None),
            "after rejecting a xorb in pieces ({what}), xorb_size"
        );
    }
    for (i, cuts) in [vec![], vec![1, 5, 8, 9], (1..n).step_by(997).collect()]
        .into_iter()
        .enumerate()
    {
        assert_eq!(
            text_err(
                cas.put_xorb(&x0.hash, XorbBody::Pieces(pieces_of(&x0.body, &cuts)))
                    .await
            ),
            Ok(i == 0),
            "xorb in {} pieces, upload {i}",
            cuts.len() + 1
        );
    }
    assert_eq!(text_err(cas.xorb_size(&x0.hash).await), Ok(Some(n as u64)));
    for x in &f.xorbs[1..] {
        let cuts: Vec<usize> = (7..x.body.len()).step_by(4099).collect();
        assert_eq!(
            text_err(
                cas.put_xorb(&x.hash, XorbBody::Pieces(pieces_of(&x.body, &cuts)))
                    .await
            ),
            Ok(true)
        );
    }
    upload_shards(cas, f).await;
    for file in &f.files {
        check_file(cas, f, file, None).await;
    }
}

/// `body` through a [`xet_cas::XorbReceiver`] as if it arrived in pieces ending at `cuts`,
/// declared as `hash`.
fn received(body: &[u8], cuts: &[usize], hash: &MerkleHash) -> xet_cas::ReceivedXorb {
    let mut r = xet_cas::XorbReceiver::new(body.len() as u64);
    for &c in cuts {
        r.advance(&body[..c]);
    }
    r.finish(Bytes::copy_from_slice(body), hash)
}

/// Xorbs received through a [`xet_cas::XorbReceiver`]: a good footer-less body is verified
/// on the way in and stored as if uploaded whole; a damaged one, one under another
/// xorb's hash, or a footered one is not taken on the receiver's word, and is refused
/// (or, footered, accepted) as `put_xorb` would.
pub async fn received_xorbs(cas: &dyn Cas) {
    let f = fixture();
    let (x0, x1) = (&f.xorbs[0], &f.xorbs[1]);
    let n = x0.body.len();
    let cuts = [1, 8, 9, n / 3, n - 1, n];
    for (what, hash, body) in bad_xorb_bodies(f) {
        let r = received(&body, &cuts, &hash);
        assert!(!r.is_verified(), "receiver verified a bad xorb ({what})");
        expect_err(
            cas.put_xorb(&hash, XorbBody::Received(r)).await,
            &format!("received xorb, {what}"),
            is_invalid_xorb,
        );
        assert_eq!(
            text_err(cas.xorb_size(&hash).await),
            Ok(None),
            "after rejecting a received xorb ({what}), xorb_size"
        );
    }
    let r = received(&x0.body, &cuts, &x0.hash);
    assert!(r.is_verified(), "receiver did not verify a good xorb");
    assert_eq!(
        text_err(cas.put_xorb(&x0.hash, XorbBody::Received(r.clone())).await),
        Ok(true)
    );
    assert_eq!(
        text_err(cas.put_xorb(&x0.hash, XorbBody::Received(r)).await),
        Ok(false)
    );
    assert_eq!(text_err(cas.xorb_size(&x0.hash).await), Ok(Some(n as u64)));
    let r = received(&x0.body, &cuts[..2], &x0.hash);
    assert!(
        !r.is_verified(),
        "the receiver walked the body to its end itself"
    );
    let r = received(&x1.footered, &[x1.footered.len()], &x1.hash);
    assert!(!r.is_verified(), "a footered body is verified by the store");
    assert_eq!(
        text_err(cas.put_xorb(&x1.hash, XorbBody::Received(r)).await),
        Ok(true)
    );
    assert_eq!(
        text_err(cas.xorb_size(&x1.hash).await),
        Ok(Some(x1.body.len() as u64))
    );
    for x in &f.xorbs[2..] {
        let cuts: Vec<usize> = (7..=x.body.len())
            .step_by(4099)
            .chain([x.body.len()])
            .collect();
        let r = received(&x.body, &cuts, &x.hash);
        assert!(r.is_verified());
        assert_eq!(
            text_err(cas.put_xorb(&x.hash, XorbBody::Received(r)).await),
            Ok(true)
        );
    }
    upload_shards(cas, f).await;
    for file in &f.files {
        check_file(cas, f, file, None).await;
    }
}

/// Bad shards are rejected with the right error and register nothing.
pub async fn shard_rejections(cas: &dyn Cas) {
    let f = fixture();
    upload_xorbs(cas, f).await;
    let all: Vec<&FixtureFile> = f.files.iter().collect();
    let b = f.file("shares_random");
    let a = f.file("random");
    let text = f.file("text_two_xorbs");
    let one = |file: &FixtureFile| ShardContent {
        files: vec![file.shard.clone()],
        xorbs: vec![],
    };

    // A file in a xorb that was never uploaded.
    let orphan_data = fixture::random_bytes(20_000, 99);
    let orphan = format::build_xorb(&[&orphan_data]).expect("orphan xorb");
    let orphan_file = {
        let c = orphan.chunks[0];
        let term = ShardTerm {
            xorb: orphan.hash,
            chunks: ChunkRange::new(0, 1),
            unpacked: c.1,
        };
        ShardFile {
            hash: xet_hash::file_hash(&[c]),
            terms: vec![term],
            verification: Some(vec![xet_hash::verification_hash(&[c.0])]),
            sha256: Some([7; 32]),
        }
    };
    let missing_term = ShardContent {
        files: vec![orphan_file.clone()],
        xorbs: vec![],
    };
    let mut missing_cas = f.shards[0].clone();
    missing_cas.xorbs.push(ShardXorb {
        hash: orphan.hash,
        num_bytes_in_cas: orphan.chunks[0].1,
        num_bytes_on_disk: 0,
        chunks: vec![ShardChunk {
            hash: orphan.chunks[0].0,
            byte_range_start: 0,
            unpacked: orphan.chunks[0].1,
        }],
    });
    for (what, content) in [
        ("a term in a missing xorb", missing_term),
        ("a CAS entry for a missing xorb", missing_cas),
    ] {
        let bytes = format::upload_shard_bytes(&content).expect("serializes");
        let e = expect_err(cas.put_shard(Bytes::from(bytes)).await, what, |e| {
            matches!(e, CasError::MissingXorb { .. })
        });
        assert!(
            matches!(e, CasError::MissingXorb { hash } if hash == orphan.hash),
            "{what}: names the missing xorb: {e:?}"
        );
        assert_unregistered(cas, &all, what).await;
    }

    let mut invalid: Vec<(&str, ShardContent)> = Vec::new();
    let mut s = one(text);
    let t = s.files[0].terms.last_mut().expect("terms");
    let xi = f.xorb_index(&t.xorb).expect("fixture xorb");
    t.chunks.end = f.xorbs[xi].chunks.len() as u32 + 1;
    invalid.push(("a term past the end of its xorb", s));
    let mut s = one(b);
    s.files[0].terms[0].unpacked += 1;
    invalid.push(("a wrong unpacked_segment_bytes", s));
    let mut s = one(b);
    s.files[0].verification.as_mut().expect("verification")[0] = xet_hash::chunk_hash(b"wrong");
    invalid.push(("a wrong verification hash", s));
    let mut s = one(b);
    s.files[0].verification = None;
    invalid.push(("no verification entries", s));
    let mut s = one(b);
    s.files[0].hash = a.hash;
    invalid.push(("a wrong file hash", s));
    let mut s = f.shards[0].clone();
    s.xorbs[0].chunks[0].hash = xet_hash::chunk_hash(b"not this chunk");
    invalid.push(("a CAS entry that differs from the stored xorb", s));
    let mut s = f.shards[0].clone();
    let mut bad = b.shard.clone();
    bad.terms[0].unpacked += 1;
    s.files.push(bad);
    invalid.push(("one good and one bad file", s));
    for (what, content) in invalid {
        let bytes = format::upload_shard_bytes(&content).unwrap_or_else(|e| panic!("{what}: {e}"));
        expect_err(
            cas.put_shard(Bytes::from(bytes)).await,
            &format!("shard with {what}"),
            is_invalid_shard,
        );
        assert_unregistered(cas, &all, what).await;
    }
    let mut truncated = f.shard_bytes(1);
    truncated.truncate(truncated.len() - 10);
    for (what, bytes) in [
        ("garbage", b"not a shard at all".to_vec()),
        ("nothing", Vec::new()),
        ("a truncated shard", truncated),
    ] {
        expect_err(
            cas.put_shard(Bytes::from(bytes)).await,
            &format!("shard that is {what}"),
            is_invalid_shard,
        );
        assert_unregistered(cas, &all, what).await;
    }

    // A file without a sha256 (no FileMetadataExt, as clients upload bucket files) is
    // accepted; it claims none.
    let mut s = one(b);
    s.files[0].sha256 = None;
    let bytes = format::upload_shard_bytes(&s).expect("serializes");
    assert_eq!(
        text_err(cas.put_shard(Bytes::from(bytes)).await),
        Ok(true),
        "a shard without FileMetadataExt"
    );
    assert_eq!(
        text_err(cas.file_size(&b.hash).await),
        Ok(Some(b.data.len() as u64)),
        "the file of a shard without FileMetadataExt"
    );

    // The valid shards register, once.
    upload_shards(cas, f).await;
    for i in 0..f.shards.len() {
        assert_eq!(
            text_err(cas.put_shard(Bytes::from(f.shard_bytes(i))).await),
            Ok(false),
            "re-uploading shard {i}"
        );
    }
    for file in &f.files {
        check_file(cas, f, file, None).await;
    }
    expect_err(
        cas.reconstruction(&orphan_file.hash, None).await,
        "rejected file",
        is_not_found(ObjectKind::File, orphan_file.hash),
    );
}

/// Upload everything (xorbs, then shards).
pub async fn populate(cas: &dyn Cas) {
    let f = fixture();
    upload_xorbs(cas, f).await;
    upload_shards(cas, f).await;
}

/// After [`populate`] (possibly in an earlier process): every file reconstructs, sizes are
/// right, uploads are no-ops, dedup finds first chunks.
pub async fn check_populated(cas: &dyn Cas) {
    let f = fixture();
    for x in &f.xorbs {
        assert_eq!(
            text_err(cas.xorb_size(&x.hash).await),
            Ok(Some(x.body.len() as u64)),
            "xorb_size"
        );
        assert_eq!(
            text_err(
                cas.put_xorb(&x.hash, Bytes::from(x.body.clone()).into())
                    .await
            ),
            Ok(false),
            "xorb re-upload"
        );
    }
    for i in 0..f.shards.len() {
        assert_eq!(
            text_err(cas.put_shard(Bytes::from(f.shard_bytes(i))).await),
            Ok(false),
            "shard {i} re-upload"
        );
    }
    for file in &f.files {
        assert_eq!(
            text_err(cas.file_size(&file.hash).await),
            Ok(Some(file.data.len() as u64)),
            "file_size of {}",
            file.name
        );
        check_file(cas, f, file, None).await;
        if file.data.len() > 1 {
            check_file(
                cas,
                f,
                file,
                Some(ByteRange::new(1, file.data.len() as u64)),
            )
            .await;
        }
    }
    check_dedup(cas, f).await;
}

/// A chunk that [`populate`] makes findable through global dedup.
pub fn dedup_probe() -> MerkleHash {
    fixture().files[0].chunks[0].2
}

/// The chunk hash key in a dedup answer's footer (zero if unkeyed). Panics if the answer
/// does not parse.
pub fn dedup_answer_key(answer: &[u8]) -> MerkleHash {
    format::parse_dedup_answer(answer)
        .expect("dedup answer parses")
        .key
}

/// Whole files and ranges on chunk, xorb and file boundaries reassemble exactly.
pub async fn reconstructions(cas: &dyn Cas) {
    let f = fixture();
    populate(cas).await;
    for file in &f.files {
        assert_eq!(
            text_err(cas.file_size(&file.hash).await),
            Ok(Some(file.data.len() as u64)),
            "file_size of {}",
            file.name
        );
        check_file(cas, f, file, None).await;
        if file.data.is_empty() {
            continue;
        }
        let r = cas
            .reconstruction(&file.hash, None)
            .await
            .expect("reconstruction");
        assert_eq!(
            r.offset_into_first_range, 0,
            "{}: whole file offset",
            file.name
        );
        assert_eq!(
            r.unpacked_len(),
            file.data.len() as u64,
            "{}: whole file terms",
            file.name
        );
        assert_eq!(
            r.terms.len(),
            file.shard.terms.len(),
            "{}: whole file has the shard's terms",
            file.name
        );
        for (t, s) in r.terms.iter().zip(&file.shard.terms) {
            assert_eq!(
                (t.xorb, t.chunks, t.unpacked_length),
                (s.xorb, s.chunks, s.unpacked),
                "{}: term",
                file.name
            );
        }
        let r2 = cas
            .reconstruction(&file.hash, Some(ByteRange::new(0, file.data.len() as u64)))
            .await
            .expect("reconstruction");
        assert_eq!(
            r2.terms, r.terms,
            "{}: a range covering the file is the whole file",
            file.name
        );
        for range in interesting_ranges(file) {
            check_file(cas, f, file, Some(range)).await;
        }
    }
    // A file spanning two xorbs references both; a file with repeated chunks has
    // overlapping terms served by one fetch.
    let text = f.file("text_two_xorbs");
    let r = cas
        .reconstruction(&text.hash, None)
        .await
        .expect("reconstruction");
    let mut xorbs: Vec<MerkleHash> = r.terms.iter().map(|t| t.xorb).collect();
    xorbs.dedup();
    assert!(
        xorbs.len() >= 2,
        "text_two_xorbs should span two xorbs: {r:?}"
    );
    let zeros = f.file("zeros");
    let r = cas
        .reconstruction(&zeros.hash, None)
        .await
        .expect("reconstruction");
    assert!(
        r.terms.len() >= 2 && r.fetches.len() == 1,
        "zeros: overlapping terms merge into one fetch: {r:?}"
    );
}

/// Range edge cases: start at or past the end (the empty file's every range), end past
/// the end, empty ranges inside and at the end.
pub async fn range_errors(cas: &dyn Cas) {
    let f = fixture();
    populate(cas).await;
    for file in &f.files {
        let n = file.data.len() as u64;
        for range in [
            ByteRange::new(n, n + 10),
            ByteRange::new(n + 1, n + 11),
            ByteRange::new(n + 1_000_000, n + 1_000_010),
            ByteRange::new(n, n),
            ByteRange::new(n + 1, n + 1),
        ] {
            assert_unsatisfiable(cas, file.hash, n, range, file.name).await;
        }
        if n > 0 {
            check_file(cas, f, file, Some(ByteRange::new(n / 2, n + 12345))).await;
            let r = cas
                .reconstruction(&file.hash, Some(ByteRange::new(n - 1, n - 1)))
                .await
                .unwrap_or_else(|e| panic!("{}: empty range inside the file: {e}", file.name));
            assert!(
                r.terms.is_empty() && r.fetches.is_empty(),
                "{}: an empty range inside the file has no terms: {r:?}",
                file.name
            );
        }
    }
    let unknown = xet_hash::chunk_hash(b"no such file");
    expect_err(
        cas.reconstruction(&unknown, Some(ByteRange::new(0, 1)))
            .await,
        "unknown file with a range",
        is_not_found(ObjectKind::File, unknown),
    );
}

/// `range` of `file` (`size` bytes) must be `RangeNotSatisfiable` naming the file, the
/// range's start and the size.
async fn assert_unsatisfiable(
    cas: &dyn Cas,
    file: MerkleHash,
    size: u64,
    range: ByteRange,
    name: &str,
) {
    let what = format!(
        "{name}: range {}..{} of {size} bytes",
        range.start, range.end
    );
    let e = expect_err(cas.reconstruction(&file, Some(range)).await, &what, |e| {
        matches!(e, CasError::RangeNotSatisfiable { .. })
    });
    assert!(
        matches!(
            e,
            CasError::RangeNotSatisfiable { file: f, start, size: s }
                if f == file && start == range.start && s == size
        ),
        "{what}: {e:?}"
    );
}

/// The empty file (hash zero), registered or not: 0 bytes, no terms without a range,
/// `RangeNotSatisfiable { start, size: 0 }` with any range (`0..0` included), as a
/// range starting at or past the end of any other file.
pub async fn empty_file(cas: &dyn Cas) {
    async fn check(cas: &dyn Cas, when: &str) {
        let zero = MerkleHash::ZERO;
        assert_eq!(
            text_err(cas.file_size(&zero).await),
            Ok(Some(0)),
            "{when}: file_size of the empty file"
        );
        let r = cas
            .reconstruction(&zero, None)
            .await
            .unwrap_or_else(|e| panic!("{when}: the empty file reconstructs: {e}"));
        assert!(
            r.terms.is_empty() && r.fetches.is_empty() && r.offset_into_first_range == 0,
            "{when}: the empty file has no terms: {r:?}"
        );
        assert_eq!(
            read_file(cas, &zero, 0, None).await,
            Ok(Vec::new()),
            "{when}: reading the empty file"
        );
        for range in [
            ByteRange::new(0, 0),
            ByteRange::new(0, 1),
            ByteRange::new(0, u64::MAX),
            ByteRange::new(0, u64::MAX - 1),
            ByteRange::new(5, 10),
            ByteRange::new(u64::MAX - 1, u64::MAX),
        ] {
            assert_unsatisfiable(cas, zero, 0, range, &format!("{when}: the empty file")).await;
        }
    }
    check(cas, "fresh store").await;
    populate(cas).await;
    assert!(
        fixture().files.iter().any(|f| f.hash.is_zero()),
        "the fixture registers the empty file"
    );
    check(cas, "populated store").await;
}

async fn check_dedup(cas: &dyn Cas, f: &Fixture) {
    for file in f.files.iter().filter(|f| !f.data.is_empty()) {
        let chunk = file.chunks[0].2;
        let what = format!("dedup query for the first chunk of {}", file.name);
        let bytes = match cas.dedup_shard(&chunk).await {
            Ok(Some(b)) => b,
            other => panic!("{what}: {other:?}"),
        };
        let answer = format::parse_dedup_answer(&bytes)
            .unwrap_or_else(|e| panic!("{what}: does not parse: {e}"));
        assert_eq!(answer.num_files, 0, "{what}: file section must be empty");
        assert!(!answer.xorbs.is_empty(), "{what}: lists no xorb");
        if !answer.key.is_zero() {
            assert!(answer.expiry > 0, "{what}: keyed answer without an expiry");
            assert!(
                answer
                    .xorbs
                    .iter()
                    .all(|x| x.chunks.iter().all(|c| c.hash != chunk)),
                "{what}: raw chunk hash visible in a keyed answer"
            );
        }
        for x in &answer.xorbs {
            let xi = f
                .xorb_index(&x.hash)
                .unwrap_or_else(|| panic!("{what}: lists unknown xorb {}", x.hash));
            assert_eq!(
                x.chunks.len(),
                f.xorbs[xi].chunks.len(),
                "{what}: xorb {} listed partially",
                x.hash
            );
        }
        let hit = answer
            .find(&chunk)
            .unwrap_or_else(|| panic!("{what}: keyed lookup does not find the chunk"));
        let xi = f
            .xorb_index(&hit.xorb)
            .unwrap_or_else(|| panic!("{what}: hit in unknown xorb"));
        assert_eq!(
            f.xorbs[xi]
                .chunks
                .get(hit.chunk_index as usize)
                .map(|c| c.0),
            Some(chunk),
            "{what}: the hit does not point at the chunk"
        );
    }
    assert_eq!(
        text_err(
            cas.dedup_shard(&xet_hash::chunk_hash(b"never stored"))
                .await
        ),
        Ok(None),
        "dedup query for an unknown chunk"
    );
}

/// Global dedup after upload: the first chunk of every file is found in the right xorb.
pub async fn dedup(cas: &dyn Cas) {
    let f = fixture();
    populate(cas).await;
    check_dedup(cas, f).await;
}

/// Fetches outside a xorb's chunk region are errors, never short reads.
pub async fn fetch_errors(cas: &dyn Cas) {
    let f = fixture();
    populate(cas).await;
    let a = f.file("random");
    let r = cas
        .reconstruction(&a.hash, None)
        .await
        .expect("reconstruction");
    let fetch = r.fetches.last().expect("a fetch").clone();
    let (past, size) = ending_past_the_region(cas, &fetch).await;
    let tail = footer_bytes(cas, &fetch).await;
    past_the_region(
        cas.fetch_xorb_range(&past).await,
        &past,
        size,
        &tail,
        "ending",
    );
    let mut beyond = fetch.clone();
    beyond.bytes = ByteRange::new(size + 10, size + 20);
    past_the_region(
        cas.fetch_xorb_range(&beyond).await,
        &beyond,
        size,
        &tail,
        "starting",
    );
    let mut after = fetch.clone();
    after.bytes = ByteRange::new(size + 10, size + tail.len() as u64 + 1);
    assert!(
        cas.fetch_xorb_range(&after).await.is_err(),
        "a fetch ending past the stored xorb (chunk region and footer) must fail"
    );
    // The real fetch still works.
    let got = cas.fetch_xorb_range(&fetch).await.expect("fetch");
    assert_eq!(got.len() as u64, fetch.bytes.len());
}

/// The footer (and `info_length`) of `fetch`'s xorb as stored, or nothing if the CAS
/// gives none.
async fn footer_bytes(cas: &dyn Cas, fetch: &xet_cas::XorbFetch) -> Vec<u8> {
    let footer = cas.xorb_footer(fetch).await.expect("xorb_footer");
    footer.map_or(Vec::new(), |f| f.to_bytes())
}

/// A range `what` past the chunk region of `region` bytes: an error, or (over HTTP, where
/// the object goes on with the footer) exactly the chunk region's and footer's bytes
/// there; never a short read.
#[track_caller]
fn past_the_region(
    got: xet_cas::Result<Bytes>,
    fetch: &xet_cas::XorbFetch,
    region: u64,
    tail: &[u8],
    what: &str,
) {
    let Ok(got) = got else { return };
    let r = fetch.bytes;
    assert_eq!(
        got.len() as u64,
        r.len(),
        "a fetch {what} past the chunk region came out short"
    );
    let in_tail = &got[(region.max(r.start) - r.start) as usize..];
    let from = (r.start.max(region) - region) as usize;
    assert_eq!(
        tail.get(from..from + in_tail.len()),
        Some(in_tail),
        "a fetch {what} past the chunk region must fail or yield the footer's bytes"
    );
}

/// `fetch` extended to one byte past its xorb's chunk region, and the region's size.
async fn ending_past_the_region(
    cas: &dyn Cas,
    fetch: &xet_cas::XorbFetch,
) -> (xet_cas::XorbFetch, u64) {
    let size = cas
        .xorb_size(&fetch.xorb)
        .await
        .expect("xorb_size")
        .expect("stored");
    let mut past = fetch.clone();
    past.bytes = ByteRange::new(fetch.bytes.start, size + 1);
    (past, size)
}

/// Everything a range stream yields, concatenated; its first error otherwise.
pub async fn collect_stream(cas: &dyn Cas, fetch: &xet_cas::XorbFetch) -> xet_cas::Result<Vec<u8>> {
    let mut stream = cas.stream_xorb_range(fetch).await?;
    let mut out = Vec::new();
    while let Some(piece) = stream.next().await? {
        assert!(
            !piece.is_empty(),
            "stream of {fetch:?} yielded an empty piece"
        );
        out.extend_from_slice(&piece);
    }
    Ok(out)
}

/// Streamed ranges are exactly the fetched bytes, also for ranges that start or end
/// inside a chunk (a transfer resumed after a break asks for the rest of a range); a
/// range past the chunk region fails rather than coming out short.
pub async fn range_streams(cas: &dyn Cas) {
    let f = fixture();
    populate(cas).await;
    for file in &f.files {
        let Ok(r) = cas.reconstruction(&file.hash, None).await else {
            continue;
        };
        for fetch in &r.fetches {
            let whole = cas.fetch_xorb_range(fetch).await.expect("fetch");
            let got = collect_stream(cas, fetch)
                .await
                .unwrap_or_else(|e| panic!("{}: streaming {fetch:?}: {e}", file.name));
            assert!(got == whole, "{}: stream of {fetch:?} differs", file.name);
            // The rest of the range after an odd number of bytes, and a middle part.
            let len = fetch.bytes.len();
            for (a, b) in [(1, len), (len / 3 + 1, len), (len / 3, len - len / 3)] {
                if a >= b {
                    continue;
                }
                let mut part = fetch.clone();
                part.bytes = ByteRange::new(fetch.bytes.start + a, fetch.bytes.start + b);
                let got = collect_stream(cas, &part)
                    .await
                    .unwrap_or_else(|e| panic!("{}: streaming {part:?}: {e}", file.name));
                assert!(
                    got == whole[a as usize..b as usize],
                    "{}: stream of {part:?} differs from the same bytes fetched whole",
                    file.name
                );
            }
            let (past, size) = ending_past_the_region(cas, fetch).await;
            let tail = footer_bytes(cas, fetch).await;
            let streamed = collect_stream(cas, &past).await.map(Bytes::from);
            past_the_region(streamed, &past, size, &tail, "streamed");
        }
    }
}

/// The footer of every xorb a reconstruction points at, got where its fetch points:
/// it names the xorb, its chunk hashes and sizes make up the xorb hash, it puts the
/// fetch's chunks at the fetch's bytes, and each chunk fetched hashes to its entry.
pub async fn xorb_footers(cas: &dyn Cas) {
    let f = fixture();
    populate(cas).await;
    let mut seen = 0;
    for file in &f.files {
        let Ok(r) = cas.reconstruction(&file.hash, None).await else {
            continue;
        };
        for fetch in &r.fetches {
            let footer = cas
                .xorb_footer(fetch)
                .await
                .unwrap_or_else(|e| panic!("{}: footer of {fetch:?}: {e}", file.name))
                .unwrap_or_else(|| panic!("{}: no footer for {fetch:?}", file.name));
            assert_eq!(
                footer.xorb_hash, fetch.xorb,
                "{}: the footer names another xorb",
                file.name
            );
            let mut prev = 0u32;
            let entries: Vec<(MerkleHash, u64)> = footer
                .chunk_hashes
                .iter()
                .zip(&footer.unpacked_chunk_offsets)
                .map(|(h, &end)| (*h, u64::from(end - std::mem::replace(&mut prev, end))))
                .collect();
            assert_eq!(
                entries.len(),
                footer.chunk_hashes.len(),
                "{}: a v1 footer",
                file.name
            );
            assert_eq!(
                xet_hash::xorb_hash(&entries),
                fetch.xorb,
                "{}: footer hashes",
                file.name
            );
            let (a, b) = (fetch.chunks.start as usize, fetch.chunks.end as usize);
            let bytes = footer
                .chunk_byte_range(a..b)
                .expect("the fetch's chunks are in the xorb");
            assert_eq!(
                (bytes.start, bytes.end),
                (fetch.bytes.start, fetch.bytes.end),
                "{}",
                file.name
            );
            let data = cas.fetch_xorb_range(fetch).await.expect("fetch");
            let mut n = 0;
            for (i, chunk) in (a..b).zip(xet_xorb::chunks(&data)) {
                let chunk = chunk.expect("chunk header");
                let plain = chunk.decompress().expect("chunk payload");
                assert_eq!(
                    xet_hash::chunk_hash(&plain),
                    footer.chunk_hashes[i],
                    "{}: chunk {i}",
                    file.name
                );
                n += 1;
            }
            assert_eq!(n, b - a, "{}: chunks in {fetch:?}", file.name);
            seen += 1;
        }
    }
    assert!(seen > 0, "no fetch to ask a footer for");
}

/// Racing uploads of the same objects: exactly one wins, the others are no-ops.
pub async fn concurrent_uploads(cas: &dyn Cas) {
    let f = fixture();
    for x in &f.xorbs {
        let put = || cas.put_xorb(&x.hash, Bytes::from(x.body.clone()).into());
        let (a, b, c, d) = tokio::join!(put(), put(), put(), put());
        let wins = [a, b, c, d]
            .into_iter()
            .map(|r| r.expect("concurrent xorb upload"))
            .filter(|w| *w)
            .count();
        assert_eq!(
            wins, 1,
            "racing uploads of xorb {}: {wins} reported an insert",
            x.hash
        );
    }
    for i in 0..f.shards.len() {
        let put = || cas.put_shard(Bytes::from(f.shard_bytes(i)));
        let (a, b, c) = tokio::join!(put(), put(), put());
        let wins = [a, b, c]
            .into_iter()
            .map(|r| r.expect("concurrent shard upload"))
            .filter(|w| *w)
            .count();
        assert_eq!(
            wins, 1,
            "racing uploads of shard {i}: {wins} reported an insert"
        );
    }
    for file in &f.files {
        check_file(cas, f, file, None).await;
    }
}

/// The reference's xorb limits: at most 8192 chunks and 64 MiB of *uncompressed* data;
/// the serialized body of a full xorb is slightly over 64 MiB and must be accepted.
pub async fn xorb_limits(cas: &dyn Cas) {
    let one = [7u8];
    async fn put(cas: &dyn Cas, chunks: Vec<&[u8]>) -> (MerkleHash, u64, xet_cas::Result<bool>) {
        let (hash, body) = format::raw_xorb(&chunks).expect("raw xorb");
        let len = body.len() as u64;
        (
            hash,
            len,
            cas.put_xorb(&hash, Bytes::from(body).into()).await,
        )
    }
    let (h, _, r) = put(cas, vec![&one[..]; 8193]).await;
    expect_err(r, "xorb of 8193 chunks", is_invalid_xorb);
    assert_eq!(
        text_err(cas.xorb_size(&h).await),
        Ok(None),
        "rejected xorb of 8193 chunks"
    );
    let (h, len, r) = put(cas, vec![&one[..]; 8192]).await;
    assert_eq!(text_err(r), Ok(true), "xorb of 8192 chunks");
    assert_eq!(text_err(cas.xorb_size(&h).await), Ok(Some(len)));

    const MIB: usize = 1 << 20;
    let data = fixture::random_bytes(64 * MIB, 5);
    let mut chunks: Vec<&[u8]> = data.chunks(128 * 1024).collect();
    let (h, len, r) = put(cas, chunks.clone()).await;
    assert!(
        len > 64 * MIB as u64,
        "the full xorb serializes to more than 64 MiB"
    );
    assert_eq!(
        text_err(r),
        Ok(true),
        "xorb of exactly 64 MiB uncompressed ({len} bytes serialized)"
    );
    assert_eq!(text_err(cas.xorb_size(&h).await), Ok(Some(len)));
    chunks.push(&one[..]);
    let (h, _, r) = put(cas, chunks).await;
    expect_err(r, "xorb of 64 MiB + 1 byte uncompressed", is_invalid_xorb);
    assert_eq!(
        text_err(cas.xorb_size(&h).await),
        Ok(None),
        "rejected oversized xorb"
    );
}
