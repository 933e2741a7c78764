//! The entry file format (laid out in the [`super`] module docs): entry file names,
//! headers of entries and references, and an entry written as its range is decoded.

use std::fs::{self, File};
use std::io::{self, Read};
use std::path::PathBuf;

use xet_hash::MerkleHash;

use crate::fsio;

/// Magic of an entry holding its chunks' data.
pub(super) const MAGIC: &[u8; 8] = b"XETCC001";
/// Magic of a reference into a linked file.
pub(super) const REF_MAGIC: &[u8; 8] = b"XETCR001";
/// Bytes of one chunk's record in a header: its hash and its size (u32 LE).
pub(super) const CHUNK_RECORD: u64 = 36;
/// Largest chunk (the protocol's 128 KiB).
const MAX_CHUNK: usize = 128 * 1024;

/// The file name of entry `start..end`; a reference also names its linked file.
pub(super) fn entry_name(start: u32, end: u32, linked: Option<&MerkleHash>) -> String {
    match linked {
        None => format!("{start}-{end}"),
        Some(f) => format!("{start}-{end}@{f}"),
    }
}

/// `(start, end, linked file)` of an entry file name.
pub(super) fn parse_entry_name(s: &str) -> Option<(u32, u32, Option<MerkleHash>)> {
    let (range, linked) = match s.split_once('@') {
        Some((r, f)) => (r, Some(MerkleHash::from_hex(f).ok()?)),
        None => (s, None),
    };
    let (a, b) = range.split_once('-')?;
    let (a, b) = (a.parse().ok()?, b.parse().ok()?);
    (a < b).then_some((a, b, linked))
}

/// Bytes before the chunk records: magic, chunk count, and a reference's offset.
fn prefix_len(reference: bool) -> u64 {
    if reference { 20 } else { 12 }
}

/// Bytes of the header of an entry (or a `reference`) of `n` chunks.
pub(super) fn header_len(n: usize, reference: bool) -> u64 {
    prefix_len(reference) + n as u64 * CHUNK_RECORD
}

/// The header of an entry of `chunks` (`(hash, size)`), or with `reference_offset`
/// the whole file of a reference whose chunks start there in its linked file.
pub(super) fn encode_header(
    chunks: impl ExactSizeIterator<Item = (MerkleHash, u32)>,
    reference_offset: Option<u64>,
) -> Vec<u8> {
    let n = chunks.len();
    let mut header = Vec::with_capacity(header_len(n, reference_offset.is_some()) as usize);
    header.extend_from_slice(if reference_offset.is_some() {
        REF_MAGIC
    } else {
        MAGIC
    });
    header.extend_from_slice(&(n as u32).to_le_bytes());
    if let Some(offset) = reference_offset {
        header.extend_from_slice(&offset.to_le_bytes());
    }
    for (h, s) in chunks {
        header.extend_from_slice(&h.0);
        header.extend_from_slice(&s.to_le_bytes());
    }
    header
}

/// A checked header.
#[derive(Debug, PartialEq, Eq)]
pub(super) struct Header {
    pub chunks: Vec<(MerkleHash, u32)>,
    /// A reference: where the chunks start in the linked file.
    pub offset: Option<u64>,
    /// Bytes of the header; an entry's data follows it.
    pub len: u64,
}

pub(super) fn invalid(m: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, m)
}

/// Read and check the header of an entry file (or a `reference`) of `n` chunks that is
/// `file_len` bytes long: its magic, chunk count and chunk sizes, and that the file is
/// exactly the header plus (for an entry) the chunks' data.
pub(super) fn read_header(
    f: &mut impl Read,
    file_len: u64,
    n: usize,
    reference: bool,
) -> io::Result<Header> {
    let len = header_len(n, reference);
    if file_len < len {
        return Err(invalid(format!(
            "{file_len} bytes is shorter than its header"
        )));
    }
    let mut header = vec![0u8; len as usize];
    f.read_exact(&mut header)?;
    let magic = if reference { REF_MAGIC } else { MAGIC };
    if &header[..8] != magic || chunk_count(&header) != Some(n as u32) {
        return Err(invalid("bad magic or chunk count".into()));
    }
    let prefix = prefix_len(reference) as usize;
    let mut chunks = Vec::with_capacity(n);
    for i in 0..n {
        let p = prefix + i * CHUNK_RECORD as usize;
        let hash = MerkleHash(header[p..p + 32].try_into().expect("32 bytes"));
        let size = u32::from_le_bytes(header[p + 32..p + 36].try_into().expect("4 bytes"));
        if size == 0 || size as usize > MAX_CHUNK {
            return Err(invalid(format!("chunk {i} size {size}")));
        }
        chunks.push((hash, size));
    }
    let total: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
    let offset = if reference {
        if file_len != len {
            return Err(invalid(format!("reference is {file_len} bytes, not {len}")));
        }
        Some(u64::from_le_bytes(
            header[12..20].try_into().expect("8 bytes"),
        ))
    } else {
        if len + total != file_len {
            return Err(invalid(format!(
                "length {file_len}, header says {}",
                len + total
            )));
        }
        None
    };
    Ok(Header {
        chunks,
        offset,
        len,
    })
}

/// The chunk count of an entry or a reference, from the start of its header (`None`
/// if the magic is neither).
pub(super) fn chunk_count(head: &[u8]) -> Option<u32> {
    let magic = head.get(..8)?;
    if magic != MAGIC && magic != REF_MAGIC {
        return None;
    }
    Some(u32::from_le_bytes(head.get(8..12)?.try_into().ok()?))
}

/// An entry being written; see [`super::ChunkCache::begin`]. Dropped uncommitted, its
/// temporary file is removed.
#[derive(Debug)]
pub(crate) struct PendingEntry {
    pub(super) xorb: MerkleHash,
    pub(super) start: u32,
    /// Chunks the entry holds once complete.
    pub(super) n: usize,
    /// Sizes of the chunks appended so far.
    pub(super) sizes: Vec<u32>,
    pub(super) file: File,
    pub(super) tmp: PathBuf,
    /// Header plus the chunks appended so far.
    pub(super) file_len: u64,
    /// The cache's bound: an entry growing past it is given up at once.
    pub(super) max_len: u64,
    /// Renamed into place: the temporary file is no longer there to remove.
    pub(super) done: bool,
}

impl PendingEntry {
    /// Append the next chunk's data.
    pub fn append(&mut self, data: &[u8]) -> io::Result<()> {
        if self.sizes.len() == self.n {
            return Err(io::Error::other(format!(
                "the entry holds {} chunks; no room for another",
                self.n
            )));
        }
        if self.file_len + data.len() as u64 > self.max_len {
            return Err(io::Error::other("the entry is larger than the whole cache"));
        }
        fsio::write_all_at(&self.file, data, self.file_len)?;
        self.file_len += data.len() as u64;
        self.sizes.push(data.len() as u32);
        Ok(())
    }
}

impl Drop for PendingEntry {
    fn drop(&mut self) {
        if !self.done {
            let _ = fs::remove_file(&self.tmp);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunks() -> Vec<(MerkleHash, u32)> {
        vec![
            (xet_hash::chunk_hash(b"a"), 100),
            (xet_hash::chunk_hash(b"b"), 200),
        ]
    }

    #[test]
    fn names_round_trip_and_reject_empty_ranges() {
        let f = xet_hash::chunk_hash(b"file");
        assert_eq!(
            parse_entry_name(&entry_name(3, 7, None)),
            Some((3, 7, None))
        );
        assert_eq!(
            parse_entry_name(&entry_name(0, 1, Some(&f))),
            Some((0, 1, Some(f)))
        );
        for bad in ["7-3", "3-3", "3", "a-b", ".tmp-1-2", "0-1@nothex"] {
            assert_eq!(parse_entry_name(bad), None, "{bad}");
        }
    }

    #[test]
    fn entry_headers_round_trip_and_check_the_data_length() {
        let c = chunks();
        let header = encode_header(c.iter().copied(), None);
        assert_eq!(header.len() as u64, header_len(2, false));
        assert_eq!(chunk_count(&header), Some(2));
        // The file: the header, then the chunks' data.
        let mut file = header.clone();
        file.resize(header.len() + 300, 0);
        let file_len = file.len() as u64;
        let got = read_header(&mut &file[..], file_len, 2, false).unwrap();
        assert_eq!(
            got,
            Header {
                chunks: c.clone(),
                offset: None,
                len: 12 + 2 * 36
            }
        );
        for (len, n, reference) in [(file_len + 1, 2, false), (file_len, 1, false)] {
            let e = read_header(&mut &file[..], len, n, reference).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
        }
        let e = read_header(&mut &file[..], file_len, 2, true).unwrap_err();
        assert!(e.to_string().contains("bad magic"), "{e}");
    }

    #[test]
    fn reference_headers_round_trip_and_are_exactly_their_header() {
        let c = chunks();
        let body = encode_header(c.iter().copied(), Some(4096));
        assert_eq!(body.len() as u64, header_len(2, true));
        assert_eq!(chunk_count(&body), Some(2));
        let got = read_header(&mut &body[..], body.len() as u64, 2, true).unwrap();
        assert_eq!((got.chunks, got.offset), (c, Some(4096)));
        assert!(read_header(&mut &body[..], body.len() as u64 + 1, 2, true).is_err());
        assert_eq!(chunk_count(b"XETXX001\x02\0\0\0"), None);
    }

    #[test]
    fn chunk_sizes_outside_the_limit_are_refused() {
        for size in [0, 128 * 1024 + 1] {
            let header = encode_header([(xet_hash::chunk_hash(b"a"), size)].into_iter(), None);
            let len = header.len() as u64 + u64::from(size);
            let e = read_header(&mut &header[..], len, 1, false).unwrap_err();
            assert!(e.to_string().contains("size"), "{e}");
        }
    }
}
