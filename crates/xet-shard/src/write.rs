//! Serialization of both forms.

use xet_hash::MerkleHash;

use crate::model::{FooterInfo, LookupTables, Shard};
use crate::{
    FOOTER_SIZE, FOOTER_VERSION, HEADER_SIZE, HEADER_TAG, HEADER_VERSION, RECORD_SIZE, ShardError,
};

const BOOKEND: [u8; RECORD_SIZE] = {
    let mut b = [0u8; RECORD_SIZE];
    let mut i = 0;
    while i < 32 {
        b[i] = 0xFF;
        i += 1;
    }
    b
};

fn put_hash(out: &mut Vec<u8>, h: &MerkleHash) {
    out.extend_from_slice(&h.0);
}
fn put_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}
fn put_u64(out: &mut Vec<u8>, v: u64) {
    out.extend_from_slice(&v.to_le_bytes());
}

/// The 200-byte footer with every field, as decoded from or written to the bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct RawFooter {
    pub version: u64,
    pub file_info_offset: u64,
    pub cas_info_offset: u64,
    pub file_lookup_offset: u64,
    pub file_lookup_num_entries: u64,
    pub cas_lookup_offset: u64,
    pub cas_lookup_num_entries: u64,
    pub chunk_lookup_offset: u64,
    pub chunk_lookup_num_entries: u64,
    pub chunk_hash_key: MerkleHash,
    pub creation_timestamp: u64,
    pub key_expiry: u64,
    /// Reserved 48 bytes at offset 120 (zeros when written by us or the reference).
    pub reserved: [u64; 6],
    pub stored_bytes_on_disk: u64,
    pub materialized_bytes: u64,
    pub stored_bytes: u64,
    pub footer_offset: u64,
}

impl RawFooter {
    pub fn to_bytes(&self) -> [u8; FOOTER_SIZE] {
        let mut v = Vec::with_capacity(FOOTER_SIZE);
        for x in [
            self.version,
            self.file_info_offset,
            self.cas_info_offset,
            self.file_lookup_offset,
            self.file_lookup_num_entries,
            self.cas_lookup_offset,
            self.cas_lookup_num_entries,
            self.chunk_lookup_offset,
            self.chunk_lookup_num_entries,
        ] {
            put_u64(&mut v, x);
        }
        put_hash(&mut v, &self.chunk_hash_key);
        put_u64(&mut v, self.creation_timestamp);
        put_u64(&mut v, self.key_expiry);
        for x in self.reserved {
            put_u64(&mut v, x);
        }
        for x in [
            self.stored_bytes_on_disk,
            self.materialized_bytes,
            self.stored_bytes,
            self.footer_offset,
        ] {
            put_u64(&mut v, x);
        }
        let mut out = [0u8; FOOTER_SIZE];
        out.copy_from_slice(&v);
        out
    }

    pub fn from_bytes(b: &[u8; FOOTER_SIZE]) -> RawFooter {
        let u = |i: usize| u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"));
        let mut key = [0u8; 32];
        key.copy_from_slice(&b[72..104]);
        RawFooter {
            version: u(0),
            file_info_offset: u(8),
            cas_info_offset: u(16),
            file_lookup_offset: u(24),
            file_lookup_num_entries: u(32),
            cas_lookup_offset: u(40),
            cas_lookup_num_entries: u(48),
            chunk_lookup_offset: u(56),
            chunk_lookup_num_entries: u(64),
            chunk_hash_key: MerkleHash(key),
            creation_timestamp: u(104),
            key_expiry: u(112),
            reserved: [u(120), u(128), u(136), u(144), u(152), u(160)],
            stored_bytes_on_disk: u(168),
            materialized_bytes: u(176),
            stored_bytes: u(184),
            footer_offset: u(192),
        }
    }
}

impl Shard {
    /// Serialize: the stored form if `footer` is set, the upload form otherwise.
    pub fn to_bytes(&self) -> Result<Vec<u8>, ShardError> {
        match &self.footer {
            Some(f) => self.to_stored_bytes(f),
            None => self.to_upload_bytes(),
        }
    }

    /// The upload form: header with `footer_size = 0`, file info section + bookend, CAS
    /// info section + bookend; nothing else.
    pub fn to_upload_bytes(&self) -> Result<Vec<u8>, ShardError> {
        self.validate()?;
        let mut out = Vec::with_capacity(self.body_len());
        self.write_body(&mut out, 0);
        Ok(out)
    }

    /// The stored form with the given footer values (the layout-derived fields are
    /// computed).
    pub fn to_stored_bytes(&self, info: &FooterInfo) -> Result<Vec<u8>, ShardError> {
        self.validate()?;
        let tables = if info.lookup_tables {
            self.lookup_tables()?
        } else {
            LookupTables::default()
        };
        let table_len = tables.files.len() * 12 + tables.cas.len() * 12 + tables.chunks.len() * 16;
        let mut out = Vec::with_capacity(self.body_len() + table_len + FOOTER_SIZE);
        let cas_info_offset = self.write_body(&mut out, FOOTER_SIZE as u64);
        let file_lookup_offset = out.len() as u64;
        for e in &tables.files {
            put_u64(&mut out, e.key);
            put_u32(&mut out, e.entry_index);
        }
        let cas_lookup_offset = out.len() as u64;
        for e in &tables.cas {
            put_u64(&mut out, e.key);
            put_u32(&mut out, e.entry_index);
        }
        let chunk_lookup_offset = out.len() as u64;
        for e in &tables.chunks {
            put_u64(&mut out, e.key);
            put_u32(&mut out, e.cas_entry_index);
            put_u32(&mut out, e.chunk_index);
        }
        let footer = RawFooter {
            version: FOOTER_VERSION,
            file_info_offset: HEADER_SIZE as u64,
            cas_info_offset,
            file_lookup_offset,
            file_lookup_num_entries: tables.files.len() as u64,
            cas_lookup_offset,
            cas_lookup_num_entries: tables.cas.len() as u64,
            chunk_lookup_offset,
            chunk_lookup_num_entries: tables.chunks.len() as u64,
            chunk_hash_key: info.chunk_hash_key,
            creation_timestamp: info.creation_timestamp,
            key_expiry: info.key_expiry,
            reserved: [0; 6],
            stored_bytes_on_disk: info.stored_bytes_on_disk,
            materialized_bytes: info.materialized_bytes,
            stored_bytes: info.stored_bytes,
            footer_offset: out.len() as u64,
        };
        out.extend_from_slice(&footer.to_bytes());
        Ok(out)
    }

    fn body_len(&self) -> usize {
        let recs: u64 = self.files.iter().map(|f| f.num_records()).sum::<u64>()
            + self.cas.iter().map(|c| c.num_records()).sum::<u64>()
            + 2;
        HEADER_SIZE + (recs as usize).saturating_mul(RECORD_SIZE)
    }

    /// Header + both sections; returns the CAS info offset.
    fn write_body(&self, out: &mut Vec<u8>, footer_size: u64) -> u64 {
        out.extend_from_slice(&HEADER_TAG);
        put_u64(out, HEADER_VERSION);
        put_u64(out, footer_size);
        for f in &self.files {
            put_hash(out, &f.file_hash);
            put_u32(out, f.flags);
            put_u32(out, f.terms.len() as u32);
            put_u64(out, 0);
            for t in &f.terms {
                put_hash(out, &t.xorb_hash);
                put_u32(out, t.cas_flags);
                put_u32(out, t.unpacked_segment_bytes);
                put_u32(out, t.chunk_index_start);
                put_u32(out, t.chunk_index_end);
            }
            if let Some(v) = &f.verification {
                for h in v {
                    put_hash(out, h);
                    out.extend_from_slice(&[0u8; 16]);
                }
            }
            if let Some(m) = &f.metadata_ext {
                put_hash(out, m);
                out.extend_from_slice(&[0u8; 16]);
            }
        }
        out.extend_from_slice(&BOOKEND);
        let cas_info_offset = out.len() as u64;
        for c in &self.cas {
            put_hash(out, &c.xorb_hash);
            put_u32(out, c.cas_flags);
            put_u32(out, c.chunks.len() as u32);
            put_u32(out, c.num_bytes_in_cas);
            put_u32(out, c.num_bytes_on_disk);
            for ch in &c.chunks {
                put_hash(out, &ch.hash);
                put_u32(out, ch.byte_range_start);
                put_u32(out, ch.unpacked_segment_bytes);
                put_u32(out, ch.flags);
                put_u32(out, 0);
            }
        }
        out.extend_from_slice(&BOOKEND);
        cas_info_offset
    }
}

/// The name the reference gives a shard file (`<h>.mdb` in `xet/xorbs/shards/` and
/// `xet/shard-cache/`): the chunk hash (DATA_KEY-keyed blake3) of the file's complete
/// bytes exactly as written — footer and lookup tables included. Print it with `Display`.
pub fn shard_hash(shard_bytes: &[u8]) -> MerkleHash {
    xet_hash::chunk_hash(shard_bytes)
}
