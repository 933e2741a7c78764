//! Chunk ranges as a ranged GET returns them: `chunks` (header walk) and
//! `decode_chunks` (decompression), with and without what the caller expects.
//!
//! Input: 1 byte of flags, then the region.
//! Checks: no panic; `decode_chunks` never yields more than the limit; when it succeeds
//! the header walk sees the same number of chunks, each chunk's length is its declared
//! uncompressed size, and each decompresses alone to the same bytes; expectations taken
//! from a successful decode are met by a second decode.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_xorb::{Expected, Limits, chunks, decode_chunks};

const LIMITS: Limits = Limits {
    max_bytes: 1 << 20,
    max_chunks: 64,
    max_unpacked_bytes: 1 << 20,
};

fuzz_target!(|data: &[u8]| {
    let Some((&flags, region)) = data.split_first() else {
        return;
    };
    let expected = Expected {
        num_chunks: (flags & 1 != 0).then_some((flags >> 4) as usize),
        unpacked_len: (flags & 2 != 0).then_some(u64::from(flags >> 2) * 1024),
    };
    let walked: Vec<_> = chunks(region).collect();
    match decode_chunks(region, expected, &LIMITS) {
        Ok(d) => {
            assert!(d.data.len() as u64 <= LIMITS.max_unpacked_bytes);
            let raws: Vec<_> = walked
                .into_iter()
                .collect::<Result<_, _>>()
                .expect("decode_chunks accepted a region its header walk refuses");
            assert_eq!(raws.len(), d.num_chunks());
            assert_eq!(
                d.chunk_ends.last().copied().unwrap_or(0),
                d.data.len() as u64
            );
            for (i, raw) in raws.iter().enumerate() {
                let one = raw.decompress().expect("chunk of a decoded region");
                assert_eq!(one.len(), raw.header.uncompressed_size as usize);
                assert_eq!(one.as_slice(), d.chunk(i));
            }
            let again = decode_chunks(
                region,
                Expected {
                    num_chunks: Some(d.num_chunks()),
                    unpacked_len: Some(d.data.len() as u64),
                },
                &LIMITS,
            )
            .expect("decoding again with what the first decode found");
            assert_eq!(again, d);
        }
        Err(_) => {
            for c in walked.into_iter().flatten().take(16) {
                let _ = c.decompress();
            }
        }
    }
});
