//! [`StoreCas`]: the [`Cas`] contract over an [`ObjectBackend`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use xet_hash::MerkleHash;

use super::backend::{ObjectBackend, ObjectKey, SHARD_PREFIX};
use super::claims::ClaimRefresh;
use super::format;
use super::index::{Index, IndexStats};
use super::keys::{DedupKeys, KeyRing};
use super::meta::XorbMeta;
use super::plan;
use super::validate;
use xet_cas::{ByteRange, Cas, CasError, ObjectKind, Reconstruction, Result, XorbBody, XorbFetch};

/// How often `xet serve` indexes shards that other servers sharing the store wrote
/// (the default of [`StoreCas::spawn_refresh`]'s period).
pub const REFRESH_INTERVAL: Duration = Duration::from_secs(15);

/// Where the dedup-key secret lives.
pub const DEDUP_SECRET_KEY: &str = "dedup-secret";

/// Tuning of a [`StoreCas`].
#[derive(Debug, Clone)]
pub struct StoreConfig {
    /// How dedup answers key their chunk hashes (default: rotating daily).
    pub dedup_keys: DedupKeys,
    /// `shard_key_expiry` of dedup answers = now + this (default 7 days).
    pub dedup_expiry: Duration,
    /// Most xorbs listed in one dedup answer (default 4).
    pub max_dedup_xorbs: usize,
    /// Budget for cached xorb footers, in bytes (default 256 MiB).
    pub meta_cache_bytes: usize,
    /// Largest shard upload accepted (default 1 GiB).
    pub max_shard_bytes: u64,
    /// Index every stored shard on open (default). Off only for a process that does
    /// nothing but collect garbage (`xet store gc`): [`StoreCas::gc`] reads what it
    /// needs from the backend, never the index, and indexing reads every shard and the
    /// footer of every xorb it names (on S3, four requests per file). Such a store
    /// answers no reconstruction or dedup query until [`StoreCas::refresh`].
    pub index_on_open: bool,
}

impl Default for StoreConfig {
    fn default() -> Self {
        StoreConfig {
            dedup_keys: DedupKeys::default(),
            dedup_expiry: Duration::from_secs(7 * 24 * 3600),
            max_dedup_xorbs: 4,
            meta_cache_bytes: 256 << 20,
            max_shard_bytes: 1 << 30,
            index_on_open: true,
        }
    }
}

/// A content-addressed store over an object backend: validates every upload, keeps
/// xorbs (footered) and shards (stored form) in the backend, and answers
/// reconstructions and dedup queries from an in-memory index rebuilt on open. It is also
/// the store of Hub repositories (`xet_hub::RepoStore`, in `repos`), kept in the same
/// backend and never cached.
pub struct StoreCas<B> {
    backend: B,
    pub(super) index: Index,
    /// The index refreshes asked for by sha256 lookups (`RepoStore`, in `repos`).
    pub(super) claim_refresh: ClaimRefresh,
    keys: KeyRing,
    config: StoreConfig,
    /// Garbage collection's lists read so far, by name (they never change once written).
    pub(super) condemned_seen:
        std::sync::Mutex<HashMap<ObjectKey, Arc<super::condemned::Condemned>>>,
    /// The doomed lists as last read, and when.
    pub(super) doomed_view:
        std::sync::Mutex<Option<(std::time::Instant, Arc<super::condemned::Named>)>>,
}

impl<B> std::fmt::Debug for StoreCas<B> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreCas")
            .field("config", &self.config)
            .field("index", &self.index.stats())
            .finish()
    }
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| CasError::storage_with("the validation task failed", e))
}

impl<B: ObjectBackend> StoreCas<B> {
    /// Open a store with the default configuration.
    pub async fn open(backend: B) -> Result<Self> {
        Self::open_with(backend, StoreConfig::default()).await
    }

    /// Open a store: load (or create) the dedup secret and index every stored shard
    /// (unless [`StoreConfig::index_on_open`] is off).
    pub async fn open_with(backend: B, config: StoreConfig) -> Result<Self> {
        let index_on_open = config.index_on_open;
        let secret = load_secret(&backend).await?;
        let store = StoreCas {
            keys: KeyRing::new(secret, config.dedup_keys),
            index: Index::new(config.meta_cache_bytes),
            claim_refresh: ClaimRefresh::default(),
            backend,
            config,
            condemned_seen: Default::default(),
            doomed_view: Default::default(),
        };
        if index_on_open {
            let n = store.refresh().await?;
            tracing::debug!(shards = n, "store opened");
        }
        Ok(store)
    }

    pub fn backend(&self) -> &B {
        &self.backend
    }

    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    pub fn stats(&self) -> IndexStats {
        self.index.stats()
    }

    /// Return once a refresh of the index that started at or after `since` has
    /// completed: a miss of a sha256 claim looks again only after one (see
    /// [`ClaimRefresh::since`] for why they are shared and paced).
    pub(super) async fn refresh_since(&self, since: tokio::time::Instant) -> Result<()> {
        self.claim_refresh.since(since, || self.refresh()).await
    }

    /// Index shards written since open (by another process sharing the backend), and
    /// forget those garbage collection removed (with the xorbs it removed), and learn
    /// which xorbs it condemned. Returns how many shards were added. A stored shard that
    /// cannot be read or references a xorb that is no longer stored is skipped with a
    /// warning.
    pub async fn refresh(&self) -> Result<usize> {
        // What the index held before listing: one of those missing from the listing was
        // stored before it and is gone (a shard indexed after the snapshot is not judged).
        let indexed = self.index.shard_set();
        let listed = self.backend.list(SHARD_PREFIX).await?;
        let present: HashSet<MerkleHash> = listed.iter().filter_map(|k| k.shard_hash()).collect();
        let gone: Vec<MerkleHash> = indexed
            .into_iter()
            .filter(|h| !present.contains(h))
            .collect();
        if !gone.is_empty() {
            let known = self.index.known_xorbs();
            let stored: HashSet<MerkleHash> = self
                .backend
                .list(super::backend::XORB_PREFIX)
                .await?
                .iter()
                .filter_map(|k| k.xorb_hash())
                .collect();
            let gone_xorbs: Vec<MerkleHash> =
                known.into_iter().filter(|x| !stored.contains(x)).collect();
            self.forget_objects(&gone, &gone_xorbs).await;
        }
        let mut avoid = self
            .named_now(super::condemned::CONDEMNED_PREFIX)
            .await?
            .xorbs;
        avoid.extend(self.doomed_now().await?.xorbs);
        self.index.set_condemned_xorbs(avoid);
        let mut added = 0;
        for key in listed {
            let Some(h) = key.shard_hash() else { continue };
            if self.index.has_shard(&h) {
                continue;
            }
            match self.index_stored_shard(h, &key).await {
                Ok(true) => added += 1,
                Ok(false) => {}
                Err(e) => {
                    tracing::warn!(shard = %key, error = %xet_cas::error_chain(&e), "skipping stored shard")
                }
            }
        }
        Ok(added)
    }

    /// Forgets shards and xorbs garbage collection deleted; files another shard also
    /// registers are indexed again from it.
    pub(super) async fn forget_objects(&self, shards: &[MerkleHash], xorbs: &[MerkleHash]) {
        self.index.remove_xorbs(&xorbs.iter().copied().collect());
        for h in self.index.remove_shards(shards) {
            let key = ObjectKey::shard(&h);
            if let Err(e) = self.index_stored_shard(h, &key).await {
                tracing::warn!(shard = %key, error = %xet_cas::error_chain(&e), "cannot index a shard again");
            }
        }
    }

    /// Every `every`, index the shards other processes wrote to the backend since
    /// ([`refresh`](Self::refresh)), so files they register become downloadable here,
    /// and remove what writers that died left in the backend
    /// ([`ObjectBackend::remove_abandoned`]: a directory store's partial temporary
    /// files), so a long-running server does not keep them until its next start. Works
    /// over any backend several processes share. The task holds the store weakly and
    /// ends when the store is dropped.
    pub fn spawn_refresh(self: &Arc<Self>, every: Duration) -> tokio::task::JoinHandle<()> {
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            // The first tick fires at once; the store was just indexed on open.
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { break };
                match store.refresh().await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::info!(shards = n, "indexed shards written by other processes")
                    }
                    Err(e) => {
                        tracing::warn!(error = %xet_cas::error_chain(&e), "cannot refresh the store index")
                    }
                }
                if let Err(e) = store.backend.remove_abandoned().await {
                    tracing::warn!(error = %xet_cas::error_chain(&e), "cannot remove abandoned temporary files");
                }
            }
        })
    }

    async fn index_stored_shard(&self, h: MerkleHash, key: &ObjectKey) -> Result<bool> {
        let Some(bytes) = self.backend.get(key).await? else {
            return Ok(false);
        };
        let content = blocking(move || format::parse_stored_shard(&bytes))
            .await?
            .map_err(|e| CasError::storage_with(format!("stored shard {key} does not parse"), e))?;
        let metas = self.metas(&validate::referenced_xorbs(&content)).await?;
        self.index.add_shard(h, &content, &metas, false);
        Ok(true)
    }

    /// A xorb's footer, from the cache or the backend (reading only the object's tail).
    pub(super) async fn meta(&self, h: &MerkleHash) -> Result<Option<Arc<XorbMeta>>> {
        if let Some(m) = self.index.cached_meta(h) {
            return Ok(Some(m));
        }
        let key = ObjectKey::xorb(h);
        let Some(len) = self.backend.size(&key).await? else {
            return Ok(None);
        };
        let corrupt = |e: format::FormatError| CasError::Storage {
            message: format!("stored xorb {h} is unusable"),
            source: Some(e.into_cause()),
        };
        if len < 4 {
            return Err(corrupt(format::FormatError::StoredXorbTooShort { len }));
        }
        let Some(last4) = self
            .backend
            .get_range(&key, ByteRange::new(len - 4, len))
            .await?
        else {
            return Ok(None);
        };
        let tail_len = format::stored_xorb_tail_len(&last4).map_err(corrupt)?;
        if tail_len > len {
            return Err(corrupt(format::FormatError::FooterTooLong {
                tail: tail_len,
                len,
            }));
        }
        let Some(tail) = self
            .backend
            .get_range(&key, ByteRange::new(len - tail_len, len))
            .await?
        else {
            return Ok(None);
        };
        let hash = *h;
        let meta = blocking(move || format::meta_from_stored_tail(&hash, &tail, len))
            .await?
            .map_err(corrupt)?;
        let meta = Arc::new(meta);
        self.index.note_xorb(meta.clone());
        Ok(Some(meta))
    }

    /// Footers of `xorbs`; a missing one is [`CasError::MissingXorb`].
    async fn metas(&self, xorbs: &[MerkleHash]) -> Result<HashMap<MerkleHash, Arc<XorbMeta>>> {
        let mut out = HashMap::with_capacity(xorbs.len());
        for h in xorbs {
            match self.meta(h).await? {
                Some(m) => {
                    out.insert(*h, m);
                }
                None => return Err(CasError::MissingXorb { hash: *h }),
            }
        }
        Ok(out)
    }

    /// Every xorb of `xorbs` is in the backend now; else [`CasError::MissingXorb`].
    async fn all_stored(&self, xorbs: &[MerkleHash]) -> Result<()> {
        use futures_util::{StreamExt, TryStreamExt};
        futures_util::stream::iter(xorbs.iter().copied())
            .map(|h| async move {
                match self.backend.exists(&ObjectKey::xorb(&h)).await? {
                    true => Ok(()),
                    false => Err(CasError::MissingXorb { hash: h }),
                }
            })
            .buffer_unordered(16)
            .try_collect::<Vec<()>>()
            .await?;
        Ok(())
    }

    async fn region_len(&self, h: &MerkleHash) -> Result<Option<u64>> {
        if let Some(n) = self.index.xorb_size(h) {
            return Ok(Some(n));
        }
        Ok(self.meta(h).await?.map(|m| m.region_len()))
    }
}

impl<B: ObjectBackend> StoreCas<B> {
    /// The index entry of `file`. A miss refreshes the index once (shared and paced as
    /// for sha256 claims, see `refresh_since`) before it is believed: another process on
    /// the same backend may have registered the file a moment ago, and a client that
    /// uploaded through one server and reads through another must find it at once.
    async fn file_entry(&self, file: &MerkleHash) -> Result<Option<Arc<plan::FileEntry>>> {
        if let Some(e) = self.index.file(file) {
            return Ok(Some(e));
        }
        self.refresh_since(tokio::time::Instant::now()).await?;
        Ok(self.index.file(file))
    }

    /// A 32-byte key for `context` derived from the store's secret: the same in every
    /// process on this backend (e.g. what signs the CAS tokens `xet serve` mints).
    pub fn derive_key(&self, context: &str) -> [u8; 32] {
        self.keys.derive(context)
    }
}

async fn load_secret<B: ObjectBackend>(backend: &B) -> Result<[u8; 32]> {
    let key = ObjectKey::meta(DEDUP_SECRET_KEY);
    if backend.get(&key).await?.is_none() {
        let s: [u8; 32] = rand::random();
        // Another process may win the race; either way the stored one is used.
        backend
            .put_if_absent(&key, Bytes::copy_from_slice(&s))
            .await?;
    }
    let got = backend
        .get(&key)
        .await?
        .ok_or_else(|| CasError::storage(format!("{key}, the dedup secret, vanished")))?;
    got.as_ref().try_into().map_err(|_| {
        CasError::storage(format!(
            "{key}, the dedup secret, is {} bytes, expected 32",
            got.len()
        ))
    })
}

impl<B: ObjectBackend> StoreCas<B> {
    async fn store_valid_xorb(&self, key: &ObjectKey, valid: format::ValidXorb) -> Result<bool> {
        let inserted = self.backend.put_parts_if_absent(key, valid.stored).await?;
        self.index.note_xorb(Arc::new(valid.meta));
        Ok(inserted)
    }
}

#[async_trait::async_trait]
impl<B: ObjectBackend> Cas for StoreCas<B> {
    /// One path for every xorb upload: already stored, nothing to do; verified as it
    /// arrived, stored as it is; else (in one buffer) verified in full here first.
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> Result<bool> {
        let key = ObjectKey::xorb(hash);
        // The backend, not the index: garbage collection in another process may have
        // deleted a xorb this index still knows, and the client must send it again.
        if self.backend.exists(&key).await? {
            return Ok(false);
        }
        let body = match format::valid_received(body.into_received(), hash) {
            Ok(valid) => return self.store_valid_xorb(&key, valid).await,
            Err(body) => body,
        };
        if body.len() as u64 > format::MAX_XORB_UPLOAD_BYTES {
            let too_large = format::FormatError::XorbTooLarge {
                len: body.len() as u64,
                max: format::MAX_XORB_UPLOAD_BYTES,
            };
            return Err(CasError::invalid_xorb(*hash, too_large));
        }
        let h = *hash;
        let valid = blocking(move || format::validate_xorb(&h, &body))
            .await?
            .map_err(|e| CasError::invalid_xorb(h, e))?;
        self.store_valid_xorb(&key, valid).await
    }

    async fn xorb_size(&self, hash: &MerkleHash) -> Result<Option<u64>> {
        // Asked before an upload ("is it stored?"): the backend decides, since garbage
        // collection in another process may have deleted a xorb this index knows.
        if !self.backend.exists(&ObjectKey::xorb(hash)).await? {
            self.index.remove_xorbs(&std::iter::once(*hash).collect());
            return Ok(None);
        }
        self.region_len(hash).await
    }

    async fn put_shard(&self, shard: Bytes) -> Result<bool> {
        let max = self.config.max_shard_bytes;
        if shard.len() as u64 > max {
            let too_large = format::FormatError::ShardTooLarge {
                len: shard.len() as u64,
                max,
            };
            return Err(CasError::invalid_shard(too_large));
        }
        let upload = blocking(move || format::parse_upload_shard(&shard, max))
            .await?
            .map_err(|e| CasError::InvalidShard {
                source: e.into_cause(),
            })?;
        let referenced = validate::referenced_xorbs(&upload.content);
        // A doomed xorb is missing for a new shard (docs/STORE.md, "Deletion and
        // garbage collection"): read the lists now, not a cached view.
        let doomed = self.doomed_now().await?;
        if let Some(h) = referenced.iter().find(|h| doomed.xorbs.contains(*h)) {
            return Err(CasError::MissingXorb { hash: *h });
        }
        let metas = self.metas(&referenced).await?;
        // Footers may come from the cache, and garbage collection may have deleted a
        // xorb since (another process's run, before this one's refresh): look at the
        // backend itself before registering anything over them.
        self.all_stored(&referenced).await?;
        let metas = Arc::new(metas);
        let m2 = metas.clone();
        let (content, key, stored) = blocking(move || -> Result<_> {
            validate::validate_shard(&upload.content, &m2)?;
            let content = upload.content.clone();
            let (key, stored) = format::stored_shard(upload).map_err(CasError::invalid_shard)?;
            Ok((content, key, stored))
        })
        .await??;
        // Indexed is not enough: another process's garbage collection may have deleted
        // it, and the same content uploaded again must be stored again.
        if self.index.has_shard(&key) && self.backend.exists(&ObjectKey::shard(&key)).await? {
            return Ok(false);
        }
        let inserted = self
            .backend
            .put_if_absent(&ObjectKey::shard(&key), stored)
            .await?;
        self.index.add_shard(key, &content, &metas, true);
        Ok(inserted)
    }

    async fn file_size(&self, file: &MerkleHash) -> Result<Option<u64>> {
        if file.is_zero() {
            return Ok(Some(0));
        }
        // Asked before a file is referenced anew (a commit, a bucket entry, a client
        // skipping an upload): the shard registering it must still be stored, since
        // garbage collection in another process may have deleted it.
        for _ in 0..4 {
            let Some(entry) = self.file_entry(file).await? else {
                return Ok(None);
            };
            match self.index.file_shard(file) {
                Some(shard) if !self.backend.exists(&ObjectKey::shard(&shard)).await? => {
                    self.forget_objects(&[shard], &[]).await;
                }
                _ => {
                    // A file only doomed shards register is about to go: not there for
                    // a new reference.
                    let doomed = self.doomed_recently().await?;
                    let shards = self.index.file_shards(file);
                    if !shards.is_empty() && shards.iter().all(|s| doomed.shards.contains(s)) {
                        return Ok(None);
                    }
                    return Ok(Some(entry.size()));
                }
            }
        }
        Ok(None)
    }

    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> Result<Reconstruction> {
        if file.is_zero() {
            return xet_cas::empty_file_reconstruction(range);
        }
        let entry = self.file_entry(file).await?.ok_or(CasError::NotFound {
            kind: ObjectKind::File,
            hash: *file,
        })?;
        let w = plan::window(file, entry.size(), range)?;
        let idx = plan::overlapping(&entry, w);
        let mut xorbs: Vec<MerkleHash> = entry.terms[idx].iter().map(|t| t.xorb).collect();
        xorbs.sort();
        xorbs.dedup();
        let metas = self.metas(&xorbs).await.map_err(|e| match e {
            CasError::MissingXorb { hash } => CasError::NotFound {
                kind: ObjectKind::Xorb,
                hash,
            },
            e => e,
        })?;
        plan::plan(&entry, w, &metas)
    }

    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> Result<Bytes> {
        let h = fetch.xorb;
        let len = self.region_len(&h).await?.ok_or(CasError::NotFound {
            kind: ObjectKind::Xorb,
            hash: h,
        })?;
        let r = fetch.bytes;
        if r.start > r.end || r.end > len {
            return Err(CasError::RangeNotSatisfiable {
                file: h,
                start: r.start,
                size: len,
            });
        }
        self.backend
            .get_range(&ObjectKey::xorb(&h), r)
            .await?
            .ok_or(CasError::NotFound {
                kind: ObjectKind::Xorb,
                hash: h,
            })
    }

    async fn xorb_footer(&self, fetch: &XorbFetch) -> Result<Option<xet_xorb::XorbFooter>> {
        Ok(self.meta(&fetch.xorb).await?.map(|m| m.footer()))
    }

    async fn dedup_shard(&self, chunk: &MerkleHash) -> Result<Option<Bytes>> {
        let Some(xorbs) = self.index.dedup_xorbs(chunk) else {
            return Ok(None);
        };
        let mut metas = Vec::new();
        for h in xorbs.iter().take(self.config.max_dedup_xorbs.max(1)) {
            // A footer may be cached from before another process's garbage collection
            // deleted the xorb: never send a client to one that is gone.
            if let Some(m) = self.meta(h).await?
                && self.backend.exists(&ObjectKey::xorb(h)).await?
            {
                metas.push(m);
            }
        }
        if metas.is_empty() {
            return Ok(None);
        }
        let now = now_secs();
        let key = self.keys.key_at(now);
        let expiry = now.saturating_add(self.config.dedup_expiry.as_secs());
        let bytes = blocking(move || {
            let refs: Vec<&XorbMeta> = metas.iter().map(|m| m.as_ref()).collect();
            format::dedup_shard(&refs, key, now, expiry)
        })
        .await?
        .map_err(|e| CasError::Storage {
            message: format!("building the dedup answer for chunk {chunk}"),
            source: Some(e.into_cause()),
        })?;
        Ok(Some(bytes))
    }
}
