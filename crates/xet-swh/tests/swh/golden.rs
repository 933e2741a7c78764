//! The files made by the real swh-shard 2.2.1 (`tests/data`, described in its README.md):
//! every value and slot read back, the hash sections re-encoded byte for byte, the hash
//! functions rebuilt from the keys and the seeds the files record, and whole files written
//! again byte for byte.

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

fn unhex(s: &str) -> [u8; 32] {
    let v: Vec<u8> = (0..64)
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect();
    v.try_into().unwrap()
}

/// What the samples README says of one file.
struct Golden {
    file: &'static str,
    len: u64,
    header: [u64; 7],
    seed: u32,
    n: u32,
    nbuckets: u32,
    /// (value, slot, offset) in insertion order; keys are sha256(value).
    objects: Vec<(Vec<u8>, u32, u64)>,
}

fn small_goldens() -> Vec<Golden> {
    let o = |v: &[u8], slot, offset| (v.to_vec(), slot, offset);
    vec![
        Golden {
            file: "three.shard",
            len: 1086,
            header: [1, 3, 512, 55, 567, 440, 1007],
            seed: 1,
            n: 11,
            nbuckets: 1,
            objects: vec![
                o(b"hello", 4, 512),
                o(b"world!", 8, 525),
                o(&[b'x'; 20], 2, 539),
            ],
        },
        Golden {
            file: "one.shard",
            len: 1039,
            header: [1, 1, 512, 12, 524, 440, 964],
            seed: 0,
            n: 11,
            nbuckets: 1,
            objects: vec![o(b"only", 7, 512)],
        },
        Golden {
            file: "emptyval.shard",
            len: 1035,
            header: [1, 1, 512, 8, 520, 440, 960],
            seed: 0,
            n: 11,
            nbuckets: 1,
            objects: vec![o(b"", 9, 512)],
        },
        Golden {
            file: "cli.shard",
            len: 1089,
            header: [1, 3, 512, 58, 570, 440, 1010],
            seed: 1,
            n: 11,
            nbuckets: 1,
            objects: vec![
                o(&data("a.txt"), 2, 512),
                o(&data("b.txt"), 10, 526),
                o(&data("c.txt"), 4, 544),
            ],
        },
    ]
}

/// value_i = (b"value-%d-" % i) * (1 + i % 3).
fn real_values(count: usize) -> Vec<Vec<u8>> {
    (0..count)
        .map(|i| format!("value-{i}-").repeat(1 + i % 3).into_bytes())
        .collect()
}

fn header_fields(h: &Header) -> [u64; 7] {
    [
        h.version,
        h.objects_count,
        h.objects_position,
        h.objects_size,
        h.index_position,
        h.index_size,
        h.hash_position,
    ]
}

/// Write `values` (keys sha256) with our writer and the given seeds.
fn write(values: &[Vec<u8>], seeds: SeedPolicy) -> Vec<u8> {
    let mut w = ShardWriter::with_seeds(Cursor::new(Vec::new()), seeds).unwrap();
    for v in values {
        w.add(&sha256(v), v).unwrap();
    }
    w.finish().unwrap().0.into_inner()
}

#[track_caller]
fn assert_same_bytes(got: &[u8], want: &[u8], what: &str) {
    if got != want {
        let i = got
            .iter()
            .zip(want)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(want.len()));
        panic!(
            "{what}: {} vs {} bytes, first difference at offset {i}",
            got.len(),
            want.len()
        );
    }
}

/// Checks every shard file shares: the hash section re-encodes to its own bytes, the
/// function rebuilds from the keys and the recorded seed, the file verifies with keys being
/// sha256 of the values, and rewriting the live objects in file order gives the same file.
fn common(bytes: &[u8], name: &str) {
    let r = ShardReader::open(bytes, &ReadLimits::default()).unwrap();
    let f = r.hash_function();
    assert_same_bytes(&f.dump().unwrap(), r.hash_section(), name);
    assert_eq!(
        r.hash_end(),
        bytes.len() as u64,
        "{name}: no trailing bytes"
    );

    let mut live: Vec<(u64, [u8; 32], Vec<u8>)> = Vec::new();
    for slot in 0..r.slots() {
        let e = r.entry(slot).unwrap();
        if e.is_live() {
            live.push((e.offset, e.key, r.get(&e.key).unwrap().unwrap().to_vec()));
            assert_eq!(r.slot(&e.key), slot);
        } else {
            assert_eq!(e.key, [0; 32], "{name}: empty slot {slot}");
        }
    }
    assert!(r.entry(r.slots()).is_none());
    live.sort();
    let keys: Vec<[u8; 32]> = live.iter().map(|l| l.1).collect();
    let report = r.verify_with(|k, v| sha256(v) == *k).unwrap();
    if report.deleted == 0 {
        // (With deletions the function was built from keys no longer there.)
        let rebuilt = ChdPh::build(&keys, &SeedPolicy::List(vec![f.seed()])).unwrap();
        assert_eq!(&rebuilt, f, "{name}: rebuilt from the seed {}", f.seed());
    }
    assert_eq!(report.live, live.len() as u64);
    assert_eq!(report.empty_slots, u64::from(r.slots()) - report.live);

    let iterated: Vec<([u8; 32], Vec<u8>)> = r
        .iter()
        .map(|e| e.map(|(k, v)| (*k, v.to_vec())).unwrap())
        .collect();
    assert_eq!(iterated.len(), live.len());
    for (slots, (k, _)) in iterated.windows(2).zip(&iterated) {
        assert!(
            r.slot(&slots[0].0) < r.slot(&slots[1].0),
            "{name}: slot order"
        );
        assert!(keys.contains(k));
    }

    // Absent keys are not found.
    for i in 0..200u32 {
        let k = sha256(&i.to_le_bytes());
        if !keys.contains(&k) {
            assert_eq!(r.get(&k).unwrap(), None, "{name}");
        }
    }
    assert_eq!(r.get(&[0; 32]).unwrap(), None);

    if report.deleted == 0 {
        let values: Vec<Vec<u8>> = live.into_iter().map(|l| l.2).collect();
        let again = write(&values, SeedPolicy::List(vec![f.seed()]));
        assert_same_bytes(&again, bytes, &format!("{name} rewritten"));
    }
}

#[test]
fn small_files_read_as_the_readme_says() {
    for g in small_goldens() {
        let bytes = data(g.file);
        assert_eq!(bytes.len() as u64, g.len, "{}", g.file);
        let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
        assert_eq!(header_fields(r.header()), g.header, "{}", g.file);
        let f = r.hash_function();
        assert_eq!(
            (f.seed(), f.n(), f.nbuckets()),
            (g.seed, g.n, g.nbuckets),
            "{}",
            g.file
        );
        for (value, slot, offset) in &g.objects {
            let key = sha256(value);
            assert_eq!(r.slot(&key), *slot, "{}", g.file);
            assert_eq!(
                r.entry(*slot).unwrap(),
                IndexEntry {
                    key,
                    offset: *offset
                }
            );
            assert_eq!(r.get(&key).unwrap(), Some(&value[..]), "{}", g.file);
        }
        assert_eq!(r.iter().count(), g.objects.len());
        common(&bytes, g.file);
    }
}

#[test]
fn displacements_of_the_small_files() {
    let disp = |f: &str| {
        let b = data(f);
        ShardReader::open(&b, &ReadLimits::default())
            .unwrap()
            .hash_function()
            .displacements()
            .to_vec()
    };
    assert_eq!(disp("three.shard"), [1]);
    assert_eq!(disp("one.shard"), [0]);
    assert_eq!(disp("emptyval.shard"), [0]);
    assert_eq!(disp("cli.shard"), [2]);
    // Sizes from the README: 79 bytes with a store word, 75 without.
    let b = data("three.shard");
    assert_eq!(&b[1007..1014], b"chd_ph\0");
    assert_eq!(1086 - 1007, 79);
    assert_eq!(data("one.shard").len() - 964, 75);
}

#[test]
fn real_129_and_1000() {
    for (file, count, len, header, seed, n, nbuckets) in [
        (
            "real-129.shard",
            129,
            9245,
            [1, 129, 512, 3394, 3906, 5240, 9146],
            16,
            131,
            33,
        ),
        (
            "real-1000.shard",
            1000,
            69131,
            [1, 1000, 512, 27772, 28284, 40520, 68804],
            426,
            1013,
            251,
        ),
    ] {
        let bytes = data(file);
        assert_eq!(bytes.len(), len);
        let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
        assert_eq!(header_fields(r.header()), header, "{file}");
        let f = r.hash_function();
        assert_eq!(
            (f.seed(), f.n(), f.nbuckets()),
            (seed, n, nbuckets),
            "{file}"
        );
        let values = real_values(count);
        let mut offset = 512;
        for v in &values {
            let key = sha256(v);
            assert_eq!(r.get(&key).unwrap(), Some(&v[..]), "{file}");
            assert_eq!(r.entry(r.slot(&key)).unwrap().offset, offset);
            offset += 8 + v.len() as u64;
        }
        common(&bytes, file);
        // Our writer with the file's seed writes the file again.
        assert_same_bytes(&write(&values, SeedPolicy::List(vec![seed])), &bytes, file);
    }
}

/// A fresh swh-shard process seeds cmph with glibc's first `rand()` values: for three
/// objects that is seed 1, for one object seed 0, which is what these files hold, so the
/// default policy writes them byte for byte.
#[test]
fn default_seed_policy_matches_a_fresh_swh_process() {
    for g in small_goldens() {
        let values: Vec<Vec<u8>> = g.objects.iter().map(|o| o.0.clone()).collect();
        let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
        for v in &values {
            w.add(&sha256(v), v).unwrap();
        }
        let (out, header) = w.finish().unwrap();
        assert_eq!(header_fields(&header), g.header);
        assert_same_bytes(&out.into_inner(), &data(g.file), g.file);
    }
}

#[test]
fn deleted_entry() {
    let bytes = data("cli-deleted.shard");
    let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
    let gone = unhex("77e4ae400f6bd4ea22d74a712cb25af0e1ef2d15fc06561817af047677afa7fc");
    assert_eq!(gone, sha256(&data("b.txt")));
    assert_eq!(r.get(&gone).unwrap(), None);
    assert_eq!(
        r.entry(10).unwrap(),
        IndexEntry {
            key: [0; 32],
            offset: u64::MAX
        }
    );
    assert_eq!(r.header().objects_count, 3);
    assert!(bytes[526..544].iter().all(|&b| b == 0));
    for f in ["a.txt", "c.txt"] {
        let v = data(f);
        assert_eq!(r.get(&sha256(&v)).unwrap(), Some(&v[..]));
    }
    assert_eq!(r.iter().count(), 2);
    let report = r.verify_with(|k, v| sha256(v) == *k).unwrap();
    assert_eq!((report.live, report.deleted, report.empty_slots), (2, 1, 9));
    common(&bytes, "cli-deleted.shard");

    // Our delete does to cli.shard what swh-shard's did.
    let mut cli = data("cli.shard");
    assert!(delete(&mut cli, &gone, &ReadLimits::default()).unwrap());
    assert_same_bytes(&cli, &bytes, "cli.shard after delete");
    assert!(!delete(&mut cli, &gone, &ReadLimits::default()).unwrap());
    assert!(!delete(&mut cli, &[7; 32], &ReadLimits::default()).unwrap());
    assert_same_bytes(&cli, &bytes, "deleting absent keys changes nothing");
}

/// Trailing bytes after the hash section are ignored (swh-shard's `truncate` cuts them).
#[test]
fn trailing_bytes_are_ignored() {
    let mut bytes = data("three.shard");
    bytes.extend_from_slice(&[0xab; 100]);
    let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
    assert_eq!(r.hash_end(), 1086);
    assert_eq!(r.get(&sha256(b"hello")).unwrap(), Some(&b"hello"[..]));
    r.verify().unwrap();
}
