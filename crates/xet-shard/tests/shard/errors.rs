//! Each validation failure, on purpose, with its structured error.

use xet_hash::{MerkleHash, chunk_hash};
use xet_shard::*;

fn h(i: u64) -> MerkleHash {
    chunk_hash(&i.to_le_bytes())
}

/// Two files (one of 2 terms), two xorbs; hashes sorted, verification + sha256.
fn sample() -> Shard {
    let mut b = ShardBuilder::new();
    let x1 = CasInfo::from_chunks(h(100), &[(h(1), 1000), (h(2), 2000), (h(3), 500)], 0).unwrap();
    let x2 = CasInfo::from_chunks(h(200), &[(h(4), 4000)], 0).unwrap();
    let mut f1 = FileInfoBuilder::new(h(10));
    f1.add_term_from_cas(&x1, 0..2)
        .unwrap()
        .add_term_from_cas(&x2, 0..1)
        .unwrap()
        .sha256([1; 32]);
    let mut f2 = FileInfoBuilder::new(h(11));
    f2.add_term_from_cas(&x1, 2..3).unwrap().sha256([2; 32]);
    b.add_cas(x1);
    b.add_cas(x2);
    b.add_file(f1.build());
    b.add_file(f2.build());
    b.build()
}

fn stored() -> Vec<u8> {
    sample()
        .into_stored(StoredOptions::shard_cache(1_700_000_000))
        .unwrap()
        .to_bytes()
        .unwrap()
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}
fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_le_bytes());
}
fn footer(b: &[u8]) -> RawFooter {
    RawFooter::from_bytes(b[b.len() - FOOTER_SIZE..].try_into().unwrap())
}
fn parse(b: &[u8]) -> Result<ParsedShard, ShardError> {
    ParsedShard::parse(b, &Limits::default())
}
fn both(b: &[u8]) -> [Result<ParsedShard, ShardError>; 2] {
    [
        ParsedShard::parse(b, &Limits::default()),
        ParsedShard::parse_by_footer(b, &Limits::default()),
    ]
}

#[test]
fn sample_is_valid_and_sorted() {
    let s = sample();
    // The tests below rely on this order.
    assert_eq!(s.files[0].file_hash, h(10));
    assert_eq!(s.files[0].terms.len(), 2);
    let b = stored();
    for r in both(&b) {
        assert_eq!(r.unwrap().shard.into_upload(), s);
    }
    // Sorted by word order, not byte order.
    assert!(hash_order_key(&s.files[0].file_hash) < hash_order_key(&s.files[1].file_hash));
    let f = footer(&b);
    assert_eq!(
        (
            f.file_lookup_num_entries,
            f.cas_lookup_num_entries,
            f.chunk_lookup_num_entries
        ),
        (2, 2, 4)
    );
    assert_eq!(f.key_expiry, 1_700_000_000 + 21 * 86400);
}

#[test]
fn header_errors() {
    let mut b = stored();
    b[20] ^= 1;
    let e = parse(&b).unwrap_err();
    assert!(matches!(e, ShardError::BadMagic { .. }), "{e}");
    assert!(e.to_string().contains("bad magic tag at offset 0"));

    let mut b = stored();
    put_u64(&mut b, 32, 3);
    assert_eq!(
        parse(&b).unwrap_err(),
        ShardError::BadHeaderVersion {
            expected: 2,
            got: 3
        }
    );

    let mut b = stored();
    put_u64(&mut b, 40, 100);
    assert_eq!(
        parse(&b).unwrap_err(),
        ShardError::BadFooterSize {
            expected: 200,
            got: 100
        }
    );

    assert!(matches!(
        parse(&b[..47]),
        Err(ShardError::Truncated {
            what: "header",
            needed: 48,
            available: 47,
            ..
        })
    ));
    assert!(matches!(
        parse(&[]),
        Err(ShardError::Truncated { what: "header", .. })
    ));
}

#[test]
fn footer_errors() {
    let b = stored();
    let at = b.len() - FOOTER_SIZE;
    let mut x = b.clone();
    put_u64(&mut x, at, 2);
    for r in both(&x) {
        assert_eq!(
            r.unwrap_err(),
            ShardError::BadFooterVersion {
                offset: at as u64,
                expected: 1,
                got: 2
            }
        );
    }
    let mut x = b.clone();
    put_u64(&mut x, at + 192, 5);
    for r in both(&x) {
        assert_eq!(
            r.unwrap_err(),
            ShardError::FooterMismatch {
                field: "footer_offset",
                expected: at as u64,
                got: 5
            }
        );
    }
    // cas_info_offset off by one record: streaming says mismatch; by-footer reads garbage
    // where the CAS section should start and fails too.
    let mut x = b.clone();
    let f = footer(&b);
    put_u64(&mut x, at + 16, f.cas_info_offset + 48);
    let e = parse(&x).unwrap_err();
    assert_eq!(
        e,
        ShardError::FooterMismatch {
            field: "cas_info_offset",
            expected: f.cas_info_offset,
            got: f.cas_info_offset + 48
        }
    );
    assert!(e.to_string().contains("expected"));
    assert!(ParsedShard::parse_by_footer(&x, &Limits::default()).is_err());
    // Offsets past the footer.
    let mut x = b.clone();
    put_u64(&mut x, at + 24, u64::MAX);
    assert!(matches!(
        ParsedShard::parse_by_footer(&x, &Limits::default()),
        Err(ShardError::OffsetOutOfBounds {
            field: "file_lookup_offset",
            ..
        })
    ));
    // A shard without footer cannot be parsed by footer.
    let up = sample().to_upload_bytes().unwrap();
    assert_eq!(
        ParsedShard::parse_by_footer(&up, &Limits::default()).unwrap_err(),
        ShardError::NoFooter
    );
    // Header says footer, but file too short for one.
    let mut x = up.clone();
    put_u64(&mut x, 40, 200);
    x.truncate(100);
    assert!(matches!(
        parse(&x),
        Err(ShardError::Truncated { what: "footer", .. })
    ));
}

#[test]
fn bookend_errors() {
    let up = sample().to_upload_bytes().unwrap();
    // Without the final CAS bookend.
    let cut = &up[..up.len() - 48];
    assert_eq!(
        parse(cut).unwrap_err(),
        ShardError::MissingBookend {
            section: "CAS info",
            offset: cut.len() as u64
        }
    );
    // Non-zero tail of the file-info bookend.
    let fend = 48
        + sample()
            .files
            .iter()
            .map(|f| f.num_records() as usize * 48)
            .sum::<usize>();
    let mut x = up.clone();
    x[fend + 40] = 1;
    assert_eq!(
        parse(&x).unwrap_err(),
        ShardError::BadBookend {
            section: "file info",
            offset: fend as u64
        }
    );
    // Trailing garbage after a footer-less shard.
    let mut x = up.clone();
    x.extend_from_slice(&[0; 5]);
    assert_eq!(
        parse(&x).unwrap_err(),
        ShardError::TrailingBytes {
            offset: up.len() as u64,
            count: 5
        }
    );
}

#[test]
fn content_errors() {
    let up = sample().to_upload_bytes().unwrap();
    // File 0 header at 48: clear its verification flag -> the two files disagree... but
    // then its verification records are read as the next header. Use file 1 instead
    // (metadata + verification): flipping bit 31 there makes the flags mixed.
    let f0 = &sample().files[0];
    let f1_at = 48 + f0.num_records() as usize * 48;
    let mut x = up.clone();
    put_u32(&mut x, f1_at + 32, FILE_FLAG_WITH_METADATA_EXT);
    let e = parse(&x).unwrap_err();
    assert_eq!(
        e,
        ShardError::MixedVerification {
            file_index: 1,
            offset: f1_at as u64,
            expected: true,
            got: false
        }
    );

    // Empty term range.
    let mut x = up.clone();
    put_u32(&mut x, 96 + 44, 0);
    assert!(matches!(
        parse(&x),
        Err(ShardError::InvalidTermRange {
            file_index: 0,
            term_index: 0,
            offset: 96,
            start: 0,
            end: 0
        })
    ));

    // CAS chunk offsets must be cumulative, and num_bytes_in_cas their total.
    let s = sample();
    let ci = s.cas.iter().position(|c| c.xorb_hash == h(100)).unwrap();
    let cas_at = up.len()
        - 48
        - s.cas
            .iter()
            .map(|c| c.num_records() as usize * 48)
            .sum::<usize>();
    let cas_at = cas_at
        + s.cas[..ci]
            .iter()
            .map(|c| c.num_records() as usize * 48)
            .sum::<usize>();
    let mut x = up.clone();
    put_u32(&mut x, cas_at + 48 * 2 + 32, 999);
    assert_eq!(
        parse(&x).unwrap_err(),
        ShardError::CasInconsistent {
            cas_index: ci,
            offset: cas_at as u64,
            field: "chunk_byte_range_start",
            expected: 1000,
            got: 999
        }
    );
    let mut x = up.clone();
    put_u32(&mut x, cas_at + 40, 1);
    assert!(matches!(
        parse(&x),
        Err(ShardError::CasInconsistent {
            field: "num_bytes_in_cas",
            expected: 3500,
            got: 1,
            ..
        })
    ));
}

/// What the parse ignores (as the reference does) but `check_strict` refuses: every
/// reserved field, every undefined flag bit, footer statistics that are wrong. The
/// parses still accept each variant.
#[test]
fn strict_check_names_each_ignored_field() {
    let b = stored();
    for r in both(&b) {
        r.unwrap().check_strict().unwrap();
    }
    let s = sample();
    let f1 = 48 + s.files[0].num_records() as usize * 48;
    let cas = footer(&b).cas_info_offset as usize;
    let fo = b.len() - FOOTER_SIZE;
    let reserved = |field: &'static str, offset: usize| ShardError::ReservedNotZero {
        field,
        offset: offset as u64,
    };
    let flags =
        |field: &'static str, at: usize, value: u32, allowed: u32| ShardError::UndefinedFlags {
            field,
            offset: at as u64,
            value,
            allowed,
        };
    let stat = |field: &'static str, expected: u64, got: u64| ShardError::FooterStatWrong {
        field,
        expected,
        got,
    };
    // (byte, bit, expected error): file 0 is a header, 2 terms, 2 verification entries,
    // the sha256; file 1 a header, 1 term, 1 verification entry, the sha256.
    let cases = [
        (
            48 + 40,
            0,
            reserved("file info header reserved bytes", 48 + 40),
        ),
        (
            48 + 47,
            7,
            reserved("file info header reserved bytes", 48 + 40),
        ),
        (
            48 + 32,
            0,
            flags("file flags", 48 + 32, 0xC000_0001, 0xC000_0000),
        ),
        (
            f1 + 35,
            5,
            flags("file flags", f1 + 32, 0xE000_0000, 0xC000_0000),
        ),
        (
            96 + 48 + 32,
            3,
            flags("file term CAS flags", 96 + 48 + 32, 8, 0),
        ),
        (
            192 + 32,
            0,
            reserved("verification entry reserved bytes", 192 + 32),
        ),
        (
            240 + 47,
            7,
            reserved("verification entry reserved bytes", 240 + 32),
        ),
        (
            288 + 40,
            2,
            reserved("FileMetadataExt reserved bytes", 288 + 32),
        ),
        (
            cas + 35,
            7,
            flags("CAS info flags", cas + 32, 0x8000_0000, 0),
        ),
        (
            cas + 48 + 40,
            0,
            flags("CAS chunk flags", cas + 48 + 40, 1, 0x8000_0000),
        ),
        (
            cas + 144 + 44,
            4,
            reserved("CAS chunk entry reserved bytes", cas + 144 + 44),
        ),
        (fo + 120, 0, reserved("footer reserved bytes", fo + 120)),
        (fo + 167, 7, reserved("footer reserved bytes", fo + 120)),
        (fo + 168, 1, stat("stored_bytes_on_disk", 0, 2)),
        (fo + 176, 0, stat("materialized_bytes", 7500, 7501)),
        (fo + 184, 1, stat("stored_bytes", 7500, 7502)),
    ];
    for (byte, bit, want) in cases {
        let mut x = b.clone();
        x[byte] ^= 1 << bit;
        for r in both(&x) {
            let p = r.unwrap_or_else(|e| panic!("byte {byte} bit {bit}: {e}"));
            assert_eq!(p.check_strict(), Err(want.clone()), "byte {byte} bit {bit}");
        }
    }
    // Defined bits and statistics left at 0 (huggingface.js writes no
    // materialized_bytes) are fine.
    let mut x = b.clone();
    x[cas + 48 + 43] |= 0x80; // CHUNK_FLAG_GLOBAL_DEDUP
    put_u64(&mut x, fo + 176, 0);
    put_u64(&mut x, fo + 184, 0);
    for r in both(&x) {
        r.unwrap().check_strict().unwrap();
    }
    // The upload form has no footer; the same record checks apply to it.
    let mut up = s.to_upload_bytes().unwrap();
    parse(&up).unwrap().check_strict().unwrap();
    up[48 + 40] = 1;
    assert_eq!(
        parse(&up).unwrap().check_strict(),
        Err(reserved("file info header reserved bytes", 48 + 40))
    );
}

#[test]
fn lookup_table_errors() {
    let b = stored();
    let f = footer(&b);
    let flo = f.file_lookup_offset as usize;
    let klo = f.chunk_lookup_offset as usize;

    // Wrong key.
    let mut x = b.clone();
    x[flo] ^= 1;
    for r in both(&x) {
        assert!(matches!(
            r,
            Err(ShardError::LookupEntryInvalid {
                table: "file",
                entry: 0,
                ..
            })
        ));
    }
    // Index that is not a block start.
    let mut x = b.clone();
    put_u32(&mut x, flo + 8, 1);
    let e = parse(&x).unwrap_err();
    assert!(
        e.to_string().contains("not the start of a file block"),
        "{e}"
    );
    // Duplicate: second entry copies the first (then the sort check would also fire).
    let mut x = b.clone();
    let first: Vec<u8> = x[klo..klo + 16].to_vec();
    x[klo + 16..klo + 32].copy_from_slice(&first);
    let e = parse(&x).unwrap_err();
    assert!(
        matches!(
            &e,
            ShardError::LookupEntryInvalid {
                table: "chunk",
                entry: 1,
                ..
            }
        ),
        "{e}"
    );
    assert!(e.to_string().contains("listed twice"));
    // Swapped entries: each valid, order broken.
    let mut x = b.clone();
    let (e0, e1) = (x[klo..klo + 16].to_vec(), x[klo + 16..klo + 32].to_vec());
    x[klo..klo + 16].copy_from_slice(&e1);
    x[klo + 16..klo + 32].copy_from_slice(&e0);
    assert!(matches!(
        parse(&x),
        Err(ShardError::LookupNotSorted {
            table: "chunk",
            entry: 1,
            ..
        })
    ));
    // Chunk index out of the xorb.
    let mut x = b.clone();
    put_u32(&mut x, klo + 12, 77);
    assert!(
        parse(&x)
            .unwrap_err()
            .to_string()
            .contains("chunk index 77 outside")
    );
    // Count that does not match the content.
    let mut x = b.clone();
    let at = x.len() - FOOTER_SIZE;
    put_u64(&mut x, at + 32, 1);
    assert_eq!(
        parse(&x).unwrap_err(),
        ShardError::LookupCountMismatch {
            table: "file",
            expected: 2,
            got: 1
        }
    );
}

#[test]
fn budget_and_huge_counts() {
    // A file header claiming u32::MAX terms: rejected before any allocation.
    let mut x = HEADER_TAG.to_vec();
    x.extend_from_slice(&2u64.to_le_bytes());
    x.extend_from_slice(&0u64.to_le_bytes());
    x.extend_from_slice(&[0x11; 32]);
    x.extend_from_slice(&0xC000_0000u32.to_le_bytes());
    x.extend_from_slice(&u32::MAX.to_le_bytes());
    x.extend_from_slice(&[0; 8]);
    x.extend_from_slice(&[0; 480]);
    let e = parse(&x).unwrap_err();
    let needed = (2 * u32::MAX as u64 + 1) * 48;
    assert_eq!(
        e,
        ShardError::Truncated {
            what: "file info block",
            offset: 96,
            needed,
            available: 480
        }
    );
    // Same for a CAS header.
    let mut x = sample().into_upload();
    x.files.clear();
    let mut b = x.to_upload_bytes().unwrap();
    put_u32(&mut b, 48 + 48 + 36, u32::MAX);
    assert!(matches!(
        parse(&b),
        Err(ShardError::Truncated {
            what: "CAS info block",
            ..
        })
    ));

    // Entry budget: the sample has 2+1+3+1+1 + 1+1+1 file records and 4+2 CAS records = 16.
    let s = stored();
    let lim = |max_entries| Limits {
        max_bytes: u64::MAX,
        max_entries,
    };
    assert!(ParsedShard::parse(&s, &lim(16)).is_ok());
    let e = ParsedShard::parse(&s, &lim(15)).unwrap_err();
    assert!(
        matches!(
            e,
            ShardError::BudgetExceeded {
                what: "CAS info block",
                ..
            }
        ),
        "{e}"
    );
    assert!(ParsedShard::parse_by_footer(&s, &lim(15)).is_err());
    assert_eq!(
        ParsedShard::parse(&s, &lim(3)).unwrap_err(),
        ShardError::BudgetExceeded {
            what: "file info block",
            offset: 48,
            count: 6,
            limit: 3
        }
    );
    // Byte budget.
    let e = ParsedShard::parse(
        &s,
        &Limits {
            max_bytes: 100,
            max_entries: u64::MAX,
        },
    )
    .unwrap_err();
    assert_eq!(
        e,
        ShardError::TooLarge {
            len: s.len() as u64,
            max: 100
        }
    );
}

#[test]
fn model_validation_before_serializing() {
    let mut s = sample();
    s.files[0].file_hash = MerkleHash([0xFF; 32]);
    assert_eq!(
        s.to_upload_bytes().unwrap_err(),
        ShardError::BookendHash {
            what: "file",
            index: 0
        }
    );

    let mut s = sample();
    s.cas[1].xorb_hash = MerkleHash([0xFF; 32]);
    assert_eq!(
        s.to_upload_bytes().unwrap_err(),
        ShardError::BookendHash {
            what: "xorb",
            index: 1
        }
    );

    let mut s = sample();
    s.files[0].verification.as_mut().unwrap().pop();
    assert!(matches!(
        s.to_upload_bytes(),
        Err(ShardError::FileInconsistent { file_index: 0, .. })
    ));

    let mut s = sample();
    s.files[1].flags &= !FILE_FLAG_WITH_METADATA_EXT;
    assert!(
        s.to_upload_bytes()
            .unwrap_err()
            .to_string()
            .contains("flag bit 30 is clear")
    );

    let mut s = sample();
    s.files[1] = FileInfo::new(s.files[1].file_hash, s.files[1].terms.clone(), None, None);
    assert!(matches!(
        s.to_upload_bytes(),
        Err(ShardError::MixedVerification { file_index: 1, .. })
    ));

    let mut s = sample();
    let ci = s.cas.iter().position(|c| c.xorb_hash == h(100)).unwrap();
    s.cas[ci].chunks[1].byte_range_start += 1;
    assert!(matches!(
        s.to_upload_bytes(),
        Err(ShardError::CasInconsistent {
            field: "chunk_byte_range_start",
            ..
        })
    ));
}

#[test]
fn builder_errors_and_verification() {
    let x1 = CasInfo::from_chunks(h(100), &[(h(1), 1000), (h(2), 2000)], 0).unwrap();
    assert_eq!(x1.num_bytes_in_cas, 3000);
    assert_eq!(x1.chunks[1].byte_range_start, 1000);
    let mut f = FileInfoBuilder::new(h(10));
    assert!(f.add_term_from_cas(&x1, 1..5).is_err());
    assert!(f.add_term(FileTerm::new(h(100), 1..1, 0), &[]).is_err());
    assert!(
        f.add_term(FileTerm::new(h(100), 0..2, 3000), &[h(1)])
            .is_err()
    );
    f.add_term(FileTerm::new(h(100), 0..2, 3000), &[h(1), h(2)])
        .unwrap();
    let fi = f.build();
    assert_eq!(fi.flags, FILE_FLAG_WITH_VERIFICATION);
    assert_eq!(
        fi.verification.as_ref().unwrap()[0],
        xet_hash::verification_hash(&[h(1), h(2)])
    );
    fi.verify_file_chunks(&[h(1), h(2)]).unwrap();
    assert!(matches!(
        fi.verify_file_chunks(&[h(2), h(1)]),
        Err(ShardError::VerificationMismatch { term_index: 0, .. })
    ));
    assert!(matches!(
        fi.verify_file_chunks(&[h(1), h(2), h(3)]),
        Err(ShardError::VerificationInput { .. })
    ));
    assert!(fi.verify_file_chunks(&[h(1)]).is_err());
    assert!(CasInfo::from_chunks(h(1), &[(h(1), 1 << 32)], 0).is_err());
    assert!(CasInfo::from_chunks(h(1), &[(h(1), u32::MAX as u64), (h(2), 1)], 0).is_err());

    // sha256 is stored byte-swapped per 8-byte group.
    let mut d = [0u8; 32];
    for (i, x) in d.iter_mut().enumerate() {
        *x = i as u8;
    }
    let mut f = FileInfoBuilder::new(h(10));
    f.sha256(d);
    let fi = f.build();
    assert_eq!(fi.flags, 0xC000_0000);
    assert_eq!(fi.metadata_ext.unwrap().0[..8], [7, 6, 5, 4, 3, 2, 1, 0]);
    assert_eq!(fi.sha256_digest(), Some(d));
}

#[test]
fn keyed_shard_lookups() {
    let key = h(999);
    let s = sample();
    let keyed = s
        .clone()
        .into_stored(StoredOptions::dedup_answer(Some(key), 5, 6))
        .unwrap();
    assert_eq!(keyed.chunk_hash_key(), Some(key));
    let bytes = keyed.to_bytes().unwrap();
    let f = footer(&bytes);
    assert_eq!(f.chunk_hash_key, key);
    let p = parse(&bytes).unwrap();
    // Stored hashes are keyed; the chunk table is keyed by the keyed hash.
    assert_eq!(
        p.shard.cas[0].chunks[0].hash,
        xet_hash::keyed_chunk_hash(&key, &s.cas[0].chunks[0].hash)
    );
    let mut keys: Vec<u64> = p
        .shard
        .cas
        .iter()
        .flat_map(|c| &c.chunks)
        .map(|c| truncate_hash(&c.hash))
        .collect();
    keys.sort();
    assert_eq!(
        p.tables
            .as_ref()
            .unwrap()
            .chunks
            .iter()
            .map(|e| e.key)
            .collect::<Vec<_>>(),
        keys
    );
    for (ci, c) in s.cas.iter().enumerate() {
        for (j, ch) in c.chunks.iter().enumerate() {
            let loc = p.find_chunk(&ch.hash).unwrap();
            assert_eq!(
                (loc.xorb_hash, loc.cas_index, loc.chunk_index),
                (c.xorb_hash, ci, j as u32)
            );
            // The raw hash is not in a keyed shard as such.
            assert_eq!(p.find_chunk_keyed(&ch.hash), None);
        }
    }
    // The zero key means unkeyed.
    let z = s
        .clone()
        .into_stored(StoredOptions::dedup_answer(Some(MerkleHash::ZERO), 5, 6))
        .unwrap();
    assert_eq!(z.chunk_hash_key(), None);
    assert_eq!(z.cas, s.cas);
}
