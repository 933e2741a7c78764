//! Damaged and hostile files: every flipped bit of the sample files is refused by `open` or
//! by `verify` (with the samples' content check, key = sha256(value)), every truncation is
//! refused by `open`, hostile counts are refused before anything is allocated, and nothing
//! panics on the way.

use std::error::Error as _;
use std::io::Cursor;
use std::path::PathBuf;

use sha2::{Digest, Sha256};
use xet_swh::*;

fn data(name: &str) -> Vec<u8> {
    let p = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name);
    std::fs::read(&p).unwrap_or_else(|e| panic!("{}: {e}", p.display()))
}

fn sha256(b: &[u8]) -> [u8; 32] {
    Sha256::digest(b).into()
}

/// Open and fully check; also exercise lookups and iteration (which must not panic).
fn check(bytes: &[u8], limits: &ReadLimits) -> Result<VerifyReport, ReadError> {
    let r = ShardReader::open(bytes, limits)?;
    for (k, _) in r.iter().flatten() {
        let _ = r.get(k);
    }
    let _ = r.get(&[0x42; 32]);
    r.verify_with(|k, v| sha256(v) == *k)
}

fn positions(len: usize, every: usize, always: &[std::ops::Range<usize>]) -> Vec<usize> {
    let mut v: Vec<usize> = (0..len).step_by(every).collect();
    for r in always {
        v.extend(r.clone());
    }
    v.sort_unstable();
    v.dedup();
    v.retain(|&p| p < len);
    v
}

/// A flip must be refused, with one exception no reader can tell from a good file: in the
/// hash section, a flip that gives another function which still puts every key in its
/// own slot (say another seed, for one key in 11 slots). Then every object must still be
/// found.
fn flips_are_detected(name: &str, bytes: &[u8], at: &[usize]) {
    assert!(
        check(bytes, &ReadLimits::default()).is_ok(),
        "{name} itself"
    );
    let good = ShardReader::open(bytes, &ReadLimits::default()).unwrap();
    let hash = good.header().hash_position as usize..bytes.len();
    let objects: Vec<([u8; 32], Vec<u8>)> = good
        .iter()
        .map(|e| e.map(|(k, v)| (*k, v.to_vec())).unwrap())
        .collect();
    let mut equivalent = 0;
    for &i in at {
        for bit in 0..8 {
            let mut bad = bytes.to_vec();
            bad[i] ^= 1 << bit;
            if let Ok(report) = check(&bad, &ReadLimits::default()) {
                assert!(
                    hash.contains(&i),
                    "{name}: bit {bit} of byte {i} flipped, still verifies: {report:?}"
                );
                let r = ShardReader::open(&bad, &ReadLimits::default()).unwrap();
                for (k, v) in &objects {
                    assert_eq!(
                        r.get(k).unwrap(),
                        Some(&v[..]),
                        "{name}: byte {i} bit {bit}"
                    );
                }
                equivalent += 1;
            }
        }
    }
    // Such flips are rare (about one in n per seed bit).
    assert!(equivalent <= 8, "{name}: {equivalent} undetected flips");
}

#[test]
fn every_flipped_bit_of_the_small_samples_is_detected() {
    for name in [
        "three.shard",
        "one.shard",
        "emptyval.shard",
        "cli.shard",
        "cli-deleted.shard",
    ] {
        let bytes = data(name);
        let all: Vec<usize> = (0..bytes.len()).collect();
        flips_are_detected(name, &bytes, &all);
    }
}

#[test]
fn flipped_bits_of_the_large_samples_are_detected() {
    for name in ["real-129.shard", "real-1000.shard"] {
        let bytes = data(name);
        let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
        let h = *r.header();
        let hash = h.hash_position as usize..bytes.len();
        let index = h.index_position as usize..h.index_position as usize + 400;
        let at = positions(bytes.len(), 251, &[0..600, index, hash]);
        flips_are_detected(name, &bytes, &at);
    }
}

#[test]
fn every_truncation_is_refused() {
    for name in ["three.shard", "cli-deleted.shard", "real-129.shard"] {
        let bytes = data(name);
        for cut in 0..bytes.len() {
            match ShardReader::open(&bytes[..cut], &ReadLimits::default()) {
                Err(_) => {}
                Ok(_) => panic!("{name} cut at {cut} opens"),
            }
        }
    }
}

fn put_u64(b: &mut [u8], at: usize, v: u64) {
    b[at..at + 8].copy_from_slice(&v.to_be_bytes());
}
fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Huge counts in the header and the hash section: refused by the checks against the
/// file's length and the budget, not by a failed allocation (which would abort the test).
#[test]
fn hostile_counts_are_refused_before_allocating() {
    let good = data("three.shard");
    let hp = 1007;
    let mut cases: Vec<(&str, Vec<u8>)> = Vec::new();
    let mut edit = |what, f: &dyn Fn(&mut Vec<u8>)| {
        let mut b = good.clone();
        f(&mut b);
        cases.push((what, b));
    };
    edit("objects_count max", &|b| put_u64(b, 40, u64::MAX));
    edit("objects_size max", &|b| put_u64(b, 56, u64::MAX));
    edit("index_size max", &|b| put_u64(b, 72, u64::MAX));
    edit("all positions max", &|b| {
        for f in 1..7 {
            put_u64(b, 32 + 8 * f, u64::MAX);
        }
    });
    edit("consistent huge layout", &|b| {
        put_u64(b, 40, 1 << 40);
        put_u64(b, 56, 1 << 43);
        put_u64(b, 64, 512 + (1 << 43));
        put_u64(b, 72, 40 << 32);
        put_u64(b, 80, 512 + (1 << 43) + (40 << 32));
    });
    edit("n max", &|b| {
        put_u32(b, hp + 7, u32::MAX);
        put_u32(b, 1086 - 8, u32::MAX);
    });
    edit("n max, index_size to match", &|b| {
        put_u32(b, hp + 7, u32::MAX);
        put_u32(b, 1086 - 8, u32::MAX);
        put_u64(b, 72, 40 * u64::from(u32::MAX));
    });
    edit("nbuckets max", &|b| put_u32(b, 1086 - 4, u32::MAX));
    edit("cs_len max", &|b| put_u32(b, hp + 27, u32::MAX));
    edit("cs.n and sel.n max", &|b| {
        put_u32(b, hp + 31, u32::MAX);
        put_u32(b, hp + 31 + 16, u32::MAX);
        put_u32(b, 1086 - 4, u32::MAX);
    });
    edit("total_length max", &|b| put_u32(b, hp + 31 + 8, u32::MAX));
    edit("sel_len max", &|b| put_u32(b, hp + 31 + 12, u32::MAX));
    edit("rem_r 0", &|b| put_u32(b, hp + 31 + 4, 0));
    edit("rem_r 32", &|b| put_u32(b, hp + 31 + 4, 32));
    edit("hash state length max", &|b| put_u32(b, hp + 11, u32::MAX));
    edit("big-endian dump", &|b| {
        put_u32(b, hp + 11, 12u32.swap_bytes())
    });
    edit("other algorithm", &|b| {
        b[hp..hp + 7].copy_from_slice(b"bdz_ph\0")
    });
    edit("other hash", &|b| {
        b[hp + 15..hp + 23].copy_from_slice(b"murmur\0\0")
    });
    edit("old 8-byte index", &|b| {
        // An index of 8-byte entries (index_size = 8 x n), the hash section after it.
        let dump = b[1007..].to_vec();
        b.truncate(567 + 88);
        b.extend_from_slice(&dump);
        put_u64(b, 72, 88);
        put_u64(b, 80, 567 + 88);
    });
    for (what, bytes) in &cases {
        for limits in [ReadLimits::default(), ReadLimits::unlimited()] {
            let e = ShardReader::open(bytes, &limits).expect_err(what);
            let msg = e.to_string();
            assert!(e.source().is_none(), "{what}: {msg}");
            assert!(msg.contains("offset"), "{what}: no offset in {msg:?}");
        }
    }
    let e = ShardReader::open(&cases[0].1, &ReadLimits::default()).unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::BudgetExceeded {
                what: "objects_count",
                ..
            }
        ),
        "{e}"
    );
    let old = &cases.iter().find(|c| c.0 == "old 8-byte index").unwrap().1;
    assert!(matches!(
        ShardReader::open(old, &ReadLimits::default()),
        Err(ReadError::OldIndexFormat { .. })
    ));
    let be = &cases.iter().find(|c| c.0 == "big-endian dump").unwrap().1;
    assert!(matches!(
        ShardReader::open(be, &ReadLimits::default()),
        Err(ReadError::BigEndianDump { offset: 1018 })
    ));
}

#[test]
fn budgets_are_enforced() {
    let bytes = data("real-1000.shard");
    let open = |l: ReadLimits| ShardReader::open(&bytes, &l).map(|_| ()).unwrap_err();
    let d = ReadLimits::default();
    assert!(matches!(
        open(ReadLimits {
            max_bytes: 69130,
            ..d
        }),
        ReadError::TooLarge {
            len: 69131,
            max: 69130
        }
    ));
    assert!(matches!(
        open(ReadLimits {
            max_objects: 999,
            ..d
        }),
        ReadError::BudgetExceeded {
            what: "objects_count",
            value: 1000,
            limit: 999,
            ..
        }
    ));
    assert!(matches!(
        open(ReadLimits {
            max_slots: 1012,
            ..d
        }),
        ReadError::BudgetExceeded { value: 1013, .. }
    ));
    assert!(matches!(
        open(ReadLimits {
            max_hash_bytes: 326,
            ..d
        }),
        ReadError::BudgetExceeded { value: 327, .. }
    ));
    let exact = ReadLimits {
        max_bytes: 69131,
        max_objects: 1000,
        max_slots: 1013,
        max_hash_bytes: 327,
    };
    ShardReader::open(&bytes, &exact).unwrap();
}

#[test]
fn messages_name_the_field_and_the_offset() {
    let mut b = data("three.shard");
    put_u64(&mut b, 32, 2);
    let e = ShardReader::open(&b, &ReadLimits::default()).unwrap_err();
    assert_eq!(
        e.to_string(),
        "header field version at offset 32 is 2, only version 1 is known"
    );

    let mut b = data("three.shard");
    put_u64(&mut b, 64, 568);
    assert_eq!(
        ShardReader::open(&b, &ReadLimits::default())
            .unwrap_err()
            .to_string(),
        "header field index_position at offset 64 is 568, expected objects_position + \
         objects_size = 567"
    );

    let mut b = data("three.shard");
    b[0] = b'X';
    assert!(
        ShardReader::open(&b, &ReadLimits::default())
            .unwrap_err()
            .to_string()
            .starts_with("bad magic at offset 0")
    );

    // An index entry pointing past the objects: get reports it with the slot and offset.
    let mut b = data("three.shard");
    let slot4 = 567 + 4 * 40 + 32;
    put_u64(&mut b, slot4, 566);
    let r = ShardReader::open(&b, &ReadLimits::default()).unwrap();
    let e = r.get(&sha256(b"hello")).unwrap_err();
    assert_eq!(
        e.to_string(),
        "index entry #4 at offset 727: object offset 566 is outside the objects section \
         [512, 567)"
    );
    assert_eq!(r.verify().unwrap_err(), e);
    let errs: Vec<_> = r.iter().filter_map(Result::err).collect();
    assert_eq!(errs, [e]);

    // A value whose size runs past the objects.
    let mut b = data("three.shard");
    put_u64(&mut b, 512, 6);
    put_u64(&mut b, 539, 21);
    let r = ShardReader::open(&b, &ReadLimits::default()).unwrap();
    assert_eq!(
        r.get(&sha256(&[b'x'; 20])).unwrap_err().to_string(),
        "object of index entry #2 at offset 539: its size 21 runs past the end of the \
         objects section at 567"
    );
    // verify reports the first problem in slot order.
    assert!(matches!(
        r.verify(),
        Err(ReadError::RecordOutOfBounds { .. })
    ));

    let mut b = data("three.shard");
    b[700] = 1; // inside empty slot 3's key
    let r = ShardReader::open(&b, &ReadLimits::default()).unwrap();
    assert_eq!(
        r.verify().unwrap_err().to_string(),
        "index entry #3 at offset 687 is deleted or empty (offset 0xffffffffffffffff) but \
         its key is not zero"
    );

    let mut b = data("three.shard");
    b[100] = 1;
    let r = ShardReader::open(&b, &ReadLimits::default()).unwrap();
    assert_eq!(
        r.verify().unwrap_err().to_string(),
        "byte at offset 100 of the unused area between header and objects is not zero"
    );
}

/// Write errors carry the offset and the I/O error as `source()`, not in the message.
#[test]
fn write_errors_keep_their_cause_as_source() {
    struct Failing(Cursor<Vec<u8>>, u64);
    impl std::io::Write for Failing {
        fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
            if self.0.position() + b.len() as u64 > self.1 {
                return Err(std::io::Error::other("disk full"));
            }
            self.0.write(b)
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    impl std::io::Seek for Failing {
        fn seek(&mut self, p: std::io::SeekFrom) -> std::io::Result<u64> {
            self.0.seek(p)
        }
    }
    let mut w = ShardWriter::new(Failing(Cursor::new(Vec::new()), 600)).unwrap();
    w.add(&[1; 32], &[0; 50]).unwrap();
    let e = w.add(&[2; 32], &[0; 50]).unwrap_err();
    assert_eq!(e.to_string(), "writing the shard failed at offset 578");
    assert_eq!(e.source().unwrap().to_string(), "disk full");
    assert!(matches!(w.add(&[3; 32], b"x"), Err(WriteError::Poisoned)));
    assert!(matches!(w.finish(), Err(WriteError::Poisoned)));
}
