//! Naming the bad chunk after a file-hash mismatch.
//!
//! A reconstruction carries no chunk hashes, so when the recomputed file hash is wrong
//! the pipeline knows only that *some* chunk is. The CAS does publish chunk hashes in
//! one place: global-dedup answers ([`xet_cas::Cas::dedup_shard`]), full shards listing
//! every chunk (hash and size) of the xorbs holding a given chunk. The first chunk of
//! each file and hash-eligible chunks are indexed there. So: ask for a few of this
//! file's chunks that are likely indexed, and compare every chunk we decoded from the
//! xorbs in the answers with the listed (possibly HMAC-keyed) hashes. This is a
//! diagnostic on the failure path only; any error in it is ignored.

use std::collections::{BTreeMap, HashMap};

use xet_cas::Term;
use xet_hash::MerkleHash;

use crate::ctx::{Assembled, Shared};

/// Most dedup queries made for one diagnosis.
const MAX_QUERIES: usize = 8;

pub(crate) async fn find_corrupt_chunk(shared: &Shared, assembled: &Assembled) -> Option<String> {
    // What we decoded: xorb → chunk index → (hash, size, term index).
    let mut ours: HashMap<MerkleHash, BTreeMap<u32, (MerkleHash, u32, usize)>> = HashMap::new();
    for (ti, (term, chunks)) in assembled.iter().enumerate() {
        let first = term.chunks.end.saturating_sub(chunks.len() as u32);
        let m = ours.entry(term.xorb).or_default();
        for (i, (h, s)) in chunks.iter().enumerate() {
            m.insert(first + i as u32, (*h, *s, ti));
        }
    }
    // Queries: the file's first two chunks, then eligible chunks of not yet covered xorbs.
    let mut queries: Vec<MerkleHash> = Vec::new();
    let all = assembled
        .iter()
        .flat_map(|(_, c)| c.iter().map(|(h, _)| *h));
    queries.extend(all.clone().take(2));
    let mut seen_xorbs: Vec<MerkleHash> = Vec::new();
    for (term, chunks) in assembled {
        if queries.len() >= MAX_QUERIES {
            break;
        }
        if seen_xorbs.contains(&term.xorb) {
            continue;
        }
        if let Some((h, _)) = chunks.iter().find(|(h, _)| h.is_global_dedup_eligible()) {
            queries.push(*h);
            seen_xorbs.push(term.xorb);
        }
    }
    queries.dedup();
    let mut checked: Vec<MerkleHash> = Vec::new();
    for q in queries {
        let answer =
            match tokio::time::timeout(shared.opts.stall_timeout, shared.cas.dedup_shard(&q)).await
            {
                Ok(Ok(Some(b))) => b,
                _ => continue,
            };
        let Ok(shard) = xet_shard::Shard::parse(&answer, &xet_shard::Limits::default()) else {
            continue;
        };
        let key = shard.chunk_hash_key();
        for cas in &shard.cas {
            if checked.contains(&cas.xorb_hash) {
                continue;
            }
            let Some(mine) = ours.get(&cas.xorb_hash) else {
                continue;
            };
            checked.push(cas.xorb_hash);
            for (&idx, &(h, size, ti)) in mine {
                let Some(listed) = cas.chunks.get(idx as usize) else {
                    continue;
                };
                let expect = match key {
                    Some(k) => xet_hash::keyed_chunk_hash(&k, &h),
                    None => h,
                };
                if listed.hash != expect || listed.unpacked_segment_bytes != size {
                    return Some(describe(
                        &cas.xorb_hash,
                        idx,
                        &h,
                        size,
                        ti,
                        &assembled[ti].0,
                    ));
                }
            }
        }
    }
    None
}

fn describe(
    xorb: &MerkleHash,
    idx: u32,
    h: &MerkleHash,
    size: u32,
    ti: usize,
    term: &Term,
) -> String {
    format!(
        "chunk {idx} of xorb {xorb} (term {ti}, chunks {}..{}) decoded to {size} bytes hashing to {h}, \
         which is not the chunk the CAS lists there: the xorb's stored data is corrupt",
        term.chunks.start, term.chunks.end
    )
}
