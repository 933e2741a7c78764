//! The writer: round trips, the empty shard, streamed values, a shard inside a larger
//! stream, refused keys.

use std::io::{Cursor, Read, Seek, SeekFrom, Write};

use xet_swh::*;

fn key(i: u64) -> [u8; 32] {
    let mut k = [0u8; 32];
    k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
    k[8..16].copy_from_slice(&i.to_be_bytes());
    k[31] = 0x5a;
    k
}

fn value(i: u64) -> Vec<u8> {
    (0..(i * 7919) % 300).map(|j| (i + j) as u8).collect()
}

fn write(count: u64) -> Vec<u8> {
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    for i in 0..count {
        w.add(&key(i), &value(i)).unwrap();
    }
    assert_eq!(w.len(), count);
    w.finish().unwrap().0.into_inner()
}

#[test]
fn round_trip_and_determinism() {
    for count in [1u64, 2, 3, 10, 11, 100, 128, 129, 1000, 5000] {
        let bytes = write(count);
        assert_eq!(bytes, write(count), "same input, same bytes");
        let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
        let h = r.header();
        assert_eq!(h.objects_count, count);
        assert_eq!(h.objects_position, 512);
        assert_eq!(u64::from(r.slots()), u64::from(slot_count(count).unwrap()));
        assert_eq!(r.hash_end(), bytes.len() as u64);
        for i in 0..count {
            assert_eq!(
                r.get(&key(i)).unwrap(),
                Some(&value(i)[..]),
                "{count}: #{i}"
            );
        }
        for i in count..count + 200 {
            assert_eq!(r.get(&key(i)).unwrap(), None);
        }
        let report = r.verify().unwrap();
        assert_eq!((report.live, report.deleted), (count, 0));
        assert_eq!(r.iter().count() as u64, count);
        // The default seeds are swh-shard's: glibc's rand() values modulo the count, the
        // first one unless it failed (for 100 keys it does: two keys of one bucket share
        // (f, h), and cmph takes the next).
        let mut rand = GlibcRand::new(1);
        let seeds: Vec<u32> = (0..3).map(|_| rand.next_u31() % count as u32).collect();
        let seed = r.hash_function().seed();
        assert!(seeds.contains(&seed), "{count}: seed {seed}");
        assert_eq!(seed == seeds[0], count != 100, "{count}");
    }
}

#[test]
fn the_empty_shard() {
    let (out, header) = ShardWriter::new(Cursor::new(Vec::new()))
        .unwrap()
        .finish()
        .unwrap();
    let bytes = out.into_inner();
    assert_eq!(header.objects_count, 0);
    assert_eq!(header.objects_size, 0);
    assert_eq!(header.index_size, 440);
    let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
    assert_eq!(r.slots(), 11);
    assert_eq!(r.iter().count(), 0);
    assert_eq!(r.get(&key(1)).unwrap(), None);
    assert_eq!(r.get(&[0; 32]).unwrap(), None);
    let report = r.verify().unwrap();
    assert_eq!((report.live, report.empty_slots), (0, 11));
}

#[test]
fn deleting_then_reading() {
    let mut bytes = write(300);
    for i in (0..300).step_by(7) {
        assert!(delete(&mut bytes, &key(i), &ReadLimits::default()).unwrap());
    }
    let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
    for i in 0..300 {
        let want = (i % 7 != 0).then(|| value(i));
        assert_eq!(r.get(&key(i)).unwrap().map(<[u8]>::to_vec), want);
    }
    let report = r.verify().unwrap();
    assert_eq!((report.live, report.deleted), (257, 43));
    assert_eq!(r.iter().count(), 257);
    assert_eq!(r.header().objects_count, 300);
}

/// A value read from a stream, of 5 MiB, next to small ones.
#[test]
fn streamed_values() {
    let big: Vec<u8> = (0..5u32 << 20).map(|i| (i * 31 + i / 977) as u8).collect();
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    w.add(&key(1), b"small").unwrap();
    w.add_from_reader(&key(2), big.len() as u64, &mut &big[..])
        .unwrap();
    w.add_from_reader(&key(3), 0, &mut std::io::empty())
        .unwrap();
    // Exactly `size` bytes are taken from a longer reader.
    w.add_from_reader(&key(4), 3, &mut &b"abcdef"[..]).unwrap();
    let bytes = w.finish().unwrap().0.into_inner();
    let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
    assert_eq!(r.get(&key(1)).unwrap(), Some(&b"small"[..]));
    assert!(r.get(&key(2)).unwrap() == Some(&big[..]));
    assert_eq!(r.get(&key(3)).unwrap(), Some(&b""[..]));
    assert_eq!(r.get(&key(4)).unwrap(), Some(&b"abc"[..]));
    r.verify().unwrap();
}

#[test]
fn a_short_reader_spoils_the_shard() {
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    let e = w
        .add_from_reader(&key(1), 10, &mut &b"12345"[..])
        .unwrap_err();
    assert_eq!(
        e.to_string(),
        format!(
            "object #0 (key {}) was declared 10 bytes but its reader ended after 5",
            key(1)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect::<String>()
        )
    );
    assert!(matches!(w.add(&key(2), b""), Err(WriteError::Poisoned)));

    struct Broken;
    impl Read for Broken {
        fn read(&mut self, _: &mut [u8]) -> std::io::Result<usize> {
            Err(std::io::Error::other("gone"))
        }
    }
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    let e = w.add_from_reader(&key(1), 10, &mut Broken).unwrap_err();
    assert!(matches!(
        e,
        WriteError::ValueRead {
            read: 0,
            size: 10,
            ..
        }
    ));
    assert_eq!(std::error::Error::source(&e).unwrap().to_string(), "gone");
}

#[test]
fn refused_keys() {
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    assert!(matches!(
        w.add(&[0; 32], b"x"),
        Err(WriteError::ZeroKey { index: 0 })
    ));
    // A refused key leaves the writer usable.
    for i in 0..50 {
        w.add(&key(i), &value(i)).unwrap();
    }
    w.add(&key(17), b"again").unwrap();
    let e = w.finish().unwrap_err();
    assert_eq!(
        e.to_string(),
        "building the hash function failed",
        "the cause is the source"
    );
    match e {
        WriteError::Build(BuildError::DuplicateKey {
            key: k,
            first,
            second,
        }) => {
            assert_eq!((k, first, second), (key(17), 17, 50));
        }
        e => panic!("{e:?}"),
    }
}

/// The shard starts where the stream was: offsets in it are from the shard's start.
#[test]
fn a_shard_inside_a_larger_stream() {
    let mut c = Cursor::new(Vec::new());
    c.write_all(b"some prefix").unwrap();
    let mut w = ShardWriter::new(c).unwrap();
    for i in 0..20 {
        w.add(&key(i), &value(i)).unwrap();
    }
    let (mut c, header) = w.finish().unwrap();
    let end = c.stream_position().unwrap();
    assert_eq!(end, c.get_ref().len() as u64, "left at the end");
    c.seek(SeekFrom::Start(0)).unwrap();
    let bytes = c.into_inner();
    assert_eq!(&bytes[..11], b"some prefix");
    let shard = &bytes[11..];
    assert_eq!(shard, &write(20)[..]);
    let r = ShardReader::open(shard, &ReadLimits::default()).unwrap();
    assert_eq!(*r.header(), header);
}

/// Given seeds are used in order; a function that fits is found with any seed.
#[test]
fn given_seeds() {
    let keys: Vec<[u8; 32]> = (0..1000).map(key).collect();
    for seed in [0u32, 1, 12345, u32::MAX] {
        let f = ChdPh::build(&keys, &SeedPolicy::List(vec![seed])).unwrap();
        assert_eq!(f.seed(), seed);
        let mut w =
            ShardWriter::with_seeds(Cursor::new(Vec::new()), SeedPolicy::List(vec![seed])).unwrap();
        for (i, k) in keys.iter().enumerate() {
            w.add(k, &value(i as u64)).unwrap();
        }
        let bytes = w.finish().unwrap().0.into_inner();
        let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
        assert_eq!(r.hash_function(), &f);
        r.verify().unwrap();
    }
}
