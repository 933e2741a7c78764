//! Checking every chunk of a range against its xorb's chunk hashes.
//!
//! A range of a file cannot be checked against the file hash (that takes every chunk
//! of the file), and a reconstruction carries no chunk hashes. A xorb's footer does:
//! [`ChunkHashes`] gets it from the CAS ([`Cas::xorb_footer`]) once per xorb, accepts
//! it only if its chunk hashes and sizes make up the xorb hash (the name the chunks
//! are fetched under), and keeps it, bounded, for later ranges of the same xorb. A
//! fetch's chunks must then hash to the footer's entries for its chunk indices, and its
//! byte range must be where the footer puts those chunks.
//!
//! A CAS that does not serve footers (`Ok(None)`: its URLs serve only what they were
//! signed for, say) leaves ranges checked by decoding alone; after a few such answers
//! in a row, and none served, it is not asked again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};

use xet_cas::{Cas, CasError, XorbFetch};
use xet_hash::MerkleHash;
use xet_xorb::XorbFooter;

use crate::sync::lock;

/// "Not served" answers in a row, with none served before, after which a CAS is not
/// asked again.
const GIVE_UP_AFTER: u32 = 3;

/// The chunk hashes of one xorb, checked against its hash.
#[derive(Debug)]
pub struct XorbChunkHashes {
    xorb: MerkleHash,
    hashes: Vec<MerkleHash>,
    /// End of each chunk in the chunk region (headers included).
    ends: Vec<u32>,
}

impl XorbChunkHashes {
    /// `footer`, if its chunk hashes and sizes make up `xorb`'s hash.
    fn from_footer(xorb: MerkleHash, footer: XorbFooter) -> Result<Self, String> {
        let n = footer.chunk_hashes.len();
        if footer.xorb_hash != xorb {
            return Err(format!("the footer names xorb {}", footer.xorb_hash));
        }
        if footer.unpacked_chunk_offsets.len() != n || footer.chunk_boundary_offsets.len() != n {
            return Err("the footer has no chunk sizes (a v0 footer)".into());
        }
        let mut prev = 0u32;
        let mut entries = Vec::with_capacity(n);
        for (h, &end) in footer
            .chunk_hashes
            .iter()
            .zip(&footer.unpacked_chunk_offsets)
        {
            let size = end
                .checked_sub(prev)
                .ok_or("the footer's chunk offsets decrease")?;
            entries.push((*h, u64::from(size)));
            prev = end;
        }
        let computed = xet_hash::xorb_hash(&entries);
        if computed != xorb {
            return Err(format!(
                "the footer's {n} chunk hashes make up xorb hash {computed}, not {xorb}"
            ));
        }
        Ok(Self {
            xorb,
            hashes: footer.chunk_hashes,
            ends: footer.chunk_boundary_offsets,
        })
    }

    fn bytes_held(&self) -> usize {
        self.hashes.len() * (32 + 4) + 64
    }

    /// Check that `fetch` asks for exactly the bytes of its chunks.
    fn check_fetch(&self, fetch: &XorbFetch) -> Result<(), String> {
        let (a, b) = (fetch.chunks.start as usize, fetch.chunks.end as usize);
        if a >= b || b > self.hashes.len() {
            return Err(format!(
                "chunks {a}..{b} are not in the xorb's {} chunks",
                self.hashes.len()
            ));
        }
        let start = if a == 0 {
            0
        } else {
            u64::from(self.ends[a - 1])
        };
        let end = u64::from(self.ends[b - 1]);
        if (fetch.bytes.start, fetch.bytes.end) != (start, end) {
            return Err(format!(
                "chunks {a}..{b} are bytes {start}..{end} of the xorb, not {}..{}",
                fetch.bytes.start, fetch.bytes.end
            ));
        }
        Ok(())
    }

    /// Compare the hashes of chunks `first..` (as decoded) with the footer's: the index
    /// (within the xorb) of the first that differs, with what it should be.
    pub(crate) fn mismatch(&self, first: u32, got: &[MerkleHash]) -> Option<(u32, MerkleHash)> {
        got.iter().enumerate().find_map(|(i, g)| {
            let at = first as usize + i;
            let want = self.hashes.get(at).copied().unwrap_or_default();
            (*g != want).then_some((at as u32, want))
        })
    }
}

/// The chunk hashes of the xorbs a download (or a mount, across its reads) touches,
/// got from the CAS once per xorb and kept within a byte budget (oldest out first).
/// Share one across calls with [`crate::DownloadOptions::chunk_hashes`].
#[derive(Debug)]
pub struct ChunkHashes {
    budget: usize,
    kept: Mutex<Kept>,
    /// "Not served" answers in a row; [`u32::MAX`] once one was served.
    not_served: AtomicU32,
}

#[derive(Debug, Default)]
struct Kept {
    by_xorb: HashMap<MerkleHash, Arc<XorbChunkHashes>>,
    order: VecDeque<MerkleHash>,
    bytes: usize,
    /// Lookups under way: a second reader of the same xorb waits for the first one's
    /// answer instead of asking again (`None`: not served).
    asking: HashMap<MerkleHash, Arc<Asked>>,
}

type Asked = tokio::sync::OnceCell<Option<Arc<XorbChunkHashes>>>;

/// What [`ChunkHashes::for_fetch`] found.
#[derive(Clone)]
pub(crate) enum Lookup {
    /// The xorb's chunk hashes, which the fetch's byte range agrees with.
    Found(Arc<XorbChunkHashes>),
    /// The CAS does not give them.
    NotServed,
}

impl ChunkHashes {
    /// Keep at most about `budget` bytes of chunk hashes (36 bytes a chunk; a xorb of
    /// 1,000 chunks takes 36 KiB).
    pub fn new(budget: usize) -> Self {
        Self {
            budget,
            kept: Mutex::default(),
            not_served: AtomicU32::new(0),
        }
    }

    /// The chunk hashes for `fetch`'s xorb, from what is kept or from `cas`. A footer
    /// that does not make up the xorb hash, or a fetch whose byte range is not where
    /// the footer puts its chunks, is [`CasError::Corrupt`].
    pub(crate) async fn for_fetch(
        &self,
        cas: &dyn Cas,
        fetch: &XorbFetch,
    ) -> Result<Lookup, CasError> {
        // The kept hashes, or the lookup of them under way (joined, or started).
        let kept_or_asking = {
            let mut k = lock(&self.kept);
            match k.by_xorb.get(&fetch.xorb) {
                Some(x) => Ok(x.clone()),
                None => Err(k.asking.entry(fetch.xorb).or_default().clone()),
            }
        };
        let found = match kept_or_asking {
            Ok(kept) => kept,
            Err(asking) => {
                let got = asking.get_or_try_init(|| self.ask(cas, fetch)).await;
                let mut k = lock(&self.kept);
                if k.asking
                    .get(&fetch.xorb)
                    .is_some_and(|a| Arc::ptr_eq(a, &asking))
                {
                    k.asking.remove(&fetch.xorb);
                }
                drop(k);
                match got?.clone() {
                    Some(x) => x,
                    None => return Ok(Lookup::NotServed),
                }
            }
        };
        found.check_fetch(fetch).map_err(|m| {
            CasError::corrupt(
                format!("the reconstruction's fetch of xorb {}", found.xorb),
                m,
            )
        })?;
        Ok(Lookup::Found(found))
    }

    /// Ask `cas` for the footer of `fetch`'s xorb and keep it once checked; `None` if
    /// the CAS does not give it (or is no longer asked).
    async fn ask(
        &self,
        cas: &dyn Cas,
        fetch: &XorbFetch,
    ) -> Result<Option<Arc<XorbChunkHashes>>, CasError> {
        let not_served = self.not_served.load(Ordering::Relaxed);
        if not_served != u32::MAX && not_served >= GIVE_UP_AFTER {
            return Ok(None);
        }
        let Some(footer) = cas.xorb_footer(fetch).await? else {
            self.not_served_once(&fetch.xorb);
            return Ok(None);
        };
        self.not_served.store(u32::MAX, Ordering::Relaxed);
        let xorb = fetch.xorb;
        let checked = XorbChunkHashes::from_footer(xorb, footer)
            .map_err(|m| CasError::corrupt(format!("footer of xorb {xorb}"), m))?;
        let checked = Arc::new(checked);
        self.keep(checked.clone());
        Ok(Some(checked))
    }

    /// Count a "not served" answer; say so once the CAS is no longer asked.
    fn not_served_once(&self, xorb: &MerkleHash) {
        let counted = self
            .not_served
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                (n != u32::MAX).then_some(n + 1)
            });
        if counted == Ok(GIVE_UP_AFTER - 1) {
            tracing::warn!(
                "the CAS serves no xorb footers (the last asked for: xorb {xorb}): \
                 ranges are checked by decoding only, not against chunk hashes"
            );
        }
    }

    fn keep(&self, x: Arc<XorbChunkHashes>) {
        let mut k = lock(&self.kept);
        if k.by_xorb.contains_key(&x.xorb) {
            return;
        }
        k.bytes += x.bytes_held();
        k.order.push_back(x.xorb);
        k.by_xorb.insert(x.xorb, x);
        while k.bytes > self.budget && k.order.len() > 1 {
            let Some(old) = k.order.pop_front() else {
                break;
            };
            if let Some(gone) = k.by_xorb.remove(&old) {
                k.bytes -= gone.bytes_held();
            }
        }
    }
}

impl Default for ChunkHashes {
    /// 16 MiB: the chunk hashes of about 450 full xorbs (28 GiB of data).
    fn default() -> Self {
        Self::new(16 << 20)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_cas::{ByteRange, ChunkRange};

    fn footer(chunks: &[(MerkleHash, u32, u32)]) -> (MerkleHash, XorbFooter) {
        let mut ends = Vec::new();
        let mut unpacked = Vec::new();
        let (mut e, mut u) = (0u32, 0u32);
        for &(_, stored, size) in chunks {
            e += stored;
            u += size;
            ends.push(e);
            unpacked.push(u);
        }
        let entries: Vec<_> = chunks.iter().map(|&(h, _, s)| (h, u64::from(s))).collect();
        let xorb = xet_hash::xorb_hash(&entries);
        let f = XorbFooter {
            version: xet_xorb::FOOTER_VERSION,
            xorb_hash: xorb,
            chunk_hashes: chunks.iter().map(|c| c.0).collect(),
            chunk_boundary_offsets: ends,
            unpacked_chunk_offsets: unpacked,
        };
        (xorb, f)
    }

    fn h(i: u8) -> MerkleHash {
        xet_hash::chunk_hash(&[i; 100])
    }

    fn fetch(xorb: MerkleHash, chunks: (u32, u32), bytes: (u64, u64)) -> XorbFetch {
        XorbFetch {
            xorb,
            chunks: ChunkRange::new(chunks.0, chunks.1),
            bytes: ByteRange::new(bytes.0, bytes.1),
            url: None,
        }
    }

    #[test]
    fn a_footer_is_taken_only_if_it_makes_up_the_xorb_hash() {
        let (xorb, f) = footer(&[(h(1), 50, 100), (h(2), 60, 100), (h(3), 70, 90)]);
        let x = XorbChunkHashes::from_footer(xorb, f.clone()).unwrap();
        assert!(x.check_fetch(&fetch(xorb, (1, 3), (50, 180))).is_ok());
        assert!(x.check_fetch(&fetch(xorb, (1, 3), (50, 179))).is_err());
        assert!(x.check_fetch(&fetch(xorb, (0, 4), (0, 180))).is_err());
        assert_eq!(x.mismatch(1, &[h(2), h(3)]), None);
        assert_eq!(x.mismatch(1, &[h(2), h(9)]), Some((2, h(3))));
        // One chunk hash changed, or a size: the footer is refused.
        let mut bad = f.clone();
        bad.chunk_hashes[2] = h(9);
        assert!(XorbChunkHashes::from_footer(xorb, bad).is_err());
        let mut bad = f.clone();
        bad.unpacked_chunk_offsets[2] += 1;
        assert!(XorbChunkHashes::from_footer(xorb, bad).is_err());
        let mut v0 = f;
        v0.unpacked_chunk_offsets.clear();
        assert!(XorbChunkHashes::from_footer(xorb, v0).is_err());
    }

    #[test]
    fn kept_within_the_budget_oldest_out_first() {
        let c = ChunkHashes::new(300);
        let mut xorbs = Vec::new();
        for i in 0..3u8 {
            let (xorb, f) = footer(&[(h(i), 10, 10), (h(i + 10), 10, 10)]);
            c.keep(Arc::new(XorbChunkHashes::from_footer(xorb, f).unwrap()));
            xorbs.push(xorb);
        }
        let k = lock(&c.kept);
        assert!(k.bytes <= 300, "{}", k.bytes);
        assert!(!k.by_xorb.contains_key(&xorbs[0]));
        assert!(k.by_xorb.contains_key(&xorbs[2]));
    }
}
