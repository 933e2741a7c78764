//! Compressing a sealed xorb on the rayon pool.

use bytes::Bytes;
use rayon::prelude::*;
use xet_cas::XorbPieces;
use xet_hash::MerkleHash;

use crate::dedup::SealedXorb;
use crate::error::{Result, UploadError};
use crate::prepare::{Prepared, prepare};

/// Serialize a sealed xorb at the end of `body`: every chunk [`prepare`]d in parallel
/// (unless the reader did it already, taken from `sealed.prepared`), appended in order:
/// the footer-less upload body. Returns the xorb hash. Call on a rayon thread (or from
/// `rayon::spawn`).
///
/// Only compressed payloads are kept per chunk; a stored chunk goes to `body` as the
/// dedup stage kept it: copied once into a recycled buffer, or, in pieces
/// ([`PiecesSink`]), not copied at all.
pub(crate) fn build_xorb(sealed: &mut SealedXorb, body: &mut impl BodySink) -> Result<MerkleHash> {
    if let Some((i, c)) =
        (sealed.data.iter().enumerate()).find(|(_, c)| c.len() > xet_xorb::MAX_CHUNK_SIZE)
    {
        // The chunker never cuts one this large; a header could not describe it.
        return Err(UploadError::Internal(format!(
            "chunk {i} of a xorb is {} bytes, over the {} limit",
            c.len(),
            xet_xorb::MAX_CHUNK_SIZE
        )));
    }
    let want_crc = body.wants_crc64();
    // Chunks the reader already compressed (see `prepare::Speculation`) are taken as they are.
    let mut prepared = std::mem::take(&mut sealed.prepared);
    prepared.resize_with(sealed.data.len(), || None);
    let built: Vec<Prepared> = prepared
        .into_par_iter()
        .enumerate()
        .map_init(
            || (Vec::new(), Vec::new()),
            |(out, scratch), (i, p)| match p {
                Some(p) if p.crc.is_some() || !want_crc => p,
                _ => {
                    let c = &sealed.data[i][..];
                    // The chunk was last read when its block was hashed, up to a xorb
                    // ago: loading its cache lines first (independent loads) beats having
                    // the predictor and LZ4 wait on each in turn (client CPU 1.86-1.87 s
                    // -> 1.82-1.84 s per GiB sent to `xet serve`).
                    warm(c);
                    prepare(c, want_crc, out, scratch)
                }
            },
        )
        .collect();
    for (i, (b, c)) in built.into_iter().zip(&sealed.data).enumerate() {
        if !body.put_chunk(&b.header, c, b.compressed, b.crc) {
            return Err(UploadError::Internal(format!(
                "xorb body buffer too small at chunk {i}"
            )));
        }
    }
    let entries: Vec<(MerkleHash, u64)> = sealed
        .chunks
        .iter()
        .map(|&(h, l)| (h, u64::from(l)))
        .collect();
    Ok(xet_hash::xorb_hash(&entries))
}

/// Load one byte of every cache line of `piece` (independent loads, which the processor
/// overlaps), so that compressing it does not wait on each line in turn.
fn warm(piece: &[u8]) {
    let x = piece.iter().step_by(64).fold(0u8, |a, &b| a ^ b);
    std::hint::black_box(x);
}

/// Where a xorb body is built, a chunk at a time.
pub(crate) trait BodySink {
    /// Whether [`put_chunk`](Self::put_chunk) wants each chunk's CRC-64/NVME (of its
    /// header and payload).
    fn wants_crc64(&self) -> bool {
        false
    }

    /// Append a chunk's header, then its payload: `compressed` if there is one, else the
    /// chunk's `data` as it is. `crc` is the CRC of both if [`wants_crc64`](Self::wants_crc64).
    /// `false` if it does not fit.
    fn put_chunk(
        &mut self,
        header: &[u8],
        data: &Bytes,
        compressed: Option<Vec<u8>>,
        crc: Option<u64>,
    ) -> bool;
}

/// A body built as one buffer: each chunk's header and payload appended in turn.
pub(crate) trait Contiguous {
    /// Append `bytes`; `false` if they do not fit.
    fn append(&mut self, bytes: &[u8]) -> bool;
}

impl<T: Contiguous> BodySink for T {
    fn put_chunk(
        &mut self,
        header: &[u8],
        data: &Bytes,
        compressed: Option<Vec<u8>>,
        _: Option<u64>,
    ) -> bool {
        self.append(header) && self.append(compressed.as_deref().unwrap_or(data))
    }
}

/// The page-aligned body the embedded store writes straight to disk.
impl Contiguous for crate::pool::Body {
    fn append(&mut self, bytes: &[u8]) -> bool {
        self.push(bytes)
    }
}

/// A growable body (the tests' reference for the other sinks).
#[cfg(test)]
impl Contiguous for Vec<u8> {
    fn append(&mut self, bytes: &[u8]) -> bool {
        self.extend_from_slice(bytes);
        true
    }
}

/// A body as pieces ([`XorbPieces`]): a stored chunk is its data as the dedup stage kept
/// it, not copied again; the headers share one buffer.
/// Each chunk's CRC comes along, so the grant request's checksum is joined from them.
#[derive(Default)]
pub(crate) struct PiecesSink {
    headers: Vec<u8>,
    payloads: Vec<(Bytes, Option<u64>)>,
}

impl BodySink for PiecesSink {
    fn wants_crc64(&self) -> bool {
        true
    }

    fn put_chunk(
        &mut self,
        header: &[u8],
        data: &Bytes,
        compressed: Option<Vec<u8>>,
        crc: Option<u64>,
    ) -> bool {
        self.headers.extend_from_slice(header);
        self.payloads
            .push((compressed.map_or_else(|| data.clone(), Bytes::from), crc));
        true
    }
}

impl PiecesSink {
    pub fn finish(self) -> XorbPieces {
        let headers = Bytes::from(self.headers);
        let n = xet_xorb::CHUNK_HEADER_LEN;
        let mut out = XorbPieces::new();
        for (i, (payload, crc)) in self.payloads.into_iter().enumerate() {
            let header = headers.slice(i * n..(i + 1) * n);
            match crc {
                Some(crc) => out.push_with_crc64([header, payload], crc),
                None => {
                    out.push(header);
                    out.push(payload);
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_xorb::CompressionScheme;

    #[test]
    fn same_bytes_as_the_sequential_builder() {
        let mut data = Vec::new();
        let mut datas = Vec::new();
        let mut chunks = Vec::new();
        for i in 0..70u32 {
            let c: Vec<u8> = match i % 3 {
                0 => vec![(i % 7) as u8; 9000 + i as usize],
                1 => xet_testdata::generate(xet_testdata::Kind::Random, 8192, i as u64),
                _ => xet_testdata::generate(xet_testdata::Kind::Float32, 20000, i as u64),
            };
            chunks.push((xet_hash::chunk_hash(&c), c.len() as u32));
            data.extend_from_slice(&c);
            datas.push(bytes::Bytes::from(c));
        }
        let mut sealed = SealedXorb {
            slot: 0,
            data: datas,
            chunks: chunks.clone(),
            prepared: Vec::new(),
        };
        let mut body = Vec::new();
        let got = build_xorb(&mut sealed, &mut body).unwrap();
        let mut b = xet_xorb::XorbBuilder::new();
        let mut pos = 0;
        for (_, len) in &chunks {
            b.add_chunk(&data[pos..pos + *len as usize]).unwrap();
            pos += *len as usize;
        }
        let want = b.finish().unwrap();
        assert_eq!(got, want.hash());
        assert_eq!(body, want.body());
        let info = xet_xorb::verify_body(&body, Some(&got), &xet_xorb::Limits::default()).unwrap();
        assert_eq!(info.num_chunks(), 70);
        // As pieces: the same bytes, and stored chunks are the data as it was, uncopied.
        let mut sink = PiecesSink::default();
        assert_eq!(build_xorb(&mut sealed, &mut sink).unwrap(), got);
        let pieces = sink.finish();
        assert_eq!(pieces.len(), body.len() as u64);
        assert_eq!(&pieces.concat()[..], &body[..]);
        // The CRC joined from the chunks' is the body's.
        assert_eq!(pieces.crc64_nvme(), xet_cas::crc::crc64_nvme(&body));
        let shared = pieces
            .pieces()
            .iter()
            .filter(|p| {
                sealed
                    .data
                    .iter()
                    .any(|d| d.as_ptr() == p.as_ptr() && d.len() == p.len())
            })
            .count();
        let stored = (0..70).filter(|i| i % 3 == 1).count();
        assert!(
            shared >= stored,
            "{shared} pieces borrowed, {stored} random chunks"
        );
    }

    /// Chunks prepared by the reader (some, with and without CRCs, for a list shorter
    /// than the chunks) give the same body as chunks prepared at build time.
    #[test]
    fn prepared_chunks_give_the_same_body() {
        let datas: Vec<Bytes> = (0..40u64)
            .map(|i| match i % 2 {
                0 => xet_testdata::generate(xet_testdata::Kind::Float32, 30000, i),
                _ => xet_testdata::generate(xet_testdata::Kind::Random, 9000, i),
            })
            .map(Bytes::from)
            .collect();
        let chunks: Vec<_> = datas
            .iter()
            .map(|d| (xet_hash::chunk_hash(d), d.len() as u32))
            .collect();
        let sealed = |prepared| SealedXorb {
            slot: 0,
            data: datas.clone(),
            chunks: chunks.clone(),
            prepared,
        };
        let (mut out, mut scratch) = (Vec::new(), Vec::new());
        let some: Vec<Option<Prepared>> = (0..30)
            .map(|i| match i % 3 {
                0 => Some(prepare(&datas[i], true, &mut out, &mut scratch)),
                1 => Some(prepare(&datas[i], false, &mut out, &mut scratch)),
                _ => None,
            })
            .collect();
        let mut want = Vec::new();
        let hash = build_xorb(&mut sealed(Vec::new()), &mut want).unwrap();
        let mut body = Vec::new();
        assert_eq!(build_xorb(&mut sealed(some), &mut body).unwrap(), hash);
        assert_eq!(body, want);

        let mut want = PiecesSink::default();
        build_xorb(&mut sealed(Vec::new()), &mut want).unwrap();
        let want = want.finish();
        let some: Vec<Option<Prepared>> = (0..30)
            .map(|i| (i % 2 == 0).then(|| prepare(&datas[i], i % 4 == 0, &mut out, &mut scratch)))
            .collect();
        let mut sink = PiecesSink::default();
        build_xorb(&mut sealed(some), &mut sink).unwrap();
        let got = sink.finish();
        assert_eq!(got.concat(), want.concat());
        assert_eq!(got.crc64_nvme(), want.crc64_nvme());
    }

    /// A prepared chunk is taken as it is, not prepared again: one prepared as stored
    /// although it compresses shows up stored in the body.
    #[test]
    fn a_prepared_chunk_is_taken_as_it_is() {
        let d = Bytes::from(vec![5u8; 20000]);
        let stored = Prepared {
            header: xet_xorb::ChunkHeader {
                compressed_size: d.len() as u32,
                scheme: CompressionScheme::None,
                uncompressed_size: d.len() as u32,
            }
            .to_bytes(),
            compressed: None,
            crc: None,
        };
        let mut sealed = SealedXorb {
            slot: 0,
            data: vec![d.clone()],
            chunks: vec![(xet_hash::chunk_hash(&d), d.len() as u32)],
            prepared: vec![Some(stored)],
        };
        let mut body = Vec::new();
        let hash = build_xorb(&mut sealed, &mut body).unwrap();
        assert_eq!(body.len(), xet_xorb::CHUNK_HEADER_LEN + d.len());
        xet_xorb::verify_body(&body, Some(&hash), &xet_xorb::Limits::default()).unwrap();
        // Without it, the chunk compresses.
        let mut again = Vec::new();
        build_xorb(&mut sealed, &mut again).unwrap();
        assert!(again.len() < 1000, "{}", again.len());
    }
}
