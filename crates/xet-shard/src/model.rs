//! The in-memory shard model and its builders.

use std::collections::BTreeMap;
use std::ops::Range;

use xet_hash::MerkleHash;

use crate::ShardError;

/// File flag: one [`FileInfo::verification`] hash per term follows the terms.
pub const FILE_FLAG_WITH_VERIFICATION: u32 = 1 << 31;
/// File flag: a FileMetadataExt (sha256) follows.
pub const FILE_FLAG_WITH_METADATA_EXT: u32 = 1 << 30;
/// Chunk flag set by the reference's `local://` store on chunks eligible for global dedup.
pub const CHUNK_FLAG_GLOBAL_DEDUP: u32 = 1 << 31;

/// Sort key matching the reference's `MerkleHash` ordering: the four little-endian u64
/// words compared in order (not the raw bytes). File and CAS blocks are written in this order.
pub fn hash_order_key(h: &MerkleHash) -> [u64; 4] {
    [h.word(0), h.word(1), h.word(2), h.word(3)]
}

/// The truncated hash used as lookup-table key: the first 8 bytes as a little-endian u64.
pub fn truncate_hash(h: &MerkleHash) -> u64 {
    h.word(0)
}

/// One term of a file reconstruction (FileDataSequenceEntry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileTerm {
    pub xorb_hash: MerkleHash,
    pub cas_flags: u32,
    pub unpacked_segment_bytes: u32,
    pub chunk_index_start: u32,
    /// Exclusive.
    pub chunk_index_end: u32,
}

impl FileTerm {
    pub fn new(xorb_hash: MerkleHash, chunks: Range<u32>, unpacked_segment_bytes: u32) -> Self {
        FileTerm {
            xorb_hash,
            cas_flags: 0,
            unpacked_segment_bytes,
            chunk_index_start: chunks.start,
            chunk_index_end: chunks.end,
        }
    }
    pub fn chunk_range(&self) -> Range<u32> {
        self.chunk_index_start..self.chunk_index_end
    }
    pub fn num_chunks(&self) -> u32 {
        self.chunk_index_end.saturating_sub(self.chunk_index_start)
    }
}

/// One file info block.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FileInfo {
    pub file_hash: MerkleHash,
    /// Raw file flags. Bits 31 and 30 must agree with `verification` / `metadata_ext`;
    /// other bits are carried through unchanged.
    pub flags: u32,
    pub terms: Vec<FileTerm>,
    /// One verification hash per term, if the file has verification entries.
    pub verification: Option<Vec<MerkleHash>>,
    /// FileMetadataExt.sha256 exactly as stored: the reference's byte-swapped form
    /// ([`xet_hash::sha256_to_metadata_hash`]). See [`FileInfo::sha256_digest`].
    pub metadata_ext: Option<MerkleHash>,
}

impl FileInfo {
    /// A file info whose flags are derived from what is present.
    pub fn new(
        file_hash: MerkleHash,
        terms: Vec<FileTerm>,
        verification: Option<Vec<MerkleHash>>,
        metadata_ext: Option<MerkleHash>,
    ) -> Self {
        let mut flags = 0;
        if verification.is_some() {
            flags |= FILE_FLAG_WITH_VERIFICATION;
        }
        if metadata_ext.is_some() {
            flags |= FILE_FLAG_WITH_METADATA_EXT;
        }
        FileInfo {
            file_hash,
            flags,
            terms,
            verification,
            metadata_ext,
        }
    }

    pub fn has_verification(&self) -> bool {
        self.flags & FILE_FLAG_WITH_VERIFICATION != 0
    }
    pub fn has_metadata_ext(&self) -> bool {
        self.flags & FILE_FLAG_WITH_METADATA_EXT != 0
    }

    /// The plain sha256 digest (undoing the reference's byte swap), if present.
    pub fn sha256_digest(&self) -> Option<[u8; 32]> {
        self.metadata_ext
            .as_ref()
            .map(xet_hash::metadata_hash_to_sha256)
    }

    /// Sum of the terms' unpacked bytes: the file size.
    pub fn size(&self) -> u64 {
        self.terms
            .iter()
            .map(|t| t.unpacked_segment_bytes as u64)
            .sum()
    }

    /// Number of 48-byte records this block occupies, header included.
    pub fn num_records(&self) -> u64 {
        let n = self.terms.len() as u64;
        1 + n + if self.has_verification() { n } else { 0 } + u64::from(self.has_metadata_ext())
    }

    /// Check every verification entry: `term_chunks` gives the raw chunk hashes of a term's
    /// chunk range (`None` if unknown, which is an error).
    pub fn verify_terms<F>(&self, mut term_chunks: F) -> Result<(), ShardError>
    where
        F: FnMut(&FileTerm) -> Option<Vec<MerkleHash>>,
    {
        let Some(ver) = &self.verification else {
            return Err(ShardError::VerificationInput {
                file_hash: self.file_hash,
                term_index: 0,
                detail: "file has no verification entries".into(),
            });
        };
        for (i, (term, got)) in self.terms.iter().zip(ver).enumerate() {
            let Some(chunks) = term_chunks(term) else {
                return Err(ShardError::VerificationInput {
                    file_hash: self.file_hash,
                    term_index: i,
                    detail: format!(
                        "no chunk hashes for xorb {} range {:?}",
                        term.xorb_hash,
                        term.chunk_range()
                    ),
                });
            };
            if chunks.len() as u64 != term.num_chunks() as u64 {
                return Err(ShardError::VerificationInput {
                    file_hash: self.file_hash,
                    term_index: i,
                    detail: format!(
                        "term covers {} chunks, {} chunk hashes given",
                        term.num_chunks(),
                        chunks.len()
                    ),
                });
            }
            let expected = xet_hash::verification_hash(&chunks);
            if expected != *got {
                return Err(ShardError::VerificationMismatch {
                    file_hash: self.file_hash,
                    term_index: i,
                    expected,
                    got: *got,
                });
            }
        }
        Ok(())
    }

    /// Check every verification entry against the file's own chunk hashes in file order
    /// (term `i` covers the next `num_chunks` chunks of the file).
    pub fn verify_file_chunks(&self, file_chunks: &[MerkleHash]) -> Result<(), ShardError> {
        let mut pos = 0usize;
        self.verify_terms(|t| {
            let s = file_chunks.get(pos..pos + t.num_chunks() as usize)?;
            pos += s.len();
            Some(s.to_vec())
        })?;
        if pos != file_chunks.len() {
            return Err(ShardError::VerificationInput {
                file_hash: self.file_hash,
                term_index: self.terms.len(),
                detail: format!(
                    "terms cover {pos} chunks, the file has {}",
                    file_chunks.len()
                ),
            });
        }
        Ok(())
    }
}

/// Builds a [`FileInfo`] the way hf_xet does: a verification entry per term, and a
/// FileMetadataExt when a sha256 is given (flags `0xC0000000`).
#[derive(Debug, Clone)]
pub struct FileInfoBuilder {
    file_hash: MerkleHash,
    terms: Vec<FileTerm>,
    verification: Vec<MerkleHash>,
    sha256: Option<[u8; 32]>,
}

impl FileInfoBuilder {
    pub fn new(file_hash: MerkleHash) -> Self {
        FileInfoBuilder {
            file_hash,
            terms: Vec::new(),
            verification: Vec::new(),
            sha256: None,
        }
    }

    /// Add a term; `term_chunk_hashes` are the raw chunk hashes of the term's chunk range.
    pub fn add_term(
        &mut self,
        term: FileTerm,
        term_chunk_hashes: &[MerkleHash],
    ) -> Result<&mut Self, ShardError> {
        if term.chunk_index_end <= term.chunk_index_start {
            return Err(ShardError::InvalidTermRange {
                file_index: 0,
                term_index: self.terms.len(),
                offset: 0,
                start: term.chunk_index_start,
                end: term.chunk_index_end,
            });
        }
        if term_chunk_hashes.len() as u64 != term.num_chunks() as u64 {
            return Err(ShardError::VerificationInput {
                file_hash: self.file_hash,
                term_index: self.terms.len(),
                detail: format!(
                    "term covers {} chunks, {} chunk hashes given",
                    term.num_chunks(),
                    term_chunk_hashes.len()
                ),
            });
        }
        self.verification
            .push(xet_hash::verification_hash(term_chunk_hashes));
        self.terms.push(term);
        Ok(self)
    }

    /// Add a term covering `range` of a xorb described by `cas` (which must hold raw,
    /// unkeyed chunk hashes): sizes and hashes are taken from it.
    pub fn add_term_from_cas(
        &mut self,
        cas: &CasInfo,
        range: Range<u32>,
    ) -> Result<&mut Self, ShardError> {
        let Some(chunks) = cas.chunks.get(range.start as usize..range.end as usize) else {
            return Err(ShardError::VerificationInput {
                file_hash: self.file_hash,
                term_index: self.terms.len(),
                detail: format!(
                    "range {range:?} outside xorb {} with {} chunks",
                    cas.xorb_hash,
                    cas.chunks.len()
                ),
            });
        };
        let bytes: u64 = chunks.iter().map(|c| c.unpacked_segment_bytes as u64).sum();
        let bytes = u32::try_from(bytes).map_err(|_| ShardError::CountOverflow {
            what: "term bytes",
            count: bytes,
            limit: u32::MAX as u64,
        })?;
        let hashes: Vec<MerkleHash> = chunks.iter().map(|c| c.hash).collect();
        self.add_term(FileTerm::new(cas.xorb_hash, range, bytes), &hashes)
    }

    /// Record the file's plain sha256 digest (stored byte-swapped, as the reference does).
    pub fn sha256(&mut self, digest: [u8; 32]) -> &mut Self {
        self.sha256 = Some(digest);
        self
    }

    pub fn build(&self) -> FileInfo {
        FileInfo::new(
            self.file_hash,
            self.terms.clone(),
            Some(self.verification.clone()),
            self.sha256.map(|d| xet_hash::sha256_to_metadata_hash(&d)),
        )
    }
}

/// One chunk of a xorb (CASChunkSequenceEntry).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CasChunk {
    /// As stored: keyed when the shard's footer has a chunk hash key.
    pub hash: MerkleHash,
    /// Cumulative uncompressed offset of the chunk in the xorb.
    pub byte_range_start: u32,
    pub unpacked_segment_bytes: u32,
    /// Bit 31 = [`CHUNK_FLAG_GLOBAL_DEDUP`]. (The draft's "reserved 8 bytes" are a u32
    /// flags field plus 4 reserved bytes in the reference.)
    pub flags: u32,
}

/// One CAS info block (a xorb and its chunks).
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CasInfo {
    pub xorb_hash: MerkleHash,
    pub cas_flags: u32,
    /// Total uncompressed bytes.
    pub num_bytes_in_cas: u32,
    /// Serialized xorb size (hf_xet sends 0).
    pub num_bytes_on_disk: u32,
    pub chunks: Vec<CasChunk>,
}

impl CasInfo {
    /// Describe a xorb from its chunks' `(raw hash, uncompressed size)`: cumulative
    /// `byte_range_start`, flags 0.
    pub fn from_chunks(
        xorb_hash: MerkleHash,
        chunks: &[(MerkleHash, u64)],
        num_bytes_on_disk: u32,
    ) -> Result<CasInfo, ShardError> {
        let over = |count| ShardError::CountOverflow {
            what: "xorb uncompressed bytes",
            count,
            limit: u32::MAX as u64,
        };
        if chunks.len() as u64 > u32::MAX as u64 {
            return Err(ShardError::CountOverflow {
                what: "xorb chunks",
                count: chunks.len() as u64,
                limit: u32::MAX as u64,
            });
        }
        let mut pos: u64 = 0;
        let mut out = Vec::with_capacity(chunks.len());
        for &(hash, size) in chunks {
            let start = u32::try_from(pos).map_err(|_| over(pos))?;
            let len = u32::try_from(size).map_err(|_| over(size))?;
            out.push(CasChunk {
                hash,
                byte_range_start: start,
                unpacked_segment_bytes: len,
                flags: 0,
            });
            pos += size;
        }
        let total = u32::try_from(pos).map_err(|_| over(pos))?;
        Ok(CasInfo {
            xorb_hash,
            cas_flags: 0,
            num_bytes_in_cas: total,
            num_bytes_on_disk,
            chunks: out,
        })
    }

    /// Number of 48-byte records this block occupies, header included.
    pub fn num_records(&self) -> u64 {
        1 + self.chunks.len() as u64
    }
}

/// The footer values that are not derived from the layout.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FooterInfo {
    /// All zero = no key; otherwise every CAS chunk hash is `keyed_chunk_hash(key, raw)`.
    pub chunk_hash_key: MerkleHash,
    pub creation_timestamp: u64,
    pub key_expiry: u64,
    pub stored_bytes_on_disk: u64,
    pub materialized_bytes: u64,
    pub stored_bytes: u64,
    /// Whether the file/CAS/chunk lookup tables are written (otherwise all three are
    /// empty and point at the footer, as in the reference's `xorbs/shards/*.mdb`).
    pub lookup_tables: bool,
}

/// Options for turning a shard into its stored form ([`Shard::into_stored`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredOptions {
    pub lookup_tables: bool,
    /// Key the chunk hashes with this (a zero key means no keying).
    pub hmac_key: Option<MerkleHash>,
    pub creation_timestamp: u64,
    pub key_expiry: u64,
}

/// Seconds in the reference's shard-cache expiry (21 days).
pub const SHARD_CACHE_EXPIRY_SECS: u64 = 21 * 24 * 3600;

impl StoredOptions {
    /// What the reference `local://` store writes to `xet/xorbs/shards/<h>.mdb`: no lookup
    /// tables, timestamps 0.
    pub fn local_store() -> Self {
        StoredOptions {
            lookup_tables: false,
            hmac_key: None,
            creation_timestamp: 0,
            key_expiry: 0,
        }
    }
    /// What the reference writes to its shard cache: full lookup tables, the creation
    /// time, and an expiry 21 days later.
    pub fn shard_cache(creation_timestamp: u64) -> Self {
        StoredOptions {
            lookup_tables: true,
            hmac_key: None,
            creation_timestamp,
            key_expiry: creation_timestamp.saturating_add(SHARD_CACHE_EXPIRY_SECS),
        }
    }
    /// A global-dedup answer: lookup tables and (optionally) keyed chunk hashes.
    pub fn dedup_answer(
        hmac_key: Option<MerkleHash>,
        creation_timestamp: u64,
        key_expiry: u64,
    ) -> Self {
        StoredOptions {
            lookup_tables: true,
            hmac_key,
            creation_timestamp,
            key_expiry,
        }
    }
}

/// Where a chunk was found.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkLocation {
    pub xorb_hash: MerkleHash,
    /// Index of the CAS block in the shard.
    pub cas_index: usize,
    /// Index of the chunk in the xorb.
    pub chunk_index: u32,
}

/// A file lookup table entry: truncated file hash and the file block's record index
/// (48-byte units from the start of the file info section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct FileLookupEntry {
    pub key: u64,
    pub entry_index: u32,
}

/// A CAS lookup table entry: truncated xorb hash and the CAS block's record index
/// (48-byte units from the start of the CAS info section).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CasLookupEntry {
    pub key: u64,
    pub entry_index: u32,
}

/// A chunk lookup table entry: truncated (keyed, if keyed) chunk hash, the CAS block's
/// record index and the chunk's index within it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ChunkLookupEntry {
    pub key: u64,
    pub cas_entry_index: u32,
    pub chunk_index: u32,
}

/// The three lookup tables of a stored shard.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LookupTables {
    pub files: Vec<FileLookupEntry>,
    pub cas: Vec<CasLookupEntry>,
    pub chunks: Vec<ChunkLookupEntry>,
}

/// A shard: file infos, CAS infos, and the footer values when in stored form.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Shard {
    pub files: Vec<FileInfo>,
    pub cas: Vec<CasInfo>,
    /// `None` = upload form (no lookup tables, no footer).
    pub footer: Option<FooterInfo>,
}

impl Shard {
    pub fn new(files: Vec<FileInfo>, cas: Vec<CasInfo>) -> Self {
        Shard {
            files,
            cas,
            footer: None,
        }
    }

    /// The key the CAS chunk hashes are keyed with, if any.
    pub fn chunk_hash_key(&self) -> Option<MerkleHash> {
        self.footer
            .map(|f| f.chunk_hash_key)
            .filter(|k| !k.is_zero())
    }

    /// Sort file and CAS blocks by hash as the reference does (its in-memory shard is a
    /// `BTreeMap` keyed by hash).
    pub fn sort_canonical(&mut self) {
        self.files.sort_by_key(|f| hash_order_key(&f.file_hash));
        self.cas.sort_by_key(|c| hash_order_key(&c.xorb_hash));
    }

    /// Σ unpacked bytes over all terms of all files (footer `materialized_bytes`).
    pub fn materialized_bytes(&self) -> u64 {
        self.files.iter().map(FileInfo::size).sum()
    }
    /// Σ `num_bytes_in_cas` (footer `stored_bytes`).
    pub fn stored_bytes(&self) -> u64 {
        self.cas.iter().map(|c| c.num_bytes_in_cas as u64).sum()
    }
    /// Σ `num_bytes_on_disk` (footer `stored_bytes_on_disk`).
    pub fn stored_bytes_on_disk(&self) -> u64 {
        self.cas.iter().map(|c| c.num_bytes_on_disk as u64).sum()
    }

    /// Drop the footer: the upload form.
    pub fn into_upload(mut self) -> Shard {
        self.footer = None;
        self
    }

    /// The stored form: footer values computed from the content and `opts`; with a
    /// non-zero `opts.hmac_key` every CAS chunk hash (assumed raw) is replaced by
    /// `keyed_chunk_hash(key, hash)`. Fails if the hashes are already keyed.
    pub fn into_stored(mut self, opts: StoredOptions) -> Result<Shard, ShardError> {
        let mut key = self.chunk_hash_key().unwrap_or(MerkleHash::ZERO);
        if let Some(new_key) = opts.hmac_key.filter(|k| !k.is_zero()) {
            if !key.is_zero() {
                return Err(ShardError::AlreadyKeyed { existing: key });
            }
            for c in &mut self.cas {
                for ch in &mut c.chunks {
                    ch.hash = xet_hash::keyed_chunk_hash(&new_key, &ch.hash);
                }
            }
            key = new_key;
        }
        self.footer = Some(FooterInfo {
            chunk_hash_key: key,
            creation_timestamp: opts.creation_timestamp,
            key_expiry: opts.key_expiry,
            stored_bytes_on_disk: self.stored_bytes_on_disk(),
            materialized_bytes: self.materialized_bytes(),
            stored_bytes: self.stored_bytes(),
            lookup_tables: opts.lookup_tables,
        });
        Ok(self)
    }

    /// Set [`CHUNK_FLAG_GLOBAL_DEDUP`] the way the reference's `local://` store does when
    /// it stores an uploaded shard: on the first chunk of every file in this shard (the
    /// first term's xorb and `chunk_index_start`), when that xorb is listed here. Existing
    /// flags are kept; chunks eligible only by their hash (draft §10.3.1) are *not* flagged
    /// (the reference treats those as eligible regardless of the flag).
    pub fn mark_global_dedup_chunks(&mut self) {
        let firsts: std::collections::HashSet<(MerkleHash, u32)> = self
            .files
            .iter()
            .filter_map(|f| f.terms.first())
            .map(|t| (t.xorb_hash, t.chunk_index_start))
            .collect();
        for c in &mut self.cas {
            for (i, ch) in c.chunks.iter_mut().enumerate() {
                if firsts.contains(&(c.xorb_hash, i as u32)) {
                    ch.flags |= CHUNK_FLAG_GLOBAL_DEDUP;
                }
            }
        }
    }

    /// Record index (48-byte units from the section start) of each file block.
    pub fn file_entry_indices(&self) -> Result<Vec<u32>, ShardError> {
        entry_indices(
            self.files.iter().map(FileInfo::num_records),
            "file info records",
        )
    }

    /// Record index (48-byte units from the section start) of each CAS block.
    pub fn cas_entry_indices(&self) -> Result<Vec<u32>, ShardError> {
        entry_indices(
            self.cas.iter().map(CasInfo::num_records),
            "CAS info records",
        )
    }

    /// The lookup tables exactly as the reference builds them: file and CAS entries in
    /// block order (stable-sorted by key, which is a no-op for hash-sorted blocks as the
    /// reference always writes), chunk entries collected in block order and then
    /// `sort_unstable_by_key` on the key, like the reference (so ties land where the
    /// reference's std sort puts them).
    pub fn lookup_tables(&self) -> Result<LookupTables, ShardError> {
        let fidx = self.file_entry_indices()?;
        let cidx = self.cas_entry_indices()?;
        let mut files: Vec<FileLookupEntry> = self
            .files
            .iter()
            .zip(&fidx)
            .map(|(f, &i)| FileLookupEntry {
                key: truncate_hash(&f.file_hash),
                entry_index: i,
            })
            .collect();
        files.sort_by_key(|e| e.key);
        let mut cas: Vec<CasLookupEntry> = self
            .cas
            .iter()
            .zip(&cidx)
            .map(|(c, &i)| CasLookupEntry {
                key: truncate_hash(&c.xorb_hash),
                entry_index: i,
            })
            .collect();
        cas.sort_by_key(|e| e.key);

        let total: usize = self.cas.iter().map(|c| c.chunks.len()).sum();
        let mut keys: Vec<u64> = Vec::with_capacity(total);
        let mut vals: Vec<(u32, u32)> = Vec::with_capacity(total);
        for (c, &ci) in self.cas.iter().zip(&cidx) {
            for (j, ch) in c.chunks.iter().enumerate() {
                keys.push(truncate_hash(&ch.hash));
                // j < num_records <= u32::MAX, checked by cas_entry_indices
                vals.push((ci, j as u32));
            }
        }
        // Same element type and call as the reference, so ties sort identically.
        let mut combined: Vec<(&u64, &(u32, u32))> = keys.iter().zip(vals.iter()).collect();
        combined.sort_unstable_by_key(|&(k, _)| k);
        let chunks = combined
            .iter()
            .map(
                |&(&key, &(cas_entry_index, chunk_index))| ChunkLookupEntry {
                    key,
                    cas_entry_index,
                    chunk_index,
                },
            )
            .collect();
        Ok(LookupTables { files, cas, chunks })
    }

    /// Linear scan for a file.
    pub fn find_file(&self, file_hash: &MerkleHash) -> Option<&FileInfo> {
        self.files.iter().find(|f| f.file_hash == *file_hash)
    }

    /// Linear scan for a xorb.
    pub fn find_cas(&self, xorb_hash: &MerkleHash) -> Option<&CasInfo> {
        self.cas.iter().find(|c| c.xorb_hash == *xorb_hash)
    }

    /// Linear scan for a raw chunk hash (keyed with the footer's key first, if any).
    pub fn find_chunk(&self, chunk_hash: &MerkleHash) -> Option<ChunkLocation> {
        self.find_chunk_keyed(&self.stored_chunk_hash(chunk_hash))
    }

    /// Linear scan for a chunk hash exactly as stored (already keyed if the shard is keyed).
    pub fn find_chunk_keyed(&self, stored_hash: &MerkleHash) -> Option<ChunkLocation> {
        for (ci, c) in self.cas.iter().enumerate() {
            if let Some(j) = c.chunks.iter().position(|ch| ch.hash == *stored_hash) {
                return Some(ChunkLocation {
                    xorb_hash: c.xorb_hash,
                    cas_index: ci,
                    chunk_index: j as u32,
                });
            }
        }
        None
    }

    /// The form a raw chunk hash takes in this shard's CAS section.
    pub fn stored_chunk_hash(&self, raw: &MerkleHash) -> MerkleHash {
        match self.chunk_hash_key() {
            Some(k) => xet_hash::keyed_chunk_hash(&k, raw),
            None => *raw,
        }
    }

    /// Check everything serialization and parsing rely on: no bookend hashes, counts that
    /// fit, flags consistent with content, term ranges non-empty, verification all-or-none,
    /// cumulative chunk offsets and `num_bytes_in_cas`.
    pub fn validate(&self) -> Result<(), ShardError> {
        let u32max = u32::MAX as u64;
        let mut first_ver: Option<bool> = None;
        for (fi, f) in self.files.iter().enumerate() {
            if f.file_hash.0 == [0xFF; 32] {
                return Err(ShardError::BookendHash {
                    what: "file",
                    index: fi,
                });
            }
            if f.terms.len() as u64 > u32max {
                return Err(ShardError::CountOverflow {
                    what: "file terms",
                    count: f.terms.len() as u64,
                    limit: u32max,
                });
            }
            let incons = |detail: String| ShardError::FileInconsistent {
                file_index: fi,
                file_hash: f.file_hash,
                detail,
            };
            match (&f.verification, f.has_verification()) {
                (Some(v), true) if v.len() != f.terms.len() => {
                    return Err(incons(format!(
                        "{} terms but {} verification hashes",
                        f.terms.len(),
                        v.len()
                    )));
                }
                (Some(_), false) => {
                    return Err(incons(
                        "verification hashes present but flag bit 31 clear".into(),
                    ));
                }
                (None, true) => {
                    return Err(incons("flag bit 31 set but no verification hashes".into()));
                }
                _ => {}
            }
            if f.metadata_ext.is_some() != f.has_metadata_ext() {
                return Err(incons(format!(
                    "metadata_ext is {} but flag bit 30 is {}",
                    if f.metadata_ext.is_some() {
                        "present"
                    } else {
                        "absent"
                    },
                    if f.has_metadata_ext() { "set" } else { "clear" }
                )));
            }
            let v = f.has_verification();
            match first_ver {
                None => first_ver = Some(v),
                Some(e) if e != v => {
                    return Err(ShardError::MixedVerification {
                        file_index: fi,
                        offset: 0,
                        expected: e,
                        got: v,
                    });
                }
                _ => {}
            }
            for (ti, t) in f.terms.iter().enumerate() {
                if t.chunk_index_end <= t.chunk_index_start {
                    return Err(ShardError::InvalidTermRange {
                        file_index: fi,
                        term_index: ti,
                        offset: 0,
                        start: t.chunk_index_start,
                        end: t.chunk_index_end,
                    });
                }
            }
        }
        for (ci, c) in self.cas.iter().enumerate() {
            if c.xorb_hash.0 == [0xFF; 32] {
                return Err(ShardError::BookendHash {
                    what: "xorb",
                    index: ci,
                });
            }
            if c.chunks.len() as u64 > u32max {
                return Err(ShardError::CountOverflow {
                    what: "xorb chunks",
                    count: c.chunks.len() as u64,
                    limit: u32max,
                });
            }
            check_cas_consistency(ci, 0, c)?;
        }
        self.file_entry_indices()?;
        self.cas_entry_indices()?;
        Ok(())
    }
}

pub(crate) fn check_cas_consistency(ci: usize, offset: u64, c: &CasInfo) -> Result<(), ShardError> {
    let mut pos: u64 = 0;
    for ch in &c.chunks {
        if ch.byte_range_start as u64 != pos {
            return Err(ShardError::CasInconsistent {
                cas_index: ci,
                offset,
                field: "chunk_byte_range_start",
                expected: pos,
                got: ch.byte_range_start as u64,
            });
        }
        pos += ch.unpacked_segment_bytes as u64;
    }
    if c.num_bytes_in_cas as u64 != pos {
        return Err(ShardError::CasInconsistent {
            cas_index: ci,
            offset,
            field: "num_bytes_in_cas",
            expected: pos,
            got: c.num_bytes_in_cas as u64,
        });
    }
    Ok(())
}

fn entry_indices(
    records: impl Iterator<Item = u64>,
    what: &'static str,
) -> Result<Vec<u32>, ShardError> {
    let mut out = Vec::with_capacity(records.size_hint().0);
    let mut idx: u64 = 0;
    for r in records {
        let i = u32::try_from(idx).map_err(|_| ShardError::CountOverflow {
            what,
            count: idx,
            limit: u32::MAX as u64,
        })?;
        out.push(i);
        idx += r;
    }
    Ok(out)
}

/// Collects files and xorbs the way the reference's in-memory shard does: one entry per
/// hash (the first added wins), written in hash order.
#[derive(Debug, Clone, Default)]
pub struct ShardBuilder {
    files: BTreeMap<[u64; 4], FileInfo>,
    cas: BTreeMap<[u64; 4], CasInfo>,
}

impl ShardBuilder {
    pub fn new() -> Self {
        Self::default()
    }
    /// Add a file; returns false if a file with that hash was already present.
    pub fn add_file(&mut self, f: FileInfo) -> bool {
        let k = hash_order_key(&f.file_hash);
        if self.files.contains_key(&k) {
            return false;
        }
        self.files.insert(k, f);
        true
    }
    /// Add a xorb; returns false if a xorb with that hash was already present.
    pub fn add_cas(&mut self, c: CasInfo) -> bool {
        let k = hash_order_key(&c.xorb_hash);
        if self.cas.contains_key(&k) {
            return false;
        }
        self.cas.insert(k, c);
        true
    }
    /// The upload form (no footer), blocks in hash order.
    pub fn build(self) -> Shard {
        Shard::new(
            self.files.into_values().collect(),
            self.cas.into_values().collect(),
        )
    }
}
