//! SWH read shards (`xet-swh`): `ShardReader::open` on arbitrary bytes within small limits,
//! then lookups, iteration, `verify`, `delete`, and the writer on what was read.
//!
//! Checks: no panic; an opened shard's hash section is exactly the dump of its parsed
//! function (open accepts only cmph's own encoding); when `verify` passes, iteration yields
//! no error and `get` finds every iterated key with the same value, deleting a key makes it
//! unfindable and leaves a shard that still verifies with one more deleted object, and the
//! live objects written again by `ShardWriter` read back the same.
#![no_main]

use std::io::Cursor;

use libfuzzer_sys::fuzz_target;
use xet_swh::{ReadLimits, ShardReader, ShardWriter, delete};

fuzz_target!(|data: &[u8]| {
    let limits = ReadLimits {
        max_bytes: 1 << 20,
        max_objects: 4096,
        max_slots: 8192,
        max_hash_bytes: 1 << 16,
    };
    let Ok(r) = ShardReader::open(data, &limits) else {
        return;
    };
    assert_eq!(
        r.hash_function().dump().expect("an opened function dumps"),
        r.hash_section(),
        "the hash section is not the dump of its function"
    );
    let items: Vec<_> = r.iter().collect();
    for chunk in data.chunks_exact(32).take(32) {
        let key: &[u8; 32] = chunk.try_into().expect("32 bytes");
        let _ = r.get(key);
        let slot = r.slot(key);
        assert!(slot < r.slots());
        assert!(r.entry(slot).is_some());
    }
    assert!(r.entry(r.slots()).is_none());
    let Ok(report) = r.verify() else {
        return;
    };
    let live: Vec<([u8; 32], &[u8])> = items
        .into_iter()
        .map(|i| i.map(|(k, v)| (*k, v)).expect("a verified shard iterates"))
        .collect();
    assert_eq!(live.len() as u64, report.live);
    for (k, v) in &live {
        assert_eq!(r.get(k).expect("a verified shard reads"), Some(*v));
    }

    if let Some((gone, _)) = live.first() {
        let mut copy = data.to_vec();
        assert!(delete(&mut copy, gone, &limits).expect("delete in a verified shard"));
        let after = ShardReader::open(&copy, &limits).expect("a shard after delete opens");
        assert_eq!(after.get(gone).expect("get"), None);
        let report2 = after.verify().expect("a shard after delete verifies");
        assert_eq!(report2.live, report.live - 1);
        assert_eq!(report2.deleted, report.deleted + 1);
    }

    // The writer refuses the all-zero key, which a shard may hold.
    let kept: Vec<_> = live.iter().filter(|(k, _)| *k != [0; 32]).collect();
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).expect("writer");
    for (k, v) in &kept {
        w.add(k, v).expect("add");
    }
    let bytes = w.finish().expect("finish").0.into_inner();
    let back = ShardReader::open(&bytes, &ReadLimits::unlimited()).expect("our shard opens");
    assert_eq!(
        back.verify().expect("our shard verifies").live,
        kept.len() as u64
    );
    for (k, v) in &kept {
        assert_eq!(back.get(k).expect("get"), Some(*v));
    }
});
