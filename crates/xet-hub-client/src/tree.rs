//! Files of a repository as the tree listing describes them, checked: the path is a
//! valid repository path (it becomes a file name on this machine), hashes have their
//! form, and the sizes of an LFS entry agree.

use xet_hash::MerkleHash;
use xet_hub::api::TreeEntry;
use xet_hub::{NameError, RepoPath};

/// Why a listed entry is refused.
#[derive(Debug)]
pub enum EntryError {
    /// A path git refuses (`sub/.git/config`): written here, it could make the next `git`
    /// command in that folder run what the repository says.
    Unsafe(NameError),
    /// Anything else that does not hold together.
    Invalid(String),
}

impl From<String> for EntryError {
    fn from(why: String) -> Self {
        EntryError::Invalid(why)
    }
}

/// How a file's bytes are fetched and checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Content {
    /// In Xet: fetched from the CAS, checked by its Xet hash and sha256.
    Xet { hash: MerkleHash, sha256: String },
    /// LFS without Xet: fetched from `resolve`, checked by sha256.
    Lfs { sha256: String },
    /// A plain git file: fetched from `resolve`, checked by its git blob id.
    Git,
}

/// One file of a repository at a commit.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RemoteFile {
    pub path: RepoPath,
    pub size: u64,
    /// The tree's `oid`: the git blob id (of the LFS pointer for LFS files).
    pub git_oid: String,
    pub content: Content,
}

impl RemoteFile {
    /// The file of a tree entry; `Ok(None)` for a directory.
    pub fn from_entry(e: &TreeEntry) -> Result<Option<RemoteFile>, EntryError> {
        let TreeEntry::File {
            oid,
            path,
            size,
            lfs,
            xet_hash,
        } = e
        else {
            return Ok(None);
        };
        let path = RepoPath::parse(path).map_err(|e| match e {
            e @ NameError::GitPath { .. } => EntryError::Unsafe(e),
            e => EntryError::Invalid(e.to_string()),
        })?;
        if !is_hex(oid, 40) {
            return Err(format!("{path}: oid {oid:?} is not a git blob id").into());
        }
        let content = match (lfs, xet_hash) {
            (None, None) => Content::Git,
            (None, Some(_)) => {
                return Err(format!("{path}: a Xet hash without lfs facts").into());
            }
            (Some(l), x) => {
                if !is_hex(&l.oid, 64) {
                    return Err(format!("{path}: lfs.oid {:?} is not a sha256", l.oid).into());
                }
                if l.size != *size {
                    return Err(format!("{path}: size {size} but lfs.size {}", l.size).into());
                }
                let sha256 = l.oid.to_ascii_lowercase();
                match x {
                    None => Content::Lfs { sha256 },
                    Some(h) => Content::Xet {
                        hash: MerkleHash::from_hex(h)
                            .map_err(|_| format!("{path}: xetHash {h:?} is not a Xet hash"))?,
                        sha256,
                    },
                }
            }
        };
        Ok(Some(RemoteFile {
            path,
            size: *size,
            git_oid: oid.to_ascii_lowercase(),
            content,
        }))
    }

    /// The name of its blob in the HF cache: sha256 for LFS and Xet files, the git blob
    /// id for the others (what `ETag` / `X-Linked-Etag` say).
    pub fn etag(&self) -> &str {
        match &self.content {
            Content::Xet { sha256, .. } | Content::Lfs { sha256 } => sha256,
            Content::Git => &self.git_oid,
        }
    }

    pub fn sha256(&self) -> Option<&str> {
        match &self.content {
            Content::Xet { sha256, .. } | Content::Lfs { sha256 } => Some(sha256),
            Content::Git => None,
        }
    }

    pub fn xet_hash(&self) -> Option<MerkleHash> {
        match &self.content {
            Content::Xet { hash, .. } => Some(*hash),
            _ => None,
        }
    }
}

pub(crate) fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len && s.bytes().all(|b| b.is_ascii_hexdigit())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(json: &str) -> Vec<TreeEntry> {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn entries_of_a_real_listing() {
        let sha = "cd".repeat(32);
        let xet = "f8".repeat(32);
        let oid = "c9".repeat(20);
        let t = entries(&format!(
            r#"[{{"oid":"{oid}","path":"regression","size":0,"type":"directory"}},
            {{"lfs":{{"oid":"{sha}","pointerSize":132,"size":1048576}},"oid":"{oid}","path":"r/x.bin","size":1048576,"type":"file","xetHash":"{xet}"}},
            {{"lfs":{{"oid":"{sha}","pointerSize":132,"size":5}},"oid":"{oid}","path":"old.bin","size":5,"type":"file"}},
            {{"oid":"{oid}","path":"r/y.txt","size":186,"type":"file"}}]"#
        ));
        assert_eq!(RemoteFile::from_entry(&t[0]).unwrap(), None);
        let x = RemoteFile::from_entry(&t[1]).unwrap().unwrap();
        assert_eq!(x.etag(), sha);
        assert_eq!(x.xet_hash().unwrap().to_string().len(), 64);
        let l = RemoteFile::from_entry(&t[2]).unwrap().unwrap();
        assert_eq!(
            l.content,
            Content::Lfs {
                sha256: sha.clone()
            }
        );
        let g = RemoteFile::from_entry(&t[3]).unwrap().unwrap();
        assert_eq!((g.etag(), g.sha256(), g.size), (oid.as_str(), None, 186));
    }

    #[test]
    fn entries_that_would_be_unsafe_or_inconsistent_are_refused() {
        let sha = "cd".repeat(32);
        let oid = "c9".repeat(20);
        for bad in [
            format!(r#"{{"oid":"{oid}","path":"../etc/passwd","size":1,"type":"file"}}"#),
            format!(r#"{{"oid":"{oid}","path":"/abs","size":1,"type":"file"}}"#),
            r#"{"oid":"xyz","path":"a","size":1,"type":"file"}"#.to_string(),
            format!(
                r#"{{"lfs":{{"oid":"{sha}","pointerSize":1,"size":9}},"oid":"{oid}","path":"a","size":1,"type":"file"}}"#
            ),
            format!(
                r#"{{"lfs":{{"oid":"nothex","pointerSize":1,"size":1}},"oid":"{oid}","path":"a","size":1,"type":"file"}}"#
            ),
            format!(
                r#"{{"lfs":{{"oid":"{sha}","pointerSize":1,"size":1}},"oid":"{oid}","path":"a","size":1,"type":"file","xetHash":"zz"}}"#
            ),
            format!(r#"{{"oid":"{oid}","path":"a","size":1,"type":"file","xetHash":"{sha}"}}"#),
        ] {
            let e: TreeEntry = serde_json::from_str(&bad).unwrap();
            assert!(
                matches!(RemoteFile::from_entry(&e), Err(EntryError::Invalid(_))),
                "{bad}"
            );
        }
        for planted in [
            "sub/.git/config",
            ".GIT/hooks/x",
            "a/git~1/config",
            "a/.git./b",
        ] {
            let e = format!(r#"{{"oid":"{oid}","path":"{planted}","size":1,"type":"file"}}"#);
            let e: TreeEntry = serde_json::from_str(&e).unwrap();
            assert!(
                matches!(
                    RemoteFile::from_entry(&e),
                    Err(EntryError::Unsafe(NameError::GitPath { .. }))
                ),
                "{planted}"
            );
        }
    }
}
