//! Planning: segments of a file, the terms ("items") of each segment placed at their
//! file offsets, and the fetches that serve them. Pure functions, no I/O.
//!
//! A file (or the wanted range `out`) is walked front to back. Each reconstruction is
//! queried from `covered` (the end of the last term taken so far) for about
//! `segment_bytes`, and *every* term of the answer is taken whole, so the next query
//! starts on a term boundary and no chunk is taken twice. A server that answers with
//! untrimmed terms starting before the query (a non-zero `offset_into_first_range` on
//! a later segment) is handled: the part before `covered` is dropped (`keep_from`),
//! and for whole-file downloads the drop must fall on a chunk boundary.

use std::collections::HashMap;

use xet_cas::{ByteRange, ChunkRange, Reconstruction, Term, XorbFetch};
use xet_hash::MerkleHash;

use crate::error::DownloadError;

/// One term placed in the file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Item {
    /// Position among all items of the file.
    pub idx: usize,
    /// Index of the term in its reconstruction answer (for messages).
    pub term_index: usize,
    pub term: Term,
    /// File offset of the term's first decoded byte.
    pub data_start: u64,
    /// File offset from which this item's data is new (data before it was covered by
    /// an earlier item).
    pub keep_from: u64,
    /// File bytes this item writes: `[keep_from, data_end) ∩ out`.
    pub write: ByteRange,
}

impl Item {
    pub fn data_end(&self) -> u64 {
        self.data_start + self.term.unpacked_length
    }
    /// Whether the item writes all of its term's data (it can then be journaled and
    /// re-verified from the output on resume).
    pub fn is_whole(&self) -> bool {
        self.write.start == self.data_start && self.write.end == self.data_end()
    }
    pub fn describe(&self) -> String {
        format!(
            "term {} (xorb {} chunks {}..{}, file bytes {}..{})",
            self.idx,
            self.term.xorb,
            self.term.chunks.start,
            self.term.chunks.end,
            self.data_start,
            self.data_end()
        )
    }
}

/// Place the terms of `recon` (the answer for `query`) in the file, continuing from
/// `covered`, limited to `out`. Returns the items and the new `covered`.
pub(crate) fn plan_segment(
    file: MerkleHash,
    recon: &Reconstruction,
    query: ByteRange,
    covered: u64,
    out: ByteRange,
    next_idx: usize,
) -> Result<(Vec<Item>, u64), DownloadError> {
    let bad = |detail: String| DownloadError::BadReconstruction { file, detail };
    let offset = recon.offset_into_first_range;
    let mut pos = query.start.checked_sub(offset).ok_or_else(|| {
        bad(format!(
            "offset_into_first_range {offset} is larger than the query start {}",
            query.start
        ))
    })?;
    let mut covered = covered;
    let mut items = Vec::new();
    for (ti, term) in recon.terms.iter().enumerate() {
        if term.unpacked_length == 0 || term.chunks.is_empty() {
            return Err(bad(format!(
                "term {ti} for bytes {}..{} is empty",
                query.start, query.end
            )));
        }
        let data_start = pos;
        let data_end = pos.checked_add(term.unpacked_length).ok_or_else(|| {
            bad(format!(
                "term {ti} length {} overflows",
                term.unpacked_length
            ))
        })?;
        pos = data_end;
        if data_end <= covered {
            continue;
        }
        if data_start >= out.end {
            break;
        }
        if data_start > covered {
            return Err(bad(format!(
                "terms skip file bytes {covered}..{data_start} (answer for bytes {}..{})",
                query.start, query.end
            )));
        }
        let keep_from = data_start.max(covered);
        items.push(Item {
            idx: next_idx + items.len(),
            term_index: ti,
            term: term.clone(),
            data_start,
            keep_from,
            write: ByteRange::new(keep_from, data_end.min(out.end)),
        });
        covered = data_end;
    }
    if items.is_empty() {
        return Err(bad(format!(
            "the answer for bytes {}..{} has no term covering byte {covered}",
            query.start, query.end
        )));
    }
    Ok((items, covered))
}

/// Items served by one fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Group {
    pub fetch: XorbFetch,
    pub items: Vec<Item>,
}

/// Merge fetches of the same xorb (and URL) whose chunk ranges overlap or touch into
/// one, so no byte range is downloaded twice even if a server lists overlapping
/// ranges. Ranges whose byte offsets disagree with their chunk ranges are left alone.
pub(crate) fn merge_fetches(fetches: &mut Vec<XorbFetch>) {
    let mut list = std::mem::take(fetches);
    list.sort_by(|a, b| {
        (a.xorb, &a.url, a.chunks.start, a.chunks.end).cmp(&(
            b.xorb,
            &b.url,
            b.chunks.start,
            b.chunks.end,
        ))
    });
    let mut out: Vec<XorbFetch> = Vec::with_capacity(list.len());
    for f in list {
        if let Some(m) = out.last_mut()
            && m.xorb == f.xorb
            && m.url == f.url
        {
            let touching = f.chunks.start == m.chunks.end && f.bytes.start == m.bytes.end;
            let overlapping = f.chunks.start < m.chunks.end
                && f.bytes.start < m.bytes.end
                && (f.chunks.start > m.chunks.start) == (f.bytes.start > m.bytes.start)
                && (f.chunks.end > m.chunks.end) == (f.bytes.end > m.bytes.end);
            if touching || overlapping {
                m.chunks.end = m.chunks.end.max(f.chunks.end);
                m.bytes.end = m.bytes.end.max(f.bytes.end);
                continue;
            }
        }
        out.push(f);
    }
    *fetches = out;
}

/// Find the fetch serving `chunks` of `xorb` in `recon`.
pub(crate) fn find_fetch<'a>(
    recon: &'a Reconstruction,
    xorb: &MerkleHash,
    chunks: &ChunkRange,
) -> Option<&'a XorbFetch> {
    recon
        .fetches
        .iter()
        .find(|f| f.xorb == *xorb && f.chunks.contains(chunks) && !f.bytes.is_empty())
}

/// Group `items` by the fetch that serves each, so every fetch is made once for all
/// the terms it covers. Groups come in the order of their first item.
pub(crate) fn group_items(
    file: MerkleHash,
    recon: &Reconstruction,
    items: Vec<Item>,
) -> Result<Vec<Group>, DownloadError> {
    let mut groups: Vec<Group> = Vec::new();
    let mut by_key: HashMap<(MerkleHash, u32, u32, u64, u64), usize> = HashMap::new();
    for item in items {
        let f = find_fetch(recon, &item.term.xorb, &item.term.chunks).ok_or_else(|| {
            DownloadError::BadReconstruction {
                file,
                detail: format!("no fetch covers {}", item.describe()),
            }
        })?;
        let key = (
            f.xorb,
            f.chunks.start,
            f.chunks.end,
            f.bytes.start,
            f.bytes.end,
        );
        match by_key.get(&key) {
            Some(&g) => groups[g].items.push(item),
            None => {
                by_key.insert(key, groups.len());
                groups.push(Group {
                    fetch: f.clone(),
                    items: vec![item],
                });
            }
        }
    }
    Ok(groups)
}

/// Split `[start, end)` into segment queries of `seg` bytes (used for the first query
/// of each segment; later ones start wherever the previous answer ended).
/// How many segments long the first query of a download is: a file up to that size
/// (2 GiB at the default 512 MiB) learns its size from that one answer, which ends
/// before the query does, instead of spending a round trip on a size query before its
/// first fetch; later segments keep presigned URLs fresh.
pub(crate) const FIRST_SEGMENTS: u64 = 4;

/// The length of segment `index` (0 = the first) of a download.
pub(crate) fn segment_len(index: usize, seg: u64) -> u64 {
    let seg = seg.max(1);
    if index == 0 {
        seg.saturating_mul(FIRST_SEGMENTS)
    } else {
        seg
    }
}

pub(crate) fn segment_query(covered: u64, out_end: u64, seg: u64) -> ByteRange {
    ByteRange::new(covered, covered.saturating_add(seg.max(1)).min(out_end))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u8) -> MerkleHash {
        xet_hash::chunk_hash(&[i])
    }
    fn term(x: u8, a: u32, b: u32, len: u64) -> Term {
        Term {
            xorb: h(x),
            chunks: ChunkRange::new(a, b),
            unpacked_length: len,
        }
    }
    fn fetch(x: u8, a: u32, b: u32, s: u64, e: u64) -> XorbFetch {
        XorbFetch {
            xorb: h(x),
            chunks: ChunkRange::new(a, b),
            bytes: ByteRange::new(s, e),
            url: None,
        }
    }
    const F: MerkleHash = MerkleHash::ZERO;

    #[test]
    fn whole_terms_are_taken_and_covered_advances() {
        let r = Reconstruction {
            offset_into_first_range: 0,
            terms: vec![term(1, 0, 2, 100), term(2, 0, 1, 50), term(1, 2, 3, 30)],
            fetches: vec![fetch(1, 0, 3, 0, 120), fetch(2, 0, 1, 0, 40)],
        };
        let (items, cov) =
            plan_segment(F, &r, ByteRange::new(0, 120), 0, ByteRange::new(0, 180), 0).unwrap();
        assert_eq!(cov, 180);
        assert_eq!(items.len(), 3);
        assert_eq!(items[2].data_start, 150);
        assert!(items.iter().all(Item::is_whole));
        let groups = group_items(F, &r, items).unwrap();
        assert_eq!(groups.len(), 2);
        assert_eq!(
            groups[0].items.len(),
            2,
            "one fetch serves both terms of xorb 1"
        );
    }

    #[test]
    fn range_items_are_trimmed() {
        // Query bytes 130..160 of a file; the server trimmed to the term at 100.
        let r = Reconstruction {
            offset_into_first_range: 30,
            terms: vec![term(2, 0, 1, 50), term(1, 2, 3, 30)],
            fetches: vec![fetch(1, 2, 3, 80, 120), fetch(2, 0, 1, 0, 40)],
        };
        let out = ByteRange::new(130, 160);
        let (items, cov) = plan_segment(F, &r, ByteRange::new(130, 160), 130, out, 0).unwrap();
        assert_eq!(cov, 180);
        assert_eq!(items[0].data_start, 100);
        assert_eq!(items[0].write, ByteRange::new(130, 150));
        assert_eq!(items[1].write, ByteRange::new(150, 160));
        assert!(!items[0].is_whole() && !items[1].is_whole());
    }

    #[test]
    fn overlap_with_an_earlier_segment_is_dropped() {
        // A later segment answered untrimmed: its first term starts before `covered`.
        let r = Reconstruction {
            offset_into_first_range: 60,
            terms: vec![term(1, 0, 2, 100), term(2, 0, 1, 50)],
            fetches: vec![fetch(1, 0, 2, 0, 80), fetch(2, 0, 1, 0, 40)],
        };
        let (items, cov) = plan_segment(
            F,
            &r,
            ByteRange::new(60, 150),
            60,
            ByteRange::new(0, 150),
            7,
        )
        .unwrap();
        assert_eq!(cov, 150);
        assert_eq!(items[0].idx, 7);
        assert_eq!(items[0].keep_from, 60);
        assert_eq!(items[0].write, ByteRange::new(60, 100));
        // Terms wholly before `covered` are skipped.
        let r = Reconstruction {
            offset_into_first_range: 100,
            ..r
        };
        let (items, _) = plan_segment(
            F,
            &r,
            ByteRange::new(100, 150),
            100,
            ByteRange::new(0, 150),
            0,
        )
        .unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].term.xorb, h(2));
    }

    #[test]
    fn gaps_and_missing_fetches_are_errors() {
        let r = Reconstruction {
            offset_into_first_range: 0,
            terms: vec![term(1, 0, 2, 100)],
            fetches: vec![fetch(1, 0, 1, 0, 80)],
        };
        // Answer starts after the covered point.
        let e = plan_segment(
            F,
            &r,
            ByteRange::new(50, 150),
            40,
            ByteRange::new(0, 200),
            0,
        )
        .unwrap_err();
        assert!(e.to_string().contains("skip"), "{e}");
        let (items, _) =
            plan_segment(F, &r, ByteRange::new(0, 100), 0, ByteRange::new(0, 100), 0).unwrap();
        let e = group_items(F, &r, items).unwrap_err();
        assert!(e.to_string().contains("no fetch covers"), "{e}");
        // No term at all.
        let empty = Reconstruction::default();
        assert!(
            plan_segment(
                F,
                &empty,
                ByteRange::new(0, 10),
                0,
                ByteRange::new(0, 10),
                0
            )
            .is_err()
        );
        // Offset larger than the start.
        let r2 = Reconstruction {
            offset_into_first_range: 5,
            ..r.clone()
        };
        assert!(plan_segment(F, &r2, ByteRange::new(0, 10), 0, ByteRange::new(0, 10), 0).is_err());
    }

    #[test]
    fn overlapping_and_adjacent_fetches_merge() {
        let mut f = vec![
            fetch(1, 4, 6, 400, 600),
            fetch(1, 0, 2, 0, 200),
            fetch(2, 0, 1, 0, 50),
            fetch(1, 1, 3, 100, 300),
            fetch(1, 0, 1, 0, 100),
            fetch(1, 3, 4, 300, 400),
            fetch(2, 2, 3, 90, 120),
        ];
        merge_fetches(&mut f);
        f.sort_by_key(|x| (x.xorb != h(1), x.chunks.start));
        assert_eq!(
            f,
            vec![
                fetch(1, 0, 6, 0, 600),
                fetch(2, 0, 1, 0, 50),
                fetch(2, 2, 3, 90, 120)
            ]
        );
        // Different URLs are not merged.
        let mut a = fetch(1, 0, 1, 0, 10);
        a.url = Some("u1".into());
        let mut b = fetch(1, 1, 2, 10, 20);
        b.url = Some("u2".into());
        let mut v = vec![a, b];
        merge_fetches(&mut v);
        assert_eq!(v.len(), 2);
    }

    #[test]
    fn segment_queries() {
        assert_eq!(segment_query(0, 1000, 300), ByteRange::new(0, 300));
        assert_eq!(segment_query(900, 1000, 300), ByteRange::new(900, 1000));
        assert_eq!(segment_query(5, 6, 0), ByteRange::new(5, 6));
    }
}
