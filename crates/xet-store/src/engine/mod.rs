//! The engine: [`StoreCas`] implements [`xet_cas::Cas`] over any [`ObjectBackend`]
//! ([`MemoryBackend`] here, [`crate::FsBackend`], the S3 backend of `xet-store-s3`). See
//! `docs/STORE.md`.

mod audit;
mod backend;
mod cas;
mod chains;
mod claims;
mod condemned;
pub mod format;
mod gc;
mod index;
mod keys;
mod mark;
mod meta;
mod plan;
mod records;
mod repos;
mod validate;

pub use audit::{CheckReport, Count, RepoStats, StoreStats};
pub use backend::{
    AgedObject, HUB_PREFIX, HubName, META_PREFIX, MemoryBackend, ObjectBackend, ObjectKey,
    SHARD_PREFIX, XORB_PREFIX, check_range,
};
pub use cas::{DEDUP_SECRET_KEY, REFRESH_INTERVAL, StoreCas, StoreConfig};
pub use gc::{GcOptions, GcReport};
pub use index::IndexStats;
pub use keys::DedupKeys;
pub use meta::XorbMeta;
pub use repos::{hub_branch_name, hub_repo_name};

/// A store kept entirely in memory.
pub type MemoryStore = StoreCas<MemoryBackend>;

impl MemoryStore {
    /// An empty in-memory store with the default configuration.
    pub async fn in_memory() -> xet_cas::Result<Self> {
        StoreCas::open(MemoryBackend::new()).await
    }
}
