//! Compressing a sealed xorb on the rayon pool.

use rayon::prelude::*;
use xet_hash::MerkleHash;

use crate::dedup::SealedXorb;
use crate::error::{Result, UploadError};

/// Serialize a sealed xorb into `body` (cleared first): every chunk compressed in
/// parallel with the scheme [`xet_xorb::serialize_chunk_auto`] picks (as
/// `XorbBuilder::add_chunk` does), appended in order: the footer-less upload body.
/// Returns the xorb hash. Call on a rayon thread (or from `rayon::spawn`).
pub(crate) fn build_xorb(sealed: &SealedXorb, body: &mut Vec<u8>) -> Result<MerkleHash> {
    let mut offsets = Vec::with_capacity(sealed.chunks.len() + 1);
    let mut pos = 0usize;
    for (_, len) in &sealed.chunks {
        offsets.push(pos);
        pos += *len as usize;
    }
    offsets.push(pos);
    let data = &sealed.data;
    let chunk = |i: usize| &data[offsets[i]..offsets[i + 1]];
    let serialized: Vec<_> = (0..sealed.chunks.len())
        .into_par_iter()
        .map(|i| xet_xorb::serialize_chunk_auto(chunk(i), Some(sealed.chunks[i].0)))
        .collect();
    body.clear();
    for c in serialized {
        let c = c.map_err(|e| UploadError::Internal(format!("serializing chunk: {e}")))?;
        body.extend_from_slice(c.bytes());
    }
    let entries: Vec<(MerkleHash, u64)> = sealed
        .chunks
        .iter()
        .map(|&(h, l)| (h, u64::from(l)))
        .collect();
    Ok(xet_hash::xorb_hash(&entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn same_bytes_as_the_sequential_builder() {
        let mut data = Vec::new();
        let mut chunks = Vec::new();
        for i in 0..70u32 {
            let c: Vec<u8> = match i % 3 {
                0 => vec![(i % 7) as u8; 9000 + i as usize],
                1 => xet_testdata::generate(xet_testdata::Kind::Random, 8192, i as u64),
                _ => xet_testdata::generate(xet_testdata::Kind::Float32, 20000, i as u64),
            };
            chunks.push((xet_hash::chunk_hash(&c), c.len() as u32));
            data.extend_from_slice(&c);
        }
        let sealed = SealedXorb {
            slot: 0,
            data: data.clone(),
            chunks: chunks.clone(),
        };
        let mut body = Vec::new();
        let got = build_xorb(&sealed, &mut body).unwrap();
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
    }
}
