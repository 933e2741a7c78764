//! Commits and their trees: immutable, content-addressed objects.
//!
//! A commit is a full tree (every path with its Xet hash, sha256, size and git blob id),
//! its parent, and its message. Its id is the SHA-1 of its canonical JSON bytes, so the
//! same commit stored twice is one object and an id names exactly one tree.

use std::collections::BTreeMap;

use sha1::Digest as _;
use xet_hash::MerkleHash;

use crate::id::{CommitId, RepoPath, hex};

/// How a file was committed, which decides how the Hub API shows it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Storage {
    /// Sent inline in the commit (`file`); shown as a plain git file. The bytes are still
    /// kept in the CAS, chunked like any other file.
    Regular,
    /// Uploaded through Xet (`lfsFile`); shown with `lfs` and `xetHash`.
    Lfs,
}

/// One file of a tree.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct FileEntry {
    /// The Xet file hash of the content.
    pub xet_hash: MerkleHash,
    /// Plain SHA-256 of the content, lowercase hex.
    pub sha256: String,
    pub size: u64,
    pub storage: Storage,
    /// The git blob id the Hub shows as `oid`: of the content for regular files, of the
    /// LFS pointer for LFS files.
    pub git_oid: String,
}

impl FileEntry {
    /// The entry of a file with these facts; computes `git_oid` for LFS files (the pointer
    /// is derived from `sha256` and `size`). Regular files need `git_oid` of the content,
    /// which only the caller holding the bytes can compute ([`git_blob_oid`]).
    pub fn lfs(xet_hash: MerkleHash, sha256: String, size: u64) -> FileEntry {
        let pointer = lfs_pointer(&sha256, size);
        FileEntry {
            xet_hash,
            git_oid: git_blob_oid(pointer.as_bytes()),
            sha256,
            size,
            storage: Storage::Lfs,
        }
    }

    /// The entry of a regular file whose bytes are `content`, already stored under
    /// `xet_hash`.
    pub fn regular(xet_hash: MerkleHash, content: &[u8]) -> FileEntry {
        FileEntry {
            xet_hash,
            sha256: hex(&sha2::Sha256::digest(content)),
            size: content.len() as u64,
            storage: Storage::Regular,
            git_oid: git_blob_oid(content),
        }
    }

    /// Size of the LFS pointer text (the tree's `lfs.pointerSize`).
    pub fn pointer_size(&self) -> usize {
        lfs_pointer(&self.sha256, self.size).len()
    }
}

/// The git-lfs pointer file of content with this sha256 and size.
pub fn lfs_pointer(sha256: &str, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// The git blob id (SHA-1 of `blob <len>\0` + content), lowercase hex.
pub fn git_blob_oid(content: &[u8]) -> String {
    let mut h = sha1::Sha1::new();
    h.update(format!("blob {}\0", content.len()).as_bytes());
    h.update(content);
    hex(&h.finalize())
}

/// A commit object.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Commit {
    /// Format version of the stored object.
    pub version: u32,
    pub parent: Option<CommitId>,
    pub summary: String,
    pub description: String,
    /// Who made it (the token's user), as shown in commit listings.
    pub author: String,
    /// Seconds since the Unix epoch.
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

/// Why stored commit bytes could not be read back.
#[derive(Debug, thiserror::Error)]
#[error("commit object is not valid: {0}")]
pub struct CommitDecodeError(serde_json::Error);

impl Commit {
    pub const VERSION: u32 = 1;

    /// The canonical bytes (stored as they are) and the id they give.
    pub fn encode(&self) -> (CommitId, Vec<u8>) {
        // Field order is the struct's and `files` is sorted, so equal commits give equal
        // bytes.
        let bytes = serde_json::to_vec(self).expect("a commit always serializes");
        let id = CommitId::from_bytes(sha1::Sha1::digest(&bytes).into());
        (id, bytes)
    }

    /// Read stored bytes, checking that they are the commit `id` names.
    pub fn decode(id: &CommitId, bytes: &[u8]) -> Result<Commit, CommitDecodeError> {
        let c: Commit = serde_json::from_slice(bytes).map_err(CommitDecodeError)?;
        if sha1::Sha1::digest(bytes).as_slice() != id.as_bytes() {
            return Err(CommitDecodeError(serde::de::Error::custom(format!(
                "the bytes stored as commit {id} do not hash to it"
            ))));
        }
        Ok(c)
    }

    /// The files at or below `folder` (all files for `None`).
    pub fn files_under<'a>(
        &'a self,
        folder: Option<&'a RepoPath>,
    ) -> impl Iterator<Item = (&'a RepoPath, &'a FileEntry)> {
        self.files
            .iter()
            .filter(move |(p, _)| folder.is_none_or(|f| p.is_within(f)))
    }

    /// Whether `path` is a folder of this tree (some file lies below it).
    pub fn is_folder(&self, path: &RepoPath) -> bool {
        self.files
            .range(path.clone()..)
            .take_while(|(p, _)| p.as_str().starts_with(path.as_str()))
            .any(|(p, _)| p != path && p.is_within(path))
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

/// Apply `ops`, in order, to `files`. A file may not end up where a folder is or below a
/// file; a path may be named by at most one operation; an added path may not collide
/// with another of the tree on clients that fold case or Unicode normalization.
pub fn apply(
    files: &BTreeMap<RepoPath, FileEntry>,
    ops: &[Operation],
) -> Result<BTreeMap<RepoPath, FileEntry>, ApplyError> {
    let mut seen = std::collections::HashSet::new();
    let mut out = files.clone();
    for op in ops {
        let path = match op {
            Operation::Add { path, .. }
            | Operation::DeleteFile { path }
            | Operation::DeleteFolder { path } => path,
        };
        if !seen.insert(path) {
            return Err(ApplyError::Duplicate { path: path.clone() });
        }
        match op {
            Operation::Add { path, entry } => {
                out.insert(path.clone(), entry.clone());
            }
            Operation::DeleteFile { path } => {
                if out.remove(path).is_none() {
                    return Err(ApplyError::NoSuchFile { path: path.clone() });
                }
            }
            Operation::DeleteFolder { path } => {
                let before = out.len();
                out.retain(|p, _| !p.is_within(path));
                if out.len() == before {
                    return Err(ApplyError::NoSuchFolder { path: path.clone() });
                }
            }
        }
    }
    check_no_clash(&out)?;
    let added: Vec<&RepoPath> = ops
        .iter()
        .filter_map(|op| match op {
            Operation::Add { path, .. } => Some(path),
            _ => None,
        })
        .collect();
    check_no_collision(&out, &added)?;
    Ok(out)
}

/// A name as a client file system that folds case and Unicode normalization compares
/// it: NFC, then lower case (ASCII names skip the normalizer).
fn folded(name: &str) -> String {
    if name.is_ascii() {
        return name.to_ascii_lowercase();
    }
    icu_normalizer::ComposingNormalizerBorrowed::new_nfc()
        .normalize(name)
        .to_lowercase()
}

/// No file or folder an added path creates may be another of the tree but for case or
/// Unicode normalization (`README.md` and `readme.md`; `é` composed and decomposed;
/// folders `Data/` and `data/`). Collisions the tree already had are left alone: only
/// a commit that adds one is refused.
fn check_no_collision(
    files: &BTreeMap<RepoPath, FileEntry>,
    added: &[&RepoPath],
) -> Result<(), ApplyError> {
    if added.is_empty() {
        return Ok(());
    }
    let key = |path: &str| path.split('/').map(folded).collect::<Vec<_>>().join("/");
    // Every file and folder of the tree by its folded path, with each spelling of it.
    let mut spellings: std::collections::HashMap<String, std::collections::BTreeSet<&str>> =
        std::collections::HashMap::new();
    for p in files.keys() {
        for name in p.parents().chain(std::iter::once(p.as_str())) {
            spellings.entry(key(name)).or_default().insert(name);
        }
    }
    for new in added {
        for name in new.parents().chain(std::iter::once(new.as_str())) {
            let others = spellings.get(&key(name)).into_iter().flatten();
            if let Some(existing) = others.into_iter().find(|s| **s != name) {
                return Err(ApplyError::NameCollision {
                    new: name.to_string(),
                    existing: existing.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// No file path may also be a folder (`a` and `a/b` both files).
fn check_no_clash(files: &BTreeMap<RepoPath, FileEntry>) -> Result<(), ApplyError> {
    for p in files.keys() {
        for parent in p.parents() {
            if let Ok(pp) = RepoPath::parse(parent)
                && files.contains_key(&pp)
            {
                return Err(ApplyError::FileFolderClash {
                    path: parent.to_string(),
                });
            }
        }
    }
    Ok(())
}

/// A deterministic id for a folder of a tree (the Hub shows a git tree id; clients only
/// need it stable): SHA-1 over the sorted `path\0oid\n` of the files below it.
pub fn folder_oid<'a>(files: impl Iterator<Item = (&'a RepoPath, &'a FileEntry)>) -> String {
    let mut h = sha1::Sha1::new();
    for (p, e) in files {
        h.update(p.as_str().as_bytes());
        h.update(b"\0");
        h.update(e.git_oid.as_bytes());
        h.update(b"\n");
    }
    hex(&h.finalize())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RepoPath {
        RepoPath::parse(s).unwrap()
    }

    fn empty_commit() -> Commit {
        Commit {
            version: Commit::VERSION,
            parent: None,
            summary: "s".into(),
            description: String::new(),
            author: "u".into(),
            created_at: 1,
            files: BTreeMap::new(),
        }
    }

    fn entry(n: u8) -> FileEntry {
        FileEntry::regular(xet_hash::chunk_hash(&[n]), &[n])
    }

    #[test]
    fn git_ids_match_git() {
        // `git hash-object` of empty input and of "hello\n".
        assert_eq!(
            git_blob_oid(b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            git_blob_oid(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        let sha = "cd449473aa8b33c8d8d2e0a3d6b5a9e3bbfdbf8e6fae4c5d8f3f1f5b5c0a7e11";
        assert_eq!(
            FileEntry::lfs(MerkleHash::default(), sha.into(), 1048576).pointer_size(),
            132
        );
    }

    #[test]
    fn commit_ids_are_content_addresses() {
        let mut c = empty_commit();
        c.files.insert(p("b"), entry(2));
        c.files.insert(p("a"), entry(1));
        let (id, bytes) = c.encode();
        assert_eq!(Commit::decode(&id, &bytes).unwrap(), c);
        assert_eq!(c.clone().encode().0, id);
        let mut other = bytes.clone();
        other[10] ^= 1;
        assert!(Commit::decode(&id, &other).is_err());
    }

    #[test]
    fn stored_paths_git_refuses_are_left_out_and_others_fail() {
        let mut c = empty_commit();
        c.files.insert(p("sub/a.txt"), entry(1));
        let (_, bytes) = c.encode();
        // A tree stored before the rule: the same object with a planted `.git` file.
        let text = String::from_utf8(bytes).unwrap();
        let e = serde_json::to_string(&entry(2)).unwrap();
        for planted in ["sub/.git/config", "x/GIT~1/hooks/post-checkout", ".Git."] {
            let old = text.replacen("\"files\":{", &format!("\"files\":{{\"{planted}\":{e},"), 1);
            let id = CommitId::from_bytes(sha1::Sha1::digest(old.as_bytes()).into());
            let read = Commit::decode(&id, old.as_bytes()).unwrap();
            assert_eq!(read.files, c.files, "{planted}");
        }
        let broken = text.replacen("\"files\":{", &format!("\"files\":{{\"a/../b\":{e},"), 1);
        let id = CommitId::from_bytes(sha1::Sha1::digest(broken.as_bytes()).into());
        assert!(Commit::decode(&id, broken.as_bytes()).is_err());
    }

    #[test]
    fn operations_apply_in_order_and_refuse_clashes() {
        let mut base = BTreeMap::new();
        base.insert(p("a/x"), entry(1));
        base.insert(p("a/y"), entry(2));
        base.insert(p("b"), entry(3));
        let out = apply(
            &base,
            &[
                Operation::DeleteFolder { path: p("a") },
                Operation::Add {
                    path: p("c/d"),
                    entry: entry(4),
                },
            ],
        )
        .unwrap();
        assert_eq!(
            out.keys().map(|k| k.as_str()).collect::<Vec<_>>(),
            ["b", "c/d"]
        );
        assert!(matches!(
            apply(
                &base,
                &[Operation::Add {
                    path: p("b/z"),
                    entry: entry(5)
                }]
            ),
            Err(ApplyError::FileFolderClash { .. })
        ));
        assert!(matches!(
            apply(
                &base,
                &[Operation::Add {
                    path: p("a"),
                    entry: entry(5)
                }]
            ),
            Err(ApplyError::FileFolderClash { .. })
        ));
        assert!(matches!(
            apply(&base, &[Operation::DeleteFile { path: p("zz") }]),
            Err(ApplyError::NoSuchFile { .. })
        ));
        assert!(matches!(
            apply(&base, &[Operation::DeleteFolder { path: p("q") }]),
            Err(ApplyError::NoSuchFolder { .. })
        ));
        let twice = Operation::Add {
            path: p("n"),
            entry: entry(1),
        };
        assert!(matches!(
            apply(&base, &[twice.clone(), twice]),
            Err(ApplyError::Duplicate { .. })
        ));
    }

    #[test]
    fn names_one_client_would_merge_are_refused_when_added() {
        let mut base = BTreeMap::new();
        base.insert(p("readme.md"), entry(1));
        base.insert(p("Data/x.bin"), entry(2));
        base.insert(p("caf\u{e9}.txt"), entry(3));
        let add = |path: &str| Operation::Add {
            path: p(path),
            entry: entry(9),
        };
        for (new, existing) in [
            ("README.md", "readme.md"),
            ("data/y.bin", "Data"),
            ("DATA", "Data"),
            ("cafe\u{301}.txt", "caf\u{e9}.txt"),
            ("CAF\u{c9}.TXT", "caf\u{e9}.txt"),
        ] {
            match apply(&base, &[add(new)]) {
                Err(ApplyError::NameCollision {
                    new: n,
                    existing: e,
                }) => {
                    assert!(new.starts_with(&n) && e == existing, "{new}: {n} / {e}");
                }
                other => panic!("{new}: {other:?}"),
            }
        }
        // Two added paths that collide with each other.
        assert!(matches!(
            apply(&base, &[add("n/A.txt"), add("n/a.txt")]),
            Err(ApplyError::NameCollision { .. })
        ));
        // Replacing a file under its own name, and names that differ otherwise, are fine;
        // a collision the tree had before does not stop other commits.
        assert!(
            apply(
                &base,
                &[add("readme.md"), add("Data/z.bin"), add("readme.txt")]
            )
            .is_ok()
        );
        let mut old = base.clone();
        old.insert(p("README.md"), entry(4));
        assert!(apply(&old, &[add("other.txt")]).is_ok());
        // Deleting one of two spellings and adding the other in one commit is a rename.
        assert!(
            apply(
                &base,
                &[
                    Operation::DeleteFile {
                        path: p("readme.md")
                    },
                    add("README.md")
                ]
            )
            .is_ok()
        );
    }

    #[test]
    fn folders() {
        let mut c = Commit {
            version: 1,
            parent: None,
            summary: String::new(),
            description: String::new(),
            author: String::new(),
            created_at: 0,
            files: BTreeMap::new(),
        };
        c.files.insert(p("a.txt"), entry(1));
        c.files.insert(p("a/b"), entry(1));
        assert!(c.is_folder(&p("a")));
        assert!(!c.is_folder(&p("a.txt")));
        assert!(!c.is_folder(&p("a/b")));
    }
}
