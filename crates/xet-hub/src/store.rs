//! Where repositories live: the [`RepoStore`] contract, which the store engine implements
//! over the same object backend (directory or S3 bucket) as the CAS.
//!
//! Contract (checked by `xet_cas_conformance::repos` on every implementation):
//! - Repository records and repository objects (commits, trees, tree facts, LFS files)
//!   are written once, atomically, and never change; writing an existing object again is
//!   a no-op (same id, same bytes).
//! - A branch head moves only through [`RepoStore::update_branch`], a compare-and-swap:
//!   of any number of concurrent calls from the same head, exactly one succeeds, in this
//!   process or in another process sharing the backend; a successful move is visible to
//!   every later read in every process.
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
}

impl RepoRecord {
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
    /// Write the record of a new repository; `false` (and nothing written) if it exists.
    async fn create_repo(&self, repo: &RepoRef, record: &RepoRecord) -> Result<bool>;

    /// The record of `repo`, if it exists.
    async fn repo(&self, repo: &RepoRef) -> Result<Option<RepoRecord>>;

    /// Remove the record of `repo` (it no longer exists; its objects stay until the
    /// store reclaims them); `false` if there was none.
    async fn delete_repo(&self, repo: &RepoRef) -> Result<bool>;

    /// The records of every bucket (repositories of kind bucket), in no order.
    async fn buckets(&self) -> Result<Vec<RepoRecord>>;

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

    /// Every branch of `repo`, sorted by name.
    async fn branches(&self, repo: &RepoRef) -> Result<Vec<(BranchName, BranchHead)>>;

    /// Move `name` from `from` (`None`: the branch does not exist yet) to `to`. Returns
    /// the new head if this call moved it, `None` if the branch was not at `from` (someone
    /// else moved or created it first).
    async fn update_branch(
        &self,
        repo: &RepoRef,
        name: &BranchName,
        from: Option<&BranchHead>,
        to: &CommitId,
    ) -> Result<Option<BranchHead>>;

    /// Remember that `repo` references `file`: a commit of it added the file, or an
    /// upload under a CAS token minted for it registered the file. CAS tokens bound to a
    /// repository read only such files.
    async fn record_file_reference(&self, repo: &RepoRef, file: &MerkleHash) -> Result<()>;

    /// Whether [`record_file_reference`](RepoStore::record_file_reference) was called for
    /// `repo` and `file`.
    async fn references_file(&self, repo: &RepoRef, file: &MerkleHash) -> Result<bool>;

    /// The records of every repository that references `file` (in no particular order).
    async fn repos_referencing(&self, file: &MerkleHash) -> Result<Vec<RepoRecord>>;

    /// Xet file hashes whose uploaded shards claim content with this sha256
    /// (FileMetadataExt). Claims only: nothing has checked them.
    async fn files_claiming_sha256(&self, sha256: &[u8; 32]) -> Result<Vec<MerkleHash>>;

    /// The file a previous check found to have this sha256.
    async fn verified_sha256(&self, sha256: &[u8; 32]) -> Result<Option<MerkleHash>>;

    /// Remember that `file`'s content was read and has this sha256.
    async fn record_verified_sha256(&self, sha256: &[u8; 32], file: &MerkleHash) -> Result<()>;
}
