//! The store behind the embedded CAS and `xet serve`: [`StoreCas`] implements [`crate::Cas`]
//! over any [`ObjectBackend`] ([`MemoryBackend`] here, the filesystem in `xet-store`, an
//! S3-compatible one later). See `docs/STORE.md`.

mod backend;
mod cas;
pub(crate) mod format;
mod index;
mod keys;
mod meta;
mod plan;
mod validate;

pub use backend::{
    META_PREFIX, MemoryBackend, ObjectBackend, ObjectKey, SHARD_PREFIX, XORB_PREFIX, check_range,
};
pub use cas::{DEDUP_SECRET_KEY, StoreCas, StoreConfig};
pub use format::{ReceivedXorb, XorbReceiver};
pub use index::IndexStats;
pub use keys::DedupKeys;
pub use meta::XorbMeta;

/// A store kept entirely in memory.
pub type MemoryStore = StoreCas<MemoryBackend>;

impl MemoryStore {
    /// An empty in-memory store with the default configuration.
    pub async fn in_memory() -> crate::Result<Self> {
        StoreCas::open(MemoryBackend::new()).await
    }
}
