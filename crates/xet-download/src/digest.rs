//! The sha256 a caller expects of a whole file ([`crate::DownloadRequest::with_sha256`]),
//! computed from the bytes as they are written where they arrive in order, and from the
//! part file for the rest.
//!
//! Writes land out of order (fetches run in parallel), and sha256 must see the bytes
//! in order. Whichever writer brings the bytes at the hashed frontier hashes them
//! (outside the lock), then the bytes held for what follows. Bytes written ahead of the
//! frontier are copied and held, up to [`HELD_MAX`] per file and [`HELD_TOTAL_MAX`]
//! across the files of a download call; terms resumed from an earlier run are read
//! from the part when the frontier reaches them. A write that does not fit (or
//! overlaps what came before) ends the in-order hashing: from there the part is read
//! back once every write has landed ([`InOrderSha256::finish`]). So the result never
//! depends on the order of arrival, only the cost does.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use sha2::{Digest as _, Sha256};

use xet_hash::hex::encode as hex;
use xet_mmap::direct::read_buffered;

use crate::sync::lock;

/// Bytes written ahead of the frontier that one file may hold in memory: enough for a
/// small file whose terms land out of order. A large file is not worth more: with the
/// default fetch limits its writes run hundreds of MiB ahead of the frontier, and
/// holding copies costs more CPU than the direct read-back (see docs/BENCHMARKS.md).
pub(crate) const HELD_MAX: u64 = 8 << 20;

/// Bytes held across all files of one download call (64 small files run at once).
pub(crate) const HELD_TOTAL_MAX: u64 = 32 << 20;

/// What the files of one download call hold, against [`HELD_TOTAL_MAX`].
#[derive(Default)]
pub(crate) struct HeldBytes(AtomicU64);

impl HeldBytes {
    /// Count `n` more bytes held, if they fit.
    fn try_take(&self, n: u64) -> bool {
        self.0
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |t| {
                (t + n <= HELD_TOTAL_MAX).then_some(t + n)
            })
            .is_ok()
    }

    fn give(&self, n: u64) {
        self.0.fetch_sub(n, Ordering::AcqRel);
    }
}

/// The running sha256 of one file's output, `len` bytes.
pub(crate) struct InOrderSha256 {
    want: [u8; 32],
    len: u64,
    state: Mutex<State>,
    /// The download call's count of held bytes.
    pool: Arc<HeldBytes>,
}

struct State {
    /// `None` while a writer is hashing outside the lock.
    hasher: Option<Sha256>,
    /// Bytes before this are hashed, or claimed by the writer hashing them.
    next: u64,
    /// Bytes written ahead of `next`, copied, by offset.
    held: BTreeMap<u64, Vec<u8>>,
    held_bytes: u64,
    /// Spans already in the part (resumed terms), by offset: read when `next` gets there.
    on_disk: BTreeMap<u64, u64>,
    /// Set when a write did not fit: nothing more is hashed on the way, and the part
    /// is read back from `next` at the end.
    gave_up: bool,
    /// Most bytes held at once, for the log.
    held_peak: u64,
}

/// What [`InOrderSha256::finish`] found, when it is not what was expected.
#[derive(Debug)]
pub(crate) struct Mismatch {
    pub got: String,
    pub want: String,
}

impl InOrderSha256 {
    /// For an output of `len` bytes whose spans `on_disk` (offset, length) are already
    /// in the part; held bytes count in `pool`.
    pub fn new(
        want: [u8; 32],
        len: u64,
        on_disk: impl IntoIterator<Item = (u64, u64)>,
        pool: Arc<HeldBytes>,
    ) -> Self {
        InOrderSha256 {
            want,
            len,
            pool,
            state: Mutex::new(State {
                hasher: Some(Sha256::new()),
                next: 0,
                held: BTreeMap::new(),
                held_bytes: 0,
                on_disk: on_disk.into_iter().filter(|s| s.1 > 0).collect(),
                gave_up: false,
                held_peak: 0,
            }),
        }
    }

    /// `bufs` were written at `pos` in `part` (which holds the resumed spans).
    pub fn wrote(&self, part: &File, pos: u64, bufs: &[&[u8]]) {
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        if len == 0 {
            return;
        }
        let mut st = lock(&self.state);
        loop {
            if st.gave_up {
                return;
            }
            if pos < st.next || st.overlaps_held(pos, len) || st.overlaps_disk(pos, len) {
                self.give_up(&mut st);
                return;
            }
            let at_frontier = pos == st.next;
            // A resumed span at the frontier is hashed first, by whoever comes by.
            if (at_frontier || st.on_disk.contains_key(&st.next))
                && let Some(mut h) = st.hasher.take()
            {
                if !at_frontier {
                    drop(st);
                    self.drain(h, part);
                    st = lock(&self.state);
                    continue;
                }
                st.next += len;
                drop(st);
                for b in bufs {
                    h.update(b);
                }
                self.drain(h, part);
            } else if st.held_bytes + len <= HELD_MAX && self.pool.try_take(len) {
                st.held.insert(pos, bufs.concat());
                st.held_bytes += len;
                st.held_peak = st.held_peak.max(st.held_bytes);
            } else {
                self.give_up(&mut st);
            }
            return;
        }
    }

    /// With the hasher in hand: hash whatever continues at the frontier (held bytes,
    /// resumed spans), then hand the hasher back.
    fn drain(&self, mut h: Sha256, part: &File) {
        loop {
            let mut st = lock(&self.state);
            let at = st.next;
            if !st.gave_up
                && let Some(buf) = st.held.remove(&at)
            {
                st.next += buf.len() as u64;
                st.held_bytes -= buf.len() as u64;
                drop(st);
                self.pool.give(buf.len() as u64);
                h.update(&buf);
                continue;
            }
            if !st.gave_up
                && let Some(len) = st.on_disk.remove(&at)
            {
                st.next += len;
                drop(st);
                if read_buffered(part, at, at + len, &mut |b| h.update(b)).is_err() {
                    // Claimed but not hashed: the read-back at the end starts here.
                    let mut st = lock(&self.state);
                    st.next = at;
                    self.give_up(&mut st);
                    st.hasher = Some(h);
                    return;
                }
                continue;
            }
            st.hasher = Some(h);
            return;
        }
    }

    /// Once every write has landed in `part` (at `path`): hash what is left (read back
    /// from the part where the in-order hashing stopped; with direct reads if the part
    /// was written directly, so it is not in the page cache) and compare.
    pub fn finish(
        &self,
        part: &File,
        path: &Path,
        direct: bool,
    ) -> io::Result<Result<(), Mismatch>> {
        let h = lock(&self.state).hasher.take();
        let Some(h) = h else {
            return Err(io::Error::other("the sha256 is still being computed"));
        };
        self.drain(h, part);
        let mut st = lock(&self.state);
        let mut h = st.hasher.take().expect("drain hands the hasher back");
        let from = st.next;
        tracing::debug!(
            "sha256: {} of {} bytes hashed as written, {} read back, at most {} held",
            from.min(self.len),
            self.len,
            self.len.saturating_sub(from),
            st.held_peak
        );
        self.release(&mut st);
        drop(st);
        if direct {
            xet_mmap::direct::read_range(path, from, self.len, |b| h.update(b))?;
        } else {
            read_buffered(part, from, self.len, &mut |b| h.update(b))?;
        }
        let got = h.finalize();
        if got.as_slice() == self.want {
            Ok(Ok(()))
        } else {
            Ok(Err(Mismatch {
                got: hex(&got),
                want: hex(&self.want),
            }))
        }
    }
}

impl InOrderSha256 {
    fn give_up(&self, st: &mut State) {
        st.gave_up = true;
        self.release(st);
    }

    /// Drop what is held and give it back to the pool.
    fn release(&self, st: &mut State) {
        st.held.clear();
        self.pool.give(std::mem::take(&mut st.held_bytes));
    }
}

impl Drop for InOrderSha256 {
    /// A failed download's held bytes go back to the call's pool.
    fn drop(&mut self) {
        let mut st = lock(&self.state);
        self.release(&mut st);
    }
}

impl State {
    fn overlaps_held(&self, pos: u64, len: u64) -> bool {
        overlaps(
            self.held.iter().map(|(&o, b)| (o, b.len() as u64)),
            pos,
            len,
        )
    }

    fn overlaps_disk(&self, pos: u64, len: u64) -> bool {
        overlaps(self.on_disk.iter().map(|(&o, &l)| (o, l)), pos, len)
    }
}

/// Whether `[pos, pos + len)` overlaps any of `spans` (offset, length), sorted.
fn overlaps(spans: impl DoubleEndedIterator<Item = (u64, u64)>, pos: u64, len: u64) -> bool {
    let end = pos + len;
    // Only the last span starting before `end` can reach into the range.
    spans
        .rev()
        .find(|&(o, _)| o < end)
        .is_some_and(|(o, l)| o + l > pos)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn sha(b: &[u8]) -> [u8; 32] {
        Sha256::digest(b).into()
    }

    /// `data` in a part file, with `written` spans fed through `wrote` in the given
    /// order and `resumed` spans already there.
    fn run(
        data: &[u8],
        written: &[(u64, u64)],
        resumed: &[(u64, u64)],
        want: [u8; 32],
    ) -> Result<(), Mismatch> {
        let mut part = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut part, data).unwrap();
        let d = InOrderSha256::new(
            want,
            data.len() as u64,
            resumed.iter().copied(),
            Arc::default(),
        );
        for &(o, l) in written {
            let s = &data[o as usize..(o + l) as usize];
            // Split in two buffers, as a vectored write gives them.
            let (a, b) = s.split_at(s.len() / 2);
            d.wrote(&part, o, &[a, b]);
        }
        d.finish(&part, Path::new("unused"), false).unwrap()
    }

    #[test]
    fn in_order_out_of_order_and_resumed_spans_hash_alike() {
        let data: Vec<u8> = (0..100_000u32).map(|i| (i * 7 + i / 251) as u8).collect();
        let want = sha(&data);
        let n = data.len() as u64;
        run(&data, &[(0, n)], &[], want).unwrap();
        run(
            &data,
            &[(60_000, 40_000), (0, 30_000), (30_000, 30_000)],
            &[],
            want,
        )
        .unwrap();
        run(&data, &[(50_000, 50_000)], &[(0, 50_000)], want).unwrap();
        run(
            &data,
            &[(0, 20_000), (70_000, 30_000)],
            &[(20_000, 50_000)],
            want,
        )
        .unwrap();
        // Nothing written at all: everything read from the part.
        run(&data, &[], &[(0, n)], want).unwrap();
        let e = run(&data, &[(0, n)], &[], sha(b"other")).unwrap_err();
        assert_eq!(e.got, hex(&want));
    }

    #[test]
    fn overlapping_writes_fall_back_to_reading_the_part() {
        let data = vec![5u8; 10_000];
        let want = sha(&data);
        // The second write overlaps the first held one; the part has the bytes.
        run(
            &data,
            &[(5_000, 5_000), (4_000, 2_000), (0, 4_000)],
            &[],
            want,
        )
        .unwrap();
        run(&data, &[(0, 6_000), (4_000, 6_000)], &[], want).unwrap();
    }

    #[test]
    fn what_does_not_fit_is_read_back() {
        let len = HELD_MAX + 4096;
        let part = tempfile::tempfile().unwrap();
        part.set_len(len).unwrap();
        let want = sha(&vec![0u8; len as usize]);
        let pool = Arc::new(HeldBytes::default());
        let d = InOrderSha256::new(want, len, [], pool.clone());
        let zeros = vec![0u8; (HELD_MAX / 2) as usize];
        // Two halves of the limit held, then a third write ahead that does not fit.
        d.wrote(&part, 4096, &[&zeros]);
        d.wrote(&part, 4096 + HELD_MAX / 2, &[&zeros]);
        assert!(!lock(&d.state).gave_up);
        assert_eq!(pool.0.load(Ordering::SeqCst), HELD_MAX);
        d.wrote(&part, 0, &[&[0u8; 10]]);
        d.wrote(&part, 10, &[&[0u8; 1]]);
        assert_eq!(lock(&d.state).next, 11);
        d.wrote(&part, 4096 + HELD_MAX, &[&[0u8; 1]]);
        assert!(lock(&d.state).gave_up);
        assert_eq!(pool.0.load(Ordering::SeqCst), 0, "given back");
        assert!(d.finish(&part, Path::new("unused"), false).unwrap().is_ok());
    }

    /// Files of one call share [`HELD_TOTAL_MAX`]: once it is held, another file's write
    /// ahead is not held; a file dropped (a failed download) gives its bytes back.
    #[test]
    fn the_files_of_a_call_share_one_limit() {
        let part = tempfile::tempfile().unwrap();
        let pool = Arc::new(HeldBytes::default());
        let ahead = vec![1u8; HELD_MAX as usize];
        let n = (HELD_TOTAL_MAX / HELD_MAX) as usize;
        let files: Vec<InOrderSha256> = (0..=n)
            .map(|_| InOrderSha256::new([0; 32], 2 * HELD_MAX, [], pool.clone()))
            .collect();
        for (i, d) in files.iter().enumerate() {
            d.wrote(&part, HELD_MAX, &[&ahead]);
            assert_eq!(lock(&d.state).gave_up, i == n, "file {i}");
        }
        assert_eq!(pool.0.load(Ordering::SeqCst), HELD_TOTAL_MAX);
        drop(files);
        assert_eq!(pool.0.load(Ordering::SeqCst), 0);
    }

    #[test]
    fn writers_on_many_threads_hash_in_order() {
        let data: Vec<u8> = (0..4_000_000u32).map(|i| (i ^ (i >> 9)) as u8).collect();
        let mut part = tempfile::tempfile().unwrap();
        std::io::Write::write_all(&mut part, &data).unwrap();
        let d = InOrderSha256::new(
            sha(&data),
            data.len() as u64,
            [(1_000_000, 500_000)],
            Arc::default(),
        );
        // Four writers, each taking every fourth span of 64 KiB (the resumed ones
        // skipped), so they overtake each other all the time.
        std::thread::scope(|s| {
            for t in 0..4u64 {
                let (d, part, data) = (&d, &part, &data);
                s.spawn(move || {
                    for k in (t..).step_by(4) {
                        let at = k * 65_536;
                        if at >= data.len() as u64 {
                            break;
                        }
                        let end = (at + 65_536).min(data.len() as u64);
                        // Spans that straddle the resumed one are cut around it.
                        let spans = [(at, end.min(1_000_000)), (at.max(1_500_000), end)];
                        for (a, b) in spans.into_iter().filter(|(a, b)| a < b) {
                            d.wrote(part, a, &[&data[a as usize..b as usize]]);
                        }
                    }
                });
            }
        });
        // Everything was hashed on the way: nothing is left to read back.
        assert_eq!(lock(&d.state).next, data.len() as u64);
        d.finish(&part, Path::new("unused"), false)
            .unwrap()
            .unwrap();
    }

    proptest! {
        #[test]
        fn any_order_of_any_split_gives_the_sha256(
            data in proptest::collection::vec(any::<u8>(), 1..5000),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..12),
            resumed in proptest::collection::vec(any::<bool>(), 13),
            keys in proptest::collection::vec(any::<u32>(), 13),
        ) {
            let n = data.len() as u64;
            let mut at: Vec<u64> = cuts.iter().map(|c| c.index(data.len()) as u64).collect();
            at.extend([0, n]);
            at.sort_unstable();
            at.dedup();
            let spans: Vec<(u64, u64)> = at.windows(2).map(|w| (w[0], w[1] - w[0])).collect();
            let (disk, mut written): (Vec<_>, Vec<_>) =
                spans.iter().enumerate().partition(|(i, _)| resumed[*i]);
            let disk: Vec<(u64, u64)> = disk.into_iter().map(|(_, s)| *s).collect();
            // Written in a random order.
            written.sort_by_key(|(i, _)| keys[*i]);
            let written: Vec<(u64, u64)> = written.into_iter().map(|(_, s)| *s).collect();
            prop_assert!(run(&data, &written, &disk, sha(&data)).is_ok());
        }
    }
}
