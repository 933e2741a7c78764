//! The sequential heart of the pipeline: deciding, chunk by chunk, whether a chunk is
//! already stored somewhere (and where) or goes into a new xorb, building each file's
//! terms, and packing new chunks into xorbs. Pure and synchronous: no I/O, no async, so
//! it is unit-tested directly. See the crate docs for the rules.

use std::collections::{HashMap, VecDeque};

use bytes::Bytes;
use xet_hash::MerkleHash;
use xet_shard::Shard;

use crate::prepare::Prepared;

/// A xorb a term points into: one formed in this session (by slot, its hash is known
/// once it is built) or a stored one.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub(crate) enum XorbRef {
    Session(u32),
    Known(MerkleHash),
}

/// One term of a file: chunks `[start, end)` of `xorb`, `bytes` uncompressed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TermRec {
    pub xorb: XorbRef,
    pub start: u32,
    pub end: u32,
    pub bytes: u64,
}

/// New chunks packed into one xorb, not yet compressed.
#[derive(Debug)]
pub(crate) struct SealedXorb {
    pub slot: u32,
    /// Each chunk's data, in order: a slice of the block it was read in, or a copy where
    /// little of that block was new (see [`BlockId`]).
    pub data: Vec<Bytes>,
    /// `(chunk hash, length)` in order.
    pub chunks: Vec<(MerkleHash, u32)>,
    /// Chunks the reader already compressed, by index (may be shorter than `data`).
    pub prepared: Vec<Option<Prepared>>,
}

/// The read block a chunk is a slice of. A new chunk kept as a slice keeps the whole
/// block alive until its xorb is built, so where little of a block is new its new chunks
/// are copied out instead; where most of it is (a new file), copying them would cost a
/// pass over the data and a fresh allocation per chunk for nothing (about 0.15 s of CPU
/// per GiB uploaded).
/// Unique among the blocks of a process.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct BlockId(pub u64);

/// The block whose chunks are being decided, and what of it the open xorb holds.
#[derive(Debug)]
struct HeldBlock {
    block: BlockId,
    /// Bytes of the block decided (new or not) since it or the open xorb started.
    decided: u64,
    /// Of those, new: the open xorb's chunks from index `first` on.
    new: u64,
    first: usize,
}

/// A block's new chunks in a xorb stay slices of it while at least this fraction
/// (numerator, denominator) of what was decided of it meanwhile is new. Bounds what
/// blocks hold alive beyond the new data to a third of it, plus a block per xorb
/// boundary.
const KEEP_SLICES_IF_NEW: (u64, u64) = (3, 4);

/// Parameters of the dedup rules and xorb limits.
#[derive(Debug, Clone, Copy)]
pub(crate) struct DedupParams {
    pub min_run_chunks: usize,
    pub min_run_bytes: u64,
    pub xorb_max_chunks: usize,
    pub xorb_max_bytes: u64,
    /// Byte limit of the session's first xorb; each next one may hold twice as much, up
    /// to `xorb_max_bytes` (see [`DedupParams::slot_max_bytes`]).
    pub xorb_first_bytes: u64,
}

impl DedupParams {
    /// The byte limit of the xorb in `slot` where a file starts: `xorb_first_bytes <<
    /// slot`, at most `xorb_max_bytes`. The first xorbs of a session are sealed early so
    /// the link is busy while the dedup stage is still deciding the rest (an upload
    /// would otherwise send nothing until a full xorb of files was decided); with the
    /// default limits the third xorb has the full limit. It depends on the slot alone,
    /// so the xorbs formed stay a function of the inputs.
    pub fn slot_max_bytes(&self, slot: u32) -> u64 {
        let first = self.xorb_first_bytes.clamp(1, self.xorb_max_bytes);
        match 1u64.checked_shl(slot) {
            Some(factor) => first.saturating_mul(factor).min(self.xorb_max_bytes),
            None => self.xorb_max_bytes,
        }
    }
}

/// Where a chunk of a stored xorb was found: tier, key group, xorb, index.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Loc {
    tier: Tier,
    group: usize,
    xorb: XorbRef,
    idx: u32,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Tier {
    Session,
    Cache,
    Answers,
}

/// Chunks of stored xorbs, from shards (the local shard cache, global dedup answers).
/// Chunk hashes are indexed per HMAC key: a keyed shard's CAS section holds
/// `keyed_chunk_hash(key, raw)`, so a raw hash is keyed once per distinct key to look
/// it up. A xorb seen in several shards is indexed once (first seen wins); a chunk hash
/// present in several xorbs maps to the first.
#[derive(Debug, Default)]
pub(crate) struct KnownIndex {
    xorbs: Vec<MerkleHash>,
    /// Number of chunks of each xorb.
    xorb_lens: Vec<u32>,
    xorb_ids: HashMap<MerkleHash, u32>,
    groups: Vec<KeyGroup>,
}

#[derive(Debug)]
struct KeyGroup {
    /// Zero = unkeyed.
    key: MerkleHash,
    map: HashMap<MerkleHash, (u32, u32)>,
}

impl KnownIndex {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn num_xorbs(&self) -> usize {
        self.xorbs.len()
    }

    /// Index every xorb of `shard`'s CAS section not already known. Returns how many
    /// xorbs were added.
    pub fn add_shard(&mut self, shard: &Shard) -> usize {
        let key = shard.chunk_hash_key().unwrap_or(MerkleHash::ZERO);
        let g = match self.groups.iter().position(|g| g.key == key) {
            Some(g) => g,
            None => {
                self.groups.push(KeyGroup {
                    key,
                    map: HashMap::new(),
                });
                self.groups.len() - 1
            }
        };
        let mut added = 0;
        for cas in &shard.cas {
            if self.xorb_ids.contains_key(&cas.xorb_hash) {
                continue;
            }
            let id = self.xorbs.len() as u32;
            self.xorbs.push(cas.xorb_hash);
            self.xorb_lens.push(cas.chunks.len() as u32);
            self.xorb_ids.insert(cas.xorb_hash, id);
            let map = &mut self.groups[g].map;
            map.reserve(cas.chunks.len());
            for (i, ch) in cas.chunks.iter().enumerate() {
                map.entry(ch.hash).or_insert((id, i as u32));
            }
            added += 1;
        }
        added
    }

    fn stored_form(&self, group: usize, raw: &MerkleHash) -> MerkleHash {
        let key = &self.groups[group].key;
        if key.is_zero() {
            *raw
        } else {
            xet_hash::keyed_chunk_hash(key, raw)
        }
    }

    fn find_in_group(&self, group: usize, raw: &MerkleHash) -> Option<(MerkleHash, u32)> {
        let g = &self.groups[group];
        if g.map.is_empty() {
            return None;
        }
        let &(id, idx) = g.map.get(&self.stored_form(group, raw))?;
        Some((self.xorbs[id as usize], idx))
    }

    fn find(&self, raw: &MerkleHash) -> Option<(usize, MerkleHash, u32)> {
        (0..self.groups.len()).find_map(|g| self.find_in_group(g, raw).map(|(x, i)| (g, x, i)))
    }

    /// Whether chunk `idx` is the last chunk of xorb `x`.
    fn is_last(&self, x: &MerkleHash, idx: u32) -> bool {
        self.xorb_ids
            .get(x)
            .is_some_and(|&id| self.xorb_lens[id as usize] == idx + 1)
    }

    /// Whether `raw` is a chunk of some known xorb.
    pub fn contains(&self, raw: &MerkleHash) -> bool {
        self.find(raw).is_some()
    }
}

/// Per-file dedup state.
#[derive(Debug, Default)]
pub(crate) struct FileDedup {
    /// Every chunk of the file so far: `(hash, len)`, for the file hash and the
    /// verification entries.
    pub chunks: Vec<(MerkleHash, u64)>,
    /// Chunks received but not yet decided (waiting for enough look-ahead).
    pending: VecDeque<Queued>,
    pub terms: Vec<TermRec>,
    /// Chunks this file stored as new: hash → (slot, index).
    own_new: HashMap<MerkleHash, (u32, u32)>,
    /// The dedup run being continued: where its last chunk was found.
    run: Option<Loc>,
    pub new_bytes: u64,
    pub new_chunks: u64,
    pub deduped_bytes: u64,
    /// Whether the last decided chunk was stored as new.
    last_new: bool,
}

/// A chunk waiting for its decision: hash, data, what the reader prepared of it, and the
/// block its data is a slice of (`None`: it owns its bytes).
#[derive(Debug)]
struct Queued {
    hash: MerkleHash,
    data: Bytes,
    prepared: Option<Prepared>,
    block: Option<BlockId>,
}

impl FileDedup {
    pub fn new() -> Self {
        Self::default()
    }

    /// Append a term, merging it into the previous one when it continues it (same
    /// xorb, contiguous chunk indices) and `merge` allows.
    fn add_term(&mut self, xorb: XorbRef, idx: u32, len: u64, merge: bool) {
        if merge
            && let Some(last) = self.terms.last_mut()
            && last.xorb == xorb
            && last.end == idx
        {
            last.end += 1;
            last.bytes += len;
            return;
        }
        self.terms.push(TermRec {
            xorb,
            start: idx,
            end: idx + 1,
            bytes: len,
        });
    }
}

/// The open xorb being filled.
#[derive(Debug)]
struct OpenXorb {
    slot: u32,
    data: Vec<Bytes>,
    /// Total length of `data`.
    bytes: u64,
    chunks: Vec<(MerkleHash, u32)>,
    prepared: Vec<Option<Prepared>>,
}

/// Session-wide dedup and packing state.
pub(crate) struct Session {
    params: DedupParams,
    /// New chunks placed in this session's xorbs: hash → (slot, index). First placement wins.
    session: HashMap<MerkleHash, (u32, u32)>,
    cache: std::sync::Arc<KnownIndex>,
    answers: KnownIndex,
    open: Option<OpenXorb>,
    next_slot: u32,
    /// Chunk count of each sealed slot.
    slot_lens: Vec<u32>,
    sealed: Vec<SealedXorb>,
    /// The block of the last decided chunk, if it was a slice of one.
    held: Option<HeldBlock>,
}

impl Session {
    pub fn new(params: DedupParams, cache: std::sync::Arc<KnownIndex>) -> Self {
        Session {
            params,
            session: HashMap::new(),
            cache,
            answers: KnownIndex::new(),
            open: None,
            next_slot: 0,
            slot_lens: Vec::new(),
            sealed: Vec::new(),
            held: None,
        }
    }

    /// Make the xorbs of a global dedup answer available to the chunks processed from
    /// now on.
    pub fn add_answer(&mut self, shard: &Shard) {
        self.answers.add_shard(shard);
    }

    /// Xorbs that filled up, in slot order; the caller hands them to the uploader.
    pub fn take_sealed(&mut self) -> Vec<SealedXorb> {
        std::mem::take(&mut self.sealed)
    }

    /// Seal the open xorb (at the end of the upload).
    pub fn seal_open(&mut self) {
        if self.open.as_ref().is_some_and(|o| !o.chunks.is_empty()) {
            self.copy_sparse_block();
            if let Some(h) = &mut self.held {
                // The next xorb's share of the block is judged on its own.
                (h.decided, h.new, h.first) = (0, 0, 0);
            }
        }
        if let Some(o) = self.open.take()
            && !o.chunks.is_empty()
        {
            debug_assert_eq!(self.slot_lens.len(), o.slot as usize);
            self.slot_lens.push(o.chunks.len() as u32);
            self.sealed.push(SealedXorb {
                slot: o.slot,
                data: o.data,
                chunks: o.chunks,
                prepared: o.prepared,
            });
        }
    }

    fn locate(&self, h: &MerkleHash) -> Option<Loc> {
        if let Some(&(slot, idx)) = self.session.get(h) {
            return Some(Loc {
                tier: Tier::Session,
                group: 0,
                xorb: XorbRef::Session(slot),
                idx,
            });
        }
        if let Some((group, x, idx)) = self.cache.find(h) {
            return Some(Loc {
                tier: Tier::Cache,
                group,
                xorb: XorbRef::Known(x),
                idx,
            });
        }
        if let Some((group, x, idx)) = self.answers.find(h) {
            return Some(Loc {
                tier: Tier::Answers,
                group,
                xorb: XorbRef::Known(x),
                idx,
            });
        }
        None
    }

    fn locate_in(&self, tier: Tier, group: usize, h: &MerkleHash) -> Option<(XorbRef, u32)> {
        match tier {
            Tier::Session => self.session.get(h).map(|&(s, i)| (XorbRef::Session(s), i)),
            Tier::Cache => self
                .cache
                .find_in_group(group, h)
                .map(|(x, i)| (XorbRef::Known(x), i)),
            Tier::Answers => self
                .answers
                .find_in_group(group, h)
                .map(|(x, i)| (XorbRef::Known(x), i)),
        }
    }

    /// Whether chunk `idx` is the last chunk of `x` (a sealed session xorb or a known one).
    fn is_last(&self, tier: Tier, x: XorbRef, idx: u32) -> bool {
        match (tier, x) {
            (Tier::Session, XorbRef::Session(s)) => {
                self.slot_lens.get(s as usize) == Some(&(idx + 1))
            }
            (Tier::Cache, XorbRef::Known(h)) => self.cache.is_last(&h, idx),
            (Tier::Answers, XorbRef::Known(h)) => self.answers.is_last(&h, idx),
            _ => false,
        }
    }

    /// Where `h` continues a run whose previous chunk was found at `prev`: in the same
    /// xorb (any index), or at index 0 of another xorb of the same tier and key group
    /// when `prev` was the last chunk of its xorb (content packed across two xorbs).
    fn continues(&self, prev: Loc, h: &MerkleHash) -> Option<Loc> {
        let (x, idx) = self.locate_in(prev.tier, prev.group, h)?;
        let ok = x == prev.xorb || (idx == 0 && self.is_last(prev.tier, prev.xorb, prev.idx));
        ok.then_some(Loc {
            xorb: x,
            idx,
            ..prev
        })
    }

    /// [`push_prepared`](Self::push_prepared) with nothing prepared.
    #[cfg(test)]
    pub fn push_chunk(&mut self, f: &mut FileDedup, hash: MerkleHash, data: Bytes) {
        self.push_prepared(f, hash, data, None, None);
    }

    /// Queue one chunk of the file (in file order), with its compressed form for its
    /// xorb if the reader made it (used if the chunk turns out new), and the block it is
    /// a slice of, if any.
    pub fn push_prepared(
        &mut self,
        f: &mut FileDedup,
        hash: MerkleHash,
        data: Bytes,
        prepared: Option<Prepared>,
        block: Option<BlockId>,
    ) {
        f.chunks.push((hash, data.len() as u64));
        f.pending.push_back(Queued {
            hash,
            data,
            prepared,
            block,
        });
    }

    /// Decide every queued chunk that can be decided; with `at_end` (no more chunks of
    /// this file will come) that is all of them.
    pub fn process(&mut self, f: &mut FileDedup, at_end: bool) {
        while let Some(q) = f.pending.front() {
            let head = q.hash;
            // 1. Continue the run in progress.
            if let Some(prev) = f.run {
                match self.continues(prev, &head) {
                    Some(loc) => {
                        let len = self.pop_deduplicated(f);
                        f.add_term(loc.xorb, loc.idx, len, true);
                        f.run = Some(loc);
                        continue;
                    }
                    None => f.run = None,
                }
            }
            // 2. A repeat of a chunk this file stored as new: its own term, as hf_xet does.
            if let Some(&(slot, idx)) = f.own_new.get(&head) {
                let len = self.pop_deduplicated(f);
                f.add_term(XorbRef::Session(slot), idx, len, false);
                continue;
            }
            // 3. The start of a dedup run: use it only if long enough.
            if let Some(loc) = self.locate(&head) {
                match self.run_is_long_enough(f, loc) {
                    None if !at_end => return, // need more look-ahead
                    None | Some(true) => {
                        // (None at the end: the run reaches the end of the file.)
                        f.run = Some(loc);
                        let len = self.pop_deduplicated(f);
                        f.add_term(loc.xorb, loc.idx, len, true);
                        continue;
                    }
                    Some(false) => {}
                }
            }
            // 4. New data.
            let q = f.pending.pop_front().expect("non-empty");
            self.add_new(f, q);
        }
    }

    /// Take the head of the queue, found stored elsewhere; returns its length.
    fn pop_deduplicated(&mut self, f: &mut FileDedup) -> u64 {
        let q = f.pending.pop_front().expect("non-empty");
        let len = q.data.len() as u64;
        f.deduped_bytes += len;
        f.last_new = false;
        if let Some(h) = self.track_block(q.block) {
            h.decided += len;
        }
        len
    }

    /// The chunk being decided comes from `block`: if that is not the block held so far,
    /// that one is done (its new chunks copied out if few), and `block` is held now.
    fn track_block(&mut self, block: Option<BlockId>) -> Option<&mut HeldBlock> {
        if self.held.as_ref().map(|h| h.block) != block {
            self.copy_sparse_block();
            let first = self.open.as_ref().map_or(0, |o| o.data.len());
            self.held = block.map(|block| HeldBlock {
                block,
                decided: 0,
                new: 0,
                first,
            });
        }
        self.held.as_mut()
    }

    /// Copy the held block's new chunks out of it if too little of it was new for
    /// them to keep the whole block alive until their xorb is built.
    fn copy_sparse_block(&mut self) {
        let (Some(h), Some(o)) = (&self.held, &mut self.open) else {
            return;
        };
        let (num, den) = KEEP_SLICES_IF_NEW;
        if h.new * den < h.decided * num {
            for d in o.data.iter_mut().skip(h.first) {
                *d = Bytes::copy_from_slice(d);
            }
        }
    }

    /// Whether the run of queued chunks starting at the head (found at `loc`, each next
    /// chunk [`continues`](Self::continues) it) is to be used: `Some(true)` if it reaches
    /// the minimum, or ends short but cannot add a term (the chunk before it was not
    /// stored as new and the chunk after it is known); `Some(false)` if it ends short
    /// otherwise; `None` if every queued chunk is in the run and it is still short
    /// (undecided until more chunks come or the file ends).
    fn run_is_long_enough(&self, f: &FileDedup, loc: Loc) -> Option<bool> {
        let mut n = 0usize;
        let mut bytes = 0u64;
        let mut prev = loc;
        for Queued { hash: h, data, .. } in &f.pending {
            if n > 0 {
                match self.continues(prev, h) {
                    Some(l) => prev = l,
                    // A short run is still used when it cannot add a term: nothing new
                    // before it, and the chunk after it is deduplicated too.
                    None => return Some(!f.last_new && self.is_known(f, h)),
                }
            }
            n += 1;
            bytes += data.len() as u64;
            if n >= self.params.min_run_chunks || bytes >= self.params.min_run_bytes {
                return Some(true);
            }
        }
        None
    }

    /// Whether `h` would be deduplicated if it started a run (found anywhere, or a
    /// repeat of this file's own new chunk).
    fn is_known(&self, f: &FileDedup, h: &MerkleHash) -> bool {
        f.own_new.contains_key(h) || self.locate(h).is_some()
    }

    fn add_new(&mut self, f: &mut FileDedup, q: Queued) {
        let Queued {
            hash,
            data,
            prepared,
            block,
        } = q;
        let len = data.len();
        self.track_block(block);
        // The smaller limits of the first xorbs apply only where a file starts (its
        // first chunk is new): every early boundary is then a chunk global dedup queries,
        // so a later upload from another client finds the next xorb as it would have
        // found the data inside one.
        let starts_file = f.terms.is_empty();
        let fits = self.open.as_ref().is_some_and(|o| {
            let max_bytes = if starts_file {
                self.params.slot_max_bytes(o.slot)
            } else {
                self.params.xorb_max_bytes
            };
            o.chunks.len() < self.params.xorb_max_chunks && o.bytes + len as u64 <= max_bytes
        });
        if !fits {
            self.seal_open();
            self.open = Some(OpenXorb {
                slot: self.next_slot,
                data: Vec::new(),
                bytes: 0,
                chunks: Vec::new(),
                prepared: Vec::new(),
            });
            self.next_slot += 1;
        }
        let o = self.open.as_mut().expect("opened above");
        let idx = o.chunks.len() as u32;
        o.bytes += len as u64;
        // Kept as a slice of its block for now; copied out when the block is done if
        // little of it was new (`copy_sparse_block`).
        o.data.push(data);
        if let Some(h) = &mut self.held {
            h.decided += len as u64;
            h.new += len as u64;
        }
        o.chunks.push((hash, len as u32));
        if prepared.is_some() {
            o.prepared.resize_with(idx as usize, || None);
            o.prepared.push(prepared);
        }
        let slot = o.slot;
        self.session.entry(hash).or_insert((slot, idx));
        f.own_new.entry(hash).or_insert((slot, idx));
        f.new_bytes += len as u64;
        f.new_chunks += 1;
        f.last_new = true;
        f.add_term(XorbRef::Session(slot), idx, len as u64, true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use xet_shard::CasInfo;

    fn params() -> DedupParams {
        DedupParams {
            min_run_chunks: 8,
            min_run_bytes: 1 << 20,
            xorb_max_chunks: 8192,
            xorb_max_bytes: 64 << 20,
            xorb_first_bytes: 64 << 20,
        }
    }

    /// A distinct chunk of `len` bytes for id `i`.
    fn chunk(i: u32, len: usize) -> (MerkleHash, Bytes) {
        let mut v = vec![0u8; len];
        v[..4].copy_from_slice(&i.to_le_bytes());
        let b = Bytes::from(v);
        (xet_hash::chunk_hash(&b), b)
    }

    fn run_file(s: &mut Session, chunks: &[(MerkleHash, Bytes)]) -> FileDedup {
        let mut f = FileDedup::new();
        for (h, d) in chunks {
            s.push_chunk(&mut f, *h, d.clone());
            s.process(&mut f, false);
        }
        s.process(&mut f, true);
        assert!(f.pending.is_empty());
        f
    }

    fn known_shard(
        xorb: MerkleHash,
        chunks: &[(MerkleHash, Bytes)],
        key: Option<MerkleHash>,
    ) -> Shard {
        let entries: Vec<(MerkleHash, u64)> =
            chunks.iter().map(|(h, d)| (*h, d.len() as u64)).collect();
        let cas = CasInfo::from_chunks(xorb, &entries, 0).unwrap();
        let shard = Shard::new(vec![], vec![cas]);
        shard
            .into_stored(xet_shard::StoredOptions::dedup_answer(key, 0, 0))
            .unwrap()
    }

    fn term(x: XorbRef, r: std::ops::Range<u32>, bytes: u64) -> TermRec {
        TermRec {
            xorb: x,
            start: r.start,
            end: r.end,
            bytes,
        }
    }

    /// `n` chunks of `len` bytes, slices of one block of pseudo-random bytes.
    fn block_of(n: usize, len: usize, seed: u64) -> (Bytes, Vec<(MerkleHash, Bytes)>) {
        let block = Bytes::from(xet_testdata::generate(
            xet_testdata::Kind::Random,
            n * len,
            seed,
        ));
        let chunks = (0..n)
            .map(|i| block.slice(i * len..(i + 1) * len))
            .map(|d| (xet_hash::chunk_hash(&d), d))
            .collect();
        (block, chunks)
    }

    /// Decide `chunks` as one file whose chunks are slices of `block`; its xorb's data.
    fn one_file(s: &mut Session, chunks: &[(MerkleHash, Bytes)], block: u64) -> Vec<Bytes> {
        let mut f = FileDedup::new();
        for (h, d) in chunks {
            s.push_prepared(&mut f, *h, d.clone(), None, Some(BlockId(block)));
        }
        s.process(&mut f, true);
        s.seal_open();
        s.take_sealed().into_iter().flat_map(|x| x.data).collect()
    }

    /// New chunks stay slices of their read block where most of the block is new, and
    /// are copied out of it where little is (a slice would hold the whole block until
    /// the xorb is built); chunks that own their bytes are kept as they are.
    #[test]
    fn new_chunks_are_copied_out_of_blocks_that_are_mostly_stored() {
        let mut s = Session::new(params(), Arc::new(KnownIndex::new()));
        let (first, chunks) = block_of(16, 4096, 1);
        let held = one_file(&mut s, &chunks, 1);
        assert_eq!(held.len(), 16);
        for (h, (_, d)) in held.iter().zip(&chunks) {
            assert_eq!((h, h.as_ptr()), (d, d.as_ptr()), "a slice of the new block");
        }
        drop(first);

        // 12 chunks stored by the first file and one new one: the new one is copied.
        let mut second = chunks[..12]
            .iter()
            .flat_map(|(_, d)| d.to_vec())
            .collect::<Vec<_>>();
        second.extend(xet_testdata::generate(xet_testdata::Kind::Random, 4096, 2));
        let second = Bytes::from(second);
        let chunks2: Vec<_> = (0..13)
            .map(|i| second.slice(i * 4096..(i + 1) * 4096))
            .map(|d| (xet_hash::chunk_hash(&d), d))
            .collect();
        let held = one_file(&mut s, &chunks2, 2);
        assert_eq!(held, vec![chunks2[12].1.clone()]);
        assert!(!second.as_ptr_range().contains(&held[0].as_ptr()), "copied");

        // A chunk owning its bytes (one that spanned two blocks) is never copied.
        let own = Bytes::from(xet_testdata::generate(xet_testdata::Kind::Random, 5000, 3));
        let mut f = FileDedup::new();
        s.push_chunk(&mut f, xet_hash::chunk_hash(&own), own.clone());
        s.process(&mut f, true);
        s.seal_open();
        let held = &s.take_sealed()[0].data[0];
        assert_eq!((held, held.as_ptr()), (&own, own.as_ptr()));
    }

    #[test]
    fn new_chunks_merge_and_repeats_get_their_own_terms() {
        let mut s = Session::new(params(), Arc::new(KnownIndex::new()));
        let (a, b, c) = (chunk(1, 100), chunk(2, 100), chunk(3, 100));
        // A B B C: as hf_xet, [0,2) [1,2)... then C extends the repeat's term: [1,3).
        let f = run_file(&mut s, &[a.clone(), b.clone(), b.clone(), c.clone()]);
        let x = XorbRef::Session(0);
        assert_eq!(f.terms, vec![term(x, 0..2, 200), term(x, 1..3, 200)]);
        assert_eq!(f.new_bytes, 300);
        assert_eq!(f.deduped_bytes, 100);
        // Eight identical chunks: one stored chunk, eight terms.
        let z = chunk(9, 64);
        let f = run_file(&mut s, &vec![z.clone(); 8]);
        assert_eq!(f.terms.len(), 8);
        assert!(f.terms.iter().all(|t| t.end - t.start == 1 && t.start == 3));
    }

    #[test]
    fn short_runs_are_not_used_unless_they_reach_the_end() {
        let base: Vec<_> = (0..20).map(|i| chunk(i, 1000)).collect();
        let x = MerkleHash::from_bytes([7; 32]);
        let cache = {
            let mut k = KnownIndex::new();
            k.add_shard(&known_shard(x, &base, None));
            Arc::new(k)
        };
        let fresh = |i: u32| chunk(1000 + i, 1000);

        // 5 known chunks between new ones: too short, stored again.
        let mut s = Session::new(params(), cache.clone());
        let mut input = vec![fresh(0)];
        input.extend(base[3..8].iter().cloned());
        input.push(fresh(1));
        let f = run_file(&mut s, &input);
        assert_eq!(f.new_bytes, 7000);
        assert_eq!(f.terms, vec![term(XorbRef::Session(0), 0..7, 7000)]);

        // 8 known chunks: used.
        let mut s = Session::new(params(), cache.clone());
        let mut input = vec![fresh(0)];
        input.extend(base[3..11].iter().cloned());
        input.push(fresh(1));
        let f = run_file(&mut s, &input);
        assert_eq!(f.new_bytes, 2000);
        let sx = XorbRef::Session(0);
        assert_eq!(
            f.terms,
            vec![
                term(sx, 0..1, 1000),
                term(XorbRef::Known(x), 3..11, 8000),
                term(sx, 1..2, 1000)
            ]
        );

        // 3 known chunks at the end of the file: used.
        let mut s = Session::new(params(), cache.clone());
        let mut input = vec![fresh(0), fresh(1)];
        input.extend(base[17..20].iter().cloned());
        let f = run_file(&mut s, &input);
        assert_eq!(f.new_bytes, 2000);
        assert_eq!(f.terms.last(), Some(&term(XorbRef::Known(x), 17..20, 3000)));

        // A whole file of 2 known chunks: used.
        let mut s = Session::new(params(), cache.clone());
        let f = run_file(&mut s, &base[4..6]);
        assert_eq!(f.new_bytes, 0);
        assert_eq!(f.terms, vec![term(XorbRef::Known(x), 4..6, 2000)]);

        // 3 known chunks at the start, then new: not used.
        let mut s = Session::new(params(), cache.clone());
        let mut input: Vec<_> = base[0..3].to_vec();
        input.push(fresh(5));
        let f = run_file(&mut s, &input);
        assert_eq!(f.new_bytes, 4000);

        // A short run that cannot add a term is used: nothing new before it and the
        // chunk after it deduplicated too (here: in another xorb).
        let other: Vec<_> = (100..120).map(|i| chunk(i, 1000)).collect();
        let y = MerkleHash::from_bytes([9; 32]);
        let mut k = KnownIndex::new();
        k.add_shard(&known_shard(x, &base, None));
        k.add_shard(&known_shard(y, &other, None));
        let two = Arc::new(k);
        let mut input: Vec<_> = other[0..3].to_vec();
        input.extend(base[5..15].iter().cloned());
        input.push(fresh(7));
        let f = run_file(&mut Session::new(params(), two.clone()), &input);
        assert_eq!(f.new_bytes, 1000);
        assert_eq!(f.terms[0], term(XorbRef::Known(y), 0..3, 3000));
        let mut input: Vec<_> = base[0..10].to_vec();
        input.extend(other[4..6].iter().cloned());
        input.extend(base[12..20].iter().cloned());
        input.push(fresh(8));
        let f = run_file(&mut Session::new(params(), two.clone()), &input);
        assert_eq!(f.new_bytes, 1000);
        assert_eq!(f.terms.len(), 4);
        // ... but not after new data: it is stored again, with the new chunk before it.
        let mut input = vec![fresh(9)];
        input.extend(other[0..3].iter().cloned());
        input.extend(base[5..15].iter().cloned());
        let f = run_file(&mut Session::new(params(), two), &input);
        assert_eq!(f.new_bytes, 4000);
        assert_eq!(f.terms.len(), 2);

        // 1 MiB in fewer than 8 chunks is long enough.
        let big: Vec<_> = (0..4).map(|i| chunk(500 + i, 300 << 10)).collect();
        let y = MerkleHash::from_bytes([8; 32]);
        let mut k = KnownIndex::new();
        k.add_shard(&known_shard(y, &big, None));
        let mut s = Session::new(params(), Arc::new(k));
        let mut input = big.clone();
        input.push(fresh(9));
        let f = run_file(&mut s, &input);
        assert_eq!(f.new_bytes, 1000);
        assert_eq!(f.terms[0], term(XorbRef::Known(y), 0..4, 4 * (300 << 10)));
    }

    #[test]
    fn keyed_answers_match() {
        let base: Vec<_> = (0..3).map(|i| chunk(i, 1000)).collect();
        let x = MerkleHash::from_bytes([3; 32]);
        let key = MerkleHash::from_bytes([0x5a; 32]);
        let shard = known_shard(x, &base, Some(key));
        assert_ne!(shard.cas[0].chunks[0].hash, base[0].0, "stored keyed");
        let mut s = Session::new(params(), Arc::new(KnownIndex::new()));
        s.add_answer(&shard);
        let f = run_file(&mut s, &base);
        assert_eq!(f.new_bytes, 0);
        assert_eq!(f.terms, vec![term(XorbRef::Known(x), 0..3, 3000)]);
    }

    #[test]
    fn session_dedup_across_files_and_xorb_limits() {
        let p = DedupParams {
            xorb_max_chunks: 4,
            ..params()
        };
        let mut s = Session::new(p, Arc::new(KnownIndex::new()));
        let data: Vec<_> = (0..10).map(|i| chunk(i, 10)).collect();
        let f1 = run_file(&mut s, &data);
        assert_eq!(
            f1.terms,
            vec![
                term(XorbRef::Session(0), 0..4, 40),
                term(XorbRef::Session(1), 0..4, 40),
                term(XorbRef::Session(2), 0..2, 20)
            ]
        );
        let sealed = s.take_sealed();
        assert_eq!(sealed.iter().map(|x| x.slot).collect::<Vec<_>>(), [0, 1]);
        // Same content again: the whole file is a run (it reaches the end).
        let f2 = run_file(&mut s, &data);
        assert_eq!(f2.new_bytes, 0);
        assert_eq!(f2.terms, f1.terms);
        s.seal_open();
        assert_eq!(s.take_sealed().len(), 1);
    }

    #[test]
    fn first_xorbs_are_smaller() {
        let p = DedupParams {
            xorb_first_bytes: 4 << 20,
            ..params()
        };
        let limits: Vec<u64> = (0..7).map(|s| p.slot_max_bytes(s) >> 20).collect();
        assert_eq!(limits, [4, 8, 16, 32, 64, 64, 64]);
        assert_eq!(p.slot_max_bytes(u32::MAX), 64 << 20);
        let p = DedupParams {
            xorb_first_bytes: 4 << 10,
            xorb_max_bytes: 16 << 10,
            ..params()
        };
        let data: Vec<_> = (0..40).map(|i| chunk(i, 1024)).collect();
        let sealed_sizes = |s: &mut Session| -> Vec<usize> {
            s.seal_open();
            s.take_sealed().iter().map(|x| x.chunks.len()).collect()
        };
        // 40 files of one 1 KiB chunk, a first xorb of 4 KiB: 4, 8, 16, then the rest.
        let mut s = Session::new(p, Arc::new(KnownIndex::new()));
        for c in &data {
            run_file(&mut s, std::slice::from_ref(c));
        }
        assert_eq!(sealed_sizes(&mut s), [4, 8, 16, 12]);
        // Inside a file only the full limit applies: early boundaries are file starts.
        let mut s = Session::new(p, Arc::new(KnownIndex::new()));
        run_file(&mut s, &data);
        assert_eq!(sealed_sizes(&mut s), [16, 16, 8]);
        // Two files of 10 chunks: the first xorb ends where the second file starts.
        let mut s = Session::new(p, Arc::new(KnownIndex::new()));
        run_file(&mut s, &data[..10]);
        run_file(&mut s, &data[10..20]);
        assert_eq!(sealed_sizes(&mut s), [10, 10]);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig::with_cases(200))]
        /// Whatever the input (repeats, known xorbs, xorb limits, min-run settings), the
        /// terms of every file describe exactly its chunk sequence, their sizes sum to the
        /// file size, and every xorb respects the limits.
        #[test]
        fn terms_reassemble_every_file(
            files in proptest::collection::vec(proptest::collection::vec((0u32..40, 1usize..3000), 0..60), 1..5),
            known in proptest::collection::vec(0u32..40, 0..30),
            max_chunks in 1usize..12,
            max_bytes in 3000u64..20_000,
            min_run in 1usize..10,
            first_bytes in 2000u64..20_000,
        ) {
            let p = DedupParams { min_run_chunks: min_run, min_run_bytes: 8000, xorb_max_chunks: max_chunks, xorb_max_bytes: max_bytes, xorb_first_bytes: first_bytes };
            // A chunk id always has the same length, as identical data would.
            let len_of = |id: u32, len: usize| -> usize { if id.is_multiple_of(2) { 1000 + id as usize * 10 } else { len.max(1) } };
            let mut lens = HashMap::new();
            let mut mk = |id: u32, len: usize| {
                let l = *lens.entry(id).or_insert_with(|| len_of(id, len));
                chunk(id, l.max(4))
            };
            let known_chunks: Vec<_> = known.iter().map(|&id| mk(id, 0)).collect();
            let kx = MerkleHash::from_bytes([0xAB; 32]);
            let mut k = KnownIndex::new();
            if !known_chunks.is_empty() {
                k.add_shard(&known_shard(kx, &known_chunks, None));
            }
            let mut s = Session::new(p, Arc::new(k));
            let mut results = Vec::new();
            let mut sealed = Vec::new();
            for f in &files {
                let input: Vec<_> = f.iter().map(|&(id, len)| mk(id, len)).collect();
                let fd = run_file(&mut s, &input);
                sealed.extend(s.take_sealed());
                results.push((input, fd));
            }
            s.seal_open();
            sealed.extend(s.take_sealed());
            for x in &sealed {
                proptest::prop_assert!(x.chunks.len() <= max_chunks);
                let bytes: u64 = x.data.iter().map(|d| d.len() as u64).sum();
                proptest::prop_assert!(bytes <= max_bytes);
                proptest::prop_assert_eq!(bytes, x.chunks.iter().map(|c| c.1 as u64).sum::<u64>());
                proptest::prop_assert_eq!(x.data.len(), x.chunks.len());
            }
            // Uploading the same files again, with everything in the local cache,
            // stores nothing new.
            let mut again = KnownIndex::new();
            let mut cas: Vec<CasInfo> = sealed
                .iter()
                .map(|x| {
                    let e: Vec<_> = x.chunks.iter().map(|&(h, l)| (h, l as u64)).collect();
                    CasInfo::from_chunks(MerkleHash::from_bytes([x.slot as u8 + 1; 32]), &e, 0).unwrap()
                })
                .collect();
            if !known_chunks.is_empty() {
                cas.push(known_shard(kx, &known_chunks, None).cas.remove(0));
            }
            again.add_shard(&Shard::new(vec![], cas));
            let mut s2 = Session::new(p, Arc::new(again));
            for (input, _) in &results {
                let fd = run_file(&mut s2, input);
                proptest::prop_assert_eq!(fd.new_bytes, 0);
            }
            let slot_chunks: HashMap<u32, Vec<(MerkleHash, u64)>> =
                sealed.iter().map(|x| (x.slot, x.chunks.iter().map(|&(h, l)| (h, l as u64)).collect())).collect();
            let known_list: Vec<(MerkleHash, u64)> = known_chunks.iter().map(|(h, d)| (*h, d.len() as u64)).collect();
            for (input, fd) in &results {
                let size: u64 = input.iter().map(|c| c.1.len() as u64).sum();
                proptest::prop_assert_eq!(fd.terms.iter().map(|t| t.bytes).sum::<u64>(), size);
                proptest::prop_assert_eq!(fd.new_bytes + fd.deduped_bytes, size);
                let mut rebuilt = Vec::new();
                for t in &fd.terms {
                    let list = match t.xorb {
                        XorbRef::Session(slot) => &slot_chunks[&slot],
                        XorbRef::Known(x) => { proptest::prop_assert_eq!(x, kx); &known_list }
                    };
                    let part = &list[t.start as usize..t.end as usize];
                    proptest::prop_assert_eq!(part.iter().map(|c| c.1).sum::<u64>(), t.bytes);
                    rebuilt.extend_from_slice(part);
                }
                let want: Vec<_> = input.iter().map(|(h, d)| (*h, d.len() as u64)).collect();
                proptest::prop_assert_eq!(rebuilt, want);
            }
        }
    }
}
