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
        if cap == self.size
            && let Some(mut v) = self.bufs.lock().unwrap_or_else(|p| p.into_inner()).pop()
        {
            v.clear();
            return v;
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

    /// `v` as `Bytes` that return the buffer to the pool when the last reference drops;
    /// a buffer of another size is cut to its length first, since a chunk kept as a
    /// slice of it holds all of it (a 64 KiB buffer for a file of 100 bytes).
    pub fn to_bytes(&self, mut v: Vec<u8>) -> Bytes {
        if v.capacity() != self.size {
            v.shrink_to_fit();
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

/// Recycled buffers for xorb bodies built in one piece, for a CAS that does not take them
/// in pieces (the embedded store) ([`xet_mmap::IoBuf`] in ordinary pages): page-aligned,
/// so the embedded store writes a body with `O_DIRECT` straight from it. Not in huge
/// pages: an upload uses each body only a few times, and on the bench VM faulting
/// fresh huge pages in cost more than pinning small ones saves (a 1 GiB upload to `xet
/// serve` took 1.76-1.77 s of wall and 3.16-3.17 s of CPU, client and server, with small
/// pages against 2.05-2.12 s and 3.83-3.93 s with huge ones).
#[derive(Clone)]
pub(crate) struct BodyPool {
    bufs: Arc<Mutex<Vec<xet_mmap::IoBuf>>>,
    size: usize,
    max: usize,
}

/// A body being built in a pooled buffer: `len` bytes of `buf` are filled.
pub(crate) struct Body {
    buf: xet_mmap::IoBuf,
    len: usize,
}

impl Body {
    /// Append `data`; `false` (and nothing appended) if it does not fit.
    pub fn push(&mut self, data: &[u8]) -> bool {
        let Some(dst) = self.buf.get_mut(self.len..self.len + data.len()) else {
            return false;
        };
        dst.copy_from_slice(data);
        self.len += data.len();
        true
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.len
    }
}

impl BodyPool {
    /// At most `max` idle buffers of `size` bytes.
    pub fn new(size: usize, max: usize) -> Self {
        BodyPool {
            bufs: Arc::new(Mutex::new(Vec::new())),
            size,
            max,
        }
    }

    /// An empty body, in a recycled buffer when one is idle.
    pub fn get(&self) -> std::io::Result<Body> {
        let idle = self.bufs.lock().unwrap_or_else(|p| p.into_inner()).pop();
        let buf = match idle {
            Some(b) => b,
            None => xet_mmap::IoBuf::new_small_pages(self.size)?,
        };
        Ok(Body { buf, len: 0 })
    }

    /// The body as `Bytes` that return its buffer to the pool when the last reference
    /// drops.
    pub fn to_bytes(&self, body: Body) -> Bytes {
        Bytes::from_owner(PooledBody {
            body: Some(body),
            pool: self.clone(),
        })
    }
}

struct PooledBody {
    body: Option<Body>,
    pool: BodyPool,
}

impl AsRef<[u8]> for PooledBody {
    fn as_ref(&self) -> &[u8] {
        self.body.as_ref().map_or(&[], |b| &b.buf[..b.len])
    }
}

impl Drop for PooledBody {
    fn drop(&mut self) {
        if let Some(b) = self.body.take() {
            let mut bufs = self.pool.bufs.lock().unwrap_or_else(|p| p.into_inner());
            if bufs.len() < self.pool.max {
                bufs.push(b.buf);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_fill_up_to_their_size_and_come_back() {
        let pool = BodyPool::new(10, 1);
        let mut b = pool.get().unwrap();
        assert!(b.push(&[1, 2, 3]) && b.push(&[4; 7]));
        assert!(!b.push(&[5]), "full at 10 bytes");
        assert_eq!(b.len(), 10);
        let ptr = b.buf.as_ptr();
        let bytes = pool.to_bytes(b);
        assert_eq!(&bytes[..], &[1, 2, 3, 4, 4, 4, 4, 4, 4, 4]);
        assert_eq!(bytes.as_ptr() as usize % 4096, 0);
        let s = bytes.slice(2..4);
        drop(bytes);
        assert_eq!(&s[..], &[3, 4]);
        drop(s);
        let again = pool.get().unwrap();
        assert_eq!((again.buf.as_ptr(), again.len()), (ptr, 0));
    }

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
        // Not the pool's size: cut to its length, not held whole by its slices.
        let mut small = pool.get(4096);
        small.extend_from_slice(&[1, 2, 3]);
        assert_eq!(Vec::from(pool.to_bytes(small)).capacity(), 3);
    }
}
