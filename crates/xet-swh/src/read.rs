//! Reading: the validating open, lookups, iteration, verification, and swh-shard's delete.

use crate::chd::{ChdPh, MAX_KEYS};
use crate::error::ReadError;
use crate::{DELETED_OFFSET, HEADER_LEN, HEADER_OFFSET, INDEX_ENTRY_LEN, KEY_LEN, MAGIC, VERSION};

/// End of the header: nothing may start before it.
const HEADER_END: u64 = HEADER_OFFSET + HEADER_LEN;

/// The caller's budget for one [`ShardReader::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadLimits {
    /// Largest accepted file.
    pub max_bytes: u64,
    /// Largest `objects_count` in the header.
    pub max_objects: u64,
    /// Largest slot count `n` of the hash function (index entries; about 1.01 per object).
    /// The decoded displacements take at most 4 bytes per slot.
    pub max_slots: u64,
    /// Largest hash section (the cmph dump), in bytes.
    pub max_hash_bytes: u64,
}

impl Default for ReadLimits {
    /// Any file length; up to 4·10⁹ objects and u32::MAX slots (what the format's u32 fields
    /// hold); a hash section of up to 256 MiB (about a billion objects: 2.1 bits each).
    fn default() -> Self {
        ReadLimits {
            max_bytes: u64::MAX,
            max_objects: MAX_KEYS,
            max_slots: u64::from(u32::MAX),
            max_hash_bytes: 256 << 20,
        }
    }
}

impl ReadLimits {
    /// No limit but the file's own length.
    pub fn unlimited() -> Self {
        ReadLimits {
            max_bytes: u64::MAX,
            max_objects: u64::MAX,
            max_slots: u64::MAX,
            max_hash_bytes: u64::MAX,
        }
    }
}

/// The seven header fields (big-endian u64s at offset 32).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Header {
    /// Always [`VERSION`].
    pub version: u64,
    /// Objects written; deleting one does not change it.
    pub objects_count: u64,
    /// Where the objects start ([`crate::OBJECTS_POSITION`] in every file swh-shard writes).
    pub objects_position: u64,
    /// Bytes of the objects section (a u64 size and the bytes per object).
    pub objects_size: u64,
    /// `objects_position + objects_size`.
    pub index_position: u64,
    /// `40 × n`.
    pub index_size: u64,
    /// `index_position + index_size`.
    pub hash_position: u64,
}

impl Header {
    /// The 56 header bytes.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN as usize] {
        let mut out = [0u8; HEADER_LEN as usize];
        let fields = [
            self.version,
            self.objects_count,
            self.objects_position,
            self.objects_size,
            self.index_position,
            self.index_size,
            self.hash_position,
        ];
        for (chunk, v) in out.chunks_exact_mut(8).zip(fields) {
            chunk.copy_from_slice(&v.to_be_bytes());
        }
        out
    }

    fn parse(b: &[u8]) -> Header {
        let f = |i: usize| u64_be(b, 8 * i);
        Header {
            version: f(0),
            objects_count: f(1),
            objects_position: f(2),
            objects_size: f(3),
            index_position: f(4),
            index_size: f(5),
            hash_position: f(6),
        }
    }
}

/// One index entry as stored.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IndexEntry {
    pub key: [u8; KEY_LEN],
    /// Absolute offset of the object's record, or [`DELETED_OFFSET`].
    pub offset: u64,
}

impl IndexEntry {
    /// Whether the entry holds an object (not empty, not deleted).
    pub fn is_live(&self) -> bool {
        self.offset != DELETED_OFFSET
    }
}

/// What [`ShardReader::verify`] counted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VerifyReport {
    /// Live index entries (objects that can be read).
    pub live: u64,
    /// Objects deleted since the shard was written: `objects_count - live`.
    pub deleted: u64,
    /// Index entries without an object (empty or deleted).
    pub empty_slots: u64,
}

fn u64_be(b: &[u8], i: usize) -> u64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[i..i + 8]);
    u64::from_be_bytes(a)
}

/// A read shard over the bytes of the whole file, validated by [`ShardReader::open`].
#[derive(Debug, Clone)]
pub struct ShardReader<'a> {
    bytes: &'a [u8],
    header: Header,
    hash: ChdPh,
    hash_len: u64,
}

impl<'a> ShardReader<'a> {
    /// Validate the magic, the header, the layout and the hash section of `bytes` (the whole
    /// file) within `limits`. The index entries and the objects are checked when they are
    /// used, and all of them by [`ShardReader::verify`].
    pub fn open(bytes: &'a [u8], limits: &ReadLimits) -> Result<Self, ReadError> {
        let len = bytes.len() as u64;
        if len > limits.max_bytes {
            return Err(ReadError::TooLarge {
                len,
                max: limits.max_bytes,
            });
        }
        if len < HEADER_END {
            return Err(ReadError::Truncated {
                what: "magic and header",
                offset: 0,
                needed: HEADER_END,
                available: len,
            });
        }
        if &bytes[..MAGIC.len()] != MAGIC {
            let mut found = [0u8; 9];
            found.copy_from_slice(&bytes[..9]);
            return Err(ReadError::BadMagic { found });
        }
        let h = Header::parse(&bytes[HEADER_OFFSET as usize..HEADER_END as usize]);
        if h.version != VERSION {
            return Err(ReadError::BadVersion { found: h.version });
        }
        let field = |name: &'static str, offset: u64, value: u64, expected: String| {
            Err(ReadError::HeaderField {
                field: name,
                offset,
                value,
                expected,
            })
        };
        if h.objects_count > limits.max_objects {
            return Err(ReadError::BudgetExceeded {
                what: "objects_count",
                offset: 40,
                value: h.objects_count,
                limit: limits.max_objects,
            });
        }
        if h.objects_position < HEADER_END {
            return field(
                "objects_position",
                48,
                h.objects_position,
                format!("at least {HEADER_END} (after the header)"),
            );
        }
        let Some(objects_end) = h.objects_position.checked_add(h.objects_size) else {
            return field(
                "objects_size",
                56,
                h.objects_size,
                "objects_position + objects_size within 2^64".into(),
            );
        };
        if h.index_position != objects_end {
            return field(
                "index_position",
                64,
                h.index_position,
                format!("objects_position + objects_size = {objects_end}"),
            );
        }
        let Some(index_end) = h.index_position.checked_add(h.index_size) else {
            return field(
                "index_size",
                72,
                h.index_size,
                "index_position + index_size within 2^64".into(),
            );
        };
        if h.hash_position != index_end {
            return field(
                "hash_position",
                80,
                h.hash_position,
                format!("index_position + index_size = {index_end}"),
            );
        }
        if h.objects_count
            .checked_mul(8)
            .is_none_or(|b| b > h.objects_size)
        {
            return field(
                "objects_count",
                40,
                h.objects_count,
                format!(
                    "at most objects_size / 8 = {} (8 bytes of size per object)",
                    h.objects_size / 8
                ),
            );
        }
        if h.hash_position >= len {
            return Err(ReadError::Truncated {
                what: "objects, index and hash section",
                offset: h.objects_position,
                needed: h
                    .hash_position
                    .saturating_sub(h.objects_position)
                    .saturating_add(1),
                available: len.saturating_sub(h.objects_position),
            });
        }
        let (hash, hash_len) = ChdPh::parse(
            &bytes[h.hash_position as usize..],
            h.hash_position,
            limits.max_hash_bytes,
            limits.max_slots,
        )?;
        let n = u64::from(hash.n());
        if h.index_size != INDEX_ENTRY_LEN * n {
            if h.index_size == 8 * n {
                return Err(ReadError::OldIndexFormat {
                    index_size: h.index_size,
                    n,
                });
            }
            return field(
                "index_size",
                72,
                h.index_size,
                format!(
                    "40 x n = {} (n = {n}, the hash function's slot count)",
                    40 * n
                ),
            );
        }
        if h.objects_count > n {
            return field(
                "objects_count",
                40,
                h.objects_count,
                format!("at most n = {n} (the hash function's slot count)"),
            );
        }
        Ok(ShardReader {
            bytes,
            header: h,
            hash,
            hash_len,
        })
    }

    /// The header fields.
    pub fn header(&self) -> &Header {
        &self.header
    }

    /// The hash function of the index.
    pub fn hash_function(&self) -> &ChdPh {
        &self.hash
    }

    /// Index entries (slots): the hash function's `n`.
    pub fn slots(&self) -> u32 {
        self.hash.n()
    }

    /// Offset just past the hash section: where swh-shard's `truncate` cuts (its `endpos`
    /// is this minus one). Bytes after it are ignored.
    pub fn hash_end(&self) -> u64 {
        self.header.hash_position + self.hash_len
    }

    /// The bytes of the hash section.
    pub fn hash_section(&self) -> &'a [u8] {
        &self.bytes[self.header.hash_position as usize..self.hash_end() as usize]
    }

    /// The slot the hash function gives `key` (swh's `getpos`), whether or not it is there.
    pub fn slot(&self, key: &[u8; KEY_LEN]) -> u32 {
        self.hash.search32(key)
    }

    /// The index entry in `slot` (swh's `getindex`); `None` past the last slot.
    pub fn entry(&self, slot: u32) -> Option<IndexEntry> {
        (slot < self.hash.n()).then(|| {
            let (key, offset) = self.raw_entry(u64::from(slot));
            IndexEntry { key: *key, offset }
        })
    }

    fn entry_offset(&self, slot: u64) -> u64 {
        self.header.index_position + INDEX_ENTRY_LEN * slot
    }

    /// Key and offset of `slot` (< n: in bounds since open checked the index).
    fn raw_entry(&self, slot: u64) -> (&'a [u8; KEY_LEN], u64) {
        let p = self.entry_offset(slot) as usize;
        let bytes: &'a [u8] = self.bytes;
        let key = <&[u8; KEY_LEN]>::try_from(&bytes[p..p + KEY_LEN]).expect("32 bytes");
        (key, u64_be(bytes, p + KEY_LEN))
    }

    /// The value of the record at `offset`, named by index entry `slot`, checked to lie in
    /// the objects section.
    fn record(&self, slot: u64, offset: u64) -> Result<&'a [u8], ReadError> {
        let start = self.header.objects_position;
        let end = self.header.index_position;
        if offset < start || offset.checked_add(8).is_none_or(|e| e > end) {
            return Err(ReadError::EntryOutOfBounds {
                slot,
                entry_offset: self.entry_offset(slot),
                offset,
                objects_start: start,
                objects_end: end,
            });
        }
        let size = u64_be(self.bytes, offset as usize);
        if size > end - offset - 8 {
            return Err(ReadError::RecordOutOfBounds {
                slot,
                offset,
                size,
                objects_end: end,
            });
        }
        let v = offset as usize + 8;
        Ok(&self.bytes[v..v + size as usize])
    }

    /// The value stored under `key`: `None` if the key's slot is empty or deleted or holds
    /// another key; an error if the entry points outside the objects section.
    pub fn get(&self, key: &[u8; KEY_LEN]) -> Result<Option<&'a [u8]>, ReadError> {
        let slot = u64::from(self.hash.search32(key));
        let (stored, offset) = self.raw_entry(slot);
        if offset == DELETED_OFFSET || stored != key {
            return Ok(None);
        }
        self.record(slot, offset).map(Some)
    }

    /// Every live entry's key and value, in index (slot) order, as swh-shard iterates:
    /// empty and deleted slots are skipped.
    pub fn iter(&self) -> Iter<'_, 'a> {
        Iter {
            reader: self,
            slot: 0,
        }
    }

    /// [`ShardReader::verify_with`] without a content check.
    pub fn verify(&self) -> Result<VerifyReport, ReadError> {
        self.verify_with(|_, _| true)
    }

    /// Check the whole file: the unused areas are zero; every live entry's object lies in
    /// the objects section, its key is zero when it has no object, and the hash function
    /// maps each stored key to its own slot; objects do not overlap, every byte of the
    /// objects section outside them is zero (deleted objects) and there are no more live
    /// entries than `objects_count`, and room for the deleted ones. `check` is called on
    /// every live (key, value): return false to report it (for instance when keys are
    /// content hashes). The first problem found is returned.
    pub fn verify_with(
        &self,
        mut check: impl FnMut(&[u8; KEY_LEN], &[u8]) -> bool,
    ) -> Result<VerifyReport, ReadError> {
        let h = &self.header;
        let zero_area = |from: u64, to: u64, area: &'static str| match self.bytes
            [from as usize..to as usize]
            .iter()
            .position(|&b| b != 0)
        {
            Some(i) => Err(ReadError::NonZeroPadding {
                offset: from + i as u64,
                area,
            }),
            None => Ok(()),
        };
        zero_area(MAGIC.len() as u64, HEADER_OFFSET, "after the magic")?;
        zero_area(HEADER_END, h.objects_position, "between header and objects")?;

        let mut records: Vec<(u64, u64, u64)> = Vec::new();
        for slot in 0..u64::from(self.hash.n()) {
            let (key, offset) = self.raw_entry(slot);
            if offset == DELETED_OFFSET {
                if key.iter().any(|&b| b != 0) {
                    return Err(ReadError::TombstoneKey {
                        slot,
                        entry_offset: self.entry_offset(slot),
                    });
                }
                continue;
            }
            let value = self.record(slot, offset)?;
            let hashed = u64::from(self.hash.search32(key));
            if hashed != slot {
                return Err(ReadError::WrongSlot {
                    slot,
                    entry_offset: self.entry_offset(slot),
                    key: *key,
                    hashed,
                });
            }
            if !check(key, value) {
                return Err(ReadError::ContentMismatch { slot, key: *key });
            }
            records.push((offset, offset + 8 + value.len() as u64, slot));
        }
        let live = records.len() as u64;
        if live > h.objects_count {
            return Err(ReadError::TooManyEntries {
                live,
                objects_count: h.objects_count,
            });
        }
        records.sort_unstable();
        let mut cursor = h.objects_position;
        let mut prev: Option<(u64, u64)> = None;
        let mut unaccounted = 0u64;
        let stray = |from: u64, to: u64| match self.bytes[from as usize..to as usize]
            .iter()
            .position(|&b| b != 0)
        {
            Some(i) => Err(ReadError::StrayBytes {
                offset: from + i as u64,
            }),
            None => Ok(()),
        };
        for &(start, end, slot) in &records {
            if start < cursor {
                let (first_offset, first_slot) = prev.unwrap_or((cursor, slot));
                return Err(ReadError::ObjectsOverlap {
                    first_slot,
                    first_offset,
                    second_slot: slot,
                    second_offset: start,
                });
            }
            stray(cursor, start)?;
            unaccounted += start - cursor;
            cursor = end;
            prev = Some((start, slot));
        }
        stray(cursor, h.index_position)?;
        unaccounted += h.index_position - cursor;
        let deleted = h.objects_count - live;
        if (deleted == 0 && unaccounted > 0) || unaccounted < 8 * deleted {
            return Err(ReadError::UnaccountedBytes {
                unaccounted,
                objects_count: h.objects_count,
                live,
                deleted,
            });
        }
        Ok(VerifyReport {
            live,
            deleted,
            empty_slots: u64::from(self.hash.n()) - live,
        })
    }
}

/// Iterator of [`ShardReader::iter`]: `(key, value)` of each live entry in slot order. An
/// entry whose object lies outside the objects section yields its error, and iteration
/// goes on with the next slot.
#[derive(Debug, Clone)]
pub struct Iter<'r, 'a> {
    reader: &'r ShardReader<'a>,
    slot: u64,
}

impl<'a> Iterator for Iter<'_, 'a> {
    type Item = Result<(&'a [u8; KEY_LEN], &'a [u8]), ReadError>;

    fn next(&mut self) -> Option<Self::Item> {
        let n = u64::from(self.reader.hash.n());
        while self.slot < n {
            let slot = self.slot;
            self.slot += 1;
            let (key, offset) = self.reader.raw_entry(slot);
            if offset != DELETED_OFFSET {
                return Some(self.reader.record(slot, offset).map(|v| (key, v)));
            }
        }
        None
    }
}

/// Delete `key` from the shard in `bytes` as swh-shard's `Shard.delete` does: zero the
/// object's record (its size and its bytes) in place and make its index entry the empty
/// form (zero key, offset `0xffffffffffffffff`). The header is left as it is. Returns false
/// (and changes nothing) if the key is not in the shard.
pub fn delete(
    bytes: &mut [u8],
    key: &[u8; KEY_LEN],
    limits: &ReadLimits,
) -> Result<bool, ReadError> {
    let (entry, start, end) = {
        let r = ShardReader::open(bytes, limits)?;
        let slot = u64::from(r.slot(key));
        let (stored, offset) = r.raw_entry(slot);
        if offset == DELETED_OFFSET || stored != key {
            return Ok(false);
        }
        let value = r.record(slot, offset)?;
        (
            r.entry_offset(slot) as usize,
            offset as usize,
            offset as usize + 8 + value.len(),
        )
    };
    bytes[start..end].fill(0);
    bytes[entry..entry + KEY_LEN].fill(0);
    bytes[entry + KEY_LEN..entry + INDEX_ENTRY_LEN as usize].fill(0xff);
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_round_trip() {
        let h = Header {
            version: 1,
            objects_count: 3,
            objects_position: crate::OBJECTS_POSITION,
            objects_size: 55,
            index_position: 567,
            index_size: 440,
            hash_position: 1007,
        };
        assert_eq!(Header::parse(&h.to_bytes()), h);
        assert_eq!(
            &h.to_bytes()[..16],
            &[0, 0, 0, 0, 0, 0, 0, 1, 0, 0, 0, 0, 0, 0, 0, 3]
        );
    }
}
