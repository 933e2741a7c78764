//! Decoding fetched xorb ranges. This is the only module that calls into `xet-xorb`.
//!
//! A fetched range is a sequence of whole serialized chunks. Headers are walked and
//! validated first (version, scheme, sizes within the chunk limit and within the
//! input), the chunk count must be exactly what the reconstruction says and the total
//! declared size must stay within the protocol's 64 MiB per xorb, all before anything
//! is decompressed ([`layout`]). Then chunks are decompressed in parallel batches, each
//! into a buffer of exactly its declared size (decompression can never produce more;
//! stored chunks are borrowed, not copied), every chunk is hashed, and each batch is
//! handed to a sink that writes it where it belongs ([`decode_batches`]); no buffer of
//! the range's decoded size exists beyond one batch.

use rayon::prelude::*;
use xet_hash::MerkleHash;
use xet_xorb::{
    CHUNK_HEADER_LEN, CompressionScheme, MAX_XORB_BODY_BYTES, MAX_XORB_CHUNKS,
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

/// The validated chunk headers of one fetched range.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Layout {
    chunks: Vec<RawRef>,
    /// End offset of each chunk in the decompressed stream.
    pub ends: Vec<u64>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct RawRef {
    payload: (usize, usize),
    scheme: CompressionScheme,
    size: u32,
}

impl Layout {
    pub fn num_chunks(&self) -> usize {
        self.ends.len()
    }
    /// Offset of chunk `i` in the decompressed stream.
    pub fn start_of(&self, i: usize) -> u64 {
        if i == 0 { 0 } else { self.ends[i - 1] }
    }
    pub fn size(&self, i: usize) -> u32 {
        self.chunks[i].size
    }
    /// Decompressed length of chunks `a..b`.
    pub fn len_of(&self, a: usize, b: usize) -> u64 {
        self.start_of(b) - self.start_of(a)
    }
}

/// Why a range could not be decoded, or the sink refused a chunk.
#[derive(Debug)]
pub(crate) enum EachError<E> {
    Decode(DecodeError),
    Sink(E),
}

/// Pass 1: walk and validate the chunk headers of `bytes`, which must hold exactly
/// `expected_chunks` whole chunks whose declared sizes stay within one xorb's limits.
/// Nothing is decompressed or allocated in proportion to declared sizes.
pub(crate) fn layout(bytes: &[u8], expected_chunks: usize) -> Result<Layout, DecodeError> {
    if bytes.len() as u64 > MAX_XORB_BODY_BYTES {
        return Err(err(
            None,
            format!("{} bytes is more than any xorb can hold", bytes.len()),
        ));
    }
    if expected_chunks > MAX_XORB_CHUNKS {
        return Err(err(
            None,
            format!("{expected_chunks} chunks is more than a xorb can hold"),
        ));
    }
    let mut chunks = Vec::with_capacity(expected_chunks);
    let mut ends = Vec::with_capacity(expected_chunks);
    let mut total: u64 = 0;
    for c in xet_xorb::chunks(bytes) {
        let c = c.map_err(|e| err(xorb_error_chunk(&e), e.to_string()))?;
        if c.index >= expected_chunks {
            return Err(err(
                Some(c.index),
                format!(
                    "range holds more than the {expected_chunks} chunks the reconstruction lists"
                ),
            ));
        }
        total += u64::from(c.header.uncompressed_size);
        if total > MAX_XORB_UNPACKED_BYTES {
            return Err(err(
                Some(c.index),
                format!("chunks decompress to more than {MAX_XORB_UNPACKED_BYTES} bytes"),
            ));
        }
        let start = c.offset as usize + CHUNK_HEADER_LEN;
        chunks.push(RawRef {
            payload: (start, start + c.payload.len()),
            scheme: c.header.scheme,
            size: c.header.uncompressed_size,
        });
        ends.push(total);
    }
    if chunks.len() != expected_chunks {
        return Err(err(
            None,
            format!(
                "range holds {} whole chunks, the reconstruction lists {expected_chunks}",
                chunks.len()
            ),
        ));
    }
    Ok(Layout { chunks, ends })
}

thread_local! {
    /// Per-thread decompression scratch, reused for every chunk.
    static SCRATCH: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };
}

/// One decoded chunk: stored chunks are borrowed from the fetched bytes as they are,
/// compressed ones are decompressed into their own buffer.
pub(crate) enum Piece<'a> {
    Stored(&'a [u8]),
    Decoded(Vec<u8>),
}

impl Piece<'_> {
    pub fn bytes(&self) -> &[u8] {
        match self {
            Piece::Stored(b) => b,
            Piece::Decoded(v) => v,
        }
    }
}

/// Decode `layout` in batches of about `batch_bytes` decompressed bytes: each batch is
/// decompressed and hashed in parallel, then handed in order to `sink(first chunk index,
/// pieces)` on the calling thread, so the sink can write a batch with one vectored
/// write instead of one write per chunk from many threads. Stored (uncompressed) chunks
/// are never copied. Returns the chunk hashes in order. Call from a blocking context.
pub(crate) fn decode_batches<E: Send>(
    bytes: &[u8],
    layout: &Layout,
    batch_bytes: u64,
    mut sink: impl FnMut(usize, &[Piece<'_>]) -> Result<(), E>,
) -> Result<Vec<MerkleHash>, EachError<E>> {
    let n = layout.num_chunks();
    let mut hashes = Vec::with_capacity(n);
    let mut a = 0;
    while a < n {
        let mut b = a + 1;
        while b < n && layout.len_of(a, b + 1) <= batch_bytes {
            b += 1;
        }
        let decoded: Vec<(MerkleHash, Piece<'_>)> = (a..b)
            .into_par_iter()
            .map(|i| {
                let c = layout.chunks[i];
                let payload = &bytes[c.payload.0..c.payload.1];
                // A stored chunk of the wrong length goes through the decoder for its error.
                let piece =
                    if c.scheme == CompressionScheme::None && payload.len() == c.size as usize {
                        Piece::Stored(payload)
                    } else {
                        let mut out = vec![0u8; c.size as usize];
                        SCRATCH
                            .with(|scratch| {
                                let scratch = &mut scratch.borrow_mut();
                                xet_xorb::decompress_into(c.scheme, payload, &mut out, scratch)
                            })
                            .map_err(|problem| {
                                EachError::Decode(err(
                                    Some(i),
                                    format!("corrupt {} payload: {problem}", c.scheme.name()),
                                ))
                            })?;
                        Piece::Decoded(out)
                    };
                Ok((xet_hash::chunk_hash(piece.bytes()), piece))
            })
            .collect::<Result<_, _>>()?;
        let (h, pieces): (Vec<MerkleHash>, Vec<Piece<'_>>) = decoded.into_iter().unzip();
        hashes.extend(h);
        sink(a, &pieces).map_err(EachError::Sink)?;
        a = b;
    }
    Ok(hashes)
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

    fn decode_all_in(
        bytes: &[u8],
        n: usize,
        batch: u64,
    ) -> Result<(Vec<Vec<u8>>, Vec<MerkleHash>), DecodeError> {
        let l = layout(bytes, n)?;
        let mut got = Vec::new();
        let hashes = decode_batches(bytes, &l, batch, |first, pieces| -> Result<(), ()> {
            assert_eq!(first, got.len(), "batches arrive in order");
            got.extend(pieces.iter().map(|p| p.bytes().to_vec()));
            Ok(())
        })
        .map_err(|e| match e {
            EachError::Decode(d) => d,
            EachError::Sink(()) => unreachable!(),
        })?;
        Ok((got, hashes))
    }

    fn decode_all(bytes: &[u8], n: usize) -> Result<(Vec<Vec<u8>>, Vec<MerkleHash>), DecodeError> {
        // Every batch size gives the same chunks: one chunk per batch, some, all.
        let all = decode_all_in(bytes, n, u64::MAX)?;
        for batch in [0, 1, 4000, 9000] {
            let (data, hashes) = decode_all_in(bytes, n, batch)?;
            assert_eq!((&data, &hashes), (&all.0, &all.1), "batch {batch}");
        }
        Ok(all)
    }

    #[test]
    fn decodes_and_hashes_every_chunk() {
        let cs = sample_chunks();
        let x = xorb(&cs);
        let bytes = x.chunk_range_bytes(1..4).unwrap();
        let l = layout(bytes, 3).unwrap();
        assert_eq!(l.num_chunks(), 3);
        assert_eq!(l.len_of(0, 3), 5000 + 3600 + 3000);
        assert_eq!((l.start_of(1), l.size(1)), (5000, 3600));
        let (data, hashes) = decode_all(bytes, 3).unwrap();
        for i in 0..3 {
            assert_eq!(data[i], cs[i + 1]);
            assert_eq!(hashes[i], xet_hash::chunk_hash(&cs[i + 1]));
        }
    }

    #[test]
    fn wrong_chunk_count_is_an_error() {
        let x = xorb(&sample_chunks());
        let body = x.body();
        assert!(layout(body, 3).unwrap_err().message.contains("more than"));
        assert!(
            layout(body, 5)
                .unwrap_err()
                .message
                .contains("4 whole chunks")
        );
    }

    #[test]
    fn corrupt_data_names_the_chunk() {
        let x = xorb(&sample_chunks());
        let mut body = x.body().to_vec();
        let second = x.info().chunks[1].offset as usize;
        body[second + 4] = 9; // unknown scheme
        assert_eq!(layout(&body, 4).unwrap_err().chunk, Some(1));
        // A truncated range fails too.
        assert_eq!(
            layout(&x.body()[..x.body().len() - 3], 4)
                .unwrap_err()
                .chunk,
            Some(3)
        );
        // A damaged LZ4 payload fails in pass 2 (chunk 2 compresses well).
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
        let l = layout(x.body(), 4).unwrap();
        let mut calls = 0;
        let r = decode_batches(x.body(), &l, 1, |first, _| {
            calls += 1;
            if first == 2 { Err("full") } else { Ok(()) }
        });
        assert_eq!(calls, 3);
        assert!(matches!(r, Err(EachError::Sink("full"))));
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
