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

    pub(crate) fn dedup_xorbs(&self, chunk: &MerkleHash) -> Option<Vec<MerkleHash>> {
        self.read().dedup.get(chunk).cloned()
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
    /// registered by an earlier shard keep their first terms.
    pub(crate) fn add_shard(
        &self,
        key: MerkleHash,
        c: &ShardContent,
        metas: &HashMap<MerkleHash, Arc<XorbMeta>>,
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
        for (h, e) in files {
            st.files.entry(h).or_insert(e);
        }
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
