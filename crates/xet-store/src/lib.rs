//! xet's CAS store: [`StoreCas`] keeps the [`xet_cas::Cas`] contract (validation of every
//! upload, the index, reconstructions, global-dedup answers) and the Hub's
//! [`xet_hub::RepoStore`] contract (repositories, commits, branch heads, sha256 claims) over
//! any [`ObjectBackend`]:
//! [`MemoryBackend`], [`FsBackend`] (the embedded default and `xet serve --store DIR`),
//! or the S3 backend of `xet-store-s3`. The on-disk layout is documented in
//! `docs/STORE.md`.

mod engine;
mod fs;

pub use engine::{
    AgedObject, CheckReport, Count, DEDUP_SECRET_KEY, DedupKeys, GcOptions, GcReport, HUB_PREFIX,
    HubName, IndexStats, META_PREFIX, MemoryBackend, MemoryStore, ObjectBackend, ObjectKey,
    REFRESH_INTERVAL, RepoStats, SHARD_PREFIX, StoreCas, StoreConfig, StoreStats, XORB_PREFIX,
    XorbMeta, check_range, format, hub_branch_name, hub_repo_name,
};
pub use fs::{FsBackend, STALE_TMP_AGE, open_store, open_store_with};
/// The kinds of repository objects an [`ObjectKey::hub_object`] names.
pub use xet_hub::RepoObject;
