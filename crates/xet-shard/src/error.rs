//! The one error type of this crate.

use xet_hash::MerkleHash;

/// Everything that can go wrong parsing, validating or serializing a shard.
///
/// Offsets are byte offsets into the shard being parsed. Errors raised while validating an
/// in-memory model before serialization use indices instead of offsets.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ShardError {
    #[error("shard is {len} bytes, more than the budget of {max} bytes")]
    TooLarge { len: u64, max: u64 },

    #[error("truncated {what} at offset {offset}: need {needed} bytes, only {available} available")]
    Truncated {
        what: &'static str,
        offset: u64,
        needed: u64,
        available: u64,
    },

    #[error("bad magic tag at offset 0: expected {expected:02x?}, got {got:02x?}")]
    BadMagic {
        expected: Box<[u8; 32]>,
        got: Box<[u8; 32]>,
    },

    #[error("bad header version at offset 32: expected {expected}, got {got}")]
    BadHeaderVersion { expected: u64, got: u64 },

    #[error("bad footer size in header at offset 40: expected 0 or {expected}, got {got}")]
    BadFooterSize { expected: u64, got: u64 },

    #[error("bad footer version at offset {offset}: expected {expected}, got {got}")]
    BadFooterVersion {
        offset: u64,
        expected: u64,
        got: u64,
    },

    #[error("shard has no footer (header footer_size = 0), cannot parse by footer offsets")]
    NoFooter,

    #[error("{section} bookend at offset {offset} has non-zero bytes after the all-0xFF hash")]
    BadBookend { section: &'static str, offset: u64 },

    #[error(
        "{section} section has no bookend: reached offset {offset} (section limit) without one"
    )]
    MissingBookend { section: &'static str, offset: u64 },

    #[error("{what} at offset {offset}: {count} entries exceed the entry budget ({limit} left)")]
    BudgetExceeded {
        what: &'static str,
        offset: u64,
        count: u64,
        limit: u64,
    },

    #[error(
        "file #{file_index} at offset {offset}: verification flag is {got} but earlier files have {expected} \
         (either all files carry verification entries or none)"
    )]
    MixedVerification {
        file_index: usize,
        offset: u64,
        expected: bool,
        got: bool,
    },

    #[error(
        "file #{file_index} term #{term_index} at offset {offset}: chunk range [{start}, {end}) is empty or reversed"
    )]
    InvalidTermRange {
        file_index: usize,
        term_index: usize,
        offset: u64,
        start: u32,
        end: u32,
    },

    #[error("xorb #{cas_index} at offset {offset}: {field} expected {expected}, got {got}")]
    CasInconsistent {
        cas_index: usize,
        offset: u64,
        field: &'static str,
        expected: u64,
        got: u64,
    },

    #[error("footer field {field}: expected {expected}, got {got}")]
    FooterMismatch {
        field: &'static str,
        expected: u64,
        got: u64,
    },

    #[error("footer field {field} = {value} is out of bounds (allowed {min}..={max})")]
    OffsetOutOfBounds {
        field: &'static str,
        value: u64,
        min: u64,
        max: u64,
    },

    #[error("{table} lookup table has {got} entries, expected {expected} (0 or one per item)")]
    LookupCountMismatch {
        table: &'static str,
        expected: u64,
        got: u64,
    },

    #[error("{table} lookup table entry #{entry} at offset {offset}: {detail}")]
    LookupEntryInvalid {
        table: &'static str,
        entry: u64,
        offset: u64,
        detail: String,
    },

    #[error(
        "{table} lookup table entry #{entry} at offset {offset} breaks the sort order: key {key:#018x} after {prev:#018x}"
    )]
    LookupNotSorted {
        table: &'static str,
        entry: u64,
        offset: u64,
        key: u64,
        prev: u64,
    },

    #[error(
        "{count} trailing bytes at offset {offset} after the CAS info bookend of a shard without footer"
    )]
    TrailingBytes { offset: u64, count: u64 },

    // ---- strict checks (`ParsedShard::check_strict`): what the lenient parse ignores ----
    #[error("{field} at offset {offset} is not zero; the format reserves it")]
    ReservedNotZero { field: &'static str, offset: u64 },

    #[error(
        "{field} at offset {offset} is {value:#010x}; bits outside {allowed:#010x} mean nothing"
    )]
    UndefinedFlags {
        field: &'static str,
        offset: u64,
        value: u32,
        allowed: u32,
    },

    #[error(
        "footer field {field} is {got}; it must be 0 (not filled in) or {expected}, what the sections say"
    )]
    FooterStatWrong {
        field: &'static str,
        expected: u64,
        got: u64,
    },

    // ---- model validation (before serialization) ----
    #[error("{what} #{index} has the all-0xFF hash, which would read as a bookend")]
    BookendHash { what: &'static str, index: usize },

    #[error("{what}: count {count} does not fit the format's {limit}")]
    CountOverflow {
        what: &'static str,
        count: u64,
        limit: u64,
    },

    #[error("file #{file_index} ({file_hash}): {detail}")]
    FileInconsistent {
        file_index: usize,
        file_hash: MerkleHash,
        detail: String,
    },

    #[error("chunk hashes are already keyed with {existing}; refusing to key them again")]
    AlreadyKeyed { existing: MerkleHash },

    #[error(
        "term #{term_index} of file {file_hash}: verification hash expected {expected}, got {got}"
    )]
    VerificationMismatch {
        file_hash: MerkleHash,
        term_index: usize,
        expected: MerkleHash,
        got: MerkleHash,
    },

    #[error("term #{term_index} of file {file_hash}: {detail}")]
    VerificationInput {
        file_hash: MerkleHash,
        term_index: usize,
        detail: String,
    },
}
