//! The conformance suites and restart tests against the filesystem store.

use std::time::{Duration, SystemTime};

use xet_cas::Cas;
use xet_cas_conformance::{self as conformance, UnderTest};
use xet_store::{
    DedupKeys, FsBackend, ObjectBackend, ObjectKey, StoreConfig, open_store, open_store_with,
};

async fn make() -> UnderTest {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).await.expect("open");
    UnderTest::with_guard(store, dir)
}

async fn make_unkeyed() -> UnderTest {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = StoreConfig {
        dedup_keys: DedupKeys::Unkeyed,
        ..StoreConfig::default()
    };
    let store = open_store_with(dir.path(), config).await.expect("open");
    UnderTest::with_guard(store, dir)
}

mod fs_keyed {
    xet_cas_conformance::cas_conformance_tests!(super::make);
}

mod fs_unkeyed {
    xet_cas_conformance::cas_conformance_tests!(super::make_unkeyed);
}

/// Two stores on one directory: two processes (or servers) sharing it.
async fn make_twins() -> conformance::repos::Twins {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = open_store(dir.path()).await.expect("open a");
    let b = open_store(dir.path()).await.expect("open b");
    conformance::repos::Twins::with_guard(a, b, dir)
}

mod fs_repos {
    xet_cas_conformance::repo_store_conformance_tests!(super::make_twins);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fs_backend_conformance() {
    let dir = tempfile::tempdir().expect("tempdir");
    conformance::backend::run_all(&FsBackend::open(dir.path()).await.expect("open")).await;
    // Nothing is left behind in tmp/ by successful or losing writers.
    let left: Vec<_> = std::fs::read_dir(dir.path().join("tmp")).unwrap().collect();
    assert!(left.is_empty(), "tmp/ not empty: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_everything() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).await.expect("open");
    conformance::populate(&store).await;
    let stats = store.stats();
    drop(store);
    let store = open_store(dir.path()).await.expect("reopen");
    let again = store.stats();
    assert_eq!(
        (again.files, again.shards, again.dedup_chunks),
        (stats.files, stats.shards, stats.dedup_chunks)
    );
    conformance::check_populated(&store).await;
    // And once more, after the re-uploads of check_populated (which must change nothing).
    drop(store);
    let store = open_store(dir.path()).await.expect("reopen");
    assert_eq!(store.stats().shards, stats.shards);
    conformance::check_populated(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_is_as_documented() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).await.expect("open");
    conformance::populate(&store).await;
    let names = |sub: &str| {
        let mut v: Vec<String> = std::fs::read_dir(dir.path().join(sub))
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        v.sort();
        v
    };
    let xorbs = names("xorbs");
    assert_eq!(xorbs.len(), 3, "{xorbs:?}");
    for x in &xorbs {
        let h = xet_hash::MerkleHash::from_hex(x).expect("xorb files are named by hash");
        let size = store.xorb_size(&h).await.unwrap().unwrap();
        let on_disk = std::fs::metadata(dir.path().join("xorbs").join(x))
            .unwrap()
            .len();
        assert!(on_disk > size, "xorbs are stored with their footer");
    }
    let shards = names("shards");
    assert_eq!(shards.len(), 2, "{shards:?}");
    for s in &shards {
        let bytes = std::fs::read(dir.path().join("shards").join(s)).unwrap();
        // Stored shards are named like the reference names them: the chunk hash of the bytes.
        assert_eq!(format!("{}.mdb", xet_hash::chunk_hash(&bytes)), *s);
    }
    assert_eq!(names("meta"), vec!["dedup-secret".to_string()]);
    assert!(names("tmp").is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_leftovers_and_foreign_files_are_ignored() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).await.expect("open");
    conformance::populate(&store).await;
    drop(store);
    // A writer that died: a stale and a fresh temporary file; files that are not objects.
    let stale = dir.path().join("tmp/0123.tmp");
    std::fs::write(&stale, b"half a xorb").unwrap();
    let f = std::fs::File::options().write(true).open(&stale).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(7200))
        .unwrap();
    drop(f);
    let fresh = dir.path().join("tmp/4567.tmp");
    std::fs::write(&fresh, b"someone is writing this").unwrap();
    std::fs::write(dir.path().join("xorbs/README"), b"not a xorb").unwrap();
    std::fs::write(dir.path().join("shards/notes.txt"), b"not a shard").unwrap();
    std::fs::write(dir.path().join("shards/ABCD.mdb"), b"not a shard name").unwrap();

    let store = open_store(dir.path()).await.expect("reopen");
    assert!(!stale.exists(), "stale temporary file removed on open");
    assert!(
        fresh.exists(),
        "recent temporary files belong to live writers and are kept"
    );
    let listed = store.backend().list("").await.unwrap();
    assert!(
        listed
            .iter()
            .all(|k| ObjectKey::parse(k.as_str()).is_some())
    );
    assert_eq!(store.backend().list("shards/").await.unwrap().len(), 2);
    conformance::check_populated(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_damaged_shard_file_is_skipped_not_fatal() {
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).await.expect("open");
    conformance::populate(&store).await;
    drop(store);
    // Damage that cannot come from the store itself (it writes atomically): an operator
    // truncating a shard file. The store still opens; that shard's files are unknown.
    let shards = store_files(dir.path(), "shards");
    let victim = &shards[0];
    let bytes = std::fs::read(victim).unwrap();
    std::fs::write(victim, &bytes[..bytes.len() / 2]).unwrap();
    let store = open_store(dir.path()).await.expect("reopen");
    assert_eq!(store.stats().shards, 1);
}

fn store_files(root: &std::path::Path, sub: &str) -> Vec<std::path::PathBuf> {
    let mut v: Vec<_> = std::fs::read_dir(root.join(sub))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    v.sort();
    v
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_instances_share_a_directory() {
    let dir = tempfile::tempdir().expect("tempdir");
    let a = open_store(dir.path()).await.expect("open a");
    let b = open_store(dir.path()).await.expect("open b");
    conformance::populate(&a).await;
    // b sees the xorbs at once (they are read from disk) and the files after a refresh.
    assert_eq!(b.refresh().await.unwrap(), 2);
    conformance::check_populated(&b).await;
    // Same secret: both answer dedup queries with the same key.
    let chunk = conformance::dedup_probe();
    let (da, db) = (
        a.dedup_shard(&chunk).await.unwrap(),
        b.dedup_shard(&chunk).await.unwrap(),
    );
    let (ka, kb) = (
        conformance::dedup_answer_key(&da.unwrap()),
        conformance::dedup_answer_key(&db.unwrap()),
    );
    assert!(!ka.is_zero());
    assert_eq!(ka, kb);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Repositories live under `hub/` in nested directories named by hashes only, as
/// `docs/STORE.md` says; foreign files there are ignored, and the CAS side (refresh,
/// shard listing) never looks at them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_layout_is_as_documented_and_ignored_by_the_cas() {
    use xet_hub::{BranchName, CommitMeta, FileEntry, Operation, RepoId, RepoPath, RepoRef};
    use xet_hub::{RepoStore, RepoType, Repos, Revision};
    let dir = tempfile::tempdir().expect("tempdir");
    let store = std::sync::Arc::new(open_store(dir.path()).await.expect("open"));
    let repos = Repos::new(store.clone());
    let r = RepoRef::new(RepoType::Model, RepoId::parse("org/name").unwrap());
    repos.create(&r, "alice", false, 1).await.expect("create");
    let ops = [Operation::Add {
        path: RepoPath::parse("a/b.txt").unwrap(),
        entry: FileEntry::regular(xet_hash::chunk_hash(b"x"), b"x"),
    }];
    let main = BranchName::main();
    let committed = repos
        .commit_to_branch(&r, &main, None, &ops, &CommitMeta::default())
        .await
        .expect("commit");
    let sha = [9u8; 32];
    store
        .record_verified_sha256(&sha, &xet_hash::chunk_hash(b"x"))
        .await
        .unwrap();

    let rk = hex(&xet_store::hub_repo_name(&r));
    let bk = hex(&xet_store::hub_branch_name(&main));
    let repo_dir = dir.path().join("hub/repos").join(&rk);
    let mut commits = store_files(&repo_dir, "commits");
    commits.retain(|p| p.file_name().unwrap() == committed.id.to_string().as_str());
    assert_eq!(commits.len(), 1, "commit stored by id");
    assert_eq!(
        store_files(&repo_dir, "commits").len(),
        2,
        "initial commit and one more"
    );
    assert!(repo_dir.join("records/00000000000000000001").is_file());
    assert!(repo_dir.join("record-head").is_file(), "the record's hint");
    let versions: Vec<String> = store_files(&repo_dir.join("branches"), &bk)
        .iter()
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    assert_eq!(versions, ["00000000000000000001", "00000000000000000002"]);
    let head = std::fs::read(repo_dir.join("branches").join(&bk).join(&versions[1])).unwrap();
    let head: serde_json::Value = serde_json::from_slice(&head).unwrap();
    assert_eq!(head["name"], "main");
    assert_eq!(head["commit"], committed.id.to_string());
    assert!(dir.path().join("hub/sha256").join(hex(&sha)).is_file());
    let x = xet_hash::chunk_hash(b"x").to_string();
    assert!(dir.path().join("hub/files").join(x).join(&rk).is_file());

    // Foreign files in and next to the hub tree: not keys, never listed or read.
    std::fs::write(repo_dir.join("branches").join(&bk).join("README"), b"x").unwrap();
    std::fs::write(repo_dir.join("branches").join(&bk).join("3"), b"x").unwrap();
    std::fs::write(dir.path().join("hub/notes.txt"), b"x").unwrap();
    std::fs::create_dir_all(repo_dir.join("branches").join(&bk).join("deeper/still")).unwrap();
    std::fs::write(
        repo_dir.join("branches").join(&bk).join("deeper/still/x"),
        b"x",
    )
    .unwrap();
    let listed = store.backend().list("hub/").await.unwrap();
    assert_eq!(
        listed.len(),
        14,
        "record, 2 commits, 3 trees (the empty one, the root, a/) and their facts, \
         2 versions, 1 sha256, 1 file reference, the listing's mark: {listed:?}"
    );
    assert!(dir.path().join("hub/listed").join(&rk).is_file());
    // Git's own ids: the empty tree every new repository starts with.
    assert!(
        repo_dir
            .join("trees/4b825dc642cb6eb9a060e54bf8d69288fbee4904")
            .is_file()
    );
    assert_eq!(
        store.backend().list("").await.unwrap().len(),
        15,
        "and the dedup secret"
    );
    let (id, _) = repos
        .resolve(&r, &Revision::Branch(main.clone()))
        .await
        .unwrap();
    assert_eq!(id, committed.id);

    assert_eq!(
        store.refresh().await.unwrap(),
        0,
        "no shard among the hub objects"
    );
    assert!(store.backend().list("shards/").await.unwrap().is_empty());
    drop(repos);
    drop(store);
    let reopened = open_store(dir.path()).await.expect("reopen");
    assert_eq!(reopened.stats().shards, 0);
    assert_eq!(
        reopened.branch(&r, &main).await.unwrap().map(|h| h.commit),
        Some(committed.id),
        "the head survives a restart"
    );
}

/// A refused upload's `CasError` keeps the format crate's verdict as its `source()`,
/// typed, and its message does not repeat it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_upload_keeps_the_format_error_as_its_cause() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = open_store(dir.path()).await.expect("open");
    let hash = xet_hash::chunk_hash(b"not a xorb");
    let body = bytes::Bytes::from_static(b"these bytes are not a serialized chunk");
    let e = store.put_xorb(&hash, body.into()).await.unwrap_err();
    assert!(
        matches!(e, xet_cas::CasError::InvalidXorb { hash: h, .. } if h == hash),
        "{e:?}"
    );
    let xorb_err = e
        .source()
        .and_then(|s| s.downcast_ref::<xet_xorb::XorbError>())
        .unwrap_or_else(|| panic!("the source is the XorbError: {e:?}"));
    assert!(!e.to_string().contains(&xorb_err.to_string()), "{e}");

    let e = store
        .put_shard(bytes::Bytes::from_static(b"not a shard either"))
        .await
        .unwrap_err();
    assert!(matches!(e, xet_cas::CasError::InvalidShard { .. }), "{e:?}");
    let shard_err = e
        .source()
        .and_then(|s| s.downcast_ref::<xet_shard::ShardError>());
    assert!(shard_err.is_some(), "the source is the ShardError: {e:?}");
}

/// A failed read of the store's files keeps the `io::Error`, so its kind is visible:
/// here the dedup secret's path is a directory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_storage_failure_keeps_its_io_error() {
    use std::error::Error as _;
    let dir = tempfile::tempdir().expect("tempdir");
    drop(open_store(dir.path()).await.expect("open"));
    let secret = dir.path().join("meta").join(xet_store::DEDUP_SECRET_KEY);
    std::fs::remove_file(&secret).expect("the store wrote its dedup secret");
    std::fs::create_dir(&secret).unwrap();
    let e = open_store(dir.path()).await.unwrap_err();
    assert!(matches!(e, xet_cas::CasError::Storage { .. }), "{e:?}");
    let kind = e
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>())
        .map(|io| io.kind());
    assert_eq!(kind, Some(std::io::ErrorKind::IsADirectory), "{e:?}");
    // The message names the file; the chain adds the cause once.
    assert!(e.to_string().contains(&secret.display().to_string()), "{e}");
    let chain = xet_cas::error_chain(&e);
    let cause = e.source().unwrap().to_string();
    assert_eq!(chain.matches(&cause).count(), 1, "{chain}");
}

/// A record written before records had versions (`hub/repos/<rk>/record`, the only file)
/// is read as it is, and changes from it like from any version: an update, a deletion
/// (the old file stays, superseded), a creation again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_from_before_versions_is_read_and_changed() {
    use xet_hub::{RepoId, RepoRef, RepoStore, RepoType, Repos};
    let dir = tempfile::tempdir().expect("tempdir");
    let r = RepoRef::new(RepoType::Dataset, RepoId::parse("org/old").unwrap());
    let repo_dir = dir
        .path()
        .join("hub/repos")
        .join(hex(&xet_store::hub_repo_name(&r)));
    std::fs::create_dir_all(&repo_dir).unwrap();
    let legacy = r#"{"kind":"dataset","id":"org/old","private":false,"owner":"a","created_at":1}"#;
    std::fs::write(repo_dir.join("record"), legacy).unwrap();
    let store = std::sync::Arc::new(open_store(dir.path()).await.expect("open"));
    let repos = Repos::new(store.clone());
    let head = store.repo_head(&r).await.unwrap().expect("the old record");
    assert_eq!((head.version, head.record.owner.as_str()), (0, "a"));
    assert!(
        !store.create_repo(&r, &head.record).await.unwrap(),
        "exists"
    );

    let private = repos.set_private(&r, true).await.unwrap();
    assert!(private.private);
    assert!(repo_dir.join("records/00000000000000000001").is_file());
    assert_eq!(
        store.update_repo(&r, &head, None).await.unwrap(),
        None,
        "the old record is no longer the current one"
    );
    assert!(store.delete_repo(&r).await.unwrap());
    assert!(store.repo(&r).await.unwrap().is_none());
    assert!(repo_dir.join("record").is_file(), "superseded, not removed");
    assert!(store.create_repo(&r, &head.record).await.unwrap());
    assert_eq!(store.repo(&r).await.unwrap(), Some(head.record));
}
