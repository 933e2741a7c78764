//! Where repositories live: the [`RepoStore`] contract, which the store engine implements
//! over the same object backend (directory or S3 bucket) as the CAS.
//!
//! Contract (checked by `xet_cas_conformance::repos` on every implementation):
//! - Repository objects (commits, trees, tree facts, LFS files) are written once,
//!   atomically, and never change; writing an existing object again is a no-op (same id,
//!   same bytes).
//! - A repository record changes only by compare-and-swap, with the guarantee
//!   [`RepoStore::update_branch`] gives a branch: [`RepoStore::create_repo`] writes it
//!   if there is none (never over a live one), [`RepoStore::update_repo`] replaces or
//!   deletes the record of a given version, and of any number of concurrent calls from
//!   one version exactly one succeeds, in this process or in another process sharing
//!   the backend; a successful change is visible to every later read in every process.
//!   [`RepoStore::delete_repo`] is such a deletion from whatever version is current. A
//!   deleted repository can be created again; the new record starts a new version.
//! - A ref (a branch head, a pull request's or a tag's) moves, or is deleted, only
//!   through [`RepoStore::write_ref`], a compare-and-swap:
//!   of any number of concurrent calls from the same head, exactly one succeeds, in this
//!   process or in another process sharing the backend; a successful move is visible to
//!   every later read in every process.
//! - Which name holds a bucket's storage ([`RepoStore::storage_holder`]) moves by the same
//!   compare-and-swap.
//! - Everything is read from the backend (nothing cached that another process could make
//!   stale), so several servers on one store see each other's commits at once.
//! - Missing things are `Ok(None)`; storage failures are [`CasError::Storage`]. Nobody
//!   retries inside: callers decide.

use bytes::Bytes;
use xet_cas::{CasError, Result};
use xet_hash::MerkleHash;

use crate::id::{BranchName, CommitId, ObjectId, RepoId, RepoRef, RepoType};

/// The kinds of objects a repository holds, each named by a git id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RepoObject {
    /// A git commit object (or, in stores written before git objects, a commit's JSON
    /// with its full tree), named by the SHA-1 of its bytes.
    Commit,
    /// A git tree object, named by the SHA-1 of its bytes.
    Tree,
    /// The file facts of a tree (Xet hash, sha256, size of each file entry), named by the
    /// tree's id.
    Facts,
}

/// What is stored about a repository besides its commits.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct RepoRecord {
    /// Written `model`, `dataset`, `space`.
    pub kind: RepoType,
    /// Written `namespace/name`.
    pub id: RepoId,
    pub private: bool,
    /// The user whose token created it.
    pub owner: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    /// Buckets: the creation time in milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub created_ms: Option<u64>,
    /// Buckets: a nonce naming this incarnation's branch, so that a bucket deleted and
    /// created again starts empty.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub incarnation: Option<u64>,
    /// Where the repository's objects, refs and file references are kept, when not under
    /// its own name ([`RepoRecord::storage`]): every bucket; a repository moved, or
    /// created under a name whose storage another repository had. A move writes a record
    /// with the same home under the new name, so nothing is copied.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home: Option<Home>,
    /// Buckets: set while the bucket is being moved to this name, which then holds (or
    /// is about to hold) the bucket; writes through this name are refused meanwhile, so
    /// two names are never both writable onto one storage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub moving_to: Option<RepoId>,
}

/// A nonce naming a new storage ([`Home::Own`]) or a bucket's incarnation.
pub(crate) fn nonce(now_ms: u64) -> u64 {
    // Random enough to tell two incarnations of one name apart; not a secret.
    use std::hash::{BuildHasher as _, Hasher as _};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u64(now_ms);
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.finish()
}

/// Where a bucket or repository keeps its objects, refs and file references.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Home {
    /// Under the name it was created with: buckets created before homes existed, moved
    /// since.
    Name(RepoId),
    /// Under [`RepoId::storage`] of this nonce, which no name can be: every bucket created
    /// since homes exist, so a name freed by a move or a deletion and created again
    /// starts with nothing of the bucket that had it.
    Own(u64),
}

impl RepoRecord {
    /// Where this repository's objects, branches and file references are kept: its own
    /// name, or a bucket's [`Home`].
    pub fn storage(&self) -> RepoRef {
        match &self.home {
            None => RepoRef::new(self.kind, self.id.clone()),
            Some(Home::Name(id)) => RepoRef::new(self.kind, id.clone()),
            Some(Home::Own(nonce)) => RepoRef::new(self.kind, RepoId::storage(*nonce)),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        serde_json::to_vec(self).expect("a record always serializes")
    }

    pub fn decode(repo: &RepoRef, bytes: &[u8]) -> Result<RepoRecord> {
        serde_json::from_slice(bytes).map_err(|e| {
            let what = format!("the stored record of repository {repo} is not valid");
            CasError::storage_with(what, e)
        })
    }
}

/// A repository's record, with the version its next compare-and-swap must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordHead {
    pub record: RepoRecord,
    /// Opaque to callers; increases with every change.
    pub version: u64,
}

/// The name that holds a bucket's storage, with the version its next compare-and-swap
/// must name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageHolder {
    pub name: RepoId,
    /// Opaque to callers; increases with every change.
    pub version: u64,
}

/// Where a branch points, with the version its next compare-and-swap must name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BranchHead {
    pub commit: CommitId,
    /// Opaque to callers; increases with every move.
    pub version: u64,
}

/// The storage of repositories (contract in the module docs).
#[async_trait::async_trait]
pub trait RepoStore: Send + Sync + 'static {
    /// Write the record of a new repository (none, or a deleted one, under this name);
    /// `false` (and nothing written) if it exists.
    async fn create_repo(&self, repo: &RepoRef, record: &RepoRecord) -> Result<bool>;

    /// The record of `repo`, if it exists.
    async fn repo(&self, repo: &RepoRef) -> Result<Option<RepoRecord>> {
        Ok(self.repo_head(repo).await?.map(|h| h.record))
    }

    /// The record of `repo` with its version, if it exists.
    async fn repo_head(&self, repo: &RepoRef) -> Result<Option<RecordHead>>;

    /// Replace the record of `repo` at `from` with `to` (`None`: delete the repository).
    /// Returns the new version if this call changed it, `None` if the record was not at
    /// `from` any more (someone else changed or deleted it first).
    async fn update_repo(
        &self,
        repo: &RepoRef,
        from: &RecordHead,
        to: Option<&RepoRecord>,
    ) -> Result<Option<u64>>;

    /// Delete `repo` from whatever version its record is at (it no longer exists; its
    /// objects stay until the store reclaims them); `false` if there was none.
    async fn delete_repo(&self, repo: &RepoRef) -> Result<bool>;

    /// The records of every bucket (repositories of kind bucket), in no order.
    async fn buckets(&self) -> Result<Vec<RepoRecord>>;

    /// The records of every repository of kind `kind` created since repositories are
    /// listed (stores written before keep no list of their models, datasets and spaces),
    /// in no order.
    async fn repos(&self, kind: RepoType) -> Result<Vec<RepoRecord>>;

    /// The name holding the storage `storage` of a bucket whose storage is not its own
    /// name ([`RepoRecord::storage`]), if one was set: what
    /// [`repos_referencing`](RepoStore::repos_referencing) follows from the file
    /// references kept there to the record of the bucket.
    async fn storage_holder(&self, storage: &RepoRef) -> Result<Option<StorageHolder>>;

    /// Make `name` the holder of `storage`, from the holder at version `from` (`None`:
    /// there is none yet). `false` if the holder was not at `from`.
    async fn set_storage_holder(
        &self,
        storage: &RepoRef,
        from: Option<u64>,
        name: &RepoId,
    ) -> Result<bool>;

    /// Store object `id` of `repo`.
    async fn put_object(
        &self,
        repo: &RepoRef,
        kind: RepoObject,
        id: &ObjectId,
        bytes: Bytes,
    ) -> Result<()>;

    /// The bytes of object `id` of `repo`.
    async fn object(
        &self,
        repo: &RepoRef,
        kind: RepoObject,
        id: &ObjectId,
    ) -> Result<Option<Bytes>>;

    /// Remember that `repo` committed `file` as an LFS file with this sha256.
    async fn record_lfs_file(
        &self,
        repo: &RepoRef,
        sha256: &[u8; 32],
        file: &MerkleHash,
    ) -> Result<()>;

    /// The Xet file `repo` committed as an LFS file with this sha256, if it ever did.
    async fn lfs_file(&self, repo: &RepoRef, sha256: &[u8; 32]) -> Result<Option<MerkleHash>>;

    /// Where `name` points, if the branch exists.
    async fn branch(&self, repo: &RepoRef, name: &BranchName) -> Result<Option<BranchHead>>;

    /// Every ref of `repo` (branches, `refs/pr/N`, `refs/tags/X`; deleted ones left out),
    /// sorted by name.
    async fn branches(&self, repo: &RepoRef) -> Result<Vec<(BranchName, BranchHead)>>;

    /// Move ref `name` (a branch, `refs/pr/N` or `refs/tags/X`) from `from` (`None`: it
    /// does not exist: never did, or was deleted) to `to` (`None`: delete it, which needs
    /// a `from`), keeping `message` with it (a tag's). Returns the new version if this
    /// call moved it, `None` if the ref was not at `from` (someone else moved, created or
    /// deleted it first). A deleted ref created again continues its versions, so a head
    /// read before the deletion never matches again.
    async fn write_ref(
        &self,
        repo: &RepoRef,
        name: &BranchName,
        from: Option<&BranchHead>,
        to: Option<&CommitId>,
        message: Option<&str>,
    ) -> Result<Option<u64>>;

    /// Move `name` from `from` (`None`: the branch does not exist) to `to`
    /// ([`write_ref`](RepoStore::write_ref)). Returns the new head if this call moved it.
    async fn update_branch(
        &self,
        repo: &RepoRef,
        name: &BranchName,
        from: Option<&BranchHead>,
        to: &CommitId,
    ) -> Result<Option<BranchHead>> {
        let moved = self.write_ref(repo, name, from, Some(to), None).await?;
        Ok(moved.map(|version| BranchHead {
            commit: *to,
            version,
        }))
    }

    /// Delete `name` if it is still at `from`; whether this call deleted it.
    async fn delete_branch(
        &self,
        repo: &RepoRef,
        name: &BranchName,
        from: &BranchHead,
    ) -> Result<bool> {
        Ok(self
            .write_ref(repo, name, Some(from), None, None)
            .await?
            .is_some())
    }

    /// Discussion (or pull request) `num` of `repo`: its current version and what it
    /// holds (the Hub layer's JSON), if it exists.
    async fn discussion(&self, repo: &RepoRef, num: u64) -> Result<Option<(u64, Bytes)>>;

    /// Write discussion `num` from version `from` (`None`: create it); whether this call
    /// wrote it, by the compare-and-swap a branch moves by. Numbers are taken from 1
    /// without gaps: creating `num` needs `num - 1` to exist.
    async fn write_discussion(
        &self,
        repo: &RepoRef,
        num: u64,
        from: Option<u64>,
        body: Bytes,
    ) -> Result<bool>;

    /// How many discussions `repo` has: the highest number created.
    async fn discussion_count(&self, repo: &RepoRef) -> Result<u64>;

    /// Remember that `repo` references `file`: a commit of it added the file, or an
    /// upload under a CAS token minted for it registered the file. CAS tokens bound to a
    /// repository read only such files. `repo` is where the repository keeps its objects
    /// ([`RepoRecord::storage`]): a bucket's references follow it through moves.
    async fn record_file_reference(&self, repo: &RepoRef, file: &MerkleHash) -> Result<()>;

    /// Whether [`record_file_reference`](RepoStore::record_file_reference) was called for
    /// `repo` and `file`.
    async fn references_file(&self, repo: &RepoRef, file: &MerkleHash) -> Result<bool>;

    /// The records of every repository that references `file` (in no particular order):
    /// the records of the repositories whose storage holds a reference, found through the
    /// storage's holder where one is set.
    async fn repos_referencing(&self, file: &MerkleHash) -> Result<Vec<RepoRecord>>;

    /// Xet file hashes whose uploaded shards claim content with this sha256
    /// (FileMetadataExt). Claims only: nothing has checked them.
    async fn files_claiming_sha256(&self, sha256: &[u8; 32]) -> Result<Vec<MerkleHash>>;

    /// The file a previous check found to have this sha256.
    async fn verified_sha256(&self, sha256: &[u8; 32]) -> Result<Option<MerkleHash>>;

    /// Remember that `file`'s content was read and has this sha256.
    async fn record_verified_sha256(&self, sha256: &[u8; 32], file: &MerkleHash) -> Result<()>;
}
