//! The one place that calls into the format crates (`xet-xorb`, `xet-shard`). Everything
//! else in the store and the conformance suite works with the neutral types defined
//! here, so format API changes are absorbed in this file.

use bytes::Bytes;
use xet_hash::MerkleHash;
use xet_shard::{CasChunk, CasInfo, FileInfo, FileTerm, ParsedShard, Shard, StoredOptions};
use xet_xorb::{XorbBuilder, XorbInfo};

use super::meta::XorbMeta;
use crate::ChunkRange;

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
pub fn validate_xorb(hash: &MerkleHash, body: &Bytes) -> Result<ValidXorb, String> {
    let limits = xet_xorb::Limits::PROTOCOL;
    let (info, region_len) = match xet_xorb::parse_footer(body, &limits) {
        Ok((_, body_len)) => (
            xet_xorb::verify(body, Some(hash), &limits).map_err(|e| e.to_string())?,
            body_len,
        ),
        Err(_) => (
            xet_xorb::verify_body(body, Some(hash), &limits).map_err(|e| e.to_string())?,
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

/// Verifies a xorb upload while it is being received: after each piece of the body
/// arrives, [`advance`](Self::advance) decompresses and hashes the chunks that are now
/// whole, while they are still in the CPU's cache, instead of in a second pass over the
/// whole body once it is stored. The outcome rides along with the body
/// ([`ReceivedXorb`]) to [`crate::Cas::put_received_xorb`].
///
/// Only a footer-less body (what clients upload) is verified this way. At the first
/// problem, or for a footered body, the receiver stops, and the store verifies the body
/// in full as [`crate::Cas::put_xorb`] does, which also reports what is wrong.
#[derive(Debug)]
pub struct XorbReceiver {
    verifier: Option<xet_xorb::BodyVerifier>,
}

impl XorbReceiver {
    /// For a body declared as `len` bytes long.
    pub fn new(len: u64) -> XorbReceiver {
        XorbReceiver {
            verifier: xet_xorb::BodyVerifier::new(len, &xet_xorb::Limits::PROTOCOL).ok(),
        }
    }

    /// `received` is the body so far: everything given before, and more.
    pub fn advance(&mut self, received: &[u8]) {
        if let Some(v) = &mut self.verifier
            && v.advance(received).is_err()
        {
            self.verifier = None;
        }
    }

    /// The whole body, verified as the xorb `hash` if it was one. Does no more than
    /// compute the xorb hash: a body not already walked to its end by
    /// [`advance`](Self::advance) is left for the store to verify.
    pub fn finish(self, body: Bytes, hash: &MerkleHash) -> ReceivedXorb {
        let verified = self
            .verifier
            .filter(|v| v.verified_len() == body.len() as u64)
            .and_then(|v| v.finish(&body, Some(hash)).ok());
        ReceivedXorb { body, verified }
    }
}

/// A received xorb upload and, if [`XorbReceiver`] verified it on the way in, what it
/// found. Only a receiver makes one, so the two cannot be mismatched.
#[derive(Debug, Clone)]
pub struct ReceivedXorb {
    body: Bytes,
    verified: Option<XorbInfo>,
}

impl ReceivedXorb {
    /// A body received without a [`XorbReceiver`], for the store to verify in full.
    pub fn unverified(body: Bytes) -> ReceivedXorb {
        ReceivedXorb {
            body,
            verified: None,
        }
    }

    pub fn body(&self) -> &Bytes {
        &self.body
    }

    /// Whether the body was verified as it arrived.
    pub fn is_verified(&self) -> bool {
        self.verified.is_some()
    }

    pub fn into_body(self) -> Bytes {
        self.body
    }

    /// The stored form if the body was verified on the way in as the xorb `hash`; else
    /// the body back, to be verified in full.
    pub(crate) fn into_valid(self, hash: &MerkleHash) -> Result<ValidXorb, Bytes> {
        match &self.verified {
            Some(info) if info.hash == *hash && info.body_len() == self.body.len() as u64 => {
                Ok(valid_from_info(self.body.clone(), info))
            }
            _ => Err(self.body),
        }
    }
}

/// Length of the stored (footered) form of a xorb.
pub fn stored_xorb_len(m: &XorbMeta) -> u64 {
    m.region_len() + xet_xorb::footer_len_v1(m.chunk_hashes.len()) as u64 + 4
}

/// How many bytes at the end of a stored xorb hold its footer and `info_length`, from
/// the last 4 bytes of the object.
pub fn stored_xorb_tail_len(last4: &[u8]) -> Result<u64, String> {
    let b: [u8; 4] = last4
        .try_into()
        .map_err(|_| "need the last 4 bytes".to_string())?;
    Ok(u64::from(u32::from_le_bytes(b)) + 4)
}

/// Chunk metadata of a stored xorb from its tail (footer + `info_length`) and the total
/// object length, without reading the chunk region.
///
pub fn meta_from_stored_tail(
    hash: &MerkleHash,
    tail: &[u8],
    total_len: u64,
) -> Result<XorbMeta, String> {
    let limits = xet_xorb::Limits::PROTOCOL;
    let (footer, _region_len) = xet_xorb::parse_footer_tail(tail, total_len, &limits)
        .map_err(|e| format!("stored xorb {hash}: {e}"))?;
    if footer.xorb_hash != *hash {
        return Err(format!(
            "stored xorb {hash} has footer hash {}",
            footer.xorb_hash
        ));
    }
    if footer.unpacked_chunk_offsets.len() != footer.chunk_hashes.len() {
        return Err(format!(
            "stored xorb {hash} has a v0 footer without unpacked offsets"
        ));
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

/// A xorb built from chunk data (tests, conformance fixtures).
pub struct BuiltXorb {
    pub hash: MerkleHash,
    /// Footer-less chunk region (what clients upload).
    pub body: Vec<u8>,
    /// Stored form (chunk region + footer).
    pub footered: Vec<u8>,
    /// `(hash, uncompressed size)` of each chunk.
    pub chunks: Vec<(MerkleHash, u64)>,
}

pub fn build_xorb(chunks: &[&[u8]]) -> Result<BuiltXorb, String> {
    let mut b = XorbBuilder::new();
    for c in chunks {
        b.add_chunk(c).map_err(|e| e.to_string())?;
    }
    let x = b.finish().map_err(|e| e.to_string())?;
    Ok(BuiltXorb {
        hash: x.hash(),
        footered: x.to_footered(),
        chunks: x.info().hash_entries(),
        body: x.into_body(),
    })
}

/// Serialize chunks (stored uncompressed) into a chunk region without the builder's
/// limits, to test the limits themselves. Returns the xorb hash and the body.
pub fn raw_xorb(chunks: &[&[u8]]) -> Result<(MerkleHash, Vec<u8>), String> {
    let mut body = Vec::new();
    let mut entries = Vec::with_capacity(chunks.len());
    for c in chunks {
        let s = xet_xorb::serialize_chunk(c, None, xet_xorb::CompressionScheme::None)
            .map_err(|e| e.to_string())?;
        entries.push((s.hash(), c.len() as u64));
        body.extend_from_slice(s.bytes());
    }
    Ok((xet_hash::xorb_hash(&entries), body))
}

/// Decompress a byte range holding whole chunks; returns the concatenated data and the
/// data of each chunk.
pub fn decode_chunks(bytes: &[u8]) -> Result<Vec<Vec<u8>>, String> {
    let d = xet_xorb::decode_chunks(
        bytes,
        xet_xorb::Expected::default(),
        &xet_xorb::Limits::PROTOCOL,
    )
    .map_err(|e| e.to_string())?;
    Ok((0..d.num_chunks()).map(|i| d.chunk(i).to_vec()).collect())
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

fn content_of(shard: &Shard) -> ShardContent {
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
/// lookup tables are dropped). Keyed chunk hashes are refused: they cannot be checked.
pub fn parse_upload_shard(bytes: &[u8], max_bytes: u64) -> Result<UploadedShard, String> {
    let limits = xet_shard::Limits {
        max_bytes,
        max_entries: u64::MAX,
    };
    let parsed = ParsedShard::parse(bytes, &limits).map_err(|e| e.to_string())?;
    if let Some(k) = parsed.shard.chunk_hash_key() {
        return Err(format!(
            "shard has keyed chunk hashes (key {k}); upload raw hashes"
        ));
    }
    let shard = parsed.shard.into_upload();
    Ok(UploadedShard {
        content: content_of(&shard),
        shard,
    })
}

/// The stored form of an upload (lookup tables, footer, timestamps 0 so it is a pure
/// function of the content) and its name (`xet_shard::shard_hash` of those bytes).
pub fn stored_shard(upload: UploadedShard) -> Result<(MerkleHash, Bytes), String> {
    let opts = StoredOptions {
        lookup_tables: true,
        hmac_key: None,
        creation_timestamp: 0,
        key_expiry: 0,
    };
    let stored = upload.shard.into_stored(opts).map_err(|e| e.to_string())?;
    let bytes = stored.to_bytes().map_err(|e| e.to_string())?;
    Ok((xet_shard::shard_hash(&bytes), Bytes::from(bytes)))
}

/// Parse a shard as the store wrote it.
pub fn parse_stored_shard(bytes: &[u8]) -> Result<ShardContent, String> {
    let parsed =
        ParsedShard::parse(bytes, &xet_shard::Limits::unlimited()).map_err(|e| e.to_string())?;
    Ok(content_of(&parsed.shard))
}

/// A global-dedup answer: full stored form, empty file section, one CAS block per xorb
/// with all its chunks, chunk hashes keyed with `key` unless it is `None`/zero.
pub fn dedup_shard(
    xorbs: &[&XorbMeta],
    key: Option<MerkleHash>,
    creation: u64,
    expiry: u64,
) -> Result<Bytes, String> {
    let mut cas = Vec::with_capacity(xorbs.len());
    for m in xorbs {
        let on_disk =
            u32::try_from(m.region_len()).map_err(|_| format!("xorb {} too large", m.hash))?;
        cas.push(
            CasInfo::from_chunks(m.hash, &m.chunk_list(), on_disk).map_err(|e| e.to_string())?,
        );
    }
    let mut shard = Shard::new(Vec::new(), cas);
    shard.sort_canonical();
    let stored = shard
        .into_stored(StoredOptions::dedup_answer(key, creation, expiry))
        .map_err(|e| e.to_string())?;
    Ok(Bytes::from(stored.to_bytes().map_err(|e| e.to_string())?))
}

/// What a client learns from a dedup answer about one of its chunks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DedupHit {
    pub xorb: MerkleHash,
    pub chunk_index: u32,
}

/// Parsed dedup answer (what a client does with it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DedupAnswer {
    pub key: MerkleHash,
    pub creation: u64,
    pub expiry: u64,
    pub num_files: usize,
    pub xorbs: Vec<ShardXorb>,
    parsed: ParsedShard,
}

impl DedupAnswer {
    /// Look up a raw chunk hash (keyed with the answer's key first) through the tables.
    pub fn find(&self, chunk: &MerkleHash) -> Option<DedupHit> {
        self.parsed.find_chunk(chunk).map(|l| DedupHit {
            xorb: l.xorb_hash,
            chunk_index: l.chunk_index,
        })
    }
}

/// Parse a dedup answer: it must be a full stored shard with lookup tables.
pub fn parse_dedup_answer(bytes: &[u8]) -> Result<DedupAnswer, String> {
    let parsed =
        ParsedShard::parse(bytes, &xet_shard::Limits::default()).map_err(|e| e.to_string())?;
    let f = parsed.shard.footer.ok_or("dedup answer has no footer")?;
    if parsed.tables.is_none() {
        return Err("dedup answer has no lookup tables".into());
    }
    let c = content_of(&parsed.shard);
    Ok(DedupAnswer {
        key: f.chunk_hash_key,
        creation: f.creation_timestamp,
        expiry: f.key_expiry,
        num_files: c.files.len(),
        xorbs: c.xorbs,
        parsed,
    })
}

/// Serialize shard content in the upload form exactly as given (tests build invalid
/// shards this way; only what the format itself cannot represent is refused).
pub fn upload_shard_bytes(content: &ShardContent) -> Result<Vec<u8>, String> {
    let files = content
        .files
        .iter()
        .map(|f| {
            let terms = f
                .terms
                .iter()
                .map(|t| {
                    let n = u32::try_from(t.unpacked).map_err(|_| "term too large".to_string())?;
                    Ok(FileTerm::new(t.xorb, t.chunks.start..t.chunks.end, n))
                })
                .collect::<Result<Vec<_>, String>>()?;
            Ok(FileInfo::new(
                f.hash,
                terms,
                f.verification.clone(),
                f.sha256.map(|d| xet_hash::sha256_to_metadata_hash(&d)),
            ))
        })
        .collect::<Result<Vec<_>, String>>()?;
    let cas = content
        .xorbs
        .iter()
        .map(|x| {
            let u = |v: u64| u32::try_from(v).map_err(|_| "value too large".to_string());
            Ok(CasInfo {
                xorb_hash: x.hash,
                cas_flags: 0,
                num_bytes_in_cas: u(x.num_bytes_in_cas)?,
                num_bytes_on_disk: u(x.num_bytes_on_disk)?,
                chunks: x
                    .chunks
                    .iter()
                    .map(|c| {
                        Ok(CasChunk {
                            hash: c.hash,
                            byte_range_start: u(c.byte_range_start)?,
                            unpacked_segment_bytes: u(c.unpacked)?,
                            flags: 0,
                        })
                    })
                    .collect::<Result<Vec<_>, String>>()?,
            })
        })
        .collect::<Result<Vec<_>, String>>()?;
    Shard::new(files, cas)
        .to_upload_bytes()
        .map_err(|e| e.to_string())
}

// ---------------------------------------------------------------------------------------
// Chunking (fixtures)

/// Content-defined chunk boundaries of `data`, as `(offset, len)`.
pub fn chunk_spans(data: &[u8]) -> Vec<(usize, usize)> {
    xet_chunk::chunk_ranges(data)
        .into_iter()
        .map(|r| (r.start, r.end - r.start))
        .collect()
}
