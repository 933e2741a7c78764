//! Pull requests as the Hub keeps them: a discussion numbered from 1 per repository
//! (its title, author, status and events), and for a pull request the ref `refs/pr/N`
//! its commits go to. A discussion is a versioned record of the
//! [`RepoStore`](crate::RepoStore)
//! ([`write_discussion`](crate::RepoStore::write_discussion)), changed by
//! compare-and-swap like a branch; the ref is a ref like any other.
//!
//! Merging applies what the pull request changed since it was opened (the difference of
//! the base's tree then and the pull request's tree now) onto the base's head as one
//! commit, if no path it changes was changed differently on the base meanwhile; else it
//! is refused, naming the paths, and nothing changes.

use std::collections::HashMap;

use bytes::Bytes;
use xet_cas::CasError;

use crate::bucket_changes::ChangeOp;
use crate::commit::{Commit, Operation};
use crate::id::{BranchName, CommitId, RepoPath, RepoRef, Revision};
use crate::repos::{CommitMeta, Committed, MAX_COMMIT_ATTEMPTS, RepoError, Repos};

/// Where a discussion stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Status {
    /// A pull request without commits yet.
    Draft,
    Open,
    Closed,
    Merged,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Draft => "draft",
            Status::Open => "open",
            Status::Closed => "closed",
            Status::Merged => "merged",
        }
    }
}

/// Something that happened in a discussion.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "type", rename_all = "kebab-case")]
pub enum EventKind {
    Comment { text: String },
    StatusChange { status: Status },
    Commit { oid: CommitId, subject: String },
}

#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Event {
    /// Unique within the discussion: `<num>-<index>`.
    pub id: String,
    pub author: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
    #[serde(flatten)]
    pub kind: EventKind,
}

/// A discussion or pull request, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Discussion {
    pub num: u64,
    pub title: String,
    pub author: String,
    pub created_at: u64,
    pub status: Status,
    pub is_pull_request: bool,
    /// Pull requests: the branch it merges into, and its head when the pull request was
    /// opened (what "what it changed" is measured from).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base: Option<BranchName>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<CommitId>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub merge_commit: Option<CommitId>,
    pub events: Vec<Event>,
}

impl Discussion {
    /// Append an event by `author` at `at` (seconds).
    pub fn push(&mut self, author: &str, at: u64, kind: EventKind) {
        let id = format!("{}-{}", self.num, self.events.len() + 1);
        self.events.push(Event {
            id,
            author: author.to_string(),
            created_at: at,
            kind,
        });
    }

    /// The ref a pull request's commits go to.
    pub fn pr_ref(&self) -> BranchName {
        BranchName::for_pull_request(self.num)
    }
}

/// A new discussion or pull request.
pub struct NewDiscussion<'a> {
    /// Pull requests: the branch it merges into.
    pub base: &'a BranchName,
    pub title: &'a str,
    pub description: &'a str,
    pub author: &'a str,
    pub created_at: u64,
    pub pull_request: bool,
}

/// Why a discussion operation failed, beyond [`RepoError`]'s cases.
#[derive(Debug, thiserror::Error)]
pub enum DiscussionError {
    #[error("discussion {num} of {repo} not found")]
    NotFound { repo: RepoRef, num: u64 },
    #[error("discussion {num} of {repo} is not a pull request")]
    NotAPullRequest { repo: RepoRef, num: u64 },
    #[error("pull request {num} of {repo} is {status}: only an open one can be merged")]
    NotOpen {
        repo: RepoRef,
        num: u64,
        status: &'static str,
    },
    #[error(
        "pull request {num} of {repo} conflicts with {base}, which changed these files \
         differently since the pull request was opened: {}; nothing was merged",
        .files.join(", ")
    )]
    Conflict {
        repo: RepoRef,
        num: u64,
        base: BranchName,
        files: Vec<String>,
    },
    #[error(transparent)]
    Repo(#[from] RepoError),
}

impl From<CasError> for DiscussionError {
    fn from(e: CasError) -> Self {
        DiscussionError::Repo(RepoError::Store(e))
    }
}

fn encode(d: &Discussion) -> Result<Bytes, DiscussionError> {
    serde_json::to_vec(d)
        .map(Bytes::from)
        .map_err(|e| CasError::storage_with(format!("encoding discussion {}", d.num), e).into())
}

impl Repos {
    /// Discussion `num` of `repo` and its version.
    pub async fn discussion(
        &self,
        repo: &RepoRef,
        num: u64,
    ) -> Result<(u64, Discussion), DiscussionError> {
        let Some((version, bytes)) = self.store().discussion(repo, num).await? else {
            return Err(DiscussionError::NotFound {
                repo: repo.clone(),
                num,
            });
        };
        let d = serde_json::from_slice(&bytes).map_err(|e| {
            CasError::storage_with(format!("discussion {num} of {repo} is not readable"), e)
        })?;
        Ok((version, d))
    }

    /// Every discussion of `repo`, newest first.
    pub async fn discussions(&self, repo: &RepoRef) -> Result<Vec<Discussion>, DiscussionError> {
        let count = self.store().discussion_count(repo).await?;
        let mut out = Vec::new();
        for num in (1..=count).rev() {
            out.push(self.discussion(repo, num).await?.1);
        }
        Ok(out)
    }

    /// Open a discussion; for a pull request, also its ref `refs/pr/N` at the head of
    /// `main`, which its commits then move. Takes the next free number.
    pub async fn create_discussion(
        &self,
        repo: &RepoRef,
        new: &NewDiscussion<'_>,
    ) -> Result<Discussion, DiscussionError> {
        let base = new.base.clone();
        let base_commit = if new.pull_request {
            Some(self.resolve(repo, &Revision::Branch(base.clone())).await?.0)
        } else {
            None
        };
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let num = self.store().discussion_count(repo).await? + 1;
            let mut d = Discussion {
                num,
                title: new.title.to_string(),
                author: new.author.to_string(),
                created_at: new.created_at,
                status: if new.pull_request {
                    Status::Draft
                } else {
                    Status::Open
                },
                is_pull_request: new.pull_request,
                base: new.pull_request.then(|| base.clone()),
                base_commit,
                merge_commit: None,
                events: Vec::new(),
            };
            let text = new.description.to_string();
            d.push(new.author, new.created_at, EventKind::Comment { text });
            if !self
                .store()
                .write_discussion(repo, num, None, encode(&d)?)
                .await?
            {
                continue; // someone took this number first
            }
            if let Some(at) = base_commit {
                // The ref after the discussion: a crash between the two leaves a pull
                // request without a ref, which its first commit creates.
                self.store()
                    .write_ref(repo, &d.pr_ref(), None, Some(&at), None)
                    .await?;
            }
            return Ok(d);
        }
        Err(RepoError::RecordContention {
            repo: repo.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        }
        .into())
    }

    /// Change discussion `num` with `change` until the compare-and-swap wins; the
    /// discussion as written.
    pub async fn update_discussion(
        &self,
        repo: &RepoRef,
        num: u64,
        change: impl Fn(&mut Discussion) -> Result<(), DiscussionError>,
    ) -> Result<Discussion, DiscussionError> {
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let (version, mut d) = self.discussion(repo, num).await?;
            change(&mut d)?;
            if self
                .store()
                .write_discussion(repo, num, Some(version), encode(&d)?)
                .await?
            {
                return Ok(d);
            }
        }
        Err(RepoError::RecordContention {
            repo: repo.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        }
        .into())
    }

    /// Pull request `num`, which must be one and be open (or a draft).
    async fn open_pull_request(
        &self,
        repo: &RepoRef,
        num: u64,
    ) -> Result<Discussion, DiscussionError> {
        let (_, d) = self.discussion(repo, num).await?;
        if !d.is_pull_request {
            return Err(DiscussionError::NotAPullRequest {
                repo: repo.clone(),
                num,
            });
        }
        if !matches!(d.status, Status::Open | Status::Draft) {
            return Err(DiscussionError::NotOpen {
                repo: repo.clone(),
                num,
                status: d.status.as_str(),
            });
        }
        Ok(d)
    }

    /// The ref of pull request `num`, ready for a commit: the pull request must exist and
    /// be neither merged nor closed; a ref its creation did not get to write is written
    /// at the base commit.
    pub async fn pr_ref_for_commit(
        &self,
        repo: &RepoRef,
        num: u64,
    ) -> Result<BranchName, DiscussionError> {
        let d = self.open_pull_request(repo, num).await?;
        let name = d.pr_ref();
        if self.store().branch(repo, &name).await?.is_none()
            && let Some(at) = d.base_commit
        {
            // Lost to a racing writer is fine: then it exists.
            self.store()
                .write_ref(repo, &name, None, Some(&at), None)
                .await?;
        }
        Ok(name)
    }

    /// Record that `commit` landed on pull request `num`: an event, and a draft opens.
    pub async fn note_pr_commit(
        &self,
        repo: &RepoRef,
        num: u64,
        done: &Committed,
        at: u64,
    ) -> Result<(), DiscussionError> {
        self.update_discussion(repo, num, |d| {
            if d.status == Status::Draft {
                d.status = Status::Open;
            }
            let kind = EventKind::Commit {
                oid: done.id,
                subject: done.commit.summary.clone(),
            };
            d.push(&done.commit.author, at, kind);
            Ok(())
        })
        .await?;
        Ok(())
    }

    /// Set the status of discussion `num` (open or closed), with an event.
    pub async fn set_discussion_status(
        &self,
        repo: &RepoRef,
        num: u64,
        status: Status,
        author: &str,
        at: u64,
    ) -> Result<Discussion, DiscussionError> {
        self.update_discussion(repo, num, |d| {
            if d.status == Status::Merged {
                return Err(DiscussionError::NotOpen {
                    repo: repo.clone(),
                    num,
                    status: d.status.as_str(),
                });
            }
            d.status = status;
            d.push(author, at, EventKind::StatusChange { status });
            Ok(())
        })
        .await
    }

    /// Merge pull request `num` into its base (see the module docs); the merge commit.
    pub async fn merge_pull_request(
        &self,
        repo: &RepoRef,
        num: u64,
        meta: &CommitMeta,
    ) -> Result<Committed, DiscussionError> {
        let d = self.open_pull_request(repo, num).await?;
        let Some(base) = d.base.clone() else {
            return Err(DiscussionError::NotAPullRequest {
                repo: repo.clone(),
                num,
            });
        };
        let (_, head) = self.resolve(repo, &Revision::Branch(d.pr_ref())).await?;
        let start = match d.base_commit {
            Some(c) => Some(self.resolve(repo, &Revision::Commit(c)).await?.1.tree),
            None => None,
        };
        let changes = self.tree_changes(repo, start, Some(head.tree)).await?;
        let mut done = None;
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let (base_id, base_now) = self.resolve(repo, &Revision::Branch(base.clone())).await?;
            let ops = self
                .merge_ops(repo, &d, &base, start, &base_now, &changes)
                .await?;
            match self
                .commit_to_branch(repo, &base, Some(base_id), &ops, meta)
                .await
            {
                Ok(c) => {
                    done = Some(c);
                    break;
                }
                // The base moved since it was read: look again.
                Err(RepoError::ParentMismatch { .. }) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let Some(done) = done else {
            return Err(RepoError::Contention {
                repo: repo.clone(),
                branch: base,
                attempts: MAX_COMMIT_ATTEMPTS,
            }
            .into());
        };
        let merged = done.id;
        self.update_discussion(repo, num, |d| {
            d.status = Status::Merged;
            d.merge_commit = Some(merged);
            let kind = EventKind::StatusChange {
                status: Status::Merged,
            };
            d.push(&meta.author, meta.created_at, kind);
            Ok(())
        })
        .await?;
        Ok(done)
    }

    /// The operations that bring the pull request's `changes` onto `base_now`, or the
    /// paths the base changed differently since the pull request was opened.
    async fn merge_ops(
        &self,
        repo: &RepoRef,
        d: &Discussion,
        base: &BranchName,
        start: Option<crate::id::ObjectId>,
        base_now: &Commit,
        changes: &[crate::bucket_changes::Change],
    ) -> Result<Vec<Operation>, DiscussionError> {
        let on_base: HashMap<String, _> = self
            .tree_changes(repo, start, Some(base_now.tree))
            .await?
            .into_iter()
            .map(|c| (c.path.clone(), c))
            .collect();
        let mut ops = Vec::new();
        let mut conflicts = Vec::new();
        for c in changes {
            if let Some(b) = on_base.get(&c.path) {
                // Both sides changed it: fine only if to the same thing.
                if b.entry != c.entry {
                    conflicts.push(c.path.clone());
                }
                continue;
            }
            let path = RepoPath::parse(&c.path).map_err(|e| {
                CasError::storage(format!("pull request {} of {repo} names {e}", d.num))
            })?;
            ops.push(match (c.op, &c.entry) {
                (ChangeOp::Delete, _) | (_, None) => Operation::DeleteFile { path },
                (_, Some(entry)) => Operation::Add {
                    path,
                    entry: entry.clone(),
                },
            });
        }
        if !conflicts.is_empty() {
            return Err(DiscussionError::Conflict {
                repo: repo.clone(),
                num: d.num,
                base: base.clone(),
                files: conflicts,
            });
        }
        Ok(ops)
    }
}
