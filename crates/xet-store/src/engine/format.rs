//! The one place the store calls into the format crates (`xet-xorb`, `xet-shard`).
//! Everything else in the store works with the neutral types defined here (the
//! conformance suite builds its shards from them too), so format API changes are absorbed
//! in this file.

use bytes::Bytes;
use xet_hash::MerkleHash;
use xet_shard::{CasInfo, ParsedShard, Shard, ShardError, StoredOptions};
use xet_xorb::{XorbError, XorbInfo};

use super::meta::XorbMeta;
use xet_cas::{Cause, ChunkRange, ReceivedXorb};

/// Why the store refuses an upload or cannot use a stored object: the format crates'
/// own errors as they are, or a rule of the store's.
#[derive(Debug, thiserror::Error)]
pub enum FormatError {
    #[error(transparent)]
    Xorb(#[from] XorbError),
    #[error(transparent)]
    Shard(#[from] ShardError),
    #[error("the body is {len} bytes, more than any valid xorb ({max})")]
    XorbTooLarge { len: u64, max: u64 },
    #[error("the shard is {len} bytes, the limit is {max}")]
    ShardTooLarge { len: u64, max: u64 },
    #[error("the shard has keyed chunk hashes (key {key}); upload raw hashes")]
    KeyedChunkHashes { key: MerkleHash },
    #[error("{len} bytes is too short for a stored xorb (it ends in a 4-byte footer length)")]
    StoredXorbTooShort { len: u64 },
    #[error("a footer of {tail} bytes does not fit in the {len}-byte object")]
    FooterTooLong { tail: u64, len: u64 },
    #[error("its footer names xorb {found}")]
    FooterHash { found: MerkleHash },
    #[error("its footer is v0, without unpacked chunk offsets")]
    V0Footer,
    #[error("xorb {hash} is {len} bytes, more than a shard's CAS block can describe")]
    XorbTooLargeForShard { hash: MerkleHash, len: u64 },
}

impl FormatError {
    /// The error to keep as a `CasError`'s cause: a format crate's own error unwrapped,
    /// so a caller can downcast the cause to `XorbError` or `ShardError`.
    pub fn into_cause(self) -> Cause {
        match self {
            FormatError::Xorb(e) => Cause::new(e),
            FormatError::Shard(e) => Cause::new(e),
            e => Cause::new(e),
        }
    }
}

// ---------------------------------------------------------------------------------------
// Xorbs

/// Largest upload body accepted (footered form of the largest valid xorb).
pub const MAX_XORB_UPLOAD_BYTES: u64 = xet_xorb::MAX_XORB_FOOTERED_BYTES;

/// A fully verified xorb, ready to store.
pub struct ValidXorb {
    pub meta: XorbMeta,
    /// Stored form, in two parts: the chunk region (a slice of the uploaded body, not a
    /// copy), then the v1 footer and info_length.
    pub stored: Vec<Bytes>,
}

fn meta_from_info(info: &XorbInfo) -> XorbMeta {
    XorbMeta {
        hash: info.hash,
        chunk_hashes: info.chunks.iter().map(|c| c.hash).collect(),
        chunk_ends: info.chunks.iter().map(|c| c.end()).collect(),
        unpacked_ends: info.chunks.iter().map(|c| c.unpacked_end()).collect(),
    }
}

/// Verify an uploaded xorb (footer-less chunk region, or footered) against `hash`:
/// every chunk decompressed and rehashed, limits of 8192 chunks and 64 MiB uncompressed.
/// A body whose tail parses as a footer is treated as footered (and the footer must then
/// agree with the chunks).
pub fn validate_xorb(hash: &MerkleHash, body: &Bytes) -> Result<ValidXorb, XorbError> {
    let limits = xet_xorb::Limits::PROTOCOL;
    let (info, region_len) = match xet_xorb::parse_footer(body, &limits) {
        Ok((_, body_len)) => (xet_xorb::verify(body, Some(hash), &limits)?, body_len),
        Err(_) => (
            xet_xorb::verify_body(body, Some(hash), &limits)?,
            body.len(),
        ),
    };
    debug_assert_eq!(info.body_len(), region_len as u64);
    Ok(valid_from_info(body.slice(..region_len), &info))
}

/// The stored form of a verified chunk region.
fn valid_from_info(region: Bytes, info: &XorbInfo) -> ValidXorb {
    let footer = info.footer();
    let mut tail = Vec::with_capacity(footer.serialized_len() + 4);
    footer.write(&mut tail);
    ValidXorb {
        meta: meta_from_info(info),
        stored: vec![region, Bytes::from(tail)],
    }
}

/// The stored form of a body [`xet_cas::XorbReceiver`] verified on the way in as the xorb
/// `hash`; else the body back, to be verified in full.
pub(crate) fn valid_received(xorb: ReceivedXorb, hash: &MerkleHash) -> Result<ValidXorb, Bytes> {
    xorb.into_verified(hash)
        .map(|(body, info)| valid_from_info(body, &info))
}

/// Length of the stored (footered) form of a xorb.
pub fn stored_xorb_len(m: &XorbMeta) -> u64 {
    m.region_len() + xet_xorb::footer_len_v1(m.chunk_hashes.len()) as u64 + 4
}

/// How many bytes at the end of a stored xorb hold its footer and `info_length`, from
/// the last 4 bytes of the object.
pub fn stored_xorb_tail_len(last4: &[u8]) -> Result<u64, FormatError> {
    let b: [u8; 4] = last4
        .try_into()
        .map_err(|_| FormatError::StoredXorbTooShort {
            len: last4.len() as u64,
        })?;
    Ok(u64::from(u32::from_le_bytes(b)) + 4)
}

/// Chunk metadata of a stored xorb from its tail (footer + `info_length`) and the total
/// object length, without reading the chunk region.
///
pub fn meta_from_stored_tail(
    hash: &MerkleHash,
    tail: &[u8],
    total_len: u64,
) -> Result<XorbMeta, FormatError> {
    let limits = xet_xorb::Limits::PROTOCOL;
    let (footer, _region_len) = xet_xorb::parse_footer_tail(tail, total_len, &limits)?;
    if footer.xorb_hash != *hash {
        return Err(FormatError::FooterHash {
            found: footer.xorb_hash,
        });
    }
    if footer.unpacked_chunk_offsets.len() != footer.chunk_hashes.len() {
        return Err(FormatError::V0Footer);
    }
    Ok(XorbMeta {
        hash: *hash,
        chunk_hashes: footer.chunk_hashes,
        chunk_ends: footer
            .chunk_boundary_offsets
            .iter()
            .map(|&b| u64::from(b))
            .collect(),
        unpacked_ends: footer
            .unpacked_chunk_offsets
            .iter()
            .map(|&b| u64::from(b))
            .collect(),
    })
}

// ---------------------------------------------------------------------------------------
// Shards

/// One term as written in a shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardTerm {
    pub xorb: MerkleHash,
    pub chunks: ChunkRange,
    pub unpacked: u64,
}

/// One file block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardFile {
    pub hash: MerkleHash,
    pub terms: Vec<ShardTerm>,
    /// One verification hash per term, if present.
    pub verification: Option<Vec<MerkleHash>>,
    /// The plain sha256 digest from FileMetadataExt, if present.
    pub sha256: Option<[u8; 32]>,
}

/// One chunk of a CAS block.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ShardChunk {
    pub hash: MerkleHash,
    pub byte_range_start: u64,
    pub unpacked: u64,
}

/// One CAS block.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardXorb {
    pub hash: MerkleHash,
    pub num_bytes_in_cas: u64,
    pub num_bytes_on_disk: u64,
    pub chunks: Vec<ShardChunk>,
}

/// What a shard says.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ShardContent {
    pub files: Vec<ShardFile>,
    pub xorbs: Vec<ShardXorb>,
}

/// A parsed upload, kept in the format crate's model until it is stored.
pub struct UploadedShard {
    pub content: ShardContent,
    shard: Shard,
}

/// What a parsed shard says, in the neutral types.
pub fn content_of(shard: &Shard) -> ShardContent {
    ShardContent {
        files: shard
            .files
            .iter()
            .map(|f| ShardFile {
                hash: f.file_hash,
                terms: f
                    .terms
                    .iter()
                    .map(|t| ShardTerm {
                        xorb: t.xorb_hash,
                        chunks: ChunkRange::new(t.chunk_index_start, t.chunk_index_end),
                        unpacked: u64::from(t.unpacked_segment_bytes),
                    })
                    .collect(),
                verification: f.verification.clone(),
                sha256: f.sha256_digest(),
            })
            .collect(),
        xorbs: shard
            .cas
            .iter()
            .map(|c| ShardXorb {
                hash: c.xorb_hash,
                num_bytes_in_cas: u64::from(c.num_bytes_in_cas),
                num_bytes_on_disk: u64::from(c.num_bytes_on_disk),
                chunks: c
                    .chunks
                    .iter()
                    .map(|ch| ShardChunk {
                        hash: ch.hash,
                        byte_range_start: u64::from(ch.byte_range_start),
                        unpacked: u64::from(ch.unpacked_segment_bytes),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Parse an uploaded shard (upload form; a stored form is accepted too, its footer and
/// lookup tables are checked and dropped). Every bit must mean what the format says
/// ([`ParsedShard::check_strict`]: reserved fields zero, no undefined flag bits, footer
/// statistics 0 or right), so that no two uploads differ only in bits the store ignores.
/// Keyed chunk hashes are refused: they cannot be checked.
pub fn parse_upload_shard(bytes: &[u8], max_bytes: u64) -> Result<UploadedShard, FormatError> {
    let limits = xet_shard::Limits {
        max_bytes,
        max_entries: u64::MAX,
    };
    let parsed = ParsedShard::parse(bytes, &limits)?;
    parsed.check_strict()?;
    if let Some(key) = parsed.shard.chunk_hash_key() {
        return Err(FormatError::KeyedChunkHashes { key });
    }
    let shard = parsed.shard.into_upload();
    Ok(UploadedShard {
        content: content_of(&shard),
        shard,
    })
}

/// The stored form of an upload and its name (`xet_shard::shard_hash` of those bytes):
/// blocks in hash order (as the reference writes them), lookup tables, a footer with
/// timestamps 0, and nothing the uploader chose that the store does not check. An
/// upload's chunk flags (the reference's global-dedup hint, which the store does not
/// use: it decides dedup eligibility itself) are cleared and its `num_bytes_on_disk` (0,
/// or a length the store checked but keeps no use for) is written as 0, as the reference
/// uploads it. So the stored form is a pure function of what was checked against the
/// xorbs plus the files' sha256 claims: an upload that differs from a stored shard only
/// in what the store ignores (timestamps, those flags and lengths, a footer or lookup
/// tables, the order of its blocks) finds that shard's name taken and stores nothing.
pub fn stored_shard(upload: UploadedShard) -> Result<(MerkleHash, Bytes), ShardError> {
    let mut shard = upload.shard;
    shard.sort_canonical();
    for c in &mut shard.cas {
        c.num_bytes_on_disk = 0;
        for ch in &mut c.chunks {
            ch.flags = 0;
        }
    }
    let opts = StoredOptions {
        lookup_tables: true,
        hmac_key: None,
        creation_timestamp: 0,
        key_expiry: 0,
    };
    let stored = shard.into_stored(opts)?;
    let bytes = stored.to_bytes()?;
    Ok((xet_shard::shard_hash(&bytes), Bytes::from(bytes)))
}

/// Parse a shard as the store wrote it.
pub fn parse_stored_shard(bytes: &[u8]) -> Result<ShardContent, ShardError> {
    let parsed = ParsedShard::parse(bytes, &xet_shard::Limits::unlimited())?;
    Ok(content_of(&parsed.shard))
}

/// A global-dedup answer: full stored form, empty file section, one CAS block per xorb
/// with all its chunks, chunk hashes keyed with `key` unless it is `None`/zero.
pub fn dedup_shard(
    xorbs: &[&XorbMeta],
    key: Option<MerkleHash>,
    creation: u64,
    expiry: u64,
) -> Result<Bytes, FormatError> {
    let mut cas = Vec::with_capacity(xorbs.len());
    for m in xorbs {
        let on_disk =
            u32::try_from(m.region_len()).map_err(|_| FormatError::XorbTooLargeForShard {
                hash: m.hash,
                len: m.region_len(),
            })?;
        cas.push(CasInfo::from_chunks(m.hash, &m.chunk_list(), on_disk)?);
    }
    let mut shard = Shard::new(Vec::new(), cas);
    shard.sort_canonical();
    let stored = shard.into_stored(StoredOptions::dedup_answer(key, creation, expiry))?;
    Ok(Bytes::from(stored.to_bytes()?))
}
