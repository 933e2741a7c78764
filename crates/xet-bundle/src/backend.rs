//! [`BundleBackend`]: a bundle as a read-only object backend.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use xet_cas::{ByteRange, CasError, Result};
use xet_store::{META_PREFIX, ObjectBackend, ObjectKey, check_range};

use crate::{Bundle, BundleError, Kind, OpenLimits};

/// A read-only [`ObjectBackend`] over a [`Bundle`]: `xorbs/<hash>` and
/// `shards/<hash>.mdb` are the manifest's xorbs and shards (looked up by the hash's raw
/// bytes, a key of the other kind is absent), served as slices of the mapped file.
///
/// Writes: a put of an object the bundle holds is `Ok(false)` (put-if-absent of something
/// present); any other put or delete of a xorb, shard or Hub object is
/// [`CasError::ReadOnly`], which `xet serve` answers with `405` and the CLI with its
/// read-only exit code.
///
/// `meta/` keys live in an in-memory overlay instead, because `StoreCas::open` needs a
/// dedup secret and creates one when the backend has none. Each process serving a bundle
/// therefore draws its own random secret: dedup answers and the Hub's CAS tokens (derived
/// from it) are valid only for that process, which is all a read-only server needs.
/// Deriving the secret from the bundle instead would make it known to everyone holding
/// the file, and with it the key that signs tokens.
#[derive(Debug)]
pub struct BundleBackend {
    bundle: Arc<Bundle>,
    /// Every listed object's key, sorted (what `list` filters).
    keys: Vec<ObjectKey>,
    meta: Mutex<BTreeMap<ObjectKey, Bytes>>,
}

impl BundleBackend {
    pub fn new(bundle: Arc<Bundle>) -> Self {
        let mut keys: Vec<ObjectKey> = bundle
            .manifest()
            .objects()
            .map(|(kind, h)| match kind {
                Kind::Xorb => ObjectKey::xorb(&h),
                Kind::Shard => ObjectKey::shard(&h),
            })
            .collect();
        keys.sort();
        BundleBackend {
            bundle,
            keys,
            meta: Mutex::new(BTreeMap::new()),
        }
    }

    /// Open and check the bundle at `path` (on the blocking pool: mapping, the hash
    /// function and the manifest are CPU and I/O work).
    pub async fn open(path: &Path, limits: OpenLimits) -> std::result::Result<Self, BundleError> {
        let p = path.to_path_buf();
        let bundle = tokio::task::spawn_blocking(move || Bundle::open(&p, &limits))
            .await
            .map_err(BundleError::Task)??;
        Ok(Self::new(Arc::new(bundle)))
    }

    pub fn bundle(&self) -> &Arc<Bundle> {
        &self.bundle
    }

    fn object(&self, key: &ObjectKey) -> Option<Bytes> {
        if let Some(h) = key.xorb_hash() {
            return self.bundle.object(Kind::Xorb, &h);
        }
        let h = key.shard_hash()?;
        self.bundle.object(Kind::Shard, &h)
    }

    fn is_meta(key: &ObjectKey) -> bool {
        key.as_str().starts_with(META_PREFIX)
    }

    fn overlay(&self) -> MutexGuard<'_, BTreeMap<ObjectKey, Bytes>> {
        // Single inserts: a panic elsewhere cannot leave the map half-updated.
        self.meta.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn read_only(&self, key: &ObjectKey) -> CasError {
        CasError::ReadOnly(format!(
            "bundle {} cannot store {key}: a bundle is read-only (import it into a store to \
             add to it)",
            self.bundle.path().display()
        ))
    }

    fn get_now(&self, key: &ObjectKey) -> Option<Bytes> {
        if Self::is_meta(key) {
            return self.overlay().get(key).cloned();
        }
        self.object(key)
    }
}

#[async_trait::async_trait]
impl ObjectBackend for BundleBackend {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        if Self::is_meta(key) {
            let mut map = self.overlay();
            if map.contains_key(key) {
                return Ok(false);
            }
            map.insert(key.clone(), data);
            return Ok(true);
        }
        if self.object(key).is_some() {
            return Ok(false);
        }
        Err(self.read_only(key))
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
        Ok(self.get_now(key))
    }

    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
        let Some(obj) = self.get_now(key) else {
            return Ok(None);
        };
        check_range(key, range, obj.len() as u64)?;
        Ok(Some(obj.slice(range.start as usize..range.end as usize)))
    }

    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
        Ok(self.get_now(key).map(|b| b.len() as u64))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
        let mut out: Vec<ObjectKey> = self
            .keys
            .iter()
            .filter(|k| k.as_str().starts_with(prefix))
            .cloned()
            .collect();
        out.extend(
            self.overlay()
                .keys()
                .filter(|k| k.as_str().starts_with(prefix))
                .cloned(),
        );
        out.sort();
        Ok(out)
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool> {
        Err(self.read_only(key))
    }
}
