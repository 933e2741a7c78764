//! Decoding fetched xorb ranges. This is the only module that calls into `xet-xorb`.
//!
//! A fetched range is a sequence of whole serialized chunks. Headers are walked and
//! validated first (version, scheme, sizes within the chunk limit and within the
//! input), the chunk count must be exactly what the reconstruction says and the total
//! declared size must stay within the protocol's 64 MiB per xorb, all before anything
//! is decompressed ([`layout`]). Then chunks are decompressed in parallel, each into a
//! reused per-thread buffer of exactly its declared size (decompression can never
//! produce more), every decompressed chunk is hashed, and handed to a sink that writes
//! it where it belongs ([`decode_each`]); no buffer of the range's decoded size exists.

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
    /// Per-thread chunk buffer and decompression scratch, reused for every chunk.
    static BUFS: std::cell::RefCell<(Vec<u8>, Vec<u8>)> = const { std::cell::RefCell::new((Vec::new(), Vec::new())) };
}

/// Pass 2: decompress every chunk of `layout` (in parallel, each into a reused
/// per-thread buffer of exactly its declared size), hash it, and hand `(index, data)`
/// to `sink`. Returns the chunk hashes in order. No buffer proportional to the range is
/// allocated. Call from a blocking context.
pub(crate) fn decode_each<E: Send>(
    bytes: &[u8],
    layout: &Layout,
    sink: impl Fn(usize, &[u8]) -> Result<(), E> + Sync,
) -> Result<Vec<MerkleHash>, EachError<E>> {
    (0..layout.num_chunks())
        .into_par_iter()
        .map(|i| {
            let c = layout.chunks[i];
            BUFS.with(|b| {
                let (out, scratch) = &mut *b.borrow_mut();
                out.clear();
                out.resize(c.size as usize, 0);
                xet_xorb::decompress_into(c.scheme, &bytes[c.payload.0..c.payload.1], out, scratch)
                    .map_err(|problem| {
                        EachError::Decode(err(
                            Some(i),
                            format!("corrupt {} payload: {problem}", c.scheme.name()),
                        ))
                    })?;
                let h = xet_hash::chunk_hash(out);
                sink(i, out).map_err(EachError::Sink)?;
                Ok(h)
            })
        })
        .collect()
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
    use std::sync::Mutex;
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

    fn decode_all(bytes: &[u8], n: usize) -> Result<(Vec<Vec<u8>>, Vec<MerkleHash>), DecodeError> {
        let l = layout(bytes, n)?;
        let got = Mutex::new(vec![Vec::new(); n]);
        let hashes = decode_each(bytes, &l, |i, d| -> Result<(), ()> {
            got.lock().unwrap()[i] = d.to_vec();
            Ok(())
        })
        .map_err(|e| match e {
            EachError::Decode(d) => d,
            EachError::Sink(()) => unreachable!(),
        })?;
        Ok((got.into_inner().unwrap(), hashes))
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
        let r = decode_each(
            x.body(),
            &l,
            |i, _| if i == 2 { Err("full") } else { Ok(()) },
        );
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
