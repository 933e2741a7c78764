//! Storage buckets kept the way repositories are: a bucket is a repository of kind
//! [`RepoType::Bucket`] whose files live in git trees with their facts ([`crate::tree`]),
//! and each batch of writes is one commit on a branch of its own. That gives buckets
//! what repositories already have, on any store and across servers sharing it: a batch
//! applies to one head by compare-and-swap (two writers of a path end with one of them,
//! never a mix), a listing page costs the folders it crosses, and a file is found by one
//! folder read per component.
//!
//! What differs from a repository:
//! - no history is shown: the branch is internal, named after the bucket's incarnation
//!   (a nonce in its record), so a bucket deleted and created again starts empty;
//! - its objects, branch and file references are kept apart from its name, under a
//!   storage name made of that nonce ([`Home::Own`]), so a move writes records only and
//!   a name freed by a move and created again starts with nothing of the moved bucket;
//! - each operation of a batch applies or fails on its own ([`tree::apply_each`]);
//!   deleting a path that is not there succeeds, so a replayed batch changes nothing;
//! - each commit carries the bucket's totals (files, bytes) and its `updatedAt` in
//!   milliseconds, strictly increasing, so they are exact without walking the tree.
//!
//! # Moves
//! [`Repos::move_repo`] changes three records, each by compare-and-swap, in this order:
//! 1. the source's record is marked `moving_to` the target: from here on the source
//!    takes no writes (batches, settings, deletion answer [`RepoError::Moving`]);
//! 2. the target's record is created: the source's, with the same home and incarnation,
//!    so the same storage and branch (nothing is copied); if the target exists, the
//!    source's mark is taken back and the move fails;
//! 3. the storage's holder becomes the target (what file references lead to);
//! 4. the source's record is deleted.
//!
//! A crash between two steps never leaves two names writable onto one branch: after
//! step 1 only the target can become writable. It leaves the source read-only (and the
//! target live after step 2) until the same move is asked again, which finishes it from
//! wherever it stopped. The other order (create the target, then delete the source) would
//! leave both names live and writable onto one branch until someone noticed.

use crate::commit::{ApplyError, Commit, Operation};
use crate::id::{BranchName, CommitId, RepoRef, RepoType};
use crate::repos::{RepoError, Repos, refuse_moving};
use crate::store::{Home, RepoRecord};
use crate::tree::{self, Applied};

/// A bucket's totals after a commit.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BucketTotals {
    pub files: u64,
    pub bytes: u64,
    /// The time of the last change, milliseconds since the Unix epoch (the creation
    /// time while nothing was written).
    pub updated_ms: u64,
}

const TOTALS_PREFIX: &str = "xet-bucket";

impl BucketTotals {
    fn encode(&self) -> String {
        format!(
            "{TOTALS_PREFIX} files={} bytes={} updated-ms={}",
            self.files, self.bytes, self.updated_ms
        )
    }

    pub(crate) fn decode(description: &str) -> Option<BucketTotals> {
        let mut it = description.strip_prefix(TOTALS_PREFIX)?.split_whitespace();
        let mut field = |name: &str| it.next()?.strip_prefix(name)?.parse::<u64>().ok();
        Some(BucketTotals {
            files: field("files=")?,
            bytes: field("bytes=")?,
            updated_ms: field("updated-ms=")?,
        })
    }
}

/// The state of a bucket: its record, the branch of this incarnation and its head.
#[derive(Debug, Clone)]
pub struct BucketState {
    pub record: RepoRecord,
    /// Where its objects, branch and file references are kept
    /// ([`RepoRecord::storage`]): what every object read of the bucket names.
    pub storage: RepoRef,
    pub branch: BranchName,
    /// `None` until the first write.
    pub head: Option<CommitId>,
    pub tree: Option<crate::ObjectId>,
    pub totals: BucketTotals,
}

/// What a batch did.
#[derive(Debug)]
pub struct BatchOutcome {
    /// One per operation, in order.
    pub results: Vec<Result<Applied, ApplyError>>,
    pub totals: BucketTotals,
    /// The commit, if anything changed.
    pub commit: Option<CommitId>,
}

/// The branch of a bucket's incarnation.
pub fn incarnation_branch(nonce: u64) -> BranchName {
    BranchName::parse(&format!("bucket-{nonce:016x}")).expect("a valid branch name")
}

impl Repos {
    /// Create bucket `bucket` (empty), kept under a storage of its own.
    /// [`RepoError::RepoExists`] if it exists.
    pub async fn create_bucket(
        &self,
        bucket: &RepoRef,
        owner: &str,
        private: bool,
        now_ms: u64,
    ) -> Result<RepoRecord, RepoError> {
        debug_assert_eq!(bucket.kind, RepoType::Bucket);
        let nonce = crate::store::nonce(now_ms);
        let record = RepoRecord {
            kind: bucket.kind,
            id: bucket.id.clone(),
            private,
            owner: owner.to_string(),
            created_at: now_ms / 1000,
            created_ms: Some(now_ms),
            incarnation: Some(nonce),
            home: Some(Home::Own(nonce)),
            moving_to: None,
        };
        // The holder before the record, so the references its storage will keep always
        // lead to a record. A holder left by a creation that lost (or died) names a record
        // whose storage is elsewhere, which leads nowhere.
        let storage = record.storage();
        if !self
            .store()
            .set_storage_holder(&storage, None, &bucket.id)
            .await?
        {
            return Err(xet_cas::CasError::storage(format!(
                "the new storage {} of bucket {bucket} is held already: its nonce repeats one",
                storage.id
            ))
            .into());
        }
        if !self.store().create_repo(bucket, &record).await? {
            return Err(RepoError::RepoExists(bucket.clone()));
        }
        Ok(record)
    }

    /// The state of bucket `bucket`: [`RepoError::RepoNotFound`] if there is none.
    pub async fn bucket(&self, bucket: &RepoRef) -> Result<BucketState, RepoError> {
        let record = self.record(bucket).await?;
        let storage = record.storage();
        let branch = incarnation_branch(record.incarnation.unwrap_or(0));
        let created_ms = record.created_ms.unwrap_or(record.created_at * 1000);
        let Some(head) = self.store().branch(&storage, &branch).await? else {
            return Ok(BucketState {
                record,
                storage,
                branch,
                head: None,
                tree: None,
                totals: BucketTotals {
                    updated_ms: created_ms,
                    ..BucketTotals::default()
                },
            });
        };
        let commit = self.stored_commit(&storage, &branch, &head.commit).await?;
        let totals = totals_of(&storage, &head.commit, &commit)?;
        Ok(BucketState {
            record,
            storage,
            branch,
            head: Some(head.commit),
            tree: Some(commit.tree),
            totals,
        })
    }

    /// Delete bucket `bucket` (not one being moved): its name is free, its files gone.
    pub async fn delete_bucket(&self, bucket: &RepoRef) -> Result<(), RepoError> {
        self.update_record(bucket, |r| {
            refuse_moving(bucket, r)?;
            Ok(None)
        })
        .await
        .map(drop)
    }

    /// Move bucket `from` to the free name `to`, with its files, totals and creation time;
    /// nothing but records is written (see the module docs for the order and why).
    /// Asked again after a crash, finishes the same move.
    pub async fn move_repo(&self, from: &RepoRef, to: &RepoRef) -> Result<RepoRecord, RepoError> {
        let source = self
            .update_record(from, |r| match &r.moving_to {
                None => Ok(Some(RepoRecord {
                    moving_to: Some(to.id.clone()),
                    ..r.clone()
                })),
                // An earlier attempt of this very move stopped half-way: finish it.
                Some(t) if *t == to.id => Ok(Some(r.clone())),
                Some(_) => refuse_moving(from, r).map(|()| None),
            })
            .await?
            .ok_or_else(|| RepoError::RepoNotFound(from.clone()))?;
        let storage = source.storage();
        let target = RepoRecord {
            id: to.id.clone(),
            home: Some(source.home.clone().unwrap_or(Home::Name(from.id.clone()))),
            moving_to: None,
            ..source.clone()
        };
        if !self.store().create_repo(to, &target).await? {
            // Ours if an earlier attempt created it; anyone else's: give the source its
            // writes back and refuse.
            let existing = self.store().repo(to).await?;
            let ours = existing
                .as_ref()
                .is_some_and(|r| r.storage() == storage && r.incarnation == source.incarnation);
            if !ours {
                self.update_record(from, |r| {
                    Ok(Some(RepoRecord {
                        moving_to: None,
                        ..r.clone()
                    }))
                })
                .await?;
                return Err(RepoError::RepoExists(to.clone()));
            }
        }
        self.hold_storage(&storage, to).await?;
        let deleted = self
            .update_record(from, |r| match &r.moving_to {
                Some(t) if *t == to.id => Ok(None),
                _ => refuse_moving(from, r).map(|()| Some(r.clone())),
            })
            .await;
        match deleted {
            // Gone already: another attempt of this move finished it.
            Ok(_) | Err(RepoError::RepoNotFound(_)) => Ok(target),
            Err(e) => Err(e),
        }
    }

    /// Make `holder` the name holding `storage`.
    async fn hold_storage(&self, storage: &RepoRef, holder: &RepoRef) -> Result<(), RepoError> {
        for _ in 0..crate::repos::MAX_COMMIT_ATTEMPTS {
            let current = self.store().storage_holder(storage).await?;
            if current.as_ref().is_some_and(|h| h.name == holder.id) {
                return Ok(());
            }
            let from = current.map(|h| h.version);
            if self
                .store()
                .set_storage_holder(storage, from, &holder.id)
                .await?
            {
                return Ok(());
            }
        }
        Err(RepoError::RecordContention {
            repo: storage.clone(),
            attempts: crate::repos::MAX_COMMIT_ATTEMPTS,
        })
    }

    async fn stored_commit(
        &self,
        repo: &RepoRef,
        branch: &BranchName,
        id: &CommitId,
    ) -> Result<Commit, RepoError> {
        self.commit(repo, id).await?.ok_or_else(|| {
            xet_cas::CasError::storage(format!(
                "branch {branch} of {repo} points at commit {id}, which is not stored"
            ))
            .into()
        })
    }

    /// Apply a batch to bucket `bucket`: each operation on its own, all that apply in one
    /// commit, re-applied to whatever head it finds until its compare-and-swap wins.
    /// Only [`Operation::Add`] and [`Operation::DeleteFile`] are bucket operations.
    pub async fn bucket_batch(
        &self,
        bucket: &RepoRef,
        ops: Vec<Operation>,
        author: &str,
        now_ms: u64,
    ) -> Result<BatchOutcome, RepoError> {
        let state = self.bucket(bucket).await?;
        refuse_moving(bucket, &state.record)?;
        // Everything is read and written where the bucket is kept, not under its name.
        let storage = &state.storage;
        let added = ops
            .iter()
            .filter_map(|op| match op {
                Operation::Add { entry, .. } => Some(entry),
                _ => None,
            })
            .collect();
        self.record_files(storage, added).await?;
        let ops: std::sync::Arc<[Operation]> = ops.into();
        for _ in 0..crate::repos::MAX_COMMIT_ATTEMPTS {
            let head = self.store().branch(storage, &state.branch).await?;
            let (base, before) = match &head {
                Some(h) => {
                    let c = self
                        .stored_commit(storage, &state.branch, &h.commit)
                        .await?;
                    (Some(c.tree), totals_of(storage, &h.commit, &c)?)
                }
                None => (None, state.totals),
            };
            let root = self.load_for(storage, base, &ops).await?;
            let ops_ = std::sync::Arc::clone(&ops);
            let (results, built) = self
                .off(move || {
                    let mut root = root;
                    let results = tree::apply_each(&mut root, &ops_);
                    (results, root.build())
                })
                .await?;
            let totals = after(before, &results, now_ms);
            let (tree_id, folders) = built;
            if Some(tree_id) == base {
                // Nothing changed (failures, deletions of what is not there).
                return Ok(BatchOutcome {
                    results,
                    totals: before,
                    commit: None,
                });
            }
            let commit = Commit {
                tree: tree_id,
                parent: head.map(|h| h.commit),
                summary: "batch".into(),
                description: totals.encode(),
                author: author.to_string(),
                created_at: now_ms / 1000,
            };
            let (id, bytes) = commit.encode();
            self.write_folders(storage, folders).await?;
            self.store()
                .put_object(storage, crate::RepoObject::Commit, &id, bytes.into())
                .await?;
            if self
                .store()
                .update_branch(storage, &state.branch, head.as_ref(), &id)
                .await?
                .is_some()
            {
                return Ok(BatchOutcome {
                    results,
                    totals,
                    commit: Some(id),
                });
            }
        }
        Err(RepoError::Contention {
            repo: bucket.clone(),
            branch: state.branch,
            attempts: crate::repos::MAX_COMMIT_ATTEMPTS,
        })
    }
}

pub(crate) fn totals_of(
    bucket: &RepoRef,
    id: &CommitId,
    c: &Commit,
) -> Result<BucketTotals, RepoError> {
    BucketTotals::decode(&c.description).ok_or_else(|| {
        xet_cas::CasError::storage(format!(
            "commit {id} of bucket {bucket} does not carry the bucket's totals"
        ))
        .into()
    })
}

/// The totals after `results` applied on `before`, changed at `now_ms` (at least a
/// millisecond after the last change, so every change moves `updatedAt`).
fn after(
    before: BucketTotals,
    results: &[Result<Applied, ApplyError>],
    now_ms: u64,
) -> BucketTotals {
    let (mut files, mut bytes) = (i128::from(before.files), i128::from(before.bytes));
    for r in results.iter().flatten() {
        match r {
            Applied::Added { size, replaced } => {
                if let Some(old) = replaced {
                    files -= 1;
                    bytes -= i128::from(old.size);
                }
                files += 1;
                bytes += i128::from(*size);
            }
            Applied::Deleted { removed: Some(old) } => {
                files -= 1;
                bytes -= i128::from(old.size);
            }
            Applied::Deleted { removed: None } => {}
        }
    }
    BucketTotals {
        files: files.max(0) as u64,
        bytes: bytes.max(0) as u64,
        updated_ms: now_ms.max(before.updated_ms + 1),
    }
}
