//! Storage buckets kept as repositories are (`xet_hub::bucket`), on a real store
//! directory: totals stay exact through replacements, deletions and replays; each
//! operation of a batch applies or fails alone; two servers on one directory writing one
//! path end with one of the two files; a bucket deleted and created again is empty.

use std::sync::Arc;

use xet_hub::{
    Applied, FileEntry, FileMeta, Item, Operation, RepoError, RepoId, RepoPath, RepoRef, RepoType,
    Repos,
};
use xet_store::open_store;

fn p(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

fn bucket() -> RepoRef {
    RepoRef::new(RepoType::Bucket, RepoId::parse("org/ckpt").unwrap())
}

fn file(n: u8, size: u64, mtime: i64) -> FileEntry {
    FileEntry::bucket(
        xet_hash::chunk_hash(&[n]),
        size,
        FileMeta {
            mtime_ms: Some(mtime),
            uploaded_ms: 1_000 + u64::from(n),
            content_type: Some("application/octet-stream".into()),
        },
    )
}

fn add(path: &str, entry: FileEntry) -> Operation {
    Operation::Add {
        path: p(path),
        entry,
    }
}

fn del(path: &str) -> Operation {
    Operation::DeleteFile { path: p(path) }
}

#[tokio::test]
async fn totals_stay_exact_and_each_operation_stands_alone() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let b = bucket();
    repos.create_bucket(&b, "alice", true, 5_000).await.unwrap();
    assert!(matches!(
        repos.create_bucket(&b, "bob", false, 6_000).await,
        Err(RepoError::RepoExists(_))
    ));
    let s = repos.bucket(&b).await.unwrap();
    assert_eq!(
        (s.totals.files, s.totals.bytes, s.totals.updated_ms),
        (0, 0, 5_000)
    );
    assert!(s.head.is_none() && s.record.private);

    let out = repos
        .bucket_batch(
            &b,
            vec![
                add("a/x.bin", file(1, 100, 7)),
                add("a/y.bin", file(2, 50, 8)),
                add("top", file(3, 1, 9)),
                // Below a file: fails alone.
                add("top/under", file(4, 1, 9)),
                // Where a folder is: fails alone.
                add("a", file(5, 1, 9)),
                del("never/there"),
            ],
            "alice",
            5_000,
        )
        .await
        .unwrap();
    let failed: Vec<usize> = (0..out.results.len())
        .filter(|&i| out.results[i].is_err())
        .collect();
    assert_eq!(failed, [3, 4]);
    assert_eq!(out.results[5], Ok(Applied::Deleted { removed: None }));
    assert_eq!((out.totals.files, out.totals.bytes), (3, 151));
    assert_eq!(
        out.totals.updated_ms, 5_001,
        "moves even within one millisecond"
    );

    // Replace one (its size changes), delete another, in one batch.
    let out = repos
        .bucket_batch(
            &b,
            vec![add("a/x.bin", file(6, 10, 20)), del("a/y.bin")],
            "alice",
            9_000,
        )
        .await
        .unwrap();
    assert!(out.results.iter().all(Result::is_ok));
    assert_eq!(
        (out.totals.files, out.totals.bytes, out.totals.updated_ms),
        (2, 11, 9_000)
    );
    // The same batch again: the file is re-stored (a new upload time would move it; the
    // same facts change nothing), the deletion finds nothing: no commit.
    let again = repos
        .bucket_batch(
            &b,
            vec![add("a/x.bin", file(6, 10, 20)), del("a/y.bin")],
            "alice",
            9_500,
        )
        .await
        .unwrap();
    assert!(again.commit.is_none());
    assert_eq!(again.totals, out.totals);

    // A fresh reader (no cache) sees the facts as written.
    let fresh = Repos::new(store.clone());
    let s = fresh.bucket(&b).await.unwrap();
    assert_eq!((s.totals.files, s.totals.bytes), (2, 11));
    let tree = s.tree.unwrap();
    // Objects are read where the bucket keeps them, not under its name.
    let kept = &s.storage;
    assert_ne!(kept, &b);
    let Some(Item::File(f)) = fresh.entry(kept, &tree, &p("a/x.bin")).await.unwrap() else {
        panic!("a/x.bin is a file");
    };
    assert_eq!(f, file(6, 10, 20));
    let page = fresh
        .list(kept, &tree, None, true, None, 100)
        .await
        .unwrap()
        .unwrap();
    let paths: Vec<&str> = page.entries.iter().map(|e| e.path.as_str()).collect();
    assert_eq!(paths, ["a", "a/x.bin", "top"]);
}

#[tokio::test]
async fn two_servers_writing_one_path_end_with_one_file_and_exact_totals() {
    let dir = tempfile::tempdir().unwrap();
    let one = Repos::new(Arc::new(open_store(dir.path()).await.unwrap()));
    let two = Repos::new(Arc::new(open_store(dir.path()).await.unwrap()));
    let b = bucket();
    one.create_bucket(&b, "alice", false, 1).await.unwrap();
    let mut tasks = Vec::new();
    for i in 0..16u8 {
        let r = if i % 2 == 0 { one.clone() } else { two.clone() };
        let b = b.clone();
        tasks.push(tokio::spawn(async move {
            let ops = vec![
                add("shared.bin", file(i, u64::from(i) + 1, 1)),
                add(&format!("own/{i}"), file(100 + i, 1000, 1)),
            ];
            r.bucket_batch(&b, ops, "alice", 10).await.unwrap()
        }));
    }
    for t in tasks {
        assert!(t.await.unwrap().commit.is_some());
    }
    let s = two.bucket(&b).await.unwrap();
    let Some(Item::File(shared)) = one
        .entry(&s.storage, &s.tree.unwrap(), &p("shared.bin"))
        .await
        .unwrap()
    else {
        panic!("shared.bin is a file");
    };
    let winner = (0..16u8)
        .find(|&i| file(i, u64::from(i) + 1, 1) == shared)
        .expect("one writer's file, whole");
    assert_eq!(s.totals.files, 17);
    assert_eq!(s.totals.bytes, 16 * 1000 + u64::from(winner) + 1);
    assert!(
        s.totals.updated_ms >= 10 + 15,
        "every batch moved updatedAt"
    );
}

#[tokio::test]
async fn a_bucket_deleted_and_created_again_is_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let b = bucket();
    repos.create_bucket(&b, "alice", false, 1).await.unwrap();
    repos
        .bucket_batch(&b, vec![add("f", file(1, 5, 1))], "alice", 2)
        .await
        .unwrap();
    assert!(xet_hub::RepoStore::delete_repo(&*store, &b).await.unwrap());
    assert!(matches!(
        repos.bucket(&b).await,
        Err(RepoError::RepoNotFound(_))
    ));
    assert!(matches!(
        repos
            .bucket_batch(&b, vec![add("g", file(2, 5, 1))], "alice", 3)
            .await,
        Err(RepoError::RepoNotFound(_))
    ));
    repos.create_bucket(&b, "bob", false, 4).await.unwrap();
    let s = repos.bucket(&b).await.unwrap();
    assert_eq!((s.totals.files, s.head), (0, None));
}

fn named(id: &str) -> RepoRef {
    RepoRef::new(RepoType::Bucket, RepoId::parse(id).unwrap())
}

/// A move that stopped after marking its source (a crash): the source is read-only, no
/// other move of it starts, and asking the same move again finishes it; so does asking
/// it again after the target was written too.
#[tokio::test]
async fn a_move_stopped_half_way_takes_no_writes_and_finishes_when_asked_again() {
    let dir = tempfile::tempdir().unwrap();
    let repos = Repos::new(Arc::new(open_store(dir.path()).await.unwrap()));
    let (b, to) = (bucket(), named("org/moved"));
    repos.create_bucket(&b, "alice", false, 1).await.unwrap();
    repos
        .bucket_batch(&b, vec![add("f", file(1, 5, 1))], "alice", 2)
        .await
        .unwrap();
    // Step 1 of a move to `to`, and nothing after it.
    repos
        .update_record(&b, |r| {
            Ok(Some(xet_hub::RepoRecord {
                moving_to: Some(to.id.clone()),
                ..r.clone()
            }))
        })
        .await
        .unwrap();
    let moving = |r: Result<_, RepoError>| matches!(r, Err(RepoError::Moving { .. }));
    assert!(moving(
        repos
            .bucket_batch(&b, vec![add("g", file(2, 5, 1))], "alice", 3)
            .await
            .map(drop)
    ));
    assert!(moving(repos.set_private(&b, true).await.map(drop)));
    assert!(moving(repos.delete_bucket(&b).await));
    assert!(moving(
        repos.move_repo(&b, &named("org/elsewhere")).await.map(drop)
    ));
    assert_eq!(
        repos.bucket(&b).await.unwrap().totals.files,
        1,
        "still readable"
    );

    repos.move_repo(&b, &to).await.unwrap();
    let s = repos.bucket(&to).await.unwrap();
    assert_eq!((s.totals.files, s.totals.bytes), (1, 5));
    assert!(matches!(
        repos.bucket(&b).await,
        Err(RepoError::RepoNotFound(_))
    ));

    // Stopped after writing the target: asked again, it finishes the same way.
    let next = named("org/next");
    repos
        .update_record(&to, |r| {
            Ok(Some(xet_hub::RepoRecord {
                moving_to: Some(next.id.clone()),
                ..r.clone()
            }))
        })
        .await
        .unwrap();
    let record = repos.record(&to).await.unwrap();
    let target = xet_hub::RepoRecord {
        id: next.id.clone(),
        moving_to: None,
        ..record
    };
    assert!(repos.store().create_repo(&next, &target).await.unwrap());
    assert!(
        moving(
            repos
                .bucket_batch(&to, vec![add("g", file(2, 5, 1))], "alice", 3)
                .await
                .map(drop)
        ),
        "only the target is writable"
    );
    repos.move_repo(&to, &next).await.unwrap();
    assert_eq!(repos.bucket(&next).await.unwrap().totals.files, 1);
    assert!(repos.bucket(&to).await.is_err());
}

/// A bucket created before homes existed (kept under its name) moves with its files; its
/// file references lead to it under the new name; its old name created again is empty
/// and holds none of them.
#[tokio::test]
async fn a_bucket_kept_under_its_name_moves_and_its_old_name_starts_empty() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let (b, to) = (bucket(), named("org/new"));
    let legacy = xet_hub::RepoRecord {
        kind: RepoType::Bucket,
        id: b.id.clone(),
        private: false,
        owner: "alice".into(),
        created_at: 1,
        created_ms: Some(1_000),
        incarnation: Some(7),
        home: None,
        moving_to: None,
    };
    assert!(
        xet_hub::RepoStore::create_repo(&*store, &b, &legacy)
            .await
            .unwrap()
    );
    let f = file(1, 5, 1);
    repos
        .bucket_batch(&b, vec![add("f", f.clone())], "alice", 2)
        .await
        .unwrap();
    assert_eq!(
        repos.bucket(&b).await.unwrap().storage,
        b,
        "kept under its name"
    );
    let holders = || async {
        let found = xet_hub::RepoStore::repos_referencing(&*store, &f.xet_hash).await;
        found
            .unwrap()
            .into_iter()
            .map(|r| r.id.to_string())
            .collect::<Vec<_>>()
    };
    assert_eq!(holders().await, ["org/ckpt"]);

    repos.move_repo(&b, &to).await.unwrap();
    let s = repos.bucket(&to).await.unwrap();
    assert_eq!((s.storage.clone(), s.totals.files), (b.clone(), 1));
    assert_eq!(s.record.created_ms, Some(1_000));
    assert_eq!(holders().await, ["org/new"]);

    repos.create_bucket(&b, "bob", false, 10).await.unwrap();
    let fresh = repos.bucket(&b).await.unwrap();
    assert_eq!((fresh.totals.files, fresh.head), (0, None));
    assert_ne!(fresh.storage, b);
    assert_eq!(
        holders().await,
        ["org/new"],
        "the new bucket holds none of them"
    );
    assert_eq!(repos.bucket(&to).await.unwrap().totals.files, 1);
}
