//! Checking an uploaded shard against the stored xorbs. Pure and CPU-bound: the store
//! runs it on the blocking pool.

use std::collections::HashMap;
use std::sync::Arc;

use xet_hash::MerkleHash;

use super::format::{self, ShardContent};
use super::meta::XorbMeta;
use xet_cas::{CasError, Result};

/// How an uploaded shard disagrees with the stored xorbs, or what it lacks that the
/// store requires: the cause of its [`CasError::InvalidShard`].
#[derive(Debug, thiserror::Error)]
pub enum ShardMismatch {
    #[error("CAS entry for xorb {xorb}: {detail}")]
    CasEntry { xorb: MerkleHash, detail: String },
    #[error("file {file}: {detail}")]
    File { file: MerkleHash, detail: String },
}

/// The sha256 of no bytes.
fn empty_sha256() -> [u8; 32] {
    use sha2::Digest;
    sha2::Sha256::digest(b"").into()
}

/// Every xorb the shard mentions (terms and CAS section), in first-mention order.
pub(crate) fn referenced_xorbs(c: &ShardContent) -> Vec<MerkleHash> {
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::new();
    let terms = c.files.iter().flat_map(|f| f.terms.iter().map(|t| t.xorb));
    for h in c.xorbs.iter().map(|x| x.hash).chain(terms) {
        if seen.insert(h) {
            out.push(h);
        }
    }
    out
}

/// Reject the shard unless every term and CAS entry agrees with the stored xorbs.
/// `metas` must hold every xorb of [`referenced_xorbs`] (missing ones are reported as
/// [`CasError::MissingXorb`]).
pub(crate) fn validate_shard(
    c: &ShardContent,
    metas: &HashMap<MerkleHash, Arc<XorbMeta>>,
) -> Result<()> {
    let meta = |h: &MerkleHash| metas.get(h).ok_or(CasError::MissingXorb { hash: *h });
    for x in &c.xorbs {
        let m = meta(&x.hash)?;
        let what = |detail: String| {
            CasError::invalid_shard(ShardMismatch::CasEntry {
                xorb: x.hash,
                detail,
            })
        };
        if x.chunks.len() != m.chunk_hashes.len() {
            return Err(what(format!(
                "lists {} chunks, the stored xorb has {}",
                x.chunks.len(),
                m.chunk_hashes.len()
            )));
        }
        for (i, ch) in x.chunks.iter().enumerate() {
            let i32 = i as u32;
            let start = m.unpacked_ends[i] - m.chunk_size(i32);
            if ch.hash != m.chunk_hashes[i]
                || ch.unpacked != m.chunk_size(i32)
                || ch.byte_range_start != start
            {
                return Err(what(format!(
                    "chunk {i} is ({}, start {}, {} bytes), the stored xorb has ({}, start {start}, {} bytes)",
                    ch.hash,
                    ch.byte_range_start,
                    ch.unpacked,
                    m.chunk_hashes[i],
                    m.chunk_size(i32)
                )));
            }
        }
        if x.num_bytes_in_cas != m.unpacked_len() {
            return Err(what(format!(
                "num_bytes_in_cas is {}, the chunks hold {}",
                x.num_bytes_in_cas,
                m.unpacked_len()
            )));
        }
        let on_disk = [0, m.region_len(), format::stored_xorb_len(m)];
        if !on_disk.contains(&x.num_bytes_on_disk) {
            return Err(what(format!(
                "num_bytes_on_disk is {}, expected 0, {} or {}",
                x.num_bytes_on_disk, on_disk[1], on_disk[2]
            )));
        }
    }
    for f in &c.files {
        let what = |detail: String| {
            CasError::invalid_shard(ShardMismatch::File {
                file: f.hash,
                detail,
            })
        };
        // A file's sha256 is optional (clients upload bucket files without one) and a
        // claim the store cannot check without reading the file's data (the Hub layer
        // checks it before a commit relies on it), except for the empty file, whose
        // sha256 is known: hf_xet writes zeros for it, other clients the digest of no
        // bytes.
        if let Some(sha256) = f.sha256
            && f.terms.is_empty()
            && sha256 != [0; 32]
            && sha256 != empty_sha256()
        {
            return Err(what(format!(
                "the empty file's sha256 is {}, not {} (or zeros)",
                xet_hash::hex::encode(&sha256),
                xet_hash::hex::encode(&empty_sha256())
            )));
        }
        let Some(ver) = &f.verification else {
            return Err(what(
                "no verification entries; uploaded shards must carry one per term".into(),
            ));
        };
        if ver.len() != f.terms.len() {
            return Err(what(format!(
                "{} terms but {} verification entries",
                f.terms.len(),
                ver.len()
            )));
        }
        let mut chunks: Vec<(MerkleHash, u64)> = Vec::new();
        for (i, (t, v)) in f.terms.iter().zip(ver).enumerate() {
            let m = meta(&t.xorb)?;
            let Some(hashes) = m.hashes(t.chunks) else {
                return Err(what(format!(
                    "term {i} covers chunks {}..{} of xorb {}, which has {} chunks",
                    t.chunks.start,
                    t.chunks.end,
                    t.xorb,
                    m.num_chunks()
                )));
            };
            let real = m.unpacked_range_len(t.chunks).expect("range checked");
            if t.unpacked != real {
                return Err(what(format!(
                    "term {i} says {} unpacked bytes, its chunks hold {real}",
                    t.unpacked
                )));
            }
            let expected = xet_hash::verification_hash(hashes);
            if *v != expected {
                return Err(what(format!(
                    "term {i} verification hash is {v}, expected {expected}"
                )));
            }
            chunks.extend(
                (t.chunks.start..t.chunks.end)
                    .map(|j| (m.chunk_hashes[j as usize], m.chunk_size(j))),
            );
        }
        let computed = xet_hash::file_hash(&chunks);
        if computed != f.hash {
            return Err(what(format!("the terms' chunks hash to {computed}")));
        }
    }
    Ok(())
}
