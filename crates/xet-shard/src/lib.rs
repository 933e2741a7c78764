//! XET MDB shards (draft-denis-xet-03 §9), byte-compatible with the reference `hf_xet`.
//!
//! * [`Shard`] is the model: file infos ([`FileInfo`], terms, verification hashes,
//!   FileMetadataExt), CAS infos ([`CasInfo`], chunks with flags) and, in the stored form,
//!   the footer values ([`FooterInfo`]).
//! * Two serialized forms: the **upload form** ([`Shard::to_upload_bytes`]: header with
//!   `footer_size = 0`, both sections with bookends, nothing else) and the **stored form**
//!   ([`Shard::to_stored_bytes`]: plus lookup tables and the 200-byte footer).
//! * [`ParsedShard::parse`] (streaming) and [`ParsedShard::parse_by_footer`] validate in
//!   one pass against a [`Limits`] budget and never allocate more than the input justifies.
//! * Lookups by file hash and (keyed or raw) chunk hash, binary search through the lookup
//!   tables when present, linear otherwise.
//!
//! What the reference does that the draft does not say (checked against real bytes):
//! * File and CAS blocks are written sorted by hash, where the order is that of the four
//!   little-endian u64 words ([`hash_order_key`]), not of the raw bytes.
//! * The CAS chunk entry's last 8 bytes are `flags: u32` + 4 reserved bytes; the
//!   `local://` store sets [`CHUNK_FLAG_GLOBAL_DEDUP`] on the first chunk of each file and on
//!   hash-eligible chunks, the shard cache and HTTP uploads leave 0.
//! * Lookup keys are the first 8 bytes of the hash as a little-endian u64 (word 0). Lookup
//!   values are *record indices* (48-byte units from the section start) of the block
//!   header, not block ordinals. The chunk table's first value is the CAS block's record index.
//! * Shard files are named by [`shard_hash`]: the chunk hash of the complete file bytes.

#![forbid(unsafe_code)]

mod error;
mod model;
mod parse;
mod write;

pub use error::ShardError;
pub use model::{
    CHUNK_FLAG_GLOBAL_DEDUP, CasChunk, CasInfo, CasLookupEntry, ChunkLocation, ChunkLookupEntry,
    FILE_FLAG_WITH_METADATA_EXT, FILE_FLAG_WITH_VERIFICATION, FileInfo, FileInfoBuilder,
    FileLookupEntry, FileTerm, FooterInfo, LookupTables, SHARD_CACHE_EXPIRY_SECS, Shard,
    ShardBuilder, StoredOptions, hash_order_key, truncate_hash,
};
pub use parse::{Limits, ParsedShard};
pub use write::{RawFooter, shard_hash};
pub use xet_hash::MerkleHash;

/// Header magic: `"HFRepoMetaData\0"` followed by the fixed 17-byte sequence.
pub const HEADER_TAG: [u8; 32] = [
    b'H', b'F', b'R', b'e', b'p', b'o', b'M', b'e', b't', b'a', b'D', b'a', b't', b'a', 0, 0x55,
    0x69, 0x67, 0x45, 0x6a, 0x7b, 0x81, 0x57, 0x83, 0xa5, 0xbd, 0xd9, 0x5c, 0xcd, 0xd1, 0x4a, 0xa9,
];
pub const HEADER_VERSION: u64 = 2;
pub const FOOTER_VERSION: u64 = 1;
pub const HEADER_SIZE: usize = 48;
pub const FOOTER_SIZE: usize = 200;
/// Size of every file-info and CAS-info record (headers, entries, bookends).
pub const RECORD_SIZE: usize = 48;
