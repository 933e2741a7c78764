//! Recycled buffers for large bodies received over HTTP (xorb data), shared by the
//! client and the server. A fresh 64 MiB allocation is a fresh mapping whose every page
//! faults and is zeroed before use; on a virtual machine that can cost more than the
//! copy into it. Buffers return to a small process-wide pool when the last `Bytes`
//! referring to them is dropped. Small bodies get plain allocations, so callers use
//! [`take`] and [`freeze`] whatever the size.

use bytes::Bytes;
use std::sync::Mutex;

/// Bodies at least this large are received into pooled buffers.
pub const MIN_POOLED: usize = 1 << 20;
/// Idle capacity kept for reuse; buffers beyond it are freed.
const MAX_IDLE_BYTES: usize = 256 << 20;

static IDLE: Mutex<Vec<Vec<u8>>> = Mutex::new(Vec::new());

fn idle() -> std::sync::MutexGuard<'static, Vec<Vec<u8>>> {
    IDLE.lock().unwrap_or_else(|e| e.into_inner())
}

/// An empty buffer with room for `len` bytes: reused when one is idle and `len` is at
/// least [`MIN_POOLED`], a plain allocation below that.
pub fn take(len: usize) -> Vec<u8> {
    if len < MIN_POOLED {
        return Vec::with_capacity(len);
    }
    let reused = {
        let mut idle = idle();
        match idle.iter().position(|b| b.capacity() >= len) {
            Some(i) => Some(idle.swap_remove(i)),
            None => idle.pop(),
        }
    };
    let mut buf = reused.unwrap_or_default();
    buf.clear();
    buf.reserve(len);
    buf
}

/// `buf` as `Bytes`; a buffer of at least [`MIN_POOLED`] capacity returns to the pool
/// once every clone is dropped.
pub fn freeze(buf: Vec<u8>) -> Bytes {
    if buf.capacity() < MIN_POOLED {
        return Bytes::from(buf);
    }
    Bytes::from_owner(Pooled(buf))
}

/// Alignment of [`BodyBuf`] data: the page size, which is also the strictest block
/// alignment `O_DIRECT` asks for.
pub const ALIGN: usize = 4096;

/// Fill empty `buf` with zeros up to the first [`ALIGN`] boundary of its allocation and
/// return how many, so what is appended next starts aligned (`buf` needs `ALIGN - 1`
/// bytes of spare room for that). `align_offset` may decline; the data is then just
/// unaligned and this returns 0.
pub fn align_start(buf: &mut Vec<u8>) -> usize {
    debug_assert!(buf.is_empty());
    let pad = buf.as_ptr().align_offset(ALIGN);
    let pad = if pad < ALIGN { pad } else { 0 };
    buf.resize(pad, 0);
    pad
}

/// A body being received whose data starts on an [`ALIGN`] boundary when it is large
/// (pooled), so a store writing it with `O_DIRECT` can write it straight from memory
/// instead of through a staging copy. Growing past the first capacity may lose the
/// alignment; that only costs the copy again.
#[derive(Debug)]
pub struct BodyBuf {
    buf: Vec<u8>,
    /// Padding before the data.
    pad: usize,
}

impl BodyBuf {
    /// Room for about `len` bytes (see [`take`]).
    pub fn with_capacity(len: usize) -> BodyBuf {
        if len < MIN_POOLED {
            return BodyBuf {
                buf: take(len),
                pad: 0,
            };
        }
        let mut buf = take(len + ALIGN);
        let pad = align_start(&mut buf);
        BodyBuf { buf, pad }
    }

    pub fn extend_from_slice(&mut self, data: &[u8]) {
        self.buf.extend_from_slice(data);
    }

    /// Bytes received so far.
    pub fn len(&self) -> usize {
        self.buf.len() - self.pad
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The data as `Bytes` (see [`freeze`]).
    pub fn freeze(self) -> Bytes {
        let pad = self.pad;
        freeze(self.buf).slice(pad..)
    }
}

struct Pooled(Vec<u8>);

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.0
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        let buf = std::mem::take(&mut self.0);
        let mut idle = idle();
        let held: usize = idle.iter().map(Vec::capacity).sum();
        if held + buf.capacity() <= MAX_IDLE_BYTES {
            idle.push(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back_and_bytes_stay_intact() {
        let mut a = take(MIN_POOLED);
        a.extend_from_slice(&vec![1u8; MIN_POOLED]);
        let cap = a.capacity();
        let ptr = a.as_ptr() as usize;
        let b = freeze(a);
        let slice = b.slice(10..20);
        drop(b);
        // Still borrowed through `slice`: not recycled yet.
        assert_eq!(&slice[..], &[1u8; 10]);
        drop(slice);
        let again = take(cap);
        assert!(again.is_empty() && again.capacity() >= cap);
        // Other tests may race for the pool; only check reuse when we got ours back.
        if again.as_ptr() as usize == ptr {
            assert_eq!(again.capacity(), cap);
        }
        // A small body neither takes a large idle buffer nor enters the pool.
        let big = freeze(again);
        drop(big);
        let small = take(100);
        assert!(small.capacity() < MIN_POOLED, "{}", small.capacity());
    }

    #[test]
    fn large_bodies_start_aligned_and_keep_their_bytes() {
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
        }
        let mut small = BodyBuf::with_capacity(10);
        small.extend_from_slice(b"abc");
        assert_eq!(&small.freeze()[..], b"abc");
    }
}
