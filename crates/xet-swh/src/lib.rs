//! The Software Heritage "read shard" (PyPI `swh-shard` 2.2.1, CLI `swh-shard`): an
//! immutable single-file container of objects under 32-byte keys with a perfect-hash index,
//! byte-compatible in both directions with the real package.
//!
//! # The format
//!
//! ```text
//! 0    "SWHShard\0" + 23 zeros
//! 32   header: version (1), objects_count, objects_position (512), objects_size,
//!      index_position, index_size, hash_position: 7 x u64 big-endian
//! 88   zeros
//! 512  objects: per object a u64 big-endian size, then its bytes, in insertion order
//!      index: n entries of (32-byte key, u64 big-endian offset of the object), in slot order;
//!      an empty or deleted slot is (32 zero bytes, 0xffffffffffffffff)
//!      hash: cmph 2.0.2's dump of a CHD_PH function of the keys (little-endian u32 fields)
//!      (any trailing bytes: ignored)
//! ```
//!
//! A key's slot is what the CHD_PH function gives it ([`ChdPh::search`]); a lookup reads that
//! one index entry and compares the stored key. `n`, the slot count, is a little above the
//! object count (load factor 0.99, rounded up to a prime), so a few percent of the slots stay
//! empty. Deleting an object (swh-shard's `Shard.delete`) zeroes its record in place and
//! turns its index entry into the empty form; the header is unchanged.
//!
//! # What is here
//!
//! * [`ShardReader`] over the whole file as `&[u8]` (the caller maps or reads it): one
//!   validating pass at [`ShardReader::open`] within a [`ReadLimits`] budget, O(1)
//!   [`ShardReader::get`], iteration in index order, and [`ShardReader::verify`], which checks
//!   every entry and object. [`delete`] is swh-shard's in-place delete on a `&mut [u8]`.
//! * [`ShardWriter`] over any `Write + Seek`: objects streamed in, then
//!   [`ShardWriter::finish`] writes the index, the hash function, the header and the magic,
//!   last, so an unfinished file never opens. The caller writes to a temporary file and
//!   renames it.
//! * [`ChdPh`]: the hash function — evaluation, cmph's dump encoding (re-encoding a parsed
//!   function gives back its bytes), and cmph 2.0.2's construction (`chd_ph_new` with
//!   swh-shard's settings), written from the specification in Rust.
//!
//! # Budget
//!
//! [`ShardReader::open`] reads the fixed-size header and the hash section and nothing else.
//! It refuses a file larger than `max_bytes`, a header claiming more than `max_objects`
//! objects, a function of more than `max_slots` slots or a hash section larger than
//! `max_hash_bytes` before allocating anything; every position and size is checked against
//! the file's length with overflow-checked arithmetic. It then allocates the decoded
//! displacements (4 bytes per bucket, a bucket per 4 objects) and, briefly, a re-encoding of
//! the hash section to compare against. [`ShardReader::get`] allocates nothing;
//! [`ShardReader::verify`] allocates 24 bytes per live entry.
//!
//! # Determinism
//!
//! The writer's output depends only on the objects and their order. The hash function is
//! built exactly as cmph 2.0.2 builds it for swh-shard, with the seeds swh-shard draws in a
//! fresh process ([`SeedPolicy::Swh`]: glibc's unseeded `rand()`, modulo the object count):
//! given the same objects in the same order, the writer writes the same bytes as
//! `swh.shard.ShardCreator` in a fresh Python process. [`SeedPolicy::List`] builds with given
//! seeds instead, for instance the seed an existing file records, which rebuilds that file's
//! function byte for byte. An empty shard (which swh-shard cannot make: cmph never returns for
//! zero keys) gets 11 slots, seed 0 and one zero displacement; swh-shard reads it, though its
//! `check` command reports it.
//!
//! Pure and synchronous: no I/O beyond the caller's writer, no `unsafe`.

#![forbid(unsafe_code)]

mod chd;
mod error;
mod jenkins;
mod read;
mod seq;
mod write;

pub use chd::{
    ALGO_NAME, ChdPh, DUMP_OVERHEAD, EMPTY_SLOTS, GlibcRand, HASH_NAME, KEYS_PER_BUCKET,
    LOAD_FACTOR, MAX_KEYS, MAX_PROBES, SeedPolicy, bucket_count, slot_count,
};
pub use error::{BuildError, ReadError, WriteError};
pub use jenkins::{jenkins, jenkins32};
pub use read::{Header, IndexEntry, Iter, ReadLimits, ShardReader, VerifyReport, delete};
pub use write::ShardWriter;

/// The magic: `"SWHShard"` and its NUL, at offset 0; the rest of the first 32 bytes is zero.
pub const MAGIC: &[u8; 9] = b"SWHShard\0";
/// Where the header starts (`SHARD_OFFSET_MAGIC`).
pub const HEADER_OFFSET: u64 = 32;
/// The header: seven u64 fields.
pub const HEADER_LEN: u64 = 56;
/// Where the objects start in every file swh-shard writes (`SHARD_OFFSET_HEADER`).
pub const OBJECTS_POSITION: u64 = 512;
/// The only format version.
pub const VERSION: u64 = 1;
/// Length of a key.
pub const KEY_LEN: usize = 32;
/// Length of an index entry: the key and a u64 offset.
pub const INDEX_ENTRY_LEN: u64 = 40;
/// The offset of an empty or deleted index entry.
pub const DELETED_OFFSET: u64 = u64::MAX;

/// Lowercase hex of `b`, for messages.
pub(crate) fn hex(b: &[u8]) -> String {
    use std::fmt::Write;
    let mut s = String::with_capacity(2 * b.len());
    for x in b {
        let _ = write!(s, "{x:02x}");
    }
    s
}
