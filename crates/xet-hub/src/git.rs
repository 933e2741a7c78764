//! Git's object formats, as the Hub stores repositories: commits and trees byte for byte
//! as git writes them, named by git's SHA-1 ids, so an `oid` is exactly what the Hub and
//! `git` give and the objects are ready to be served to `git` itself.
//!
//! An object is `<kind> <decimal length>\0<body>` and its id is the SHA-1 of those bytes.
//! The store keeps commits and trees whole, header included. Blobs are not stored as
//! objects: a regular file's blob is its content (in the CAS) and an LFS/Xet file's blob
//! is its pointer, derived from its sha256 and size; a tree names either by its git id.
//!
//! Parsing takes untrusted bytes in one pass, checking each length before using it.

use sha1::Digest as _;

use crate::id::{ObjectId, RepoPath};

/// Why stored bytes are not the git object they should be.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("not a valid git {kind} object: {why}")]
pub struct GitError {
    pub kind: &'static str,
    pub why: String,
}

fn bad<T>(kind: &'static str, why: impl Into<String>) -> Result<T, GitError> {
    Err(GitError {
        kind,
        why: why.into(),
    })
}

/// The git id of an object of `kind` with this body.
pub fn object_id(kind: &str, body: &[u8]) -> ObjectId {
    let mut h = sha1::Sha1::new();
    h.update(format!("{kind} {}\0", body.len()).as_bytes());
    h.update(body);
    ObjectId::from_bytes(h.finalize().into())
}

/// The whole object (header and body) and its id.
pub fn frame(kind: &str, body: &[u8]) -> (ObjectId, Vec<u8>) {
    let mut out = format!("{kind} {}\0", body.len()).into_bytes();
    out.extend_from_slice(body);
    let id = ObjectId::from_bytes(sha1::Sha1::digest(&out).into());
    (id, out)
}

/// The body of a whole object of `kind`, checking its header and that it hashes to `id`.
pub fn unframe<'a>(
    kind: &'static str,
    id: &ObjectId,
    bytes: &'a [u8],
) -> Result<&'a [u8], GitError> {
    let Some(nul) = bytes.iter().take(32).position(|&b| b == 0) else {
        return bad(kind, "no object header");
    };
    let header = &bytes[..nul];
    let body = &bytes[nul + 1..];
    let expected = format!("{kind} {}", body.len());
    if header != expected.as_bytes() {
        return bad(
            kind,
            format!(
                "the header is {:?}, expected {expected:?}",
                String::from_utf8_lossy(header)
            ),
        );
    }
    if sha1::Sha1::digest(bytes).as_slice() != id.as_bytes() {
        return bad(kind, format!("the bytes stored as {id} do not hash to it"));
    }
    Ok(body)
}

/// The git blob id of content given in pieces (its length known first, as git's header
/// needs it).
pub struct BlobHasher(sha1::Sha1);

impl BlobHasher {
    pub fn new(size: u64) -> BlobHasher {
        let mut h = sha1::Sha1::new();
        h.update(format!("blob {size}\0").as_bytes());
        BlobHasher(h)
    }

    pub fn update(&mut self, piece: &[u8]) {
        self.0.update(piece);
    }

    pub fn finish(self) -> ObjectId {
        ObjectId::from_bytes(self.0.finalize().into())
    }
}

/// The git blob id (SHA-1 of `blob <len>\0` + content), lowercase hex.
pub fn git_blob_oid(content: &[u8]) -> String {
    object_id("blob", content).to_string()
}

/// The git-lfs pointer file of content with this sha256 and size.
pub fn lfs_pointer(sha256: &crate::id::Sha256, size: u64) -> String {
    format!("version https://git-lfs.github.com/spec/v1\noid sha256:{sha256}\nsize {size}\n")
}

/// What a tree entry is. Files are `100644` (the Hub has no executables or links here),
/// folders `40000`, as git writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    File,
    Folder,
}

impl Mode {
    fn as_bytes(self) -> &'static [u8] {
        match self {
            Mode::File => b"100644",
            Mode::Folder => b"40000",
        }
    }
}

/// One entry of a tree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TreeEntry {
    pub mode: Mode,
    pub name: String,
    pub id: ObjectId,
}

/// The order git keeps a tree in: by name, a folder compared as if its name ended in `/`.
pub fn git_order(a: (&str, Mode), b: (&str, Mode)) -> std::cmp::Ordering {
    fn key<'a>((name, mode): (&'a str, Mode)) -> impl Iterator<Item = u8> + 'a {
        let slash: &'static [u8] = if mode == Mode::Folder { b"/" } else { b"" };
        name.as_bytes().iter().chain(slash).copied()
    }
    key(a).cmp(key(b))
}

/// Whether `name` may be one component of a stored path (what [`RepoPath::parse`] takes,
/// without `/`).
pub fn valid_name(name: &str) -> bool {
    !name.contains('/') && RepoPath::parse(name).is_ok()
}

/// The body of a tree holding `entries`, which must be in [`git_order`] with distinct
/// names.
pub fn encode_tree(entries: &[TreeEntry]) -> Vec<u8> {
    let mut out = Vec::with_capacity(entries.len() * 48);
    for e in entries {
        out.extend_from_slice(e.mode.as_bytes());
        out.push(b' ');
        out.extend_from_slice(e.name.as_bytes());
        out.push(0);
        out.extend_from_slice(e.id.as_bytes());
    }
    out
}

/// The entries of a tree body, checked: known modes, names a path may hold, git's order,
/// no name twice. Names git itself refuses to check out (`.git` in any spelling,
/// [`crate::git_reserved`]) are returned too, for the caller to leave out: a store
/// written before paths were checked that way may hold them.
pub fn decode_tree(body: &[u8]) -> Result<Vec<TreeEntry>, GitError> {
    const KIND: &str = "tree";
    let mut out: Vec<TreeEntry> = Vec::new();
    let mut rest = body;
    let mut last: Option<(String, Mode)> = None;
    while !rest.is_empty() {
        let Some(sp) = rest.iter().take(8).position(|&b| b == b' ') else {
            return bad(KIND, "an entry has no mode");
        };
        let mode = match &rest[..sp] {
            b"100644" => Mode::File,
            b"40000" => Mode::Folder,
            m => {
                return bad(
                    KIND,
                    format!("unknown mode {:?}", String::from_utf8_lossy(m)),
                );
            }
        };
        rest = &rest[sp + 1..];
        let Some(nul) = rest.iter().take(4097).position(|&b| b == 0) else {
            return bad(KIND, "an entry's name has no end");
        };
        let Ok(name) = std::str::from_utf8(&rest[..nul]) else {
            return bad(KIND, "an entry's name is not UTF-8");
        };
        rest = &rest[nul + 1..];
        if rest.len() < 20 {
            return bad(KIND, format!("the entry {name:?} is cut short"));
        }
        let id = ObjectId::from_bytes(rest[..20].try_into().expect("20 bytes"));
        rest = &rest[20..];
        if let Some((prev, prev_mode)) = &last
            && (prev == name
                || git_order((prev, *prev_mode), (name, mode)) != std::cmp::Ordering::Less)
        {
            return bad(
                KIND,
                format!("{name:?} is out of git's order or named twice"),
            );
        }
        last = Some((name.to_string(), mode));
        if !crate::git_reserved(name) && !valid_name(name) {
            return bad(KIND, format!("{name:?} is not a valid path component"));
        }
        out.push(TreeEntry {
            mode,
            name: name.to_string(),
            id,
        });
    }
    Ok(out)
}

/// Who made a commit, as git records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Signature {
    pub name: String,
    pub email: String,
    /// Seconds since the Unix epoch, UTC.
    pub time: u64,
}

impl Signature {
    /// The signature of Hub user `user` at `time`: git refuses `<`, `>` and newlines in
    /// names, so those are dropped.
    pub fn user(user: &str, time: u64) -> Signature {
        let name: String = user
            .chars()
            .filter(|c| !matches!(c, '<' | '>' | '\n' | '\0'))
            .collect();
        let name = name.trim().to_string();
        Signature {
            email: format!("{}@users.noreply.localhost", name.replace(' ', "-")),
            name,
            time,
        }
    }

    fn encode(&self) -> String {
        format!("{} <{}> {} +0000", self.name, self.email, self.time)
    }

    fn parse(s: &str) -> Option<Signature> {
        let (name, rest) = s.split_once(" <")?;
        let (email, rest) = rest.split_once("> ")?;
        let (time, _tz) = rest.split_once(' ')?;
        Some(Signature {
            name: name.to_string(),
            email: email.to_string(),
            time: time.parse().ok()?,
        })
    }
}

/// A commit object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GitCommit {
    pub tree: ObjectId,
    pub parents: Vec<ObjectId>,
    pub author: Signature,
    pub committer: Signature,
    /// The message: the summary, then a blank line and the description if there is one.
    pub message: String,
}

impl GitCommit {
    pub fn encode(&self) -> Vec<u8> {
        let mut s = format!("tree {}\n", self.tree);
        for p in &self.parents {
            s.push_str(&format!("parent {p}\n"));
        }
        s.push_str(&format!("author {}\n", self.author.encode()));
        s.push_str(&format!("committer {}\n\n", self.committer.encode()));
        s.push_str(&self.message);
        s.into_bytes()
    }

    /// A commit body: `tree`, then `parent`s, `author` and `committer`; other headers
    /// (`encoding`, `gpgsig`, ...) are skipped.
    pub fn decode(body: &[u8]) -> Result<GitCommit, GitError> {
        const KIND: &str = "commit";
        let Ok(text) = std::str::from_utf8(body) else {
            return bad(KIND, "not UTF-8");
        };
        let Some((headers, message)) = text.split_once("\n\n") else {
            return bad(KIND, "no blank line after the headers");
        };
        let (mut tree, mut parents, mut author, mut committer) = (None, Vec::new(), None, None);
        for line in headers.lines() {
            let id = |v: &str| ObjectId::parse(v).filter(|_| v.len() == 40);
            match line.split_once(' ') {
                Some(("tree", v)) if tree.is_none() => tree = id(v),
                Some(("parent", v)) => match id(v) {
                    Some(p) => parents.push(p),
                    None => return bad(KIND, format!("bad parent {v:?}")),
                },
                Some(("author", v)) => author = Signature::parse(v),
                Some(("committer", v)) => committer = Signature::parse(v),
                _ => {}
            }
        }
        match (tree, author, committer) {
            (Some(tree), Some(author), Some(committer)) => Ok(GitCommit {
                tree,
                parents,
                author,
                committer,
                message: message.to_string(),
            }),
            _ => bad(
                KIND,
                "a tree, author or committer line is missing or malformed",
            ),
        }
    }

    /// The message of a commit with this summary and description. git takes the first
    /// paragraph as the summary, so a summary's line breaks become spaces.
    pub fn message(summary: &str, description: &str) -> String {
        let summary = summary.replace(['\r', '\n'], " ");
        let description = description.trim_end_matches('\n');
        if description.is_empty() {
            format!("{summary}\n")
        } else {
            format!("{summary}\n\n{description}\n")
        }
    }

    /// The summary and description [`GitCommit::message`] joined. The summary is the
    /// first paragraph, its lines joined by spaces (as git's `%s`).
    pub fn summary_and_description(&self) -> (String, String) {
        let m = self.message.trim_end_matches('\n');
        let (s, d) = m.split_once("\n\n").unwrap_or((m, ""));
        (s.replace(['\r', '\n'], " "), d.to_string())
    }
}

/// The id of the empty tree, which git knows by heart.
pub fn empty_tree_id() -> ObjectId {
    object_id("tree", b"")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id(n: u8) -> ObjectId {
        ObjectId::from_bytes([n; 20])
    }

    #[test]
    fn ids_match_git() {
        // `git hash-object` of empty input and of "hello\n"; git's empty tree.
        assert_eq!(
            git_blob_oid(b""),
            "e69de29bb2d1d6434b8b29ae775ad8c2e48c5391"
        );
        assert_eq!(
            git_blob_oid(b"hello\n"),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        let mut pieces = BlobHasher::new(6);
        pieces.update(b"hel");
        pieces.update(b"lo\n");
        assert_eq!(
            pieces.finish().to_string(),
            "ce013625030ba8dba906f756967f9e9ca394464a"
        );
        assert_eq!(
            empty_tree_id().to_string(),
            "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
        );
        // `printf 'hello\n' > a; git add a; git write-tree`.
        let tree = encode_tree(&[TreeEntry {
            mode: Mode::File,
            name: "a".into(),
            id: ObjectId::parse("ce013625030ba8dba906f756967f9e9ca394464a").unwrap(),
        }]);
        assert_eq!(
            object_id("tree", &tree).to_string(),
            "0976950c1fdbcb52435a433913017bf044b3a58f"
        );
    }

    #[test]
    fn a_commit_is_what_git_hashes() {
        // `GIT_AUTHOR_DATE=@0 GIT_COMMITTER_DATE=@0 git commit-tree <empty tree> -m x`
        // with user a <a@b>.
        let c = GitCommit {
            tree: empty_tree_id(),
            parents: vec![],
            author: Signature {
                name: "a".into(),
                email: "a@b".into(),
                time: 0,
            },
            committer: Signature {
                name: "a".into(),
                email: "a@b".into(),
                time: 0,
            },
            message: "x\n".into(),
        };
        let (oid, bytes) = frame("commit", &c.encode());
        assert_eq!(oid.to_string(), "cdb6f5729853304abc87a11d7ceda7eb5f02fa55");
        assert_eq!(
            GitCommit::decode(unframe("commit", &oid, &bytes).unwrap()).unwrap(),
            c
        );
        let mut other = bytes.clone();
        *other.last_mut().unwrap() ^= 1;
        assert!(unframe("commit", &oid, &other).is_err());
        assert!(unframe("tree", &oid, &bytes).is_err());
    }

    #[test]
    fn messages_round_trip() {
        for (s, d) in [("one", ""), ("one", "two\nlines"), ("a", "b\n")] {
            let c = GitCommit {
                tree: id(1),
                parents: vec![id(2), id(3)],
                author: Signature::user("u", 5),
                committer: Signature::user("u", 5),
                message: GitCommit::message(s, d),
            };
            let back = GitCommit::decode(&c.encode()).unwrap();
            assert_eq!(back, c);
            assert_eq!(
                back.summary_and_description(),
                (s.to_string(), d.trim_end().to_string())
            );
        }
        assert_eq!(Signature::user("a<b>\nc", 1).name, "abc");
    }

    #[test]
    fn trees_keep_gits_order_and_refuse_the_rest() {
        let mut entries = vec![
            TreeEntry {
                mode: Mode::Folder,
                name: "a".into(),
                id: id(1),
            },
            TreeEntry {
                mode: Mode::File,
                name: "a.txt".into(),
                id: id(2),
            },
            TreeEntry {
                mode: Mode::File,
                name: "a-b".into(),
                id: id(3),
            },
        ];
        entries.sort_by(|x, y| git_order((&x.name, x.mode), (&y.name, y.mode)));
        let names: Vec<&str> = entries.iter().map(|e| e.name.as_str()).collect();
        // A folder sorts as `a/`, after `a-b` and `a.txt`.
        assert_eq!(names, ["a-b", "a.txt", "a"]);
        let body = encode_tree(&entries);
        assert_eq!(decode_tree(&body).unwrap(), entries);
        // Out of order, twice, a bad mode, a bad name, cut short.
        let mut swapped = entries.clone();
        swapped.swap(0, 1);
        assert!(decode_tree(&encode_tree(&swapped)).is_err());
        let twice = [entries[0].clone(), entries[0].clone()];
        assert!(decode_tree(&encode_tree(&twice)).is_err());
        assert!(decode_tree(b"100755 x\0aaaaaaaaaaaaaaaaaaaa").is_err());
        assert!(decode_tree(b"100644 a/b\0aaaaaaaaaaaaaaaaaaaa").is_err());
        assert!(decode_tree(b"100644 ..\0aaaaaaaaaaaaaaaaaaaa").is_err());
        assert!(decode_tree(&body[..body.len() - 1]).is_err());
        // A name git refuses, planted by an older store: returned, for the caller.
        let planted = [
            TreeEntry {
                mode: Mode::Folder,
                name: ".git".into(),
                id: id(4),
            },
            entries[0].clone(),
        ];
        assert_eq!(decode_tree(&encode_tree(&planted)).unwrap(), planted);
    }
}
