//! The FUSE filesystem (`fuser`'s safe API). Its callbacks run on the session's one
//! thread and never wait for the network there: a call that needs the Hub or the CAS
//! moves its reply into a task on the tokio runtime, so many reads (and files) proceed
//! at once. The tree and the handle tables sit under `std` locks taken briefly and
//! never across an `.await`.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use fuser::{
    FileAttr, FileType, Filesystem, KernelConfig, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, Request, TimeOrNow,
};

use crate::ctx::Ctx;
use crate::read::{Origin, Reader};
use crate::tree::{Content, FileFacts, Kind, ROOT, Tree, TreeError};
use crate::write::{self, Moved, Staged, libc_errno as E};

/// How long the kernel may trust an attribute or a name: short, so that what a
/// refresh changes shows at once.
const TTL: Duration = Duration::from_secs(1);
/// The block size `stat` shows: readers such as `cat` and `cp` size their buffers by it.
const BLOCK: u32 = 1 << 20;
/// Free space a bucket mount reports (a bucket has no quota here).
const BUCKET_FREE: u64 = 1 << 40;

const O_ACCMODE: i32 = 0o3;
const O_RDONLY: i32 = 0;
const O_TRUNC: i32 = 0o1000;
const RENAME_NOREPLACE: u32 = 1;

enum Open {
    Read(Arc<Reader>),
    /// A file open for writing (its bytes are in `State::staged`).
    Write,
}

/// What the callbacks and their tasks share.
pub(crate) struct State {
    pub ctx: Arc<Ctx>,
    pub tree: Mutex<Tree>,
    handles: Mutex<HashMap<u64, Open>>,
    /// Files being written, by inode.
    pub staged: Mutex<HashMap<u64, Staged>>,
    next_fh: AtomicU64,
    /// Bumped by every change made here to the bucket: a refresh whose listing was
    /// asked for before one is dropped (it would undo the change until the next).
    pub generation: AtomicU64,
}

impl State {
    pub fn new(ctx: Arc<Ctx>, tree: Tree) -> State {
        State {
            ctx,
            tree: Mutex::new(tree),
            handles: Mutex::new(HashMap::new()),
            staged: Mutex::new(HashMap::new()),
            next_fh: AtomicU64::new(1),
            generation: AtomicU64::new(0),
        }
    }

    fn changed(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }

    fn tree(&self) -> std::sync::MutexGuard<'_, Tree> {
        self.tree.lock().expect("tree lock")
    }

    fn staged(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Staged>> {
        self.staged.lock().expect("staged lock")
    }

    fn attr(&self, tree: &Tree, ino: u64) -> Option<FileAttr> {
        let n = tree.get(ino)?;
        let writable = self.ctx.writable();
        let (kind, size, perm, nlink) = match &n.kind {
            Kind::Dir(_) => (
                FileType::Directory,
                0,
                if writable { 0o755 } else { 0o555 },
                2,
            ),
            Kind::File(f) => (
                FileType::RegularFile,
                f.size,
                if writable { 0o644 } else { 0o444 },
                1,
            ),
        };
        Some(FileAttr {
            ino,
            size,
            blocks: size.div_ceil(512),
            atime: n.mtime,
            mtime: n.mtime,
            ctime: n.mtime,
            crtime: n.mtime,
            kind,
            perm,
            nlink,
            uid: self.ctx.uid,
            gid: self.ctx.gid,
            rdev: 0,
            blksize: BLOCK,
            flags: 0,
        })
    }
}

pub(crate) struct XetFs {
    pub state: Arc<State>,
    pub rt: tokio::runtime::Handle,
}

fn errno(e: TreeError) -> i32 {
    match e {
        TreeError::NotFound => E::ENOENT,
        TreeError::NotDir => E::ENOTDIR,
        TreeError::IsDir => E::EISDIR,
        TreeError::Exists => E::EEXIST,
        TreeError::NotEmpty => E::ENOTEMPTY,
    }
}

fn name_of(name: &OsStr) -> Result<&str, i32> {
    name.to_str().ok_or(E::EINVAL)
}

impl XetFs {
    fn refuse_writes(&self) -> Option<i32> {
        (!self.state.ctx.writable()).then_some(E::EROFS)
    }

    fn entry(&self, ino: u64, reply: ReplyEntry) {
        let tree = self.state.tree();
        match self.state.attr(&tree, ino) {
            Some(a) => reply.entry(&TTL, &a, 0),
            None => reply.error(E::ENOENT),
        }
    }

    fn new_fh(&self, h: Open) -> u64 {
        let fh = self.state.next_fh.fetch_add(1, Ordering::Relaxed);
        self.state
            .handles
            .lock()
            .expect("handles lock")
            .insert(fh, h);
        fh
    }

    /// Upload `ino`'s staged bytes if they changed since the last upload, then reply.
    fn commit(&self, ino: u64, reply: ReplyEmpty) {
        let state = Arc::clone(&self.state);
        let local = {
            let staged = state.staged();
            match staged.get(&ino) {
                Some(s) if s.dirty => s.tmp.to_path_buf(),
                _ => return reply.ok(),
            }
        };
        self.rt.spawn(async move {
            match commit(&state, ino, local).await {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(e),
            }
        });
    }
}

/// The upload of a staged file, and its facts updated once it is in the bucket.
async fn commit(state: &Arc<State>, ino: u64, local: std::path::PathBuf) -> Result<(), i32> {
    let rel = state.tree().path(ino);
    // Cleared before the upload: a write meanwhile sets it again and is uploaded next.
    if let Some(s) = state.staged().get_mut(&ino) {
        s.dirty = false;
    }
    match write::upload(&state.ctx, local, &rel).await {
        Ok((hash, size)) => {
            state.changed();
            let mut tree = state.tree();
            if let Some(n) = tree.get_mut(ino)
                && let Kind::File(f) = &mut n.kind
            {
                f.content = Content::Xet(hash);
                f.size = size;
            }
            Ok(())
        }
        Err(e) => {
            if let Some(s) = state.staged().get_mut(&ino) {
                s.dirty = true;
            }
            Err(e.errno())
        }
    }
}

impl Filesystem for XetFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), i32> {
        // O_TRUNC comes with the open (`cp` over a file), not as a separate setattr.
        let _ = config.add_capabilities(fuser::consts::FUSE_ATOMIC_O_TRUNC);
        let _ = config.set_max_readahead(1 << 20);
        Ok(())
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        let Ok(name) = name_of(name) else {
            return reply.error(E::ENOENT);
        };
        let found = self.state.tree().lookup(parent, name);
        match found {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        let tree = self.state.tree();
        match self.state.attr(&tree, ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(E::ENOENT),
        }
    }

    fn setattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _mode: Option<u32>,
        _uid: Option<u32>,
        _gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        if let Some(size) = size {
            if let Some(e) = self.refuse_writes() {
                return reply.error(e);
            }
            if let Err(e) = self.truncate(ino, size) {
                return reply.error(e);
            }
        }
        let mut tree = self.state.tree();
        // Times and modes live here only (a bucket keeps no modes; its mtime is set at
        // upload): accepted so that `cp -p` and `touch` work.
        if let (Some(t), Some(n)) = (mtime, tree.get_mut(ino)) {
            n.mtime = match t {
                TimeOrNow::SpecificTime(t) => t,
                TimeOrNow::Now => SystemTime::now(),
            };
        }
        match self.state.attr(&tree, ino) {
            Some(a) => reply.attr(&TTL, &a),
            None => reply.error(E::ENOENT),
        }
    }

    fn mkdir(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        reply: ReplyEntry,
    ) {
        if let Some(e) = self.refuse_writes() {
            return reply.error(e);
        }
        let Ok(name) = name_of(name) else {
            return reply.error(E::EINVAL);
        };
        // A folder is a prefix: it reaches the bucket with its first file.
        let made = self.state.tree().mkdir(parent, name, SystemTime::now());
        match made {
            Ok(ino) => self.entry(ino, reply),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        if let Some(e) = self.refuse_writes() {
            return reply.error(e);
        }
        let Ok(name) = name_of(name) else {
            return reply.error(E::ENOENT);
        };
        let (ino, rel, remote) = {
            let tree = self.state.tree();
            let ino = match tree.lookup(parent, name) {
                Ok(i) => i,
                Err(e) => return reply.error(errno(e)),
            };
            let remote = match tree.get(ino).map(|n| &n.kind) {
                Some(Kind::File(f)) => f.content != Content::Local,
                _ => return reply.error(E::EISDIR),
            };
            (ino, tree.path(ino), remote)
        };
        if self.state.staged().get(&ino).is_some_and(|s| s.writers > 0) {
            // hf-mount's rule too: a file being written cannot be unlinked.
            return reply.error(E::EPERM);
        }
        let state = Arc::clone(&self.state);
        self.rt.spawn(async move {
            if remote && let Err(e) = write::delete(&state.ctx, &[rel]).await {
                return reply.error(e.errno());
            }
            state.changed();
            state.staged().remove(&ino);
            let _ = state.tree().remove(ino);
            reply.ok();
        });
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        if let Some(e) = self.refuse_writes() {
            return reply.error(e);
        }
        let Ok(name) = name_of(name) else {
            return reply.error(E::ENOENT);
        };
        let mut tree = self.state.tree();
        let r = tree.lookup(parent, name).and_then(|ino| {
            if tree.is_dir(ino) {
                tree.remove(ino)
            } else {
                Err(TreeError::NotDir)
            }
        });
        match r {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        if let Some(e) = self.refuse_writes() {
            return reply.error(e);
        }
        if flags & !RENAME_NOREPLACE != 0 {
            // RENAME_EXCHANGE and RENAME_WHITEOUT have no batch to map to.
            return reply.error(E::EINVAL);
        }
        let (Ok(name), Ok(newname)) = (name_of(name), name_of(newname)) else {
            return reply.error(E::EINVAL);
        };
        let planned = self.plan_rename(parent, name, newparent, newname, flags);
        let (ino, moved) = match planned {
            Ok(p) => p,
            Err(e) => return reply.error(e),
        };
        let state = Arc::clone(&self.state);
        let newname = newname.to_string();
        self.rt.spawn(async move {
            if let Err(e) = write::rename(&state.ctx, &moved).await {
                return reply.error(e.errno());
            }
            state.changed();
            match state.tree().rename(ino, newparent, &newname) {
                Ok(()) => reply.ok(),
                Err(e) => reply.error(errno(e)),
            }
        });
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, flags: i32, reply: ReplyOpen) {
        let facts = {
            let tree = self.state.tree();
            match tree.get(ino).map(|n| &n.kind) {
                Some(Kind::File(f)) => f.clone(),
                Some(Kind::Dir(_)) => return reply.error(E::EISDIR),
                None => return reply.error(E::ENOENT),
            }
        };
        if flags & O_ACCMODE != O_RDONLY {
            if let Some(e) = self.refuse_writes() {
                return reply.error(e);
            }
            return match self.open_for_write(ino, flags & O_TRUNC != 0) {
                Ok(fh) => reply.opened(fh, 0),
                Err(e) => reply.error(e),
            };
        }
        let rel = self.state.tree().path(ino);
        let hash = match facts.content {
            Content::Xet(h) => Some(h),
            Content::Resolve | Content::Local => None,
        };
        if facts.content == Content::Local || self.state.staged().contains_key(&ino) {
            // Written here and not uploaded (or being written): read from the stage.
            return reply.opened(self.new_fh(Open::Write), 0);
        }
        let reader = Reader::new(Origin {
            ctx: Arc::clone(&self.state.ctx),
            path: rel,
            size: facts.size,
            hash,
        });
        // No FOPEN_KEEP_CACHE: the page cache is dropped at each open, so a file a
        // refresh changed is read anew.
        reply.opened(self.new_fh(Open::Read(Arc::new(reader))), 0);
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(E::EINVAL);
        };
        let reader = match self.state.handles.lock().expect("handles lock").get(&fh) {
            Some(Open::Read(r)) => Arc::clone(r),
            Some(Open::Write) => {
                let staged = self.state.staged();
                return match staged.get(&ino).map(|s| s.read(offset, size as usize)) {
                    Some(Ok(b)) => reply.data(&b),
                    Some(Err(_)) => reply.error(E::EIO),
                    None => reply.error(E::EBADF),
                };
            }
            None => return reply.error(E::EBADF),
        };
        self.rt.spawn(async move {
            match reader.read(offset, u64::from(size)).await {
                Ok(b) => reply.data(&b),
                Err(_) => reply.error(E::EIO),
            }
        });
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        _write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        use std::os::unix::fs::FileExt as _;
        let Ok(offset) = u64::try_from(offset) else {
            return reply.error(E::EINVAL);
        };
        let written = {
            let mut staged = self.state.staged();
            let Some(s) = staged.get_mut(&ino) else {
                return reply.error(E::EBADF);
            };
            s.dirty = true;
            s.file.write_all_at(data, offset)
        };
        if let Err(e) = written {
            tracing::error!("writing {}: staging: {e}", self.state.tree().path(ino));
            return reply.error(E::EIO);
        }
        let end = offset + data.len() as u64;
        if let Some(n) = self.state.tree().get_mut(ino)
            && let Kind::File(f) = &mut n.kind
        {
            f.size = f.size.max(end);
            n.mtime = SystemTime::now();
        }
        reply.written(u32::try_from(data.len()).unwrap_or(u32::MAX));
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, fh: u64, _lock: u64, reply: ReplyEmpty) {
        let writes = matches!(
            self.state.handles.lock().expect("handles lock").get(&fh),
            Some(Open::Write)
        );
        if !writes {
            return reply.ok();
        }
        self.commit(ino, reply);
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.commit(ino, reply);
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let handle = self.state.handles.lock().expect("handles lock").remove(&fh);
        if let Some(Open::Write) = handle {
            let mut staged = self.state.staged();
            if flags & O_ACCMODE != O_RDONLY
                && let Some(s) = staged.get_mut(&ino)
            {
                s.writers = s.writers.saturating_sub(1);
            }
            // The stage goes once nothing writes it and it is in the bucket (a failed
            // upload keeps it: the next open for writing or fsync retries).
            if staged.get(&ino).is_some_and(|s| s.writers == 0 && !s.dirty) {
                staged.remove(&ino);
            }
        }
        reply.ok();
    }

    fn create(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        _mode: u32,
        _umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        if let Some(e) = self.refuse_writes() {
            return reply.error(e);
        }
        let Ok(name) = name_of(name) else {
            return reply.error(E::EINVAL);
        };
        let facts = FileFacts {
            size: 0,
            content: Content::Local,
        };
        let made = self
            .state
            .tree()
            .create(parent, name, facts, SystemTime::now());
        let ino = match made {
            Ok(i) => i,
            Err(e) => return reply.error(errno(e)),
        };
        match self.open_for_write(ino, true) {
            Ok(fh) => {
                let tree = self.state.tree();
                match self.state.attr(&tree, ino) {
                    Some(a) => reply.created(&TTL, &a, 0, fh, 0),
                    None => reply.error(E::ENOENT),
                }
            }
            Err(e) => {
                let _ = self.state.tree().remove(ino);
                reply.error(e)
            }
        }
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let tree = self.state.tree();
        let children = match tree.children(ino) {
            Ok(c) => c,
            Err(e) => return reply.error(errno(e)),
        };
        let parent = tree.get(ino).map_or(ROOT, |n| n.parent);
        let mut all = vec![
            (ino, FileType::Directory, ".".to_string()),
            (parent, FileType::Directory, "..".to_string()),
        ];
        all.extend(children.into_iter().map(|(i, n, dir)| {
            let t = if dir {
                FileType::Directory
            } else {
                FileType::RegularFile
            };
            (i, t, n)
        }));
        let skip = usize::try_from(offset).unwrap_or(0);
        for (k, (i, t, n)) in all.into_iter().enumerate().skip(skip) {
            let next = i64::try_from(k + 1).unwrap_or(i64::MAX);
            if reply.add(i, next, t, n) {
                break;
            }
        }
        reply.ok();
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
        let (files, bytes) = self.state.tree().totals();
        let bsize = 4096u64;
        let used = bytes.div_ceil(bsize);
        let free = if self.state.ctx.writable() {
            BUCKET_FREE / bsize
        } else {
            0
        };
        reply.statfs(
            used + free,
            free,
            free,
            files,
            0,
            bsize as u32,
            255,
            bsize as u32,
        );
    }
}

impl XetFs {
    /// A handle that writes `ino`'s stage (a new, empty stage with `truncate`).
    fn open_for_write(&self, ino: u64, truncate: bool) -> Result<u64, i32> {
        let mut staged = self.state.staged();
        if truncate || !staged.contains_key(&ino) {
            if !truncate {
                // hf-mount's streaming rule: an existing file is rewritten whole
                // (O_TRUNC), never patched in place.
                return Err(E::EPERM);
            }
            let s = Staged::new(&self.state.ctx).map_err(|e| {
                tracing::error!("staging a file to write: {e}");
                E::EIO
            })?;
            staged.insert(ino, s);
        }
        if let Some(s) = staged.get_mut(&ino) {
            s.writers += 1;
        }
        drop(staged);
        // Locks are taken one at a time, never one inside the other.
        if truncate
            && let Some(n) = self.state.tree().get_mut(ino)
            && let Kind::File(f) = &mut n.kind
        {
            f.size = 0;
        }
        Ok(self.new_fh(Open::Write))
    }

    /// `truncate` (or `open(O_TRUNC)` without the atomic flag): only a file being
    /// written, or to size 0 (a new stage).
    fn truncate(&self, ino: u64, size: u64) -> Result<(), i32> {
        let mut staged = self.state.staged();
        match staged.get_mut(&ino) {
            Some(s) => {
                s.file.set_len(size).map_err(|_| E::EIO)?;
                s.dirty = true;
            }
            None if size == 0 => {
                let s = Staged::new(&self.state.ctx).map_err(|_| E::EIO)?;
                staged.insert(ino, s);
            }
            None => {
                drop(staged);
                let tree = self.state.tree();
                return match tree.get(ino).map(|n| &n.kind) {
                    Some(Kind::File(f)) if f.size == size => Ok(()),
                    _ => Err(E::EPERM),
                };
            }
        }
        drop(staged);
        if let Some(n) = self.state.tree().get_mut(ino)
            && let Kind::File(f) = &mut n.kind
        {
            f.size = size;
        }
        Ok(())
    }

    /// The inode to move and the bucket files it moves (none for a file not uploaded
    /// yet: its upload goes to the new path).
    fn plan_rename(
        &self,
        parent: u64,
        name: &str,
        newparent: u64,
        newname: &str,
        flags: u32,
    ) -> Result<(u64, Vec<Moved>), i32> {
        let dirty: std::collections::HashSet<u64> = self
            .state
            .staged()
            .iter()
            .filter(|(_, s)| s.dirty)
            .map(|(i, _)| *i)
            .collect();
        let tree = self.state.tree();
        let ino = tree.lookup(parent, name).map_err(errno)?;
        if let Ok(target) = tree.lookup(newparent, newname) {
            if flags & RENAME_NOREPLACE != 0 {
                return Err(E::EEXIST);
            }
            if tree.is_dir(target) && !tree.children(target).map_err(errno)?.is_empty() {
                return Err(E::ENOTEMPTY);
            }
        }
        if !tree.is_dir(newparent) {
            return Err(E::ENOTDIR);
        }
        let from_root = tree.path(ino);
        let to_root = tree.child_path(newparent, newname);
        if tree.is_dir(ino) && format!("{to_root}/").starts_with(&format!("{from_root}/")) {
            return Err(E::EINVAL);
        }
        let mut moved = Vec::new();
        for (i, path) in tree.files_below(ino) {
            let Some(Kind::File(f)) = tree.get(i).map(|n| &n.kind) else {
                continue;
            };
            let Content::Xet(hash) = f.content else {
                continue;
            };
            if dirty.contains(&i) {
                // Being rewritten: its upload goes to the new path; the old one goes.
                return Err(E::EPERM);
            }
            let rest = path.strip_prefix(&from_root).unwrap_or("");
            moved.push(Moved {
                to: format!("{to_root}{rest}"),
                from: path,
                hash,
                size: f.size,
            });
        }
        Ok((ino, moved))
    }
}
