//! What changed in a bucket between two points of its history: the feed of its events
//! (`buckets-api.md` §1.8) is built from these.
//!
//! Every batch is one commit whose parent is the commit before it, so a point of the
//! history is a commit (or the start, before the first one), and what changed since a
//! point is the difference of two trees: the tree at that point and the tree at the
//! head. Unchanged folders are the same tree objects in both, so the difference reads
//! only the folders on the paths of what changed, however large the bucket is.

use std::collections::HashMap;

use crate::bucket::BucketTotals;
use crate::commit::FileEntry;
use crate::id::{CommitId, ObjectId, RepoRef};
use crate::repos::{RepoError, Repos};
use crate::tree::{Folder, Item};

/// Folders with more entries than this are compared through the [`crate::Offload`].
const OFFLOAD_COMPARE: usize = 4096;

/// What happened to a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeOp {
    /// A file where there was none.
    Add,
    /// A file replaced (re-uploaded, even with the same content).
    Update,
    /// A file gone.
    Delete,
}

/// One file that changed: its path and, unless deleted, its facts now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    pub path: String,
    pub op: ChangeOp,
    pub entry: Option<FileEntry>,
}

/// A point of a bucket's history to replay changes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Since {
    /// Strictly after this commit (`None`: the start, before the first commit).
    Commit(Option<CommitId>),
    /// Changes made at or after this time, milliseconds since the Unix epoch.
    Time(u64),
}

/// Where a replay starts: a commit (`None`: the start, before the first one) and its
/// tree (`None`: empty).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReplayBase {
    pub commit: Option<CommitId>,
    pub tree: Option<ObjectId>,
}

/// Folders still to compare: the path of the folder (empty or ending in `/`), its tree
/// before and after.
type Pending = (String, Option<ObjectId>, Option<ObjectId>);

impl Repos {
    /// Where to replay changes from so as to reach `head` from `since`, in bucket storage
    /// `storage`, walking back at most `max` commits from `head`; `None` if `since` is not
    /// within reach (older, or not a point of this history at all).
    pub async fn replay_base(
        &self,
        storage: &RepoRef,
        head: Option<CommitId>,
        since: Since,
        max: usize,
    ) -> Result<Option<ReplayBase>, RepoError> {
        let mut at = head;
        for _ in 0..=max {
            let Some(id) = at else {
                // Walked past the first commit: the start is the base, if it was asked
                // for (by time, or as the point before the first commit).
                let start = matches!(since, Since::Time(_) | Since::Commit(None));
                return Ok(start.then_some(ReplayBase {
                    commit: None,
                    tree: None,
                }));
            };
            let commit = self.commit(storage, &id).await?.ok_or_else(|| {
                RepoError::Store(xet_cas::CasError::storage(format!(
                    "bucket storage {storage}: commit {id} is named but not stored"
                )))
            })?;
            let reached = match since {
                Since::Commit(c) => c == Some(id),
                // This commit changed the bucket before `t`: the base.
                Since::Time(t) => BucketTotals::decode(&commit.description)
                    .is_some_and(|totals| totals.updated_ms < t),
            };
            if reached {
                return Ok(Some(ReplayBase {
                    commit: Some(id),
                    tree: Some(commit.tree),
                }));
            }
            at = commit.parent;
        }
        Ok(None)
    }

    /// The files that differ between tree `from` and tree `to` (`None`: empty) of
    /// `storage`, in path order. Reads the folders that differ, a folder at a time, and
    /// compares large ones through the offload.
    pub async fn tree_changes(
        &self,
        storage: &RepoRef,
        from: Option<ObjectId>,
        to: Option<ObjectId>,
    ) -> Result<Vec<Change>, RepoError> {
        let mut out = Vec::new();
        let mut pending: Vec<Pending> = vec![(String::new(), from, to)];
        while let Some((prefix, old, new)) = pending.pop() {
            if old == new {
                continue;
            }
            let old = match old {
                Some(id) => Some(self.folder(storage, &id).await?),
                None => None,
            };
            let new = match new {
                Some(id) => Some(self.folder(storage, &id).await?),
                None => None,
            };
            let large = [&old, &new].iter().any(|f| {
                f.as_ref()
                    .is_some_and(|f| f.entries.len() > OFFLOAD_COMPARE)
            });
            let (changes, below) = if large {
                self.off(move || compare(&prefix, old.as_deref(), new.as_deref()))
                    .await?
            } else {
                compare(&prefix, old.as_deref(), new.as_deref())
            };
            out.extend(changes);
            pending.extend(below);
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }
}

/// The files that differ between two versions of one folder at `prefix`, and the
/// subfolders to compare next.
fn compare(
    prefix: &str,
    old: Option<&Folder>,
    new: Option<&Folder>,
) -> (Vec<Change>, Vec<Pending>) {
    let empty = Folder::default();
    let (old, new) = (old.unwrap_or(&empty), new.unwrap_or(&empty));
    let before: HashMap<&str, &Item> = old.entries.iter().map(|(n, i)| (n.as_str(), i)).collect();
    let mut changes = Vec::new();
    let mut below = Vec::new();
    let change = |name: &str, op, entry: Option<&FileEntry>| Change {
        path: format!("{prefix}{name}"),
        op,
        entry: entry.cloned(),
    };
    let folder = |name: &str| format!("{prefix}{name}/");
    for (name, item) in &new.entries {
        match (before.get(name.as_str()), item) {
            (None, Item::File(e)) => changes.push(change(name, ChangeOp::Add, Some(e))),
            (None, Item::Folder(id)) => below.push((folder(name), None, Some(*id))),
            (Some(Item::File(o)), Item::File(e)) => {
                if o != e {
                    changes.push(change(name, ChangeOp::Update, Some(e)));
                }
            }
            (Some(Item::Folder(o)), Item::Folder(id)) => {
                below.push((folder(name), Some(*o), Some(*id)));
            }
            (Some(Item::File(_)), Item::Folder(id)) => {
                changes.push(change(name, ChangeOp::Delete, None));
                below.push((folder(name), None, Some(*id)));
            }
            (Some(Item::Folder(o)), Item::File(e)) => {
                changes.push(change(name, ChangeOp::Add, Some(e)));
                below.push((folder(name), Some(*o), None));
            }
        }
    }
    let after: HashMap<&str, ()> = new.entries.iter().map(|(n, _)| (n.as_str(), ())).collect();
    for (name, item) in &old.entries {
        if after.contains_key(name.as_str()) {
            continue;
        }
        match item {
            Item::File(_) => changes.push(change(name, ChangeOp::Delete, None)),
            Item::Folder(o) => below.push((folder(name), Some(*o), None)),
        }
    }
    (changes, below)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::commit::FileMeta;

    fn file(n: u8, uploaded: u64) -> Item {
        Item::File(FileEntry::bucket(
            xet_hash::chunk_hash(&[n]),
            u64::from(n),
            FileMeta {
                mtime_ms: None,
                uploaded_ms: uploaded,
                content_type: None,
            },
        ))
    }

    fn folder(entries: Vec<(&str, Item)>) -> Folder {
        Folder {
            entries: entries
                .into_iter()
                .map(|(n, i)| (n.to_string(), i))
                .collect(),
        }
    }

    #[test]
    fn a_folder_compares_by_name_and_facts() {
        let (a, b) = (ObjectId::from_bytes([1; 20]), ObjectId::from_bytes([2; 20]));
        let old = folder(vec![
            ("same", file(1, 1)),
            ("reuploaded", file(2, 1)),
            ("gone", file(3, 1)),
            ("dir", Item::Folder(a)),
            ("was-file", file(4, 1)),
            ("was-dir", Item::Folder(b)),
        ]);
        let new = folder(vec![
            ("same", file(1, 1)),
            ("reuploaded", file(2, 2)),
            ("dir", Item::Folder(b)),
            ("was-file", Item::Folder(a)),
            ("was-dir", file(5, 1)),
            ("new", file(6, 1)),
        ]);
        let (changes, below) = compare("p/", Some(&old), Some(&new));
        let ops: Vec<(String, ChangeOp)> = changes.into_iter().map(|c| (c.path, c.op)).collect();
        assert_eq!(
            ops,
            [
                ("p/reuploaded".to_string(), ChangeOp::Update),
                ("p/was-file".into(), ChangeOp::Delete),
                ("p/was-dir".into(), ChangeOp::Add),
                ("p/new".into(), ChangeOp::Add),
                ("p/gone".into(), ChangeOp::Delete),
            ]
        );
        assert_eq!(
            below,
            [
                ("p/dir/".to_string(), Some(a), Some(b)),
                ("p/was-file/".into(), None, Some(a)),
                ("p/was-dir/".into(), Some(b), None),
            ]
        );
    }
}
