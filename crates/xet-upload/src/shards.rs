//! File records and the shards that register them.

use std::path::PathBuf;

use xet_hash::MerkleHash;
use xet_shard::{CasInfo, FileInfo, FileTerm, Shard, ShardBuilder};

use crate::dedup::{FileDedup, TermRec};
use crate::error::{Result, UploadError};
use crate::report::FileReport;

/// Everything known about a processed file; terms may still point at session slots.
#[derive(Debug, Clone)]
pub(crate) struct FileRecord {
    pub path: PathBuf,
    pub hash: MerkleHash,
    pub size: u64,
    pub sha256: [u8; 32],
    pub terms: Vec<TermRec>,
    pub verification: Vec<MerkleHash>,
    pub new_bytes: u64,
    pub deduped_bytes: u64,
}

impl FileRecord {
    pub fn new(path: PathBuf, size: u64, sha256: [u8; 32], f: FileDedup) -> Result<FileRecord> {
        let chunked: u64 = f.chunks.iter().map(|c| c.1).sum();
        if chunked != size {
            return Err(UploadError::Internal(format!(
                "{}: read {size} bytes but chunked {chunked}",
                path.display()
            )));
        }
        let hash = xet_hash::file_hash(&f.chunks);
        let mut verification = Vec::with_capacity(f.terms.len());
        let mut pos = 0usize;
        for t in &f.terms {
            let n = (t.end - t.start) as usize;
            let hashes: Vec<MerkleHash> = f.chunks[pos..pos + n].iter().map(|c| c.0).collect();
            verification.push(xet_hash::verification_hash(&hashes));
            pos += n;
        }
        debug_assert_eq!(pos, f.chunks.len());
        Ok(FileRecord {
            path,
            hash,
            size,
            sha256,
            terms: f.terms,
            verification,
            new_bytes: f.new_bytes,
            deduped_bytes: f.deduped_bytes,
        })
    }

    pub fn report(&self) -> FileReport {
        FileReport {
            path: self.path.clone(),
            hash: self.hash,
            size: self.size,
            sha256: MerkleHash::from_bytes(self.sha256).raw_hex(),
            new_bytes: self.new_bytes,
            deduped_bytes: self.deduped_bytes,
            terms: self.terms.len(),
        }
    }

    /// The file info as hf_xet writes it: flags 0xC0000000, one verification entry per
    /// term, FileMetadataExt with the byte-swapped sha256 (zeros for the empty file).
    pub fn to_file_info(
        &self,
        resolve: &dyn Fn(&TermRec) -> Result<MerkleHash>,
    ) -> Result<FileInfo> {
        let mut terms = Vec::with_capacity(self.terms.len());
        for t in &self.terms {
            let bytes = u32::try_from(t.bytes)
                .map_err(|_| UploadError::Internal("term larger than 4 GiB".into()))?;
            terms.push(FileTerm::new(resolve(t)?, t.start..t.end, bytes));
        }
        let meta = if self.size == 0 {
            MerkleHash::ZERO
        } else {
            xet_hash::sha256_to_metadata_hash(&self.sha256)
        };
        Ok(FileInfo::new(
            self.hash,
            terms,
            Some(self.verification.clone()),
            Some(meta),
        ))
    }
}

/// Upload-form size of a shard holding these blocks: header, records, two bookends.
fn upload_len(records: u64) -> u64 {
    (xet_shard::HEADER_SIZE as u64) + (records + 2) * xet_shard::RECORD_SIZE as u64
}

/// Group file and CAS infos into shards of at most `max_bytes` (upload form), each
/// with its blocks sorted by hash (one shard unless the limit forces more), and
/// serialize them. Duplicate files (same hash) are registered once.
pub(crate) fn build_shards(
    files: Vec<FileInfo>,
    cas: Vec<CasInfo>,
    max_bytes: u64,
) -> Result<Vec<(Shard, Vec<u8>)>> {
    let mut groups: Vec<ShardBuilder> = Vec::new();
    let mut cur = ShardBuilder::new();
    let mut cur_records = 0u64;
    let mut empty = true;
    let mut seen = std::collections::HashSet::new();
    let items = files
        .into_iter()
        .filter(|f| seen.insert(f.file_hash))
        .map(|f| (f.num_records(), Some(f), None))
        .chain(cas.into_iter().map(|c| (c.num_records(), None, Some(c))));
    for (records, f, c) in items {
        if upload_len(records) > max_bytes {
            return Err(UploadError::Internal(format!(
                "one shard block of {records} records exceeds the shard size limit"
            )));
        }
        if !empty && upload_len(cur_records + records) > max_bytes {
            groups.push(std::mem::take(&mut cur));
            cur_records = 0;
        }
        if let Some(f) = f {
            cur.add_file(f);
        }
        if let Some(c) = c {
            cur.add_cas(c);
        }
        cur_records += records;
        empty = false;
    }
    if !empty {
        groups.push(cur);
    }
    groups
        .into_iter()
        .map(|b| {
            let shard = b.build();
            let bytes = shard
                .to_upload_bytes()
                .map_err(|e| UploadError::Internal(format!("serializing shard: {e}")))?;
            Ok((shard, bytes))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_below_the_limit() {
        let files: Vec<FileInfo> = (0..50u8)
            .map(|i| {
                let h = MerkleHash::from_bytes([i; 32]);
                let terms = vec![FileTerm::new(MerkleHash::from_bytes([200; 32]), 0..1, 10); 3];
                FileInfo::new(h, terms, Some(vec![h; 3]), Some(h))
            })
            .collect();
        let one = build_shards(files.clone(), vec![], 64 << 20).unwrap();
        assert_eq!(one.len(), 1);
        let max = one[0].1.len() as u64 / 4;
        let many = build_shards(files, vec![], max).unwrap();
        assert!(many.len() >= 4);
        assert!(many.iter().all(|(_, b)| b.len() as u64 <= max));
        assert_eq!(many.iter().map(|(s, _)| s.files.len()).sum::<usize>(), 50);
    }
}
