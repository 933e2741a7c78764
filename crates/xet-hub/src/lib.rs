//! The Hugging Face Hub side of `xet`, as a contract shared by the server (`xet serve`'s
//! Hub API) and the client (`hf://` addresses):
//!
//! - [`id`]: repository types and ids, revisions, paths, commit ids — parsed once,
//!   strictly, so nothing taken from a request reaches a storage key or a URL unchecked;
//! - [`git`]: git's commit and tree objects, byte for byte, and their SHA-1 ids;
//! - [`commit`]: commits, the files of their trees, and the operations a commit applies;
//! - [`tree`]: one git tree per folder with its files' facts, and applying operations to
//!   the folders a commit passes through;
//! - [`api`]: the JSON and NDJSON of the Hub API, its headers and URL forms
//!   (`hub-api.md`);
//! - [`mode`]: which files go to Xet and which inline;
//! - [`store`] and [`repos`]: the repository-store contract and the operations over it
//!   (create, resolve, commit by compare-and-swap, branches and tags, history,
//!   super-squash, change a record);
//! - [`discussion`]: pull requests (`refs/pr/N` and their discussion records), merged
//!   by applying what they changed onto their base;
//! - [`bucket`] and [`bucket_changes`]: storage buckets (batches, moves) and what changed
//!   between two points of a bucket's history (its events feed);
//! - [`time`]: RFC 3339 times to and from milliseconds.
//!
//! No transport and no runtime: the server and the client bring theirs.

pub mod api;
pub mod bucket;
pub mod bucket_changes;
pub mod commit;
pub mod commit_body;
pub mod discussion;
pub mod git;
pub mod id;
pub mod mode;
pub mod repos;
pub mod sse;
pub mod store;
pub mod time;
pub mod tree;

pub use bucket::{BatchOutcome, BucketState, BucketTotals};
pub use bucket_changes::{Change, ChangeOp, ReplayBase, Since};
pub use commit::{Commit, FileEntry, FileMeta, Operation, Storage};
pub use id::{
    BranchName, CommitId, NameError, ObjectId, RepoId, RepoPath, RepoRef, RepoType, Revision,
    Sha256, TagName, git_reserved,
};
pub use repos::{CommitMeta, Committed, Listed, Offload, Page, RepoError, Repos};
pub use store::{BranchHead, Home, RecordHead, RepoObject, RepoRecord, RepoStore, StorageHolder};
pub use tree::{Applied, Folder, Item};
