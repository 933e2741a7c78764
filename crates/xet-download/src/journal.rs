//! The resume journal: `<dest>.part.jsonl` next to `<dest>.part`.
//!
//! JSON Lines. The first line is a header identifying the download; every further line
//! records one term whose data is completely written to the `.part` file, with the
//! `(chunk hash, size)` of each of its chunks:
//!
//! ```text
//! {"version":1,"file":"<file hash>","size":<file size>,"start":<range start>,"end":<range end, exclusive>}
//! {"offset":<offset in the .part file>,"len":<bytes>,"chunks":[["<chunk hash>",<size>],...]}
//! ```
//!
//! Lines are appended (and flushed) as terms complete, after their data was written.
//! A torn last line is ignored. On resume the header must match the new download
//! exactly (else both files are discarded), and every recorded term is **re-verified
//! by re-hashing its bytes in the `.part` file** against the recorded chunk hashes;
//! terms that fail are fetched again. The recorded chunk hashes then take part in the
//! final file-hash check like freshly downloaded ones, so the final verification
//! still covers the whole file. Only whole terms are recorded (the trimmed first and
//! last term of a range download are always fetched again).

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};
use xet_hash::MerkleHash;
use xet_mmap::durable;

use crate::decode::hash_chunks;
use crate::fsio;

pub(crate) const JOURNAL_VERSION: u32 = 1;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct JournalHeader {
    pub version: u32,
    pub file: String,
    pub size: u64,
    pub start: u64,
    pub end: u64,
}

impl JournalHeader {
    pub fn new(file: &MerkleHash, size: u64, start: u64, end: u64) -> Self {
        JournalHeader {
            version: JOURNAL_VERSION,
            file: file.to_string(),
            size,
            start,
            end,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
struct Line {
    offset: u64,
    len: u64,
    chunks: Vec<(String, u32)>,
}

/// A term whose data is in the `.part` file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DoneTerm {
    pub len: u64,
    pub chunks: Vec<(MerkleHash, u32)>,
}

fn parse_line(l: &str) -> Option<(u64, DoneTerm)> {
    let line: Line = serde_json::from_str(l).ok()?;
    let chunks = line
        .chunks
        .iter()
        .map(|(h, s)| MerkleHash::from_hex(h).ok().map(|h| (h, *s)))
        .collect::<Option<Vec<_>>>()?;
    let sum: u64 = chunks.iter().map(|c| u64::from(c.1)).sum();
    (sum == line.len && line.len > 0).then_some((
        line.offset,
        DoneTerm {
            len: line.len,
            chunks,
        },
    ))
}

fn to_line(offset: u64, t: &DoneTerm) -> String {
    let line = Line {
        offset,
        len: t.len,
        chunks: t.chunks.iter().map(|(h, s)| (h.to_string(), *s)).collect(),
    };
    let mut s = serde_json::to_string(&line).expect("journal line serializes");
    s.push('\n');
    s
}

/// Read the journal at `path` and return the terms that match `header` and whose
/// bytes in `part` still hash to the recorded chunks. Any problem yields an empty map.
pub(crate) fn load_verified(
    path: &Path,
    part: &Path,
    header: &JournalHeader,
) -> HashMap<u64, DoneTerm> {
    let Ok(f) = File::open(path) else {
        return HashMap::new();
    };
    let mut lines = BufReader::new(f).lines();
    let Some(Ok(first)) = lines.next() else {
        return HashMap::new();
    };
    match serde_json::from_str::<JournalHeader>(&first) {
        Ok(h) if h == *header => {}
        _ => return HashMap::new(),
    }
    let mut entries: Vec<(u64, DoneTerm)> = Vec::new();
    for l in lines {
        let Ok(l) = l else { break };
        if let Some(e) = parse_line(&l) {
            entries.push(e);
        }
    }
    let Ok(part_file) = File::open(part) else {
        return HashMap::new();
    };
    let part_len = part_file.metadata().map(|m| m.len()).unwrap_or(0);
    entries
        .into_par_iter()
        .filter(|(off, t)| {
            if off.checked_add(t.len).is_none_or(|e| e > part_len) {
                return false;
            }
            let mut buf = vec![0u8; t.len as usize];
            if fsio::read_exact_at(&part_file, &mut buf, *off).is_err() {
                return false;
            }
            let sizes: Vec<u32> = t.chunks.iter().map(|c| c.1).collect();
            match hash_chunks(&buf, &sizes) {
                Some(hashes) => hashes.iter().zip(&t.chunks).all(|(a, b)| *a == b.0),
                None => false,
            }
        })
        .collect()
}

/// An open journal being appended to.
#[derive(Debug)]
pub(crate) struct Journal {
    path: PathBuf,
    file: Mutex<File>,
}

impl Journal {
    /// (Re)write the journal with `header` and the already verified `done` terms (an
    /// atomic replace, [`xet_mmap::durable::replace_with`]), then keep it open for
    /// appending.
    pub fn create(
        path: &Path,
        header: &JournalHeader,
        done: &HashMap<u64, DoneTerm>,
    ) -> io::Result<Journal> {
        durable::replace_with(path, |f| {
            let mut w = io::BufWriter::new(f);
            serde_json::to_writer(&mut w, header)?;
            w.write_all(b"\n")?;
            let mut offs: Vec<&u64> = done.keys().collect();
            offs.sort();
            for off in offs {
                w.write_all(to_line(*off, &done[off]).as_bytes())?;
            }
            w.flush()
        })?;
        let file = OpenOptions::new().append(true).open(path)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file: Mutex::new(file),
        })
    }

    /// Record a completed term. Call after its data was written to the `.part` file.
    pub fn append(&self, offset: u64, term: &DoneTerm) -> io::Result<()> {
        let line = to_line(offset, term);
        let mut f = self.file.lock().unwrap_or_else(|p| p.into_inner());
        f.write_all(line.as_bytes())
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn term(data: &[u8], sizes: &[u32]) -> DoneTerm {
        let hashes = hash_chunks(data, sizes).unwrap();
        DoneTerm {
            len: data.len() as u64,
            chunks: hashes.into_iter().zip(sizes.iter().copied()).collect(),
        }
    }

    #[test]
    fn round_trip_and_reverify() {
        let dir = tempfile::tempdir().unwrap();
        let part = dir.path().join("f.part");
        let jp = dir.path().join("f.part.jsonl");
        let data: Vec<u8> = (0..3000u32).map(|i| (i % 253) as u8).collect();
        std::fs::write(&part, &data).unwrap();
        let header = JournalHeader::new(&xet_hash::chunk_hash(b"f"), 3000, 0, 3000);
        let j = Journal::create(&jp, &header, &HashMap::new()).unwrap();
        j.append(0, &term(&data[..1000], &[400, 600])).unwrap();
        j.append(1000, &term(&data[1000..2000], &[1000])).unwrap();
        // An entry whose bytes on disk differ (as if the write never reached the disk).
        let mut wrong = data[2000..3000].to_vec();
        wrong[5] ^= 1;
        j.append(2000, &term(&wrong, &[1000])).unwrap();
        drop(j);
        // A torn trailing line.
        let mut f = OpenOptions::new().append(true).open(&jp).unwrap();
        f.write_all(b"{\"offset\":3000,\"len\"").unwrap();
        drop(f);

        let done = load_verified(&jp, &part, &header);
        assert_eq!(done.len(), 2);
        assert_eq!(done[&0].chunks.len(), 2);
        assert_eq!(done[&1000].len, 1000);
        assert!(!done.contains_key(&2000));

        // Another download (different range) does not reuse it.
        let other = JournalHeader::new(&xet_hash::chunk_hash(b"f"), 3000, 10, 3000);
        assert!(load_verified(&jp, &part, &other).is_empty());

        // Rewriting keeps exactly the verified entries.
        let j = Journal::create(&jp, &header, &done).unwrap();
        drop(j);
        assert_eq!(load_verified(&jp, &part, &header), done);
        let text = std::fs::read_to_string(&jp).unwrap();
        assert_eq!(text.lines().count(), 3);
    }

    #[test]
    fn missing_or_garbage_journal_is_empty() {
        let dir = tempfile::tempdir().unwrap();
        let header = JournalHeader::new(&MerkleHash::ZERO, 1, 0, 1);
        let jp = dir.path().join("j");
        assert!(load_verified(&jp, &dir.path().join("p"), &header).is_empty());
        std::fs::write(&jp, "not json\n").unwrap();
        assert!(load_verified(&jp, &dir.path().join("p"), &header).is_empty());
    }
}
