//! Building test objects with the format crates: xorbs (also ones past the protocol's
//! limits), invalid shards, and reading what a store answers (chunks, dedup answers). The
//! store's own format code (`xet_store::format`) only parses and stores; building is the
//! uploader's side, needed here only.

use xet_hash::MerkleHash;
use xet_shard::{CasChunk, CasInfo, FileInfo, FileTerm, ParsedShard, Shard};
use xet_store::format::{ShardContent, ShardXorb, content_of};
use xet_xorb::XorbBuilder;

// ---------------------------------------------------------------------------------------
// Xorbs

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
// Chunking

/// Content-defined chunk boundaries of `data`, as `(offset, len)`.
pub fn chunk_spans(data: &[u8]) -> Vec<(usize, usize)> {
    xet_chunk::chunk_ranges(data)
        .into_iter()
        .map(|r| (r.start, r.end - r.start))
        .collect()
}
