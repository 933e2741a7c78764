//! Commits, the files of their trees, and the operations a commit applies.
//!
//! A commit is a git commit object ([`crate::git`]) naming a root tree; each folder is a
//! git tree, shared between commits that do not change it, with the facts git does not
//! keep (a file's Xet hash, sha256 and size) beside it ([`crate::tree`]). Stores written
//! before trees were git trees hold each commit as one JSON object with its full tree
//! ([`LegacyCommit`]); those are read as they are and their trees written out as git
//! trees the first time they are read.

use std::collections::BTreeMap;

use sha1::Digest as _;
use xet_hash::MerkleHash;

use crate::git::{GitCommit, Signature};
pub use crate::git::{git_blob_oid, lfs_pointer};
use crate::id::{CommitId, ObjectId, RepoPath, Sha256};

/// How a file was committed, which decides how the Hub API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// Sent inline in the commit (`file`); shown as a plain git file. The bytes are still
    /// kept in the CAS, chunked like any other file.
    Regular,
    /// Uploaded through Xet (`lfsFile`); shown with `lfs` and `xetHash`.
    Lfs,
    /// A file of a storage bucket: no git blob, no sha256 (clients upload bucket files
    /// without one); its facts are in [`FileMeta`].
    Bucket,
}

/// What a bucket keeps of a file besides its content: the times and type the client and
/// the server gave it. Empty for repository files.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileMeta {
    /// The client's modification time, milliseconds since the Unix epoch.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mtime_ms: Option<i64>,
    /// When the server last stored it, milliseconds since the Unix epoch.
    #[serde(default)]
    pub uploaded_ms: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content_type: Option<String>,
}

impl FileMeta {
    pub fn is_empty(&self) -> bool {
        *self == FileMeta::default()
    }
}

/// One file of a tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileEntry {
    /// The Xet file hash of the content.
    pub xet_hash: MerkleHash,
    /// Plain SHA-256 of the content.
    pub sha256: Sha256,
    pub size: u64,
    pub storage: Storage,
    /// The git blob id the Hub shows as `oid`: of the content for regular files, of the
    /// LFS pointer for LFS files, of [`bucket_pointer`] for bucket files (so that a tree's
    /// id changes whenever any fact of a file in it does).
    pub git_oid: ObjectId,
    #[serde(default, skip_serializing_if = "FileMeta::is_empty")]
    pub meta: FileMeta,
}

impl FileEntry {
    /// The entry of a file with these facts; computes `git_oid` for LFS files (the pointer
    /// is derived from `sha256` and `size`). Regular files need `git_oid` of the content,
    /// which only the caller holding the bytes can compute ([`git_blob_oid`]).
    pub fn lfs(xet_hash: MerkleHash, sha256: Sha256, size: u64) -> FileEntry {
        let pointer = lfs_pointer(&sha256, size);
        FileEntry {
            xet_hash,
            git_oid: crate::git::object_id("blob", pointer.as_bytes()),
            sha256,
            size,
            storage: Storage::Lfs,
            meta: FileMeta::default(),
        }
    }

    /// The entry of a bucket file: its content by Xet hash and size, and its facts. It
    /// has no sha256 (all zeros).
    pub fn bucket(xet_hash: MerkleHash, size: u64, meta: FileMeta) -> FileEntry {
        FileEntry {
            xet_hash,
            sha256: Sha256::from_bytes([0; 32]),
            size,
            storage: Storage::Bucket,
            git_oid: crate::git::object_id(
                "blob",
                bucket_pointer(&xet_hash, size, &meta).as_bytes(),
            ),
            meta,
        }
    }

    /// The entry of a regular file whose bytes are `content`, already stored under
    /// `xet_hash`.
    pub fn regular(xet_hash: MerkleHash, content: &[u8]) -> FileEntry {
        FileEntry {
            xet_hash,
            sha256: Sha256::of(content),
            size: content.len() as u64,
            storage: Storage::Regular,
            git_oid: crate::git::object_id("blob", content),
            meta: FileMeta::default(),
        }
    }

    /// Size of the LFS pointer text (the tree's `lfs.pointerSize`).
    pub fn pointer_size(&self) -> usize {
        lfs_pointer(&self.sha256, self.size).len()
    }
}

/// The text whose git blob id a bucket file's tree entry carries: every fact of the file,
/// one per line.
pub fn bucket_pointer(xet_hash: &MerkleHash, size: u64, meta: &FileMeta) -> String {
    let mtime = meta.mtime_ms.map_or(String::new(), |m| m.to_string());
    let ct = meta.content_type.as_deref().unwrap_or("");
    format!(
        "xet-bucket-file 1\nxet {xet_hash}\nsize {size}\nmtime {mtime}\nuploaded {}\ncontent-type {ct}\n",
        meta.uploaded_ms
    )
}

/// A commit as the Hub shows it: its root tree, first parent and message, who made it
/// and when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Commit {
    pub tree: ObjectId,
    pub parent: Option<CommitId>,
    pub summary: String,
    pub description: String,
    /// Who made it (the token's user), as shown in commit listings.
    pub author: String,
    /// Seconds since the Unix epoch.
    pub created_at: u64,
}

impl Commit {
    /// The git commit object: author and committer are the Hub user, at `created_at`.
    pub fn encode(&self) -> (CommitId, Vec<u8>) {
        let who = Signature::user(&self.author, self.created_at);
        let git = GitCommit {
            tree: self.tree,
            parents: self.parent.into_iter().collect(),
            author: who.clone(),
            committer: who,
            message: GitCommit::message(&self.summary, &self.description),
        };
        crate::git::frame("commit", &git.encode())
    }

    /// Read stored bytes, checking that they are the commit `id` names. A legacy JSON
    /// commit is [`Stored::Legacy`]: its tree must be written out as git trees first.
    pub fn decode(id: &CommitId, bytes: &[u8]) -> Result<Stored, CommitDecodeError> {
        if bytes.first() == Some(&b'{') {
            return LegacyCommit::decode(id, bytes).map(Stored::Legacy);
        }
        let body = crate::git::unframe("commit", id, bytes).map_err(CommitDecodeError::Git)?;
        let git = GitCommit::decode(body).map_err(CommitDecodeError::Git)?;
        let (summary, description) = git.summary_and_description();
        Ok(Stored::Git(Commit {
            tree: git.tree,
            parent: git.parents.first().copied(),
            summary,
            description,
            // As `encode` would write it, so that a commit read back encodes to itself.
            author: Signature::user(&git.author.name, 0).name,
            created_at: git.committer.time,
        }))
    }
}

/// A stored commit as read.
#[derive(Debug)]
pub enum Stored {
    Git(Commit),
    Legacy(LegacyCommit),
}

/// Why stored commit bytes could not be read back.
#[derive(Debug, thiserror::Error)]
pub enum CommitDecodeError {
    #[error("commit object is not valid: {0}")]
    Git(crate::git::GitError),
    #[error("legacy commit object is not valid: {0}")]
    Legacy(serde_json::Error),
}

/// A commit as stores written before git trees kept it: one JSON object with its full
/// tree, named by the SHA-1 of its bytes. Read only.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LegacyCommit {
    pub version: u32,
    pub parent: Option<CommitId>,
    pub summary: String,
    pub description: String,
    pub author: String,
    pub created_at: u64,
    /// Every file of the tree, by path.
    #[serde(deserialize_with = "stored_files")]
    pub files: BTreeMap<RepoPath, FileEntry>,
}

/// The files of a stored tree. A tree written before paths were checked against git's
/// rules may hold one git refuses (`sub/.git/config`): it is left out here, so it is
/// never listed, served, or carried into a later commit, while the rest of the
/// repository stays readable. Any other invalid path makes the object invalid.
fn stored_files<'de, D: serde::Deserializer<'de>>(
    d: D,
) -> Result<BTreeMap<RepoPath, FileEntry>, D::Error> {
    let raw = <BTreeMap<String, FileEntry> as serde::Deserialize>::deserialize(d)?;
    let mut files = BTreeMap::new();
    for (path, entry) in raw {
        match RepoPath::parse(&path) {
            Ok(p) => {
                files.insert(p, entry);
            }
            Err(crate::NameError::GitPath { .. }) => {}
            Err(e) => return Err(serde::de::Error::custom(e)),
        }
    }
    Ok(files)
}

impl LegacyCommit {
    /// The bytes such a commit was stored as, and their id (for tests of old stores).
    pub fn encode(&self) -> (CommitId, Vec<u8>) {
        let bytes = serde_json::to_vec(self).expect("a commit always serializes");
        let id = CommitId::from_bytes(sha1::Sha1::digest(&bytes).into());
        (id, bytes)
    }

    fn decode(id: &CommitId, bytes: &[u8]) -> Result<LegacyCommit, CommitDecodeError> {
        let c: LegacyCommit = serde_json::from_slice(bytes).map_err(CommitDecodeError::Legacy)?;
        if sha1::Sha1::digest(bytes).as_slice() != id.as_bytes() {
            return Err(CommitDecodeError::Legacy(serde::de::Error::custom(
                format!("the bytes stored as commit {id} do not hash to it"),
            )));
        }
        Ok(c)
    }

    /// The commit with `tree`, its files written out as git trees.
    pub fn with_tree(&self, tree: ObjectId) -> Commit {
        Commit {
            tree,
            parent: self.parent,
            summary: self.summary.clone(),
            description: self.description.clone(),
            author: self.author.clone(),
            created_at: self.created_at,
        }
    }
}

/// One change of a commit, with the file facts already resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    Add { path: RepoPath, entry: FileEntry },
    DeleteFile { path: RepoPath },
    DeleteFolder { path: RepoPath },
}

/// Why a set of operations cannot apply to a tree.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ApplyError {
    #[error("cannot delete {path}: no such file in the tree")]
    NoSuchFile { path: RepoPath },
    #[error("cannot delete folder {path}: no file lies below it")]
    NoSuchFolder { path: RepoPath },
    #[error("{path} is both a file and a folder in this commit's tree")]
    FileFolderClash { path: String },
    #[error("{path} appears more than once in the commit")]
    Duplicate { path: RepoPath },
    /// Two names one client file system takes for the same (macOS and Windows fold case;
    /// macOS also folds Unicode normalization): a download there would keep only one.
    #[error(
        "{new} and {existing} differ only in case or Unicode normalization, so they would be \
         one file on macOS or Windows: rename one of them"
    )]
    NameCollision { new: String, existing: String },
}

/// A name as a client file system that folds case and Unicode normalization compares
/// it: NFC, then lower case (ASCII names skip the normalizer).
pub(crate) fn folded(name: &str) -> String {
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    icu_normalizer::ComposingNormalizerBorrowed::new_nfc()
        .normalize(name)
        .to_lowercase()
}
