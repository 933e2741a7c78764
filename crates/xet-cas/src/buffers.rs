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
}
