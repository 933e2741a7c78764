//! Garbage collection on a real store directory (`docs/STORE.md`, "Deletion and garbage
//! collection"): what no repository or bucket names is reclaimed, the rest reconstructs
//! byte for byte; condemned objects are refused as new references, then deleted only
//! after the grace period; a second server on the directory forgets what was reclaimed;
//! what was reclaimed can be uploaded again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use xet_cas::{Cas, CasError};
use xet_cas_conformance::{Upload, read_file, upload_of};
use xet_hash::MerkleHash;
use xet_hub::{
    BranchName, CommitMeta, FileEntry, FileMeta, Operation, RepoId, RepoPath, RepoRef, RepoStore,
    RepoType, Repos, Sha256,
};
use xet_store::{FsBackend, GcOptions, StoreCas, open_store};

fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

async fn put(store: &StoreCas<FsBackend>, u: &Upload) {
    for x in &u.xorbs {
        store
            .put_xorb(&x.hash, Bytes::from(x.body.clone()).into())
            .await
            .unwrap();
    }
    store.put_shard(Bytes::from(u.shard.clone())).await.unwrap();
}

fn bytes_of(u: &Upload) -> u64 {
    u.xorbs.iter().map(|x| x.footered.len() as u64).sum()
}

async fn read(store: &StoreCas<FsBackend>, h: &MerkleHash, size: usize) -> Result<Vec<u8>, String> {
    read_file(store, h, size as u64, None).await
}

fn path(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

fn repo(kind: RepoType, id: &str) -> RepoRef {
    RepoRef::new(kind, RepoId::parse(id).unwrap())
}

fn meta() -> CommitMeta {
    CommitMeta {
        summary: "add".into(),
        description: String::new(),
        author: "alice".into(),
        created_at: 1_700_000_000,
    }
}

/// Commits `file` (`size` bytes) at `p` on main.
async fn commit(repos: &Repos, r: &RepoRef, p: &str, file: MerkleHash, size: usize) {
    let entry = FileEntry::lfs(file, Sha256::from_bytes([7; 32]), size as u64);
    let ops = [Operation::Add {
        path: path(p),
        entry,
    }];
    let main = BranchName::parse("main").unwrap();
    repos
        .commit_to_branch(r, &main, None, &ops, &meta())
        .await
        .unwrap();
}

/// Sets the time of every file below `dir` back by `by`.
fn age(dir: &Path, by: Duration) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            age(&p, by);
        } else {
            let t = std::fs::metadata(&p).unwrap().modified().unwrap() - by;
            std::fs::File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
        }
    }
}

#[tokio::test]
async fn gc_reclaims_what_nothing_names_and_keeps_every_live_byte() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let (a, b, c, d) = (
        random(400_000, 1),
        random(300_000, 2),
        random(350_000, 3),
        random(500_000, 4),
    );
    let (ua, ub, uc, ud) = (
        upload_of(std::slice::from_ref(&a)),
        upload_of(std::slice::from_ref(&b)),
        upload_of(std::slice::from_ref(&c)),
        upload_of(std::slice::from_ref(&d)),
    );
    for u in [&ua, &ub, &uc, &ud] {
        put(&store, u).await;
    }
    // a: in a model's history (overwritten later, still live); b: a bucket file
    // overwritten by c; d: in a repository that is then deleted.
    let keep = repo(RepoType::Model, "org/keep");
    repos.create(&keep, "alice", false, 1).await.unwrap();
    commit(&repos, &keep, "w.bin", ua.files[0], a.len()).await;
    commit(&repos, &keep, "w.bin", uc.files[0], c.len()).await;
    let bucket = repo(RepoType::Bucket, "org/ckpt");
    repos
        .create_bucket(&bucket, "alice", true, 1_000)
        .await
        .unwrap();
    let add = |h: MerkleHash, size: usize| Operation::Add {
        path: path("ckpt/state.bin"),
        entry: FileEntry::bucket(h, size as u64, FileMeta::default()),
    };
    repos
        .bucket_batch(&bucket, vec![add(ub.files[0], b.len())], "alice", 2_000)
        .await
        .unwrap();
    repos
        .bucket_batch(&bucket, vec![add(uc.files[0], c.len())], "alice", 3_000)
        .await
        .unwrap();
    // The bucket moves: its files stay live under the new name.
    let moved = repo(RepoType::Bucket, "team/ckpt");
    repos.move_repo(&bucket, &moved).await.unwrap();
    let gone = repo(RepoType::Model, "org/gone");
    repos.create(&gone, "alice", false, 1).await.unwrap();
    commit(&repos, &gone, "d.bin", ud.files[0], d.len()).await;
    assert!(store.delete_repo(&gone).await.unwrap());

    let r = store
        .gc(GcOptions::with_grace(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        (r.deleted_shards, r.deleted_xorbs),
        (2, (ub.xorbs.len() + ud.xorbs.len()) as u64),
        "{r:?}"
    );
    let only_theirs = bytes_of(&ub) + bytes_of(&ud);
    assert!(
        r.freed_bytes * 10 >= only_theirs * 9,
        "{r:?} of {only_theirs}"
    );
    assert_eq!(r.live_files, 2, "{r:?}");

    // This process and a fresh one: live files whole, reclaimed ones unknown.
    let fresh = open_store(dir.path()).await.unwrap();
    for s in [&*store, &fresh] {
        assert_eq!(read(s, &ua.files[0], a.len()).await.unwrap(), a);
        assert_eq!(read(s, &uc.files[0], c.len()).await.unwrap(), c);
        for h in [&ub.files[0], &ud.files[0]] {
            assert_eq!(s.file_size(h).await.unwrap(), None);
        }
    }
    let check = store.check(true).await.unwrap();
    assert!(check.problems.is_empty(), "{:?}", check.problems);
    assert!(check.objects_read > 0);

    // Nothing more to do; and what was reclaimed uploads again, whole.
    let again = store
        .gc(GcOptions::with_grace(Duration::ZERO))
        .await
        .unwrap();
    assert_eq!(
        (
            again.deleted_shards,
            again.deleted_xorbs,
            again.condemned_shards
        ),
        (0, 0, 0)
    );
    put(&store, &ub).await;
    assert_eq!(read(&store, &ub.files[0], b.len()).await.unwrap(), b);
}

#[tokio::test]
async fn condemned_objects_are_doomed_refused_then_deleted_after_the_grace() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let other = Arc::new(open_store(dir.path()).await.unwrap());
    let x = random(300_000, 9);
    let ux = upload_of(std::slice::from_ref(&x));
    put(&store, &ux).await;
    let hour = Duration::from_secs(3600);
    age(&dir.path().join("xorbs"), 2 * hour);
    age(&dir.path().join("shards"), 2 * hour);
    // Longer than a server's cached view of the doomed lists (2 s).
    let opts = GcOptions {
        settle: Duration::from_secs(4),
        ..GcOptions::with_grace(hour)
    };

    // A dry run changes nothing.
    let dry = store
        .gc(GcOptions {
            dry_run: true,
            ..opts
        })
        .await
        .unwrap();
    assert_eq!(dry.condemned_shards, 1);
    assert!(
        dir.path().join("meta").read_dir().unwrap().count() == 1,
        "only the secret"
    );

    // Condemned, not deleted: the same content uploaded again is accepted (and would
    // be kept by the next mark if something named it); dedup answers leave the xorb out
    // after a refresh.
    let r = store.gc(opts).await.unwrap();
    assert_eq!(
        (r.condemned_shards, r.condemned_xorbs, r.deleted_xorbs),
        (1, ux.xorbs.len() as u64, 0),
        "{r:?}"
    );
    for s in [&store, &other] {
        assert!(s.put_shard(Bytes::from(ux.shard.clone())).await.is_ok());
        assert_eq!(
            s.file_size(&ux.files[0]).await.unwrap(),
            Some(x.len() as u64)
        );
    }
    let first_chunk = ux.xorbs[0].chunks[0].0;
    assert!(
        store.dedup_shard(&first_chunk).await.unwrap().is_some(),
        "indexed before the refresh"
    );
    store.refresh().await.unwrap();
    assert!(store.dedup_shard(&first_chunk).await.unwrap().is_none());

    // Within the grace of the list: nothing deleted, the objects wait.
    let r = store.gc(opts).await.unwrap();
    assert_eq!(
        (r.deleted_shards, r.pending_objects),
        (0, 1 + ux.xorbs.len() as u64),
        "{r:?}"
    );
    assert_eq!(read(&other, &ux.files[0], x.len()).await.unwrap(), x);

    // Past it: doomed, then (after the settle) deleted. While doomed, a new shard
    // naming the xorb and a new reference to the file are refused by the other server.
    age(&dir.path().join("meta"), 2 * hour);
    let running = tokio::spawn({
        let store = store.clone();
        async move { store.gc(opts).await }
    });
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert!(!running.is_finished(), "the run settles");
    match other.put_shard(Bytes::from(ux.shard.clone())).await {
        Err(CasError::MissingXorb { hash }) => assert_eq!(hash, ux.xorbs[0].hash),
        r => panic!("a shard naming a doomed xorb: {r:?}"),
    }
    assert_eq!(other.file_size(&ux.files[0]).await.unwrap(), None);
    let r = running.await.unwrap().unwrap();
    assert_eq!(
        (r.deleted_shards, r.deleted_xorbs),
        (1, ux.xorbs.len() as u64),
        "{r:?}"
    );
    assert_eq!(
        std::fs::read_dir(dir.path().join("xorbs")).unwrap().count(),
        0
    );
    // Before its refresh, the other server still has the xorb's footer cached: a shard
    // naming it is refused all the same.
    assert!(matches!(
        other.put_shard(Bytes::from(ux.shard.clone())).await,
        Err(CasError::MissingXorb { .. })
    ));
    other.refresh().await.unwrap();
    assert_eq!(other.file_size(&ux.files[0]).await.unwrap(), None);
    let metas: Vec<_> = std::fs::read_dir(dir.path().join("meta"))
        .unwrap()
        .collect();
    assert_eq!(metas.len(), 1, "the list went last, the secret stays");

    // Uploaded again through the other server: whole again for both.
    put(&other, &ux).await;
    store.refresh().await.unwrap();
    assert_eq!(read(&store, &ux.files[0], x.len()).await.unwrap(), x);
    let c = store.check(true).await.unwrap();
    assert!(c.problems.is_empty(), "{:?}", c.problems);
}

#[tokio::test]
async fn check_names_what_does_not_resolve() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let y = random(200_000, 5);
    let uy = upload_of(std::slice::from_ref(&y));
    put(&store, &uy).await;
    let r = repo(RepoType::Dataset, "org/data");
    repos.create(&r, "alice", false, 1).await.unwrap();
    commit(&repos, &r, "y.bin", uy.files[0], y.len()).await;
    assert!(store.check(true).await.unwrap().problems.is_empty());
    // A xorb's byte flipped: found by --read-data only.
    let xorb = dir.path().join("xorbs").join(uy.xorbs[0].hash.to_string());
    let mut bytes = std::fs::read(&xorb).unwrap();
    bytes[100] ^= 1;
    std::fs::remove_file(&xorb).unwrap();
    std::fs::write(&xorb, &bytes).unwrap();
    let fresh = Arc::new(open_store(dir.path()).await.unwrap());
    assert!(fresh.check(false).await.unwrap().problems.is_empty());
    let p = fresh.check(true).await.unwrap().problems;
    assert_eq!(p.len(), 1, "{p:?}");
    assert!(p[0].contains(&uy.xorbs[0].hash.to_string()), "{p:?}");
    // The xorb gone: its shard names a missing xorb, the file registered nowhere useful.
    std::fs::remove_file(&xorb).unwrap();
    let p = fresh.check(false).await.unwrap().problems;
    assert!(p.iter().any(|l| l.contains("is not stored")), "{p:?}");
    // A stats run sees the dataset's file.
    let s = fresh.store_stats().await.unwrap();
    assert_eq!(s.repos.len(), 1);
    assert_eq!(
        (s.repos[0].files, s.repos[0].file_bytes),
        (1, y.len() as u64)
    );
}

#[tokio::test]
async fn what_a_commit_names_after_condemnation_is_kept_by_the_second_mark() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let z = random(250_000, 11);
    let uz = upload_of(std::slice::from_ref(&z));
    put(&store, &uz).await;
    let hour = Duration::from_secs(3600);
    age(&dir.path().join("xorbs"), 2 * hour);
    age(&dir.path().join("shards"), 2 * hour);
    let opts = GcOptions {
        settle: Duration::ZERO,
        ..GcOptions::with_grace(hour)
    };
    let r = store.gc(opts).await.unwrap();
    assert_eq!(r.condemned_shards, 1, "{r:?}");
    // Referenced after the list was written: live again at the deleting run's mark.
    let r2 = repo(RepoType::Model, "org/late");
    repos.create(&r2, "alice", false, 1).await.unwrap();
    commit(&repos, &r2, "z.bin", uz.files[0], z.len()).await;
    age(&dir.path().join("meta"), 2 * hour);
    let r = store.gc(opts).await.unwrap();
    assert_eq!(
        (r.deleted_shards, r.deleted_xorbs, r.condemned_shards),
        (0, 0, 0),
        "{r:?}"
    );
    let fresh = open_store(dir.path()).await.unwrap();
    assert_eq!(read(&fresh, &uz.files[0], z.len()).await.unwrap(), z);
    let metas: Vec<_> = std::fs::read_dir(dir.path().join("meta"))
        .unwrap()
        .collect();
    assert_eq!(metas.len(), 1, "the list is done with");
}
