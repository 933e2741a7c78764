//! Validating parsers (streaming and by footer offsets) and table-backed lookups.

use std::ops::Range;

use xet_hash::MerkleHash;

use crate::model::{
    CasChunk, CasInfo, CasLookupEntry, ChunkLocation, ChunkLookupEntry, FileInfo, FileLookupEntry,
    FileTerm, FooterInfo, LookupTables, Shard, check_cas_consistency, truncate_hash,
};
use crate::write::RawFooter;
use crate::{
    CHUNK_FLAG_GLOBAL_DEDUP, FILE_FLAG_WITH_METADATA_EXT, FILE_FLAG_WITH_VERIFICATION, FOOTER_SIZE,
    FOOTER_VERSION, HEADER_SIZE, HEADER_TAG, HEADER_VERSION, RECORD_SIZE, ShardError,
};

/// The caller's budget for one parse.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Largest accepted input.
    pub max_bytes: u64,
    /// Largest number of 48-byte records (file/CAS headers, terms, verification and
    /// metadata entries, chunk entries) accepted over the whole shard. Lookup table
    /// entries are bounded by these, since their counts must match.
    pub max_entries: u64,
}

impl Default for Limits {
    /// 1 GiB, no separate entry limit (records are bounded by the bytes).
    fn default() -> Self {
        Limits {
            max_bytes: 1 << 30,
            max_entries: u64::MAX,
        }
    }
}

impl Limits {
    pub fn unlimited() -> Self {
        Limits {
            max_bytes: u64::MAX,
            max_entries: u64::MAX,
        }
    }
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes(b[i..i + 4].try_into().expect("4 bytes"))
}
fn u64_at(b: &[u8], i: usize) -> u64 {
    u64::from_le_bytes(b[i..i + 8].try_into().expect("8 bytes"))
}
fn hash_at(b: &[u8], i: usize) -> MerkleHash {
    let mut h = [0u8; 32];
    h.copy_from_slice(&b[i..i + 32]);
    MerkleHash(h)
}

/// The first thing in the bytes that the parse ignores, as the reference's parser does,
/// but that a strict reader refuses (see [`ParsedShard::check_strict`]): a reserved
/// field that is not zero, a flag bit the format gives no meaning, a footer statistic
/// that disagrees with the sections.
#[derive(Default)]
struct Strict(Option<ShardError>);

impl Strict {
    fn note(&mut self, e: impl FnOnce() -> ShardError) {
        if self.0.is_none() {
            self.0 = Some(e());
        }
    }

    /// `b[at]` is a reserved field: it must be all zero.
    fn reserved(&mut self, b: &[u8], at: Range<usize>, field: &'static str) {
        if b[at.clone()].iter().any(|&x| x != 0) {
            self.note(|| ShardError::ReservedNotZero {
                field,
                offset: at.start as u64,
            });
        }
    }

    /// The u32 flags at `b[at..]` may only have the bits of `allowed`.
    fn flags(&mut self, b: &[u8], at: usize, allowed: u32, field: &'static str) {
        let value = u32_at(b, at);
        if value & !allowed != 0 {
            self.note(|| ShardError::UndefinedFlags {
                field,
                offset: at as u64,
                value,
                allowed,
            });
        }
    }

    /// A footer statistic is 0 (huggingface.js leaves `materialized_bytes` so) or the
    /// value the sections give.
    fn stat(&mut self, field: &'static str, got: u64, expected: u64) {
        if got != 0 && got != expected {
            self.note(|| ShardError::FooterStatWrong {
                field,
                expected,
                got,
            });
        }
    }
}

/// A bookend is detected by its hash like the reference; the 16 trailing bytes must be zero.
fn is_bookend(rec: &[u8], section: &'static str, offset: usize) -> Result<bool, ShardError> {
    if rec[..32].iter().all(|&b| b == 0xFF) {
        if rec[32..RECORD_SIZE].iter().any(|&b| b != 0) {
            return Err(ShardError::BadBookend {
                section,
                offset: offset as u64,
            });
        }
        return Ok(true);
    }
    Ok(false)
}

/// Reserve `records` from the budget and check they fit in `[body_start, limit)`.
fn reserve(
    what: &'static str,
    header_offset: usize,
    records: u64,
    body_start: usize,
    limit: usize,
    budget: &mut u64,
) -> Result<(), ShardError> {
    let total = records + 1; // with the block header
    if total > *budget {
        return Err(ShardError::BudgetExceeded {
            what,
            offset: header_offset as u64,
            count: total,
            limit: *budget,
        });
    }
    let available = limit.saturating_sub(body_start) as u64;
    match records.checked_mul(RECORD_SIZE as u64) {
        Some(n) if n <= available => {}
        needed => {
            return Err(ShardError::Truncated {
                what,
                offset: body_start as u64,
                needed: needed.unwrap_or(u64::MAX),
                available,
            });
        }
    }
    *budget -= total;
    Ok(())
}

fn record_index(pos: usize, start: usize, what: &'static str) -> Result<u32, ShardError> {
    let i = ((pos - start) / RECORD_SIZE) as u64;
    u32::try_from(i).map_err(|_| ShardError::CountOverflow {
        what,
        count: i,
        limit: u32::MAX as u64,
    })
}

struct Section<T> {
    items: Vec<T>,
    /// Record index of each block from the section start.
    starts: Vec<u32>,
    /// Offset just past the bookend.
    end: usize,
}

fn parse_file_section(
    b: &[u8],
    start: usize,
    limit: usize,
    budget: &mut u64,
    strict: &mut Strict,
) -> Result<Section<FileInfo>, ShardError> {
    let mut pos = start;
    let mut items = Vec::new();
    let mut starts = Vec::new();
    let mut first_ver: Option<bool> = None;
    loop {
        if pos + RECORD_SIZE > limit {
            return Err(ShardError::MissingBookend {
                section: "file info",
                offset: pos as u64,
            });
        }
        let rec = &b[pos..pos + RECORD_SIZE];
        if is_bookend(rec, "file info", pos)? {
            pos += RECORD_SIZE;
            break;
        }
        let file_hash = hash_at(rec, 0);
        let flags = u32_at(rec, 32);
        let n = u32_at(rec, 36) as u64;
        let defined = FILE_FLAG_WITH_VERIFICATION | FILE_FLAG_WITH_METADATA_EXT;
        strict.flags(b, pos + 32, defined, "file flags");
        strict.reserved(b, pos + 40..pos + 48, "file info header reserved bytes");
        let ver = flags & FILE_FLAG_WITH_VERIFICATION != 0;
        let meta = flags & FILE_FLAG_WITH_METADATA_EXT != 0;
        let records = n + if ver { n } else { 0 } + u64::from(meta);
        let header_pos = pos;
        reserve(
            "file info block",
            header_pos,
            records,
            pos + RECORD_SIZE,
            limit,
            budget,
        )?;
        let file_index = items.len();
        match first_ver {
            None => first_ver = Some(ver),
            Some(e) if e != ver => {
                return Err(ShardError::MixedVerification {
                    file_index,
                    offset: header_pos as u64,
                    expected: e,
                    got: ver,
                });
            }
            _ => {}
        }
        starts.push(record_index(pos, start, "file info records")?);
        pos += RECORD_SIZE;
        let n = n as usize; // bounded by the available bytes
        let mut terms = Vec::with_capacity(n);
        for term_index in 0..n {
            let r = &b[pos..pos + RECORD_SIZE];
            strict.flags(b, pos + 32, 0, "file term CAS flags");
            let t = FileTerm {
                xorb_hash: hash_at(r, 0),
                cas_flags: u32_at(r, 32),
                unpacked_segment_bytes: u32_at(r, 36),
                chunk_index_start: u32_at(r, 40),
                chunk_index_end: u32_at(r, 44),
            };
            if t.chunk_index_end <= t.chunk_index_start {
                return Err(ShardError::InvalidTermRange {
                    file_index,
                    term_index,
                    offset: pos as u64,
                    start: t.chunk_index_start,
                    end: t.chunk_index_end,
                });
            }
            terms.push(t);
            pos += RECORD_SIZE;
        }
        let verification = if ver {
            let mut v = Vec::with_capacity(n);
            for _ in 0..n {
                v.push(hash_at(b, pos));
                strict.reserved(b, pos + 32..pos + 48, "verification entry reserved bytes");
                pos += RECORD_SIZE;
            }
            Some(v)
        } else {
            None
        };
        let metadata_ext = if meta {
            let h = hash_at(b, pos);
            strict.reserved(b, pos + 32..pos + 48, "FileMetadataExt reserved bytes");
            pos += RECORD_SIZE;
            Some(h)
        } else {
            None
        };
        items.push(FileInfo {
            file_hash,
            flags,
            terms,
            verification,
            metadata_ext,
        });
    }
    Ok(Section {
        items,
        starts,
        end: pos,
    })
}

fn parse_cas_section(
    b: &[u8],
    start: usize,
    limit: usize,
    budget: &mut u64,
    strict: &mut Strict,
) -> Result<Section<CasInfo>, ShardError> {
    let mut pos = start;
    let mut items = Vec::new();
    let mut starts = Vec::new();
    loop {
        if pos + RECORD_SIZE > limit {
            return Err(ShardError::MissingBookend {
                section: "CAS info",
                offset: pos as u64,
            });
        }
        let rec = &b[pos..pos + RECORD_SIZE];
        if is_bookend(rec, "CAS info", pos)? {
            pos += RECORD_SIZE;
            break;
        }
        let header_pos = pos;
        let n = u32_at(rec, 36) as u64;
        strict.flags(b, pos + 32, 0, "CAS info flags");
        reserve(
            "CAS info block",
            header_pos,
            n,
            pos + RECORD_SIZE,
            limit,
            budget,
        )?;
        starts.push(record_index(pos, start, "CAS info records")?);
        pos += RECORD_SIZE;
        let mut chunks = Vec::with_capacity(n as usize);
        for _ in 0..n {
            let r = &b[pos..pos + RECORD_SIZE];
            strict.flags(b, pos + 40, CHUNK_FLAG_GLOBAL_DEDUP, "CAS chunk flags");
            strict.reserved(b, pos + 44..pos + 48, "CAS chunk entry reserved bytes");
            chunks.push(CasChunk {
                hash: hash_at(r, 0),
                byte_range_start: u32_at(r, 32),
                unpacked_segment_bytes: u32_at(r, 36),
                flags: u32_at(r, 40),
            });
            pos += RECORD_SIZE;
        }
        let c = CasInfo {
            xorb_hash: hash_at(rec, 0),
            cas_flags: u32_at(rec, 32),
            num_bytes_in_cas: u32_at(rec, 40),
            num_bytes_on_disk: u32_at(rec, 44),
            chunks,
        };
        check_cas_consistency(items.len(), header_pos as u64, &c)?;
        items.push(c);
    }
    Ok(Section {
        items,
        starts,
        end: pos,
    })
}

/// Returns `footer_size` (0 or 200).
fn parse_header(b: &[u8], limits: &Limits) -> Result<usize, ShardError> {
    if b.len() as u64 > limits.max_bytes {
        return Err(ShardError::TooLarge {
            len: b.len() as u64,
            max: limits.max_bytes,
        });
    }
    if b.len() < HEADER_SIZE {
        return Err(ShardError::Truncated {
            what: "header",
            offset: 0,
            needed: HEADER_SIZE as u64,
            available: b.len() as u64,
        });
    }
    if b[..32] != HEADER_TAG {
        let mut got = [0u8; 32];
        got.copy_from_slice(&b[..32]);
        return Err(ShardError::BadMagic {
            expected: Box::new(HEADER_TAG),
            got: Box::new(got),
        });
    }
    let version = u64_at(b, 32);
    if version != HEADER_VERSION {
        return Err(ShardError::BadHeaderVersion {
            expected: HEADER_VERSION,
            got: version,
        });
    }
    let footer_size = u64_at(b, 40);
    if footer_size != 0 && footer_size != FOOTER_SIZE as u64 {
        return Err(ShardError::BadFooterSize {
            expected: FOOTER_SIZE as u64,
            got: footer_size,
        });
    }
    let footer_size = footer_size as usize;
    if footer_size > 0 && b.len() < HEADER_SIZE + footer_size {
        return Err(ShardError::Truncated {
            what: "footer",
            offset: HEADER_SIZE as u64,
            needed: footer_size as u64,
            available: (b.len() - HEADER_SIZE) as u64,
        });
    }
    Ok(footer_size)
}

fn read_footer(b: &[u8]) -> Result<RawFooter, ShardError> {
    let at = b.len() - FOOTER_SIZE;
    let mut fb = [0u8; FOOTER_SIZE];
    fb.copy_from_slice(&b[at..]);
    let f = RawFooter::from_bytes(&fb);
    if f.version != FOOTER_VERSION {
        return Err(ShardError::BadFooterVersion {
            offset: at as u64,
            expected: FOOTER_VERSION,
            got: f.version,
        });
    }
    if f.footer_offset != at as u64 {
        return Err(ShardError::FooterMismatch {
            field: "footer_offset",
            expected: at as u64,
            got: f.footer_offset,
        });
    }
    Ok(f)
}

fn expect(field: &'static str, expected: u64, got: u64) -> Result<(), ShardError> {
    if expected != got {
        return Err(ShardError::FooterMismatch {
            field,
            expected,
            got,
        });
    }
    Ok(())
}

fn in_bounds(field: &'static str, value: u64, min: u64, max: u64) -> Result<(), ShardError> {
    if value < min || value > max {
        return Err(ShardError::OffsetOutOfBounds {
            field,
            value,
            min,
            max,
        });
    }
    Ok(())
}

/// huggingface.js uploads shards with a footer but no lookup tables, and writes the
/// table offsets as 0 rather than as the (empty) tables' position; otherwise the layout
/// is the stored form's.
fn is_tableless_js_footer(f: &RawFooter) -> bool {
    [
        f.file_lookup_offset,
        f.file_lookup_num_entries,
        f.cas_lookup_offset,
        f.cas_lookup_num_entries,
        f.chunk_lookup_offset,
        f.chunk_lookup_num_entries,
    ]
    .iter()
    .all(|&x| x == 0)
}

/// A parsed and validated shard, with the lookup tables read from the bytes (if it has
/// them) for binary-search lookups.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParsedShard {
    pub shard: Shard,
    /// The footer exactly as decoded (stored form only).
    pub footer: Option<RawFooter>,
    /// The lookup tables as stored; `None` when the shard has none (upload form, or a
    /// stored shard with empty tables), in which case lookups scan linearly.
    pub tables: Option<LookupTables>,
    file_starts: Vec<u32>,
    cas_starts: Vec<u32>,
    /// What [`ParsedShard::check_strict`] reports.
    not_strict: Option<ShardError>,
}

impl Shard {
    /// Streaming parse (header → file info → CAS info → optional tables and footer);
    /// see [`ParsedShard::parse`].
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<Shard, ShardError> {
        Ok(ParsedShard::parse(bytes, limits)?.shard)
    }
}

impl ParsedShard {
    /// Streaming parse of either form in one validating pass. The sections are read in
    /// order; for the stored form the footer must then describe exactly that layout
    /// (offsets, contiguous lookup tables or none) and the lookup tables are checked
    /// entry by entry (index points at the right block/chunk, key = truncated hash,
    /// sorted, each item exactly once).
    pub fn parse(bytes: &[u8], limits: &Limits) -> Result<ParsedShard, ShardError> {
        let footer_size = parse_header(bytes, limits)?;
        let data_end = bytes.len() - footer_size;
        let mut budget = limits.max_entries;
        let mut strict = Strict::default();
        let files = parse_file_section(bytes, HEADER_SIZE, data_end, &mut budget, &mut strict)?;
        let cas = parse_cas_section(bytes, files.end, data_end, &mut budget, &mut strict)?;
        if footer_size == 0 {
            if cas.end != bytes.len() {
                return Err(ShardError::TrailingBytes {
                    offset: cas.end as u64,
                    count: (bytes.len() - cas.end) as u64,
                });
            }
            return Ok(ParsedShard {
                shard: Shard {
                    files: files.items,
                    cas: cas.items,
                    footer: None,
                },
                footer: None,
                tables: None,
                file_starts: files.starts,
                cas_starts: cas.starts,
                not_strict: strict.0,
            });
        }
        let f = read_footer(bytes)?;
        expect("file_info_offset", HEADER_SIZE as u64, f.file_info_offset)?;
        expect("cas_info_offset", files.end as u64, f.cas_info_offset)?;
        if is_tableless_js_footer(&f) {
            expect("footer_offset", cas.end as u64, f.footer_offset)?;
            return Self::finish(bytes, f, files, cas, strict);
        }
        expect("file_lookup_offset", cas.end as u64, f.file_lookup_offset)?;
        let counts = table_counts(&f, &files.items, &cas.items)?;
        // Contiguous tables right after the CAS section, then the footer.
        let clo = f.file_lookup_offset + 12 * counts.0;
        expect("cas_lookup_offset", clo, f.cas_lookup_offset)?;
        let klo = clo + 12 * counts.1;
        expect("chunk_lookup_offset", klo, f.chunk_lookup_offset)?;
        expect("footer_offset", klo + 16 * counts.2, f.footer_offset)?;
        Self::finish(bytes, f, files, cas, strict)
    }

    /// Parse a stored shard through its footer: header, footer (at `len - footer_size`),
    /// then each section and table at its footer offset. Sections must lie in order
    /// without overlapping (gaps are tolerated); the same entry-level checks as
    /// [`ParsedShard::parse`] apply.
    pub fn parse_by_footer(bytes: &[u8], limits: &Limits) -> Result<ParsedShard, ShardError> {
        let footer_size = parse_header(bytes, limits)?;
        if footer_size == 0 {
            return Err(ShardError::NoFooter);
        }
        let f = read_footer(bytes)?;
        if is_tableless_js_footer(&f) {
            // Its table offsets are 0, not positions: the sections are where the
            // streaming parse finds them, and it checks the rest of the footer.
            return Self::parse(bytes, limits);
        }
        let fo = f.footer_offset;
        in_bounds(
            "file_info_offset",
            f.file_info_offset,
            HEADER_SIZE as u64,
            fo,
        )?;
        in_bounds("cas_info_offset", f.cas_info_offset, f.file_info_offset, fo)?;
        in_bounds(
            "file_lookup_offset",
            f.file_lookup_offset,
            f.cas_info_offset,
            fo,
        )?;
        let mut budget = limits.max_entries;
        let mut strict = Strict::default();
        // All offsets are <= footer_offset < len, so they fit in usize.
        let files = parse_file_section(
            bytes,
            f.file_info_offset as usize,
            f.cas_info_offset as usize,
            &mut budget,
            &mut strict,
        )?;
        let cas = parse_cas_section(
            bytes,
            f.cas_info_offset as usize,
            f.file_lookup_offset as usize,
            &mut budget,
            &mut strict,
        )?;
        let counts = table_counts(&f, &files.items, &cas.items)?;
        let table_end = |field, off: u64, n: u64, size: u64| -> Result<u64, ShardError> {
            // n is at most the number of items, so this cannot overflow, but stay checked.
            let end = n
                .checked_mul(size)
                .and_then(|l| off.checked_add(l))
                .unwrap_or(u64::MAX);
            in_bounds(field, end, off, fo)?;
            Ok(end)
        };
        let fe = table_end(
            "file_lookup_offset + 12 * count",
            f.file_lookup_offset,
            counts.0,
            12,
        )?;
        in_bounds("cas_lookup_offset", f.cas_lookup_offset, fe, fo)?;
        let ce = table_end(
            "cas_lookup_offset + 12 * count",
            f.cas_lookup_offset,
            counts.1,
            12,
        )?;
        in_bounds("chunk_lookup_offset", f.chunk_lookup_offset, ce, fo)?;
        table_end(
            "chunk_lookup_offset + 16 * count",
            f.chunk_lookup_offset,
            counts.2,
            16,
        )?;
        Self::finish(bytes, f, files, cas, strict)
    }

    fn finish(
        bytes: &[u8],
        f: RawFooter,
        files: Section<FileInfo>,
        cas: Section<CasInfo>,
        mut strict: Strict,
    ) -> Result<ParsedShard, ShardError> {
        // Footer checks come after the sections' in both parses, so both report the same
        // first one.
        let reserved = f.footer_offset as usize + 120;
        strict.reserved(bytes, reserved..reserved + 48, "footer reserved bytes");
        strict.stat(
            "stored_bytes_on_disk",
            f.stored_bytes_on_disk,
            cas.items
                .iter()
                .map(|c| u64::from(c.num_bytes_on_disk))
                .sum(),
        );
        strict.stat(
            "materialized_bytes",
            f.materialized_bytes,
            files.items.iter().map(FileInfo::size).sum(),
        );
        strict.stat(
            "stored_bytes",
            f.stored_bytes,
            cas.items
                .iter()
                .map(|c| u64::from(c.num_bytes_in_cas))
                .sum(),
        );
        let shard_empty = files.items.is_empty() && cas.items.is_empty();
        let has_tables =
            f.file_lookup_num_entries + f.cas_lookup_num_entries + f.chunk_lookup_num_entries > 0
                || shard_empty;
        let shard = Shard {
            files: files.items,
            cas: cas.items,
            footer: Some(FooterInfo {
                chunk_hash_key: f.chunk_hash_key,
                creation_timestamp: f.creation_timestamp,
                key_expiry: f.key_expiry,
                stored_bytes_on_disk: f.stored_bytes_on_disk,
                materialized_bytes: f.materialized_bytes,
                stored_bytes: f.stored_bytes,
                lookup_tables: has_tables,
            }),
        };
        let mut p = ParsedShard {
            shard,
            footer: Some(f),
            tables: None,
            file_starts: files.starts,
            cas_starts: cas.starts,
            not_strict: strict.0,
        };
        if has_tables {
            p.tables = Some(p.read_tables(bytes, &f)?);
        }
        Ok(p)
    }

    /// Index an in-memory shard: the lookup tables are computed (as the reference would
    /// write them) and used for lookups.
    pub fn from_shard(shard: Shard) -> Result<ParsedShard, ShardError> {
        shard.validate()?;
        let tables = shard.lookup_tables()?;
        let file_starts = shard.file_entry_indices()?;
        let cas_starts = shard.cas_entry_indices()?;
        Ok(ParsedShard {
            shard,
            footer: None,
            tables: Some(tables),
            file_starts,
            cas_starts,
            not_strict: None,
        })
    }

    /// Err with the first field the parse accepted without it meaning anything: a
    /// reserved field (the file header's 8 bytes, the 16 after each verification hash and
    /// after the FileMetadataExt sha256, the 4 after each chunk's flags, the footer's 48)
    /// that is not zero; a flag bit the format does not define (file flags other than
    /// bits 31 and 30, any CAS flag of a term or a CAS block, chunk flags other than bit
    /// 31); a footer statistic that is neither 0 nor what the sections give. The parse
    /// itself ignores all of these, as the reference does, so that shards written by a
    /// later version still read; a store checks them on upload, so that nothing it keeps
    /// carries bits it ignores. Shards built in memory ([`ParsedShard::from_shard`]) are
    /// not checked.
    pub fn check_strict(&self) -> Result<(), ShardError> {
        match &self.not_strict {
            Some(e) => Err(e.clone()),
            None => Ok(()),
        }
    }

    fn read_tables(&self, b: &[u8], f: &RawFooter) -> Result<LookupTables, ShardError> {
        let s = &self.shard;
        let mut t = LookupTables::default();
        // Counts equal the item counts here (checked by table_counts), so allocation is
        // bounded by what was already parsed.
        let mut seen = vec![false; s.files.len()];
        let mut prev = 0u64;
        t.files.reserve_exact(f.file_lookup_num_entries as usize);
        for i in 0..f.file_lookup_num_entries {
            let off = (f.file_lookup_offset + 12 * i) as usize;
            let (key, idx) = (u64_at(b, off), u32_at(b, off + 8));
            let bad = |detail: String| ShardError::LookupEntryInvalid {
                table: "file",
                entry: i,
                offset: off as u64,
                detail,
            };
            let fi = self.file_starts.binary_search(&idx).map_err(|_| {
                bad(format!(
                    "record index {idx} is not the start of a file block"
                ))
            })?;
            let h = &s.files[fi].file_hash;
            if truncate_hash(h) != key {
                return Err(bad(format!(
                    "key {key:#018x} does not match file {h} (truncated {:#018x})",
                    truncate_hash(h)
                )));
            }
            if std::mem::replace(&mut seen[fi], true) {
                return Err(bad(format!("file block #{fi} listed twice")));
            }
            if i > 0 && key < prev {
                return Err(ShardError::LookupNotSorted {
                    table: "file",
                    entry: i,
                    offset: off as u64,
                    key,
                    prev,
                });
            }
            prev = key;
            t.files.push(FileLookupEntry {
                key,
                entry_index: idx,
            });
        }

        let mut seen = vec![false; s.cas.len()];
        t.cas.reserve_exact(f.cas_lookup_num_entries as usize);
        for i in 0..f.cas_lookup_num_entries {
            let off = (f.cas_lookup_offset + 12 * i) as usize;
            let (key, idx) = (u64_at(b, off), u32_at(b, off + 8));
            let bad = |detail: String| ShardError::LookupEntryInvalid {
                table: "CAS",
                entry: i,
                offset: off as u64,
                detail,
            };
            let ci = self.cas_starts.binary_search(&idx).map_err(|_| {
                bad(format!(
                    "record index {idx} is not the start of a CAS block"
                ))
            })?;
            let h = &s.cas[ci].xorb_hash;
            if truncate_hash(h) != key {
                return Err(bad(format!(
                    "key {key:#018x} does not match xorb {h} (truncated {:#018x})",
                    truncate_hash(h)
                )));
            }
            if std::mem::replace(&mut seen[ci], true) {
                return Err(bad(format!("CAS block #{ci} listed twice")));
            }
            if i > 0 && key < prev {
                return Err(ShardError::LookupNotSorted {
                    table: "CAS",
                    entry: i,
                    offset: off as u64,
                    key,
                    prev,
                });
            }
            prev = key;
            t.cas.push(CasLookupEntry {
                key,
                entry_index: idx,
            });
        }

        let mut base = Vec::with_capacity(s.cas.len());
        let mut total = 0usize;
        for c in &s.cas {
            base.push(total);
            total += c.chunks.len();
        }
        let mut seen = vec![false; total];
        t.chunks.reserve_exact(f.chunk_lookup_num_entries as usize);
        for i in 0..f.chunk_lookup_num_entries {
            let off = (f.chunk_lookup_offset + 16 * i) as usize;
            let (key, cidx, j) = (u64_at(b, off), u32_at(b, off + 8), u32_at(b, off + 12));
            let bad = |detail: String| ShardError::LookupEntryInvalid {
                table: "chunk",
                entry: i,
                offset: off as u64,
                detail,
            };
            let ci = self.cas_starts.binary_search(&cidx).map_err(|_| {
                bad(format!(
                    "record index {cidx} is not the start of a CAS block"
                ))
            })?;
            let c = &s.cas[ci];
            let Some(ch) = c.chunks.get(j as usize) else {
                return Err(bad(format!(
                    "chunk index {j} outside xorb {} with {} chunks",
                    c.xorb_hash,
                    c.chunks.len()
                )));
            };
            if truncate_hash(&ch.hash) != key {
                return Err(bad(format!(
                    "key {key:#018x} does not match chunk {} (truncated {:#018x})",
                    ch.hash,
                    truncate_hash(&ch.hash)
                )));
            }
            if std::mem::replace(&mut seen[base[ci] + j as usize], true) {
                return Err(bad(format!("chunk {j} of CAS block #{ci} listed twice")));
            }
            if i > 0 && key < prev {
                return Err(ShardError::LookupNotSorted {
                    table: "chunk",
                    entry: i,
                    offset: off as u64,
                    key,
                    prev,
                });
            }
            prev = key;
            t.chunks.push(ChunkLookupEntry {
                key,
                cas_entry_index: cidx,
                chunk_index: j,
            });
        }
        Ok(t)
    }

    /// Find a file by hash (binary search in the lookup table when present).
    pub fn find_file(&self, file_hash: &MerkleHash) -> Option<&FileInfo> {
        let Some(t) = &self.tables else {
            return self.shard.find_file(file_hash);
        };
        let k = truncate_hash(file_hash);
        let lo = t.files.partition_point(|e| e.key < k);
        t.files[lo..]
            .iter()
            .take_while(|e| e.key == k)
            .filter_map(|e| self.file_starts.binary_search(&e.entry_index).ok())
            .map(|fi| &self.shard.files[fi])
            .find(|f| f.file_hash == *file_hash)
    }

    /// Find a xorb by hash (binary search in the lookup table when present).
    pub fn find_cas(&self, xorb_hash: &MerkleHash) -> Option<&CasInfo> {
        let Some(t) = &self.tables else {
            return self.shard.find_cas(xorb_hash);
        };
        let k = truncate_hash(xorb_hash);
        let lo = t.cas.partition_point(|e| e.key < k);
        t.cas[lo..]
            .iter()
            .take_while(|e| e.key == k)
            .filter_map(|e| self.cas_starts.binary_search(&e.entry_index).ok())
            .map(|ci| &self.shard.cas[ci])
            .find(|c| c.xorb_hash == *xorb_hash)
    }

    /// Find a chunk by its raw hash; keyed with the footer's chunk hash key first, if set.
    pub fn find_chunk(&self, chunk_hash: &MerkleHash) -> Option<ChunkLocation> {
        self.find_chunk_keyed(&self.shard.stored_chunk_hash(chunk_hash))
    }

    /// Find a chunk by its hash exactly as stored (keyed, in a keyed shard).
    pub fn find_chunk_keyed(&self, stored_hash: &MerkleHash) -> Option<ChunkLocation> {
        let Some(t) = &self.tables else {
            return self.shard.find_chunk_keyed(stored_hash);
        };
        let k = truncate_hash(stored_hash);
        let lo = t.chunks.partition_point(|e| e.key < k);
        t.chunks[lo..]
            .iter()
            .take_while(|e| e.key == k)
            .find_map(|e| {
                let ci = self.cas_starts.binary_search(&e.cas_entry_index).ok()?;
                let c = &self.shard.cas[ci];
                let ch = c.chunks.get(e.chunk_index as usize)?;
                (ch.hash == *stored_hash).then_some(ChunkLocation {
                    xorb_hash: c.xorb_hash,
                    cas_index: ci,
                    chunk_index: e.chunk_index,
                })
            })
    }
}

/// Lookup table counts: all zero (no tables) or exactly one entry per file / xorb / chunk.
fn table_counts(
    f: &RawFooter,
    files: &[FileInfo],
    cas: &[CasInfo],
) -> Result<(u64, u64, u64), ShardError> {
    let (nf, nc, nk) = (
        f.file_lookup_num_entries,
        f.cas_lookup_num_entries,
        f.chunk_lookup_num_entries,
    );
    if nf == 0 && nc == 0 && nk == 0 {
        return Ok((0, 0, 0));
    }
    let chunks: u64 = cas.iter().map(|c| c.chunks.len() as u64).sum();
    for (table, expected, got) in [
        ("file", files.len() as u64, nf),
        ("CAS", cas.len() as u64, nc),
        ("chunk", chunks, nk),
    ] {
        if expected != got {
            return Err(ShardError::LookupCountMismatch {
                table,
                expected,
                got,
            });
        }
    }
    Ok((nf, nc, nk))
}
