//! Hostile input: parsers return errors, never panic, never allocate what a header claims.

use proptest::prelude::*;
use xet_hash::MerkleHash;
use xet_xorb::*;

fn sample_xorb() -> Xorb {
    use xet_testdata::{Kind, generate};
    let mut b = XorbBuilder::new();
    b.add_chunk(&generate(Kind::Text, 3000, 1)).unwrap();
    b.add_chunk(&generate(Kind::Random, 700, 2)).unwrap();
    b.add_chunk(&generate(Kind::Float32, 5000, 3)).unwrap();
    b.add_chunk(&[0u8; 900]).unwrap();
    let x = b.finish().unwrap();
    let schemes: Vec<_> = x.info().chunks.iter().map(|c| c.scheme).collect();
    use CompressionScheme::*;
    assert_eq!(schemes, vec![Lz4, None, ByteGrouping4Lz4, Lz4]);
    x
}

/// `BodyVerifier` fed `b` as it would arrive in pieces ending at `cuts` (any order, any
/// values: they are sorted and clamped to the body), then finished.
fn verify_streamed(
    b: &[u8],
    expected: Option<&MerkleHash>,
    cuts: &[usize],
) -> Result<XorbInfo, XorbError> {
    let l = Limits::default();
    let mut cuts: Vec<usize> = cuts.iter().map(|&c| c.min(b.len())).collect();
    cuts.sort_unstable();
    let mut v = BodyVerifier::new(b.len() as u64, &l)?;
    for c in cuts {
        v.advance(&b[..c])?;
        // Only whole chunks are verified, so never past the bytes received.
        assert!(v.verified_len() <= c as u64);
    }
    v.finish(b, expected)
}

/// Everything that parses untrusted bytes, run on `b`; returns whether the full
/// verifiers accepted. The streamed body verifier must agree with the one-shot one,
/// error for error.
fn run_all_parsers(b: &[u8], expected: Option<&MerkleHash>) -> (bool, bool) {
    let l = Limits::default();
    let stored_ok = verify(b, expected, &l).is_ok();
    let body = verify_body(b, expected, &l);
    let n = b.len();
    for cuts in [
        vec![],
        vec![1, 7, 8, 9],
        vec![n / 3, n / 2, n.saturating_sub(1)],
        (0..n).step_by(13).collect(),
    ] {
        assert_eq!(verify_streamed(b, expected, &cuts), body, "cuts {cuts:?}");
    }
    let body_ok = body.is_ok();
    let _ = parse_footer(b, &l);
    let _ = Xorb::parse(b, expected, &l);
    let _ = extract_chunk_range(b, 0..1, &l);
    let _ = extract_chunk_range(b, 1..3, &l);
    let _ = decode_chunks(b, Expected::default(), &l);
    let _ = decode_chunks(
        b,
        Expected {
            num_chunks: Some(2),
            unpacked_len: Some(100),
        },
        &l,
    );
    for c in chunks(b).flatten() {
        let _ = c.decompress();
    }
    for s in CompressionScheme::ALL {
        let _ = decompress(s, b, 1000);
        let _ = decompress(s, b, MAX_CHUNK_SIZE);
    }
    (stored_ok, body_ok)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn arbitrary_bytes_never_panic(b in prop::collection::vec(any::<u8>(), 0..600)) {
        let (stored_ok, _) = run_all_parsers(&b, None);
        prop_assert!(!stored_ok);
    }

    /// Arbitrary bytes behind a plausible chunk header reach the LZ4 frame decoder.
    #[test]
    fn arbitrary_payloads_never_panic(
        payload in prop::collection::vec(any::<u8>(), 1..400),
        scheme in 0u8..3,
        declared in 1u32..=(MAX_CHUNK_SIZE as u32),
        with_magic in any::<bool>(),
    ) {
        let mut p = payload;
        if with_magic && p.len() >= 7 {
            p[..4].copy_from_slice(&[0x04, 0x22, 0x4d, 0x18]);
        }
        let mut b = vec![0u8];
        b.extend_from_slice(&(p.len() as u32).to_le_bytes()[..3]);
        b.push(scheme);
        b.extend_from_slice(&declared.to_le_bytes()[..3]);
        b.extend_from_slice(&p);
        run_all_parsers(&b, None);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Streaming equals one-shot: a body (valid, or with one byte changed) fed in pieces
    /// ending anywhere, header and payload boundaries included, verifies to the same
    /// chunks and hash, or fails with the same first error.
    #[test]
    fn streamed_verification_equals_one_shot(
        cuts in prop::collection::vec(any::<prop::sample::Index>(), 0..12),
        at_boundaries in any::<bool>(),
        flip in prop::option::of((any::<prop::sample::Index>(), 1u8..=255)),
    ) {
        let x = sample_xorb();
        let mut b = x.body().to_vec();
        if let Some((pos, xor)) = flip {
            let i = pos.index(b.len());
            b[i] ^= xor;
        }
        let mut cuts: Vec<usize> = cuts.iter().map(|c| c.index(b.len() + 1)).collect();
        if at_boundaries {
            // Just before, at and after every header and chunk end.
            for c in &x.info().chunks {
                for p in [c.offset, c.offset + 8, c.end()] {
                    cuts.extend([p.saturating_sub(1) as usize, p as usize, p as usize + 1]);
                }
            }
        }
        let h = x.hash();
        let one_shot = verify_body(&b, Some(&h), &Limits::default());
        prop_assert_eq!(verify_streamed(&b, Some(&h), &cuts), one_shot.clone());
        if flip.is_none() {
            prop_assert_eq!(one_shot.map(|i| i.hash), Ok(h));
        }
    }

    #[test]
    fn truncated_xorbs_are_rejected(cut in any::<prop::sample::Index>(), stored in any::<bool>()) {
        let x = sample_xorb();
        let full = if stored { x.to_footered() } else { x.body().to_vec() };
        let cut = cut.index(full.len());
        let b = &full[..cut];
        let h = x.hash();
        let (s_ok, b_ok) = run_all_parsers(b, Some(&h));
        if stored && cut == x.body().len() {
            // The stored form cut right after its chunks is the body form of the same
            // xorb, which is valid (1 cut in ~6000, so proptest finds it only now and then).
            prop_assert!(b_ok, "the body form was refused");
        } else {
            prop_assert!(!s_ok && !b_ok, "accepted a xorb truncated to {} of {} bytes", cut, full.len());
        }
    }

    /// A single bit flip is detected (with the expected hash, as a server has it from the
    /// URL) unless it lands inside an LZ4 sequence and leaves the decompressed chunk
    /// unchanged: LZ4 is redundant (e.g. in a run of zeros, match offsets 1 and 3 give
    /// the same bytes), and the xorb hash covers chunk contents only. Flips in chunk
    /// headers, LZ4 frame headers, stored chunks and the footer are always rejected.
    #[test]
    fn bit_flipped_xorbs_are_rejected(pos in any::<prop::sample::Index>(), bit in 0u8..8, stored in any::<bool>()) {
        let x = sample_xorb();
        let mut b = if stored { x.to_footered() } else { x.body().to_vec() };
        let i = pos.index(b.len());
        b[i] ^= 1 << bit;
        let h = x.hash();
        let (s_ok, b_ok) = run_all_parsers(&b, Some(&h));
        // Frame header (7 bytes) and first block size (4) precede the LZ4 sequences.
        let in_lz4_sequences = x.info().chunks.iter().any(|c| {
            c.scheme != CompressionScheme::None
                && (c.offset + 8 + 11..c.end() - 4).contains(&(i as u64))
        });
        if stored && in_nonce(&b, i) {
            // xet-core's uniqueness nonce: outside the hash, any value is valid.
            prop_assert!(s_ok, "a footer nonce bit refused ({} of byte {})", bit, i);
        } else if in_lz4_sequences {
            let l = Limits::default();
            let accepted = if stored { verify(&b, Some(&h), &l).map(|_| b.clone()) } else {
                verify_body(&b, Some(&h), &l).map(|_| b.clone())
            };
            if let Ok(b) = accepted {
                let n = x.num_chunks();
                let body = &b[..x.body().len()];
                let d = decode_chunks(body, Expected { num_chunks: Some(n), unpacked_len: None }, &l).unwrap();
                prop_assert_eq!(d.data, x.extract_chunk_range(0..n).unwrap());
            }
        } else {
            prop_assert!(!s_ok, "stored form accepted with bit {} of byte {} flipped", bit, i);
            prop_assert!(!b_ok, "body form accepted with bit {} of byte {} flipped", bit, i);
        }
    }
}

/// Whether byte `i` of a footered xorb is in its footer's uniqueness nonce (the first 4
/// of the 16 buffer bytes before `info_length`).
fn in_nonce(stored: &[u8], i: usize) -> bool {
    (stored.len() - 20..stored.len() - 16).contains(&i)
}

fn header(compressed: u32, scheme: u8, uncompressed: u32) -> Vec<u8> {
    let c = compressed.to_le_bytes();
    let u = uncompressed.to_le_bytes();
    vec![0, c[0], c[1], c[2], scheme, u[0], u[1], u[2]]
}

#[test]
fn huge_declared_sizes_are_rejected_before_allocating() {
    let l = Limits::default();
    // Uncompressed size 16 MiB - 1 (the 24-bit maximum).
    let mut b = header(4, 1, 0xFF_FFFF);
    b.extend_from_slice(&[1, 2, 3, 4]);
    assert_eq!(
        verify_body(&b, None, &l),
        Err(XorbError::UncompressedSize {
            chunk: 0,
            offset: 0,
            size: 0xFF_FFFF,
            max: MAX_CHUNK_SIZE as u32
        })
    );
    // Compressed size beyond the input.
    let mut b = header(0xFF_FFFF, 1, 1000);
    b.extend_from_slice(&[0; 10]);
    assert_eq!(
        verify_body(&b, None, &l),
        Err(XorbError::CompressedSize {
            chunk: 0,
            offset: 0,
            size: 0xFF_FFFF,
            max: 10
        })
    );
    // Zero sizes.
    assert!(matches!(
        verify_body(&header(0, 0, 0), None, &l),
        Err(XorbError::UncompressedSize { size: 0, .. })
    ));
    let mut b = header(0, 1, 10);
    b.push(0);
    assert!(matches!(
        verify_body(&b, None, &l),
        Err(XorbError::CompressedSize { size: 0, .. })
    ));
    // Unknown scheme / version.
    let mut b = header(1, 3, 1);
    b.push(0);
    assert_eq!(
        verify_body(&b, None, &l),
        Err(XorbError::UnknownScheme {
            chunk: 0,
            offset: 0,
            scheme: 3
        })
    );
    b[0] = 1;
    assert_eq!(
        verify_body(&b, None, &l),
        Err(XorbError::ChunkVersion {
            chunk: 0,
            offset: 0,
            version: 1
        })
    );
    // Truncated header.
    assert!(matches!(
        verify_body(&[0, 1, 0], None, &l),
        Err(XorbError::Truncated {
            what: "chunk header",
            ..
        })
    ));
    assert_eq!(verify_body(&[], None, &l), Err(XorbError::Empty));
}

#[test]
fn huge_footer_counts_are_rejected_before_allocating() {
    let x = sample_xorb();
    let stored = x.to_footered();
    let body_len = x.body().len();
    let l = Limits::default();

    // num_chunks in the hash section set to u32::MAX.
    let mut b = stored.clone();
    b[body_len + 48..body_len + 52].copy_from_slice(&u32::MAX.to_le_bytes());
    assert_eq!(
        verify(&b, None, &l),
        Err(XorbError::TooManyChunks {
            max: MAX_XORB_CHUNKS
        })
    );
    // A count within limits that does not fit the footer's length.
    b[body_len + 48..body_len + 52].copy_from_slice(&8000u32.to_le_bytes());
    assert!(matches!(
        verify(&b, None, &l),
        Err(XorbError::FooterField {
            field: "info_length",
            ..
        })
    ));
    // info_length larger than the input.
    let mut b = stored.clone();
    let n = b.len();
    b[n - 4..].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(matches!(
        verify(&b, None, &l),
        Err(XorbError::Truncated { what: "footer", .. })
    ));
    // info_length pointing into the chunks.
    b[n - 4..].copy_from_slice(&((n - 4) as u32).to_le_bytes());
    assert!(matches!(
        verify(&b, None, &l),
        Err(XorbError::FooterIdent { .. })
    ));
    assert!(verify(&[1, 2, 3], None, &l).is_err());
}

#[test]
fn footer_inconsistencies_are_rejected() {
    let x = sample_xorb();
    let stored = x.to_footered();
    let bl = x.body().len();
    let l = Limits::default();
    let n = x.num_chunks();
    let bs = bl + 52 + 32 * n; // boundary section
    let t = bs + 12 + 8 * n; // trailer
    let patch = |at: usize, v: u32| {
        let mut b = stored.clone();
        b[at..at + 4].copy_from_slice(&v.to_le_bytes());
        verify(&b, None, &l)
    };
    assert!(matches!(
        patch(t + 4, 0),
        Err(XorbError::FooterField {
            field: "hashes_section_offset_from_end",
            ..
        })
    ));
    assert!(matches!(
        patch(t + 8, 0),
        Err(XorbError::FooterField {
            field: "boundary_section_offset_from_end",
            ..
        })
    ));
    assert!(matches!(
        patch(t, n as u32 + 1),
        Err(XorbError::FooterField {
            field: "num_chunks",
            ..
        })
    ));
    assert!(matches!(
        patch(bs + 8, 3),
        Err(XorbError::FooterField {
            field: "boundary section num_chunks",
            ..
        })
    ));
    // Swap two boundaries' worth: move the first boundary by one byte.
    let first = x.info().chunks[0].end() as u32;
    assert!(matches!(
        patch(bs + 12, first + 1),
        Err(XorbError::FooterBoundary {
            chunk: 0,
            field: "chunk_boundary_offsets",
            ..
        })
    ));
    let first_u = x.info().chunks[0].uncompressed_size;
    assert!(matches!(
        patch(bs + 12 + 4 * n, first_u - 1),
        Err(XorbError::FooterBoundary {
            chunk: 0,
            field: "unpacked_chunk_offsets",
            ..
        })
    ));
    assert!(matches!(
        patch(bs + 12, 3),
        Err(XorbError::FooterChunkSize { chunk: 0, .. })
    ));
    // The reserved buffer's first 4 bytes may hold xet-core's uniqueness nonce; the
    // other 12 may not be anything but zero.
    let mut b = stored.clone();
    b[t + 12..t + 16].copy_from_slice(&[0xde, 0xad, 0xbe, 0xef]);
    let with_nonce = verify(&b, None, &l).expect("a nonce is accepted");
    assert_eq!(with_nonce.hash, verify(&stored, None, &l).unwrap().hash);
    for at in [t + 16, t + 27] {
        let mut b = stored.clone();
        b[at] = 1;
        assert!(matches!(
            verify(&b, None, &l),
            Err(XorbError::FooterReserved { .. })
        ));
    }
    let mut b = stored.clone();
    b[bl + 7] = 2;
    assert_eq!(
        verify(&b, None, &l),
        Err(XorbError::FooterVersion {
            section: "XETBLOB",
            version: 2
        })
    );
    let mut b = stored.clone();
    b[bl] = b'x';
    assert!(matches!(
        verify(&b, None, &l),
        Err(XorbError::FooterIdent {
            section: "XETBLOB",
            ..
        })
    ));
}

#[test]
fn wrong_xorb_hash_is_rejected() {
    let x = sample_xorb();
    let stored = x.to_footered();
    let l = Limits::default();
    let other = xet_hash::chunk_hash(b"not this xorb");
    assert_eq!(
        verify(&stored, Some(&other), &l),
        Err(XorbError::UnexpectedXorbHash {
            expected: other,
            computed: x.hash()
        })
    );
    assert_eq!(
        verify_body(x.body(), Some(&other), &l),
        Err(XorbError::UnexpectedXorbHash {
            expected: other,
            computed: x.hash()
        })
    );
    // Footer claims another xorb hash.
    let mut b = stored.clone();
    let bl = x.body().len();
    b[bl + 8..bl + 40].copy_from_slice(other.as_bytes());
    assert_eq!(
        verify(&b, None, &l),
        Err(XorbError::XorbHash {
            footer: other,
            computed: x.hash()
        })
    );
    // Footer chunk hash wrong.
    let mut b = stored.clone();
    b[bl + 52 + 32] ^= 1;
    assert!(matches!(
        verify(&b, None, &l),
        Err(XorbError::ChunkHash { chunk: 1, .. })
    ));
    assert!(matches!(
        extract_chunk_range(&b, 1..2, &l),
        Err(XorbError::ChunkHash { chunk: 1, .. })
    ));
}

fn lz4_frame(data: &[u8]) -> Vec<u8> {
    compress(CompressionScheme::Lz4, data)
}

fn one_chunk(scheme: u8, payload: &[u8], declared: u32) -> Vec<u8> {
    let mut b = header(payload.len() as u32, scheme, declared);
    b.extend_from_slice(payload);
    b
}

#[test]
fn chunk_decompressing_to_another_length_is_rejected() {
    let l = Limits::default();
    let data = vec![b'a'; 1000];
    let f = lz4_frame(&data);
    assert!(f.len() < 100);
    // Declares less than the frame holds: decoding stops at the declared size.
    let r = verify_body(&one_chunk(1, &f, 999), None, &l);
    assert!(
        matches!(
            r,
            Err(XorbError::CorruptPayload {
                chunk: 0,
                problem: PayloadProblem::Overflow { declared: 999 },
                ..
            })
        ),
        "{r:?}"
    );
    // Declares more.
    let r = verify_body(&one_chunk(1, &f, 1001), None, &l);
    assert!(matches!(
        r,
        Err(XorbError::CorruptPayload {
            problem: PayloadProblem::Short {
                declared: 1001,
                got: 1000
            },
            ..
        })
    ));
    let r = verify_body(&one_chunk(2, &f, 1001), None, &l);
    assert!(matches!(
        r,
        Err(XorbError::CorruptPayload {
            problem: PayloadProblem::Short { .. },
            ..
        })
    ));
    // Stored chunk whose sizes disagree.
    assert!(matches!(
        verify_body(&one_chunk(0, &data[..10], 11), None, &l),
        Err(XorbError::StoredSizeMismatch {
            compressed: 10,
            uncompressed: 11,
            ..
        })
    ));
    // The matching declaration works.
    assert!(verify_body(&one_chunk(1, &f, 1000), None, &l).is_ok());
}

/// A small frame that expands far beyond its declared size (a decompression bomb): the
/// decoder stops at the declared size.
#[test]
fn decompression_bomb_is_bounded() {
    let l = Limits::default();
    // 4 MiB of zeros in one frame with 4 MiB blocks: a few KiB compressed.
    let mut big = Vec::new();
    {
        use std::io::Write;
        let info = lz4_flex::frame::FrameInfo::new().block_size(lz4_flex::frame::BlockSize::Max4MB);
        let mut enc = lz4_flex::frame::FrameEncoder::with_frame_info(info, &mut big);
        enc.write_all(&vec![0u8; 4 << 20]).unwrap();
        enc.finish().unwrap();
    }
    assert!(big.len() < MAX_CHUNK_SIZE);
    let r = verify_body(&one_chunk(1, &big, 4096), None, &l);
    assert!(matches!(
        r,
        Err(XorbError::CorruptPayload {
            problem: PayloadProblem::Overflow { declared: 4096 },
            ..
        })
    ));
    assert!(matches!(
        decompress(CompressionScheme::Lz4, &big, 100),
        Err(PayloadProblem::Overflow { declared: 100 })
    ));
}

#[test]
fn corrupt_lz4_frames_are_rejected() {
    let data = xet_testdata::generate(xet_testdata::Kind::Text, 5000, 9);
    let f = lz4_frame(&data);
    let n = data.len();
    let s = CompressionScheme::Lz4;
    assert_eq!(decompress(s, &f, n).unwrap(), data);

    let mut b = f.clone();
    b[0] ^= 1;
    assert!(matches!(
        decompress(s, &b, n),
        Err(PayloadProblem::BadMagic { .. })
    ));
    let mut b = f.clone();
    b[6] ^= 1; // header checksum byte
    assert!(matches!(
        decompress(s, &b, n),
        Err(PayloadProblem::HeaderChecksum { .. })
    ));
    let mut b = f.clone();
    b[4] |= 0x02; // reserved FLG bit
    assert!(matches!(
        decompress(s, &b, n),
        Err(PayloadProblem::BadDescriptor { .. })
    ));
    let mut b = f.clone();
    b[5] = 0x30; // block size code 3
    assert!(matches!(
        decompress(s, &b, n),
        Err(PayloadProblem::BadDescriptor { .. })
    ));
    // Missing end mark.
    assert!(matches!(
        decompress(s, &f[..f.len() - 4], n),
        Err(PayloadProblem::Truncated { .. })
    ));
    // Truncated block.
    assert!(matches!(
        decompress(s, &f[..f.len() - 10], n),
        Err(PayloadProblem::Truncated { .. })
    ));
    // Block size larger than the frame's maximum.
    let mut b = f.clone();
    b[7..11].copy_from_slice(&(300_000u32).to_le_bytes());
    assert!(matches!(
        decompress(s, &b, n),
        Err(PayloadProblem::BlockTooLarge { .. })
    ));
    // Garbage inside the compressed block: the block decoder fails or the data is wrong,
    // and a chunk hash catches the latter.
    let mut b = f.clone();
    for i in (12..b.len() - 4).step_by(7) {
        b[i] = 0xff;
    }
    match decompress(s, &b, n) {
        Err(_) => {}
        Ok(d) => assert_ne!(d, data),
    }
    // Trailing garbage after the frame.
    let mut b = f.clone();
    b.push(0);
    assert!(decompress(s, &b, n).is_err());
    // A block that decodes to more than the frame's 64 KiB block maximum (but less than
    // the declared chunk size) is rejected, as the reference's decoder does.
    let big = xet_testdata::generate(xet_testdata::Kind::Text, 100_000, 3);
    let block = lz4_flex::block::compress(&big);
    let mut b = vec![0x04, 0x22, 0x4d, 0x18, 0x60, 0x40, 0x82];
    b.extend_from_slice(&(block.len() as u32).to_le_bytes());
    b.extend_from_slice(&block);
    b.extend_from_slice(&[0; 4]);
    assert!(matches!(
        decompress(s, &b, big.len()),
        Err(PayloadProblem::Block { .. })
    ));
    b[5] = 0x50; // 256 KiB blocks (and their header checksum): now valid.
    b[6] = 0xfb;
    assert_eq!(decompress(s, &b, big.len()).unwrap(), big);
    // Empty payload.
    assert!(matches!(
        decompress(s, &[], n),
        Err(PayloadProblem::Truncated { .. })
    ));
}

/// Frames other encoders may write (checksums, content size, linked blocks,
/// concatenated frames) decode; checksum mismatches are caught.
#[test]
fn frame_options_are_supported_and_checked() {
    use lz4_flex::frame::{BlockMode, BlockSize, FrameEncoder, FrameInfo};
    use std::io::Write;
    let data = xet_testdata::generate(xet_testdata::Kind::Text, 100_000, 4);
    let enc = |info: FrameInfo, d: &[u8]| {
        let mut out = Vec::new();
        let mut e = FrameEncoder::with_frame_info(info, &mut out);
        e.write_all(d).unwrap();
        e.finish().unwrap();
        out
    };
    let s = CompressionScheme::Lz4;
    let info = FrameInfo::new()
        .block_size(BlockSize::Max64KB)
        .block_mode(BlockMode::Linked)
        .block_checksums(true)
        .content_checksum(true)
        .content_size(Some(data.len() as u64));
    let f = enc(info.clone(), &data);
    assert_eq!(decompress(s, &f, data.len()).unwrap(), data);
    let mut b = f.clone();
    let last = b.len() - 1;
    b[last] ^= 1;
    assert!(matches!(
        decompress(s, &b, data.len()),
        Err(PayloadProblem::ContentChecksum)
    ));
    // Flip a byte inside the first block's data: the block checksum catches it.
    let mut b = f.clone();
    b[30] ^= 1;
    assert!(matches!(
        decompress(s, &b, data.len()),
        Err(PayloadProblem::BlockChecksum)
    ));
    let f = enc(FrameInfo::new().content_size(Some(5)), &data[..5]);
    assert_eq!(decompress(s, &f, 5).unwrap(), &data[..5]);
    // Two concatenated frames.
    let mut two = enc(FrameInfo::new(), &data[..40_000]);
    two.extend(enc(
        FrameInfo::new().block_mode(BlockMode::Linked),
        &data[40_000..],
    ));
    assert_eq!(decompress(s, &two, data.len()).unwrap(), data);
}

/// Every byte of both forms, one bit each (bit = offset % 8): same rule as the proptest
/// above, but exhaustive over positions.
#[test]
fn exhaustive_single_bit_flips() {
    let x = sample_xorb();
    let h = x.hash();
    let l = Limits::default();
    let n = x.num_chunks();
    let original = x.extract_chunk_range(0..n).unwrap();
    let mut accepted_in_lz4 = 0;
    for stored in [false, true] {
        let good = if stored {
            x.to_footered()
        } else {
            x.body().to_vec()
        };
        for i in 0..good.len() {
            let mut b = good.clone();
            b[i] ^= 1 << (i % 8);
            let r = if stored {
                verify(&b, Some(&h), &l)
            } else {
                verify_body(&b, Some(&h), &l)
            };
            if stored && in_nonce(&b, i) {
                assert!(r.is_ok(), "a footer nonce bit at {i} refused");
                continue;
            }
            if r.is_ok() {
                let c = x
                    .info()
                    .chunks
                    .iter()
                    .find(|c| c.offset <= i as u64 && (i as u64) < c.end())
                    .unwrap();
                assert_ne!(
                    c.scheme,
                    CompressionScheme::None,
                    "flip at {i} accepted in a stored chunk"
                );
                assert!(
                    i as u64 >= c.offset + 8 + 11,
                    "flip at {i} accepted in a header"
                );
                let d = decode_chunks(&b[..x.body().len()], Expected::default(), &l).unwrap();
                assert_eq!(d.data, original, "flip at {i} accepted with different data");
                accepted_in_lz4 += 1;
            }
        }
    }
    eprintln!("{accepted_in_lz4} flips inside LZ4 sequences left the data unchanged");
}

#[test]
fn body_verifier_refuses_a_body_of_another_length() {
    let x = sample_xorb();
    let b = x.body();
    let l = Limits::default();
    let v = BodyVerifier::new(b.len() as u64 + 1, &l).unwrap();
    assert_eq!(
        v.finish(b, None),
        Err(XorbError::BodyLength {
            declared: b.len() as u64 + 1,
            got: b.len() as u64
        })
    );
    let mut v = BodyVerifier::new(b.len() as u64 - 1, &l).unwrap();
    assert!(matches!(v.advance(b), Err(XorbError::BodyLength { .. })));
    // A declared length over the caller's budget is refused before anything is read.
    let small = Limits {
        max_bytes: 100,
        ..l
    };
    assert_eq!(
        BodyVerifier::new(101, &small).map(|_| ()),
        Err(XorbError::InputTooLarge { len: 101, max: 100 })
    );
    // The body arriving whole in one piece, or a byte at a time, verifies the same.
    let mut v = BodyVerifier::new(b.len() as u64, &l).unwrap();
    for n in 0..=b.len() {
        v.advance(&b[..n]).unwrap();
    }
    assert_eq!(v.verified_len(), b.len() as u64);
    assert_eq!(v.finish(b, Some(&x.hash())).unwrap(), *x.info());
}
