//! Recycled buffers for large bodies received over HTTP (xorb data), shared by the
//! client and the server. A fresh 64 MiB allocation is a fresh mapping whose every page
//! faults and is zeroed before use; on a virtual machine that can cost more than the
//! copy into it. Large buffers are page-aligned [`xet_mmap::IoBuf`]s, so a store writing
//! a body with `O_DIRECT` takes it straight from memory. They return to a small
//! process-wide pool when the last `Bytes` referring to them is dropped. Small bodies get
//! plain allocations.
//!
//! The pooled buffers are in ordinary pages, not huge ones: faulting fresh huge pages in
//! cost `xet serve` up to 0.3 s more CPU for its first 1 GiB received on the bench VM
//! (0.66-0.99 s against 0.65-0.67 s), while a warm pool of either kind costs the same
//! (0.55-0.59 s against 0.58-0.61 s per GiB, direct writes included).

use bytes::Bytes;
use std::sync::Mutex;
use xet_mmap::IoBuf;

/// Bodies at least this large are received into pooled buffers.
pub const MIN_POOLED: usize = 1 << 20;
/// Pooled buffers hold at least this much: any xorb body (64 MiB of chunk data plus
/// headers), so one buffer serves every body.
const POOLED_LEN: usize = 65 << 20;
/// Idle capacity kept for reuse; buffers beyond it are freed.
const MAX_IDLE_BYTES: usize = 4 * POOLED_LEN;

static IDLE: Mutex<Vec<IoBuf>> = Mutex::new(Vec::new());

fn idle() -> std::sync::MutexGuard<'static, Vec<IoBuf>> {
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// A pooled buffer of at least `len` bytes; `None` if none can be mapped.
fn take(len: usize) -> Option<IoBuf> {
    let reused = {
        let mut idle = idle();
        idle.iter()
            .position(|b| b.len() >= len)
            .map(|i| idle.swap_remove(i))
    };
    match reused {
        Some(b) => Some(b),
        None => IoBuf::new_small_pages(len.max(POOLED_LEN)).ok(),
    }
}

fn give_back(buf: IoBuf) {
    let mut idle = idle();
    let held: usize = idle.iter().map(|b| b.len()).sum();
    if held + buf.len() <= MAX_IDLE_BYTES {
        idle.push(buf);
    }
}

/// Alignment `O_DIRECT` asks of buffer addresses, file offsets and lengths (the page
/// size; large [`BodyBuf`] data starts on a page boundary).
pub const ALIGN: usize = 4096;

/// A body being received. A large one ([`MIN_POOLED`] or more expected) goes into a
/// pooled, page-aligned buffer, so a store writing it with `O_DIRECT` needs no
/// staging copy; a small one into a plain allocation.
pub struct BodyBuf(Inner);

enum Inner {
    Plain(Vec<u8>),
    Pooled { buf: IoBuf, len: usize },
}

impl std::fmt::Debug for BodyBuf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BodyBuf").field("len", &self.len()).finish()
    }
}

impl BodyBuf {
    /// Room for about `len` bytes.
    pub fn with_capacity(len: usize) -> BodyBuf {
        if len >= MIN_POOLED
            && let Some(buf) = take(len)
        {
            return BodyBuf(Inner::Pooled { buf, len: 0 });
        }
        BodyBuf(Inner::Plain(Vec::with_capacity(len)))
    }

    pub fn extend_from_slice(&mut self, data: &[u8]) {
        match &mut self.0 {
            Inner::Plain(v) => v.extend_from_slice(data),
            Inner::Pooled { buf, len } => {
                let end = *len + data.len();
                if end > buf.len() {
                    // More than announced: a larger buffer, aligned as well.
                    match take(end.max(2 * buf.len())) {
                        Some(mut bigger) => {
                            bigger[..*len].copy_from_slice(&buf[..*len]);
                            give_back(std::mem::replace(buf, bigger));
                        }
                        None => {
                            let mut v = Vec::with_capacity(end);
                            v.extend_from_slice(&buf[..*len]);
                            v.extend_from_slice(data);
                            let old = std::mem::replace(&mut self.0, Inner::Plain(v));
                            if let Inner::Pooled { buf, .. } = old {
                                give_back(buf);
                            }
                            return;
                        }
                    }
                }
                buf[*len..end].copy_from_slice(data);
                *len = end;
            }
        }
    }

    /// The bytes received so far.
    pub fn as_slice(&self) -> &[u8] {
        match &self.0 {
            Inner::Plain(v) => v,
            Inner::Pooled { buf, len } => &buf[..*len],
        }
    }

    /// Bytes received so far.
    pub fn len(&self) -> usize {
        match &self.0 {
            Inner::Plain(v) => v.len(),
            Inner::Pooled { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data as `Bytes`; a pooled buffer returns to the pool once every clone is
    /// dropped.
    pub fn freeze(self) -> Bytes {
        match self.0 {
            Inner::Plain(v) => Bytes::from(v),
            Inner::Pooled { buf, len } => Bytes::from_owner(Pooled {
                buf: Some(buf),
                len,
            }),
        }
    }
}

struct Pooled {
    buf: Option<IoBuf>,
    len: usize,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        self.buf.as_ref().map_or(&[], |b| &b[..self.len])
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        if let Some(buf) = self.buf.take() {
            give_back(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_bodies_start_aligned_keep_their_bytes_and_come_back() {
        for len in [MIN_POOLED, 3 * MIN_POOLED + 5] {
            let want: Vec<u8> = (0..len).map(|i| (i * 31 % 251) as u8).collect();
            let mut b = BodyBuf::with_capacity(len);
            assert!(b.is_empty());
            for piece in want.chunks(70_000) {
                b.extend_from_slice(piece);
            }
            assert_eq!(b.len(), len);
            let bytes = b.freeze();
            assert_eq!(&bytes[..], &want[..]);
            assert_eq!(bytes.as_ptr().align_offset(ALIGN), 0);
            let ptr = bytes.as_ptr() as usize;
            let slice = bytes.slice(10..20);
            drop(bytes);
            // Still borrowed through `slice`: not recycled yet.
            assert_eq!(&slice[..], &want[10..20]);
            drop(slice);
            // Other tests may race for the pool; only check reuse when we got ours back.
            let again = BodyBuf::with_capacity(len);
            assert!(again.is_empty());
            if let Inner::Pooled { buf, .. } = &again.0
                && buf.as_ptr() as usize == ptr
            {
                assert!(buf.len() >= len);
            }
        }
    }

    #[test]
    fn bodies_longer_than_announced_and_small_ones_keep_their_bytes() {
        let want: Vec<u8> = (0..POOLED_LEN + 3 * MIN_POOLED)
            .map(|i| (i * 7 % 253) as u8)
            .collect();
        let mut b = BodyBuf::with_capacity(MIN_POOLED);
        for piece in want.chunks(1 << 20) {
            b.extend_from_slice(piece);
        }
        let bytes = b.freeze();
        assert!(bytes[..] == want[..]);
        assert_eq!(bytes.as_ptr().align_offset(ALIGN), 0);
        let mut small = BodyBuf::with_capacity(10);
        assert!(
            matches!(small.0, Inner::Plain(_)),
            "small bodies are not pooled"
        );
        small.extend_from_slice(b"abc");
        assert_eq!(&small.freeze()[..], b"abc");
    }
}
