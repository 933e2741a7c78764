//! Recycled large buffers. Fresh multi-megabyte allocations are served by the kernel as
//! zeroed pages, one fault per page; recycling read blocks and xorb bodies removes
//! that cost (about a third of the CPU time of an upload otherwise).

use std::sync::{Arc, Mutex};

use bytes::Bytes;

#[derive(Debug, Clone)]
pub(crate) struct BufPool {
    bufs: Arc<Mutex<Vec<Vec<u8>>>>,
    /// Only buffers of exactly this capacity are kept...
    size: usize,
    /// ... and at most this many.
    max: usize,
}

impl BufPool {
    pub fn new(size: usize, max: usize) -> Self {
        BufPool {
            bufs: Arc::new(Mutex::new(Vec::new())),
            size,
            max,
        }
    }

    /// An empty buffer with capacity for at least `cap` bytes (a recycled one when
    /// `cap` is the pool's size).
    pub fn get(&self, cap: usize) -> Vec<u8> {
        if cap == self.size {
            if let Some(mut v) = self.bufs.lock().unwrap_or_else(|p| p.into_inner()).pop() {
                v.clear();
                return v;
            }
        }
        Vec::with_capacity(cap)
    }

    /// Give a buffer back (dropped unless it has the pool's size and there is room).
    pub fn put(&self, v: Vec<u8>) {
        if v.capacity() == self.size {
            let mut bufs = self.bufs.lock().unwrap_or_else(|p| p.into_inner());
            if bufs.len() < self.max {
                bufs.push(v);
            }
        }
    }

    /// `v` as `Bytes` that return the buffer to the pool when the last reference drops.
    pub fn to_bytes(&self, v: Vec<u8>) -> Bytes {
        if v.capacity() != self.size {
            return Bytes::from(v);
        }
        Bytes::from_owner(Pooled {
            buf: v,
            pool: self.clone(),
        })
    }
}

struct Pooled {
    buf: Vec<u8>,
    pool: BufPool,
}

impl AsRef<[u8]> for Pooled {
    fn as_ref(&self) -> &[u8] {
        &self.buf
    }
}

impl Drop for Pooled {
    fn drop(&mut self) {
        self.pool.put(std::mem::take(&mut self.buf));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_come_back() {
        let pool = BufPool::new(1024, 2);
        let mut v = pool.get(1024);
        v.extend_from_slice(&[1, 2, 3]);
        let ptr = v.as_ptr();
        let b = pool.to_bytes(v);
        let s = b.slice(1..2);
        drop(b);
        assert_eq!(&s[..], &[2]);
        drop(s);
        let v = pool.get(1024);
        assert_eq!(v.as_ptr(), ptr);
        assert!(v.is_empty());
        assert_eq!(pool.get(10).capacity(), 10);
    }
}
