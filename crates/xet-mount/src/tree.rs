//! The mounted folder's inodes: files with the facts of the listing, folders as the
//! prefixes of their paths (a bucket has no folders of its own). Plain data, no I/O:
//! the filesystem holds it under a lock it never keeps across an `.await`.

use std::collections::{BTreeMap, HashMap};
use std::time::SystemTime;

use xet_hash::MerkleHash;

/// The inode of the mount's root.
pub(crate) const ROOT: u64 = 1;

/// Where a file's bytes come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Content {
    /// In Xet: ranges rebuilt from the CAS.
    Xet(MerkleHash),
    /// A repository file outside Xet (plain git, LFS): read whole from `resolve`.
    Resolve,
    /// Written here and not uploaded yet (only in a bucket mount).
    Local,
}

/// What the listing says of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct FileFacts {
    pub size: u64,
    pub content: Content,
}

#[derive(Debug)]
pub(crate) enum Kind {
    Dir(BTreeMap<String, u64>),
    File(FileFacts),
}

#[derive(Debug)]
pub(crate) struct Node {
    pub parent: u64,
    pub name: String,
    pub kind: Kind,
    pub mtime: SystemTime,
}

/// A listed file: its path below the mount's root, facts and time.
pub(crate) struct Listed {
    pub path: String,
    pub facts: FileFacts,
    pub mtime: SystemTime,
}

/// Why an operation on the tree cannot be done, as the errno it becomes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum TreeError {
    NotFound,
    NotDir,
    IsDir,
    Exists,
    NotEmpty,
}

pub(crate) struct Tree {
    nodes: HashMap<u64, Node>,
    next: u64,
}

impl Tree {
    pub fn new(mtime: SystemTime) -> Tree {
        let root = Node {
            parent: ROOT,
            name: String::new(),
            kind: Kind::Dir(BTreeMap::new()),
            mtime,
        };
        Tree {
            nodes: HashMap::from([(ROOT, root)]),
            next: ROOT + 1,
        }
    }

    pub fn get(&self, ino: u64) -> Option<&Node> {
        self.nodes.get(&ino)
    }

    pub fn get_mut(&mut self, ino: u64) -> Option<&mut Node> {
        self.nodes.get_mut(&ino)
    }

    pub fn lookup(&self, parent: u64, name: &str) -> Result<u64, TreeError> {
        match &self.nodes.get(&parent).ok_or(TreeError::NotFound)?.kind {
            Kind::Dir(children) => children.get(name).copied().ok_or(TreeError::NotFound),
            Kind::File(_) => Err(TreeError::NotDir),
        }
    }

    /// The children of a folder, sorted by name.
    pub fn children(&self, ino: u64) -> Result<Vec<(u64, String, bool)>, TreeError> {
        match &self.nodes.get(&ino).ok_or(TreeError::NotFound)?.kind {
            Kind::Dir(children) => Ok(children
                .iter()
                .map(|(n, i)| (*i, n.clone(), self.is_dir(*i)))
                .collect()),
            Kind::File(_) => Err(TreeError::NotDir),
        }
    }

    pub fn is_dir(&self, ino: u64) -> bool {
        matches!(self.nodes.get(&ino).map(|n| &n.kind), Some(Kind::Dir(_)))
    }

    /// The path of `ino` below the root (`""` for the root).
    pub fn path(&self, mut ino: u64) -> String {
        let mut parts = Vec::new();
        while ino != ROOT {
            let Some(n) = self.nodes.get(&ino) else { break };
            parts.push(n.name.as_str());
            ino = n.parent;
        }
        parts.reverse();
        parts.join("/")
    }

    /// The path of `name` in the folder `parent`.
    pub fn child_path(&self, parent: u64, name: &str) -> String {
        let p = self.path(parent);
        if p.is_empty() {
            name.to_string()
        } else {
            format!("{p}/{name}")
        }
    }

    /// Every file at or below `ino`: inode and path.
    pub fn files_below(&self, ino: u64) -> Vec<(u64, String)> {
        let mut out = Vec::new();
        let mut stack = vec![ino];
        while let Some(i) = stack.pop() {
            match self.nodes.get(&i).map(|n| &n.kind) {
                Some(Kind::Dir(children)) => stack.extend(children.values().copied()),
                Some(Kind::File(_)) => out.push((i, self.path(i))),
                None => {}
            }
        }
        out
    }

    fn add(&mut self, parent: u64, name: &str, kind: Kind, mtime: SystemTime) -> u64 {
        let ino = self.next;
        self.next += 1;
        self.nodes.insert(
            ino,
            Node {
                parent,
                name: name.to_string(),
                kind,
                mtime,
            },
        );
        if let Some(Node {
            kind: Kind::Dir(children),
            ..
        }) = self.nodes.get_mut(&parent)
        {
            children.insert(name.to_string(), ino);
        }
        ino
    }

    /// A new empty folder `name` in `parent`.
    pub fn mkdir(&mut self, parent: u64, name: &str, mtime: SystemTime) -> Result<u64, TreeError> {
        match self.lookup(parent, name) {
            Ok(_) => Err(TreeError::Exists),
            Err(TreeError::NotFound) if self.nodes.contains_key(&parent) => {
                Ok(self.add(parent, name, Kind::Dir(BTreeMap::new()), mtime))
            }
            Err(e) => Err(e),
        }
    }

    /// A new file `name` in `parent`.
    pub fn create(
        &mut self,
        parent: u64,
        name: &str,
        facts: FileFacts,
        mtime: SystemTime,
    ) -> Result<u64, TreeError> {
        match self.lookup(parent, name) {
            Ok(_) => Err(TreeError::Exists),
            Err(TreeError::NotFound) if self.nodes.contains_key(&parent) => {
                Ok(self.add(parent, name, Kind::File(facts), mtime))
            }
            Err(e) => Err(e),
        }
    }

    /// The file at `path`, with the folders above it, added or updated; its inode.
    pub fn put_file(&mut self, path: &str, facts: FileFacts, mtime: SystemTime) -> u64 {
        let mut dir = ROOT;
        let mut parts = path.split('/').peekable();
        while let Some(part) = parts.next() {
            let last = parts.peek().is_none();
            match self.lookup(dir, part) {
                Ok(i) if last => {
                    if let Some(n) = self.nodes.get_mut(&i) {
                        // A folder in the way of a file (S3 allows both `a` and `a/b`):
                        // the folder stays, the file is not shown.
                        if let Kind::File(f) = &mut n.kind {
                            if *f != facts {
                                n.mtime = mtime;
                            }
                            *f = facts;
                        }
                    }
                    return i;
                }
                Ok(i) if self.is_dir(i) => dir = i,
                // A file where a folder is needed: the file wins, the path is not shown.
                Ok(i) => return i,
                Err(_) if last => return self.add(dir, part, Kind::File(facts), mtime),
                Err(_) => dir = self.add(dir, part, Kind::Dir(BTreeMap::new()), mtime),
            }
        }
        dir
    }

    /// Remove `ino` (a file, or an empty folder) from its folder.
    pub fn remove(&mut self, ino: u64) -> Result<(), TreeError> {
        let node = self.nodes.get(&ino).ok_or(TreeError::NotFound)?;
        if let Kind::Dir(children) = &node.kind
            && !children.is_empty()
        {
            return Err(TreeError::NotEmpty);
        }
        let (parent, name) = (node.parent, node.name.clone());
        self.nodes.remove(&ino);
        if let Some(Node {
            kind: Kind::Dir(children),
            ..
        }) = self.nodes.get_mut(&parent)
        {
            children.remove(&name);
        }
        Ok(())
    }

    /// Move `ino` to `name` in `parent`, replacing what is there (a file, or an empty
    /// folder when `ino` is a folder).
    pub fn rename(&mut self, ino: u64, parent: u64, name: &str) -> Result<(), TreeError> {
        if !self.is_dir(parent) {
            return Err(TreeError::NotDir);
        }
        if let Ok(old) = self.lookup(parent, name) {
            if old == ino {
                return Ok(());
            }
            match (self.is_dir(ino), self.is_dir(old)) {
                (false, true) => return Err(TreeError::IsDir),
                (true, false) => return Err(TreeError::NotDir),
                _ => self.remove(old)?,
            }
        }
        let node = self.nodes.get(&ino).ok_or(TreeError::NotFound)?;
        let (from, old_name) = (node.parent, node.name.clone());
        if let Some(Node {
            kind: Kind::Dir(children),
            ..
        }) = self.nodes.get_mut(&from)
        {
            children.remove(&old_name);
        }
        if let Some(Node {
            kind: Kind::Dir(children),
            ..
        }) = self.nodes.get_mut(&parent)
        {
            children.insert(name.to_string(), ino);
        }
        if let Some(n) = self.nodes.get_mut(&ino) {
            n.parent = parent;
            n.name = name.to_string();
        }
        Ok(())
    }

    /// Make the files the listing's: new ones added, changed ones updated, those it no
    /// longer has removed (with the folders that become empty), except the inodes of
    /// `keep` (files being written here).
    pub fn merge(&mut self, listed: Vec<Listed>, keep: &[u64]) {
        let mut seen = std::collections::HashSet::new();
        for l in listed {
            seen.insert(self.put_file(&l.path, l.facts, l.mtime));
        }
        let gone: Vec<u64> = self
            .files_below(ROOT)
            .into_iter()
            .map(|(i, _)| i)
            .filter(|i| !seen.contains(i) && !keep.contains(i))
            .collect();
        for ino in gone {
            self.remove_file(ino);
        }
    }

    /// Remove the file `ino`, and the folders its removal leaves empty: folders exist
    /// as prefixes of files.
    pub fn remove_file(&mut self, ino: u64) {
        let mut parent = self.nodes.get(&ino).map_or(ROOT, |n| n.parent);
        if self.is_dir(ino) || self.remove(ino).is_err() {
            return;
        }
        while parent != ROOT {
            let up = self.nodes.get(&parent).map_or(ROOT, |n| n.parent);
            if self.remove(parent).is_err() {
                break;
            }
            parent = up;
        }
    }

    /// The inode at `path` below the root, if there is one.
    pub fn find(&self, path: &str) -> Option<u64> {
        path.split('/')
            .try_fold(ROOT, |dir, part| self.lookup(dir, part).ok())
    }

    /// Files and their bytes in all.
    pub fn totals(&self) -> (u64, u64) {
        let mut files = 0;
        let mut bytes = 0;
        for n in self.nodes.values() {
            if let Kind::File(f) = &n.kind {
                files += 1;
                bytes += f.size;
            }
        }
        (files, bytes)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(size: u64) -> FileFacts {
        FileFacts {
            size,
            content: Content::Resolve,
        }
    }

    #[test]
    fn paths_make_folders_and_merge_removes_what_is_gone() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut t = Tree::new(t0);
        let a = t.put_file("a/b/c.bin", facts(3), t0);
        let d = t.put_file("d.txt", facts(1), t0);
        assert_eq!(t.path(a), "a/b/c.bin");
        let ab = t.lookup(t.lookup(ROOT, "a").unwrap(), "b").unwrap();
        assert!(t.is_dir(ab));
        assert_eq!(t.totals(), (2, 4));
        // c.bin is gone from the listing: it and its now empty folders go; d.txt stays
        // (kept: being written), e.txt appears.
        t.merge(
            vec![Listed {
                path: "e.txt".into(),
                facts: facts(5),
                mtime: t0,
            }],
            &[d],
        );
        assert_eq!(t.lookup(ROOT, "a"), Err(TreeError::NotFound));
        assert!(t.lookup(ROOT, "d.txt").is_ok());
        assert_eq!(t.totals(), (2, 6));
    }

    #[test]
    fn rename_replaces_files_and_refuses_a_file_over_a_folder() {
        let t0 = SystemTime::UNIX_EPOCH;
        let mut t = Tree::new(t0);
        let x = t.put_file("x", facts(1), t0);
        let y = t.put_file("y", facts(2), t0);
        let dir = t.mkdir(ROOT, "dir", t0).unwrap();
        assert_eq!(t.rename(x, ROOT, "dir"), Err(TreeError::IsDir));
        t.rename(x, ROOT, "y").unwrap();
        assert!(t.get(y).is_none());
        assert_eq!(t.lookup(ROOT, "y"), Ok(x));
        t.rename(x, dir, "z").unwrap();
        assert_eq!(t.path(x), "dir/z");
        assert_eq!(t.remove(dir), Err(TreeError::NotEmpty));
    }
}
