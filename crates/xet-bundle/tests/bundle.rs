//! Bundles of the conformance fixture (three xorbs, two shards, seven files): created from
//! a store, served read-only, imported, verified, and damaged.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use xet_bundle::{
    Bundle, BundleBackend, BundleError, BundlePart, ImportOptions, Kind, NoProgress, OpenLimits,
    Reason, Selection, StoredXorbError, Wanted,
};
use xet_cas::{Cas, CasError, XorbBody};
use xet_hash::MerkleHash;
use xet_store::{
    MemoryBackend, MemoryStore, ObjectBackend, ObjectKey, SHARD_PREFIX, StoreCas, XORB_PREFIX,
};

async fn populated() -> MemoryStore {
    let s = MemoryStore::in_memory().await.unwrap();
    xet_cas_conformance::populate(&s).await;
    s
}

async fn create_from<B: ObjectBackend>(source: &B, sel: &Selection, out: &Path) {
    xet_bundle::create(source, sel, out, Arc::new(NoProgress))
        .await
        .unwrap();
}

fn open(path: &Path) -> Result<Bundle, BundleError> {
    Bundle::open(path, &OpenLimits::default())
}

async fn served(path: &Path) -> StoreCas<BundleBackend> {
    let backend = BundleBackend::open(path, OpenLimits::default())
        .await
        .unwrap();
    StoreCas::open(backend).await.unwrap()
}

async fn import(bundle: Bundle, target: Arc<dyn Cas>) -> xet_bundle::ImportReport {
    xet_bundle::import(
        Arc::new(bundle),
        target,
        ImportOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    .unwrap()
}

async fn verify(bundle: Bundle) -> xet_bundle::VerifyReport {
    xet_bundle::verify(Arc::new(bundle), Arc::new(NoProgress))
        .await
        .unwrap()
}

fn tmp() -> (tempfile::TempDir, PathBuf) {
    let d = tempfile::tempdir().unwrap();
    let p = d.path().join("b.swh");
    (d, p)
}

/// The files the store registers (hash, size), from the bundle of everything.
fn files_of(bundle: &Bundle) -> Vec<(MerkleHash, u64)> {
    bundle
        .manifest()
        .files
        .iter()
        .map(|f| (f.hash, f.size))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_of_everything_holds_every_object_and_serves_the_store() {
    let store = populated().await;
    let (_d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let bundle = open(&path).unwrap();
    let m = bundle.manifest();
    assert_eq!((m.xorbs.len(), m.shards.len(), m.files.len()), (3, 2, 7));
    for (prefix, kind) in [(XORB_PREFIX, Kind::Xorb), (SHARD_PREFIX, Kind::Shard)] {
        for key in store.backend().list(prefix).await.unwrap() {
            let h = key.xorb_hash().or(key.shard_hash()).unwrap();
            let original = store.backend().get(&key).await.unwrap().unwrap();
            assert_eq!(bundle.object(kind, &h), Some(original), "{key}");
        }
    }
    // The empty file is named with the sha256 of no bytes, not the shard's zero digest.
    let empty = m.files.iter().find(|f| f.hash.is_zero()).unwrap();
    assert_eq!(empty.sha256, Some(xet_bundle::EMPTY_SHA256));

    let cas = served(&path).await;
    xet_cas_conformance::check_populated(&cas).await;
    assert!(verify(bundle).await.is_ok());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_objects_give_the_same_bytes_even_from_a_bundle() {
    let store = populated().await;
    let (d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let again = d.path().join("again.swh");
    create_from(store.backend(), &Selection::All, &again).await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap()
    );
    // A bundle is a source like any store: bundling all of it rebuilds it byte for byte.
    let backend = BundleBackend::open(&path, OpenLimits::default())
        .await
        .unwrap();
    let copy = d.path().join("copy.swh");
    create_from(&backend, &Selection::All, &copy).await;
    assert_eq!(std::fs::read(&path).unwrap(), std::fs::read(&copy).unwrap());
    // Nothing is left beside the output.
    let names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names.len(), 3, "{names:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn importing_into_an_empty_store_restores_it_and_a_second_import_stores_nothing() {
    let store = populated().await;
    let (_d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let target = Arc::new(MemoryStore::in_memory().await.unwrap());
    let first = import(open(&path).unwrap(), target.clone()).await;
    assert!(first.rejected.is_empty(), "{:?}", first.rejected);
    assert_eq!((first.xorbs.stored, first.shards.stored), (3, 2));
    xet_cas_conformance::check_populated(target.as_ref()).await;
    let objects = target.backend().len();
    let second = import(open(&path).unwrap(), target.clone()).await;
    assert_eq!((second.xorbs.stored, second.shards.stored), (0, 0));
    assert_eq!((second.xorbs.present, second.shards.present), (3, 2));
    assert_eq!(second.bytes_stored, 0);
    assert_eq!(target.backend().len(), objects);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_selection_holds_just_what_its_files_need() {
    let store = populated().await;
    let (d, all_path) = tmp();
    create_from(store.backend(), &Selection::All, &all_path).await;
    let all = open(&all_path).unwrap();
    // The first shard registers one file (`random`, in xorb 0): bundle only that one.
    let first_shard = all.manifest().shards[0];
    let content =
        xet_store::format::parse_stored_shard(&all.object(Kind::Shard, &first_shard).unwrap())
            .unwrap();
    assert_eq!(content.files.len(), 1);
    let file = &content.files[0];
    let mut needed: Vec<MerkleHash> = file.terms.iter().map(|t| t.xorb).collect();
    needed.sort_by_key(|h| h.to_string());
    needed.dedup();
    let wanted = vec![
        Wanted {
            hash: file.hash,
            name: Some("random.bin".into()),
        },
        Wanted {
            hash: MerkleHash::ZERO,
            name: Some("empty".into()),
        },
    ];
    let path = d.path().join("one.swh");
    create_from(store.backend(), &Selection::Files(wanted), &path).await;
    let one = open(&path).unwrap();
    assert_eq!(one.manifest().xorbs, needed);
    assert_eq!(one.manifest().shards.len(), 1);
    let names: Vec<_> = one
        .manifest()
        .files
        .iter()
        .map(|f| f.name.clone().unwrap())
        .collect();
    assert_eq!(names, ["random.bin", "empty"]);

    // The built shard registers exactly the file, and an import names it as the bundle does.
    let target = Arc::new(MemoryStore::in_memory().await.unwrap());
    let report = import(one, target.clone()).await;
    assert!(report.rejected.is_empty(), "{:?}", report.rejected);
    let shards = target.backend().list(SHARD_PREFIX).await.unwrap();
    assert_eq!(
        shards,
        [ObjectKey::shard(&open(&path).unwrap().manifest().shards[0])]
    );
    let size = all
        .manifest()
        .files
        .iter()
        .find(|f| f.hash == file.hash)
        .unwrap()
        .size;
    let got = xet_cas_conformance::read_file(target.as_ref(), &file.hash, size, None)
        .await
        .unwrap();
    let expected = xet_cas_conformance::read_file(&store, &file.hash, size, None)
        .await
        .unwrap();
    assert!(got == expected && got.len() as u64 == size);
    for (h, _) in files_of(&all) {
        if h != file.hash && !h.is_zero() {
            assert_eq!(
                xet_cas_conformance::text_err(target.file_size(&h).await),
                Ok(None),
                "{h} came along"
            );
        }
    }
    let unknown = Wanted {
        hash: xet_hash::chunk_hash(b"no such file"),
        name: None,
    };
    let err = xet_bundle::create(
        store.backend(),
        &Selection::Files(vec![unknown.clone()]),
        &d.path().join("none.swh"),
        Arc::new(NoProgress),
    )
    .await
    .unwrap_err();
    assert!(matches!(err, BundleError::FileNotFound { hash } if hash == unknown.hash));
    assert!(!d.path().join("none.swh").exists());
}

/// A xorb of one uncompressed chunk: its hash and upload body.
fn new_xorb(data: &[u8]) -> (MerkleHash, Vec<u8>) {
    let c = xet_xorb::serialize_chunk(data, None, xet_xorb::CompressionScheme::None).unwrap();
    (
        xet_hash::xorb_hash(&[(c.hash(), data.len() as u64)]),
        c.bytes().to_vec(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_to_a_bundle_are_refused_as_read_only_and_meta_lives_in_memory() {
    let store = populated().await;
    let (_d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let cas = served(&path).await;
    let (hash, body) = new_xorb(b"a chunk no fixture has");
    let err = cas.put_xorb(&hash, XorbBody::from(body)).await.unwrap_err();
    assert!(
        matches!(&err, CasError::ReadOnly(m) if m.contains(&path.display().to_string())),
        "{err:?}"
    );
    let b = cas.backend();
    let meta = ObjectKey::meta("dedup-secret");
    assert_eq!(b.get(&meta).await.unwrap().map(|s| s.len()), Some(32));
    assert!(matches!(b.delete(&meta).await, Err(CasError::ReadOnly(_))));
    let some_xorb = ObjectKey::xorb(&open(&path).unwrap().manifest().xorbs[0]);
    assert_eq!(
        xet_cas_conformance::text_err(b.put_if_absent(&some_xorb, Bytes::new()).await),
        Ok(false)
    );
    // A key of the other kind is absent.
    let as_shard = ObjectKey::shard(&some_xorb.xorb_hash().unwrap());
    assert_eq!(
        xet_cas_conformance::text_err(b.size(&as_shard).await),
        Ok(None)
    );
    assert!(b.list("hub/").await.unwrap().is_empty());
}

/// Offset of `kind` `hash`'s bytes in the bundle file.
fn offset_of(bundle: &Bundle, kind: Kind, hash: &MerkleHash) -> usize {
    bundle.object(kind, hash).unwrap().as_ptr() as usize - bundle.bytes().as_ptr() as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_corrupted_xorb_is_named_and_everything_else_imported() {
    let store = populated().await;
    let (d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let good = open(&path).unwrap();
    // A xorb only the second shard uses: the first shard and its file still import.
    let first = xet_store::format::parse_stored_shard(
        &good
            .object(Kind::Shard, &good.manifest().shards[0])
            .unwrap(),
    )
    .unwrap();
    let used_by_first: Vec<MerkleHash> = first.files[0].terms.iter().map(|t| t.xorb).collect();
    let bad = *good
        .manifest()
        .xorbs
        .iter()
        .find(|h| !used_by_first.contains(h))
        .unwrap();
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[offset_of(&good, Kind::Xorb, &bad) + 100] ^= 0x20;
    let damaged = d.path().join("damaged.swh");
    std::fs::write(&damaged, &bytes).unwrap();

    let target = Arc::new(MemoryStore::in_memory().await.unwrap());
    let report = import(open(&damaged).unwrap(), target.clone()).await;
    let subjects: Vec<_> = report.rejected.iter().map(|p| p.subject.clone()).collect();
    assert_eq!(
        subjects,
        [
            BundlePart::Object {
                kind: Kind::Xorb,
                hash: bad
            },
            BundlePart::Object {
                kind: Kind::Shard,
                hash: good.manifest().shards[1]
            },
        ],
        "{:?}",
        report.rejected
    );
    assert_eq!((report.xorbs.stored, report.shards.stored), (2, 1));
    // The target's verdicts are kept as they were given, the cause of each problem.
    assert!(
        matches!(
            &report.rejected[0].reason,
            Reason::Rejected(CasError::InvalidXorb { .. })
        ),
        "{:?}",
        report.rejected[0]
    );
    assert!(
        matches!(
            &report.rejected[1].reason,
            Reason::Rejected(CasError::MissingXorb { .. })
        ),
        "{:?}",
        report.rejected[1]
    );
    let cause = std::error::Error::source(&report.rejected[0]).expect("a problem has a cause");
    assert!(cause.source().is_some(), "the target's error is kept");
    assert_eq!(
        xet_cas_conformance::text_err(target.xorb_size(&bad).await),
        Ok(None)
    );
    assert!(
        target
            .file_size(&first.files[0].hash)
            .await
            .unwrap()
            .is_some()
    );

    let v = verify(open(&damaged).unwrap()).await;
    assert!(
        v.problems.iter().any(|p| p.subject
            == BundlePart::Object {
                kind: Kind::Xorb,
                hash: bad
            }),
        "{:?}",
        v.problems
    );
    assert!(
        v.problems
            .iter()
            .any(|p| matches!(p.subject, BundlePart::File { .. }))
    );
}

/// Whether damage to a bundle is caught: by the open, or by the SWH shard's own check
/// (cheap), or else by the whole verification.
async fn caught(bytes: Vec<u8>) -> bool {
    let bundle =
        match Bundle::from_bytes("damaged".into(), Bytes::from(bytes), &OpenLimits::default()) {
            Err(_) => return true,
            Ok(b) => b,
        };
    let reader =
        xet_swh::ShardReader::open(bundle.bytes(), &xet_swh::ReadLimits::default()).unwrap();
    if reader.verify().is_err() {
        return true;
    }
    !verify(bundle).await.is_ok()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_flipped_byte_of_the_header_index_and_hash_section_is_caught() {
    let store = populated().await;
    let (_d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let bytes = std::fs::read(&path).unwrap();
    let reader = xet_swh::ShardReader::open(&bytes, &xet_swh::ReadLimits::default()).unwrap();
    let h = *reader.header();
    let hash_end = reader.hash_end() as usize;
    let positions = (0..512).chain(h.index_position as usize..hash_end);
    let mut missed = Vec::new();
    for i in positions {
        let mut b = bytes.clone();
        b[i] ^= 0x01;
        if !caught(b).await {
            missed.push(i);
        }
    }
    assert!(
        missed.is_empty(),
        "flips not caught at {missed:?} (index at {}, hash at {})",
        h.index_position,
        h.hash_position
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncated_and_hostile_bundles_are_refused_without_panicking() {
    let store = populated().await;
    let (_d, path) = tmp();
    create_from(store.backend(), &Selection::All, &path).await;
    let bytes = std::fs::read(&path).unwrap();
    for cut in [
        0,
        8,
        100,
        512,
        4096,
        bytes.len() / 2,
        bytes.len() - 41,
        bytes.len() - 1,
    ] {
        let err = Bundle::from_bytes(
            "cut".into(),
            Bytes::copy_from_slice(&bytes[..cut]),
            &OpenLimits::default(),
        )
        .unwrap_err();
        assert!(err.is_invalid_bundle(), "cut at {cut}: {err}");
    }
    // Counts and sizes near 2^64 in the header: refused before anything is allocated.
    for (field, value) in [
        (1, u64::MAX),
        (1, 1 << 40),
        (3, u64::MAX - 100),
        (5, u64::MAX),
        (6, u64::MAX),
    ] {
        let mut b = bytes.clone();
        b[32 + 8 * field..40 + 8 * field].copy_from_slice(&value.to_be_bytes());
        let err = Bundle::from_bytes("hostile".into(), Bytes::from(b), &OpenLimits::default())
            .unwrap_err();
        assert!(
            matches!(err, BundleError::Container { .. }),
            "field {field}: {err}"
        );
    }
    // A tight budget refuses a file within the format.
    let tight = OpenLimits {
        max_manifest_bytes: 10,
        ..OpenLimits::default()
    };
    let err = Bundle::from_bytes("tight".into(), Bytes::from(bytes.clone()), &tight).unwrap_err();
    assert!(matches!(err, BundleError::Manifest { .. }), "{err}");
    // An SWH shard without a manifest is not a bundle.
    let mut w = xet_swh::ShardWriter::new(std::io::Cursor::new(Vec::new())).unwrap();
    w.add(&[1; 32], b"x").unwrap();
    let (c, _) = w.finish().unwrap();
    let err = Bundle::from_bytes(
        "plain".into(),
        Bytes::from(c.into_inner()),
        &OpenLimits::default(),
    )
    .unwrap_err();
    assert!(matches!(err, BundleError::NoManifest { .. }), "{err}");
}

/// A copy of the populated store's objects in which `damage` changed the stored xorb
/// `hash`.
async fn with_damaged_xorb(hash: &MerkleHash, damage: impl Fn(&mut Vec<u8>)) -> MemoryBackend {
    let store = populated().await;
    let copy = MemoryBackend::new();
    for prefix in [XORB_PREFIX, SHARD_PREFIX] {
        for key in store.backend().list(prefix).await.unwrap() {
            let mut bytes = store.backend().get(&key).await.unwrap().unwrap().to_vec();
            if key.xorb_hash().as_ref() == Some(hash) {
                damage(&mut bytes);
            }
            copy.put_if_absent(&key, Bytes::from(bytes)).await.unwrap();
        }
    }
    copy
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bad_stored_xorb_in_the_source_is_named_with_its_cause() {
    let store = populated().await;
    let (d, all_path) = tmp();
    create_from(store.backend(), &Selection::All, &all_path).await;
    let all = open(&all_path).unwrap();
    // The first shard registers one file, `random`.
    let shard = xet_store::format::parse_stored_shard(
        &all.object(Kind::Shard, &all.manifest().shards[0]).unwrap(),
    )
    .unwrap();
    let (file, xorb) = (shard.files[0].hash, shard.files[0].terms[0].xorb);
    let wanted = Selection::Files(vec![Wanted {
        hash: file,
        name: None,
    }]);
    let out = d.path().join("out.swh");
    let err_of = |source: MemoryBackend| {
        let (wanted, out) = (wanted.clone(), out.clone());
        async move {
            xet_bundle::create(&source, &wanted, &out, Arc::new(NoProgress))
                .await
                .unwrap_err()
        }
    };

    // The footer's xorb hash (its first field after the ident and version) changed.
    let renamed = with_damaged_xorb(&xorb, |b| {
        let info = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap()) as usize;
        let footer = b.len() - 4 - info;
        b[footer + 8] ^= 1;
    })
    .await;
    let err = err_of(renamed).await;
    assert!(
        matches!(&err, BundleError::StoredXorb { hash, source } if *hash == xorb
            && matches!(**source, StoredXorbError::FooterNames(_))),
        "{err:?}"
    );
    assert!(err.to_string().contains(&xorb.to_string()), "{err}");

    // A footer claiming more bytes than the object has.
    let long = with_damaged_xorb(&xorb, |b| {
        let n = b.len();
        b[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    })
    .await;
    let err = err_of(long).await;
    assert!(
        matches!(&err, BundleError::StoredXorb { source, .. }
            if matches!(**source, StoredXorbError::FooterLength { .. })),
        "{err:?}"
    );

    // A footer that does not parse keeps the xorb crate's error as its cause.
    let garbled = with_damaged_xorb(&xorb, |b| {
        let info = u32::from_le_bytes(b[b.len() - 4..].try_into().unwrap()) as usize;
        let footer = b.len() - 4 - info;
        b[footer] ^= 0xff;
    })
    .await;
    let err = err_of(garbled).await;
    let BundleError::StoredXorb { source, .. } = &err else {
        panic!("{err:?}")
    };
    let StoredXorbError::Footer(cause) = &**source else {
        panic!("{err:?}")
    };
    let chain = std::error::Error::source(&err).and_then(|e| e.source());
    assert_eq!(chain.map(|e| e.to_string()), Some(cause.to_string()));
    assert!(!out.exists());
}

/// A key that, next to the manifest's, no seed swh-shard would try gives a perfect hash
/// function for (cmph draws the seeds as `rand() % 2`: two seeds to try).
fn key_without_swh_seed() -> [u8; 32] {
    (0u64..)
        .map(|i| xet_hash::chunk_hash(&i.to_le_bytes()).0)
        .find(|k| {
            matches!(
                xet_swh::ChdPh::build(&[xet_bundle::MANIFEST_KEY, *k], &xet_swh::SeedPolicy::Swh),
                Err(xet_swh::BuildError::SeedsExhausted { .. })
            )
        })
        .unwrap()
}

/// Found by the `bundle` fuzz target: `create` failed ("no seed gave a perfect hash
/// function") for a store of one object whose key has no working swh-shard seed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bundle_is_written_for_keys_swh_shard_has_no_seed_for() {
    let key = key_without_swh_seed();
    let source = MemoryBackend::new();
    let value = Bytes::from_static(b"not a xorb: create --all copies objects as they are");
    source
        .put_if_absent(&ObjectKey::xorb(&MerkleHash(key)), value.clone())
        .await
        .unwrap();
    let (d, path) = tmp();
    create_from(&source, &Selection::All, &path).await;
    let b = open(&path).unwrap();
    assert_eq!(b.object(Kind::Xorb, &MerkleHash(key)), Some(value));
    let reader = xet_swh::ShardReader::open(b.bytes(), &xet_swh::ReadLimits::default()).unwrap();
    reader.verify().unwrap();
    assert!(
        reader.hash_function().seed() >= 2,
        "a seed swh-shard does not draw"
    );
    // Still the same bytes for the same objects.
    let again = d.path().join("again.swh");
    create_from(&source, &Selection::All, &again).await;
    assert_eq!(
        std::fs::read(&path).unwrap(),
        std::fs::read(&again).unwrap()
    );
}

/// Files bundled from a `Cas` that hands out contents only (as a server does): the
/// bundle lists exactly them, under their names, with the sizes and sha256s of the
/// source, verifies, and serves them; nothing is left beside it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn files_from_a_cas_are_bundled_through_a_staging_store() {
    let store = populated().await;
    let (d, all) = tmp();
    create_from(store.backend(), &Selection::All, &all).await;
    let source_files = open(&all).unwrap().manifest().files.clone();
    let mut picked: Vec<xet_bundle::FileEntry> = source_files
        .iter()
        .filter(|f| f.size > 100_000)
        .take(2)
        .cloned()
        .collect();
    picked.extend(source_files.iter().filter(|f| f.hash.is_zero()).cloned());
    assert_eq!(picked.len(), 3);
    for (i, f) in picked.iter_mut().enumerate() {
        f.name = Some(format!("file-{i}"));
    }
    let wanted: Vec<Wanted> = picked
        .iter()
        .map(|f| Wanted {
            hash: f.hash,
            name: f.name.clone(),
        })
        .collect();
    let cas: Arc<dyn Cas> = Arc::new(store);
    let out = d.path().join("from-cas.swh");
    let report = xet_bundle::create_from_cas(cas.clone(), &wanted, &out, Arc::new(NoProgress))
        .await
        .unwrap();
    assert_eq!(report.path, out);
    assert_eq!(report.files, 3);
    let bundle = open(&out).unwrap();
    let mut listed = bundle.manifest().files.clone();
    let key = |f: &xet_bundle::FileEntry| f.hash.to_string();
    listed.sort_by_key(key);
    picked.sort_by_key(key);
    assert_eq!(listed, picked);
    assert_eq!(report.xorbs, bundle.manifest().xorbs.len() as u64);
    assert_eq!(report.shards, 1);
    // Nothing staged is left beside the output.
    let mut names: Vec<_> = std::fs::read_dir(d.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["b.swh", "from-cas.swh"]);
    // It holds what the files need: it verifies, and serves them as the source does.
    assert!(verify(open(&out).unwrap()).await.is_ok());
    let served: Arc<dyn Cas> = Arc::new(served(&out).await);
    for f in &picked {
        let a = xet_download::file_sha256(served.clone(), f.hash)
            .await
            .unwrap();
        let b = xet_download::file_sha256(cas.clone(), f.hash)
            .await
            .unwrap();
        assert_eq!(a, b, "file {}", f.hash);
        assert_eq!(a.1, f.size);
    }
}

/// A file the `Cas` does not have: the download's typed error, kept as the source and
/// not repeated in the message; no bundle and no staging directory are left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_the_cas_lacks_is_a_typed_download_error() {
    let cas: Arc<dyn Cas> = Arc::new(populated().await);
    let missing = xet_hash::chunk_hash(b"no file has this hash");
    let (d, out) = tmp();
    let wanted = [Wanted {
        hash: missing,
        name: Some("missing.bin".into()),
    }];
    let e = xet_bundle::create_from_cas(cas, &wanted, &out, Arc::new(NoProgress))
        .await
        .unwrap_err();
    match &e {
        BundleError::Download(xet_download::DownloadError::NotFound { file }) => {
            assert_eq!(*file, missing)
        }
        other => panic!("{other:?}"),
    }
    let text = e.to_string();
    let source = std::error::Error::source(&e)
        .expect("the download error")
        .to_string();
    assert!(source.contains(&missing.to_string()), "{source}");
    assert!(!text.contains(&source), "{text}");
    assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
}
