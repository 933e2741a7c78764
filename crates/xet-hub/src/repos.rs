//! Repository operations over a [`RepoStore`]: create, resolve a revision, commit with
//! compare-and-swap retries, branch. What a commit's files are (Xet hashes, sha256) is
//! decided by the caller before it gets here; this layer only moves trees and heads.

use std::collections::BTreeMap;
use std::sync::Arc;

use xet_cas::CasError;

use crate::commit::{ApplyError, Commit, FileEntry, Operation, apply};
use crate::id::{BranchName, CommitId, RepoPath, RepoRef, Revision};
use crate::store::{BranchHead, RepoRecord, RepoStore};

/// Why a repository operation failed; each maps to one Hub API answer.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("repository {0} not found")]
    RepoNotFound(RepoRef),
    #[error("revision {rev} not found in repository {repo}")]
    RevisionNotFound { repo: RepoRef, rev: String },
    #[error("{path} not found at revision {rev} of repository {repo}")]
    EntryNotFound {
        repo: RepoRef,
        rev: String,
        path: String,
    },
    #[error("repository {0} already exists")]
    RepoExists(RepoRef),
    #[error("branch {branch} already exists in repository {repo}")]
    BranchExists { repo: RepoRef, branch: BranchName },
    #[error(
        "branch {branch} of {repo} is at {head}, not at the parent commit {parent} this commit was made on: \
         fetch the new head and commit again"
    )]
    ParentMismatch {
        repo: RepoRef,
        branch: BranchName,
        parent: CommitId,
        head: CommitId,
    },
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("branch {branch} of {repo} kept moving: gave up after {attempts} attempts; try again")]
    Contention {
        repo: RepoRef,
        branch: BranchName,
        attempts: u32,
    },
    #[error(transparent)]
    Store(#[from] CasError),
}

/// What to record with a commit.
#[derive(Debug, Clone, Default)]
pub struct CommitMeta {
    pub summary: String,
    pub description: String,
    pub author: String,
    pub created_at: u64,
}

/// A commit that landed.
#[derive(Debug, Clone)]
pub struct Committed {
    pub id: CommitId,
    pub commit: Commit,
}

/// How often a commit without `parentCommit` is re-applied on a branch that moved
/// meanwhile. Every round, one of the racing commits wins, so this bounds the number of
/// commits that can race at once, not the time any of them waits.
pub const MAX_COMMIT_ATTEMPTS: u32 = 256;

/// Repository operations (see the module docs). Cloning shares the store.
#[derive(Clone)]
pub struct Repos {
    store: Arc<dyn RepoStore>,
}

impl Repos {
    pub fn new(store: Arc<dyn RepoStore>) -> Repos {
        Repos { store }
    }

    pub fn store(&self) -> &Arc<dyn RepoStore> {
        &self.store
    }

    /// Create `repo` with an empty initial commit on `main`.
    pub async fn create(
        &self,
        repo: &RepoRef,
        owner: &str,
        private: bool,
        now: u64,
    ) -> Result<RepoRecord, RepoError> {
        let record = RepoRecord {
            kind: repo.kind.as_str().to_string(),
            id: repo.id.to_string(),
            private,
            owner: owner.to_string(),
            created_at: now,
        };
        let initial = Commit {
            version: Commit::VERSION,
            parent: None,
            summary: "initial commit".into(),
            description: String::new(),
            author: owner.to_string(),
            created_at: now,
            files: BTreeMap::new(),
        };
        // Clients ask to create the repository before every upload: answer an existing
        // one before storing anything (a race past this check stores at most one
        // unreferenced initial commit).
        if self.store.repo(repo).await?.is_some() {
            return Err(RepoError::RepoExists(repo.clone()));
        }
        // The commit first, so a record is never visible with a `main` that points
        // nowhere; if we die between the record and the branch, the first commit to
        // `main` creates the branch.
        let (id, bytes) = initial.encode();
        self.store.put_commit(repo, &id, bytes.into()).await?;
        if !self.store.create_repo(repo, &record).await? {
            return Err(RepoError::RepoExists(repo.clone()));
        }
        self.store
            .update_branch(repo, &BranchName::main(), None, &id)
            .await?;
        Ok(record)
    }

    /// The record of `repo`.
    pub async fn record(&self, repo: &RepoRef) -> Result<RepoRecord, RepoError> {
        self.store
            .repo(repo)
            .await?
            .ok_or_else(|| RepoError::RepoNotFound(repo.clone()))
    }

    /// Commit `id` of `repo`.
    pub async fn commit(&self, repo: &RepoRef, id: &CommitId) -> Result<Option<Commit>, RepoError> {
        let Some(bytes) = self.store.commit(repo, id).await? else {
            return Ok(None);
        };
        Commit::decode(id, &bytes).map(Some).map_err(|e| {
            let what = format!("repository {repo}, commit {id}");
            RepoError::Store(CasError::storage_with(what, e))
        })
    }

    /// The commit `rev` names in `repo` (which must exist).
    pub async fn resolve(
        &self,
        repo: &RepoRef,
        rev: &Revision,
    ) -> Result<(CommitId, Commit), RepoError> {
        let not_found = || RepoError::RevisionNotFound {
            repo: repo.clone(),
            rev: rev.to_string(),
        };
        let id = match rev {
            Revision::Commit(id) => *id,
            Revision::Branch(b) => {
                self.store
                    .branch(repo, b)
                    .await?
                    .ok_or_else(not_found)?
                    .commit
            }
        };
        let commit = self.commit(repo, &id).await?.ok_or_else(not_found)?;
        Ok((id, commit))
    }

    /// Apply `ops` on top of `branch` and move it to the result.
    ///
    /// With `parent`, the branch must be at that commit (else [`RepoError::ParentMismatch`]).
    /// Without, the commit is re-applied to whatever head it finds until its
    /// compare-and-swap wins, so concurrent commits all land, in some order.
    pub async fn commit_to_branch(
        &self,
        repo: &RepoRef,
        branch: &BranchName,
        parent: Option<CommitId>,
        ops: &[Operation],
        meta: &CommitMeta,
    ) -> Result<Committed, RepoError> {
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let head = self.store.branch(repo, branch).await?;
            if let (Some(parent), Some(head)) = (parent, head)
                && parent != head.commit
            {
                return Err(RepoError::ParentMismatch {
                    repo: repo.clone(),
                    branch: branch.clone(),
                    parent,
                    head: head.commit,
                });
            }
            let base = match head {
                Some(h) => self
                    .commit(repo, &h.commit)
                    .await?
                    .ok_or_else(|| {
                        CasError::storage(format!(
                            "branch {branch} of {repo} points at commit {}, which is not stored",
                            h.commit
                        ))
                    })?
                    .files,
                None => BTreeMap::new(),
            };
            let files = apply(&base, ops)?;
            let commit = Commit {
                version: Commit::VERSION,
                parent: head.map(|h| h.commit),
                summary: meta.summary.clone(),
                description: meta.description.clone(),
                author: meta.author.clone(),
                created_at: meta.created_at,
                files,
            };
            let (id, bytes) = commit.encode();
            self.store.put_commit(repo, &id, bytes.into()).await?;
            if self
                .store
                .update_branch(repo, branch, head.as_ref(), &id)
                .await?
                .is_some()
            {
                return Ok(Committed { id, commit });
            }
        }
        Err(RepoError::Contention {
            repo: repo.clone(),
            branch: branch.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// Create `branch` at the commit `from` names.
    pub async fn create_branch(
        &self,
        repo: &RepoRef,
        branch: &BranchName,
        from: &Revision,
    ) -> Result<BranchHead, RepoError> {
        let (id, _) = self.resolve(repo, from).await?;
        self.store
            .update_branch(repo, branch, None, &id)
            .await?
            .ok_or_else(|| RepoError::BranchExists {
                repo: repo.clone(),
                branch: branch.clone(),
            })
    }

    /// The entry of `path` in `commit`, or why there is none.
    pub fn entry<'a>(
        repo: &RepoRef,
        rev: &str,
        commit: &'a Commit,
        path: &RepoPath,
    ) -> Result<&'a FileEntry, RepoError> {
        commit
            .files
            .get(path)
            .ok_or_else(|| RepoError::EntryNotFound {
                repo: repo.clone(),
                rev: rev.to_string(),
                path: path.to_string(),
            })
    }
}
