//! The in-memory index: rebuilt from the stored shards on open, updated after each
//! successful write. Locks are std locks held for map operations only, never across an
//! `.await`.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, RwLock};

use xet_hash::MerkleHash;

use super::format::ShardContent;
use super::meta::XorbMeta;
use super::plan::{FileEntry, StoredTerm};

/// Counts, for logs and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IndexStats {
    pub files: usize,
    pub shards: usize,
    /// Xorbs whose size is known (stored and seen since open).
    pub xorbs: usize,
    /// Chunks findable through global dedup.
    pub dedup_chunks: usize,
    /// Xorb footers currently cached.
    pub cached_metas: usize,
}

#[derive(Default)]
struct State {
    files: HashMap<MerkleHash, Arc<FileEntry>>,
    /// Dedup-eligible chunk → xorbs holding it (no duplicates, first registered first).
    dedup: HashMap<MerkleHash, Vec<MerkleHash>>,
    /// Xorbs whose hash-eligible chunks are in `dedup`.
    dedup_xorbs: HashSet<MerkleHash>,
    shards: HashSet<MerkleHash>,
    /// Chunk region length of every xorb known to be stored.
    xorb_sizes: HashMap<MerkleHash, u64>,
    /// sha256 (FileMetadataExt) → files whose shards claim it (no duplicates, first
    /// registered first). Claims only: nothing here has read the files.
    sha256: HashMap<[u8; 32], Vec<MerkleHash>>,
    /// Shard → the files it registers; file → the shards registering it, the one its
    /// entry in `files` came from first. What removing a reclaimed shard needs.
    shard_files: HashMap<MerkleHash, Vec<MerkleHash>>,
    file_shards: HashMap<MerkleHash, Vec<MerkleHash>>,
    /// Xorbs condemned by garbage collection: left out of dedup answers.
    condemned_xorbs: HashSet<MerkleHash>,
}

/// Xorb footers, bounded by approximate heap size (oldest inserted evicted first).
struct MetaCache {
    map: HashMap<MerkleHash, Arc<XorbMeta>>,
    order: VecDeque<MerkleHash>,
    bytes: usize,
    budget: usize,
}

impl MetaCache {
    fn insert(&mut self, m: Arc<XorbMeta>) {
        if self.map.contains_key(&m.hash) {
            return;
        }
        self.bytes += m.heap_bytes();
        self.order.push_back(m.hash);
        self.map.insert(m.hash, m);
        while self.bytes > self.budget && self.order.len() > 1 {
            let Some(old) = self.order.pop_front() else {
                break;
            };
            if let Some(o) = self.map.remove(&old) {
                self.bytes -= o.heap_bytes();
            }
        }
    }
}

pub(crate) struct Index {
    state: RwLock<State>,
    metas: Mutex<MetaCache>,
}

impl Index {
    pub(crate) fn new(meta_cache_bytes: usize) -> Self {
        Index {
            state: RwLock::default(),
            metas: Mutex::new(MetaCache {
                map: HashMap::new(),
                order: VecDeque::new(),
                bytes: 0,
                budget: meta_cache_bytes,
            }),
        }
    }

    // Poisoning: every critical section below is a handful of map operations that cannot
    // leave the maps inconsistent if a panic unwinds through them, so recover the guard.
    fn read(&self) -> std::sync::RwLockReadGuard<'_, State> {
        self.state.read().unwrap_or_else(|e| e.into_inner())
    }
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, State> {
        self.state.write().unwrap_or_else(|e| e.into_inner())
    }
    fn cache(&self) -> std::sync::MutexGuard<'_, MetaCache> {
        self.metas.lock().unwrap_or_else(|e| e.into_inner())
    }

    pub(crate) fn file(&self, h: &MerkleHash) -> Option<Arc<FileEntry>> {
        self.read().files.get(h).cloned()
    }

    /// Every shard registering `file`, the one its entry came from first.
    pub(crate) fn file_shards(&self, file: &MerkleHash) -> Vec<MerkleHash> {
        self.read()
            .file_shards
            .get(file)
            .cloned()
            .unwrap_or_default()
    }

    /// The shard `file`'s entry came from.
    pub(crate) fn file_shard(&self, file: &MerkleHash) -> Option<MerkleHash> {
        self.read().file_shards.get(file)?.first().copied()
    }

    pub(crate) fn has_shard(&self, h: &MerkleHash) -> bool {
        self.read().shards.contains(h)
    }

    pub(crate) fn xorb_size(&self, h: &MerkleHash) -> Option<u64> {
        self.read().xorb_sizes.get(h).copied()
    }

    /// Files whose shards claim content with this sha256, first registered first.
    pub(crate) fn files_claiming(&self, sha256: &[u8; 32]) -> Vec<MerkleHash> {
        self.read().sha256.get(sha256).cloned().unwrap_or_default()
    }

    /// Xorbs holding `chunk`, condemned ones left out (a client told of one would
    /// upload a shard naming it, which is refused).
    pub(crate) fn dedup_xorbs(&self, chunk: &MerkleHash) -> Option<Vec<MerkleHash>> {
        let st = self.read();
        let xorbs: Vec<MerkleHash> = st
            .dedup
            .get(chunk)?
            .iter()
            .filter(|x| !st.condemned_xorbs.contains(*x))
            .copied()
            .collect();
        (!xorbs.is_empty()).then_some(xorbs)
    }

    pub(crate) fn cached_meta(&self, h: &MerkleHash) -> Option<Arc<XorbMeta>> {
        self.cache().map.get(h).cloned()
    }

    /// Remember a stored xorb's footer (and size).
    pub(crate) fn note_xorb(&self, m: Arc<XorbMeta>) {
        self.write().xorb_sizes.insert(m.hash, m.region_len());
        self.cache().insert(m);
    }

    /// Index a stored shard. `metas` holds every xorb the shard references. Files already
    /// registered by an earlier shard keep their first terms, unless `verified`: a shard
    /// just uploaded, whose xorbs were all found in the backend, describes its files with
    /// xorbs known to exist, where an earlier shard's may have been reclaimed since.
    pub(crate) fn add_shard(
        &self,
        key: MerkleHash,
        c: &ShardContent,
        metas: &HashMap<MerkleHash, Arc<XorbMeta>>,
        verified: bool,
    ) {
        // Compute outside the lock.
        let mut files = Vec::with_capacity(c.files.len());
        let mut dedup: Vec<(MerkleHash, MerkleHash)> = Vec::new();
        for f in &c.files {
            let terms: Vec<StoredTerm> = f
                .terms
                .iter()
                .map(|t| StoredTerm {
                    xorb: t.xorb,
                    chunks: t.chunks,
                    unpacked: t.unpacked,
                })
                .collect();
            if let Some(t) = f.terms.first()
                && let Some(h) = metas
                    .get(&t.xorb)
                    .and_then(|m| m.chunk_hashes.get(t.chunks.start as usize))
            {
                dedup.push((*h, t.xorb));
            }
            files.push((f.hash, Arc::new(FileEntry::new(terms))));
        }
        let mut st = self.write();
        let registered: Vec<MerkleHash> = files.iter().map(|(h, _)| *h).collect();
        for (h, e) in files {
            let shards = st.file_shards.entry(h).or_default();
            shards.retain(|s| *s != key);
            if verified {
                shards.insert(0, key);
                st.files.insert(h, e);
            } else {
                shards.push(key);
                st.files.entry(h).or_insert(e);
            }
        }
        st.shard_files.insert(key, registered);
        for f in &c.files {
            if let Some(sha256) = f.sha256 {
                let claims = st.sha256.entry(sha256).or_default();
                if !claims.contains(&f.hash) {
                    claims.push(f.hash);
                }
            }
        }
        for m in metas.values() {
            st.xorb_sizes.insert(m.hash, m.region_len());
            if st.dedup_xorbs.insert(m.hash) {
                for h in m
                    .chunk_hashes
                    .iter()
                    .filter(|h| h.is_global_dedup_eligible())
                {
                    dedup.push((*h, m.hash));
                }
            }
        }
        for (chunk, xorb) in dedup {
            let list = st.dedup.entry(chunk).or_default();
            if !list.contains(&xorb) {
                list.push(xorb);
            }
        }
        st.shards.insert(key);
    }

    /// The shards indexed.
    pub(crate) fn shard_set(&self) -> HashSet<MerkleHash> {
        self.read().shards.clone()
    }

    /// Forgets shards that are gone from the backend: their files (a file another
    /// indexed shard registers keeps being known, through that shard, which is returned
    /// to be indexed again) and the sha256 claims of files nothing registers any more.
    pub(crate) fn remove_shards(&self, gone: &[MerkleHash]) -> Vec<MerkleHash> {
        let mut reindex = HashSet::new();
        let mut st = self.write();
        let mut forgotten = HashSet::new();
        for shard in gone {
            st.shards.remove(shard);
            for f in st.shard_files.remove(shard).unwrap_or_default() {
                let Some(shards) = st.file_shards.get_mut(&f) else {
                    continue;
                };
                let was_first = shards.first() == Some(shard);
                shards.retain(|s| s != shard);
                match shards.first().copied() {
                    None => {
                        st.file_shards.remove(&f);
                        st.files.remove(&f);
                        forgotten.insert(f);
                    }
                    Some(other) if was_first => {
                        st.files.remove(&f);
                        reindex.insert(other);
                    }
                    Some(_) => {}
                }
            }
        }
        if !forgotten.is_empty() {
            st.sha256.retain(|_, files| {
                files.retain(|f| !forgotten.contains(f));
                !files.is_empty()
            });
        }
        // Indexed again by the caller: `add_shard` skips nothing it already has.
        for s in &reindex {
            st.shards.remove(s);
        }
        reindex.into_iter().collect()
    }

    /// Forgets xorbs that are gone from the backend (sizes, dedup entries, footers).
    pub(crate) fn remove_xorbs(&self, gone: &HashSet<MerkleHash>) {
        if gone.is_empty() {
            return;
        }
        {
            let mut st = self.write();
            for x in gone {
                st.xorb_sizes.remove(x);
                st.dedup_xorbs.remove(x);
                st.condemned_xorbs.remove(x);
            }
            st.dedup.retain(|_, xorbs| {
                xorbs.retain(|x| !gone.contains(x));
                !xorbs.is_empty()
            });
        }
        let mut cache = self.cache();
        for x in gone {
            if let Some(m) = cache.map.remove(x) {
                cache.bytes -= m.heap_bytes();
            }
        }
        cache.order.retain(|x| !gone.contains(x));
    }

    /// The xorbs garbage collection has condemned (dedup answers leave them out).
    pub(crate) fn set_condemned_xorbs(&self, xorbs: HashSet<MerkleHash>) {
        self.write().condemned_xorbs = xorbs;
    }

    /// Xorbs whose size is known.
    pub(crate) fn known_xorbs(&self) -> HashSet<MerkleHash> {
        self.read().xorb_sizes.keys().copied().collect()
    }

    pub(crate) fn stats(&self) -> IndexStats {
        let cached_metas = self.cache().map.len();
        let st = self.read();
        IndexStats {
            files: st.files.len(),
            shards: st.shards.len(),
            xorbs: st.xorb_sizes.len(),
            dedup_chunks: st.dedup.len(),
            cached_metas,
        }
    }
}
