//! Repository operations over a [`RepoStore`]: create, resolve a revision, read folders
//! and files, list, commit with compare-and-swap retries, branch. What a commit's files
//! are (Xet hashes, sha256) is decided by the caller before it gets here; this layer only
//! moves trees and heads.
//!
//! Commits and folders never change once written, so they are cached here (by
//! repository and id, within a memory budget); heads and records are read from the store
//! every time, so several servers on one store see each other's commits at once.

use std::sync::{Arc, Mutex};

use futures_util::future::BoxFuture;
use xet_cas::CasError;

use crate::commit::{ApplyError, Commit, FileEntry, LegacyCommit, Operation, Storage, Stored};
use crate::id::{BranchName, CommitId, ObjectId, RepoId, RepoPath, RepoRef, Revision, TagName};
use crate::store::{BranchHead, RepoObject, RepoRecord, RepoStore};
use crate::tree::{Dir, Folder, Item, NewFolder, Slot, apply, folders_to_load};

/// Why a repository operation failed; each maps to one Hub API answer.
#[derive(Debug, thiserror::Error)]
pub enum RepoError {
    #[error("repository {0} not found")]
    RepoNotFound(RepoRef),
    #[error("revision {rev} not found in repository {repo}")]
    RevisionNotFound { repo: RepoRef, rev: String },
    #[error("{path} not found at revision {rev} of repository {repo}")]
    EntryNotFound {
        repo: RepoRef,
        rev: String,
        path: String,
    },
    #[error("repository {0} already exists")]
    RepoExists(RepoRef),
    #[error("branch {branch} already exists in repository {repo}")]
    BranchExists { repo: RepoRef, branch: BranchName },
    #[error(
        "branch {branch} of {repo} is at {head}, not at the parent commit {parent} this commit was made on: \
         fetch the new head and commit again"
    )]
    ParentMismatch {
        repo: RepoRef,
        branch: BranchName,
        parent: CommitId,
        head: CommitId,
    },
    #[error("tag {tag} already exists in repository {repo}")]
    TagExists { repo: RepoRef, tag: String },
    #[error(
        "{name} of repository {repo} is a tag, and tags do not move: commit to a branch, \
         or delete the tag and create it again"
    )]
    IsTag { repo: RepoRef, name: BranchName },
    #[error("{name} is the default branch of repository {repo}: it cannot be deleted")]
    DefaultBranch { repo: RepoRef, name: BranchName },
    #[error(transparent)]
    Apply(#[from] ApplyError),
    #[error("branch {branch} of {repo} kept moving: gave up after {attempts} attempts; try again")]
    Contention {
        repo: RepoRef,
        branch: BranchName,
        attempts: u32,
    },
    #[error("the record of {repo} kept changing: gave up after {attempts} attempts; try again")]
    RecordContention { repo: RepoRef, attempts: u32 },
    #[error(
        "bucket {repo} is being moved to {to}, so it takes no writes: \
         move it to {to} again to finish the move"
    )]
    Moving { repo: RepoRef, to: RepoId },
    #[error(transparent)]
    Store(#[from] CasError),
}

impl RepoError {
    /// This error with `to` for every mention of repository `from` (a storage named as
    /// the repository that keeps its objects there).
    pub fn renamed(self, from: &RepoRef, to: &RepoRef) -> RepoError {
        let fix = |r: RepoRef| if r == *from { to.clone() } else { r };
        match self {
            RepoError::RepoNotFound(r) => RepoError::RepoNotFound(fix(r)),
            RepoError::RevisionNotFound { repo, rev } => RepoError::RevisionNotFound {
                repo: fix(repo),
                rev,
            },
            RepoError::EntryNotFound { repo, rev, path } => RepoError::EntryNotFound {
                repo: fix(repo),
                rev,
                path,
            },
            RepoError::RepoExists(r) => RepoError::RepoExists(fix(r)),
            RepoError::BranchExists { repo, branch } => RepoError::BranchExists {
                repo: fix(repo),
                branch,
            },
            RepoError::TagExists { repo, tag } => RepoError::TagExists {
                repo: fix(repo),
                tag,
            },
            RepoError::IsTag { repo, name } => RepoError::IsTag {
                repo: fix(repo),
                name,
            },
            RepoError::DefaultBranch { repo, name } => RepoError::DefaultBranch {
                repo: fix(repo),
                name,
            },
            RepoError::ParentMismatch {
                repo,
                branch,
                parent,
                head,
            } => RepoError::ParentMismatch {
                repo: fix(repo),
                branch,
                parent,
                head,
            },
            RepoError::Contention {
                repo,
                branch,
                attempts,
            } => RepoError::Contention {
                repo: fix(repo),
                branch,
                attempts,
            },
            RepoError::RecordContention { repo, attempts } => RepoError::RecordContention {
                repo: fix(repo),
                attempts,
            },
            RepoError::Moving { repo, to: t } => RepoError::Moving {
                repo: fix(repo),
                to: t,
            },
            other @ (RepoError::Apply(_) | RepoError::Store(_)) => other,
        }
    }
}

/// What to record with a commit.
#[derive(Debug, Clone, Default)]
pub struct CommitMeta {
    pub summary: String,
    pub description: String,
    pub author: String,
    pub created_at: u64,
}

/// A commit that landed.
#[derive(Debug, Clone)]
pub struct Committed {
    pub id: CommitId,
    pub commit: Commit,
}

/// How often a commit without `parentCommit` is re-applied on a branch that moved
/// meanwhile. Every round, one of the racing commits wins, so this bounds the number of
/// commits that can race at once, not the time any of them waits.
pub const MAX_COMMIT_ATTEMPTS: u32 = 256;

/// Runs CPU work (a closure) where it does not hold up the caller's async executor, and
/// resolves when it has run. The server passes tokio's blocking pool; the default runs
/// the closure in place.
pub type Offload = Arc<dyn Fn(Box<dyn FnOnce() + Send>) -> BoxFuture<'static, ()> + Send + Sync>;

/// Folders of more bytes than this are decoded through the [`Offload`].
const OFFLOAD_DECODE: usize = 64 * 1024;
/// Objects read or written at once by one operation.
const CONCURRENT_OBJECTS: usize = 16;
/// Memory the object cache may hold, roughly.
const CACHE_BYTES: u64 = 64 * 1024 * 1024;

#[derive(Clone)]
enum Cached {
    Commit(Arc<Commit>),
    Folder(Arc<Folder>),
}

#[derive(Clone)]
struct Weigh;

impl quick_cache::Weighter<(RepoRef, ObjectId), Cached> for Weigh {
    fn weight(&self, _: &(RepoRef, ObjectId), v: &Cached) -> u64 {
        match v {
            Cached::Commit(c) => (256 + c.summary.len() + c.description.len()) as u64,
            Cached::Folder(f) => f.weight() as u64,
        }
    }
}

type Cache = quick_cache::sync::Cache<(RepoRef, ObjectId), Cached, Weigh>;

/// One entry of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listed {
    /// The path from the repository's root.
    pub path: String,
    pub item: Item,
}

/// A page of a listing; `more` if entries follow the last one.
#[derive(Debug, Clone, Default)]
pub struct Page {
    pub entries: Vec<Listed>,
    pub more: bool,
}

/// Repository operations (see the module docs). Cloning shares the store and the cache.
#[derive(Clone)]
pub struct Repos {
    store: Arc<dyn RepoStore>,
    cache: Arc<Cache>,
    offload: Offload,
}

impl Repos {
    pub fn new(store: Arc<dyn RepoStore>) -> Repos {
        Repos {
            store,
            cache: Arc::new(Cache::with_weighter(16_384, CACHE_BYTES, Weigh)),
            offload: Arc::new(|f| {
                f();
                Box::pin(async {})
            }),
        }
    }

    /// Run CPU work (applying a commit, decoding large folders) through `offload`.
    pub fn with_offload(mut self, offload: Offload) -> Repos {
        self.offload = offload;
        self
    }

    pub fn store(&self) -> &Arc<dyn RepoStore> {
        &self.store
    }

    /// `f`'s result, computed through the offload.
    pub(crate) async fn off<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, RepoError> {
        let slot = Arc::new(Mutex::new(None));
        let put = Arc::clone(&slot);
        (self.offload)(Box::new(move || {
            let v = f();
            *put.lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(v);
        }))
        .await;
        let v = slot
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        v.ok_or_else(|| RepoError::Store(CasError::storage("a worker thread failed")))
    }

    /// Create `repo` with an empty initial commit on `main`.
    pub async fn create(
        &self,
        repo: &RepoRef,
        owner: &str,
        private: bool,
        now: u64,
    ) -> Result<RepoRecord, RepoError> {
        // Clients ask to create the repository before every upload: answer an existing
        // one before storing anything (a race past this check stores at most one
        // unreferenced initial commit).
        if self.store.repo(repo).await?.is_some() {
            return Err(RepoError::RepoExists(repo.clone()));
        }
        let record = RepoRecord {
            kind: repo.kind,
            id: repo.id.clone(),
            private,
            owner: owner.to_string(),
            created_at: now,
            created_ms: None,
            incarnation: None,
            home: self.fresh_home(repo, now).await?,
            moving_to: None,
        };
        let storage = record.storage();
        let repo = &storage;
        let (tree, folders) = Dir::default().build();
        self.write_folders(repo, folders).await?;
        let initial = Commit {
            tree,
            parent: None,
            summary: "initial commit".into(),
            description: String::new(),
            author: owner.to_string(),
            created_at: now,
        };
        // The commit first, so a record is never visible with a `main` that points
        // nowhere; if we die between the record and the branch, the first commit to
        // `main` creates the branch.
        let (id, bytes) = initial.encode();
        self.store
            .put_object(repo, RepoObject::Commit, &id, bytes.into())
            .await?;
        let name = RepoRef::new(record.kind, record.id.clone());
        if !self.store.create_repo(&name, &record).await? {
            return Err(RepoError::RepoExists(name));
        }
        self.store
            .update_branch(repo, &BranchName::main(), None, &id)
            .await?;
        Ok(record)
    }

    /// Where a new repository named `repo` keeps its objects: under its name if nothing
    /// was ever kept there, else (the name of a repository deleted, or moved away) a
    /// storage of its own, held by the name, so it starts with nothing of the old one.
    async fn fresh_home(
        &self,
        repo: &RepoRef,
        now: u64,
    ) -> Result<Option<crate::store::Home>, RepoError> {
        let used = self.store.storage_holder(repo).await?.is_some()
            || !self.store.branches(repo).await?.is_empty();
        if !used {
            return Ok(None);
        }
        let nonce = crate::store::nonce(now);
        let storage = RepoRef::new(repo.kind, RepoId::storage(nonce));
        if !self
            .store
            .set_storage_holder(&storage, None, &repo.id)
            .await?
        {
            return Err(CasError::storage(format!(
                "the new storage {} of {repo} is held already: its nonce repeats one",
                storage.id
            ))
            .into());
        }
        Ok(Some(crate::store::Home::Own(nonce)))
    }

    /// The record of `repo`.
    pub async fn record(&self, repo: &RepoRef) -> Result<RepoRecord, RepoError> {
        self.store
            .repo(repo)
            .await?
            .ok_or_else(|| RepoError::RepoNotFound(repo.clone()))
    }

    /// Change the record of `repo` by compare-and-swap: `change` is given the current
    /// record and answers the new one (`None`: delete the repository) or why not, and is
    /// asked again on the record another writer left until a swap lands. Answers the
    /// record as left (`None`: deleted); a change to the same record writes nothing.
    pub async fn update_record(
        &self,
        repo: &RepoRef,
        change: impl Fn(&RepoRecord) -> Result<Option<RepoRecord>, RepoError>,
    ) -> Result<Option<RepoRecord>, RepoError> {
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let head = self
                .store
                .repo_head(repo)
                .await?
                .ok_or_else(|| RepoError::RepoNotFound(repo.clone()))?;
            let to = change(&head.record)?;
            if to.as_ref() == Some(&head.record) {
                return Ok(to);
            }
            if self
                .store
                .update_repo(repo, &head, to.as_ref())
                .await?
                .is_some()
            {
                return Ok(to);
            }
        }
        Err(RepoError::RecordContention {
            repo: repo.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// Make `repo` private or public (a repository or a bucket; not one being moved).
    pub async fn set_private(
        &self,
        repo: &RepoRef,
        private: bool,
    ) -> Result<RepoRecord, RepoError> {
        let left = self
            .update_record(repo, |r| {
                refuse_moving(repo, r)?;
                Ok(Some(RepoRecord {
                    private,
                    ..r.clone()
                }))
            })
            .await?;
        left.ok_or_else(|| RepoError::RepoNotFound(repo.clone()))
    }

    /// Commit `id` of `repo`. A commit of a store written before git trees has its tree
    /// written out as git trees the first time it is read (in any process: the objects
    /// are content-addressed, so writers agree).
    pub async fn commit(&self, repo: &RepoRef, id: &CommitId) -> Result<Option<Commit>, RepoError> {
        let key = (repo.clone(), *id);
        if let Some(Cached::Commit(c)) = self.cache.get(&key) {
            return Ok(Some((*c).clone()));
        }
        let Some(bytes) = self.store.object(repo, RepoObject::Commit, id).await? else {
            return Ok(None);
        };
        let stored = Commit::decode(id, &bytes).map_err(|e| {
            let what = format!("repository {repo}, commit {id}");
            RepoError::Store(CasError::storage_with(what, e))
        })?;
        let commit = match stored {
            Stored::Git(c) => c,
            Stored::Legacy(legacy) => self.convert_legacy(repo, legacy).await?,
        };
        self.cache
            .insert(key, Cached::Commit(Arc::new(commit.clone())));
        Ok(Some(commit))
    }

    /// Write a legacy commit's tree as git trees; the commit with that tree.
    async fn convert_legacy(
        &self,
        repo: &RepoRef,
        legacy: LegacyCommit,
    ) -> Result<Commit, RepoError> {
        let (legacy, tree, folders) = self
            .off(move || {
                let (tree, folders) = Dir::from_files(&legacy.files).build();
                (legacy, tree, folders)
            })
            .await?;
        self.write_folders(repo, folders).await?;
        let lfs: Vec<&FileEntry> = legacy.files.values().collect();
        self.record_files(repo, lfs).await?;
        Ok(legacy.with_tree(tree))
    }

    /// The commit `rev` names in `repo` (which must exist). A name that is no branch is
    /// tried as a tag (`v1` finds `refs/tags/v1`).
    pub async fn resolve(
        &self,
        repo: &RepoRef,
        rev: &Revision,
    ) -> Result<(CommitId, Commit), RepoError> {
        let not_found = || RepoError::RevisionNotFound {
            repo: repo.clone(),
            rev: rev.to_string(),
        };
        let id = match rev {
            Revision::Commit(id) => *id,
            Revision::Branch(b) => self.ref_head(repo, b).await?.ok_or_else(not_found)?.commit,
        };
        let commit = self.commit(repo, &id).await?.ok_or_else(not_found)?;
        Ok((id, commit))
    }

    /// The folder whose tree is `id`.
    pub async fn folder(&self, repo: &RepoRef, id: &ObjectId) -> Result<Arc<Folder>, RepoError> {
        let key = (repo.clone(), *id);
        if let Some(Cached::Folder(f)) = self.cache.get(&key) {
            return Ok(f);
        }
        let missing = |what: &str| {
            RepoError::Store(CasError::storage(format!(
                "repository {repo}: the {what} of tree {id} is referenced but not stored"
            )))
        };
        let (tree, facts) = futures_util::try_join!(
            self.store.object(repo, RepoObject::Tree, id),
            self.store.object(repo, RepoObject::Facts, id),
        )?;
        let tree = tree.ok_or_else(|| missing("object"))?;
        let facts = facts.ok_or_else(|| missing("facts"))?;
        let id_ = *id;
        let large = tree.len() > OFFLOAD_DECODE;
        let decode = move || {
            let body = crate::git::unframe("tree", &id_, &tree)?;
            Folder::decode(body, &facts)
        };
        let folder = if large {
            self.off(decode).await?
        } else {
            decode()
        }
        .map_err(|e| {
            RepoError::Store(CasError::storage_with(
                format!("repository {repo}, tree {id}"),
                e,
            ))
        })?;
        let folder = Arc::new(folder);
        self.cache.insert(key, Cached::Folder(Arc::clone(&folder)));
        Ok(folder)
    }

    /// What `path` is in the tree `root`: a file with its facts, a folder, or nothing.
    /// Reads one folder per component of the path.
    pub async fn entry(
        &self,
        repo: &RepoRef,
        root: &ObjectId,
        path: &RepoPath,
    ) -> Result<Option<Item>, RepoError> {
        let mut folder = self.folder(repo, root).await?;
        let comps: Vec<&str> = path.components().collect();
        for (i, c) in comps.iter().enumerate() {
            let Some(ix) = folder.find(c) else {
                return Ok(None);
            };
            let item = folder.entries[ix].1.clone();
            if i + 1 == comps.len() {
                return Ok(Some(item));
            }
            match item {
                Item::Folder(id) => folder = self.folder(repo, &id).await?,
                Item::File(_) => return Ok(None),
            }
        }
        Ok(None)
    }

    /// Up to `limit` entries of `folder` (the root for `None`) of tree `root`, in git's
    /// order: its direct children, or with `recursive` everything below it (a folder
    /// before its content), starting after `after` (the last path of the previous page).
    /// `None` if `folder` is not a folder of the tree. Costs the folders the page passes
    /// through, not the size of the tree.
    pub async fn list(
        &self,
        repo: &RepoRef,
        root: &ObjectId,
        folder: Option<&RepoPath>,
        recursive: bool,
        after: Option<&RepoPath>,
        limit: usize,
    ) -> Result<Option<Page>, RepoError> {
        let base = match folder {
            None => *root,
            Some(f) => match self.entry(repo, root, f).await? {
                Some(Item::Folder(id)) => id,
                _ => return Ok(None),
            },
        };
        let prefix = folder
            .map(|f| format!("{}/", f.as_str()))
            .unwrap_or_default();
        let top = self.folder(repo, &base).await?;
        let rel = after.and_then(|a| a.as_str().strip_prefix(prefix.as_str()));
        let mut stack = match rel {
            Some(rel) => self.resume(repo, &prefix, top, rel, recursive).await?,
            None => vec![(prefix, top, 0)],
        };
        let mut entries = Vec::new();
        while let Some((path, f, i)) = stack.last_mut() {
            if *i >= f.entries.len() {
                stack.pop();
                continue;
            }
            if entries.len() >= limit {
                break;
            }
            let (name, item) = f.entries[*i].clone();
            *i += 1;
            let full = format!("{path}{name}");
            if let (Item::Folder(id), true) = (&item, recursive) {
                let child = self.folder(repo, id).await?;
                stack.push((format!("{full}/"), child, 0));
            }
            entries.push(Listed { path: full, item });
        }
        // A page that ends exactly at the end of the listing says so (no empty last page).
        while stack.last().is_some_and(|(_, f, i)| *i >= f.entries.len()) {
            stack.pop();
        }
        Ok(Some(Page {
            entries,
            more: !stack.is_empty(),
        }))
    }

    /// The listing stack that goes on after `rel` (relative to `prefix`, whose folder is
    /// `top`): for each folder on the way down, the index after the component in it.
    async fn resume(
        &self,
        repo: &RepoRef,
        prefix: &str,
        top: Arc<Folder>,
        rel: &str,
        recursive: bool,
    ) -> Result<Vec<(String, Arc<Folder>, usize)>, RepoError> {
        let comps: Vec<&str> = rel.split('/').collect();
        let comps = if recursive { &comps[..] } else { &comps[..1] };
        let mut stack = Vec::new();
        let (mut cur, mut path) = (top, prefix.to_string());
        for (i, c) in comps.iter().enumerate() {
            stack.push((path.clone(), Arc::clone(&cur), cur.resume_after(c)));
            let child = match cur.find(c).map(|ix| &cur.entries[ix].1) {
                Some(Item::Folder(id)) if recursive => *id,
                _ => break,
            };
            let child = self.folder(repo, &child).await?;
            path = format!("{path}{c}/");
            if i + 1 == comps.len() {
                // The page ended at this folder: its content comes next.
                stack.push((path, child, 0));
                break;
            }
            cur = child;
        }
        Ok(stack)
    }

    /// Every file of tree `root` with its path, sorted by path. Reads every folder, a
    /// level at a time.
    pub async fn files(
        &self,
        repo: &RepoRef,
        root: &ObjectId,
    ) -> Result<Vec<(String, FileEntry)>, RepoError> {
        let mut out = Vec::new();
        let mut level = vec![(String::new(), *root)];
        while !level.is_empty() {
            let ids: Vec<ObjectId> = level.iter().map(|(_, id)| *id).collect();
            let folders = self.folders(repo, &ids).await?;
            let mut next = Vec::new();
            for ((p, _), f) in level.iter().zip(folders) {
                for (name, item) in &f.entries {
                    match item {
                        Item::File(e) => out.push((format!("{p}{name}"), e.clone())),
                        Item::Folder(id) => next.push((format!("{p}{name}/"), *id)),
                    }
                }
            }
            level = next;
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        Ok(out)
    }

    /// The tree `base` (empty for `None`) with the folders `ops` pass through loaded, a
    /// depth at a time, each depth's folders read concurrently.
    pub(crate) async fn load_for(
        &self,
        repo: &RepoRef,
        base: Option<ObjectId>,
        ops: &[Operation],
    ) -> Result<Dir, RepoError> {
        let mut root = match base {
            Some(id) => Dir::read(id, &*self.folder(repo, &id).await?),
            None => Dir::default(),
        };
        let wanted = folders_to_load(ops);
        let mut depth = 1;
        while wanted.iter().any(|w| w.len() == depth) {
            let mut stored = Vec::new();
            for w in wanted.iter().filter(|w| w.len() == depth) {
                let comps: Vec<&str> = w.iter().map(String::as_str).collect();
                let (last, parent) = comps.split_last().expect("depth >= 1");
                if let Some(Slot::Stored(id)) =
                    root.loaded_mut(parent).and_then(|d| d.items.get(*last))
                {
                    stored.push((w.clone(), *id));
                }
            }
            let ids: Vec<ObjectId> = stored.iter().map(|(_, id)| *id).collect();
            let folders = self.folders(repo, &ids).await?;
            for ((w, id), folder) in stored.into_iter().zip(folders) {
                let comps: Vec<&str> = w.iter().map(String::as_str).collect();
                let (last, parent) = comps.split_last().expect("depth >= 1");
                if let Some(dir) = root.loaded_mut(parent) {
                    dir.items
                        .insert((*last).to_string(), Slot::Loaded(Dir::read(id, &folder)));
                }
            }
            depth += 1;
        }
        Ok(root)
    }

    /// The folders of trees `ids`, in order, read [`CONCURRENT_OBJECTS`] at a time.
    async fn folders(
        &self,
        repo: &RepoRef,
        ids: &[ObjectId],
    ) -> Result<Vec<Arc<Folder>>, RepoError> {
        let mut out = Vec::with_capacity(ids.len());
        for chunk in ids.chunks(CONCURRENT_OBJECTS) {
            let read = chunk.iter().map(|id| self.folder(repo, id));
            out.extend(futures_util::future::try_join_all(read).await?);
        }
        Ok(out)
    }

    /// Store folders a commit made, [`CONCURRENT_OBJECTS`] at a time.
    pub(crate) async fn write_folders(
        &self,
        repo: &RepoRef,
        mut folders: Vec<NewFolder>,
    ) -> Result<(), RepoError> {
        while !folders.is_empty() {
            let rest = folders.split_off(folders.len().min(CONCURRENT_OBJECTS));
            let batch = std::mem::replace(&mut folders, rest);
            let writes = batch.into_iter().map(|f| self.write_folder(repo, f));
            futures_util::future::try_join_all(writes).await?;
        }
        Ok(())
    }

    /// Store one folder: facts before the tree, so whoever finds a tree finds its facts.
    /// It is cached too, as it will be read next.
    async fn write_folder(&self, repo: &RepoRef, f: NewFolder) -> Result<(), RepoError> {
        self.store
            .put_object(repo, RepoObject::Facts, &f.id, f.facts.into())
            .await?;
        self.store
            .put_object(repo, RepoObject::Tree, &f.id, f.tree.into())
            .await?;
        self.cache
            .insert((repo.clone(), f.id), Cached::Folder(Arc::new(f.folder)));
        Ok(())
    }

    /// Remember `files` as this repository's: every file as one it references (what its
    /// CAS tokens may read), the LFS ones also by sha256 (what the LFS batch asks).
    pub(crate) async fn record_files(
        &self,
        repo: &RepoRef,
        files: Vec<&FileEntry>,
    ) -> Result<(), RepoError> {
        let mut lfs: Vec<([u8; 32], xet_hash::MerkleHash)> = Vec::new();
        let mut all: Vec<xet_hash::MerkleHash> = Vec::new();
        for e in files {
            all.push(e.xet_hash);
            if e.storage != Storage::Lfs {
                continue;
            }
            lfs.push((*e.sha256.as_bytes(), e.xet_hash));
        }
        all.sort();
        all.dedup();
        lfs.sort();
        lfs.dedup();
        for chunk in all.chunks(CONCURRENT_OBJECTS) {
            let writes = chunk
                .iter()
                .map(|f| self.store.record_file_reference(repo, f));
            futures_util::future::try_join_all(writes).await?;
        }
        for chunk in lfs.chunks(CONCURRENT_OBJECTS) {
            let writes = chunk
                .iter()
                .map(|(sha, xet)| self.store.record_lfs_file(repo, sha, xet));
            futures_util::future::try_join_all(writes).await?;
        }
        Ok(())
    }

    /// Apply `ops` on top of `branch` and move it to the result.
    ///
    /// With `parent`, the branch must be at that commit (else [`RepoError::ParentMismatch`]).
    /// Without, the commit is re-applied to whatever head it finds until its
    /// compare-and-swap wins, so concurrent commits all land, in some order. Costs the
    /// folders the operations pass through, not the size of the tree.
    pub async fn commit_to_branch(
        &self,
        repo: &RepoRef,
        branch: &BranchName,
        parent: Option<CommitId>,
        ops: &[Operation],
        meta: &CommitMeta,
    ) -> Result<Committed, RepoError> {
        let shared: Arc<[Operation]> = ops.into();
        let added: Vec<&FileEntry> = ops
            .iter()
            .filter_map(|op| match op {
                Operation::Add { entry, .. } => Some(entry),
                _ => None,
            })
            .collect();
        self.refuse_tag(repo, branch).await?;
        self.record_files(repo, added).await?;
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let head = self.store.branch(repo, branch).await?;
            if let (Some(parent), Some(head)) = (parent, head)
                && parent != head.commit
            {
                return Err(RepoError::ParentMismatch {
                    repo: repo.clone(),
                    branch: branch.clone(),
                    parent,
                    head: head.commit,
                });
            }
            let base = match head {
                Some(h) => Some(self.commit(repo, &h.commit).await?.ok_or_else(|| {
                    CasError::storage(format!(
                        "branch {branch} of {repo} points at commit {}, which is not stored",
                        h.commit
                    ))
                })?.tree),
                None => None,
            };
            let root = self.load_for(repo, base, ops).await?;
            let (ops_, meta_) = (Arc::clone(&shared), meta.clone());
            let parent_id = head.map(|h| h.commit);
            let (folders, id, bytes, commit) = self
                .off(move || {
                    let mut root = root;
                    apply(&mut root, &ops_)?;
                    let (tree, folders) = root.build();
                    let commit = Commit {
                        tree,
                        parent: parent_id,
                        summary: meta_.summary,
                        description: meta_.description,
                        author: meta_.author,
                        created_at: meta_.created_at,
                    };
                    let (id, bytes) = commit.encode();
                    Ok::<_, RepoError>((folders, id, bytes, commit))
                })
                .await??;
            self.write_folders(repo, folders).await?;
            self.store
                .put_object(repo, RepoObject::Commit, &id, bytes.into())
                .await?;
            if self
                .store
                .update_branch(repo, branch, head.as_ref(), &id)
                .await?
                .is_some()
            {
                self.cache
                    .insert((repo.clone(), id), Cached::Commit(Arc::new(commit.clone())));
                return Ok(Committed { id, commit });
            }
        }
        Err(RepoError::Contention {
            repo: repo.clone(),
            branch: branch.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// Where ref `name` points: the branch (or `refs/...` ref) of that name, else the tag
    /// of that name.
    pub async fn ref_head(
        &self,
        repo: &RepoRef,
        name: &BranchName,
    ) -> Result<Option<BranchHead>, RepoError> {
        if let Some(head) = self.store.branch(repo, name).await? {
            return Ok(Some(head));
        }
        match TagName::parse(name.as_str()) {
            Ok(tag) if name.is_plain() => Ok(self.store.branch(repo, &tag.as_ref_name()).await?),
            _ => Ok(None),
        }
    }

    /// [`RepoError::IsTag`] if `name` is a tag's ref, or no branch but the name of a tag:
    /// tags take no commits, and no branch takes a tag's name.
    async fn refuse_tag(&self, repo: &RepoRef, name: &BranchName) -> Result<(), RepoError> {
        let is_tag = match name.tag() {
            Some(_) => true,
            None if name.is_plain() && self.store.branch(repo, name).await?.is_none() => {
                match TagName::parse(name.as_str()) {
                    Ok(tag) => self.store.branch(repo, &tag.as_ref_name()).await?.is_some(),
                    Err(_) => false,
                }
            }
            None => false,
        };
        if is_tag {
            return Err(RepoError::IsTag {
                repo: repo.clone(),
                name: name.clone(),
            });
        }
        Ok(())
    }

    /// Create tag `tag` at the commit `from` names, keeping `message` with it. A tag
    /// never takes the name of a branch, nor a branch that of a tag, so a name resolves
    /// to one commit.
    pub async fn create_tag(
        &self,
        repo: &RepoRef,
        tag: &TagName,
        from: &Revision,
        message: Option<&str>,
    ) -> Result<CommitId, RepoError> {
        let (id, _) = self.resolve(repo, from).await?;
        let exists = || RepoError::TagExists {
            repo: repo.clone(),
            tag: tag.to_string(),
        };
        let as_branch = tag.as_branch_name();
        if self.store.branch(repo, &as_branch).await?.is_some() {
            return Err(RepoError::BranchExists {
                repo: repo.clone(),
                branch: as_branch,
            });
        }
        let created = self
            .store
            .write_ref(repo, &tag.as_ref_name(), None, Some(&id), message)
            .await?;
        created.map(|_| id).ok_or_else(exists)
    }

    /// Delete ref `name` (a branch, a tag's `refs/tags/X`, a pull request's ref) wherever
    /// it points; [`RepoError::RevisionNotFound`] if there is none. The default branch
    /// stays.
    pub async fn delete_ref(&self, repo: &RepoRef, name: &BranchName) -> Result<(), RepoError> {
        if name.as_str() == BranchName::MAIN {
            return Err(RepoError::DefaultBranch {
                repo: repo.clone(),
                name: name.clone(),
            });
        }
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let Some(head) = self.store.branch(repo, name).await? else {
                return Err(RepoError::RevisionNotFound {
                    repo: repo.clone(),
                    rev: name.to_string(),
                });
            };
            if self.store.delete_branch(repo, name, &head).await? {
                return Ok(());
            }
        }
        Err(RepoError::Contention {
            repo: repo.clone(),
            branch: name.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// Commits from `start` back along first parents, newest first: `limit` of them
    /// after skipping `skip`, and whether more follow.
    pub async fn history(
        &self,
        repo: &RepoRef,
        start: CommitId,
        skip: usize,
        limit: usize,
    ) -> Result<(Vec<(CommitId, Commit)>, bool), RepoError> {
        let mut out = Vec::with_capacity(limit.min(1024));
        let mut next = Some(start);
        let mut seen = 0usize;
        while let Some(id) = next {
            if out.len() == limit {
                return Ok((out, true));
            }
            let commit = self.history_commit(repo, &id).await?;
            next = commit.parent;
            if seen >= skip {
                out.push((id, commit));
            }
            seen += 1;
        }
        Ok((out, false))
    }

    /// The last commit that changed each of `paths` (all within `folder`, the root for
    /// `None`), walking back from `start` along first parents: the newest commit whose
    /// parent holds something else at that path (or whose parent does not exist). A commit
    /// that leaves `folder`'s tree as it was is passed over without looking at the paths.
    /// At most `max_commits` are read; a path not settled by then is left out.
    pub async fn last_commits(
        &self,
        repo: &RepoRef,
        start: CommitId,
        folder: Option<&RepoPath>,
        paths: &[RepoPath],
        max_commits: usize,
    ) -> Result<Vec<Option<(CommitId, Commit)>>, RepoError> {
        let mut out: Vec<Option<(CommitId, Commit)>> = vec![None; paths.len()];
        let mut open: Vec<usize> = (0..paths.len()).collect();
        let mut id = start;
        let mut commit = self.history_commit(repo, &id).await?;
        for _ in 0..max_commits {
            if open.is_empty() {
                break;
            }
            let Some(parent_id) = commit.parent else {
                for &i in &open {
                    out[i] = Some((id, commit.clone()));
                }
                break;
            };
            let parent = self.history_commit(repo, &parent_id).await?;
            if self.folder_item(repo, &commit.tree, folder).await?
                != self.folder_item(repo, &parent.tree, folder).await?
            {
                let mut still = Vec::with_capacity(open.len());
                for i in open {
                    let now = self.entry(repo, &commit.tree, &paths[i]).await?;
                    let before = self.entry(repo, &parent.tree, &paths[i]).await?;
                    if now != before {
                        out[i] = Some((id, commit.clone()));
                    } else {
                        still.push(i);
                    }
                }
                open = still;
            }
            (id, commit) = (parent_id, parent);
        }
        Ok(out)
    }

    /// What `folder` is in tree `root` (the root itself for `None`).
    async fn folder_item(
        &self,
        repo: &RepoRef,
        root: &ObjectId,
        folder: Option<&RepoPath>,
    ) -> Result<Option<Item>, RepoError> {
        match folder {
            None => Ok(Some(Item::Folder(*root))),
            Some(f) => self.entry(repo, root, f).await,
        }
    }

    /// Commit `id`, which a history names, so must be stored.
    async fn history_commit(&self, repo: &RepoRef, id: &CommitId) -> Result<Commit, RepoError> {
        self.commit(repo, id).await?.ok_or_else(|| {
            RepoError::Store(CasError::storage(format!(
                "repository {repo}: commit {id} is named in the history but not stored"
            )))
        })
    }

    /// Replace the history of `branch` by one commit holding its current tree (what the
    /// old commits alone held is then garbage, for the store's GC). The new commit.
    pub async fn super_squash(
        &self,
        repo: &RepoRef,
        branch: &BranchName,
        meta: &CommitMeta,
    ) -> Result<Committed, RepoError> {
        for _ in 0..MAX_COMMIT_ATTEMPTS {
            let head = self.store.branch(repo, branch).await?.ok_or_else(|| {
                RepoError::RevisionNotFound {
                    repo: repo.clone(),
                    rev: branch.to_string(),
                }
            })?;
            let (_, current) = self.resolve(repo, &Revision::Commit(head.commit)).await?;
            let commit = Commit {
                tree: current.tree,
                parent: None,
                summary: meta.summary.clone(),
                description: meta.description.clone(),
                author: meta.author.clone(),
                created_at: meta.created_at,
            };
            let (id, bytes) = commit.encode();
            self.store
                .put_object(repo, RepoObject::Commit, &id, bytes.into())
                .await?;
            if self
                .store
                .update_branch(repo, branch, Some(&head), &id)
                .await?
                .is_some()
            {
                return Ok(Committed { id, commit });
            }
        }
        Err(RepoError::Contention {
            repo: repo.clone(),
            branch: branch.clone(),
            attempts: MAX_COMMIT_ATTEMPTS,
        })
    }

    /// Create `branch` at the commit `from` names.
    pub async fn create_branch(
        &self,
        repo: &RepoRef,
        branch: &BranchName,
        from: &Revision,
    ) -> Result<BranchHead, RepoError> {
        let (id, _) = self.resolve(repo, from).await?;
        match self.refuse_tag(repo, branch).await {
            // A branch may not take a tag's name.
            Err(RepoError::IsTag { name, .. }) => {
                return Err(RepoError::TagExists {
                    repo: repo.clone(),
                    tag: name.tag().unwrap_or(name.as_str()).to_string(),
                });
            }
            other => other?,
        }
        self.store
            .update_branch(repo, branch, None, &id)
            .await?
            .ok_or_else(|| RepoError::BranchExists {
                repo: repo.clone(),
                branch: branch.clone(),
            })
    }
}

/// [`RepoError::Moving`] if `record` is of a bucket being moved: it takes no writes.
pub(crate) fn refuse_moving(repo: &RepoRef, record: &RepoRecord) -> Result<(), RepoError> {
    match &record.moving_to {
        Some(to) => Err(RepoError::Moving {
            repo: repo.clone(),
            to: to.clone(),
        }),
        None => Ok(()),
    }
}
