//! Real xorbs written by the reference (`hf_xet` 1.8.0, `local://` store).

use std::collections::HashMap;

use xet_hash::MerkleHash;
use xet_testdata::{golden_files, reference_artifacts};
use xet_xorb::*;

struct RefXorb {
    name_hash: MerkleHash,
    bytes: Vec<u8>,
}

fn ref_xorbs() -> Vec<RefXorb> {
    let v: Vec<RefXorb> = reference_artifacts("xorbs")
        .into_iter()
        .map(|p| {
            let name = p.file_name().unwrap().to_str().unwrap().to_string();
            let hex = name
                .strip_prefix("default.")
                .expect("file name is default.<hash>");
            RefXorb {
                name_hash: hex.parse().expect("hash string"),
                bytes: std::fs::read(&p).unwrap(),
            }
        })
        .collect();
    assert!(!v.is_empty(), "no reference xorbs");
    v
}

/// Golden chunk data by chunk hash, from the corpus inputs and files.json.
fn golden_chunks() -> HashMap<MerkleHash, Vec<u8>> {
    let mut m = HashMap::new();
    for (corpus, golden) in golden_files() {
        if golden.size > 4 << 20 {
            continue;
        }
        let data = corpus.bytes();
        for c in golden.chunks {
            let bytes = data[c.offset as usize..(c.offset + c.len) as usize].to_vec();
            m.insert(c.hash.parse().unwrap(), bytes);
        }
    }
    m
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

#[test]
fn reference_xorbs_verify_and_hash_matches_file_name() {
    for x in ref_xorbs() {
        let info = verify(&x.bytes, Some(&x.name_hash), &Limits::default()).unwrap();
        assert_eq!(info.hash, x.name_hash);
        assert_eq!(info.footer_version, Some(1));
        assert_eq!(xet_hash::xorb_hash(&info.hash_entries()), x.name_hash);
    }
}

#[test]
fn reference_xorbs_use_all_three_schemes() {
    let mut seen = Vec::new();
    for x in ref_xorbs() {
        for c in verify(&x.bytes, None, &Limits::default()).unwrap().chunks {
            if !seen.contains(&c.scheme) {
                seen.push(c.scheme);
            }
        }
    }
    for s in CompressionScheme::ALL {
        assert!(seen.contains(&s), "reference xorbs have no {s} chunk");
    }
}

/// Decode the footer by hand at fixed positions: pins the layout independently of
/// our parser (offset-from-end semantics, trailing info_length, reserved bytes).
#[test]
fn footer_layout_matches_reference_bytes() {
    for x in ref_xorbs() {
        let b = &x.bytes;
        let len = b.len();
        let info_len = le32(b, len - 4) as usize;
        let f = &b[len - 4 - info_len..len - 4];
        let n = le32(f, 48) as usize;
        assert_eq!(info_len, 92 + 40 * n);
        assert_eq!(&f[0..7], b"XETBLOB");
        assert_eq!(f[7], 1);
        assert_eq!(&f[8..40], x.name_hash.as_bytes());
        assert_eq!(&f[40..47], b"XBLBHSH");
        assert_eq!(f[47], 0);
        let bs = 52 + 32 * n;
        assert_eq!(&f[bs..bs + 7], b"XBLBBND");
        assert_eq!(f[bs + 7], 1);
        assert_eq!(le32(f, bs + 8) as usize, n);
        let t = bs + 12 + 8 * n;
        assert_eq!(le32(f, t) as usize, n);
        // Offsets count from the section's ident to the end of the footer (not counting
        // the info_length u32).
        assert_eq!(le32(f, t + 4) as usize, info_len - 40);
        assert_eq!(le32(f, t + 8) as usize, info_len - bs);
        assert_eq!(&f[t + 12..], &[0u8; 16]);
        // Last chunk boundary is the start of the footer.
        assert_eq!(le32(f, bs + 12 + 4 * (n - 1)) as usize, len - 4 - info_len);
    }
}

#[test]
fn footer_rebuilt_from_body_is_byte_identical() {
    for x in ref_xorbs() {
        let (footer, body_len) = parse_footer(&x.bytes, &Limits::default()).unwrap();
        assert_eq!(footer.body_len(), body_len as u64);
        let body = &x.bytes[..body_len];
        let info = verify_body(body, Some(&x.name_hash), &Limits::default()).unwrap();
        assert_eq!(info.footer_version, None);
        assert_eq!(info.footer(), footer);
        assert_eq!(info.footer().to_bytes(), &x.bytes[body_len..]);
        let xorb = Xorb::from_body(body.to_vec(), Some(&x.name_hash), &Limits::default()).unwrap();
        assert_eq!(xorb.to_footered(), x.bytes);
        assert_eq!(xorb.footered_len(), x.bytes.len());
    }
}

#[test]
fn reparse_and_reserialize_is_byte_identical() {
    for x in ref_xorbs() {
        let xorb = Xorb::parse(&x.bytes, None, &Limits::default()).unwrap();
        assert_eq!(xorb.to_footered(), x.bytes);
        let (footer, _) = parse_footer(&x.bytes, &Limits::default()).unwrap();
        assert_eq!(footer.to_bytes().len(), footer.serialized_len() + 4);
    }
}

#[test]
fn chunks_are_the_golden_corpus_chunks() {
    let golden = golden_chunks();
    for x in ref_xorbs() {
        let info = verify(&x.bytes, None, &Limits::default()).unwrap();
        let all = extract_chunk_range(&x.bytes, 0..info.num_chunks(), &Limits::default()).unwrap();
        assert_eq!(all.len() as u64, info.unpacked_len());
        for (i, c) in info.chunks.iter().enumerate() {
            let want = golden
                .get(&c.hash)
                .unwrap_or_else(|| panic!("chunk {i} ({}) not in files.json", c.hash));
            let got = extract_chunk_range(&x.bytes, i..i + 1, &Limits::default()).unwrap();
            assert_eq!(&got, want, "chunk {i}");
            let r = info.unpacked_range(i..i + 1).unwrap();
            assert_eq!(&all[r.start as usize..r.end as usize], want.as_slice());
        }
    }
}

/// Our compressor writes the same payload bytes as the reference for the same chunk and
/// scheme (same LZ4 frame encoder settings, same byte grouping).
#[test]
fn recompressing_reference_chunks_gives_identical_bytes() {
    for x in ref_xorbs() {
        let info = verify(&x.bytes, None, &Limits::default()).unwrap();
        let mut builder = XorbBuilder::new();
        for (i, c) in info.chunks.iter().enumerate() {
            let data = extract_chunk_range(&x.bytes, i..i + 1, &Limits::default()).unwrap();
            let ser = serialize_chunk(&data, None, c.scheme).unwrap();
            let range = info.chunk_byte_range(i..i + 1).unwrap();
            assert_eq!(
                ser.bytes(),
                &x.bytes[range.start as usize..range.end as usize],
                "chunk {i} ({})",
                c.scheme
            );
            assert_eq!(ser.hash(), c.hash);
            builder.add_serialized(&ser).unwrap();
        }
        let built = builder.finish().unwrap();
        assert_eq!(built.hash(), x.name_hash);
        assert_eq!(built.to_footered(), x.bytes);
    }
}

/// Our automatic scheme choice may differ from the reference's, but the xorb hash only
/// depends on chunk data, so it must match.
#[test]
fn building_from_reference_chunks_gives_the_same_xorb_hash() {
    for x in ref_xorbs() {
        let info = verify(&x.bytes, None, &Limits::default()).unwrap();
        let mut builder = XorbBuilder::new();
        for i in 0..info.num_chunks() {
            builder
                .add_chunk(&extract_chunk_range(&x.bytes, i..i + 1, &Limits::default()).unwrap())
                .unwrap();
        }
        let built = builder.finish().unwrap();
        assert_eq!(built.hash(), x.name_hash);
        verify(&built.to_footered(), Some(&x.name_hash), &Limits::default()).unwrap();
        let ours: Vec<_> = built.info().chunks.iter().map(|c| c.scheme).collect();
        let theirs: Vec<_> = info.chunks.iter().map(|c| c.scheme).collect();
        eprintln!("schemes: ours {ours:?}\n       reference {theirs:?}");
    }
}

#[test]
fn ranged_reads_decode_with_expected_counts() {
    for x in ref_xorbs() {
        let info = verify(&x.bytes, None, &Limits::default()).unwrap();
        let (footer, _) = parse_footer(&x.bytes, &Limits::default()).unwrap();
        let n = info.num_chunks();
        for a in 0..n {
            for b in a + 1..=n {
                let r = footer.chunk_byte_range(a..b).unwrap();
                assert_eq!(r, info.chunk_byte_range(a..b).unwrap());
                let u = info.unpacked_range(a..b).unwrap();
                assert_eq!(footer.unpacked_range(a..b).unwrap(), Some(u.clone()));
                let slice = &x.bytes[r.start as usize..r.end as usize];
                let exp = Expected {
                    num_chunks: Some(b - a),
                    unpacked_len: Some(u.end - u.start),
                };
                let d = decode_chunks(slice, exp, &Limits::default()).unwrap();
                assert_eq!(d.num_chunks(), b - a);
                let hashes: Vec<_> = info.chunks[a..b].iter().map(|c| c.hash).collect();
                assert_eq!(d.chunk_hashes(), hashes);
                // A wrong expectation is an error, not a silent success.
                let wrong = Expected {
                    num_chunks: Some(b - a + 1),
                    unpacked_len: None,
                };
                assert!(matches!(
                    decode_chunks(slice, wrong, &Limits::default()),
                    Err(XorbError::ChunkCount { .. })
                ));
                let wrong = Expected {
                    num_chunks: None,
                    unpacked_len: Some(u.end - u.start - 1),
                };
                assert!(matches!(
                    decode_chunks(slice, wrong, &Limits::default()),
                    Err(XorbError::UnpackedLength { .. })
                ));
            }
        }
        assert!(footer.chunk_byte_range(0..n + 1).is_err());
        assert!(footer.chunk_byte_range(1..1).is_err());
    }
}

/// v0 footers (no unpacked offsets, boundaries before hashes) are read too.
#[test]
fn v0_footer_is_read() {
    for x in ref_xorbs() {
        let (mut footer, body_len) = parse_footer(&x.bytes, &Limits::default()).unwrap();
        footer.version = FOOTER_VERSION_V0;
        footer.unpacked_chunk_offsets.clear();
        let mut v0 = x.bytes[..body_len].to_vec();
        footer.write(&mut v0);
        assert_eq!(v0.len(), body_len + footer_len_v0(footer.num_chunks()) + 4);
        let (parsed, bl) = parse_footer(&v0, &Limits::default()).unwrap();
        assert_eq!((parsed, bl), (footer.clone(), body_len));
        let info = verify(&v0, Some(&x.name_hash), &Limits::default()).unwrap();
        assert_eq!(info.footer_version, Some(0));
        let n = info.num_chunks();
        assert!(extract_chunk_range(&v0, 0..n, &Limits::default()).is_ok());
        // Re-serializing writes the canonical v1 form.
        assert_eq!(
            Xorb::parse(&v0, None, &Limits::default())
                .unwrap()
                .to_footered(),
            x.bytes
        );
    }
}

/// Extra check on any directory of reference-written xorbs (`default.<hash>` files):
/// `XET_XORB_DIR=/path/to/xet/xorbs/xorbs cargo test -p xet-xorb --release --test xorb reference -- --ignored`.
#[test]
#[ignore]
fn xorbs_in_env_dir_verify_and_round_trip() {
    let Ok(dir) = std::env::var("XET_XORB_DIR") else {
        eprintln!("XET_XORB_DIR not set");
        return;
    };
    let mut count = 0;
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_str().unwrap().to_string();
        let Some(hex) = name.strip_prefix("default.").filter(|h| h.len() == 64) else {
            continue;
        };
        let hash: MerkleHash = hex.parse().unwrap();
        let bytes = std::fs::read(&p).unwrap();
        let info = verify(&bytes, Some(&hash), &Limits::default()).unwrap();
        let body_len = info.body_len() as usize;
        let rebuilt = verify_body(&bytes[..body_len], Some(&hash), &Limits::default()).unwrap();
        assert_eq!(rebuilt.footer().to_bytes(), &bytes[body_len..]);
        let mut schemes = [0usize; 3];
        for c in &info.chunks {
            schemes[c.scheme.as_u8() as usize] += 1;
        }
        eprintln!(
            "{name}: {} chunks, body {} bytes, unpacked {} bytes, none/lz4/bg4 {schemes:?}",
            info.num_chunks(),
            body_len,
            info.unpacked_len()
        );
        count += 1;
    }
    assert!(count > 0);
}

#[test]
fn footer_from_tail_equals_footer_from_whole_object() {
    let path = xet_testdata::reference_artifacts("xorbs").remove(0);
    let bytes = std::fs::read(path).unwrap();
    let limits = xet_xorb::Limits::default();
    let (whole, body_len) = xet_xorb::parse_footer(&bytes, &limits).unwrap();
    for tail_len in [
        bytes.len() - body_len,
        bytes.len() - body_len + 100,
        bytes.len(),
    ] {
        let (f, b) = xet_xorb::parse_footer_tail(
            &bytes[bytes.len() - tail_len..],
            bytes.len() as u64,
            &limits,
        )
        .unwrap();
        assert_eq!(f, whole);
        assert_eq!(b, body_len as u64);
    }
    // A tail that does not hold the whole footer is an error, not a panic.
    let short = bytes.len() - body_len - 1;
    assert!(
        xet_xorb::parse_footer_tail(&bytes[bytes.len() - short..], bytes.len() as u64, &limits)
            .is_err()
    );
}
