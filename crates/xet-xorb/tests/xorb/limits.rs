//! Xorb size limits: 8192 chunks and 64 MiB of uncompressed chunk data.

use xet_xorb::*;

#[test]
fn builder_refuses_the_8193rd_chunk() {
    let mut b = XorbBuilder::new();
    for i in 0..MAX_XORB_CHUNKS {
        assert!(b.can_add(1));
        assert_eq!(b.add_chunk(&[i as u8]).unwrap(), i);
    }
    assert!(b.is_full());
    assert!(!b.can_add(1));
    let before = (b.num_chunks(), b.body_len(), b.unpacked_len());
    assert_eq!(
        b.add_chunk(&[1]),
        Err(XorbError::XorbFull {
            chunks: MAX_XORB_CHUNKS,
            unpacked_bytes: MAX_XORB_CHUNKS as u64,
            adding: 1
        })
    );
    let s = serialize_chunk(&[1], None, CompressionScheme::Lz4).unwrap();
    assert!(matches!(
        b.add_serialized(&s),
        Err(XorbError::XorbFull { .. })
    ));
    assert_eq!(
        before,
        (b.num_chunks(), b.body_len(), b.unpacked_len()),
        "a refused chunk changes nothing"
    );

    let x = b.finish().unwrap();
    assert_eq!(x.num_chunks(), MAX_XORB_CHUNKS);
    let stored = x.to_footered();
    verify(&stored, Some(&x.hash()), &Limits::default()).unwrap();

    // A body with one chunk too many is rejected by the parser too.
    let mut body = x.body().to_vec();
    body.extend_from_slice(s.bytes());
    assert_eq!(
        verify_body(&body, None, &Limits::default()),
        Err(XorbError::TooManyChunks {
            max: MAX_XORB_CHUNKS
        })
    );
    // And a smaller caller budget is honoured.
    let small = Limits {
        max_chunks: 100,
        ..Limits::default()
    };
    assert_eq!(
        verify_body(x.body(), None, &small),
        Err(XorbError::TooManyChunks { max: 100 })
    );
    assert_eq!(
        verify(&stored, None, &small),
        Err(XorbError::TooManyChunks { max: 100 })
    );
}

#[test]
fn builder_refuses_the_byte_past_64_mib_uncompressed() {
    let zeros = vec![0u8; MAX_CHUNK_SIZE];
    let mut b = XorbBuilder::new();
    let n = (MAX_XORB_UNPACKED_BYTES as usize) / MAX_CHUNK_SIZE;
    for _ in 0..n - 1 {
        b.add_chunk(&zeros).unwrap();
    }
    // Fill to exactly 64 MiB with a chunk one byte short of max plus a 1-byte chunk.
    b.add_chunk(&zeros[1..]).unwrap();
    assert!(b.can_add(1));
    assert!(!b.can_add(2));
    assert!(matches!(
        b.add_chunk(&[0, 0]),
        Err(XorbError::XorbFull { adding: 2, .. })
    ));
    b.add_chunk(&[0]).unwrap();
    assert_eq!(b.unpacked_len(), MAX_XORB_UNPACKED_BYTES);
    assert!(b.is_full());
    assert!(matches!(
        b.add_chunk(&[0]),
        Err(XorbError::XorbFull { adding: 1, .. })
    ));
    let x = b.finish().unwrap();
    let stored = x.to_footered();
    let info = verify(&stored, Some(&x.hash()), &Limits::default()).unwrap();
    assert_eq!(info.unpacked_len(), MAX_XORB_UNPACKED_BYTES);

    // One more chunk in the body pushes the uncompressed total past 64 MiB.
    let mut body = x.body().to_vec();
    body.extend_from_slice(
        serialize_chunk(&[9], None, CompressionScheme::None)
            .unwrap()
            .bytes(),
    );
    assert_eq!(
        verify_body(&body, None, &Limits::default()),
        Err(XorbError::UnpackedTooLarge {
            chunk: n + 1,
            max: MAX_XORB_UNPACKED_BYTES
        })
    );
    let small = Limits {
        max_unpacked_bytes: 1 << 20,
        ..Limits::default()
    };
    assert!(matches!(
        verify(&stored, None, &small),
        Err(XorbError::UnpackedTooLarge { .. })
    ));
    assert!(matches!(
        extract_chunk_range(&stored, 0..2, &small),
        Err(XorbError::UnpackedTooLarge { .. })
    ));
}

/// A serialized body may exceed 64 MiB (incompressible data plus headers), and that is
/// accepted: the limit counts uncompressed bytes.
#[test]
fn body_over_64_mib_is_accepted_when_unpacked_fits() {
    let mut rng = xet_testdata::Rng::new(5);
    let mut b = XorbBuilder::new();
    let mut chunk = vec![0u8; MAX_CHUNK_SIZE];
    while b.can_add(MAX_CHUNK_SIZE) {
        rng.fill(&mut chunk);
        b.add_chunk(&chunk).unwrap();
    }
    let x = b.finish().unwrap();
    assert!(x.body().len() as u64 > MAX_XORB_UNPACKED_BYTES);
    verify_body(x.body(), Some(&x.hash()), &Limits::default()).unwrap();
    let stored = x.to_footered();
    verify(&stored, Some(&x.hash()), &Limits::default()).unwrap();
    let tight = Limits {
        max_bytes: stored.len() as u64 - 1,
        ..Limits::default()
    };
    assert!(matches!(
        verify(&stored, None, &tight),
        Err(XorbError::InputTooLarge { .. })
    ));
}
