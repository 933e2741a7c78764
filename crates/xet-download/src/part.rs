//! Writing the `.part` file, around the page cache where it can.
//!
//! A finished download is fsynced before it is renamed into place, so every byte goes to
//! the disk during the download anyway. Through the page cache each byte is first
//! copied into a newly allocated cache page: on the machines we measure, that copy and
//! the filesystem's per-page work are most of a download's system time, and allocating
//! pages the hypervisor reclaimed can cost seconds per GiB. So on Linux a large part
//! that will be renamed into place is written with `O_DIRECT` instead:
//!
//! - The file is cut into aligned **stripes** of [`STRIPE`] bytes. Terms arrive in any
//!   order, at any byte offset; their bytes are copied into their stripes' buffers (one
//!   copy into warm, recycled memory), and a stripe is written with one direct write as
//!   soon as every byte of it has arrived. The last stripe is padded to the alignment
//!   and the file cut to size when the part is closed.
//! - A journal line promises that a term's bytes are in the file (where a killed process
//!   cannot lose them), so when a term is journaled, stripes of it still being filled
//!   are spilled through the page cache ([`PartFile::record`]). A kill loses at most
//!   bytes of terms not journaled yet, which a rerun fetches again.
//!   [`PartFile::close`] (after success, or after an error or interruption) writes what
//!   the open stripes hold through the page cache and journals what that completes.
//! - Anything that does not fit the scheme goes through the page cache, stripe by
//!   stripe, which is always correct: stripes spilled for the journal, stripes beside
//!   terms kept from an earlier run (their bytes are already in the file), bytes written
//!   again into a stripe already written (a retried fetch), a stripe opened while
//!   [`MAX_OPEN`] are already filling (many fetches far apart), and everything once the
//!   filesystem refuses a direct write (`EINVAL`: tmpfs, some network filesystems).
//!   Stripes are aligned and a stripe's direct write never overlaps a buffered write to
//!   it, so the two never race on a page.
//!
//! Bytes written directly are not in the page cache afterwards; reading the file right
//! after a download reads it from disk, the usual trade of direct I/O.

use std::collections::HashMap;
use std::fs::File;
use std::io;
use std::path::Path;
use std::sync::{Arc, Mutex};

use crate::fsio;
use crate::journal::{DoneTerm, Journal};

/// Parts at least this long are written directly.
pub(crate) const DIRECT_MIN: u64 = 8 << 20;
/// Stripe length: a multiple of [`ALIGN`], large enough that a direct write costs little
/// per byte, small enough that the stripes being filled at once stay a modest amount of
/// memory.
pub(crate) const STRIPE: u64 = 4 << 20;
/// Alignment of direct writes (buffer address, file offset, length): the largest
/// logical block size in common use.
const ALIGN: usize = 4096;
/// Stripes being filled at once, at most, per file. In-order downloads have a few open
/// (one per fetch boundary in flight); beyond this, stripes take the buffered path.
pub(crate) const MAX_OPEN: usize = 24;
/// Stripe buffers kept for reuse, across files.
const IDLE_MAX: usize = 8;

static IDLE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// How a stripe's bytes reach the file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Mode {
    /// Nothing written yet.
    Fresh,
    /// Being filled in a buffer (it is in `open`).
    Open,
    /// Full, its direct write under way.
    Flushing,
    /// Written with one direct write.
    Written,
    /// Written (or being written) through the page cache.
    Buffered,
}

/// A stripe being filled.
struct Stripe {
    buf: Vec<u8>,
    /// Start of the aligned window in `buf`.
    at: usize,
    /// Byte ranges of the stripe that have arrived: sorted, disjoint, not adjacent.
    have: Vec<(usize, usize)>,
}

impl Stripe {
    fn new() -> Stripe {
        let mut buf = lock(&IDLE).pop().unwrap_or_default();
        buf.resize(STRIPE as usize + ALIGN, 0);
        // The aligned window of the buffer (`align_offset` keeps this free of unsafe).
        let at = buf.as_ptr().align_offset(ALIGN);
        Stripe {
            buf,
            at,
            have: Vec::new(),
        }
    }

    fn window(&mut self) -> &mut [u8] {
        &mut self.buf[self.at..self.at + STRIPE as usize]
    }

    /// Copy `data` to offset `off` of the stripe.
    fn put(&mut self, off: usize, data: &[u8]) {
        self.window()[off..off + data.len()].copy_from_slice(data);
        let (mut lo, mut hi) = (off, off + data.len());
        // Merge with every range it overlaps or touches.
        self.have.retain(|&(a, b)| {
            if b < lo || a > hi {
                true
            } else {
                lo = lo.min(a);
                hi = hi.max(b);
                false
            }
        });
        let i = self.have.partition_point(|r| r.0 < lo);
        self.have.insert(i, (lo, hi));
    }

    fn is_full(&self, len: usize) -> bool {
        self.have.first() == Some(&(0, len))
    }

    fn recycle(self) {
        let mut idle = lock(&IDLE);
        if idle.len() < IDLE_MAX {
            idle.push(self.buf);
        }
    }
}

struct State {
    modes: Vec<Mode>,
    open: HashMap<usize, Stripe>,
    /// Terms whose bytes are not all written yet, journaled when they are.
    unjournaled: Vec<(u64, DoneTerm)>,
    /// Bytes rewritten into a stripe while its direct write was under way (a retry),
    /// written after it through the page cache, so the two never race on a page.
    late: Vec<(u64, Vec<u8>)>,
    /// Cleared when the filesystem refuses a direct write.
    enabled: bool,
    /// Some stripe was written directly (the file may then be longer than `len`).
    padded: bool,
}

struct Direct {
    fd: File,
    state: Mutex<State>,
}

/// The `.part` file of one download.
pub(crate) struct PartFile {
    file: Arc<File>,
    len: u64,
    direct: Option<Direct>,
    /// Buffered writes take turns: concurrent writes to one file only contend on its
    /// inode lock in the kernel.
    turn: Mutex<()>,
    /// Start writing buffered pages back as they are written (the part will be fsynced).
    writeback: bool,
}

impl PartFile {
    /// Wrap the open part `file` at `path`, `len` bytes long. `durable`: the part will
    /// be fsynced and renamed into place (else it is read back right away, and the page
    /// cache is the better place for it). `kept`: terms kept from an earlier run, by
    /// offset; their bytes are in the file already.
    pub(crate) fn new(
        file: File,
        path: &Path,
        len: u64,
        durable: bool,
        kept: &HashMap<u64, DoneTerm>,
    ) -> PartFile {
        let direct = (durable && len >= DIRECT_MIN)
            .then(|| open_direct(path))
            .flatten()
            .map(|fd| {
                let n = len.div_ceil(STRIPE) as usize;
                let mut modes = vec![Mode::Fresh; n];
                for (&off, t) in kept {
                    for m in stripes_of(off, t.len, n) {
                        modes[m] = Mode::Buffered;
                    }
                }
                Direct {
                    fd,
                    state: Mutex::new(State {
                        modes,
                        open: HashMap::new(),
                        unjournaled: Vec::new(),
                        late: Vec::new(),
                        enabled: true,
                        padded: false,
                    }),
                }
            });
        PartFile {
            file: Arc::new(file),
            len,
            direct,
            turn: Mutex::new(()),
            writeback: durable,
        }
    }

    /// The buffered handle (for fsync).
    pub(crate) fn file(&self) -> &Arc<File> {
        &self.file
    }

    /// Whether direct writes are (still) in use.
    #[cfg(test)]
    fn is_direct(&self) -> bool {
        self.direct.as_ref().is_some_and(|d| lock(&d.state).enabled)
    }

    fn stripe_len(&self, k: usize) -> usize {
        (self.len - k as u64 * STRIPE).min(STRIPE) as usize
    }

    fn write_buffered(&self, bufs: &[&[u8]], pos: u64) -> io::Result<()> {
        {
            let _turn = lock(&self.turn);
            fsio::write_all_vectored_at(&self.file, bufs, pos)?;
        }
        if self.writeback {
            let len = bufs.iter().map(|b| b.len() as u64).sum();
            fsio::start_writeback(&self.file, pos, len);
        }
        Ok(())
    }

    /// Write `bufs` back to back at offset `pos`; journal (into `journal`) the recorded
    /// terms this completes.
    pub(crate) fn write(
        &self,
        bufs: &[&[u8]],
        pos: u64,
        journal: Option<&Journal>,
    ) -> io::Result<()> {
        let Some(d) = &self.direct else {
            return self.write_buffered(bufs, pos);
        };
        let mut full = Vec::new();
        {
            let mut st = lock(&d.state);
            if !st.enabled {
                drop(st);
                return self.write_buffered(bufs, pos);
            }
            let mut at = pos;
            for b in bufs {
                let mut rest: &[u8] = b;
                while !rest.is_empty() {
                    let k = (at / STRIPE) as usize;
                    let off = (at % STRIPE) as usize;
                    let slen = self.stripe_len(k);
                    let n = rest.len().min(slen - off);
                    let (piece, tail) = rest.split_at(n);
                    if st.modes[k] == Mode::Fresh {
                        if st.open.len() < MAX_OPEN {
                            st.modes[k] = Mode::Open;
                            st.open.insert(k, Stripe::new());
                        } else {
                            st.modes[k] = Mode::Buffered;
                        }
                    }
                    match st.modes[k] {
                        Mode::Open => {
                            let s = st.open.get_mut(&k).expect("open stripes are in the map");
                            s.put(off, piece);
                            if s.is_full(slen) {
                                full.push((k, st.open.remove(&k).expect("just used")));
                                st.modes[k] = Mode::Flushing;
                            }
                        }
                        Mode::Flushing => st.late.push((at, piece.to_vec())),
                        // Written already (this is a rewrite) or buffered: the page cache.
                        _ => self.write_buffered(&[piece], at)?,
                    }
                    at += n as u64;
                    rest = tail;
                }
            }
        }
        // Every full stripe is written (or given back), even after a failure.
        let mut res = Ok(());
        for (k, s) in full {
            let r = self.flush(d, k, s, journal);
            if res.is_ok() {
                res = r;
            }
        }
        res
    }

    /// Write the full stripe `k` directly (outside the state lock: the disk is slow).
    fn flush(
        &self,
        d: &Direct,
        k: usize,
        mut s: Stripe,
        journal: Option<&Journal>,
    ) -> io::Result<()> {
        let slen = self.stripe_len(k);
        let padded = slen.div_ceil(ALIGN) * ALIGN;
        let window = s.window();
        window[slen..padded].fill(0);
        let res = write_direct(&d.fd, &window[..padded], k as u64 * STRIPE);
        match res {
            Ok(()) => {
                let ready = {
                    let mut st = lock(&d.state);
                    st.modes[k] = Mode::Written;
                    st.padded |= padded != slen;
                    self.write_late(&mut st, k)?;
                    self.take_ready(&mut st)
                };
                s.recycle();
                journal_all(journal, &ready)
            }
            Err(e) if e.raw_os_error() == Some(libc_einval()) => {
                // The filesystem refuses direct writes: this stripe, the open ones and
                // everything after go through the page cache.
                let ready = {
                    let mut st = lock(&d.state);
                    st.enabled = false;
                    st.modes[k] = Mode::Buffered;
                    self.write_buffered(&[&s.window()[..slen]], k as u64 * STRIPE)?;
                    self.write_late(&mut st, k)?;
                    self.drain_open(&mut st)?;
                    self.take_ready(&mut st)
                };
                s.recycle();
                tracing::debug!("O_DIRECT writes refused here; writing through the page cache");
                journal_all(journal, &ready)
            }
            Err(e) => {
                // The stripe's bytes are lost; its terms stay unjournaled and a rerun
                // fetches them again. Later writes to it go through the page cache.
                {
                    let mut st = lock(&d.state);
                    st.modes[k] = Mode::Buffered;
                    st.late.retain(|(at, _)| (*at / STRIPE) as usize != k);
                }
                s.recycle();
                Err(e)
            }
        }
    }

    /// Write the late bytes of stripe `k` (now written) through the page cache.
    fn write_late(&self, st: &mut State, k: usize) -> io::Result<()> {
        let (mine, rest): (Vec<_>, Vec<_>) = std::mem::take(&mut st.late)
            .into_iter()
            .partition(|(at, _)| (*at / STRIPE) as usize == k);
        st.late = rest;
        for (at, data) in mine {
            self.write_buffered(&[&data], at)?;
        }
        Ok(())
    }

    /// Write the arrived bytes of every open stripe through the page cache.
    fn drain_open(&self, st: &mut State) -> io::Result<()> {
        let mut ks: Vec<usize> = st.open.keys().copied().collect();
        ks.sort_unstable();
        ks.into_iter().try_for_each(|k| self.spill(st, k))
    }

    /// Write the arrived bytes of open stripe `k` through the page cache; the rest of
    /// it follows the same way.
    fn spill(&self, st: &mut State, k: usize) -> io::Result<()> {
        let mut s = st.open.remove(&k).expect("spilled stripes are open");
        st.modes[k] = Mode::Buffered;
        let have = std::mem::take(&mut s.have);
        let res = have.into_iter().try_for_each(|(a, b)| {
            self.write_buffered(&[&s.window()[a..b]], k as u64 * STRIPE + a as u64)
        });
        s.recycle();
        res
    }

    /// Remove and return the unjournaled terms whose stripes are all written.
    fn take_ready(&self, st: &mut State) -> Vec<(u64, DoneTerm)> {
        let n = st.modes.len();
        let modes = &st.modes;
        let written = |off: u64, len: u64| stripes_of(off, len, n).all(|k| is_durable(modes[k]));
        let (ready, wait): (Vec<_>, Vec<_>) = std::mem::take(&mut st.unjournaled)
            .into_iter()
            .partition(|(off, t)| written(*off, t.len));
        st.unjournaled = wait;
        ready
    }

    /// Journal the term at part offset `offset`, whose bytes were all written.
    ///
    /// A line promises the bytes are in the file, where a killed process cannot lose
    /// them. Stripes of the term still being filled (shared with a neighbour that has
    /// not arrived: a term's inner stripes are full by now) are spilled through the page
    /// cache so the line can be written at once; for an in-order download that is about
    /// one stripe per term. A stripe whose direct write is under way delays the line
    /// until the write ends.
    pub(crate) fn record(&self, journal: &Journal, offset: u64, term: DoneTerm) -> io::Result<()> {
        if let Some(d) = &self.direct {
            let mut st = lock(&d.state);
            let n = st.modes.len();
            for k in stripes_of(offset, term.len, n) {
                if st.modes[k] == Mode::Open {
                    self.spill(&mut st, k)?;
                }
            }
            if !stripes_of(offset, term.len, n).all(|k| is_durable(st.modes[k])) {
                st.unjournaled.push((offset, term));
                return Ok(());
            }
        }
        journal.append(offset, &term)
    }

    /// Write out whatever is still held (open stripes, through the page cache), journal
    /// what that completes, and cut the file to its length. Call once no more writes
    /// come: after success, and after an error so a rerun can resume from every byte
    /// that arrived.
    pub(crate) fn close(&self, journal: Option<&Journal>) -> io::Result<()> {
        let Some(d) = &self.direct else {
            return Ok(());
        };
        let (ready, padded) = {
            let mut st = lock(&d.state);
            self.drain_open(&mut st)?;
            (self.take_ready(&mut st), st.padded)
        };
        if padded {
            self.file.set_len(self.len)?;
        }
        journal_all(journal, &ready)
    }
}

/// Whether a stripe's bytes are in the file (on disk, or in the page cache, which a
/// killed process does not lose).
fn is_durable(m: Mode) -> bool {
    matches!(m, Mode::Written | Mode::Buffered)
}

fn journal_all(journal: Option<&Journal>, ready: &[(u64, DoneTerm)]) -> io::Result<()> {
    if let Some(j) = journal {
        for (off, t) in ready {
            j.append(*off, t)?;
        }
    }
    Ok(())
}

/// Indices of the stripes (of `n`) that bytes `off..off + len` touch.
fn stripes_of(off: u64, len: u64, n: usize) -> impl Iterator<Item = usize> {
    let first = (off / STRIPE) as usize;
    let end = if len == 0 {
        first
    } else {
        ((off + len - 1) / STRIPE) as usize + 1
    };
    first.min(n)..end.min(n)
}

fn libc_einval() -> i32 {
    #[cfg(unix)]
    {
        rustix::io::Errno::INVAL.raw_os_error()
    }
    #[cfg(not(unix))]
    {
        22
    }
}

#[cfg(target_os = "linux")]
fn open_direct(path: &Path) -> Option<File> {
    use std::os::unix::fs::OpenOptionsExt;
    std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(rustix::fs::OFlags::DIRECT.bits() as i32)
        .open(path)
        .ok()
}

#[cfg(not(target_os = "linux"))]
fn open_direct(_path: &Path) -> Option<File> {
    None
}

#[cfg(unix)]
fn write_direct(fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    std::os::unix::fs::FileExt::write_all_at(fd, buf, offset)
}

#[cfg(not(unix))]
fn write_direct(fd: &File, buf: &[u8], offset: u64) -> io::Result<()> {
    fsio::write_all_at(fd, buf, offset)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::journal::JournalHeader;
    use xet_hash::MerkleHash;
    use xet_testdata::Rng;

    fn data(len: u64, seed: u64) -> Vec<u8> {
        let mut d = vec![0u8; len as usize];
        Rng::new(seed).fill(&mut d);
        d
    }

    /// A part file of `len` bytes in a fresh directory, with its journal.
    fn part(dir: &Path, len: u64, kept: &HashMap<u64, DoneTerm>) -> (PartFile, Journal) {
        let path = dir.join("f.part");
        let f = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        f.set_len(len).unwrap();
        let header = JournalHeader::new(&MerkleHash::ZERO, len, 0, len);
        let j = Journal::create(&dir.join("f.part.jsonl"), &header, kept).unwrap();
        (PartFile::new(f, &path, len, true, kept), j)
    }

    fn term(len: u64) -> DoneTerm {
        DoneTerm {
            len,
            chunks: vec![(MerkleHash::ZERO, len as u32)],
        }
    }

    /// Offsets of the terms in the journal (header excluded).
    fn journaled(dir: &Path) -> Vec<u64> {
        let text = std::fs::read_to_string(dir.join("f.part.jsonl")).unwrap();
        let mut offs: Vec<u64> = text
            .lines()
            .skip(1)
            .map(|l| {
                serde_json::from_str::<serde_json::Value>(l).unwrap()["offset"]
                    .as_u64()
                    .unwrap()
            })
            .collect();
        offs.sort_unstable();
        offs
    }

    fn note_if_buffered(p: &PartFile) -> bool {
        if !p.is_direct() {
            eprintln!(
                "O_DIRECT is not supported under the temp dir; only the buffered path was checked"
            );
        }
        p.is_direct()
    }

    #[test]
    fn terms_written_in_any_order_land_byte_exact() {
        // Three stripes and a tail that is not a multiple of the alignment.
        let len = 3 * STRIPE + 5000;
        let want = data(len, 1);
        let dir = tempfile::tempdir().unwrap();
        let (p, j) = part(dir.path(), len, &HashMap::new());
        let direct = note_if_buffered(&p);
        // Terms of every size class: below the alignment, across stripe borders, longer
        // than a stripe.
        let mut rng = Rng::new(2);
        let mut terms = Vec::new();
        let mut at = 0u64;
        while at < len {
            let n = match rng.below(4) {
                0 => 1 + rng.below(4096),
                1 => 1 + rng.below(200_000),
                2 => 1 + rng.below(STRIPE),
                _ => STRIPE + rng.below(STRIPE),
            }
            .min(len - at);
            terms.push((at, n));
            at += n;
        }
        // Shuffled, and a few written twice (a retried fetch).
        for i in (1..terms.len()).rev() {
            terms.swap(i, rng.below(i as u64 + 1) as usize);
        }
        let again: Vec<_> = terms.iter().step_by(5).copied().collect();
        for &(off, n) in terms.iter().chain(&again) {
            let bytes = &want[off as usize..(off + n) as usize];
            // Split in up to three vectored pieces, as decoded chunks arrive.
            let (a, rest) = bytes.split_at(bytes.len() / 3);
            let (b, c) = rest.split_at(rest.len() / 2);
            p.write(&[a, b, c], off, Some(&j)).unwrap();
            p.record(&j, off, term(n)).unwrap();
        }
        p.close(Some(&j)).unwrap();
        assert_eq!(
            p.is_direct(),
            direct,
            "no fallback on a filesystem that takes direct writes"
        );
        let got = std::fs::read(dir.path().join("f.part")).unwrap();
        assert_eq!(got.len() as u64, len);
        assert!(got == want, "part file differs from what was written");
        let mut offs: Vec<u64> = terms
            .iter()
            .map(|t| t.0)
            .chain(again.iter().map(|t| t.0))
            .collect();
        offs.sort_unstable();
        assert_eq!(journaled(dir.path()), offs);
    }

    #[test]
    fn a_term_is_journaled_as_soon_as_its_bytes_are_in_the_file() {
        let len = 2 * STRIPE + 100;
        let want = data(len, 3);
        let dir = tempfile::tempdir().unwrap();
        let (p, j) = part(dir.path(), len, &HashMap::new());
        if !note_if_buffered(&p) {
            return;
        }
        let half = (STRIPE / 2) as usize;
        let stripe = STRIPE as usize;
        let mode = |k: usize| lock(&p.direct.as_ref().unwrap().state).modes[k];
        // Stripe 0 whole, from two terms: written directly, both journaled.
        p.write(&[&want[half..stripe]], half as u64, Some(&j))
            .unwrap();
        assert_eq!(mode(0), Mode::Open);
        p.write(&[&want[..half]], 0, Some(&j)).unwrap();
        assert_eq!(mode(0), Mode::Written);
        p.record(&j, half as u64, term((stripe - half) as u64))
            .unwrap();
        p.record(&j, 0, term(half as u64)).unwrap();
        assert_eq!(journaled(dir.path()), vec![0, half as u64]);
        // A term ending inside stripe 1 (its neighbour not there yet) is journaled at
        // once: its part of stripe 1 is spilled through the page cache.
        let end = stripe + 10;
        p.write(&[&want[stripe..end]], STRIPE, Some(&j)).unwrap();
        assert_eq!(mode(1), Mode::Open);
        p.record(&j, STRIPE, term(10)).unwrap();
        assert_eq!(mode(1), Mode::Buffered);
        assert_eq!(journaled(dir.path()), vec![0, half as u64, STRIPE]);
        // A term still waiting for a direct write under way is journaled when it ends.
        lock(&p.direct.as_ref().unwrap().state).modes[2] = Mode::Flushing;
        p.record(&j, 2 * STRIPE, term(100)).unwrap();
        assert_eq!(journaled(dir.path()), vec![0, half as u64, STRIPE]);
        lock(&p.direct.as_ref().unwrap().state).modes[2] = Mode::Written;
        p.close(Some(&j)).unwrap();
        assert_eq!(
            journaled(dir.path()),
            vec![0, half as u64, STRIPE, 2 * STRIPE]
        );
        let got = std::fs::read(dir.path().join("f.part")).unwrap();
        assert_eq!(got.len() as u64, len);
        assert!(got[..end] == want[..end]);
        assert!(
            got[end..].iter().all(|&b| b == 0),
            "bytes never written stay zero"
        );
    }

    #[test]
    fn stripes_beyond_the_open_limit_take_the_page_cache() {
        let n = MAX_OPEN as u64 + 2;
        let len = n * STRIPE;
        let want = data(len, 4);
        let dir = tempfile::tempdir().unwrap();
        let (p, j) = part(dir.path(), len, &HashMap::new());
        let direct = note_if_buffered(&p);
        // The first byte of every stripe first: more stripes open than allowed.
        for k in 0..n {
            let at = (k * STRIPE) as usize;
            p.write(&[&want[at..at + 1]], at as u64, Some(&j)).unwrap();
        }
        if direct {
            let st = lock(&p.direct.as_ref().unwrap().state);
            assert_eq!(st.open.len(), MAX_OPEN);
            assert_eq!(st.modes.iter().filter(|m| **m == Mode::Buffered).count(), 2);
        }
        for k in (0..n).rev() {
            let at = (k * STRIPE) as usize;
            p.write(
                &[&want[at + 1..at + STRIPE as usize]],
                at as u64 + 1,
                Some(&j),
            )
            .unwrap();
        }
        if direct {
            let st = lock(&p.direct.as_ref().unwrap().state);
            assert!(st.open.is_empty());
            assert_eq!(
                st.modes.iter().filter(|m| **m == Mode::Written).count(),
                MAX_OPEN
            );
        }
        p.close(Some(&j)).unwrap();
        assert!(std::fs::read(dir.path().join("f.part")).unwrap() == want);
    }

    #[test]
    fn bytes_kept_from_an_earlier_run_are_not_overwritten() {
        let len = 3 * STRIPE + 777;
        let want = data(len, 5);
        let dir = tempfile::tempdir().unwrap();
        // An earlier run left a term in the middle of stripe 1 and the start of stripe 2.
        let (k_off, k_len) = (STRIPE + 1000, STRIPE + 3);
        {
            let (p, _) = part(dir.path(), len, &HashMap::new());
            let k = (k_off as usize)..((k_off + k_len) as usize);
            fsio::write_all_at(p.file(), &want[k], k_off).unwrap();
        }
        let kept = HashMap::from([(k_off, term(k_len))]);
        let (p, j) = part(dir.path(), len, &kept);
        let direct = note_if_buffered(&p);
        for (a, b) in [(k_off + k_len, len), (0, k_off)] {
            p.write(&[&want[a as usize..b as usize]], a, Some(&j))
                .unwrap();
            p.record(&j, a, term(b - a)).unwrap();
        }
        if direct {
            let st = lock(&p.direct.as_ref().unwrap().state);
            assert_eq!(
                st.modes,
                vec![Mode::Written, Mode::Buffered, Mode::Buffered, Mode::Written]
            );
        }
        p.close(Some(&j)).unwrap();
        assert!(std::fs::read(dir.path().join("f.part")).unwrap() == want);
        assert_eq!(journaled(dir.path()), vec![0, k_off, k_off + k_len]);
    }

    #[test]
    fn small_or_temporary_parts_are_buffered() {
        let dir = tempfile::tempdir().unwrap();
        let (p, _) = part(dir.path(), DIRECT_MIN - 1, &HashMap::new());
        assert!(!p.is_direct());
        let path = dir.path().join("g.part");
        let f = File::create(&path).unwrap();
        let p = PartFile::new(f, &path, DIRECT_MIN, false, &HashMap::new());
        assert!(!p.is_direct());
    }
}
