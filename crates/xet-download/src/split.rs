//! A large xorb range fetched as several sub-range requests at once.
//!
//! One request moves at most one TCP window per round trip, so a link whose
//! bandwidth-delay product is several windows is filled only by several requests at
//! once: a 1 GiB file is about 17 ranges, and the last of them would otherwise finish
//! alone at one window per round trip. A range of more than two [`PART_BYTES`] is cut
//! into equal parts of at most that size. The fetch's own slot and memory take the parts
//! in order, each streamed straight to the decoder; while a fetch slot and memory for a
//! whole part are free, up to [`PARTS_IN_FLIGHT`]` - 1` later parts are fetched ahead
//! into buffers of their own, each holding its part until its turn. The decoder gets the
//! parts' bytes concatenated in order, the one range it would have got from a single
//! request: chunk boundaries matter only for the range as a whole, never for a part.
//!
//! Parts fetched ahead only use what is spare (nothing waits for them), so a download
//! with enough ranges to fill every slot, or a tight memory budget, runs as before; a
//! part that could not start ahead is fetched in its turn with the fetch's own slot.
//! Each part counts as a fetch for the adaptive limit (its slot, its bytes, its
//! retries), and finding no slot free counts as demand for more.

use std::sync::Arc;

use bytes::Bytes;
use tokio::sync::{OwnedSemaphorePermit, mpsc};
use xet_cas::{ByteRange, ChunkRange, XorbFetch};
use xet_hash::MerkleHash;

use crate::ctx::Shared;
use crate::error::DownloadError;
use crate::fetch::{self, Pieces, Pumped};
use crate::limit::Slot;

/// The most bytes one part request asks for.
pub(crate) const PART_BYTES: u64 = 8 << 20;

/// Parts of one range in flight at once (the fetch's own and those fetched ahead).
pub(crate) const PARTS_IN_FLIGHT: usize = 8;

/// The parts of `bytes`: itself if at most two parts long, else equal parts of at
/// most `part` bytes, in order, covering it exactly.
pub(crate) fn parts(bytes: ByteRange, part: u64) -> Vec<ByteRange> {
    let len = bytes.len();
    let part = part.max(1);
    if len <= part.saturating_mul(2) {
        return vec![bytes];
    }
    let n = len.div_ceil(part);
    let each = len.div_ceil(n);
    (0..n)
        .map(|i| {
            let start = bytes.start + i * each;
            ByteRange::new(start, (start + each).min(bytes.end))
        })
        .filter(|r| !r.is_empty())
        .collect()
}

/// Counts the bytes of a fetch as they arrive (the file's statistics).
pub(crate) type Counter = Arc<dyn Fn(u64) + Send + Sync>;

/// A part being fetched ahead of its turn on a task of its own.
struct Ahead {
    rx: mpsc::UnboundedReceiver<Bytes>,
    task: tokio::task::JoinHandle<Result<Pumped, DownloadError>>,
    /// The part's memory, held until its bytes are handed to the decoder.
    _memory: OwnedSemaphorePermit,
}

impl Drop for Ahead {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// What the parts of one fetch share.
pub(crate) struct Split<'a> {
    pub shared: &'a Arc<Shared>,
    pub file: MerkleHash,
    pub segment: ByteRange,
    pub fetch: &'a XorbFetch,
    pub needed: ChunkRange,
    pub counter: Counter,
}

impl Split<'_> {
    fn part(&self, bytes: ByteRange) -> XorbFetch {
        XorbFetch {
            bytes,
            ..self.fetch.clone()
        }
    }

    /// Fetch `ranges` (the parts of the fetch, in order) into `tx`: each in its turn
    /// with `own` (the fetch's slot), or from its buffer if it was fetched ahead.
    pub(crate) async fn pump(
        &self,
        ranges: &[ByteRange],
        tx: &mpsc::Sender<Bytes>,
        own: &mut Slot,
    ) -> Result<Pumped, DownloadError> {
        let mut ahead: Vec<Option<Ahead>> = ranges.iter().map(|_| None).collect();
        for (turn, &range) in ranges.iter().enumerate() {
            let end = (turn + PARTS_IN_FLIGHT).min(ranges.len());
            for later in turn + 1..end {
                if ahead[later].is_none() {
                    match self.start_ahead(ranges[later]) {
                        Some(a) => ahead[later] = Some(a),
                        // In order: a later part does not start before an earlier one.
                        None => break,
                    }
                }
            }
            let pumped = match ahead[turn].take() {
                Some(a) => forward(a, tx).await?,
                None => {
                    let counter = &self.counter;
                    let on_piece = |p: &Bytes| {
                        counter(p.len() as u64);
                        own.delivered(p.len() as u64);
                    };
                    let part = self.part(range);
                    let shared = self.shared;
                    fetch::pump_range(
                        shared,
                        self.file,
                        self.segment,
                        part,
                        self.needed,
                        Pieces::Decoder(tx),
                        on_piece,
                    )
                    .await?
                }
            };
            if pumped == Pumped::DecoderGone {
                return Ok(pumped);
            }
        }
        Ok(Pumped::Complete)
    }

    /// Start fetching the part `range` ahead of its turn, if memory for all of it and a
    /// fetch slot are free now.
    fn start_ahead(&self, range: ByteRange) -> Option<Ahead> {
        let memory = self.shared.memory.try_reserve(range.len())?;
        let mut slot = self.shared.fetches.try_acquire()?;
        let (btx, rx) = mpsc::unbounded_channel();
        let shared = self.shared.clone();
        let (file, segment, needed) = (self.file, self.segment, self.needed);
        let part = self.part(range);
        let counter = self.counter.clone();
        let task = tokio::spawn(async move {
            let on_piece = |p: &Bytes| {
                counter(p.len() as u64);
                slot.delivered(p.len() as u64);
            };
            fetch::pump_range(
                &shared,
                file,
                segment,
                part,
                needed,
                Pieces::Buffer(&btx),
                on_piece,
            )
            .await
        });
        Some(Ahead {
            rx,
            task,
            _memory: memory,
        })
    }
}

/// Hand the pieces of a part fetched ahead to the decoder as they are there, then its
/// outcome.
async fn forward(mut a: Ahead, tx: &mpsc::Sender<Bytes>) -> Result<Pumped, DownloadError> {
    while let Some(piece) = a.rx.recv().await {
        if tx.send(piece).await.is_err() {
            return Ok(Pumped::DecoderGone);
        }
    }
    // The sender is gone: the task has ended.
    match (&mut a.task).await {
        Ok(r) => r,
        Err(e) => Err(DownloadError::task("fetching a part of a range", e)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn covers_exactly(bytes: ByteRange, parts: &[ByteRange]) -> bool {
        parts.first().map(|p| p.start) == Some(bytes.start)
            && parts.last().map(|p| p.end) == Some(bytes.end)
            && parts.windows(2).all(|w| w[0].end == w[1].start)
            && parts.iter().all(|p| !p.is_empty())
    }

    #[test]
    fn small_ranges_stay_whole() {
        let r = ByteRange::new(100, 100 + 2 * PART_BYTES);
        assert_eq!(parts(r, PART_BYTES), vec![r]);
        let r = ByteRange::new(0, 1);
        assert_eq!(parts(r, PART_BYTES), vec![r]);
    }

    #[test]
    fn large_ranges_are_cut_into_equal_parts_covering_them() {
        // A 64 MiB xorb: eight parts of 8 MiB.
        let r = ByteRange::new(0, 64 << 20);
        let p = parts(r, PART_BYTES);
        assert_eq!(p.len(), 8);
        assert!(p.iter().all(|p| p.len() == PART_BYTES));
        assert!(covers_exactly(r, &p));
        // Just over two parts: three parts, none over the part size.
        for (start, len) in [
            (7, 2 * PART_BYTES + 1),
            (3, 61_234_567),
            (0, 3 * PART_BYTES - 1),
        ] {
            let r = ByteRange::new(start, start + len);
            let p = parts(r, PART_BYTES);
            assert!(covers_exactly(r, &p), "{p:?}");
            assert!(p.iter().all(|p| p.len() <= PART_BYTES), "{p:?}");
            assert_eq!(p.len() as u64, len.div_ceil(PART_BYTES), "{p:?}");
        }
    }
}
