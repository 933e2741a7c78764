//! [`RepoStore`] for [`StoreCas`]: Hub repositories kept as objects of the same backend as
//! the CAS, so every process sharing a directory or a bucket shares them too.
//!
//! Layout (keys built by [`ObjectKey`] from hashes only; see `docs/STORE.md`):
//!
//! ```text
//! hub/repos/<rk>/record                      RepoRecord JSON of a store written before versions
//! hub/repos/<rk>/records/<version>           the record after its version-th change, or its deletion
//! hub/repos/<rk>/holders/<version>           the name holding bucket storage <rk>
//! hub/repos/<rk>/commits/<git id>            git commit object (content-addressed)
//! hub/repos/<rk>/trees/<git id>              git tree object, one per folder
//! hub/repos/<rk>/facts/<tree id>             the file facts of that tree
//! hub/repos/<rk>/sha256/<sha256>             the Xet hash of an LFS file it committed
//! hub/repos/<rk>/branches/<bk>/<version>     {"name": <branch>, "commit": <40 hex>}
//! hub/repos/<rk>/heads/<bk>                  the head version as its last mover saw it (a hint)
//! hub/sha256/<sha256>                        the Xet hash string of a verified file
//! hub/files/<xet hash>/<rk>                  empty: repository <rk> references that file
//! hub/buckets/<rk>                           empty: <rk> is (or was) a bucket (listings read these)
//! ```
//!
//! `<rk>` is [`hub_repo_name`] (a hash of `type/namespace/name`), `<bk>` is
//! [`hub_branch_name`] (a hash of the branch name), `<version>` 20 decimal digits.
//! Branches, records and holders are versioned chains ([`Chain`]): each changes by the
//! put-if-absent of its next version, a compare-and-swap across processes without a
//! lock; records and holders are in the `records` module.
//!
//! Nothing is cached here: every head, record and object is read from the backend on
//! every call, so a commit through one process is visible through every other at once.
//! (`xet_hub::Repos` caches objects, which never change once written.)

use std::collections::BTreeMap;

use bytes::Bytes;
use sha2::Digest as _;
use tokio::time::Instant;
use xet_cas::{CasError, Result};
use xet_hash::MerkleHash;
use xet_hub::store::RepoObject;
use xet_hub::{
    BranchHead, BranchName, CommitId, ObjectId, RecordHead, RepoId, RepoRecord, RepoRef, RepoStore,
    RepoType, StorageHolder,
};

use super::backend::{HubName, ObjectBackend, ObjectKey};
use super::cas::StoreCas;
use super::chains::Chain;

/// The name of `repo` in hub keys: the first 16 bytes of SHA-256(`type/namespace/name`),
/// so no user-chosen text ever reaches a key, and `model` and `dataset` repositories of
/// one id are different repositories.
pub fn hub_repo_name(repo: &RepoRef) -> HubName {
    truncated_sha256(&format!("{}/{}", repo.kind.as_str(), repo.id))
}

/// The name of branch `name` in hub keys: the first 16 bytes of SHA-256 of the name.
pub fn hub_branch_name(name: &BranchName) -> HubName {
    truncated_sha256(name.as_str())
}

fn truncated_sha256(s: &str) -> HubName {
    let digest = sha2::Sha256::digest(s.as_bytes());
    let mut out = HubName::default();
    let n = out.len();
    out.copy_from_slice(&digest[..n]);
    out
}

/// What a branch version object holds. The name is kept because the key holds only its
/// hash, and `branches` must say which branches exist.
#[derive(serde::Serialize, serde::Deserialize)]
struct BranchObject {
    name: String,
    commit: CommitId,
}

impl<B: ObjectBackend> StoreCas<B> {
    /// The commit version `version` of branch `name` of `repo` (whose hub name is `rk`)
    /// points at, checked to be that branch's.
    async fn branch_object(
        &self,
        repo: &RepoRef,
        rk: &HubName,
        name: &BranchName,
        version: u64,
    ) -> Result<Option<CommitId>> {
        let key = ObjectKey::hub_branch_version(rk, &hub_branch_name(name), version);
        let Some(obj) = self.read_branch_object(repo, &key).await? else {
            return Ok(None);
        };
        if obj.name != name.as_str() {
            return Err(CasError::storage(format!(
                "{key}, read as version {version} of branch {name} of repository {repo}, \
                 belongs to branch {:?}",
                obj.name
            )));
        }
        Ok(Some(obj.commit))
    }

    async fn read_branch_object(
        &self,
        repo: &RepoRef,
        key: &ObjectKey,
    ) -> Result<Option<BranchObject>> {
        let Some(bytes) = self.backend().get(key).await? else {
            return Ok(None);
        };
        serde_json::from_slice(&bytes).map(Some).map_err(|e| {
            let what =
                format!("{key}, a branch of repository {repo}, is not a valid branch object");
            CasError::storage_with(what, e)
        })
    }

    /// The highest version present of each branch listed under `prefix`, by `bk`.
    async fn latest_versions(&self, prefix: &str) -> Result<BTreeMap<HubName, u64>> {
        let mut latest = BTreeMap::new();
        for (bk, version) in self
            .backend()
            .list(prefix)
            .await?
            .iter()
            .filter_map(ObjectKey::branch_version)
        {
            let v = latest.entry(bk).or_insert(version);
            *v = (*v).max(version);
        }
        Ok(latest)
    }
}

#[async_trait::async_trait]
impl<B: ObjectBackend> RepoStore for StoreCas<B> {
    async fn create_repo(&self, repo: &RepoRef, record: &RepoRecord) -> Result<bool> {
        // A bucket's mark first: a mark without a record is skipped by listings, a
        // record without a mark would be missing from them. Marks are never removed (a
        // deleted bucket's is skipped), so a deletion racing a creation cannot lose one.
        if repo.kind == RepoType::Bucket {
            self.backend()
                .put_if_absent(&ObjectKey::hub_bucket(&hub_repo_name(repo)), Bytes::new())
                .await?;
        }
        self.create_record(repo, record).await
    }

    async fn repo_head(&self, repo: &RepoRef) -> Result<Option<RecordHead>> {
        self.record_head(repo).await
    }

    async fn update_repo(
        &self,
        repo: &RepoRef,
        from: &RecordHead,
        to: Option<&RepoRecord>,
    ) -> Result<Option<u64>> {
        self.swap_record(repo, from, to).await
    }

    async fn delete_repo(&self, repo: &RepoRef) -> Result<bool> {
        self.delete_record(repo).await
    }

    async fn buckets(&self) -> Result<Vec<RepoRecord>> {
        let marks = self.backend().list(ObjectKey::hub_buckets_prefix()).await?;
        let mut out = Vec::with_capacity(marks.len());
        for rk in marks.iter().filter_map(ObjectKey::bucket_repo) {
            // None: deleted, moved away, or a creation that died before its record.
            let Some(record) = self.live_record_at(&rk).await? else {
                continue;
            };
            if record.kind == RepoType::Bucket
                && hub_repo_name(&RepoRef::new(record.kind, record.id.clone())) == rk
            {
                out.push(record);
            }
        }
        Ok(out)
    }

    async fn repos(&self) -> Result<Vec<RepoRecord>> {
        // Every name with a record (what the garbage collector's mark reads), then
        // the names' live records.
        super::mark::records(self).await
    }

    async fn storage_holder(&self, storage: &RepoRef) -> Result<Option<StorageHolder>> {
        self.storage_holder_of(storage).await
    }

    async fn set_storage_holder(
        &self,
        storage: &RepoRef,
        from: Option<u64>,
        name: &RepoId,
    ) -> Result<bool> {
        self.swap_holder(storage, from, name).await
    }

    async fn put_object(
        &self,
        repo: &RepoRef,
        kind: RepoObject,
        id: &ObjectId,
        bytes: Bytes,
    ) -> Result<()> {
        let key = ObjectKey::hub_object(&hub_repo_name(repo), kind, id.as_bytes());
        // `false`: the object is stored already, with these bytes (its id is their hash,
        // or for facts a function of the tree it names).
        self.backend().put_if_absent(&key, bytes).await.map(drop)
    }

    async fn object(
        &self,
        repo: &RepoRef,
        kind: RepoObject,
        id: &ObjectId,
    ) -> Result<Option<Bytes>> {
        let key = ObjectKey::hub_object(&hub_repo_name(repo), kind, id.as_bytes());
        self.backend().get(&key).await
    }

    async fn record_lfs_file(
        &self,
        repo: &RepoRef,
        sha256: &[u8; 32],
        file: &MerkleHash,
    ) -> Result<()> {
        let key = ObjectKey::hub_repo_sha256(&hub_repo_name(repo), sha256);
        let body = Bytes::from(file.to_string());
        self.backend().put_if_absent(&key, body).await.map(drop)
    }

    async fn record_file_reference(&self, repo: &RepoRef, file: &MerkleHash) -> Result<()> {
        let key = ObjectKey::hub_file_reference(file, &hub_repo_name(repo));
        if self.backend().exists(&key).await? {
            return Ok(());
        }
        self.backend()
            .put_if_absent(&key, Bytes::new())
            .await
            .map(drop)
    }

    async fn references_file(&self, repo: &RepoRef, file: &MerkleHash) -> Result<bool> {
        let key = ObjectKey::hub_file_reference(file, &hub_repo_name(repo));
        self.backend().exists(&key).await
    }

    async fn repos_referencing(&self, file: &MerkleHash) -> Result<Vec<RepoRecord>> {
        let prefix = ObjectKey::hub_file_references_prefix(file);
        let mut out = Vec::new();
        for key in self.backend().list(&prefix).await? {
            let Some(rk) = key.file_reference_repo() else {
                continue;
            };
            // None: a reference written before its repository's record (a crash between
            // the two, or a repository being created), or one of a deleted repository.
            if let Some(record) = self.record_of_storage(&rk).await? {
                out.push(record);
            }
        }
        Ok(out)
    }

    async fn lfs_file(&self, repo: &RepoRef, sha256: &[u8; 32]) -> Result<Option<MerkleHash>> {
        let key = ObjectKey::hub_repo_sha256(&hub_repo_name(repo), sha256);
        let Some(bytes) = self.backend().get(&key).await? else {
            return Ok(None);
        };
        parse_file_hash(&key, &bytes).map(Some)
    }

    async fn branch(&self, repo: &RepoRef, name: &BranchName) -> Result<Option<BranchHead>> {
        let rk = hub_repo_name(repo);
        let bk = hub_branch_name(name);
        let Some(version) = Chain::Branch(rk, bk).head(self.backend()).await? else {
            return Ok(None);
        };
        // Found present, so stored; objects are never removed by the store.
        let commit = self
            .branch_object(repo, &rk, name, version)
            .await?
            .ok_or_else(|| {
                CasError::storage(format!(
                    "version {version} of branch {name} of repository {repo} was found but \
                     cannot be read"
                ))
            })?;
        Ok(Some(BranchHead { commit, version }))
    }

    async fn branches(&self, repo: &RepoRef) -> Result<Vec<(BranchName, BranchHead)>> {
        let rk = hub_repo_name(repo);
        let prefix = ObjectKey::hub_branches_prefix(&rk);
        let mut out = Vec::new();
        for (bk, version) in self.latest_versions(&prefix).await? {
            let key = ObjectKey::hub_branch_version(&rk, &bk, version);
            let obj = self.read_branch_object(repo, &key).await?.ok_or_else(|| {
                CasError::storage(format!(
                    "{key}, a branch of repository {repo}, was listed but cannot be read"
                ))
            })?;
            let name = BranchName::parse(&obj.name)
                .ok()
                .filter(|n| hub_branch_name(n) == bk)
                .ok_or_else(|| {
                    CasError::storage(format!(
                        "{key}, a branch of repository {repo}, names branch {:?}, which is not \
                         the branch of that key",
                        obj.name
                    ))
                })?;
            out.push((
                name,
                BranchHead {
                    commit: obj.commit,
                    version,
                },
            ));
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    async fn update_branch(
        &self,
        repo: &RepoRef,
        name: &BranchName,
        from: Option<&BranchHead>,
        to: &CommitId,
    ) -> Result<Option<BranchHead>> {
        let rk = hub_repo_name(repo);
        let version = match from {
            // Versions start at 1: if it exists, the branch does.
            None => 1,
            Some(from) => {
                // The branch was at `from` only if version `from.version` names
                // `from.commit`. Versions are immutable, so this cannot change after the
                // check; whether the branch is still there is decided by the put below.
                if self.branch_object(repo, &rk, name, from.version).await? != Some(from.commit) {
                    return Ok(None);
                }
                from.version.checked_add(1).ok_or_else(|| {
                    CasError::storage(format!(
                        "branch {name} of repository {repo} cannot move past version {}",
                        from.version
                    ))
                })?
            }
        };
        let chain = Chain::Branch(rk, hub_branch_name(name));
        let body = serde_json::to_vec(&BranchObject {
            name: name.as_str().to_string(),
            commit: *to,
        })
        .map_err(|e| CasError::storage_with(format!("encoding {}", chain.version(version)), e))?;
        let moved = chain
            .put(self.backend(), version, Bytes::from(body))
            .await?;
        Ok(moved.then_some(BranchHead {
            commit: *to,
            version,
        }))
    }

    async fn files_claiming_sha256(&self, sha256: &[u8; 32]) -> Result<Vec<MerkleHash>> {
        let asked = Instant::now();
        let claims = self.index.files_claiming(sha256);
        if !claims.is_empty() {
            return Ok(claims);
        }
        // Another server sharing the backend may have registered the shard since this
        // one last refreshed (see `refresh_since`).
        self.refresh_since(asked).await?;
        Ok(self.index.files_claiming(sha256))
    }

    async fn verified_sha256(&self, sha256: &[u8; 32]) -> Result<Option<MerkleHash>> {
        let key = ObjectKey::hub_sha256(sha256);
        let Some(bytes) = self.backend().get(&key).await? else {
            return Ok(None);
        };
        parse_file_hash(&key, &bytes).map(Some)
    }

    async fn record_verified_sha256(&self, sha256: &[u8; 32], file: &MerkleHash) -> Result<()> {
        let key = ObjectKey::hub_sha256(sha256);
        if self
            .backend()
            .put_if_absent(&key, Bytes::from(file.to_string()))
            .await?
        {
            return Ok(());
        }
        // Someone verified this sha256 first. A Xet file hash is a function of the content
        // (deterministic chunking), so a different file means SHA-256 collided or one of
        // the two checks was wrong. The first pair stays, as commits may already rely on
        // it; both name content with this sha256 as far as their checks could tell.
        if let Some(first) = self.verified_sha256(sha256).await?
            && first != *file
        {
            tracing::warn!(
                object = %key, first = %first, ignored = %file,
                "a second file was verified to have the sha256 of an already verified one"
            );
        }
        Ok(())
    }
}

/// The Xet hash string stored at `key`.
fn parse_file_hash(key: &ObjectKey, bytes: &[u8]) -> Result<MerkleHash> {
    std::str::from_utf8(bytes)
        .ok()
        .and_then(|s| MerkleHash::from_hex(s).ok())
        .ok_or_else(|| {
            CasError::storage(format!(
                "{key} holds {} bytes that are not a Xet hash string",
                bytes.len()
            ))
        })
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use tokio::time::Duration;
    use xet_cas::ByteRange;

    use super::*;
    use crate::engine::backend::{MemoryBackend, SHARD_PREFIX};
    use crate::engine::claims::MIN_CLAIM_REFRESH_PAUSE;

    /// A memory backend that counts (and can slow down) listings of `shards/`: the
    /// refreshes of the index.
    #[derive(Clone, Default)]
    struct Counting {
        inner: MemoryBackend,
        shard_listings: Arc<AtomicUsize>,
        /// Listings of branch versions.
        branch_listings: Arc<AtomicUsize>,
        list_delay: Duration,
    }

    #[async_trait::async_trait]
    impl ObjectBackend for Counting {
        async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
            self.inner.put_if_absent(key, data).await
        }
        async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
            self.inner.get(key).await
        }
        async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
            self.inner.get_range(key, range).await
        }
        async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
            self.inner.size(key).await
        }
        async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
            if prefix == SHARD_PREFIX {
                self.shard_listings.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(self.list_delay).await;
            }
            if prefix.contains("/branches/") {
                self.branch_listings.fetch_add(1, Ordering::SeqCst);
            }
            self.inner.list(prefix).await
        }
        async fn delete(&self, key: &ObjectKey) -> Result<bool> {
            self.inner.delete(key).await
        }
    }

    /// A branch's head is found without listing, from a current hint, a stale one
    /// (a mover that crashed or lost a race), a missing one (a store written before
    /// hints) or an unreadable one; moves still compare and swap.
    #[tokio::test]
    async fn every_live_repository_and_bucket_is_listed() {
        use xet_hub::{RepoId, RepoRef, RepoStore, RepoType, Repos};
        let store = Arc::new(StoreCas::open(MemoryBackend::default()).await.unwrap());
        let repos = Repos::new(store.clone());
        let r = |kind, name: &str| RepoRef::new(kind, RepoId::new("org", name).unwrap());
        for repo in [
            r(RepoType::Model, "a"),
            r(RepoType::Dataset, "a"),
            r(RepoType::Space, "s"),
            r(RepoType::Bucket, "b"),
            r(RepoType::Model, "gone"),
        ] {
            repos.create(&repo, "u", false, 1).await.unwrap();
        }
        assert!(
            store
                .delete_repo(&r(RepoType::Model, "gone"))
                .await
                .unwrap()
        );
        let mut listed: Vec<String> = store
            .repos()
            .await
            .unwrap()
            .iter()
            .map(|rec| format!("{}:{}", rec.kind.as_str(), rec.id))
            .collect();
        listed.sort();
        assert_eq!(
            listed,
            [
                "bucket:org/b",
                "dataset:org/a",
                "model:org/a",
                "space:org/s"
            ]
        );
    }

    #[tokio::test]
    async fn heads_are_found_from_the_hint_without_listing_versions() {
        use xet_hub::{BranchName, RepoId, RepoRef, RepoStore, RepoType};
        let store = StoreCas::open(Counting::default()).await.unwrap();
        let repo = RepoRef::new(RepoType::Model, RepoId::new("org", "h").unwrap());
        let main = BranchName::main();
        let commit = |i: u64| CommitId::from_bytes([(i % 251) as u8; 20]);
        let mut head = None;
        for i in 1..=100u64 {
            head = store
                .update_branch(&repo, &main, head.as_ref(), &commit(i))
                .await
                .unwrap();
            assert_eq!(head.as_ref().map(|h| h.version), Some(i));
        }
        // A move from a stale head is refused.
        let stale = BranchHead {
            commit: commit(99),
            version: 99,
        };
        assert!(
            store
                .update_branch(&repo, &main, Some(&stale), &commit(7))
                .await
                .unwrap()
                .is_none()
        );
        let (rk, bk) = (hub_repo_name(&repo), hub_branch_name(&main));
        let hint = ObjectKey::hub_branch_hint(&rk, &bk);
        let want = Some(BranchHead {
            commit: commit(100),
            version: 100,
        });
        for state in [
            None,
            Some("100"),
            Some("3"),
            Some("not a number"),
            Some("0"),
        ] {
            store.backend().delete(&hint).await.unwrap();
            if let Some(h) = state {
                store
                    .backend()
                    .put_if_absent(&hint, Bytes::from(h))
                    .await
                    .unwrap();
            }
            assert_eq!(store.branch(&repo, &main).await.unwrap(), want, "{state:?}");
        }
        let dev = BranchName::parse("dev").unwrap();
        assert_eq!(store.branch(&repo, &dev).await.unwrap(), None);
        assert_eq!(store.backend().branch_listings.load(Ordering::SeqCst), 0);
    }

    fn listings(store: &StoreCas<Counting>) -> usize {
        store.backend().shard_listings.load(Ordering::SeqCst)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn misses_share_refreshes_and_pause_between_them() {
        let backend = Counting {
            list_delay: Duration::from_millis(20),
            ..Counting::default()
        };
        let store = Arc::new(StoreCas::open(backend).await.unwrap());
        let opened = listings(&store);

        // A burst of misses: one refresh, or two if some arrive after the first started.
        let mut burst = tokio::task::JoinSet::new();
        for i in 0..32u8 {
            let store = store.clone();
            burst.spawn(async move { store.files_claiming_sha256(&[i; 32]).await });
        }
        while let Some(r) = burst.join_next().await {
            assert_eq!(xet_cas_conformance::text_err(r.unwrap()), Ok(vec![]));
        }
        let after_burst = listings(&store);
        assert!(
            (1..=2).contains(&(after_burst - opened)),
            "32 concurrent misses listed shards/ {} times",
            after_burst - opened
        );

        // Misses one after the other: one refresh each, spaced by the pause.
        let t = Instant::now();
        for i in 0..3u8 {
            assert_eq!(
                xet_cas_conformance::text_err(store.files_claiming_sha256(&[100 + i; 32]).await),
                Ok(vec![])
            );
        }
        assert_eq!(listings(&store), after_burst + 3);
        assert!(
            t.elapsed() >= 2 * MIN_CLAIM_REFRESH_PAUSE,
            "{:?}",
            t.elapsed()
        );
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_cancelled_refresh_does_not_block_later_misses() {
        let backend = Counting {
            list_delay: Duration::from_millis(300),
            ..Counting::default()
        };
        let store = Arc::new(StoreCas::open(backend).await.unwrap());
        let s = store.clone();
        let first = tokio::spawn(async move { s.files_claiming_sha256(&[1; 32]).await });
        tokio::time::sleep(Duration::from_millis(50)).await;
        first.abort();
        let _ = first.await;
        let next = tokio::time::timeout(
            Duration::from_secs(10),
            store.files_claiming_sha256(&[2; 32]),
        )
        .await;
        assert_eq!(
            xet_cas_conformance::text_err(next.expect("a later miss is answered")),
            Ok(vec![])
        );
    }

    #[test]
    fn names_are_hashes_of_type_and_id() {
        use xet_hub::{RepoId, RepoType};
        let id = RepoId::parse("org/name").unwrap();
        let model = hub_repo_name(&RepoRef::new(RepoType::Model, id.clone()));
        let dataset = hub_repo_name(&RepoRef::new(RepoType::Dataset, id));
        assert_ne!(model, dataset);
        let digest = sha2::Sha256::digest(b"model/org/name");
        assert_eq!(model[..], digest[..16]);
        assert_eq!(
            hub_branch_name(&BranchName::main())[..],
            sha2::Sha256::digest(b"main")[..16]
        );
    }
}
