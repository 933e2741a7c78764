//! Decoding fetched xorb ranges. This is the only module that calls into `xet-xorb`.
//!
//! A fetched range is a sequence of whole serialized chunks. [`RangeDecoder`] takes it
//! in pieces as they arrive from the network (or as one piece from a local store) and
//! decodes each chunk once its last byte is in: its header is validated first
//! (version, scheme, sizes within the chunk limit and within the range), the chunk
//! count may not exceed what the reconstruction says and the total declared size must
//! stay within the protocol's 64 MiB per xorb; then it is decompressed into a buffer
//! of exactly its declared size (decompression can never produce more; stored chunks
//! are borrowed, not copied), hashed, and handed in batches to a sink that writes it
//! where it belongs. No buffer of the range's decoded size exists beyond one batch.

use bytes::Bytes;
use rayon::prelude::*;
use xet_hash::MerkleHash;
use xet_xorb::{
    CHUNK_HEADER_LEN, ChunkHeader, CompressionScheme, MAX_XORB_BODY_BYTES, MAX_XORB_CHUNKS,
    MAX_XORB_UNPACKED_BYTES, XorbError,
};

/// Why a range could not be decoded. `chunk` is relative to the start of the range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DecodeError {
    pub chunk: Option<usize>,
    pub message: String,
}

fn xorb_error_chunk(e: &XorbError) -> Option<usize> {
    use XorbError::*;
    match e {
        ChunkVersion { chunk, .. }
        | UnknownScheme { chunk, .. }
        | UncompressedSize { chunk, .. }
        | CompressedSize { chunk, .. }
        | StoredSizeMismatch { chunk, .. }
        | CorruptPayload { chunk, .. }
        | UnpackedTooLarge { chunk, .. }
        | ChunkHash { chunk, .. }
        | FooterBoundary { chunk, .. }
        | FooterChunkSize { chunk, .. } => Some(*chunk),
        _ => None,
    }
}

fn err(chunk: Option<usize>, message: impl Into<String>) -> DecodeError {
    DecodeError {
        chunk,
        message: message.into(),
    }
}

/// Why a range could not be decoded, or the sink refused a chunk.
#[derive(Debug)]
pub(crate) enum EachError<E> {
    Decode(DecodeError),
    Sink(E),
}

impl<E> From<DecodeError> for EachError<E> {
    fn from(d: DecodeError) -> Self {
        EachError::Decode(d)
    }
}

thread_local! {
    /// Per-thread decompression scratch, reused for every chunk.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One decoded chunk: a stored chunk is a slice of the fetched bytes as they came,
/// a compressed one is decompressed into its own buffer.
pub(crate) enum Piece {
    Stored(Bytes),
    Decoded(Vec<u8>),
}

impl Piece {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Piece::Stored(b) => b,
            Piece::Decoded(v) => v,
        }
    }
}

/// A chunk whose serialized bytes have all arrived, header validated.
struct Arrived {
    payload: Bytes,
    scheme: CompressionScheme,
    size: u32,
}

/// Chunks decoded on the calling thread below this many bytes at once; above it, in
/// parallel on rayon (a range that arrives whole is decoded on both cores, a stream's
/// few chunks per piece without a hand-off to the pool).
const PARALLEL_MIN: u64 = 1 << 20;

/// The sink a [`RangeDecoder`] hands decoded chunks to: `(index of the first chunk,
/// the chunks, end offset of every chunk seen so far in the decompressed stream)`.
pub(crate) trait Sink<E>: FnMut(usize, &[Piece], &[u64]) -> Result<(), E> {}
impl<E, F: FnMut(usize, &[Piece], &[u64]) -> Result<(), E>> Sink<E> for F {}

/// Decodes one fetched range of serialized chunks from pieces fed in order, as they
/// arrive: each chunk is decoded and hashed as soon as its last byte is in, and the
/// decoded chunks are handed to a sink in batches of about `batch_bytes`.
///
/// The checks are those of a range decoded whole, made as the bytes come: every
/// header (version, scheme, sizes within the chunk limit and within the range's
/// `total` length) before its payload is touched, at most `expected` chunks, at most
/// 64 MiB declared in all, each chunk decompressed into a buffer of exactly its
/// declared size (no decompression bomb can produce more), and at the end exactly
/// `expected` whole chunks and `total` bytes. Only a chunk whose bytes arrive in more
/// than one piece is copied (into one buffer, once); stored chunks are otherwise
/// slices of the pieces. Call from a blocking context.
pub(crate) struct RangeDecoder {
    total: u64,
    expected: usize,
    batch_bytes: u64,
    /// Bytes of the range fed so far.
    fed: u64,
    /// The start of a chunk whose bytes span pieces: its offset in the range, its
    /// header once all 8 bytes are in, and its bytes so far.
    carry_at: u64,
    carry_header: Option<ChunkHeader>,
    carry: Vec<u8>,
    /// Decompressed end offset of every chunk whose header was read.
    ends: Vec<u64>,
    /// Hashes of the chunks decoded so far (zero after [`RangeDecoder::without_hashes`]).
    hashes: Vec<MerkleHash>,
    /// Whether each chunk is hashed (what a download verifies; a stream checks no hash).
    hash: bool,
    /// Decoded chunks not yet handed to the sink; the first is chunk `batch_first`.
    batch: Vec<Piece>,
    batch_first: usize,
    batch_len: u64,
    /// Chunks complete but not yet decoded (within one `feed`).
    arrived: Vec<Arrived>,
}

impl RangeDecoder {
    /// A decoder for a range of `total` bytes that must hold exactly `expected` chunks.
    pub fn new(total: u64, expected: usize, batch_bytes: u64) -> Result<Self, DecodeError> {
        if total > MAX_XORB_BODY_BYTES {
            return Err(err(
                None,
                format!("{total} bytes is more than any xorb can hold"),
            ));
        }
        if expected > MAX_XORB_CHUNKS {
            return Err(err(
                None,
                format!("{expected} chunks is more than a xorb can hold"),
            ));
        }
        Ok(RangeDecoder {
            total,
            expected,
            batch_bytes,
            fed: 0,
            carry_at: 0,
            carry_header: None,
            carry: Vec::new(),
            ends: Vec::with_capacity(expected),
            hashes: Vec::with_capacity(expected),
            hash: true,
            batch: Vec::new(),
            batch_first: 0,
            batch_len: 0,
            arrived: Vec::new(),
        })
    }

    /// Leave the chunks unhashed (their hashes all zero): for a caller that checks no
    /// hash, so as not to pay for them.
    pub fn without_hashes(mut self) -> Self {
        self.hash = false;
        self
    }

    /// Bytes of the range fed so far.
    pub fn fed(&self) -> u64 {
        self.fed
    }

    /// Take the next piece of the range: decode every chunk it completes, handing full
    /// batches to `sink`.
    pub fn feed<E>(&mut self, data: Bytes, sink: &mut impl Sink<E>) -> Result<(), EachError<E>> {
        let base = self.fed;
        if data.len() as u64 > self.total - base {
            return Err(err(
                None,
                format!(
                    "more than the {} bytes of the range arrived (a piece of {} at byte {base})",
                    self.total,
                    data.len()
                ),
            )
            .into());
        }
        self.fed += data.len() as u64;
        let mut pos = 0usize;
        // The end of a chunk that began in an earlier piece.
        if !self.carry.is_empty() {
            if self.carry_header.is_none() {
                let take = (CHUNK_HEADER_LEN - self.carry.len()).min(data.len());
                self.carry.extend_from_slice(&data[..take]);
                pos = take;
                if self.carry.len() < CHUNK_HEADER_LEN {
                    return Ok(());
                }
                let hb: [u8; CHUNK_HEADER_LEN] = self.carry[..CHUNK_HEADER_LEN]
                    .try_into()
                    .expect("a whole header");
                let h = self.header(&hb, self.carry_at)?;
                self.carry
                    .reserve_exact(h.serialized_len() - self.carry.len());
                self.carry_header = Some(h);
            }
            let need = self.carry_header.expect("header read").serialized_len();
            let take = (need - self.carry.len()).min(data.len() - pos);
            self.carry.extend_from_slice(&data[pos..pos + take]);
            pos += take;
            if self.carry.len() < need {
                return Ok(());
            }
            let h = self.carry_header.take().expect("header read");
            let whole = Bytes::from(std::mem::take(&mut self.carry));
            self.arrived.push(Arrived {
                payload: whole.slice(CHUNK_HEADER_LEN..),
                scheme: h.scheme,
                size: h.uncompressed_size,
            });
        }
        // Chunks that lie in this piece, and the start of one that goes on past it.
        while pos < data.len() {
            let at = base + pos as u64;
            let rest = &data[pos..];
            let Some(hb) = rest.first_chunk::<CHUNK_HEADER_LEN>() else {
                self.carry_at = at;
                self.carry.extend_from_slice(rest);
                break;
            };
            let h = self.header(hb, at)?;
            let need = h.serialized_len();
            if rest.len() < need {
                self.carry_at = at;
                self.carry.reserve_exact(need);
                self.carry.extend_from_slice(rest);
                self.carry_header = Some(h);
                break;
            }
            self.arrived.push(Arrived {
                payload: data.slice(pos + CHUNK_HEADER_LEN..pos + need),
                scheme: h.scheme,
                size: h.uncompressed_size,
            });
            pos += need;
        }
        self.decode_arrived(sink)
    }

    /// The range is complete: check it, hand over the last batch, and return every
    /// chunk's hash and the decompressed end offset of every chunk.
    pub fn finish<E>(
        mut self,
        sink: &mut impl Sink<E>,
    ) -> Result<(Vec<MerkleHash>, Vec<u64>), EachError<E>> {
        if self.fed < self.total {
            return Err(err(
                None,
                format!(
                    "the range ended after {} of its {} bytes",
                    self.fed, self.total
                ),
            )
            .into());
        }
        if !self.carry.is_empty() {
            // A header can only promise what fits in the range, so what is left over
            // is a header cut short by the end of the range.
            let e = XorbError::Truncated {
                what: "chunk header",
                offset: self.carry_at,
                needed: CHUNK_HEADER_LEN as u64,
                available: self.carry.len() as u64,
            };
            return Err(err(xorb_error_chunk(&e), e.to_string()).into());
        }
        if self.ends.len() != self.expected {
            return Err(err(
                None,
                format!(
                    "range holds {} whole chunks, the reconstruction lists {}",
                    self.ends.len(),
                    self.expected
                ),
            )
            .into());
        }
        self.flush(sink)?;
        Ok((self.hashes, self.ends))
    }

    /// Validate the header of the next chunk, found at `at` in the range.
    fn header(&mut self, hb: &[u8; CHUNK_HEADER_LEN], at: u64) -> Result<ChunkHeader, DecodeError> {
        let index = self.ends.len();
        let after = self.total - at - CHUNK_HEADER_LEN as u64;
        let h = ChunkHeader::parse(hb, index, at, after)
            .map_err(|e| err(xorb_error_chunk(&e), e.to_string()))?;
        if index >= self.expected {
            return Err(err(
                Some(index),
                format!(
                    "range holds more than the {} chunks the reconstruction lists",
                    self.expected
                ),
            ));
        }
        let end = self.ends.last().copied().unwrap_or(0) + u64::from(h.uncompressed_size);
        if end > MAX_XORB_UNPACKED_BYTES {
            return Err(err(
                Some(index),
                format!("chunks decompress to more than {MAX_XORB_UNPACKED_BYTES} bytes"),
            ));
        }
        self.ends.push(end);
        Ok(h)
    }

    /// Decode the arrived chunks in runs of at most a batch, hand full batches over.
    fn decode_arrived<E>(&mut self, sink: &mut impl Sink<E>) -> Result<(), EachError<E>> {
        let mut arrived = std::mem::take(&mut self.arrived);
        let mut rest = &mut arrived[..];
        while !rest.is_empty() {
            let mut n = 1;
            let mut len = u64::from(rest[0].size);
            while n < rest.len() && len + u64::from(rest[n].size) <= self.batch_bytes {
                len += u64::from(rest[n].size);
                n += 1;
            }
            let (run, tail) = rest.split_at_mut(n);
            rest = tail;
            let first = self.hashes.len();
            let hash = self.hash;
            let decode = |(k, a): (usize, &mut Arrived)| decode_chunk(first + k, a, hash);
            let decoded: Vec<(MerkleHash, Piece)> = if len < PARALLEL_MIN {
                run.iter_mut()
                    .enumerate()
                    .map(decode)
                    .collect::<Result<_, _>>()?
            } else {
                run.par_iter_mut()
                    .enumerate()
                    .map(decode)
                    .collect::<Result<_, _>>()?
            };
            for (h, piece) in decoded {
                self.hashes.push(h);
                self.batch_len += piece.bytes().len() as u64;
                self.batch.push(piece);
            }
            if self.batch_len >= self.batch_bytes {
                self.flush(sink)?;
            }
        }
        arrived.clear();
        self.arrived = arrived;
        Ok(())
    }

    fn flush<E>(&mut self, sink: &mut impl Sink<E>) -> Result<(), EachError<E>> {
        if !self.batch.is_empty() {
            sink(self.batch_first, &self.batch, &self.ends).map_err(EachError::Sink)?;
            self.batch_first += self.batch.len();
            self.batch.clear();
            self.batch_len = 0;
        }
        Ok(())
    }
}

/// Decompress (unless stored) and hash (if `hash`; else a zero hash) chunk `index`.
fn decode_chunk(
    index: usize,
    a: &mut Arrived,
    hash: bool,
) -> Result<(MerkleHash, Piece), DecodeError> {
    // A stored chunk of the wrong length goes through the decoder for its error.
    let piece = if a.scheme == CompressionScheme::None && a.payload.len() == a.size as usize {
        Piece::Stored(std::mem::take(&mut a.payload))
    } else {
        let mut out = vec![0u8; a.size as usize];
        SCRATCH
            .with(|scratch| {
                let scratch = &mut scratch.borrow_mut();
                xet_xorb::decompress_into(a.scheme, &a.payload, &mut out, scratch)
            })
            .map_err(|problem| {
                err(
                    Some(index),
                    format!("corrupt {} payload: {problem}", a.scheme.name()),
                )
            })?;
        Piece::Decoded(out)
    };
    let h = if hash {
        xet_hash::chunk_hash(piece.bytes())
    } else {
        MerkleHash::default()
    };
    Ok((h, piece))
}

/// Hash each of `sizes` consecutive chunks of `data` (in parallel).
pub(crate) fn hash_chunks(data: &[u8], sizes: &[u32]) -> Option<Vec<MerkleHash>> {
    let total: u64 = sizes.iter().map(|&s| u64::from(s)).sum();
    if total != data.len() as u64 {
        return None;
    }
    let mut parts = Vec::with_capacity(sizes.len());
    let mut rest = data;
    for &s in sizes {
        let (a, b) = rest.split_at(s as usize);
        parts.push(a);
        rest = b;
    }
    Some(parts.par_iter().map(|p| xet_hash::chunk_hash(p)).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use xet_xorb::XorbBuilder;

    fn xorb(chunks: &[Vec<u8>]) -> xet_xorb::Xorb {
        let mut b = XorbBuilder::new();
        for c in chunks {
            b.add_chunk(c).unwrap();
        }
        b.finish().unwrap()
    }

    fn sample_chunks() -> Vec<Vec<u8>> {
        vec![
            vec![7u8; 1000],
            (0..5000u32).map(|i| (i * 7919 % 251) as u8).collect(),
            b"hello world ".repeat(300),
            (0..3000u32)
                .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
                .collect(),
        ]
    }

    /// What a decode produced: every chunk's data (in sink order), the hashes and
    /// ends, and the sink calls `(first, count)`.
    type Decoded = (Vec<Vec<u8>>, Vec<MerkleHash>, Vec<u64>, Vec<(usize, usize)>);

    /// Decode `bytes` fed as the pieces that `cuts` (offsets) make.
    fn decode_split(
        bytes: &[u8],
        n: usize,
        batch: u64,
        cuts: &[usize],
    ) -> Result<Decoded, DecodeError> {
        let mut d = RangeDecoder::new(bytes.len() as u64, n, batch)?;
        let mut got = Vec::new();
        let mut calls = Vec::new();
        let mut sink = |first: usize, pieces: &[Piece], ends: &[u64]| -> Result<(), ()> {
            assert_eq!(first, got.len(), "batches arrive in order");
            assert!(ends.len() >= first + pieces.len(), "ends cover the batch");
            calls.push((first, pieces.len()));
            got.extend(pieces.iter().map(|p| p.bytes().to_vec()));
            Ok(())
        };
        let unwrap = |e: EachError<()>| match e {
            EachError::Decode(d) => d,
            EachError::Sink(()) => unreachable!(),
        };
        let whole = Bytes::copy_from_slice(bytes);
        let mut at = 0;
        let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(bytes.len())).collect();
        cuts.sort_unstable();
        cuts.push(bytes.len());
        for c in cuts {
            if c > at {
                d.feed(whole.slice(at..c), &mut sink).map_err(unwrap)?;
                at = c;
            }
        }
        let (hashes, ends) = d.finish(&mut sink).map_err(unwrap)?;
        Ok((got, hashes, ends, calls))
    }

    fn decode_all(bytes: &[u8], n: usize) -> Result<Decoded, DecodeError> {
        // Every batch size and every way of cutting the range gives the same chunks.
        let all = decode_split(bytes, n, u64::MAX, &[])?;
        for batch in [0, 1, 4000, 9000] {
            for cuts in [
                vec![],
                vec![1],
                vec![7, 8, 9],
                (0..bytes.len()).step_by(1000).collect(),
            ] {
                let (data, hashes, ends, _) = decode_split(bytes, n, batch, &cuts)?;
                assert_eq!(
                    (&data, &hashes, &ends),
                    (&all.0, &all.1, &all.2),
                    "batch {batch}, cuts {cuts:?}"
                );
            }
        }
        Ok(all)
    }

    #[test]
    fn decodes_and_hashes_every_chunk() {
        let cs = sample_chunks();
        let x = xorb(&cs);
        let bytes = x.chunk_range_bytes(1..4).unwrap();
        let (data, hashes, ends, _) = decode_all(bytes, 3).unwrap();
        assert_eq!(ends, vec![5000, 8600, 11600]);
        for i in 0..3 {
            assert_eq!(data[i], cs[i + 1]);
            assert_eq!(hashes[i], xet_hash::chunk_hash(&cs[i + 1]));
        }
    }

    #[test]
    fn without_hashes_decodes_the_same_chunks_unhashed() {
        let cs = sample_chunks();
        let x = xorb(&cs);
        let bytes = Bytes::copy_from_slice(x.body());
        let mut d = RangeDecoder::new(bytes.len() as u64, 4, u64::MAX)
            .unwrap()
            .without_hashes();
        let mut got = Vec::new();
        let mut sink = |_: usize, pieces: &[Piece], _: &[u64]| -> Result<(), ()> {
            got.extend(pieces.iter().map(|p| p.bytes().to_vec()));
            Ok(())
        };
        d.feed(bytes, &mut sink).unwrap();
        let (hashes, ends) = d.finish(&mut sink).unwrap();
        assert_eq!(got, cs);
        assert_eq!(hashes, vec![MerkleHash::default(); 4]);
        assert_eq!(ends.last(), Some(&(cs.concat().len() as u64)));
        // The checks stay: a range cut short is still an error.
        let body = x.body();
        let mut d = RangeDecoder::new(body.len() as u64 - 3, 4, u64::MAX)
            .unwrap()
            .without_hashes();
        let cut = Bytes::copy_from_slice(&body[..body.len() - 3]);
        assert!(
            d.feed(cut, &mut |_: usize, _: &[Piece], _: &[u64]| Ok::<_, ()>(()))
                .and_then(|()| d
                    .finish(&mut |_: usize, _: &[Piece], _: &[u64]| Ok(()))
                    .map(|_| ()))
                .is_err()
        );
    }

    #[test]
    fn batches_are_handed_over_once_they_reach_batch_bytes() {
        let cs = sample_chunks();
        let x = xorb(&cs);
        // Sizes 1000, 5000, 3600, 3000.
        let (_, _, _, calls) = decode_split(x.body(), 4, 6000, &[]).unwrap();
        assert_eq!(calls, vec![(0, 2), (2, 2)]);
        let (_, _, _, calls) = decode_split(x.body(), 4, 1, &[]).unwrap();
        assert_eq!(calls, vec![(0, 1), (1, 1), (2, 1), (3, 1)]);
        // Streamed a byte at a time, chunks are decoded one by one and a batch is
        // handed over once it holds at least `batch_bytes`, and the rest at the end.
        let cuts: Vec<usize> = (0..x.body().len()).collect();
        let (_, _, _, calls) = decode_split(x.body(), 4, 6000, &cuts).unwrap();
        assert_eq!(calls, vec![(0, 2), (2, 2)]);
        let (_, _, _, calls) = decode_split(x.body(), 4, 9000, &cuts).unwrap();
        assert_eq!(calls, vec![(0, 3), (3, 1)]);
    }

    #[test]
    fn wrong_chunk_count_is_an_error() {
        let x = xorb(&sample_chunks());
        let body = x.body();
        assert!(
            decode_all(body, 3)
                .unwrap_err()
                .message
                .contains("more than")
        );
        assert!(
            decode_all(body, 5)
                .unwrap_err()
                .message
                .contains("4 whole chunks")
        );
    }

    #[test]
    fn limits_are_checked_before_anything_is_read() {
        assert!(RangeDecoder::new(MAX_XORB_BODY_BYTES + 1, 1, 1).is_err());
        assert!(RangeDecoder::new(100, MAX_XORB_CHUNKS + 1, 1).is_err());
    }

    #[test]
    fn a_range_that_ends_short_or_runs_long_is_an_error() {
        let x = xorb(&sample_chunks());
        let body = Bytes::copy_from_slice(x.body());
        let mut sink = |_: usize, _: &[Piece], _: &[u64]| -> Result<(), ()> { Ok(()) };
        // Told one byte more than arrives: the end is short.
        let mut d = RangeDecoder::new(body.len() as u64 + 1, 4, 1 << 20).unwrap();
        d.feed(body.clone(), &mut sink).unwrap();
        let e = d.finish(&mut sink).unwrap_err();
        assert!(
            matches!(&e, EachError::Decode(d) if d.message.contains("ended after")),
            "{e:?}"
        );
        // Told one byte less: the piece runs past the range.
        let mut d = RangeDecoder::new(body.len() as u64 - 1, 4, 1 << 20).unwrap();
        let e = d.feed(body, &mut sink).unwrap_err();
        assert!(
            matches!(&e, EachError::Decode(d) if d.message.contains("more than the")),
            "{e:?}"
        );
    }

    #[test]
    fn corrupt_data_names_the_chunk() {
        let x = xorb(&sample_chunks());
        let mut body = x.body().to_vec();
        let second = x.info().chunks[1].offset as usize;
        body[second + 4] = 9; // unknown scheme
        assert_eq!(decode_all(&body, 4).unwrap_err().chunk, Some(1));
        // A truncated range fails too: inside the last chunk, and inside a header.
        let body = x.body();
        assert_eq!(
            decode_all(&body[..body.len() - 3], 4).unwrap_err().chunk,
            Some(3)
        );
        let last = x.info().chunks[3].offset as usize;
        let e = decode_all(&body[..last + 3], 4).unwrap_err();
        assert!(e.message.contains("chunk header"), "{e:?}");
        // A damaged LZ4 payload fails when decoded (chunk 2 compresses well).
        let third = x.info().chunks[2];
        assert_ne!(third.scheme, CompressionScheme::None);
        let mut body = x.body().to_vec();
        for b in &mut body[third.offset as usize + 8..third.offset as usize + 8 + 10] {
            *b = 0xff;
        }
        assert_eq!(decode_all(&body, 4).unwrap_err().chunk, Some(2));
    }

    #[test]
    fn sink_errors_stop_decoding() {
        let x = xorb(&sample_chunks());
        let mut d = RangeDecoder::new(x.body().len() as u64, 4, 1).unwrap();
        let mut calls = 0;
        let r = d.feed(
            Bytes::copy_from_slice(x.body()),
            &mut |first, _: &[Piece], _: &[u64]| {
                calls += 1;
                if first == 2 { Err("full") } else { Ok(()) }
            },
        );
        assert_eq!(calls, 3);
        assert!(matches!(r, Err(EachError::Sink("full"))));
    }

    #[test]
    fn only_chunks_split_across_pieces_are_copied() {
        let mut state = 0x9e37_79b9_7f4a_7c15u64;
        let random: Vec<u8> = (0..3000)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state as u8
            })
            .collect();
        let x = xorb(&[vec![7u8; 1000], random]);
        // The second chunk is random, so it is stored as it is.
        assert_eq!(x.info().chunks[1].scheme, CompressionScheme::None);
        let whole = Bytes::copy_from_slice(x.body());
        let at = x.info().chunks[1].offset as usize;
        let second = at + CHUNK_HEADER_LEN;
        // Cut before the chunk, inside its header, inside its payload.
        for (cut, whole_in_one_piece) in [
            (0, true),
            (at, true),
            (at + 3, false),
            (second + 100, false),
        ] {
            let mut d = RangeDecoder::new(whole.len() as u64, 2, u64::MAX).unwrap();
            let mut borrowed = None;
            let mut sink = |_: usize, pieces: &[Piece], _: &[u64]| -> Result<(), ()> {
                if let Piece::Stored(b) = &pieces[1] {
                    borrowed = Some(b.as_ptr() == whole[second..].as_ptr());
                }
                Ok(())
            };
            if cut > 0 {
                d.feed(whole.slice(..cut), &mut sink).unwrap();
            }
            d.feed(whole.slice(cut..), &mut sink).unwrap();
            d.finish(&mut sink).unwrap();
            // Split across pieces: copied once; otherwise a slice of the piece.
            assert_eq!(borrowed, Some(whole_in_one_piece), "cut at {cut}");
        }
    }

    fn arb_chunk() -> impl Strategy<Value = Vec<u8>> {
        prop_oneof![
            // Compressible, incompressible, byte-grouped floats.
            (1usize..3000, any::<u8>()).prop_map(|(n, b)| vec![b; n]),
            proptest::collection::vec(any::<u8>(), 1..3000),
            proptest::collection::vec(any::<f32>(), 1..700)
                .prop_map(|v| v.iter().flat_map(|f| f.to_le_bytes()).collect()),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(64))]
        /// A range fed in any pieces decodes exactly as the range fed whole, and a
        /// damaged range fails either way.
        #[test]
        fn streamed_equals_whole(
            chunks in proptest::collection::vec(arb_chunk(), 1..12),
            cuts in proptest::collection::vec(any::<prop::sample::Index>(), 0..20),
            batch in 1u64..20_000,
            flip in proptest::option::of((any::<prop::sample::Index>(), 1u8..=255)),
        ) {
            let x = xorb(&chunks);
            let mut body = x.body().to_vec();
            if let Some((i, v)) = flip {
                let i = i.index(body.len());
                body[i] ^= v;
            }
            let cuts: Vec<usize> = cuts.iter().map(|c| c.index(body.len() + 1)).collect();
            let whole = decode_split(&body, chunks.len(), u64::MAX, &[]);
            let split = decode_split(&body, chunks.len(), batch, &cuts);
            match (whole, split) {
                (Ok(w), Ok(s)) => {
                    prop_assert_eq!((&w.0, &w.1, &w.2), (&s.0, &s.1, &s.2));
                    if flip.is_none() {
                        prop_assert_eq!(&w.0, &chunks);
                    }
                }
                (Err(_), Err(_)) => prop_assert!(flip.is_some()),
                (w, s) => prop_assert!(false, "whole {:?} vs split {:?}", w.map(|_| ()), s.map(|_| ())),
            }
        }
    }

    #[test]
    fn hash_chunks_checks_lengths() {
        let cs = sample_chunks();
        let all: Vec<u8> = cs.concat();
        let sizes: Vec<u32> = cs.iter().map(|c| c.len() as u32).collect();
        let h = hash_chunks(&all, &sizes).unwrap();
        assert_eq!(h[2], xet_hash::chunk_hash(&cs[2]));
        assert!(hash_chunks(&all[1..], &sizes).is_none());
    }
}
