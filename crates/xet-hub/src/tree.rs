//! Folders as stored: one git tree per folder ([`crate::git`]) and, beside it, the facts
//! of its files git does not keep (Xet hash, sha256, size, how it was committed). A
//! commit rewrites only the folders on the paths it changes; every other folder is the
//! same object in both commits.
//!
//! This module is pure: it decodes and encodes folders and applies operations to the
//! folders a commit loaded ([`Dir`]). [`crate::Repos`] reads and writes them.

use std::collections::{BTreeMap, HashMap};

use xet_hash::MerkleHash;

use crate::commit::{ApplyError, FileEntry, FileMeta, Operation, Storage, folded};
use crate::git::{self, GitError, Mode, TreeEntry};
use crate::id::{ObjectId, RepoPath, Sha256};

/// What a name of a folder holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Item {
    File(FileEntry),
    /// A folder, by the id of its tree.
    Folder(ObjectId),
}

/// A folder as read: its entries in git's order, each file with its facts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Folder {
    pub entries: Vec<(String, Item)>,
}

const FACTS_MAGIC: &[u8] = b"xet-facts 1\n";
/// Facts of a folder holding bucket files: each record as in version 1, and after a
/// bucket file's ([`BUCKET`]) its [`FileMeta`]: mtime present (1 byte), mtime (i64 LE),
/// uploaded (u64 LE), content type length (u16 LE) and bytes.
const FACTS_MAGIC_2: &[u8] = b"xet-facts 2\n";
/// Xet hash, sha256 as lowercase hex, size (u64 LE), storage (0 regular, 1 LFS, 2 bucket).
const FACT_LEN: usize = 32 + 64 + 8 + 1;
const BUCKET: u8 = 2;
/// A bucket file's fixed part of its [`FileMeta`] record.
const META_LEN: usize = 1 + 8 + 8 + 2;

fn bad_facts<T>(why: impl Into<String>) -> Result<T, GitError> {
    Err(GitError {
        kind: "facts",
        why: why.into(),
    })
}

fn mode(item: &Item) -> Mode {
    match item {
        Item::File(_) => Mode::File,
        Item::Folder(_) => Mode::Folder,
    }
}

impl Folder {
    /// A folder from its tree's body and its facts.
    pub fn decode(tree: &[u8], facts: &[u8]) -> Result<Folder, GitError> {
        let entries = git::decode_tree(tree)?;
        let (mut facts, fixed) = if let Some(f) = facts.strip_prefix(FACTS_MAGIC) {
            (f, true)
        } else if let Some(f) = facts.strip_prefix(FACTS_MAGIC_2) {
            (f, false)
        } else {
            return bad_facts("no header");
        };
        let files = entries.iter().filter(|e| e.mode == Mode::File).count();
        if fixed && facts.len() != files * FACT_LEN {
            return bad_facts(format!("{} bytes of facts for {files} files", facts.len()));
        }
        let mut out = Vec::with_capacity(entries.len());
        for e in entries {
            let item = match e.mode {
                Mode::Folder => Item::Folder(e.id),
                Mode::File => {
                    if facts.len() < FACT_LEN {
                        return bad_facts(format!("the facts end before those of {}", e.name));
                    }
                    let (f, rest) = facts.split_at(FACT_LEN);
                    facts = rest;
                    let mut entry = decode_fact(f, e.id)?;
                    if entry.storage == Storage::Bucket {
                        if fixed {
                            return bad_facts("a bucket file in version 1 facts");
                        }
                        entry.meta = decode_meta(&mut facts)?;
                    }
                    Item::File(entry)
                }
            };
            // A name git refuses to check out (`.git` in any spelling), in a tree written
            // before paths were checked that way: left out, so it is never listed,
            // served or carried into a later commit.
            if !crate::git_reserved(&e.name) {
                out.push((e.name, item));
            }
        }
        if !facts.is_empty() {
            return bad_facts(format!("{} bytes of facts left over", facts.len()));
        }
        // One written form per folder: version 2 only where a bucket file needs it.
        let bucket = out
            .iter()
            .any(|(_, i)| matches!(i, Item::File(f) if f.storage == Storage::Bucket));
        if !fixed && !bucket {
            return bad_facts("version 2 facts without a bucket file");
        }
        Ok(Folder { entries: out })
    }

    /// The tree object (id and whole bytes) and the facts of this folder, whose entries
    /// must be in git's order.
    pub fn encode(&self) -> (ObjectId, Vec<u8>, Vec<u8>) {
        let mut tree = Vec::with_capacity(self.entries.len());
        let bucket = self
            .entries
            .iter()
            .any(|(_, i)| matches!(i, Item::File(f) if f.storage == Storage::Bucket));
        let mut facts = if bucket { FACTS_MAGIC_2 } else { FACTS_MAGIC }.to_vec();
        for (name, item) in &self.entries {
            let id = match item {
                Item::File(f) => {
                    encode_fact(f, &mut facts);
                    f.git_oid
                }
                Item::Folder(id) => *id,
            };
            tree.push(TreeEntry {
                mode: mode(item),
                name: name.clone(),
                id,
            });
        }
        let (id, bytes) = git::frame("tree", &git::encode_tree(&tree));
        (id, bytes, facts)
    }

    /// The index of the entry named `name`.
    pub fn find(&self, name: &str) -> Option<usize> {
        [Mode::File, Mode::Folder].into_iter().find_map(|m| {
            let i = self.after(name, m).checked_sub(1)?;
            (self.entries[i].0 == name).then_some(i)
        })
    }

    /// How many entries sort at or before `name` (a file or a folder per `m`) in git's
    /// order.
    fn after(&self, name: &str, m: Mode) -> usize {
        self.entries.partition_point(|(n, item)| {
            git::git_order((n, mode(item)), (name, m)) != std::cmp::Ordering::Greater
        })
    }

    /// The index of the first entry that sorts after the entry named `name` (whether or
    /// not it is still there): where a listing that ended at it goes on.
    pub fn resume_after(&self, name: &str) -> usize {
        match self.find(name) {
            Some(i) => i + 1,
            None => self.after(name, Mode::File),
        }
    }

    /// Bytes this folder takes in memory, roughly (for cache budgets).
    pub fn weight(&self) -> usize {
        self.entries
            .iter()
            .map(|(n, _)| n.len() + std::mem::size_of::<(String, Item)>() + 64)
            .sum::<usize>()
            + 64
    }
}

fn encode_fact(f: &FileEntry, out: &mut Vec<u8>) {
    out.extend_from_slice(f.xet_hash.as_bytes());
    // Hex, as the first stores wrote it.
    out.extend_from_slice(f.sha256.to_string().as_bytes());
    out.extend_from_slice(&f.size.to_le_bytes());
    out.push(match f.storage {
        Storage::Regular => 0,
        Storage::Lfs => 1,
        Storage::Bucket => BUCKET,
    });
    if f.storage == Storage::Bucket {
        let m = &f.meta;
        out.push(u8::from(m.mtime_ms.is_some()));
        out.extend_from_slice(&m.mtime_ms.unwrap_or(0).to_le_bytes());
        out.extend_from_slice(&m.uploaded_ms.to_le_bytes());
        // Content types are checked to be short where they come in.
        let ct = m.content_type.as_deref().unwrap_or("").as_bytes();
        let ct = &ct[..ct.len().min(usize::from(u16::MAX))];
        out.extend_from_slice(&(ct.len() as u16).to_le_bytes());
        out.extend_from_slice(ct);
    }
}

fn decode_meta(facts: &mut &[u8]) -> Result<FileMeta, GitError> {
    if facts.len() < META_LEN {
        return bad_facts("a bucket file's facts are cut short");
    }
    let (fixed, rest) = facts.split_at(META_LEN);
    let mtime = i64::from_le_bytes(fixed[1..9].try_into().expect("8 bytes"));
    let uploaded_ms = u64::from_le_bytes(fixed[9..17].try_into().expect("8 bytes"));
    let ct_len = usize::from(u16::from_le_bytes(
        fixed[17..19].try_into().expect("2 bytes"),
    ));
    if rest.len() < ct_len {
        return bad_facts("a bucket file's content type is cut short");
    }
    let (ct, rest) = rest.split_at(ct_len);
    let Ok(ct) = std::str::from_utf8(ct) else {
        return bad_facts("a content type is not UTF-8");
    };
    *facts = rest;
    Ok(FileMeta {
        mtime_ms: match fixed[0] {
            0 if mtime != 0 => return bad_facts("an absent mtime with a value"),
            0 => None,
            1 => Some(mtime),
            b => return bad_facts(format!("mtime flag {b}")),
        },
        uploaded_ms,
        content_type: (!ct.is_empty()).then(|| ct.to_string()),
    })
}

fn decode_fact(f: &[u8], git_oid: ObjectId) -> Result<FileEntry, GitError> {
    let xet_hash = MerkleHash::from_bytes(f[..32].try_into().expect("32 bytes"));
    let sha = &f[32..96];
    if !sha
        .iter()
        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(b))
    {
        return bad_facts("a sha256 is not lowercase hex");
    }
    let sha256 =
        Sha256::parse(std::str::from_utf8(sha).expect("hex is ASCII")).expect("64 hex digits");
    let size = u64::from_le_bytes(f[96..104].try_into().expect("8 bytes"));
    let storage = match f[104] {
        0 => Storage::Regular,
        1 => Storage::Lfs,
        BUCKET => Storage::Bucket,
        s => return bad_facts(format!("unknown storage {s}")),
    };
    Ok(FileEntry {
        xet_hash,
        sha256,
        size,
        storage,
        git_oid,
        meta: FileMeta::default(),
    })
}

/// A folder a commit works on: read from the store where an operation passes through it,
/// or made by the commit. Folders no operation reaches stay [`Slot::Stored`].
#[derive(Debug, Clone, Default)]
pub struct Dir {
    /// The tree this folder was read from (`None`: new).
    pub original: Option<ObjectId>,
    pub items: BTreeMap<String, Slot>,
}

#[derive(Debug, Clone)]
pub enum Slot {
    File(FileEntry),
    Stored(ObjectId),
    Loaded(Dir),
}

/// A folder a commit made: tree id, tree object, facts, and the folder itself.
#[derive(Debug, Clone)]
pub struct NewFolder {
    pub id: ObjectId,
    pub tree: Vec<u8>,
    pub facts: Vec<u8>,
    pub folder: Folder,
}

impl Dir {
    /// The folder `id` as read.
    pub fn read(id: ObjectId, folder: &Folder) -> Dir {
        let items = folder
            .entries
            .iter()
            .map(|(name, item)| {
                let slot = match item {
                    Item::File(f) => Slot::File(f.clone()),
                    Item::Folder(id) => Slot::Stored(*id),
                };
                (name.clone(), slot)
            })
            .collect();
        Dir {
            original: Some(id),
            items,
        }
    }

    /// A whole tree made from a list of files (a legacy commit's, or a test's).
    pub fn from_files<'a>(files: impl IntoIterator<Item = (&'a RepoPath, &'a FileEntry)>) -> Dir {
        let mut root = Dir::default();
        for (path, entry) in files {
            let comps: Vec<&str> = path.components().collect();
            let (name, parents) = comps.split_last().expect("a path has a component");
            // A path below a file: a legacy tree never held one (commits refused it);
            // the file is kept.
            if let Some(dir) = root.folder_for(parents) {
                dir.items
                    .entry((*name).to_string())
                    .or_insert_with(|| Slot::File(entry.clone()));
            }
        }
        root
    }

    /// The loaded folder at `comps` below this one, made where missing; `None` if a
    /// file is in the way.
    fn folder_for(&mut self, comps: &[&str]) -> Option<&mut Dir> {
        let mut dir = self;
        for c in comps {
            let slot = dir
                .items
                .entry((*c).to_string())
                .or_insert_with(|| Slot::Loaded(Dir::default()));
            match slot {
                Slot::Loaded(d) => dir = d,
                _ => return None,
            }
        }
        Some(dir)
    }

    /// The folder at `comps` below this one, if it is loaded.
    pub fn loaded_mut(&mut self, comps: &[&str]) -> Option<&mut Dir> {
        let mut dir = self;
        for c in comps {
            match dir.items.get_mut(*c) {
                Some(Slot::Loaded(d)) => dir = d,
                _ => return None,
            }
        }
        Some(dir)
    }

    /// Every file below this folder with its path, in git's order (folders loaded).
    pub fn files(&self) -> Vec<(String, FileEntry)> {
        let mut out = Vec::new();
        self.collect_files("", &mut out);
        out
    }

    fn collect_files(&self, prefix: &str, out: &mut Vec<(String, FileEntry)>) {
        for (name, slot) in self.sorted() {
            let path = format!("{prefix}{name}");
            match slot {
                Slot::File(f) => out.push((path, f.clone())),
                Slot::Loaded(d) => d.collect_files(&format!("{path}/"), out),
                Slot::Stored(_) => {}
            }
        }
    }

    /// The items in git's order.
    fn sorted(&self) -> Vec<(&String, &Slot)> {
        let mut v: Vec<(&String, &Slot)> = self.items.iter().collect();
        let m = |s: &Slot| match s {
            Slot::File(_) => Mode::File,
            _ => Mode::Folder,
        };
        v.sort_by(|a, b| git::git_order((a.0, m(a.1)), (b.0, m(b.1))));
        v
    }

    /// Write this folder and every loaded folder below it: the root's tree id, and the
    /// folders that are not stored already (children before parents). A folder left
    /// empty disappears from its parent, as in git; the root may be empty.
    pub fn build(self) -> (ObjectId, Vec<NewFolder>) {
        let mut out = Vec::new();
        let id = self
            .build_into(&mut out, true)
            .expect("the root is always written");
        (id, out)
    }

    fn build_into(self, out: &mut Vec<NewFolder>, root: bool) -> Option<ObjectId> {
        let original = self.original;
        let mut entries = Vec::with_capacity(self.items.len());
        for (name, slot) in self.items {
            let item = match slot {
                Slot::File(f) => Item::File(f),
                Slot::Stored(id) => Item::Folder(id),
                Slot::Loaded(d) => match d.build_into(out, false) {
                    Some(id) => Item::Folder(id),
                    None => continue,
                },
            };
            entries.push((name, item));
        }
        if entries.is_empty() && !root {
            return None;
        }
        entries.sort_by(|a, b| git::git_order((&a.0, mode(&a.1)), (&b.0, mode(&b.1))));
        let folder = Folder { entries };
        let (id, tree, facts) = folder.encode();
        if original != Some(id) {
            out.push(NewFolder {
                id,
                tree,
                facts,
                folder,
            });
        }
        Some(id)
    }
}

/// The folders (as component lists, outermost first, each after its parent) a commit of
/// `ops` passes through: where it adds, deletes, or creates something.
pub fn folders_to_load(ops: &[Operation]) -> Vec<Vec<String>> {
    let mut set = std::collections::BTreeSet::new();
    for op in ops {
        let path = match op {
            Operation::Add { path, .. }
            | Operation::DeleteFile { path }
            | Operation::DeleteFolder { path } => path,
        };
        let comps: Vec<&str> = path.components().collect();
        for depth in 1..comps.len() {
            set.insert((depth, comps[..depth].join("/")));
        }
    }
    set.into_iter()
        .map(|(_, p)| p.split('/').map(str::to_string).collect())
        .collect()
}

/// Apply `ops`, in order, to `root`, whose folders [`folders_to_load`] named are loaded.
/// A file may not go where a folder is or below a file; a path may be named by at most
/// one operation; an added name may not collide with another of its folder on clients
/// that fold case or Unicode normalization (collisions already there are left alone).
pub fn apply(root: &mut Dir, ops: &[Operation]) -> Result<(), ApplyError> {
    let mut seen = std::collections::HashSet::new();
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
            Operation::Add { path, entry } => add(root, path, entry)?,
            Operation::DeleteFile { path } => {
                if !remove(root, path, true) {
                    return Err(ApplyError::NoSuchFile { path: path.clone() });
                }
            }
            Operation::DeleteFolder { path } => {
                if !remove(root, path, false) {
                    return Err(ApplyError::NoSuchFolder { path: path.clone() });
                }
            }
        }
    }
    check_no_collision(root, ops)
}

/// What one operation of a bucket's batch did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Applied {
    /// A file of `size` bytes added, with the one it replaced.
    Added {
        size: u64,
        replaced: Option<FileEntry>,
    },
    /// A deletion, with the file it removed (`None`: there was none, which is not an
    /// error: a replayed batch deletes again).
    Deleted { removed: Option<FileEntry> },
}

/// Apply `ops` to `root` one by one, as a bucket's batch does: each operation applies or
/// fails on its own (a file where a folder is, or below a file), later operations see
/// earlier ones, and deleting what is not there succeeds. Names are compared exactly, as
/// bucket keys are.
pub fn apply_each(root: &mut Dir, ops: &[Operation]) -> Vec<Result<Applied, ApplyError>> {
    ops.iter()
        .map(|op| match op {
            Operation::Add { path, entry } => {
                let replaced = file_at(root, path);
                add(root, path, entry)?;
                Ok(Applied::Added {
                    size: entry.size,
                    replaced,
                })
            }
            Operation::DeleteFile { path } => {
                let removed = file_at(root, path);
                if removed.is_some() {
                    remove(root, path, true);
                }
                Ok(Applied::Deleted { removed })
            }
            Operation::DeleteFolder { path } => {
                if !remove(root, path, false) {
                    return Err(ApplyError::NoSuchFolder { path: path.clone() });
                }
                Ok(Applied::Deleted { removed: None })
            }
        })
        .collect()
}

/// The file at `path`, if its folder is loaded and it is a file.
fn file_at(root: &mut Dir, path: &RepoPath) -> Option<FileEntry> {
    let (parent, name) = split(path);
    match root.loaded_mut(&parent)?.items.get(name) {
        Some(Slot::File(f)) => Some(f.clone()),
        _ => None,
    }
}

/// Remove `path` if it is a file (`file`) or a folder (not `file`); whether it was.
fn remove(root: &mut Dir, path: &RepoPath, file: bool) -> bool {
    let (parent, name) = split(path);
    let Some(dir) = root.loaded_mut(&parent) else {
        return false;
    };
    let is_file = match dir.items.get(name) {
        None => return false,
        Some(s) => matches!(s, Slot::File(_)),
    };
    if is_file != file {
        return false;
    }
    dir.items.remove(name);
    true
}

fn split(path: &RepoPath) -> (Vec<&str>, &str) {
    let mut comps: Vec<&str> = path.components().collect();
    let name = comps.pop().expect("a path has a component");
    (comps, name)
}

fn add(root: &mut Dir, path: &RepoPath, entry: &FileEntry) -> Result<(), ApplyError> {
    let (parents, name) = split(path);
    let mut dir = root;
    for (i, c) in parents.iter().enumerate() {
        let slot = dir
            .items
            .entry((*c).to_string())
            .or_insert_with(|| Slot::Loaded(Dir::default()));
        dir = match slot {
            Slot::Loaded(d) => d,
            Slot::File(_) => {
                return Err(ApplyError::FileFolderClash {
                    path: parents[..=i].join("/"),
                });
            }
            // `folders_to_load` named every folder an operation passes through, and
            // operations only add loaded folders: a stored one here is a caller's bug.
            Slot::Stored(id) => unreachable!("folder {id} on the path of {path} was not loaded"),
        };
    }
    if matches!(dir.items.get(name), Some(Slot::Loaded(_) | Slot::Stored(_))) {
        return Err(ApplyError::FileFolderClash {
            path: path.to_string(),
        });
    }
    dir.items
        .insert(name.to_string(), Slot::File(entry.clone()));
    Ok(())
}

/// No name an added path has (its file or any folder on its way) may be another of the
/// same folder but for case or Unicode normalization (`README.md` and `readme.md`; `é`
/// composed and decomposed; folders `Data/` and `data/`), in the tree the commit leaves.
/// Costs the size of the folders the commit added to, once each.
fn check_no_collision(root: &mut Dir, ops: &[Operation]) -> Result<(), ApplyError> {
    // Per folder (by path): its names by folded form.
    let mut folds: HashMap<String, HashMap<String, Vec<String>>> = HashMap::new();
    for op in ops {
        let Operation::Add { path, .. } = op else {
            continue;
        };
        let comps: Vec<&str> = path.components().collect();
        for depth in 0..comps.len() {
            let parent = &comps[..depth];
            let name = comps[depth];
            let key = parent.join("/");
            if !folds.contains_key(&key) {
                let Some(dir) = root.loaded_mut(parent) else {
                    break;
                };
                let mut m: HashMap<String, Vec<String>> = HashMap::new();
                for n in dir.items.keys() {
                    m.entry(folded(n)).or_default().push(n.clone());
                }
                folds.insert(key.clone(), m);
            }
            let spellings = folds[&key].get(&folded(name));
            if let Some(existing) = spellings.into_iter().flatten().find(|s| *s != name) {
                let at = |n: &str| {
                    if key.is_empty() {
                        n.to_string()
                    } else {
                        format!("{key}/{n}")
                    }
                };
                return Err(ApplyError::NameCollision {
                    new: at(name),
                    existing: at(existing),
                });
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(s: &str) -> RepoPath {
        RepoPath::parse(s).unwrap()
    }

    fn entry(n: u8) -> FileEntry {
        FileEntry::regular(xet_hash::chunk_hash(&[n]), &[n])
    }

    fn tree(paths: &[(&str, u8)]) -> BTreeMap<RepoPath, FileEntry> {
        paths.iter().map(|(s, n)| (p(s), entry(*n))).collect()
    }

    /// Apply to a fully loaded tree and list the result.
    fn applied(
        base: &BTreeMap<RepoPath, FileEntry>,
        ops: &[Operation],
    ) -> Result<Vec<String>, ApplyError> {
        let mut d = Dir::from_files(base);
        apply(&mut d, ops)?;
        Ok(d.files().into_iter().map(|(p, _)| p).collect())
    }

    #[test]
    fn facts_round_trip_and_are_checked() {
        let mut f = Folder::default();
        f.entries
            .push(("a".into(), Item::Folder(ObjectId::from_bytes([1; 20]))));
        let lfs = FileEntry::lfs(
            xet_hash::chunk_hash(b"z"),
            Sha256::from_bytes([0xab; 32]),
            1 << 40,
        );
        f.entries.push(("b.bin".into(), Item::File(lfs)));
        f.entries.push(("c".into(), Item::File(entry(3))));
        let (id, tree, facts) = f.encode();
        let body = git::unframe("tree", &id, &tree).unwrap();
        assert_eq!(Folder::decode(body, &facts).unwrap(), f);
        assert_eq!(f.find("a"), Some(0));
        assert_eq!(f.find("c"), Some(2));
        assert_eq!(f.find("bb"), None);
        assert_eq!(f.resume_after("b.bin"), 2);
        assert_eq!(f.resume_after("b.c"), 2);
        assert_eq!(f.resume_after("0"), 0);
        assert!(Folder::decode(body, &facts[..facts.len() - 1]).is_err());
        assert!(Folder::decode(body, &facts[1..]).is_err());
        let mut bad = facts.clone();
        let storage_of_c = bad.len() - 1;
        bad[storage_of_c] = 7;
        assert!(Folder::decode(body, &bad).is_err());
    }

    #[test]
    fn bucket_facts_round_trip_every_cut_is_refused_and_facts_move_the_tree_id() {
        let bucket = |mtime: Option<i64>, ct: Option<&str>| {
            FileEntry::bucket(
                xet_hash::chunk_hash(b"q"),
                9,
                FileMeta {
                    mtime_ms: mtime,
                    uploaded_ms: 1_765_000_000_123,
                    content_type: ct.map(str::to_string),
                },
            )
        };
        let mut f = Folder::default();
        f.entries
            .push(("a".into(), Item::File(bucket(Some(-5), Some("text/plain")))));
        f.entries.push(("b".into(), Item::File(entry(3))));
        f.entries.push(("c".into(), Item::File(bucket(None, None))));
        let (id, tree, facts) = f.encode();
        assert!(facts.starts_with(FACTS_MAGIC_2));
        let body = git::unframe("tree", &id, &tree).unwrap();
        assert_eq!(Folder::decode(body, &facts).unwrap(), f);
        for cut in 0..facts.len() {
            assert!(Folder::decode(body, &facts[..cut]).is_err(), "cut at {cut}");
        }
        let mut longer = facts.clone();
        longer.push(0);
        assert!(Folder::decode(body, &longer).is_err());
        // Any fact of a bucket file is in the tree's id.
        let mut g = f.clone();
        g.entries[0].1 = Item::File(bucket(Some(-4), Some("text/plain")));
        assert_ne!(g.encode().0, id);
        g.entries[0].1 = Item::File(bucket(Some(-5), Some("text/html")));
        assert_ne!(g.encode().0, id);
        // A folder of repository files keeps version 1 facts, byte for byte, and version 2
        // facts of such a folder are refused (one written form per folder).
        let mut r = Folder::default();
        r.entries.push(("b".into(), Item::File(entry(3))));
        let (rid, rtree, rfacts) = r.encode();
        assert!(rfacts.starts_with(FACTS_MAGIC));
        let mut v2 = FACTS_MAGIC_2.to_vec();
        v2.extend_from_slice(&rfacts[FACTS_MAGIC.len()..]);
        let rbody = git::unframe("tree", &rid, &rtree).unwrap();
        assert!(Folder::decode(rbody, &v2).is_err());
        // An absent mtime is written as zero; any other value is refused.
        let mut odd = facts.clone();
        let c_meta = facts.len() - META_LEN;
        assert_eq!(odd[c_meta], 0, "c has no mtime");
        odd[c_meta + 1] = 1;
        assert!(Folder::decode(body, &odd).is_err());
    }

    #[test]
    fn building_writes_only_changed_folders() {
        let base = tree(&[("a/x", 1), ("a/y", 2), ("b/z", 3), ("r", 4)]);
        let (root, all) = Dir::from_files(&base).build();
        assert_eq!(all.len(), 3, "root, a, b");
        // Read the root back with its folders stored, change one file under `a`.
        let folders: HashMap<ObjectId, Folder> = all
            .iter()
            .map(|n| {
                let body = git::unframe("tree", &n.id, &n.tree).unwrap();
                (n.id, Folder::decode(body, &n.facts).unwrap())
            })
            .collect();
        let mut d = Dir::read(root, &folders[&root]);
        let ops = [Operation::Add {
            path: p("a/x"),
            entry: entry(9),
        }];
        for f in folders_to_load(&ops) {
            let comps: Vec<&str> = f.iter().map(String::as_str).collect();
            let (last, parent) = comps.split_last().unwrap();
            let dir = d.loaded_mut(parent).unwrap();
            let Some(Slot::Stored(id)) = dir.items.get(*last) else {
                panic!()
            };
            let id = *id;
            dir.items.insert(
                (*last).to_string(),
                Slot::Loaded(Dir::read(id, &folders[&id])),
            );
        }
        apply(&mut d, &ops).unwrap();
        let (new_root, written) = d.build();
        assert_ne!(new_root, root);
        assert_eq!(written.len(), 2, "a and the root; b is shared");
        // The same tree built whole gives the same ids: ids are the content's.
        let mut whole = base.clone();
        whole.insert(p("a/x"), entry(9));
        assert_eq!(Dir::from_files(&whole).build().0, new_root);
    }

    #[test]
    fn operations_apply_in_order_and_refuse_clashes() {
        let base = tree(&[("a/x", 1), ("a/y", 2), ("b", 3)]);
        let out = applied(
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
        assert_eq!(out, ["b", "c/d"]);
        let add = |path: &str| Operation::Add {
            path: p(path),
            entry: entry(5),
        };
        assert!(matches!(
            applied(&base, &[add("b/z")]),
            Err(ApplyError::FileFolderClash { .. })
        ));
        assert!(matches!(
            applied(&base, &[add("a")]),
            Err(ApplyError::FileFolderClash { .. })
        ));
        assert!(matches!(
            applied(&base, &[Operation::DeleteFile { path: p("zz") }]),
            Err(ApplyError::NoSuchFile { .. })
        ));
        assert!(matches!(
            applied(&base, &[Operation::DeleteFile { path: p("a") }]),
            Err(ApplyError::NoSuchFile { .. })
        ));
        assert!(matches!(
            applied(&base, &[Operation::DeleteFolder { path: p("q") }]),
            Err(ApplyError::NoSuchFolder { .. })
        ));
        assert!(matches!(
            applied(&base, &[Operation::DeleteFolder { path: p("b") }]),
            Err(ApplyError::NoSuchFolder { .. })
        ));
        assert!(matches!(
            applied(&base, &[add("n"), add("n")]),
            Err(ApplyError::Duplicate { .. })
        ));
        // A file replaced by a folder of its name, deleting first.
        assert_eq!(
            applied(&base, &[Operation::DeleteFile { path: p("b") }, add("b/z")]).unwrap(),
            ["a/x", "a/y", "b/z"]
        );
        // Emptied folders disappear.
        assert_eq!(
            applied(
                &base,
                &[
                    Operation::DeleteFile { path: p("a/x") },
                    Operation::DeleteFile { path: p("a/y") }
                ]
            )
            .unwrap(),
            ["b"]
        );
    }

    #[test]
    fn names_one_client_would_merge_are_refused_when_added() {
        let base = tree(&[("readme.md", 1), ("Data/x.bin", 2), ("caf\u{e9}.txt", 3)]);
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
            ("Data/X.BIN", "Data/x.bin"),
        ] {
            match applied(&base, &[add(new)]) {
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
            applied(&base, &[add("n/A.txt"), add("n/a.txt")]),
            Err(ApplyError::NameCollision { .. })
        ));
        // Replacing a file under its own name, and names that differ otherwise, are fine;
        // a collision the tree had before does not stop other commits.
        assert!(
            applied(
                &base,
                &[add("readme.md"), add("Data/z.bin"), add("readme.txt")]
            )
            .is_ok()
        );
        let mut old = base.clone();
        old.insert(p("README.md"), entry(4));
        assert!(applied(&old, &[add("other.txt")]).is_ok());
        // Deleting one of two spellings and adding the other in one commit is a rename.
        assert!(
            applied(
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
}
