//! Bundles: a store's objects in one Software Heritage read shard (`xet-swh`), to carry a
//! model's data where no network reaches, ship a dataset as one checked artifact, or serve
//! a read-only store from a single mapped file.
//!
//! # Layout
//!
//! A bundle is an SWH read shard (`swh-shard` 2.2.1 reads it) whose objects are keyed by
//! the **raw 32 bytes** of their XET hash:
//!
//! ```text
//! key                                   value
//! MANIFEST_KEY ("xet-bundle-manifest"   the manifest, JSON (below)
//!   + 13 zero bytes)
//! raw bytes of a shard hash             the shard, stored form (as the store keeps it)
//! raw bytes of a xorb hash              the xorb, stored form (chunk region + v1 footer)
//! ```
//!
//! The manifest says what each key holds, so a reader never guesses a kind from bytes:
//!
//! ```json
//! { "format": "xet-bundle", "version": 1,
//!   "files": [ { "hash": "<hash string>", "size": 123, "sha256": "<64 hex>", "name": "a.bin" } ],
//!   "xorbs": [ "<hash string>", ... ],
//!   "shards": [ "<hash string>", ... ] }
//! ```
//!
//! Hashes in the manifest (and everywhere xet prints them) are XET hash strings: four
//! little-endian u64 words, 16 hex digits each. SWH keys are the raw bytes, which SWH tools
//! print as plain hex: the same hash is `MerkleHash::to_string()` in the manifest and
//! `MerkleHash::raw_hex()` in `swh-shard ls` (each 8-byte group reversed).
//!
//! # What is here
//!
//! * [`Bundle::open`]: maps the file, validates the SWH header and hash function within
//!   [`OpenLimits`], reads and checks the manifest, and resolves every key it lists through
//!   the SWH index once (a listed object that is absent or out of bounds fails the open).
//! * [`BundleBackend`]: a read-only [`xet_store::ObjectBackend`] over a `Bundle`, so
//!   `StoreCas::open(BundleBackend)` answers reconstructions and xorb ranges with slices of
//!   the mapped file. Writes of xorbs, shards and Hub objects are
//!   [`xet_cas::CasError::ReadOnly`]; `meta/` keys (the dedup secret `StoreCas::open`
//!   creates) live in an in-memory overlay, per process (see [`BundleBackend`]).
//! * [`create`]: a bundle from any `ObjectBackend` — every object ([`Selection::All`]) or
//!   what the named files need ([`Selection::Files`]: their xorbs and one shard holding
//!   exactly those files) — written through `ShardWriter` to a temporary file beside the
//!   output and renamed; the same input gives the same bytes.
//! * [`create_from_cas`]: a bundle of files from any [`xet_cas::Cas`] (a server), which
//!   hands out contents, not stored objects: the files are downloaded (verified) and
//!   uploaded into a temporary store beside the output (`xet-download`, `xet-upload`),
//!   which is bundled with `create`.
//! * [`import`]: every xorb and shard through [`xet_cas::Cas::put_xorb`] /
//!   [`xet_cas::Cas::put_shard`] in their upload forms, so the target validates each as it
//!   validates an upload. A bad object is reported and the rest imported.
//! * [`verify`]: the SWH structure (`ShardReader::verify`), every object through the same
//!   validation as an import into a store that keeps no chunk data, and every file of the
//!   manifest registered, of its size and sha256, and reconstructible.
//!
//! # Trust
//!
//! Opening checks structure, not content: serving a bundle trusts its chunk data as a store
//! trusts its files (clients verify every chunk they download). `import` and `verify`
//! trust nothing. A mapped bundle must not be modified while it is open (see `xet-mmap`).

mod backend;
mod bundle;
mod create;
mod error;
mod from_cas;
mod import;
mod manifest;
mod progress;
mod verify;

pub use backend::BundleBackend;
pub use bundle::{Bundle, OpenLimits, is_bundle};
pub use create::{CreateReport, Selection, Wanted, create};
pub use error::{BundleError, BundlePart, Kind, ManifestError, Problem, Reason, StoredXorbError};
pub use from_cas::create_from_cas;
pub use import::{ImportOptions, ImportReport, KindCounts, import};
pub use manifest::{EMPTY_SHA256, FORMAT, FileEntry, MANIFEST_KEY, Manifest, VERSION};
pub use progress::{NoProgress, Progress};
pub use verify::{VerifyReport, verify};

pub use xet_swh::ReadLimits;
