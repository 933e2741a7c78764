//! Conformance of [`RepoStore`] implementations: the contract written in
//! `xet_hub::store`, checked through two instances of one store over the same backend
//! ([`Twins`]: two processes, or two servers on one directory or bucket).
//!
//! Each case takes **fresh, empty** twins; failures panic with a message naming the case
//! and what differed. Run them all with
//! [`repo_store_conformance_tests!`](crate::repo_store_conformance_tests) (one
//! `#[tokio::test]` per case) or [`run_all`]. The cases:
//!
//! - [`records`]: creating a repository twice gives `false` (through either instance),
//!   records round-trip, the type is part of the name;
//! - [`record_updates`]: a record changes by compare-and-swap (stale and forged versions
//!   refused, [`UPDATERS`] concurrent updates from one version across both instances:
//!   exactly one wins), deletion is such a change, a deleted repository is created again;
//! - [`storage_holders`]: the holder of a bucket storage moves by compare-and-swap, and
//!   `repos_referencing` follows it to the record of the bucket kept there (a name moved
//!   away and created again holds nothing of it);
//! - [`commits`]: commits round-trip byte for byte, storing one again is a no-op, each
//!   repository has its own;
//! - [`branches`]: creation, compare-and-swap from the current head, refusal from a stale
//!   or forged head, listing sorted by name;
//! - [`concurrent_commits`]: [`COMMITTERS`] concurrent `Repos::commit_to_branch` without a
//!   parent, split across the instances, all land (every file in the final tree, every
//!   commit on the parent chain);
//! - [`visible_across_instances`]: a commit or branch made through one instance is seen
//!   through the other at once;
//! - [`stale_parent`]: a commit on a parent that is no longer the head is
//!   `RepoError::ParentMismatch` and changes nothing;
//! - [`sha256_claims`]: a shard's FileMetadataExt sha256s are claimed through the
//!   instance that took the shard and, without any explicit refresh, through the other;
//! - [`verified_sha256`]: the first verified file of a sha256 is kept and shared;
//! - [`deleted_refs`]: a ref (branch, tag) is deleted by compare-and-swap (a stale head
//!   refused; of racing deletions and moves exactly one wins), is then gone from reads and
//!   listings through both instances, and created again continues its versions, so a head
//!   read before the deletion never matches again; a tag's message is kept;
//! - [`discussions`]: numbers are taken from 1 without gaps, [`UPDATERS`] concurrent
//!   creations across both instances get distinct numbers, a discussion changes by
//!   compare-and-swap;
//! - [`listed_repos`]: `repos(kind)` lists the live repositories of that kind, not a
//!   deleted one, nor another kind.

use std::any::Any;
use std::collections::BTreeSet;
use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;
use sha2::Digest as _;
use xet_cas::Cas;
use xet_hub::commit::Stored;
use xet_hub::{
    BranchHead, BranchName, Commit, CommitId, CommitMeta, FileEntry, Home, Operation, RecordHead,
    RepoError, RepoId, RepoObject, RepoPath, RepoRecord, RepoRef, RepoStore, RepoType, Repos,
    Revision,
};

use crate::fixture::fixture;
use crate::{text_err, upload_shards, upload_xorbs};

/// How many commits [`concurrent_commits`] races onto one branch.
pub const COMMITTERS: usize = 12;

/// How many updates [`record_updates`] races from one version of a record.
pub const UPDATERS: usize = 12;

/// A store under test: the CAS (to upload the shards whose sha256s are claimed) and the
/// repository store, as one object.
pub trait HubStore: Cas + RepoStore {}

impl<T: Cas + RepoStore> HubStore for T {}

/// Two instances of one store over the same backend, plus whatever must outlive them (a
/// temporary directory, a server). Dropped in order: the stores first, then the guard.
pub struct Twins {
    pub a: Arc<dyn HubStore>,
    pub b: Arc<dyn HubStore>,
    _guard: Box<dyn Any + Send + Sync>,
}

impl Twins {
    pub fn new(a: impl HubStore, b: impl HubStore) -> Self {
        Self::with_guard(a, b, ())
    }

    pub fn with_guard(a: impl HubStore, b: impl HubStore, guard: impl Any + Send + Sync) -> Self {
        Twins {
            a: Arc::new(a),
            b: Arc::new(b),
            _guard: Box::new(guard),
        }
    }

    fn repos(&self) -> (Repos, Repos) {
        let (a, b): (Arc<dyn RepoStore>, Arc<dyn RepoStore>) = (self.a.clone(), self.b.clone());
        (Repos::new(a), Repos::new(b))
    }
}

/// One `#[tokio::test]` per case. `$make` is a function or closure with no arguments
/// returning a future of fresh, empty [`Twins`]. The calling crate needs `tokio` (macros,
/// multi-thread runtime) as a dev-dependency.
///
/// ```ignore
/// mod repos {
///     async fn make() -> xet_cas_conformance::repos::Twins {
///         let backend = xet_store::MemoryBackend::new();
///         let a = xet_store::StoreCas::open(backend.clone()).await.unwrap();
///         let b = xet_store::StoreCas::open(backend).await.unwrap();
///         xet_cas_conformance::repos::Twins::new(a, b)
///     }
///     xet_cas_conformance::repo_store_conformance_tests!(make);
/// }
/// ```
#[macro_export]
macro_rules! repo_store_conformance_tests {
    ($make:expr) => {
        $crate::repo_store_conformance_tests!(@cases $make;
            records, record_updates, storage_holders, commits, branches, concurrent_commits,
            visible_across_instances, stale_parent, sha256_claims, verified_sha256,
            deleted_refs, discussions, listed_repos);
    };
    (@cases $make:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let twins = ($make)().await;
                $crate::repos::$case(&twins).await;
            }
        )*
    };
}

/// Every case, each on fresh twins from `make`.
pub async fn run_all<F, Fut>(make: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Twins>,
{
    records(&make().await).await;
    record_updates(&make().await).await;
    storage_holders(&make().await).await;
    commits(&make().await).await;
    branches(&make().await).await;
    concurrent_commits(&make().await).await;
    visible_across_instances(&make().await).await;
    stale_parent(&make().await).await;
    sha256_claims(&make().await).await;
    verified_sha256(&make().await).await;
    deleted_refs(&make().await).await;
    discussions(&make().await).await;
    listed_repos(&make().await).await;
}

// ---------------------------------------------------------------------------------------
// Helpers

fn repo(kind: RepoType, id: &str) -> RepoRef {
    RepoRef::new(kind, RepoId::parse(id).expect("valid repository id"))
}

fn branch(name: &str) -> BranchName {
    BranchName::parse(name).expect("valid branch name")
}

fn path(p: &str) -> RepoPath {
    RepoPath::parse(p).expect("valid path")
}

fn main_branch() -> BranchName {
    BranchName::main()
}

/// A regular file entry whose content is `content`.
fn entry(content: &[u8]) -> FileEntry {
    FileEntry::regular(xet_hash::chunk_hash(content), content)
}

fn meta(summary: &str, author: &str) -> CommitMeta {
    CommitMeta {
        summary: summary.to_string(),
        description: String::new(),
        author: author.to_string(),
        created_at: 1_700_000_000,
    }
}

fn add(p: &str, content: &[u8]) -> Operation {
    Operation::Add {
        path: path(p),
        entry: entry(content),
    }
}

/// A commit of the empty tree on `parent`, encoded: its id and bytes.
fn commit(parent: Option<CommitId>, summary: &str) -> (CommitId, Bytes) {
    let c = Commit {
        tree: xet_hub::git::empty_tree_id(),
        parent,
        summary: summary.to_string(),
        description: String::new(),
        author: "conformance".to_string(),
        created_at: 1_700_000_000,
    };
    let (id, bytes) = c.encode();
    (id, Bytes::from(bytes))
}

fn record(r: &RepoRef, owner: &str, private: bool) -> RepoRecord {
    RepoRecord {
        kind: r.kind,
        id: r.id.clone(),
        private,
        owner: owner.to_string(),
        created_at: 1_700_000_000,
        created_ms: None,
        incarnation: None,
        home: None,
        moving_to: None,
    }
}

async fn head(store: &dyn RepoStore, r: &RepoRef, b: &BranchName, what: &str) -> BranchHead {
    match store.branch(r, b).await {
        Ok(Some(h)) => h,
        other => panic!("{what}: head of branch {b} of {r}: {other:?}"),
    }
}

/// Create `r` through `repos` (an initial commit on `main`) and return that commit.
async fn create(repos: &Repos, r: &RepoRef, what: &str) -> CommitId {
    repos
        .create(r, "alice", false, 1_700_000_000)
        .await
        .unwrap_or_else(|e| panic!("{what}: creating {r}: {e}"));
    head(&**repos.store(), r, &main_branch(), what).await.commit
}

/// The paths of every file of `c`'s tree.
async fn file_names(repos: &Repos, r: &RepoRef, c: &Commit) -> Vec<String> {
    let files = repos.files(r, &c.tree).await;
    let files = files.unwrap_or_else(|e| panic!("the files of tree {} of {r}: {e}", c.tree));
    files.into_iter().map(|(p, _)| p).collect()
}

// ---------------------------------------------------------------------------------------
// Cases

/// Records: created once (the second creation, through either instance, is `false` and
/// changes nothing), read back equal through both; the type is part of the name.
pub async fn records(t: &Twins) {
    let r = repo(RepoType::Model, "org/records");
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.repo(&r).await),
            Ok(None),
            "records: {who} before creation"
        );
    }
    let rec = record(&r, "alice", true);
    assert_eq!(
        text_err(t.a.create_repo(&r, &rec).await),
        Ok(true),
        "records: first creation"
    );
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        let other = record(&r, &format!("mallory-{who}"), false);
        assert_eq!(
            text_err(s.create_repo(&r, &other).await),
            Ok(false),
            "records: second creation through {who}"
        );
    }
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.repo(&r).await),
            Ok(Some(rec.clone())),
            "records: the first record, read through {who}"
        );
    }

    // Same id, another type: another repository.
    let d = repo(RepoType::Dataset, "org/records");
    assert_eq!(
        text_err(t.b.repo(&d).await),
        Ok(None),
        "records: dataset of a model's id"
    );
    let drec = record(&d, "bob", false);
    assert_eq!(
        text_err(t.b.create_repo(&d, &drec).await),
        Ok(true),
        "records: dataset creation"
    );
    assert_eq!(
        text_err(t.a.repo(&d).await),
        Ok(Some(drec)),
        "records: dataset record"
    );
    assert_eq!(
        text_err(t.a.repo(&r).await),
        Ok(Some(rec)),
        "records: model record unchanged"
    );

    // Through the engine: the second creation is RepoExists, and `main` holds the
    // initial commit for both instances.
    let (ra, rb) = t.repos();
    let s = repo(RepoType::Space, "org/created");
    let initial = create(&ra, &s, "records").await;
    match rb.create(&s, "bob", true, 1_700_000_001).await {
        Err(RepoError::RepoExists(x)) if x == s => {}
        other => panic!("records: creating {s} again through b: {other:?}"),
    }
    let rec = rb.record(&s).await.expect("records: engine record");
    assert_eq!(
        (rec.owner.as_str(), rec.private),
        ("alice", false),
        "records: first owner kept"
    );
    let (id, c) = rb
        .resolve(&s, &Revision::Branch(main_branch()))
        .await
        .expect("records: main of a new repository");
    assert_eq!(id, initial, "records: main through b");
    assert!(
        file_names(&rb, &s, &c).await.is_empty() && c.parent.is_none(),
        "records: initial commit {c:?}"
    );
}

/// Records change by compare-and-swap: from the current version through either instance;
/// never from a stale version or from the current version with another record; of
/// [`UPDATERS`] concurrent updates from one version, split across the instances, exactly
/// one lands. A deletion is such a change: an update from before it fails, reads answer
/// nothing, and the repository can be created again, with the new record.
pub async fn record_updates(t: &Twins) {
    let r = repo(RepoType::Bucket, "org/updates");
    let first = record(&r, "alice", false);
    assert_eq!(
        text_err(t.a.create_repo(&r, &first).await),
        Ok(true),
        "record_updates: creation"
    );
    let h1 = match t.b.repo_head(&r).await {
        Ok(Some(h)) => h,
        other => panic!("record_updates: head through b: {other:?}"),
    };
    assert_eq!(h1.record, first, "record_updates: the created record");
    let private = RepoRecord {
        private: true,
        ..first.clone()
    };
    let v2 = match t.b.update_repo(&r, &h1, Some(&private)).await {
        Ok(Some(v)) => v,
        other => panic!("record_updates: update from the current version: {other:?}"),
    };
    assert!(
        v2 > h1.version,
        "record_updates: version {} -> {v2}",
        h1.version
    );
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.repo(&r).await),
            Ok(Some(private.clone())),
            "record_updates: updated record through {who}"
        );
    }
    let h2 = RecordHead {
        record: private.clone(),
        version: v2,
    };
    let forged = RecordHead {
        record: first.clone(),
        version: v2,
    };
    let other = record(&r, "mallory", true);
    for (what, from) in [("a stale version", &h1), ("a forged version", &forged)] {
        for (who, s) in [("a", &t.a), ("b", &t.b)] {
            assert_eq!(
                text_err(s.update_repo(&r, from, Some(&other)).await),
                Ok(None),
                "record_updates: update from {what} through {who}"
            );
        }
    }

    // Concurrent updates from one version: exactly one lands, and it is what is read.
    let mut racers = tokio::task::JoinSet::new();
    for i in 0..UPDATERS {
        let s = if i.is_multiple_of(2) { &t.a } else { &t.b };
        let (s, r, from) = (Arc::clone(s), r.clone(), h2.clone());
        let to = record(&r, &format!("owner{i}"), false);
        racers.spawn(async move { (to.clone(), s.update_repo(&r, &from, Some(&to)).await) });
    }
    let mut winners = Vec::new();
    while let Some(raced) = racers.join_next().await {
        let (to, landed) = raced.expect("record_updates: updater task");
        match landed {
            Ok(Some(_)) => winners.push(to),
            Ok(None) => {}
            Err(e) => panic!("record_updates: concurrent update: {e}"),
        }
    }
    assert_eq!(winners.len(), 1, "record_updates: winners {winners:?}");
    assert_eq!(
        text_err(t.a.repo(&r).await),
        Ok(Some(winners[0].clone())),
        "record_updates: the winner is the record"
    );

    // Deletion: a change like the others; then created again.
    let h3 =
        t.b.repo_head(&r)
            .await
            .expect("record_updates: head")
            .expect("exists");
    assert_eq!(
        text_err(t.a.delete_repo(&r).await),
        Ok(true),
        "record_updates: deletion"
    );
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.repo(&r).await),
            Ok(None),
            "record_updates: deleted, through {who}"
        );
        assert_eq!(
            text_err(s.delete_repo(&r).await),
            Ok(false),
            "record_updates: deleting again through {who}"
        );
    }
    assert_eq!(
        text_err(t.b.update_repo(&r, &h3, Some(&private)).await),
        Ok(None),
        "record_updates: an update from before the deletion brings nothing back"
    );
    let again = record(&r, "bob", false);
    assert_eq!(
        text_err(t.b.create_repo(&r, &again).await),
        Ok(true),
        "record_updates: created again"
    );
    assert_eq!(
        text_err(t.a.create_repo(&r, &first).await),
        Ok(false),
        "record_updates: created again, twice"
    );
    assert_eq!(
        text_err(t.a.repo(&r).await),
        Ok(Some(again)),
        "record_updates: the new record"
    );
}

/// The holder of a bucket storage: set once from nothing, moved only from its current
/// version; `repos_referencing` follows it from the references kept in the storage to
/// the record naming that storage, and not to a name that no longer keeps it there.
pub async fn storage_holders(t: &Twins) {
    let storage = RepoRef::new(RepoType::Bucket, RepoId::storage(0x5eed));
    let (old, new) = (
        repo(RepoType::Bucket, "org/before"),
        repo(RepoType::Bucket, "org/after"),
    );
    assert_eq!(
        text_err(t.a.storage_holder(&storage).await),
        Ok(None),
        "storage_holders: none yet"
    );
    assert_eq!(
        text_err(t.a.set_storage_holder(&storage, None, &old.id).await),
        Ok(true),
        "storage_holders: first holder"
    );
    assert_eq!(
        text_err(t.b.set_storage_holder(&storage, None, &new.id).await),
        Ok(false),
        "storage_holders: a first holder again"
    );
    let h1 = match t.b.storage_holder(&storage).await {
        Ok(Some(h)) => h,
        other => panic!("storage_holders: holder through b: {other:?}"),
    };
    assert_eq!(h1.name, old.id, "storage_holders: the first holder");
    let kept = RepoRecord {
        home: Some(Home::Own(0x5eed)),
        ..record(&old, "alice", true)
    };
    t.a.create_repo(&old, &kept)
        .await
        .expect("storage_holders: record");
    let file = xet_hash::chunk_hash(b"kept apart");
    t.b.record_file_reference(&storage, &file)
        .await
        .expect("storage_holders: reference");
    let holders = |s: Arc<dyn HubStore>| async move {
        let found = s.repos_referencing(&file).await;
        let found = found.unwrap_or_else(|e| panic!("storage_holders: holders: {e}"));
        found
            .into_iter()
            .map(|r| r.id.to_string())
            .collect::<Vec<_>>()
    };
    for s in [&t.a, &t.b] {
        assert_eq!(
            holders(Arc::clone(s)).await,
            ["org/before"],
            "storage_holders: before"
        );
    }

    // Moved: a record under the new name with the same home, the holder moved, the old
    // name deleted and created again elsewhere.
    t.b.create_repo(
        &new,
        &RepoRecord {
            home: Some(Home::Own(0x5eed)),
            ..record(&new, "alice", true)
        },
    )
    .await
    .expect("storage_holders: the new name");
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(
                s.set_storage_holder(&storage, Some(h1.version + 1), &new.id)
                    .await
            ),
            Ok(false),
            "storage_holders: from a version that is not there, through {who}"
        );
    }
    assert_eq!(
        text_err(
            t.a.set_storage_holder(&storage, Some(h1.version), &new.id)
                .await
        ),
        Ok(true),
        "storage_holders: moved"
    );
    assert_eq!(
        text_err(
            t.b.set_storage_holder(&storage, Some(h1.version), &old.id)
                .await
        ),
        Ok(false),
        "storage_holders: from a stale version"
    );
    t.a.delete_repo(&old)
        .await
        .expect("storage_holders: delete");
    let recreated = RepoRecord {
        home: Some(Home::Own(0xfeed)),
        ..record(&old, "bob", false)
    };
    t.b.create_repo(&old, &recreated)
        .await
        .expect("storage_holders: created again");
    for s in [&t.a, &t.b] {
        assert_eq!(
            holders(Arc::clone(s)).await,
            ["org/after"],
            "storage_holders: after"
        );
    }
}

/// Commits, trees and facts: stored bytes come back identical through both instances;
/// storing an object again (either instance) is a no-op; repositories do not share
/// objects; kinds do not share names. LFS file records likewise.
pub async fn commits(t: &Twins) {
    let r = repo(RepoType::Model, "org/commits");
    let other = repo(RepoType::Model, "org/other");
    let (id, bytes) = commit(None, "first");
    let obj = |s: &Arc<dyn HubStore>, repo: RepoRef, kind, id: CommitId| {
        let s = Arc::clone(s);
        async move { text_err(s.object(&repo, kind, &id).await) }
    };
    assert_eq!(
        obj(&t.a, r.clone(), RepoObject::Commit, id).await,
        Ok(None),
        "commits: before storing"
    );
    for (who, s) in [("a", &t.a), ("a again", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(
                s.put_object(&r, RepoObject::Commit, &id, bytes.clone())
                    .await
            ),
            Ok(()),
            "commits: storing through {who}"
        );
    }
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            obj(s, r.clone(), RepoObject::Commit, id).await,
            Ok(Some(bytes.clone())),
            "commits: read through {who}"
        );
    }
    match Commit::decode(&id, &bytes) {
        Ok(Stored::Git(c)) => assert_eq!(c.summary, "first", "commits: decoded"),
        other => panic!("commits: decoding: {other:?}"),
    }
    assert_eq!(
        obj(&t.b, other.clone(), RepoObject::Commit, id).await,
        Ok(None),
        "commits: another repository"
    );
    // A tree and its facts under one id, neither visible as the other kind.
    let tree = Bytes::from_static(b"tree 0\0");
    let facts = Bytes::from_static(b"xet-facts 1\n");
    let tid = xet_hub::git::empty_tree_id();
    t.b.put_object(&r, RepoObject::Tree, &tid, tree.clone())
        .await
        .expect("commits: tree");
    assert_eq!(
        obj(&t.a, r.clone(), RepoObject::Facts, tid).await,
        Ok(None),
        "commits: facts before they are stored"
    );
    t.a.put_object(&r, RepoObject::Facts, &tid, facts.clone())
        .await
        .expect("commits: facts");
    for (kind, want) in [(RepoObject::Tree, &tree), (RepoObject::Facts, &facts)] {
        assert_eq!(
            obj(&t.a, r.clone(), kind, tid).await,
            Ok(Some(want.clone())),
            "commits: {kind:?} through a"
        );
    }
    assert_eq!(
        obj(&t.a, r.clone(), RepoObject::Commit, tid).await,
        Ok(None),
        "commits: a tree is not a commit"
    );
    let (child, child_bytes) = commit(Some(id), "second");
    t.b.put_object(&r, RepoObject::Commit, &child, child_bytes.clone())
        .await
        .expect("commits: child");
    assert_eq!(
        obj(&t.a, r.clone(), RepoObject::Commit, child).await,
        Ok(Some(child_bytes)),
        "commits: child through a"
    );
    // LFS files a repository committed: its own, first one kept.
    let (sha, f1, f2) = (
        [7u8; 32],
        xet_hash::chunk_hash(b"1"),
        xet_hash::chunk_hash(b"2"),
    );
    assert_eq!(
        text_err(t.a.lfs_file(&r, &sha).await),
        Ok(None),
        "commits: lfs before"
    );
    t.a.record_lfs_file(&r, &sha, &f1)
        .await
        .expect("commits: lfs");
    t.b.record_lfs_file(&r, &sha, &f2)
        .await
        .expect("commits: lfs again");
    assert_eq!(
        text_err(t.b.lfs_file(&r, &sha).await),
        Ok(Some(f1)),
        "commits: lfs through b"
    );
    assert_eq!(
        text_err(t.b.lfs_file(&other, &sha).await),
        Ok(None),
        "commits: lfs of another repository"
    );
    // Which repositories reference a file: recorded through either instance, seen
    // through both, each repository once; a repository without a record is left out.
    let file = xet_hash::chunk_hash(b"referenced");
    t.a.create_repo(&r, &record(&r, "alice", false))
        .await
        .expect("commits: record");
    t.b.create_repo(&other, &record(&other, "bob", true))
        .await
        .expect("commits: other record");
    let ghost = repo(RepoType::Dataset, "org/ghost");
    for (s, repo) in [(&t.a, &r), (&t.b, &other), (&t.a, &other), (&t.b, &ghost)] {
        s.record_file_reference(repo, &file)
            .await
            .expect("commits: reference");
    }
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.references_file(&r, &file).await),
            Ok(true),
            "commits: reference through {who}"
        );
        let mut holders: Vec<String> = s
            .repos_referencing(&file)
            .await
            .expect("commits: holders")
            .into_iter()
            .map(|rec| rec.id.to_string())
            .collect();
        holders.sort();
        assert_eq!(
            holders,
            ["org/commits", "org/other"],
            "commits: holders through {who}"
        );
    }
    let unknown = xet_hash::chunk_hash(b"nobody's");
    assert_eq!(text_err(t.a.references_file(&r, &unknown).await), Ok(false));
    assert_eq!(
        text_err(t.b.repos_referencing(&unknown).await).map(|v| v.len()),
        Ok(0)
    );
}

/// Branches: created once, moved only from the current head (compare-and-swap through
/// either instance), listed sorted by name with their heads.
pub async fn branches(t: &Twins) {
    let r = repo(RepoType::Model, "org/branches");
    let main = main_branch();
    let mut ids = Vec::new();
    for i in 0..3u8 {
        let (id, bytes) = commit(None, &format!("c{i}"));
        t.a.put_object(&r, RepoObject::Commit, &id, bytes)
            .await
            .expect("branches: commit");
        ids.push(id);
    }
    let (c1, c2, c3) = (ids[0], ids[1], ids[2]);
    assert_eq!(
        text_err(t.a.branch(&r, &main).await),
        Ok(None),
        "branches: none yet"
    );
    assert_eq!(
        text_err(t.b.branches(&r).await),
        Ok(vec![]),
        "branches: none listed yet"
    );

    let h1 =
        t.a.update_branch(&r, &main, None, &c1)
            .await
            .expect("branches: create")
            .expect("branches: creating a new branch moves it");
    assert_eq!(h1.commit, c1, "branches: created head");
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.update_branch(&r, &main, None, &c2).await),
            Ok(None),
            "branches: creating an existing branch through {who}"
        );
    }
    assert_eq!(
        text_err(t.b.branch(&r, &main).await),
        Ok(Some(h1)),
        "branches: head through b"
    );

    let h2 =
        t.b.update_branch(&r, &main, Some(&h1), &c2)
            .await
            .expect("branches: move")
            .expect("branches: moving from the head succeeds");
    assert_eq!(h2.commit, c2, "branches: moved head");
    assert!(
        h2.version > h1.version,
        "branches: version {h1:?} -> {h2:?}"
    );
    assert_eq!(
        text_err(t.a.branch(&r, &main).await),
        Ok(Some(h2)),
        "branches: moved, through a"
    );

    // A stale head, and the current version with another commit: neither is the head.
    let forged = BranchHead {
        commit: c3,
        version: h2.version,
    };
    for (what, from) in [("a stale head", h1), ("a forged head", forged)] {
        for (who, s) in [("a", &t.a), ("b", &t.b)] {
            assert_eq!(
                text_err(s.update_branch(&r, &main, Some(&from), &c3).await),
                Ok(None),
                "branches: moving from {what} through {who}"
            );
        }
    }
    assert_eq!(
        text_err(t.b.branch(&r, &main).await),
        Ok(Some(h2)),
        "branches: unchanged"
    );

    // More branches, some with slashes, created alternately through both instances.
    let names = ["dev", "refs/pr/1", "feature/x/y", "a", "Main"];
    for (i, n) in names.iter().enumerate() {
        let s = if i.is_multiple_of(2) { &t.a } else { &t.b };
        let h = s
            .update_branch(&r, &branch(n), None, &c3)
            .await
            .unwrap_or_else(|e| panic!("branches: creating {n}: {e}"));
        assert_eq!(h.map(|h| h.commit), Some(c3), "branches: creating {n}");
    }
    let mut want: Vec<(BranchName, CommitId)> = names.iter().map(|n| (branch(n), c3)).collect();
    want.push((main.clone(), c2));
    want.sort();
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        let listed = s.branches(&r).await.expect("branches: listing");
        let got: Vec<(BranchName, CommitId)> =
            listed.iter().map(|(n, h)| (n.clone(), h.commit)).collect();
        assert_eq!(got, want, "branches: listed through {who}");
        let main_head = listed.iter().find(|(n, _)| *n == main).map(|(_, h)| *h);
        assert_eq!(
            main_head,
            Some(h2),
            "branches: listed head of main through {who}"
        );
    }
    let other = repo(RepoType::Dataset, "org/branches");
    assert_eq!(
        text_err(t.a.branches(&other).await),
        Ok(vec![]),
        "branches: another repository"
    );
    assert_eq!(
        text_err(t.a.branch(&other, &main).await),
        Ok(None),
        "branches: another repository's main"
    );
}

/// Concurrent commits without a parent, from tasks split across both instances: every
/// one lands, in some order, none lost.
pub async fn concurrent_commits(t: &Twins) {
    let r = repo(RepoType::Model, "org/concurrent");
    let (ra, rb) = t.repos();
    let initial = create(&ra, &r, "concurrent_commits").await;
    let mut tasks = Vec::new();
    for i in 0..COMMITTERS {
        let repos = if i.is_multiple_of(2) {
            ra.clone()
        } else {
            rb.clone()
        };
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            let ops = [add(
                &format!("files/{i:02}.txt"),
                format!("file {i}").as_bytes(),
            )];
            let m = meta(&format!("commit {i}"), &format!("user{i}"));
            repos
                .commit_to_branch(&r, &main_branch(), None, &ops, &m)
                .await
        }));
    }
    let mut landed = BTreeSet::new();
    for (i, task) in tasks.into_iter().enumerate() {
        let committed = task
            .await
            .expect("concurrent_commits: task")
            .unwrap_or_else(|e| panic!("concurrent_commits: commit {i}: {e}"));
        assert!(
            landed.insert(committed.id),
            "concurrent_commits: commit {i} id reused"
        );
    }

    let want: Vec<String> = (0..COMMITTERS)
        .map(|i| format!("files/{i:02}.txt"))
        .collect();
    for (who, repos) in [("a", &ra), ("b", &rb)] {
        let (_, c) = repos
            .resolve(&r, &Revision::Branch(main_branch()))
            .await
            .expect("concurrent_commits: head");
        assert_eq!(
            file_names(repos, &r, &c).await,
            want,
            "concurrent_commits: final tree through {who}"
        );
    }

    // The parent chain is linear and holds every commit, each adding one file.
    let mut chain = Vec::new();
    let (mut id, mut c) = rb
        .resolve(&r, &Revision::Branch(main_branch()))
        .await
        .expect("concurrent_commits: head");
    while let Some(parent) = c.parent {
        let pc = ra
            .commit(&r, &parent)
            .await
            .expect("concurrent_commits: parent")
            .unwrap_or_else(|| panic!("concurrent_commits: parent {parent} of {id} not stored"));
        assert_eq!(
            file_names(&ra, &r, &pc).await.len() + 1,
            file_names(&ra, &r, &c).await.len(),
            "concurrent_commits: {id} adds one file to {parent}"
        );
        chain.push(id);
        (id, c) = (parent, pc);
    }
    assert_eq!(
        id, initial,
        "concurrent_commits: the chain ends at the initial commit"
    );
    let chain: BTreeSet<CommitId> = chain.into_iter().collect();
    assert_eq!(
        chain, landed,
        "concurrent_commits: the chain is the landed commits"
    );
}

/// A commit or branch made through one instance is seen through the other at once.
pub async fn visible_across_instances(t: &Twins) {
    let r = repo(RepoType::Dataset, "org/visible");
    let (ra, rb) = t.repos();
    let main = main_branch();
    let initial = create(&ra, &r, "visible_across_instances").await;
    assert_eq!(
        rb.record(&r).await.map(|rec| rec.owner).ok().as_deref(),
        Some("alice"),
        "visible_across_instances: record through b"
    );
    let mut parent = initial;
    for (i, (from, to)) in [(&ra, &rb), (&rb, &ra), (&ra, &rb)].into_iter().enumerate() {
        let name = format!("step{i}.txt");
        let ops = [add(&name, name.as_bytes())];
        let done = from
            .commit_to_branch(&r, &main, Some(parent), &ops, &meta("step", "alice"))
            .await
            .unwrap_or_else(|e| panic!("visible_across_instances: commit {i}: {e}"));
        let (id, c) = to
            .resolve(&r, &Revision::Branch(main.clone()))
            .await
            .expect("visible_across_instances: head through the other instance");
        assert_eq!(
            id, done.id,
            "visible_across_instances: head after commit {i}"
        );
        assert_eq!(
            c, done.commit,
            "visible_across_instances: tree after commit {i}"
        );
        let (_, by_id) = to
            .resolve(&r, &Revision::Commit(done.id))
            .await
            .expect("visible_across_instances: commit by id");
        assert_eq!(
            by_id, done.commit,
            "visible_across_instances: commit {i} by id"
        );
        parent = done.id;
    }
    let dev = branch("dev");
    let h = rb
        .create_branch(&r, &dev, &Revision::Branch(main.clone()))
        .await
        .expect("visible_across_instances: branch");
    assert_eq!(h.commit, parent, "visible_across_instances: branch at main");
    let names: Vec<BranchName> =
        t.a.branches(&r)
            .await
            .expect("visible_across_instances: listing")
            .into_iter()
            .map(|(n, _)| n)
            .collect();
    assert_eq!(
        names,
        [dev.clone(), main],
        "visible_across_instances: branches through a"
    );
    match ra.create_branch(&r, &dev, &Revision::Commit(initial)).await {
        Err(RepoError::BranchExists { branch, .. }) if branch == dev => {}
        other => panic!("visible_across_instances: creating dev again: {other:?}"),
    }
}

/// A commit on a parent that is no longer the head fails with `ParentMismatch` naming
/// both, and the branch does not move.
pub async fn stale_parent(t: &Twins) {
    let r = repo(RepoType::Model, "org/stale");
    let (ra, rb) = t.repos();
    let main = main_branch();
    let initial = create(&ra, &r, "stale_parent").await;
    let first = ra
        .commit_to_branch(
            &r,
            &main,
            Some(initial),
            &[add("one", b"1")],
            &meta("one", "a"),
        )
        .await
        .expect("stale_parent: first commit");
    let m = meta("late", "b");
    match rb
        .commit_to_branch(&r, &main, Some(initial), &[add("late", b"2")], &m)
        .await
    {
        Err(RepoError::ParentMismatch {
            repo,
            branch,
            parent,
            head,
        }) => {
            assert_eq!(
                (repo, branch, parent, head),
                (r.clone(), main.clone(), initial, first.id),
                "stale_parent: what the error names"
            );
        }
        other => panic!("stale_parent: commit on a stale parent: {other:?}"),
    }
    let (id, c) = ra
        .resolve(&r, &Revision::Branch(main.clone()))
        .await
        .expect("stale_parent: head");
    assert_eq!(
        (id, file_names(&ra, &r, &c).await),
        (first.id, vec!["one".to_string()]),
        "stale_parent: unchanged"
    );
    let second = rb
        .commit_to_branch(
            &r,
            &main,
            Some(first.id),
            &[add("two", b"2")],
            &meta("two", "b"),
        )
        .await
        .expect("stale_parent: commit on the current head");
    assert_eq!(
        second.commit.parent,
        Some(first.id),
        "stale_parent: parent of the retry"
    );
}

/// sha256 claims (FileMetadataExt) of a shard uploaded through one instance are found
/// through it and, with no explicit refresh, through the other (which must look in the
/// backend on a miss), also right after a miss of its own.
pub async fn sha256_claims(t: &Twins) {
    let f = fixture();
    let files: Vec<_> = f.files.iter().filter(|x| !x.data.is_empty()).collect();
    let sha = |data: &[u8]| -> [u8; 32] { sha2::Sha256::digest(data).into() };
    // Misses, all at once through both instances.
    let mut misses = tokio::task::JoinSet::new();
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        for file in &files {
            let (s, sha256, name) = (s.clone(), sha(&file.data), file.name);
            misses.spawn(async move { (who, name, s.files_claiming_sha256(&sha256).await) });
        }
    }
    while let Some(miss) = misses.join_next().await {
        let (who, name, claims) = miss.expect("sha256_claims: lookup task");
        assert_eq!(
            text_err(claims),
            Ok(vec![]),
            "sha256_claims: {name} before any upload, through {who}"
        );
    }
    upload_xorbs(&*t.a, f).await;
    upload_shards(&*t.a, f).await;
    let started = std::time::Instant::now();
    for (who, s) in [("a (the uploader)", &t.a), ("b", &t.b)] {
        for file in &files {
            assert_eq!(
                text_err(s.files_claiming_sha256(&sha(&file.data)).await),
                Ok(vec![file.hash]),
                "sha256_claims: {} after its shard was uploaded through a, through {who}",
                file.name
            );
        }
    }
    eprintln!(
        "sha256_claims: claims found through both instances in {:?}",
        started.elapsed()
    );
    let unknown = sha(b"no file has this content");
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.files_claiming_sha256(&unknown).await),
            Ok(vec![]),
            "sha256_claims: an unknown sha256 through {who}"
        );
    }
}

/// The first file recorded as verified for a sha256 is the answer through both
/// instances; recording another one later changes nothing.
pub async fn verified_sha256(t: &Twins) {
    let sha: [u8; 32] = sha2::Sha256::digest(b"verified content").into();
    let (first, second) = (
        xet_hash::chunk_hash(b"first"),
        xet_hash::chunk_hash(b"second"),
    );
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.verified_sha256(&sha).await),
            Ok(None),
            "verified_sha256: none through {who}"
        );
    }
    t.a.record_verified_sha256(&sha, &first)
        .await
        .expect("verified_sha256: record");
    assert_eq!(
        text_err(t.b.verified_sha256(&sha).await),
        Ok(Some(first)),
        "verified_sha256: through b"
    );
    for (who, s, file) in [("b", &t.b, &second), ("a", &t.a, &first)] {
        s.record_verified_sha256(&sha, file)
            .await
            .unwrap_or_else(|e| panic!("verified_sha256: recording again through {who}: {e}"));
    }
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.verified_sha256(&sha).await),
            Ok(Some(first)),
            "verified_sha256: the first stays, through {who}"
        );
    }
    let other: [u8; 32] = sha2::Sha256::digest(b"other content").into();
    assert_eq!(
        text_err(t.a.verified_sha256(&other).await),
        Ok(None),
        "verified_sha256: another sha256"
    );
}

/// A ref deleted by compare-and-swap, gone everywhere, created again past its old
/// versions; racing deletions and moves from one head: exactly one wins.
pub async fn deleted_refs(t: &Twins) {
    let r = repo(RepoType::Model, "org/deleted-refs");
    let mut ids = Vec::new();
    for i in 0..3u8 {
        let (id, bytes) = commit(None, &format!("d{i}"));
        t.a.put_object(&r, RepoObject::Commit, &id, bytes)
            .await
            .expect("deleted_refs: commit");
        ids.push(id);
    }
    let dev = branch("dev");
    let h1 =
        t.a.update_branch(&r, &dev, None, &ids[0])
            .await
            .expect("deleted_refs: create")
            .expect("deleted_refs: created");
    let h2 =
        t.b.update_branch(&r, &dev, Some(&h1), &ids[1])
            .await
            .expect("deleted_refs: move")
            .expect("deleted_refs: moved");
    assert_eq!(
        text_err(t.a.delete_branch(&r, &dev, &h1).await),
        Ok(false),
        "deleted_refs: deleting from a stale head"
    );
    assert_eq!(
        text_err(t.b.delete_branch(&r, &dev, &h2).await),
        Ok(true),
        "deleted_refs: deleting from the head"
    );
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.branch(&r, &dev).await),
            Ok(None),
            "deleted_refs: read through {who}"
        );
        assert_eq!(
            text_err(s.branches(&r).await),
            Ok(vec![]),
            "deleted_refs: listed through {who}"
        );
        assert_eq!(
            text_err(s.delete_branch(&r, &dev, &h2).await),
            Ok(false),
            "deleted_refs: deleting twice through {who}"
        );
        assert_eq!(
            text_err(s.update_branch(&r, &dev, Some(&h2), &ids[2]).await),
            Ok(None),
            "deleted_refs: moving a deleted ref through {who}"
        );
    }
    let h3 =
        t.a.update_branch(&r, &dev, None, &ids[2])
            .await
            .expect("deleted_refs: create again")
            .expect("deleted_refs: created again");
    assert!(
        h3.version > h2.version,
        "deleted_refs: versions go on: {h2:?} then {h3:?}"
    );
    assert_eq!(
        text_err(t.b.branch(&r, &dev).await),
        Ok(Some(h3)),
        "deleted_refs: created again, through b"
    );

    // Racing deletions and moves from one head, across both instances.
    let mut tasks = Vec::new();
    for i in 0..UPDATERS {
        let s = if i % 2 == 0 { t.a.clone() } else { t.b.clone() };
        let (r, dev, to) = (r.clone(), dev.clone(), ids[i % 2]);
        tasks.push(tokio::spawn(async move {
            if i % 3 == 0 {
                s.delete_branch(&r, &dev, &h3).await
            } else {
                s.update_branch(&r, &dev, Some(&h3), &to)
                    .await
                    .map(|h| h.is_some())
            }
        }));
    }
    let mut won = 0;
    for task in tasks {
        if task
            .await
            .expect("deleted_refs: task")
            .expect("deleted_refs: race")
        {
            won += 1;
        }
    }
    assert_eq!(won, 1, "deleted_refs: racing from one head, winners");

    // A tag: a ref under refs/tags/ with its message, listed beside the branches.
    let tag = xet_hub::TagName::parse("v1")
        .expect("tag name")
        .as_ref_name();
    let v =
        t.b.write_ref(&r, &tag, None, Some(&ids[0]), Some("release one"))
            .await
            .expect("deleted_refs: tag");
    assert_eq!(v, Some(1), "deleted_refs: a new tag's first version");
    let listed: Vec<String> =
        t.a.branches(&r)
            .await
            .expect("deleted_refs: listing with a tag")
            .into_iter()
            .map(|(n, _)| n.to_string())
            .collect();
    assert!(
        listed.contains(&"refs/tags/v1".to_string()),
        "deleted_refs: the tag listed: {listed:?}"
    );
}

/// Discussions: numbers from 1 without gaps, concurrent creations distinct, changes by
/// compare-and-swap.
pub async fn discussions(t: &Twins) {
    let r = repo(RepoType::Model, "org/discussions");
    assert_eq!(
        text_err(t.a.discussion_count(&r).await),
        Ok(0),
        "discussions: none yet"
    );
    assert_eq!(
        text_err(t.a.write_discussion(&r, 2, None, Bytes::from("x")).await),
        Ok(false),
        "discussions: number 2 before number 1"
    );
    let mut tasks = Vec::new();
    for i in 0..UPDATERS {
        let s = if i % 2 == 0 { t.a.clone() } else { t.b.clone() };
        let r = r.clone();
        tasks.push(tokio::spawn(async move {
            loop {
                let n = s.discussion_count(&r).await? + 1;
                let body = Bytes::from(format!("creator {i}"));
                if s.write_discussion(&r, n, None, body).await? {
                    return Ok::<u64, xet_cas::CasError>(n);
                }
            }
        }));
    }
    let mut nums = BTreeSet::new();
    for task in tasks {
        let n = task
            .await
            .expect("discussions: task")
            .expect("discussions: create");
        assert!(nums.insert(n), "discussions: number {n} taken twice");
    }
    let want: BTreeSet<u64> = (1..=UPDATERS as u64).collect();
    assert_eq!(nums, want, "discussions: numbers");
    assert_eq!(
        text_err(t.b.discussion_count(&r).await),
        Ok(UPDATERS as u64),
        "discussions: count through b"
    );
    let (v, _) =
        t.a.discussion(&r, 1)
            .await
            .expect("discussions: read")
            .expect("discussions: number 1 exists");
    assert_eq!(
        text_err(
            t.b.write_discussion(&r, 1, Some(v), Bytes::from("closed"))
                .await
        ),
        Ok(true),
        "discussions: change from the current version"
    );
    assert_eq!(
        text_err(
            t.a.write_discussion(&r, 1, Some(v), Bytes::from("stale"))
                .await
        ),
        Ok(false),
        "discussions: change from a stale version"
    );
    let (_, body) =
        t.a.discussion(&r, 1)
            .await
            .expect("discussions: read again")
            .expect("discussions: still there");
    assert_eq!(&body[..], b"closed", "discussions: the winning change");
    let other = repo(RepoType::Dataset, "org/discussions");
    assert_eq!(
        text_err(t.a.discussion(&other, 1).await.map(|d| d.is_some())),
        Ok(false),
        "discussions: another repository's"
    );
}

/// `repos(kind)`: live repositories of that kind only.
pub async fn listed_repos(t: &Twins) {
    let models = [
        repo(RepoType::Model, "org/m1"),
        repo(RepoType::Model, "org/m2"),
    ];
    let dataset = repo(RepoType::Dataset, "org/m1");
    for r in models.iter().chain([&dataset]) {
        assert_eq!(
            text_err(t.a.create_repo(r, &record(r, "u", false)).await),
            Ok(true),
            "listed_repos: create {r}"
        );
    }
    assert_eq!(
        text_err(t.b.delete_repo(&models[1]).await),
        Ok(true),
        "listed_repos: delete"
    );
    let ids = |v: Vec<RepoRecord>| {
        let mut ids: Vec<String> = v.into_iter().map(|r| r.id.to_string()).collect();
        ids.sort();
        ids
    };
    for (who, s) in [("a", &t.a), ("b", &t.b)] {
        assert_eq!(
            text_err(s.repos(RepoType::Model).await.map(ids)),
            Ok(vec!["org/m1".to_string()]),
            "listed_repos: models through {who}"
        );
        assert_eq!(
            text_err(s.repos(RepoType::Dataset).await.map(ids)),
            Ok(vec!["org/m1".to_string()]),
            "listed_repos: datasets through {who}"
        );
        assert_eq!(
            text_err(s.repos(RepoType::Space).await.map(ids)),
            Ok(vec![]),
            "listed_repos: spaces through {who}"
        );
    }
}
