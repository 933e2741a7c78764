//! Build → serialize (both forms) → parse round trips, and per-scheme round trips.

use proptest::prelude::*;
use xet_testdata::{Kind, generate};
use xet_xorb::*;

/// Chunk contents with a mix of compressible and incompressible data and edge sizes.
fn chunk_strategy() -> impl Strategy<Value = Vec<u8>> {
    let size = prop_oneof![
        Just(1usize),
        Just(2),
        Just(3),
        Just(5),
        Just(MAX_CHUNK_SIZE),
        Just(MAX_CHUNK_SIZE - 1),
        1usize..=MAX_CHUNK_SIZE,
        1usize..200,
    ];
    (size, 0u8..4, any::<u64>()).prop_map(|(len, kind, seed)| match kind {
        0 => xet_testdata::generate(xet_testdata::Kind::Random, len, seed),
        1 => xet_testdata::generate(xet_testdata::Kind::Text, len, seed),
        2 => xet_testdata::generate(xet_testdata::Kind::Float32, len, seed),
        _ => vec![(seed & 0xff) as u8; len],
    })
}

fn check_xorb(chunks: &[Vec<u8>], x: &Xorb) {
    let limits = Limits::default();
    let want_hashes: Vec<_> = chunks.iter().map(|c| xet_hash::chunk_hash(c)).collect();
    let entries: Vec<_> = chunks
        .iter()
        .map(|c| (xet_hash::chunk_hash(c), c.len() as u64))
        .collect();
    assert_eq!(x.hash(), xet_hash::xorb_hash(&entries));

    // Upload form.
    let body_info = verify_body(x.body(), Some(&x.hash()), &limits).unwrap();
    assert_eq!(
        body_info.chunks.iter().map(|c| c.hash).collect::<Vec<_>>(),
        want_hashes
    );
    assert_eq!(&body_info, x.info());

    // Stored form.
    let stored = x.to_footered();
    let info = verify(&stored, Some(&x.hash()), &limits).unwrap();
    assert_eq!(info.chunks, x.info().chunks);
    let parsed = Xorb::parse(&stored, None, &limits).unwrap();
    assert_eq!(parsed.to_footered(), stored);
    assert_eq!(parsed.body(), x.body());

    // Data comes back, whole and by ranges.
    let all: Vec<u8> = chunks.concat();
    assert_eq!(
        extract_chunk_range(&stored, 0..chunks.len(), &limits).unwrap(),
        all
    );
    for (i, c) in chunks.iter().enumerate() {
        assert_eq!(&extract_chunk_range(&stored, i..i + 1, &limits).unwrap(), c);
        assert_eq!(&x.extract_chunk_range(i..i + 1).unwrap(), c);
    }
    let n = chunks.len();
    let mid = n / 2;
    if mid > 0 {
        let bytes = x.chunk_range_bytes(mid..n).unwrap();
        let d = decode_chunks(
            bytes,
            Expected {
                num_chunks: Some(n - mid),
                unpacked_len: None,
            },
            &limits,
        )
        .unwrap();
        assert_eq!(d.data, chunks[mid..].concat());
        assert_eq!(d.chunk_hashes(), want_hashes[mid..]);
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn build_serialize_parse_round_trip(chunks in prop::collection::vec(chunk_strategy(), 1..12)) {
        let mut b = XorbBuilder::new();
        for (i, c) in chunks.iter().enumerate() {
            prop_assert_eq!(b.add_chunk(c).unwrap(), i);
        }
        prop_assert_eq!(b.unpacked_len(), chunks.iter().map(|c| c.len() as u64).sum::<u64>());
        let x = b.finish().unwrap();
        check_xorb(&chunks, &x);
    }

    /// The parallel path (serialize_chunk anywhere, then add_serialized in order) builds
    /// the same xorb as add_chunk when the same schemes are used.
    #[test]
    fn serialized_chunks_build_the_same_xorb(chunks in prop::collection::vec(chunk_strategy(), 1..8)) {
        let mut a = XorbBuilder::new();
        for c in &chunks {
            a.add_chunk(c).unwrap();
        }
        let a = a.finish().unwrap();
        let mut b = XorbBuilder::new();
        for (c, info) in chunks.iter().zip(&a.info().chunks) {
            let tried = if info.scheme == CompressionScheme::None { choose_scheme(c) } else { info.scheme };
            let s = serialize_chunk(c, Some(xet_hash::chunk_hash(c)), tried).unwrap();
            prop_assert_eq!(s.scheme(), info.scheme);
            b.add_serialized(&s).unwrap();
        }
        let b = b.finish().unwrap();
        prop_assert_eq!(&a, &b);
        let c = serialize_chunk_auto(&chunks[0], None).unwrap();
        prop_assert_eq!(c.bytes(), a.chunk_range_bytes(0..1).unwrap());
    }

    #[test]
    fn every_scheme_round_trips(data in prop::collection::vec(any::<u8>(), 0..5000), rep in 1usize..40) {
        // Repeat to get compressible inputs too.
        let data: Vec<u8> = data.iter().copied().cycle().take(data.len() * rep).collect();
        for s in CompressionScheme::ALL {
            let payload = compress(s, &data);
            let back = decompress(s, &payload, data.len());
            prop_assert_eq!(back.as_ref(), Ok(&data), "{}", s);
            if !data.is_empty() {
                // One byte less or more than the true size is always rejected.
                prop_assert!(decompress(s, &payload, data.len() - 1).is_err());
                prop_assert!(decompress(s, &payload, data.len() + 1).is_err());
            }
        }
    }

    #[test]
    fn chunks_round_trip_through_serialize_chunk(data in chunk_strategy()) {
        for s in CompressionScheme::ALL {
            let c = serialize_chunk(&data, None, s).unwrap();
            prop_assert!(c.scheme() == s || c.scheme() == CompressionScheme::None);
            prop_assert!(c.bytes().len() <= CHUNK_HEADER_LEN + data.len(), "never larger than stored");
            let raw: Vec<_> = chunks(c.bytes()).collect::<Result<_, _>>().unwrap();
            prop_assert_eq!(raw.len(), 1);
            prop_assert_eq!(raw[0].header, c.header());
            prop_assert_eq!(raw[0].decompress().unwrap(), data.clone());
        }
    }

    #[test]
    fn byte_grouping_inverts_for_any_length(data in prop::collection::vec(any::<u8>(), 0..1000)) {
        let g = byte_group4(&data);
        prop_assert_eq!(g.len(), data.len());
        prop_assert_eq!(byte_ungroup4(&g), data.clone());
        // Group k holds bytes k, k+4, ...; the first len % 4 groups are one longer.
        let mut expect: Vec<u8> = Vec::new();
        for k in 0..4 {
            expect.extend(data.iter().skip(k).step_by(4));
        }
        prop_assert_eq!(g, expect);
    }
}

#[test]
fn byte_grouping_remainder_goes_to_first_groups() {
    let d: Vec<u8> = (0..10).collect();
    assert_eq!(byte_group4(&d), vec![0, 4, 8, 1, 5, 9, 2, 6, 3, 7]);
    for len in 0..=9 {
        let d: Vec<u8> = (0..len).collect();
        assert_eq!(byte_ungroup4(&byte_group4(&d)), d);
    }
}

#[test]
fn edge_sized_chunks_round_trip() {
    let chunks = vec![
        vec![7u8],
        vec![0u8; MAX_CHUNK_SIZE],
        xet_testdata::generate(xet_testdata::Kind::Random, MAX_CHUNK_SIZE, 1),
        xet_testdata::generate(xet_testdata::Kind::Float32, MAX_CHUNK_SIZE, 2),
        xet_testdata::generate(xet_testdata::Kind::Text, MAX_CHUNK_SIZE, 3),
        vec![1u8, 2],
    ];
    let mut b = XorbBuilder::new();
    for c in &chunks {
        b.add_chunk(c).unwrap();
    }
    let x = b.finish().unwrap();
    let schemes: Vec<_> = x.info().chunks.iter().map(|c| c.scheme).collect();
    use CompressionScheme::*;
    assert_eq!(schemes, vec![None, Lz4, None, ByteGrouping4Lz4, Lz4, None]);
    check_xorb(&chunks, &x);
}

#[test]
fn scheme_choice_follows_the_data() {
    use xet_testdata::{Kind, generate};
    assert_eq!(
        choose_scheme(&generate(Kind::Float32, 65536, 1)),
        CompressionScheme::ByteGrouping4Lz4
    );
    assert_eq!(
        choose_scheme(&generate(Kind::Text, 65536, 1)),
        CompressionScheme::Lz4
    );
    assert_eq!(
        choose_scheme(&generate(Kind::Random, 65536, 1)),
        CompressionScheme::Lz4
    );
    assert_eq!(choose_scheme(&[0u8; 65536]), CompressionScheme::Lz4);
    assert_eq!(choose_scheme(&[]), CompressionScheme::Lz4);
}

#[test]
fn builder_rejects_bad_chunk_sizes_and_empty_xorbs() {
    let mut b = XorbBuilder::new();
    assert_eq!(
        b.add_chunk(&[]),
        Err(XorbError::ChunkSize {
            len: 0,
            max: MAX_CHUNK_SIZE
        })
    );
    assert!(matches!(
        b.add_chunk(&vec![0; MAX_CHUNK_SIZE + 1]),
        Err(XorbError::ChunkSize { .. })
    ));
    assert!(b.is_empty());
    assert_eq!(b.finish(), Err(XorbError::Empty));
    assert!(serialize_chunk(&[], None, CompressionScheme::Lz4).is_err());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The vectorised popcount histograms behind `choose_scheme` equal the plain ones,
    /// for any length (partial blocks and words, several counter rounds) and content.
    #[test]
    fn popcount_histograms_equal_the_plain_count(
        len in prop_oneof![0usize..200, 16_000usize..16_400, 0usize..40_000],
        seed in any::<u64>(),
        kind in 0u8..3,
    ) {
        let data = match kind {
            0 => generate(Kind::Random, len, seed),
            1 => generate(Kind::Float32, len, seed),
            // One byte value throughout: every count lands in one counter.
            _ => vec![(seed % 256) as u8; len],
        };
        prop_assert_eq!(popcount_histograms(&data), popcount_histograms_scalar(&data));
    }
}

#[test]
fn popcount_histograms_at_block_and_round_edges() {
    // 64-byte blocks, 255 blocks per round of byte-wide counters.
    for len in [
        1,
        3,
        4,
        5,
        63,
        64,
        65,
        255 * 64 - 1,
        255 * 64,
        255 * 64 + 1,
        510 * 64 + 7,
    ] {
        for fill in [0x00u8, 0xff, 0x0f] {
            let data = vec![fill; len];
            assert_eq!(
                popcount_histograms(&data),
                popcount_histograms_scalar(&data),
                "{len} {fill}"
            );
        }
        let data = generate(Kind::Random, len, len as u64);
        assert_eq!(
            popcount_histograms(&data),
            popcount_histograms_scalar(&data),
            "{len}"
        );
    }
}

/// What `try_compress_into` must equal: the whole payload, kept only if strictly smaller.
fn try_compress_reference(scheme: CompressionScheme, data: &[u8]) -> Option<Vec<u8>> {
    let full = compress(scheme, data);
    (full.len() < data.len()).then_some(full)
}

fn check_try_compress(scheme: CompressionScheme, data: &[u8]) {
    let mut out = b"prefix".to_vec();
    let used = try_compress_into(scheme, data, &mut out, &mut Vec::new());
    match try_compress_reference(scheme, data) {
        Some(full) => {
            assert_eq!(used, scheme, "{} bytes", data.len());
            assert_eq!(&out[6..], &full[..], "{} bytes", data.len());
        }
        None => {
            assert_eq!(used, CompressionScheme::None, "{} bytes", data.len());
            assert_eq!(out, b"prefix", "{} bytes", data.len());
        }
    }
}

/// Random bytes with a compressible tail of zeros: `random` of them decide whether the
/// frame ends up just under, at or just over the chunk's length.
fn mixed(len: usize, random: usize, seed: u64) -> Vec<u8> {
    let mut d = generate(Kind::Random, random.min(len), seed);
    d.resize(len, 0);
    d
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// `try_compress_into` gives up early on incompressible input; it must still decide
    /// exactly as compressing the whole chunk and comparing lengths does.
    #[test]
    fn try_compress_equals_compress_then_compare(
        len in prop_oneof![0usize..64, 1usize..=MAX_CHUNK_SIZE],
        random_share in 0u32..=1000,
        seed in any::<u64>(),
        bg4 in any::<bool>(),
    ) {
        let data = mixed(len, len * random_share as usize / 1000, seed);
        let scheme = if bg4 { CompressionScheme::ByteGrouping4Lz4 } else { CompressionScheme::Lz4 };
        check_try_compress(scheme, &data);
    }
}

#[test]
fn try_compress_at_the_break_even_point_and_over_several_blocks() {
    for scheme in [CompressionScheme::Lz4, CompressionScheme::ByteGrouping4Lz4] {
        // Sweep the random share of a 64 KiB chunk through the point where the frame
        // stops being smaller, one byte at a time around it.
        let len = 64 << 10;
        let mut last = None;
        for random in (len - 600..=len).rev() {
            let data = mixed(len, random, 9);
            check_try_compress(scheme, &data);
            last = Some(try_compress_reference(scheme, &data).is_some());
        }
        assert_eq!(last, Some(true), "the sweep reaches compressible data");
        assert!(try_compress_reference(scheme, &mixed(len, len, 9)).is_none());
        // Frames of several 4 MiB blocks (inputs over 4 MiB): the first block
        // incompressible, the second not, and the other way round.
        let mut a = generate(Kind::Random, 4 << 20, 1);
        a.extend(vec![0u8; 1 << 20]);
        check_try_compress(scheme, &a);
        let mut b = vec![0u8; 4 << 20];
        b.extend(generate(Kind::Random, 1 << 20, 2));
        check_try_compress(scheme, &b);
        check_try_compress(scheme, &generate(Kind::Random, 5 << 20, 3));
    }
}
