//! Properties over random key sets and random damage.

use std::collections::BTreeMap;
use std::io::Cursor;

use proptest::prelude::*;
use xet_swh::*;

/// Keys that are random, or near one another (one byte apart), which stresses the hash.
fn keys(max: usize) -> impl Strategy<Value = Vec<[u8; 32]>> {
    (
        prop::collection::vec(any::<[u8; 32]>(), 0..max),
        any::<[u8; 32]>(),
        0..max,
    )
        .prop_map(|(mut random, base, near)| {
            for i in 0..near {
                let mut k = base;
                k[i % 32] ^= (i / 32 + 1) as u8;
                random.push(k);
            }
            let mut seen = std::collections::HashSet::new();
            random.retain(|k| *k != [0; 32] && seen.insert(*k));
            random
        })
}

fn shard(entries: &BTreeMap<[u8; 32], Vec<u8>>) -> Vec<u8> {
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    for (k, v) in entries {
        w.add(k, v).unwrap();
    }
    w.finish().unwrap().0.into_inner()
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]

    /// Any set of distinct keys builds, and every key lands in its own slot.
    #[test]
    fn any_key_set_builds(keys in keys(400)) {
        let f = ChdPh::build(&keys, &SeedPolicy::Swh).unwrap();
        let mut seen = vec![false; f.n() as usize];
        for k in &keys {
            let s = f.search32(k) as usize;
            prop_assert!(!seen[s]);
            seen[s] = true;
        }
        let dump = f.dump().unwrap();
        let (back, len) = ChdPh::parse(&dump, 0, u64::MAX, u64::MAX).unwrap();
        prop_assert_eq!(back, f);
        prop_assert_eq!(len, dump.len() as u64);
    }

    /// Writer to reader: every key found with its value, absent keys not, iteration gives
    /// exactly the entries, verify passes, and the same input gives the same bytes.
    #[test]
    fn writer_reader_round_trip(
        entries in prop::collection::btree_map(any::<[u8; 32]>(), prop::collection::vec(any::<u8>(), 0..64), 0..200),
        absent in prop::collection::vec(any::<[u8; 32]>(), 1..50),
    ) {
        let entries: BTreeMap<_, _> = entries.into_iter().filter(|(k, _)| *k != [0; 32]).collect();
        let bytes = shard(&entries);
        prop_assert_eq!(&bytes, &shard(&entries));
        let r = ShardReader::open(&bytes, &ReadLimits::default()).unwrap();
        for (k, v) in &entries {
            prop_assert_eq!(r.get(k).unwrap(), Some(&v[..]));
        }
        for k in absent.iter().filter(|k| !entries.contains_key(*k)) {
            prop_assert_eq!(r.get(k).unwrap(), None);
        }
        let got: BTreeMap<[u8; 32], Vec<u8>> =
            r.iter().map(|e| e.map(|(k, v)| (*k, v.to_vec())).unwrap()).collect();
        prop_assert_eq!(&got, &entries);
        let report = r.verify().unwrap();
        prop_assert_eq!(report.live, entries.len() as u64);
    }

    /// Any function (seed, n, displacements) survives its dump.
    #[test]
    fn dumps_round_trip(
        seed in any::<u32>(),
        n in 2u32..100_000,
        disp in prop::collection::vec(prop_oneof![0u32..4, 0u32..20_000, 0u32..u32::MAX], 1..600),
    ) {
        let disp: Vec<u32> = disp.into_iter().take(n as usize).collect();
        let f = ChdPh::new(seed, n, disp).unwrap();
        let dump = f.dump().unwrap();
        let (back, len) = ChdPh::parse(&dump, 0, u64::MAX, u64::MAX).unwrap();
        prop_assert_eq!(&back, &f);
        prop_assert_eq!(len, dump.len() as u64);
        let mut more = dump.clone();
        more.extend_from_slice(b"trailing");
        prop_assert_eq!(ChdPh::parse(&more, 0, u64::MAX, u64::MAX).unwrap().0, f);
        for cut in [0, 7, 30, dump.len() / 2, dump.len() - 1] {
            prop_assert!(ChdPh::parse(&dump[..cut], 0, u64::MAX, u64::MAX).is_err());
        }
    }

    /// Random damage never panics, and whatever still verifies is self-consistent.
    #[test]
    fn damage_never_panics(
        count in 0u64..60,
        edits in prop::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        cut in any::<prop::sample::Index>(),
        truncate in any::<bool>(),
    ) {
        let entries: BTreeMap<[u8; 32], Vec<u8>> = (0..count)
            .map(|i| ([i as u8 + 1; 32], vec![i as u8; i as usize]))
            .collect();
        let mut bytes = shard(&entries);
        for (at, v) in edits {
            let i = at.index(bytes.len());
            bytes[i] = v;
        }
        if truncate {
            bytes.truncate(cut.index(bytes.len()));
        }
        let limits = ReadLimits { max_bytes: 1 << 20, max_objects: 1000, max_slots: 2000, max_hash_bytes: 4096 };
        if let Ok(r) = ShardReader::open(&bytes, &limits) {
            let items: Vec<_> = r.iter().collect();
            for k in entries.keys() {
                let _ = r.get(k);
            }
            if r.verify().is_ok() {
                for item in items {
                    let (k, v) = item.unwrap();
                    prop_assert_eq!(r.get(k).unwrap(), Some(v));
                }
            }
        }
    }
}
