//! Turning a registered file into a [`Reconstruction`]: range selection, trimming to
//! chunk granularity, and merging fetch ranges. Pure functions over the index data.

use std::collections::HashMap;
use std::sync::Arc;

use xet_hash::MerkleHash;

use super::meta::XorbMeta;
use xet_cas::{ByteRange, CasError, ChunkRange, Reconstruction, Result, Term, XorbFetch};

/// One term of a registered file, as validated at registration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoredTerm {
    pub xorb: MerkleHash,
    pub chunks: ChunkRange,
    pub unpacked: u64,
}

/// A registered file: its terms and where each starts in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileEntry {
    pub terms: Vec<StoredTerm>,
    /// `starts[i]` = file offset of term `i`; `starts.len() == terms.len() + 1`, the last
    /// entry is the file size.
    pub starts: Vec<u64>,
}

impl FileEntry {
    pub fn new(terms: Vec<StoredTerm>) -> Self {
        let mut starts = Vec::with_capacity(terms.len() + 1);
        let mut pos = 0u64;
        starts.push(0);
        for t in &terms {
            pos += t.unpacked;
            starts.push(pos);
        }
        FileEntry { terms, starts }
    }

    pub fn size(&self) -> u64 {
        *self.starts.last().expect("starts is never empty")
    }
}

/// The bytes `[start, end)` a query asks for, after clamping; `None` for the whole file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub start: u64,
    pub end: u64,
}

/// Resolve the query range against the file size: the end is clamped, a start at or past
/// the end of the file is [`CasError::RangeNotSatisfiable`].
pub fn window(file: &MerkleHash, size: u64, range: Option<ByteRange>) -> Result<Window> {
    match range {
        None => Ok(Window {
            start: 0,
            end: size,
        }),
        Some(r) => {
            if r.start >= size {
                return Err(CasError::RangeNotSatisfiable {
                    file: *file,
                    start: r.start,
                    size,
                });
            }
            Ok(Window {
                start: r.start,
                end: r.end.min(size).max(r.start),
            })
        }
    }
}

/// Indices of the terms overlapping `w`.
pub fn overlapping(entry: &FileEntry, w: Window) -> std::ops::Range<usize> {
    if w.start >= w.end {
        return 0..0;
    }
    // First term whose end is past w.start; first term starting at or after w.end.
    let first = entry.starts[1..].partition_point(|&end| end <= w.start);
    let last = entry.starts[..entry.terms.len()].partition_point(|&s| s < w.end);
    first..last.max(first)
}

/// Build the reconstruction of `w` from `entry`; `metas` must hold every xorb of the
/// overlapping terms.
pub fn plan(
    entry: &FileEntry,
    w: Window,
    metas: &HashMap<MerkleHash, Arc<XorbMeta>>,
) -> Result<Reconstruction> {
    let idx = overlapping(entry, w);
    let mut terms = Vec::with_capacity(idx.len());
    let mut offset_into_first_range = 0;
    for i in idx.clone() {
        let t = entry.terms[i];
        let meta = metas
            .get(&t.xorb)
            .ok_or_else(|| storage(&t.xorb, "xorb metadata not loaded"))?;
        let term_start = entry.starts[i];
        let mut chunks = t.chunks;
        let mut unpacked = t.unpacked;
        if i == idx.start && w.start > term_start {
            // Drop the whole chunks before w.start.
            let mut skip = w.start - term_start;
            while chunks.start < chunks.end {
                let sz = meta.chunk_size(chunks.start);
                if sz > skip {
                    break;
                }
                skip -= sz;
                unpacked -= sz;
                chunks.start += 1;
            }
            offset_into_first_range = skip;
        }
        let term_end = entry.starts[i + 1];
        if i + 1 == idx.end && w.end < term_end {
            // Drop the whole chunks at or after w.end.
            let mut extra = term_end - w.end;
            while chunks.end > chunks.start {
                let sz = meta.chunk_size(chunks.end - 1);
                if sz > extra {
                    break;
                }
                extra -= sz;
                unpacked -= sz;
                chunks.end -= 1;
            }
        }
        if chunks.is_empty() {
            return Err(storage(
                &t.xorb,
                "trimmed term is empty: index inconsistent with the xorb",
            ));
        }
        terms.push(Term {
            xorb: t.xorb,
            chunks,
            unpacked_length: unpacked,
        });
    }
    let fetches = fetches(&terms, metas)?;
    Ok(Reconstruction {
        offset_into_first_range,
        terms,
        fetches,
    })
}

/// Per xorb, merge the overlapping or adjacent chunk ranges of `terms` into fetches of
/// whole chunks. Xorbs appear in order of first use, ranges in chunk order.
pub fn fetches(
    terms: &[Term],
    metas: &HashMap<MerkleHash, Arc<XorbMeta>>,
) -> Result<Vec<XorbFetch>> {
    let mut order: Vec<MerkleHash> = Vec::new();
    let mut ranges: HashMap<MerkleHash, Vec<ChunkRange>> = HashMap::new();
    for t in terms {
        let list = ranges.entry(t.xorb).or_insert_with(|| {
            order.push(t.xorb);
            Vec::new()
        });
        list.push(t.chunks);
    }
    let mut out = Vec::new();
    for xorb in order {
        let meta = metas
            .get(&xorb)
            .ok_or_else(|| storage(&xorb, "xorb metadata not loaded"))?;
        let mut list = ranges.remove(&xorb).unwrap_or_default();
        list.sort_by_key(|r| (r.start, r.end));
        let mut merged: Vec<ChunkRange> = Vec::with_capacity(list.len());
        for r in list {
            match merged.last_mut() {
                Some(m) if r.start <= m.end => m.end = m.end.max(r.end),
                _ => merged.push(r),
            }
        }
        for chunks in merged {
            let bytes = meta
                .byte_range(chunks)
                .ok_or_else(|| storage(&xorb, "chunk range outside the xorb"))?;
            out.push(XorbFetch {
                xorb,
                chunks,
                bytes,
                url: None,
            });
        }
    }
    Ok(out)
}

fn storage(xorb: &MerkleHash, what: &str) -> CasError {
    CasError::storage(format!("xorb {xorb}: {what}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A xorb whose chunk i is `sizes[i]` bytes and serializes to `sizes[i] + 8` bytes.
    fn meta(seed: &[u8], sizes: &[u64]) -> Arc<XorbMeta> {
        let mut ce = Vec::new();
        let mut ue = Vec::new();
        let (mut c, mut u) = (0, 0);
        for s in sizes {
            c += s + 8;
            u += s;
            ce.push(c);
            ue.push(u);
        }
        Arc::new(XorbMeta {
            hash: xet_hash::chunk_hash(seed),
            chunk_hashes: (0..sizes.len())
                .map(|i| xet_hash::chunk_hash(&[seed, &[i as u8]].concat()))
                .collect(),
            chunk_ends: ce,
            unpacked_ends: ue,
        })
    }

    fn st(m: &XorbMeta, a: u32, b: u32) -> StoredTerm {
        let chunks = ChunkRange::new(a, b);
        StoredTerm {
            xorb: m.hash,
            chunks,
            unpacked: m.unpacked_range_len(chunks).unwrap(),
        }
    }

    fn setup() -> (
        FileEntry,
        HashMap<MerkleHash, Arc<XorbMeta>>,
        MerkleHash,
        MerkleHash,
    ) {
        let x = meta(b"x", &[10, 20, 30, 40]);
        let y = meta(b"y", &[5, 5, 5]);
        // File: x[0..2] (30) | y[0..3] (15) | x[1..4] (90) | x[0..1] (10) = 145 bytes
        let entry = FileEntry::new(vec![st(&x, 0, 2), st(&y, 0, 3), st(&x, 1, 4), st(&x, 0, 1)]);
        let (xh, yh) = (x.hash, y.hash);
        let metas = HashMap::from([(x.hash, x), (y.hash, y)]);
        (entry, metas, xh, yh)
    }

    /// The plan for bytes `start..end` of the 145-byte file of [`setup`].
    fn plan_range(
        entry: &FileEntry,
        metas: &HashMap<MerkleHash, Arc<XorbMeta>>,
        start: u64,
        end: u64,
    ) -> Reconstruction {
        let w = window(&MerkleHash::ZERO, 145, Some(ByteRange::new(start, end))).unwrap();
        plan(entry, w, metas).unwrap()
    }

    #[test]
    fn whole_file_merges_fetches_per_xorb() {
        let (entry, metas, x, y) = setup();
        assert_eq!(entry.size(), 145);
        let f = MerkleHash::ZERO;
        let r = plan(&entry, window(&f, 145, None).unwrap(), &metas).unwrap();
        assert_eq!(r.terms.len(), 4);
        assert_eq!(r.offset_into_first_range, 0);
        assert_eq!(r.unpacked_len(), 145);
        // x: [0,2) [1,4) [0,1) merge into [0,4); y: [0,3)
        assert_eq!(r.fetches.len(), 2);
        assert_eq!(r.fetches[0].xorb, x);
        assert_eq!(r.fetches[0].chunks, ChunkRange::new(0, 4));
        assert_eq!(r.fetches[0].bytes, ByteRange::new(0, 132));
        assert_eq!(r.fetches[1].xorb, y);
        assert_eq!(r.fetches[1].bytes, ByteRange::new(0, 39));
        assert!(r.terms.iter().all(|t| r.fetch_for(t).is_some()));
    }

    #[test]
    fn adjacent_ranges_merge_and_gaps_do_not() {
        let x = meta(b"x", &[10, 20, 30, 40, 50]);
        let terms = vec![
            Term {
                xorb: x.hash,
                chunks: ChunkRange::new(0, 1),
                unpacked_length: 10,
            },
            Term {
                xorb: x.hash,
                chunks: ChunkRange::new(1, 2),
                unpacked_length: 20,
            },
            Term {
                xorb: x.hash,
                chunks: ChunkRange::new(3, 5),
                unpacked_length: 90,
            },
        ];
        let metas = HashMap::from([(x.hash, x.clone())]);
        let f = fetches(&terms, &metas).unwrap();
        assert_eq!(
            f.iter().map(|f| f.chunks).collect::<Vec<_>>(),
            vec![ChunkRange::new(0, 2), ChunkRange::new(3, 5)]
        );
        assert_eq!(
            f[1].bytes,
            ByteRange::new(10 + 8 + 20 + 8 + 30 + 8, x.region_len())
        );
    }

    #[test]
    fn ranges_trim_to_chunks() {
        let (entry, metas, x, y) = setup();
        let f = MerkleHash::ZERO;
        let q = |s, e| plan_range(&entry, &metas, s, e);
        // Inside chunk 1 of the first term (bytes 10..30): keep chunk 1 only, skip 5.
        let r = q(15, 20);
        assert_eq!(
            r.terms,
            vec![Term {
                xorb: x,
                chunks: ChunkRange::new(1, 2),
                unpacked_length: 20
            }]
        );
        assert_eq!(r.offset_into_first_range, 5);
        assert_eq!(r.fetches.len(), 1);
        assert_eq!(r.fetches[0].bytes, ByteRange::new(18, 46));
        // Exactly at a chunk boundary.
        let r = q(10, 30);
        assert_eq!(
            r.terms,
            vec![Term {
                xorb: x,
                chunks: ChunkRange::new(1, 2),
                unpacked_length: 20
            }]
        );
        assert_eq!(r.offset_into_first_range, 0);
        // Exactly at a term boundary: 30..45 is the y term.
        let r = q(30, 45);
        assert_eq!(
            r.terms,
            vec![Term {
                xorb: y,
                chunks: ChunkRange::new(0, 3),
                unpacked_length: 15
            }]
        );
        // Across terms: 40..50 = y chunks 2 + x chunk 1 start.
        let r = q(40, 50);
        assert_eq!(r.offset_into_first_range, 0);
        assert_eq!(r.terms.len(), 2);
        assert_eq!(r.terms[0].chunks, ChunkRange::new(2, 3));
        assert_eq!(r.terms[1].chunks, ChunkRange::new(1, 2));
        // Last byte, end clamped.
        let r = q(144, 1000);
        assert_eq!(
            r.terms,
            vec![Term {
                xorb: x,
                chunks: ChunkRange::new(0, 1),
                unpacked_length: 10
            }]
        );
        assert_eq!(r.offset_into_first_range, 9);
        assert!(matches!(
            window(&f, 145, Some(ByteRange::new(145, 146))),
            Err(CasError::RangeNotSatisfiable {
                start: 145,
                size: 145,
                ..
            })
        ));
    }

    #[test]
    fn trimming_is_exact_at_chunk_boundaries() {
        let (entry, metas, x, _) = setup();
        let q = |s, e| plan_range(&entry, &metas, s, e);
        let r = q(0, 10);
        assert_eq!(
            r.terms,
            vec![Term {
                xorb: x,
                chunks: ChunkRange::new(0, 1),
                unpacked_length: 10
            }]
        );
        let r = q(0, 11);
        assert_eq!(
            r.terms,
            vec![Term {
                xorb: x,
                chunks: ChunkRange::new(0, 2),
                unpacked_length: 30
            }]
        );
    }

    /// Chunk `i` of xorb `m` holds bytes `(seed, i, pos)`-derived, so reassembly is checkable.
    fn chunk_bytes(m: &XorbMeta, i: u32) -> Vec<u8> {
        (0..m.chunk_size(i))
            .map(|p| (m.hash.0[0] as u64 * 31 + i as u64 * 7 + p) as u8)
            .collect()
    }

    #[test]
    fn every_window_reassembles_exactly_and_minimally() {
        let (entry, metas, _, _) = setup();
        let mut file = Vec::new();
        for t in &entry.terms {
            for i in t.chunks.start..t.chunks.end {
                file.extend(chunk_bytes(&metas[&t.xorb], i));
            }
        }
        for s in 0..145u64 {
            for e in s + 1..=150 {
                let w = window(&MerkleHash::ZERO, 145, Some(ByteRange::new(s, e))).unwrap();
                let r = plan(&entry, w, &metas).unwrap();
                let mut got = Vec::new();
                for t in &r.terms {
                    assert!(r.fetch_for(t).is_some());
                    let before = got.len();
                    for i in t.chunks.start..t.chunks.end {
                        got.extend(chunk_bytes(&metas[&t.xorb], i));
                    }
                    assert_eq!((got.len() - before) as u64, t.unpacked_length);
                }
                let first = r.terms.first().unwrap();
                let last = r.terms.last().unwrap();
                // Minimal: the first chunk holds byte s, the last chunk holds byte e-1.
                assert!(
                    r.offset_into_first_range < metas[&first.xorb].chunk_size(first.chunks.start),
                    "{s}..{e}"
                );
                let tail = got.len() as u64 - r.offset_into_first_range - (w.end - w.start);
                assert!(
                    tail < metas[&last.xorb].chunk_size(last.chunks.end - 1),
                    "{s}..{e}"
                );
                let got = &got[r.offset_into_first_range as usize..][..(w.end - w.start) as usize];
                assert_eq!(got, &file[s as usize..w.end as usize], "{s}..{e}");
            }
        }
    }
}
