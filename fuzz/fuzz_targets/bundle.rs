//! Bundles (`xet-bundle`): `Bundle::from_bytes` on arbitrary bytes within small
//! `OpenLimits` (the SWH read shard, the manifest, every listed key located), then what a
//! reader does with an accepted bundle: objects by kind, `BundleBackend`, `verify`,
//! `import`, and `create` from it. Inputs starting with `W` instead feed the writer.
//!
//! Checks: no panic; an accepted bundle's manifest re-serializes and parses back equal;
//! every listed object is a slice of the input inside the file, the SWH reader's value for
//! its key, absent under the other kind, and served as the same bytes by `BundleBackend`
//! (which refuses writes as read-only); `verify` always runs to a report; a bundle that
//! verifies imports into an empty store with nothing rejected, every file of its manifest
//! registered with its size, a second import storing nothing, and bundling it again gives
//! the same objects; an object an import rejects is a problem `verify` reports too.
//! `W` inputs: the rest cut at `0xff` bytes into values stored as xorbs under their
//! chunk hashes; `create` (`Selection::All`) writes a bundle that opens, lists exactly
//! those keys and returns the same bytes for each.
#![no_main]

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, OnceLock};

use bytes::Bytes;
use libfuzzer_sys::fuzz_target;
use xet_bundle::{
    Bundle, BundleBackend, ImportOptions, Kind, MANIFEST_KEY, Manifest, NoProgress, OpenLimits,
    ReadLimits, Selection, BundlePart,
};
use xet_cas::{ByteRange, Cas, CasError};
use xet_hash::MerkleHash;
use xet_store::{MemoryBackend, MemoryStore, ObjectBackend, ObjectKey, SHARD_PREFIX, XORB_PREFIX};
use xet_swh::ShardReader;

const LIMITS: OpenLimits = OpenLimits {
    swh: ReadLimits {
        max_bytes: 1 << 20,
        max_objects: 4096,
        max_slots: 8192,
        max_hash_bytes: 1 << 16,
    },
    max_manifest_bytes: 1 << 16,
};

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("runtime")
    })
}

/// Where `create` writes: a file of this process in a tmpfs when there is one (its fsync
/// is free), removed after each run.
fn out_path() -> &'static PathBuf {
    static OUT: OnceLock<PathBuf> = OnceLock::new();
    OUT.get_or_init(|| {
        let shm = std::path::Path::new("/dev/shm");
        let dir = if shm.is_dir() {
            shm.to_path_buf()
        } else {
            std::env::temp_dir()
        };
        dir.join(format!("xet-fuzz-bundle-{}.swh", std::process::id()))
    })
}

fuzz_target!(|data: &[u8]| {
    if let Some(rest) = data.strip_prefix(b"W") {
        runtime().block_on(written(rest));
        return;
    }
    let Ok(bundle) = Bundle::from_bytes("fuzz".into(), Bytes::copy_from_slice(data), &LIMITS)
    else {
        return;
    };
    check_opened(&bundle);
    runtime().block_on(check_use(Arc::new(bundle)));
});

/// What `Bundle::from_bytes` promises of a bundle it accepted.
fn check_opened(b: &Bundle) {
    let m = b.manifest();
    assert_eq!(m.format, xet_bundle::FORMAT);
    assert_eq!(m.version, xet_bundle::VERSION);
    let again = Manifest::parse(&m.to_json()).expect("a manifest re-serialized parses");
    assert_eq!(&again, m, "the manifest does not round-trip");

    let file = b.bytes();
    let reader = ShardReader::open(file, &LIMITS.swh).expect("an opened bundle reopens");
    assert!(reader.get(&MANIFEST_KEY).expect("manifest entry").is_some());
    let mut total = 0u64;
    for (kind, h) in m.objects() {
        assert!(!h.is_zero() && h.0 != MANIFEST_KEY);
        let obj = b.object(kind, &h).expect("a listed object is located");
        let start = obj.as_ptr() as usize - file.as_ptr() as usize;
        assert!(
            start + obj.len() <= file.len(),
            "{kind} {h} lies outside the file"
        );
        let value = reader
            .get(&h.0)
            .expect("lookup")
            .expect("listed key present");
        assert_eq!(&obj[..], value, "{kind} {h} is not its key's value");
        assert_eq!(b.object_len(kind, &h), Some(obj.len() as u64));
        let other = match kind {
            Kind::Xorb => Kind::Shard,
            Kind::Shard => Kind::Xorb,
        };
        assert!(
            b.object(other, &h).is_none(),
            "{kind} {h} also found as {other}"
        );
        total += obj.len() as u64;
    }
    assert_eq!(b.object_bytes(), total);
}

/// `r` with its error as text, to compare with an expected `Ok` (`CasError` has no
/// `PartialEq`) and still show the error.
fn text_err<T>(r: xet_cas::Result<T>) -> Result<T, String> {
    r.map_err(|e| xet_cas::error_chain(&e))
}

fn key(kind: Kind, h: &MerkleHash) -> ObjectKey {
    match kind {
        Kind::Xorb => ObjectKey::xorb(h),
        Kind::Shard => ObjectKey::shard(h),
    }
}

/// The backend, verification, import and re-creation of an accepted bundle.
async fn check_use(bundle: Arc<Bundle>) {
    let m = bundle.manifest().clone();
    check_backend(&bundle).await;

    let report = xet_bundle::verify(bundle.clone(), Arc::new(NoProgress))
        .await
        .expect("verify runs to a report on any opened bundle");
    assert_eq!(report.xorbs, m.xorbs.len() as u64);
    assert_eq!(report.shards, m.shards.len() as u64);

    let target = Arc::new(MemoryStore::in_memory().await.expect("memory store"));
    let imported = xet_bundle::import(
        bundle.clone(),
        target.clone(),
        ImportOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    .expect("an import into memory does not fail");
    let counted = |c: xet_bundle::KindCounts| c.stored + c.present + c.rejected;
    assert_eq!(counted(imported.xorbs), m.xorbs.len() as u64);
    assert_eq!(counted(imported.shards), m.shards.len() as u64);
    // Import checks upload forms, verify the stored forms and more: never less strict.
    for p in &imported.rejected {
        assert!(
            report.problems.iter().any(|q| q.subject == p.subject),
            "import rejected {p:?}, verify did not: {:?}",
            report.problems
        );
    }
    if !report.is_ok() {
        return;
    }

    assert!(imported.rejected.is_empty(), "{:?}", imported.rejected);
    for f in m.files.iter().filter(|f| !f.hash.is_zero()) {
        assert_eq!(
            text_err(target.file_size(&f.hash).await),
            Ok(Some(f.size)),
            "file {}",
            f.hash
        );
        target
            .reconstruction(&f.hash, None)
            .await
            .expect("a verified bundle's file reconstructs");
    }
    let second = xet_bundle::import(
        bundle.clone(),
        target.clone(),
        ImportOptions::default(),
        Arc::new(NoProgress),
    )
    .await
    .expect("second import");
    assert_eq!((second.xorbs.stored, second.shards.stored), (0, 0));
    assert_eq!(second.bytes_stored, 0);

    // Bundling the bundle keeps every object, byte for byte.
    let backend = BundleBackend::new(bundle.clone());
    let out = out_path();
    let created = xet_bundle::create(&backend, &Selection::All, out, Arc::new(NoProgress)).await;
    let copy = created.and_then(|_| Bundle::open(out, &OpenLimits::default()));
    let _ = std::fs::remove_file(out);
    let copy = copy.expect("a verified bundle bundles again");
    let mut want: Vec<_> = m.objects().collect();
    let mut got: Vec<_> = copy.manifest().objects().collect();
    want.sort();
    got.sort();
    assert_eq!(got, want);
    for (kind, h) in want {
        assert_eq!(copy.object(kind, &h), bundle.object(kind, &h));
    }
}

/// `BundleBackend` serves the listed objects as they are and refuses writes.
async fn check_backend(bundle: &Arc<Bundle>) {
    let b = BundleBackend::new(bundle.clone());
    let m = bundle.manifest();
    let mut listed = b.list(XORB_PREFIX).await.expect("list");
    listed.extend(b.list(SHARD_PREFIX).await.expect("list"));
    let mut want: Vec<ObjectKey> = m.objects().map(|(k, h)| key(k, &h)).collect();
    listed.sort();
    want.sort();
    assert_eq!(listed, want);
    for (kind, h) in m.objects() {
        let k = key(kind, &h);
        let obj = bundle.object(kind, &h).expect("located");
        assert_eq!(text_err(b.get(&k).await), Ok(Some(obj.clone())));
        assert_eq!(text_err(b.size(&k).await), Ok(Some(obj.len() as u64)));
        let len = obj.len() as u64;
        if len > 0 {
            let r = ByteRange::new(len / 3, len);
            let part = b.get_range(&k, r).await.expect("range").expect("present");
            assert_eq!(part, obj.slice(len as usize / 3..));
        }
        assert_eq!(text_err(b.put_if_absent(&k, Bytes::new()).await), Ok(false));
        assert!(matches!(b.delete(&k).await, Err(CasError::ReadOnly(_))));
    }
    let absent = ObjectKey::xorb(&xet_hash::chunk_hash(bundle.bytes()));
    if !m.xorbs.contains(&xet_hash::chunk_hash(bundle.bytes())) {
        assert_eq!(text_err(b.get(&absent).await), Ok(None));
        assert!(matches!(
            b.put_if_absent(&absent, Bytes::from_static(b"x")).await,
            Err(CasError::ReadOnly(_))
        ));
    }
}

/// The writer: values (the input cut at `0xff`) stored as xorbs of a source, bundled.
async fn written(rest: &[u8]) {
    let source = MemoryBackend::new();
    let mut want: BTreeMap<MerkleHash, Bytes> = BTreeMap::new();
    for piece in rest.split(|&b| b == 0xff).take(16) {
        let h = xet_hash::chunk_hash(piece);
        let v = Bytes::copy_from_slice(piece);
        source
            .put_if_absent(&ObjectKey::xorb(&h), v.clone())
            .await
            .expect("memory put");
        want.insert(h, v);
    }
    let out = out_path();
    let report = xet_bundle::create(&source, &Selection::All, out, Arc::new(NoProgress))
        .await
        .expect("create from memory");
    let opened = Bundle::open(out, &LIMITS);
    let _ = std::fs::remove_file(out);
    let b = opened.expect("a bundle we wrote opens");
    assert_eq!(report.xorbs, want.len() as u64);
    assert_eq!(report.shards, 0);
    assert_eq!(report.bytes, b.bytes().len() as u64);
    let m = b.manifest();
    assert!(m.files.is_empty() && m.shards.is_empty());
    let mut listed = m.xorbs.clone();
    listed.sort();
    assert_eq!(listed, want.keys().copied().collect::<Vec<_>>());
    // Keys in hash-string order, as `create` documents.
    assert!(
        m.xorbs
            .windows(2)
            .all(|w| w[0].to_string() < w[1].to_string())
    );
    for (h, v) in &want {
        assert_eq!(b.object(Kind::Xorb, h).as_ref(), Some(v), "xorb {h}");
    }
    check_opened(&b);
    // Nothing here is a valid xorb: a verification names each, and nothing else fails.
    let report = xet_bundle::verify(Arc::new(b), Arc::new(NoProgress))
        .await
        .expect("verify");
    let named = report
        .problems
        .iter()
        .filter(|p| {
            matches!(
                p.subject,
                BundlePart::Object {
                    kind: Kind::Xorb,
                    ..
                }
            )
        })
        .count();
    assert_eq!(named, want.len(), "{:?}", report.problems);
}
