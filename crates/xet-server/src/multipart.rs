//! `multipart/byteranges` bodies (RFC 9110 §14.6): the answer to a request for several
//! ranges of one object, each part carrying its own `Content-Range`.

use crate::range::content_range;
use xet_cas::ByteRange;

/// Builds a `multipart/byteranges` body, part by part.
pub struct ByteRangesWriter {
    boundary: String,
    size: u64,
    body: Vec<u8>,
}

impl ByteRangesWriter {
    /// A body of ranges of a `size`-byte object, with a random boundary (random, so that
    /// it cannot be made to occur in the data).
    pub fn new(size: u64) -> Self {
        let b: [u8; 12] = rand::random();
        Self::with_boundary(b.iter().map(|x| format!("{x:02x}")).collect(), size)
    }

    /// As [`ByteRangesWriter::new`], with a given boundary (ASCII, not in the data).
    pub fn with_boundary(boundary: String, size: u64) -> Self {
        ByteRangesWriter {
            boundary,
            size,
            body: Vec::new(),
        }
    }

    /// The `Content-Type` of the body, naming its boundary.
    pub fn content_type(&self) -> String {
        format!("multipart/byteranges; boundary={}", self.boundary)
    }

    /// Append the part holding `data`, bytes `range` of the object.
    pub fn part(&mut self, range: &ByteRange, data: &[u8]) {
        let head = format!(
            "--{}\r\nContent-Type: application/octet-stream\r\nContent-Range: {}\r\n\r\n",
            self.boundary,
            content_range(range, self.size)
        );
        self.body.extend_from_slice(head.as_bytes());
        self.body.extend_from_slice(data);
        self.body.extend_from_slice(b"\r\n");
    }

    /// The whole body, closing delimiter included.
    pub fn finish(mut self) -> Vec<u8> {
        self.body
            .extend_from_slice(format!("--{}--\r\n", self.boundary).as_bytes());
        self.body
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parts_carry_their_ranges_between_boundaries() {
        let mut w = ByteRangesWriter::with_boundary("b0".into(), 10);
        assert_eq!(w.content_type(), "multipart/byteranges; boundary=b0");
        w.part(&ByteRange::new(0, 2), b"ab");
        w.part(&ByteRange::new(8, 10), b"ij");
        let want = "--b0\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 0-1/10\r\n\r\nab\r\n\
                    --b0\r\nContent-Type: application/octet-stream\r\nContent-Range: bytes 8-9/10\r\n\r\nij\r\n\
                    --b0--\r\n";
        assert_eq!(String::from_utf8(w.finish()).unwrap(), want);
    }

    #[test]
    fn random_boundaries_differ() {
        let (a, b) = (ByteRangesWriter::new(1), ByteRangesWriter::new(1));
        assert_ne!(a.content_type(), b.content_type());
        assert_eq!(a.boundary.len(), 24);
    }
}
