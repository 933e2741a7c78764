//! The errors of this crate: reading (and verifying), building a hash function, writing.

use crate::hex;

/// What is wrong with a shard being read. Offsets are byte offsets in the file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReadError {
    #[error("the file is {len} bytes, more than the budget of {max} bytes")]
    TooLarge { len: u64, max: u64 },

    #[error("truncated {what} at offset {offset}: {needed} bytes needed, {available} in the file")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("bad magic at offset 0: expected \"SWHShard\\0\", got {}", hex(found))]
    BadMagic { found: [u8; 9] },

    #[error("header field version at offset 32 is {found}, only version 1 is known")]
    BadVersion { found: u64 },

    #[error("header field {field} at offset {offset} is {value}, expected {expected}")]
    HeaderField {
        field: &'static str,
        offset: u64,
        value: u64,
        expected: String,
    },

    #[error(
        "header field index_size at offset 72 is {index_size} = 8 x n (n = {n}): the index of \
         8-byte entries of the older swh.perfecthash format, not supported"
    )]
    OldIndexFormat { index_size: u64, n: u64 },

    #[error("{what} = {value} (at offset {offset}) exceeds the budget of {limit}")]
    BudgetExceeded {
        what: &'static str,
        offset: u64,
        value: u64,
        limit: u64,
    },

    #[error(
        "hash section at offset {offset}: {found:?} where {expected:?} was expected (only \
         cmph's chd_ph with the jenkins hash is used by swh-shard)"
    )]
    UnsupportedHash {
        offset: u64,
        found: String,
        expected: &'static str,
    },

    #[error(
        "hash section field hash state length at offset {offset} is byte-swapped: the dump \
         was written on a big-endian host"
    )]
    BigEndianDump { offset: u64 },

    #[error("hash section field {field} at offset {offset} is {value}, expected {expected}")]
    HashField {
        field: &'static str,
        offset: u64,
        value: u64,
        expected: String,
    },

    #[error("hash section: compressed sequence at offset {offset}: {detail}")]
    BadSequence { offset: u64, detail: String },

    #[error(
        "index entry #{slot} at offset {entry_offset}: object offset {offset} is outside the \
         objects section [{objects_start}, {objects_end})"
    )]
    EntryOutOfBounds {
        slot: u64,
        entry_offset: u64,
        offset: u64,
        objects_start: u64,
        objects_end: u64,
    },

    #[error(
        "object of index entry #{slot} at offset {offset}: its size {size} runs past the end \
         of the objects section at {objects_end}"
    )]
    RecordOutOfBounds {
        slot: u64,
        offset: u64,
        size: u64,
        objects_end: u64,
    },

    #[error(
        "index entry #{slot} at offset {entry_offset} holds key {} but the hash function puts \
         that key in slot {hashed}",
        hex(key)
    )]
    WrongSlot {
        slot: u64,
        entry_offset: u64,
        key: [u8; 32],
        hashed: u64,
    },

    #[error(
        "index entry #{slot} at offset {entry_offset} is deleted or empty (offset \
         0xffffffffffffffff) but its key is not zero"
    )]
    TombstoneKey { slot: u64, entry_offset: u64 },

    #[error(
        "index entries #{first_slot} and #{second_slot}: their objects at offsets \
         {first_offset} and {second_offset} overlap"
    )]
    ObjectsOverlap {
        first_slot: u64,
        first_offset: u64,
        second_slot: u64,
        second_offset: u64,
    },

    #[error(
        "byte at offset {offset} belongs to no live object and is not zero (deleted objects \
         are zeroed)"
    )]
    StrayBytes { offset: u64 },

    #[error("the index has {live} live entries, more than objects_count = {objects_count}")]
    TooManyEntries { live: u64, objects_count: u64 },

    #[error(
        "{unaccounted} bytes of the objects section belong to no live object, but \
         objects_count = {objects_count} with {live} live entries leaves {deleted} deleted \
         objects (each at least 8 bytes)"
    )]
    UnaccountedBytes {
        unaccounted: u64,
        objects_count: u64,
        live: u64,
        deleted: u64,
    },

    #[error("byte at offset {offset} of the unused area {area} is not zero")]
    NonZeroPadding { offset: u64, area: &'static str },

    #[error(
        "object of index entry #{slot} (key {}) fails the caller's content check",
        hex(key)
    )]
    ContentMismatch { slot: u64, key: [u8; 32] },
}

/// Why a CHD_PH function could not be built (or is not a valid one).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    #[error("key {} is given twice (keys #{first} and #{second})", hex(key))]
    DuplicateKey {
        key: [u8; 32],
        first: usize,
        second: usize,
    },

    #[error("{count} keys: a CHD_PH function holds at most {max}")]
    TooManyKeys { count: u64, max: u64 },

    #[error("no seed gave a perfect hash function ({tried} tried)")]
    SeedsExhausted { tried: u64 },

    #[error("not a valid CHD_PH function: {detail}")]
    InvalidFunction { detail: String },
}

/// Why a shard could not be written.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    #[error("writing the shard failed at offset {offset}")]
    Io {
        offset: u64,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "reading object #{index} (key {}) failed after {read} of its {size} bytes",
        hex(key)
    )]
    ValueRead {
        index: u64,
        key: [u8; 32],
        read: u64,
        size: u64,
        #[source]
        source: std::io::Error,
    },

    #[error(
        "object #{index} (key {}) was declared {size} bytes but its reader ended after {read}",
        hex(key)
    )]
    ShortValue {
        index: u64,
        key: [u8; 32],
        size: u64,
        read: u64,
    },

    #[error(
        "object #{index} has the all-zero key, which swh-shard's `ls --skip-removed` and \
         `check` take for an empty slot"
    )]
    ZeroKey { index: u64 },

    #[error("the shard already holds {count} objects, the most a shard can index")]
    TooManyObjects { count: u64 },

    #[error("an earlier write failed; the shard is incomplete and must be discarded")]
    Poisoned,

    #[error("building the hash function failed")]
    Build(#[source] BuildError),
}
