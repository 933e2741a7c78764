//! Cutting an input that arrives in consecutive blocks into chunks, for the upload reader
//! and the hash scan alike: the gear-hash matches of each block (found by the caller, from
//! [`BlockCutter::tail`] and the block, on whatever threads it likes) are resolved into
//! boundaries in order. A chunk that lies inside a block is a range of it (the caller
//! decides whether to copy it); only the chunk that began in earlier blocks is assembled.

use std::ops::Range;

use xet_chunk::{HASH_WINDOW_SIZE, MAX_CHUNK_SIZE, MatchResolver};

pub(crate) struct BlockCutter {
    resolver: MatchResolver,
    /// The last (up to) 63 bytes seen: they complete the windows that straddle into the
    /// next block.
    tail: Vec<u8>,
    /// Bytes of the open chunk that arrived in earlier blocks.
    pending: Vec<u8>,
    seen: u64,
}

/// The chunks one block closes.
pub(crate) struct Cut {
    /// The chunk that began in earlier blocks and ends in this one, assembled.
    pub spanning: Option<Vec<u8>>,
    /// Chunks lying wholly inside the block, as ranges of it.
    pub inside: Vec<Range<usize>>,
}

impl BlockCutter {
    pub fn new() -> Self {
        BlockCutter {
            resolver: MatchResolver::new(),
            tail: Vec::with_capacity(2 * HASH_WINDOW_SIZE),
            pending: Vec::new(),
            seen: 0,
        }
    }

    /// The bytes just before the next block (for `xet_chunk::find_matches_after`).
    pub fn tail(&self) -> &[u8] {
        &self.tail
    }

    /// Bytes seen so far: the offset of the next block in the input.
    pub fn seen(&self) -> u64 {
        self.seen
    }

    /// Cut the next `block`, given all its matches as offsets in the input, ascending.
    pub fn cut(&mut self, block: &[u8], found: impl IntoIterator<Item = u64>) -> Cut {
        let base = self.seen;
        self.seen += block.len() as u64;
        let mut start = self.resolver.open_chunk_start();
        let mut ends = Vec::new();
        self.resolver.push(found, self.seen, &mut ends);
        let mut spanning = None;
        let mut inside = Vec::with_capacity(ends.len());
        for &end in &ends {
            let e = (end - base) as usize;
            if start < base {
                // Only the first end can close a chunk that began before this block.
                self.pending.extend_from_slice(&block[..e]);
                spanning = Some(std::mem::take(&mut self.pending));
            } else {
                inside.push((start - base) as usize..e);
            }
            start = end;
        }
        // The open chunk's bytes in this block wait for the block that closes it.
        let rest = &block[(start.max(base) - base) as usize..];
        if !rest.is_empty() {
            if self.pending.capacity() == 0 {
                self.pending.reserve(MAX_CHUNK_SIZE);
            }
            self.pending.extend_from_slice(rest);
        }
        let keep = (HASH_WINDOW_SIZE - 1).min(block.len());
        self.tail.extend_from_slice(&block[block.len() - keep..]);
        let excess = self.tail.len().saturating_sub(HASH_WINDOW_SIZE - 1);
        self.tail.drain(..excess);
        Cut { spanning, inside }
    }

    /// End of input: the chunks still open (at most two: a forced cut and the end, which
    /// could not be decided without knowing where the input ends).
    pub fn finish(mut self) -> Vec<Vec<u8>> {
        let mut ends = Vec::new();
        let mut start = self.resolver.open_chunk_start();
        self.resolver.finish(self.seen, &mut ends);
        let mut out = Vec::with_capacity(ends.len());
        for end in ends {
            let rest = self.pending.split_off((end - start) as usize);
            out.push(std::mem::replace(&mut self.pending, rest));
            start = end;
        }
        out
    }
}
