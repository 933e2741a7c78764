//! Names: repository types and ids, revisions, paths in a repository, commit ids.
//!
//! Every name that arrives from a request or a command line is parsed here, once, into a
//! type that can only hold a valid value; storage keys and URLs are built from these types
//! only.

use std::fmt;

/// What a repository may not be called or hold; says which name and why.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum NameError {
    #[error("unknown repository type {0:?} (expected model, dataset or space)")]
    RepoType(String),
    #[error("invalid repository id {id:?}: {why}")]
    RepoId { id: String, why: &'static str },
    #[error("invalid revision {rev:?}: {why}")]
    Revision { rev: String, why: &'static str },
    #[error("invalid path {path:?}: {why}")]
    Path { path: String, why: &'static str },
    /// A component git refuses to check out (see [`git_reserved`]): a tree holding it could
    /// plant a `.git` folder, and with it commands, in a reader's checkout.
    #[error(
        "invalid path {path:?}: git refuses the component {component:?} (a spelling of .git); \
         it could plant git configuration, and commands, in a reader's folder"
    )]
    GitPath { path: String, component: String },
}

/// Code points HFS+ ignores when it compares names, so `.g\u{200c}it` opens `.git` there
/// (the list git's `is_hfs_dotgit` skips).
const HFS_IGNORABLE: [char; 16] = [
    '\u{200c}', '\u{200d}', '\u{200e}', '\u{200f}', '\u{202a}', '\u{202b}', '\u{202c}', '\u{202d}',
    '\u{202e}', '\u{206a}', '\u{206b}', '\u{206c}', '\u{206d}', '\u{206e}', '\u{206f}', '\u{feff}',
];

/// Whether git refuses `component` (one segment of a path, no `/`) in a tree it checks
/// out, by the rules of its `verify_path` with `core.protectNTFS` and `core.protectHFS`
/// on: `.git` in any case; on NTFS also followed by spaces and periods or by a stream
/// name after `:` (`.git.`, `.GIT `, `.git::$INDEX_ALLOCATION`), and its short name
/// `git~1` the same way; on HFS+ with ignorable code points anywhere (`.g\u{200c}it`).
/// Refused at any depth: `sub/.git/config` is as dangerous as `.git/config`.
pub fn git_reserved(component: &str) -> bool {
    // NTFS: the name ends at a stream separator; trailing spaces and periods are dropped.
    let name = component.split(':').next().unwrap_or_default().as_bytes();
    let ntfs = |stem: &[u8]| {
        name.len() >= stem.len()
            && name[..stem.len()].eq_ignore_ascii_case(stem)
            && name[stem.len()..].iter().all(|&b| b == b' ' || b == b'.')
    };
    if ntfs(b".git") || ntfs(b"git~1") {
        return true;
    }
    let mut hfs = component.chars().filter(|c| !HFS_IGNORABLE.contains(c));
    ['.', 'g', 'i', 't']
        .iter()
        .all(|want| hfs.next().is_some_and(|c| c.eq_ignore_ascii_case(want)))
        && hfs.next().is_none()
}

/// `model`, `dataset` or `space`; or `bucket`, a storage bucket, kept as a repository is
/// (see [`crate::bucket`]) but never reached through the repository API.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum RepoType {
    Model,
    Dataset,
    Space,
    Bucket,
}

impl RepoType {
    /// The repository kinds (not buckets).
    pub const ALL: [RepoType; 3] = [RepoType::Model, RepoType::Dataset, RepoType::Space];

    /// `model`, `dataset`, `space` (the `type` field of requests).
    pub fn as_str(self) -> &'static str {
        match self {
            RepoType::Model => "model",
            RepoType::Dataset => "dataset",
            RepoType::Space => "space",
            RepoType::Bucket => "bucket",
        }
    }

    /// The plural of API paths: `models`, `datasets`, `spaces`.
    pub fn plural(self) -> &'static str {
        match self {
            RepoType::Model => "models",
            RepoType::Dataset => "datasets",
            RepoType::Space => "spaces",
            RepoType::Bucket => "buckets",
        }
    }

    /// The prefix of file URLs: `""`, `datasets/`, `spaces/`.
    pub fn url_prefix(self) -> &'static str {
        match self {
            RepoType::Model => "",
            RepoType::Dataset => "datasets/",
            RepoType::Space => "spaces/",
            RepoType::Bucket => "buckets/",
        }
    }

    /// Parse the singular form (`model`); `None` and `""` mean model, as the Hub reads them.
    pub fn parse(s: Option<&str>) -> Result<RepoType, NameError> {
        match s.unwrap_or("model") {
            "" | "model" => Ok(RepoType::Model),
            "dataset" => Ok(RepoType::Dataset),
            "space" => Ok(RepoType::Space),
            other => Err(NameError::RepoType(other.to_string())),
        }
    }

    /// Any kind by its singular name, buckets included (stored records, minted tokens).
    pub fn from_name(s: &str) -> Option<RepoType> {
        [RepoType::Bucket]
            .into_iter()
            .chain(RepoType::ALL)
            .find(|t| t.as_str() == s)
    }

    /// Parse the plural of an API path (`models`).
    pub fn from_plural(s: &str) -> Option<RepoType> {
        RepoType::ALL.into_iter().find(|t| t.plural() == s)
    }
}

impl fmt::Display for RepoType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for RepoType {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(self.as_str())
    }
}

impl<'de> serde::Deserialize<'de> for RepoType {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RepoType::from_name(&s)
            .ok_or_else(|| serde::de::Error::custom(NameError::RepoType(s.to_string())))
    }
}

/// `namespace/name`, each segment as the Hub allows it: 1 to 96 characters of ASCII
/// letters, digits, `-`, `_` and `.`, starting with a letter or digit, without `--` or
/// `..`, not ending in `.` or `.git`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoId {
    namespace: String,
    name: String,
}

/// The namespace of [`RepoId::storage`] names: not a valid segment, so no name is one.
const STORAGE_NAMESPACE: &str = "-";

fn check_segment(seg: &str) -> Result<(), &'static str> {
    if seg.is_empty() {
        return Err("a segment is empty");
    }
    if seg.len() > 96 {
        return Err("a segment is longer than 96 characters");
    }
    if !seg
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
    {
        return Err("only ASCII letters, digits, '-', '_' and '.' are allowed");
    }
    if !seg.as_bytes()[0].is_ascii_alphanumeric() {
        return Err("a segment must start with a letter or a digit");
    }
    if seg.contains("--") || seg.contains("..") {
        return Err("'--' and '..' are not allowed");
    }
    if seg.ends_with('.') || seg.ends_with(".git") {
        return Err("a segment may not end with '.' or '.git'");
    }
    Ok(())
}

impl RepoId {
    pub fn new(namespace: &str, name: &str) -> Result<RepoId, NameError> {
        let id = || format!("{namespace}/{name}");
        check_segment(namespace).map_err(|why| NameError::RepoId { id: id(), why })?;
        check_segment(name).map_err(|why| NameError::RepoId { id: id(), why })?;
        Ok(RepoId {
            namespace: namespace.to_string(),
            name: name.to_string(),
        })
    }

    /// Parse `namespace/name`.
    pub fn parse(s: &str) -> Result<RepoId, NameError> {
        match s.split_once('/') {
            Some((ns, name)) if !name.contains('/') => RepoId::new(ns, name),
            _ => Err(NameError::RepoId {
                id: s.to_string(),
                why: "expected namespace/name",
            }),
        }
    }

    /// The storage name of a bucket kept apart from its name ([`crate::store::Home::Own`]):
    /// `-/` and the nonce in 16 hex digits. No repository or bucket name can be one (a
    /// segment never starts with `-`), so what is kept under it never mixes with what a
    /// name keeps, whatever names are created, moved or deleted.
    pub fn storage(nonce: u64) -> RepoId {
        RepoId {
            namespace: STORAGE_NAMESPACE.to_string(),
            name: format!("{nonce:016x}"),
        }
    }

    /// Whether this is a [`storage`](RepoId::storage) name rather than a repository's.
    pub fn is_storage(&self) -> bool {
        self.namespace == STORAGE_NAMESPACE
    }

    /// [`parse`](RepoId::parse), or a [`storage`](RepoId::storage) name: for names the
    /// server wrote itself (minted CAS tokens name a bucket's storage), never for a name
    /// a request gives.
    pub fn parse_stored(s: &str) -> Result<RepoId, NameError> {
        if let Some(hex) = s
            .strip_prefix(STORAGE_NAMESPACE)
            .and_then(|r| r.strip_prefix('/'))
            && hex.len() == 16
            && let Ok(nonce) = u64::from_str_radix(hex, 16)
            && hex == format!("{nonce:016x}")
        {
            return Ok(RepoId::storage(nonce));
        }
        RepoId::parse(s)
    }

    pub fn namespace(&self) -> &str {
        &self.namespace
    }

    pub fn name(&self) -> &str {
        &self.name
    }
}

impl fmt::Display for RepoId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

impl serde::Serialize for RepoId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for RepoId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RepoId::parse(&s).map_err(serde::de::Error::custom)
    }
}

/// A repository: its type and id.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoRef {
    pub kind: RepoType,
    pub id: RepoId,
}

impl RepoRef {
    pub fn new(kind: RepoType, id: RepoId) -> RepoRef {
        RepoRef { kind, id }
    }
}

impl fmt::Display for RepoRef {
    /// `org/name`, `datasets/org/name`, `spaces/org/name`: the form of file URLs.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}{}", self.kind.url_prefix(), self.id)
    }
}

/// A git object id: 40 lowercase hex digits, the SHA-1 of the object (commit, tree or
/// blob) with its git header.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectId([u8; 20]);

/// The id of a commit object.
pub type CommitId = ObjectId;

impl ObjectId {
    pub fn from_bytes(b: [u8; 20]) -> ObjectId {
        ObjectId(b)
    }

    pub fn as_bytes(&self) -> &[u8; 20] {
        &self.0
    }

    /// Parse 40 hex digits (either case).
    pub fn parse(s: &str) -> Option<ObjectId> {
        let v = hex_decode(s)?;
        <[u8; 20]>::try_from(v).ok().map(ObjectId)
    }
}

impl fmt::Display for ObjectId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl serde::Serialize for ObjectId {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for ObjectId {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        ObjectId::parse(&s).ok_or_else(|| serde::de::Error::custom("expected a 40-hex object id"))
    }
}

/// A SHA-256 of a file's content: the LFS `oid` the Hub shows and checks. Written as
/// 64 lowercase hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Sha256([u8; 32]);

impl Sha256 {
    pub fn from_bytes(b: [u8; 32]) -> Sha256 {
        Sha256(b)
    }

    /// The SHA-256 of `data`.
    pub fn of(data: &[u8]) -> Sha256 {
        use sha2::Digest as _;
        Sha256(sha2::Sha256::digest(data).into())
    }

    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }

    /// Parse 64 hex digits (either case).
    pub fn parse(s: &str) -> Option<Sha256> {
        if s.len() != 64 {
            return None;
        }
        let v = hex_decode(s)?;
        <[u8; 32]>::try_from(v).ok().map(Sha256)
    }
}

impl fmt::Display for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&hex(&self.0))
    }
}

impl fmt::Debug for Sha256 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Sha256({self})")
    }
}

impl serde::Serialize for Sha256 {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

impl<'de> serde::Deserialize<'de> for Sha256 {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        Sha256::parse(&s).ok_or_else(|| serde::de::Error::custom("expected a 64-hex sha256"))
    }
}

pub use xet_hash::hex::{decode as hex_decode, encode as hex};

/// A branch name, as git allows it (simplified): 1 to 255 bytes, no control characters,
/// spaces or any of `~^:?*[\`, no `..`, `//` or `@{`, not starting or ending with `/` or
/// `.`, not ending in `.lock`. `refs/heads/X` is read as `X`; other `refs/` names are
/// kept whole: the store keeps every ref under its name (a pull request `refs/pr/N`, a
/// tag `refs/tags/X`), and only [`is_plain`](BranchName::is_plain) ones are branches
/// people create and commit to.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct BranchName(String);

impl BranchName {
    pub const MAIN: &'static str = "main";

    pub fn main() -> BranchName {
        BranchName(Self::MAIN.to_string())
    }

    pub fn parse(s: &str) -> Result<BranchName, NameError> {
        let s = s.strip_prefix("refs/heads/").unwrap_or(s);
        let bad = |why| {
            Err(NameError::Revision {
                rev: s.to_string(),
                why,
            })
        };
        if s.is_empty() || s.len() > 255 {
            return bad("a branch name is 1 to 255 bytes");
        }
        if s.bytes()
            .any(|b| b.is_ascii_control() || b" ~^:?*[\\".contains(&b))
        {
            return bad("control characters, spaces and ~^:?*[\\ are not allowed");
        }
        if s.contains("..") || s.contains("//") || s.contains("@{") || s == "@" {
            return bad("'..', '//' and '@{' are not allowed");
        }
        if s.starts_with(['/', '.']) || s.ends_with(['/', '.']) || s.ends_with(".lock") {
            return bad("may not start or end with '/' or '.', or end with '.lock'");
        }
        if s.split('/').any(|seg| seg.starts_with('.')) {
            return bad("no segment may start with '.'");
        }
        // Names that would print as another revision: `refs/heads/x` reads as branch x,
        // 40 hex digits as a commit id.
        if s.starts_with("refs/heads/") {
            return bad("a branch name may not itself start with refs/heads/");
        }
        if s.len() == 40 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
            return bad("40 hex digits name a commit, not a branch");
        }
        Ok(BranchName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether this names a branch people commit to and create: not a ref under
    /// `refs/` (pull requests `refs/pr/N`, tags `refs/tags/X`), which only their own
    /// routes make.
    pub fn is_plain(&self) -> bool {
        !self.0.starts_with("refs/")
    }

    /// The pull request this ref is (`refs/pr/N`), if it is one.
    pub fn pull_request(&self) -> Option<u64> {
        let n = self.0.strip_prefix("refs/pr/")?;
        if n.is_empty()
            || n.len() > 9
            || !n.bytes().all(|b| b.is_ascii_digit())
            || n.starts_with('0')
        {
            return None;
        }
        n.parse().ok()
    }

    /// The ref of pull request `n`: `refs/pr/N`.
    pub fn for_pull_request(n: u64) -> BranchName {
        BranchName(format!("refs/pr/{n}"))
    }

    /// The tag this ref is (`refs/tags/X`), if it is one.
    pub fn tag(&self) -> Option<&str> {
        self.0.strip_prefix("refs/tags/")
    }
}

/// A tag name: the rules of a [`BranchName`], `refs/tags/X` read as `X`, and no other
/// `refs/` prefix. Kept by the store as the ref `refs/tags/X` ([`TagName::as_ref_name`]),
/// beside the branches, so a tag moves, and is deleted, as a branch does.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct TagName(String);

impl TagName {
    pub fn parse(s: &str) -> Result<TagName, NameError> {
        let s = s.strip_prefix("refs/tags/").unwrap_or(s);
        let b = BranchName::parse(s).map_err(|e| match e {
            NameError::Revision { why, .. } => NameError::Revision {
                rev: s.to_string(),
                why: if why.starts_with("a branch") {
                    "a tag name is 1 to 255 bytes"
                } else {
                    why
                },
            },
            other => other,
        })?;
        if !b.is_plain() || b.as_str() != s {
            return Err(NameError::Revision {
                rev: s.to_string(),
                why: "a tag name may not start with refs/",
            });
        }
        Ok(TagName(s.to_string()))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The branch of the same name (which may not exist beside the tag).
    pub fn as_branch_name(&self) -> BranchName {
        BranchName(self.0.clone())
    }

    /// The ref the store keeps this tag as: `refs/tags/X`.
    pub fn as_ref_name(&self) -> BranchName {
        BranchName(format!("refs/tags/{}", self.0))
    }
}

impl fmt::Display for TagName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for BranchName {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for BranchName {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        BranchName::parse(&s).map_err(serde::de::Error::custom)
    }
}

impl fmt::Display for BranchName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// What a `{rev}` in a URL names: a commit (40 hex digits) or a branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Revision {
    Commit(CommitId),
    Branch(BranchName),
}

impl Revision {
    /// Parse an already percent-decoded revision. 40 hex digits are a commit id.
    pub fn parse(s: &str) -> Result<Revision, NameError> {
        if s.len() == 40
            && let Some(c) = CommitId::parse(s)
        {
            return Ok(Revision::Commit(c));
        }
        BranchName::parse(s).map(Revision::Branch)
    }
}

impl fmt::Display for Revision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Revision::Commit(c) => c.fmt(f),
            Revision::Branch(b) => b.fmt(f),
        }
    }
}

/// A file's path in a repository: `/`-separated, relative, UTF-8, at most 4096 bytes; no
/// empty, `.` or `..` segment, no control character or backslash, and no component git
/// refuses ([`git_reserved`]) at any depth.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct RepoPath(String);

impl RepoPath {
    pub fn parse(s: &str) -> Result<RepoPath, NameError> {
        let bad = |why| {
            Err(NameError::Path {
                path: s.to_string(),
                why,
            })
        };
        if s.is_empty() {
            return bad("the path is empty");
        }
        if s.len() > 4096 {
            return bad("the path is longer than 4096 bytes");
        }
        if s.starts_with('/') {
            return bad("the path is absolute (starts with '/')");
        }
        if s.chars().any(|c| c.is_control() || c == '\\') {
            return bad("control characters and '\\' are not allowed");
        }
        for seg in s.split('/') {
            match seg {
                "" => return bad("the path has an empty segment ('//' or a trailing '/')"),
                "." | ".." => return bad("'.' and '..' segments are not allowed"),
                _ if git_reserved(seg) => {
                    return Err(NameError::GitPath {
                        path: s.to_string(),
                        component: seg.to_string(),
                    });
                }
                _ => {}
            }
        }
        Ok(RepoPath(s.to_string()))
    }

    /// A folder prefix as `deletedFolder` and `/tree/{rev}/{path}` name it: the same rules,
    /// with one trailing `/` allowed (and dropped).
    pub fn parse_folder(s: &str) -> Result<RepoPath, NameError> {
        RepoPath::parse(s.strip_suffix('/').unwrap_or(s))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether `self` is `folder` or lies below it.
    pub fn is_within(&self, folder: &RepoPath) -> bool {
        self.0 == folder.0
            || (self.0.starts_with(&folder.0) && self.0.as_bytes()[folder.0.len()] == b'/')
    }

    /// The components of this path, outermost first (`a/b/c` → `a`, `b`, `c`).
    pub fn components(&self) -> impl Iterator<Item = &str> {
        self.0.split('/')
    }

    /// The last component (`a/b/c` → `c`).
    pub fn file_name(&self) -> &str {
        self.0.rsplit('/').next().unwrap_or(&self.0)
    }

    /// The folders containing this path, outermost first (`a/b/c` → `a`, `a/b`).
    pub fn parents(&self) -> impl Iterator<Item = &str> {
        self.0.match_indices('/').map(move |(i, _)| &self.0[..i])
    }
}

impl fmt::Display for RepoPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl serde::Serialize for RepoPath {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.0)
    }
}

impl<'de> serde::Deserialize<'de> for RepoPath {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        RepoPath::parse(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sha256_is_64_hex_either_case_written_lowercase() {
        let s = Sha256::of(b"");
        let text = s.to_string();
        assert_eq!(
            text,
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"
        );
        assert_eq!(Sha256::parse(&text.to_uppercase()), Some(s));
        for bad in ["", &text[1..], &format!("{text}0"), &text.replace('e', "g")] {
            assert_eq!(Sha256::parse(bad), None, "{bad:?}");
        }
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(json, format!("\"{text}\""));
        assert_eq!(serde_json::from_str::<Sha256>(&json).unwrap(), s);
        assert!(serde_json::from_str::<Sha256>("\"ab\"").is_err());
    }

    #[test]
    fn repo_records_keep_their_written_form() {
        // What every store so far wrote: `kind` and `id` as strings.
        let json =
            r#"{"kind":"dataset","id":"org/data","private":true,"owner":"a","created_at":1}"#;
        let r: crate::RepoRecord = serde_json::from_str(json).unwrap();
        assert_eq!(r.kind, RepoType::Dataset);
        assert_eq!(r.id, RepoId::parse("org/data").unwrap());
        assert_eq!(serde_json::to_string(&r).unwrap(), json);
        for bad in [
            json.replace("dataset", "repo"),
            json.replace("org/data", "org/da..ta"),
        ] {
            assert!(
                serde_json::from_str::<crate::RepoRecord>(&bad).is_err(),
                "{bad}"
            );
        }
    }

    #[test]
    fn repo_ids() {
        assert!(RepoId::parse("org/model-1.5_b").is_ok());
        for bad in [
            "org", "org/", "/x", "a/b/c", "o/-x", "o/a--b", "o/a..b", "o/x.git", "o/x.", "o/é",
            "o/a b",
        ] {
            assert!(RepoId::parse(bad).is_err(), "{bad}");
        }
        assert!(RepoId::parse(&format!("o/{}", "a".repeat(97))).is_err());
    }

    #[test]
    fn storage_names_are_no_repository_names() {
        let s = RepoId::storage(0xab);
        assert_eq!(s.to_string(), "-/00000000000000ab");
        assert!(s.is_storage() && !RepoId::parse("o/x").unwrap().is_storage());
        assert!(
            RepoId::parse(&s.to_string()).is_err(),
            "a request cannot name it"
        );
        assert_eq!(RepoId::parse_stored(&s.to_string()).unwrap(), s);
        assert_eq!(
            RepoId::parse_stored("org/x").unwrap(),
            RepoId::parse("org/x").unwrap()
        );
        for bad in ["-/ab", "-/00000000000000AB", "-/00000000000000abc", "-/x"] {
            assert!(RepoId::parse_stored(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn paths() {
        for ok in ["a", "a/b.bin", "dir/.hidden", "a b/ü.txt", ".gitattributes"] {
            assert!(RepoPath::parse(ok).is_ok(), "{ok}");
        }
        for bad in [
            "", "/a", "a/", "a//b", "./a", "a/../b", "..", "a\\b", "a\nb",
        ] {
            assert!(RepoPath::parse(bad).is_err(), "{bad:?}");
        }
        for (bad, component) in [
            (".git", ".git"),
            (".git/config", ".git"),
            ("sub/.git/config", ".git"),
            ("a/b/.GIT/hooks/pre-commit", ".GIT"),
            ("a/.Git", ".Git"),
        ] {
            assert_eq!(
                RepoPath::parse(bad),
                Err(NameError::GitPath {
                    path: bad.into(),
                    component: component.into()
                }),
                "{bad:?}"
            );
        }
        assert_eq!(RepoPath::parse_folder("logs/").unwrap().as_str(), "logs");
        let p = RepoPath::parse("a/b/c").unwrap();
        assert_eq!(p.parents().collect::<Vec<_>>(), ["a", "a/b"]);
        assert!(p.is_within(&RepoPath::parse("a/b").unwrap()));
        assert!(!p.is_within(&RepoPath::parse("a/bc").unwrap()));
        assert!(
            !RepoPath::parse("a/bc")
                .unwrap()
                .is_within(&RepoPath::parse("a/b").unwrap())
        );
    }

    #[test]
    fn git_reserved_components_follow_verify_path() {
        for bad in [
            ".git",
            ".GIT",
            ".gIt",
            ".git.",
            ".git..",
            ".git ",
            ".git . .",
            ".git:",
            ".git::$INDEX_ALLOCATION",
            ".GIT:stream",
            "git~1",
            "GIT~1",
            "git~1.",
            "git~1 ",
            "git~1::$DATA",
            ".g\u{200c}it",
            "\u{feff}.git",
            ".git\u{200d}",
            ".\u{202e}G\u{206f}I\u{200e}T",
        ] {
            assert!(git_reserved(bad), "{bad:?}");
            assert!(
                RepoPath::parse(&format!("sub/{bad}/config")).is_err(),
                "{bad:?}"
            );
        }
        for ok in [
            ".gitattributes",
            ".gitignore",
            ".gitmodules",
            ".git-blame-ignore-revs",
            "git",
            ".gi",
            "a.git",
            ".git_",
            ".gitx",
            ".git.x",
            ".git x",
            "git~2",
            "git~10",
            "xgit~1",
            "git~1x",
            ".g\u{00ef}t",
            ".g\u{200b}it",
            "..git",
            "...",
            "",
        ] {
            assert!(!git_reserved(ok), "{ok:?}");
        }
    }

    #[test]
    fn revisions() {
        let c = "0123456789abcdef0123456789abcdef01234567";
        assert!(matches!(Revision::parse(c), Ok(Revision::Commit(_))));
        assert_eq!(
            Revision::parse("refs/heads/dev").unwrap(),
            Revision::Branch(BranchName::parse("dev").unwrap())
        );
        assert!(matches!(
            Revision::parse("refs/pr/1"),
            Ok(Revision::Branch(_))
        ));
        for bad in [
            "",
            "a..b",
            "a b",
            "/a",
            "a/",
            "x.lock",
            "a:b",
            "@",
            "a/.b",
            "refs/heads/refs/heads/dev",
        ] {
            assert!(Revision::parse(bad).is_err(), "{bad}");
        }
        // A branch name prints back to a revision that parses to it.
        assert!(BranchName::parse(&format!("refs/heads/{c}")).is_err());
        for ok in ["main", "refs/heads/dev", "refs/pr/1", "feature/x", "v1.0"] {
            let r = Revision::parse(ok).unwrap();
            assert_eq!(Revision::parse(&r.to_string()).unwrap(), r, "{ok}");
        }
        assert_eq!(CommitId::parse(c).unwrap().to_string(), c);
        assert_eq!(CommitId::parse(&c.to_uppercase()).unwrap().to_string(), c);
    }
}
