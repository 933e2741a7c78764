//! Round trips, lookups and adversarial inputs on random shards.

use proptest::prelude::*;
use xet_hash::MerkleHash;
use xet_shard::*;

fn hash() -> impl Strategy<Value = MerkleHash> {
    // Avoid the all-0xFF bookend hash; small word-0 range so truncated keys collide.
    (any::<[u8; 32]>(), any::<bool>()).prop_map(|(mut b, collide)| {
        if collide {
            b[..8].copy_from_slice(&7u64.to_le_bytes());
        }
        if b == [0xFF; 32] {
            b[0] = 0;
        }
        MerkleHash(b)
    })
}

fn term() -> impl Strategy<Value = FileTerm> {
    (hash(), any::<u32>(), any::<u32>(), 0u32..1000, 1u32..50).prop_map(
        |(h, flags, bytes, start, len)| FileTerm {
            xorb_hash: h,
            cas_flags: flags,
            unpacked_segment_bytes: bytes,
            chunk_index_start: start,
            chunk_index_end: start + len,
        },
    )
}

fn file(with_verification: bool) -> impl Strategy<Value = FileInfo> {
    (
        hash(),
        prop::collection::vec(term(), 0..5),
        any::<bool>(),
        any::<u32>(),
        prop::collection::vec(hash(), 5),
    )
        .prop_map(move |(h, terms, meta, other_flags, vh)| {
            let verification = with_verification.then(|| vh[..terms.len()].to_vec());
            let mut f = FileInfo::new(h, terms, verification, meta.then_some(h));
            // Bits other than 31/30 are carried through.
            f.flags |= other_flags & 0x3FFF_FFFF;
            f
        })
}

/// The empty file as hf_xet writes it.
fn empty_file() -> FileInfo {
    FileInfo::new(
        MerkleHash::ZERO,
        vec![],
        Some(vec![]),
        Some(MerkleHash::ZERO),
    )
}

fn cas() -> impl Strategy<Value = CasInfo> {
    (
        hash(),
        any::<u32>(),
        any::<u32>(),
        prop::collection::vec((hash(), 0u64..200_000, any::<u32>()), 0..8),
    )
        .prop_map(|(h, flags, on_disk, chunks)| {
            let list: Vec<(MerkleHash, u64)> = chunks.iter().map(|c| (c.0, c.1)).collect();
            let mut c = CasInfo::from_chunks(h, &list, on_disk).unwrap();
            c.cas_flags = flags;
            for (ch, x) in c.chunks.iter_mut().zip(&chunks) {
                ch.flags = x.2;
            }
            c
        })
}

fn shard() -> impl Strategy<Value = Shard> {
    any::<bool>()
        .prop_flat_map(|ver| {
            (
                prop::collection::vec(file(ver), 0..5),
                prop::collection::vec(cas(), 0..5),
                any::<bool>(),
                any::<bool>(),
            )
        })
        .prop_map(|(mut files, cas, with_empty, sorted)| {
            if with_empty && files.iter().all(|f| f.has_verification()) {
                files.push(empty_file());
            }
            let mut s = Shard::new(files, cas);
            if sorted {
                s.sort_canonical();
            }
            s
        })
}

fn stored_opts() -> impl Strategy<Value = StoredOptions> {
    (
        any::<bool>(),
        prop::option::of(hash()),
        any::<u64>(),
        any::<u64>(),
    )
        .prop_map(|(lookup_tables, key, ts, exp)| StoredOptions {
            lookup_tables,
            hmac_key: key,
            creation_timestamp: ts,
            key_expiry: exp,
        })
}

/// For a shard with no files and no xorbs, "tables present" and "absent" are the same bytes;
/// the parser reports "present".
fn normalize(mut s: Shard) -> Shard {
    if s.files.is_empty()
        && s.cas.is_empty()
        && let Some(f) = &mut s.footer
    {
        f.lookup_tables = true;
    }
    s
}

/// Whether every flag of `s` is one the format defines: what our writer's output must
/// then pass [`ParsedShard::check_strict`] on (it writes reserved fields as zero and the
/// footer statistics it computes).
fn only_defined_flags(s: &Shard) -> bool {
    let file = FILE_FLAG_WITH_VERIFICATION | FILE_FLAG_WITH_METADATA_EXT;
    s.files
        .iter()
        .all(|f| f.flags & !file == 0 && f.terms.iter().all(|t| t.cas_flags == 0))
        && s.cas.iter().all(|c| {
            c.cas_flags == 0
                && c.chunks
                    .iter()
                    .all(|ch| ch.flags & !CHUNK_FLAG_GLOBAL_DEDUP == 0)
        })
}

fn assert_lookups(p: &ParsedShard, raw: &Shard) -> Result<(), TestCaseError> {
    let s = &p.shard;
    for f in &s.files {
        let got = p.find_file(&f.file_hash);
        prop_assert!(got.is_some());
        prop_assert_eq!(got.unwrap().file_hash, f.file_hash);
    }
    // Raw (unkeyed) chunk hashes are found through the key; stored ones directly.
    for (ci, (c, rc)) in s.cas.iter().zip(&raw.cas).enumerate() {
        prop_assert!(p.find_cas(&c.xorb_hash).is_some());
        for (j, (ch, rch)) in c.chunks.iter().zip(&rc.chunks).enumerate() {
            let hit = p.find_chunk(&rch.hash).unwrap();
            // Duplicate hashes may resolve to an earlier copy; it must still hold that hash.
            prop_assert_eq!(
                s.cas[hit.cas_index].chunks[hit.chunk_index as usize].hash,
                ch.hash
            );
            prop_assert_eq!(s.cas[hit.cas_index].xorb_hash, hit.xorb_hash);
            let hit2 = p.find_chunk_keyed(&ch.hash).unwrap();
            prop_assert_eq!(hit, hit2);
            let _ = (ci, j);
        }
    }
    let absent = xet_hash::chunk_hash(b"absent");
    prop_assert!(p.find_chunk(&absent).is_none());
    prop_assert!(p.find_chunk_keyed(&absent).is_none());
    prop_assert!(p.find_file(&absent).is_none());
    if let Some(k) = s.chunk_hash_key() {
        // A keyed shard does not answer to the stored hash as if it were raw.
        for c in &s.cas {
            for ch in &c.chunks {
                prop_assert_ne!(s.stored_chunk_hash(&ch.hash), ch.hash);
                let _ = k;
            }
        }
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn upload_form_roundtrip(s in shard()) {
        let bytes = s.to_upload_bytes().unwrap();
        prop_assert_eq!(&bytes, &s.to_bytes().unwrap());
        let p = ParsedShard::parse(&bytes, &Limits::default()).unwrap();
        prop_assert_eq!(&p.shard, &s);
        prop_assert_eq!(p.check_strict().is_ok(), only_defined_flags(&s));
        prop_assert!(p.tables.is_none());
        assert_lookups(&p, &s)?;
        prop_assert_eq!(p.shard.to_upload_bytes().unwrap(), bytes);
    }

    /// huggingface.js uploads the upload form plus a footer without lookup tables whose
    /// table offsets are all 0: it parses to the same files and xorbs.
    #[test]
    fn huggingface_js_footer(s in shard()) {
        let up = s.to_upload_bytes().unwrap();
        let stored = s.clone().into_stored(StoredOptions { lookup_tables: false, hmac_key: None, creation_timestamp: 0, key_expiry: 0 }).unwrap().to_bytes().unwrap();
        let mut sf = [0u8; FOOTER_SIZE];
        sf.copy_from_slice(&stored[stored.len() - FOOTER_SIZE..]);
        let stored_footer = RawFooter::from_bytes(&sf);
        let js_footer = RawFooter {
            version: 1,
            file_info_offset: 48,
            cas_info_offset: stored_footer.cas_info_offset,
            file_lookup_offset: 0,
            file_lookup_num_entries: 0,
            cas_lookup_offset: 0,
            cas_lookup_num_entries: 0,
            chunk_lookup_offset: 0,
            chunk_lookup_num_entries: 0,
            chunk_hash_key: MerkleHash::default(),
            creation_timestamp: 1_700_000_000,
            key_expiry: 0,
            reserved: [0; 6],
            stored_bytes_on_disk: 0,
            materialized_bytes: 0,
            stored_bytes: 0,
            footer_offset: up.len() as u64,
        };
        let mut js = up.clone();
        js[40..48].copy_from_slice(&(FOOTER_SIZE as u64).to_le_bytes());
        js.extend_from_slice(&js_footer.to_bytes());
        let p = ParsedShard::parse(&js, &Limits::default()).unwrap();
        prop_assert_eq!(&p.shard.files, &s.files);
        prop_assert_eq!(&p.shard.cas, &s.cas);
        prop_assert_eq!(p.check_strict().is_ok(), only_defined_flags(&s));
        // A wrong footer offset is still refused.
        let mut bad = js.clone();
        let n = bad.len();
        bad[n - 8..].copy_from_slice(&(up.len() as u64 + 1).to_le_bytes());
        prop_assert!(ParsedShard::parse(&bad, &Limits::default()).is_err());
    }

    #[test]
    fn stored_form_roundtrip(s in shard(), opts in stored_opts()) {
        let stored = s.clone().into_stored(opts).unwrap();
        let keyed = opts.hmac_key.is_some_and(|k| !k.is_zero());
        prop_assert_eq!(stored.chunk_hash_key().is_some(), keyed);
        let bytes = stored.to_bytes().unwrap();
        let a = ParsedShard::parse(&bytes, &Limits::default()).unwrap();
        let b = ParsedShard::parse_by_footer(&bytes, &Limits::default()).unwrap();
        prop_assert_eq!(&a, &b);
        prop_assert_eq!(a.check_strict().is_ok(), only_defined_flags(&s));
        prop_assert_eq!(&a.shard, &normalize(stored.clone()));
        prop_assert_eq!(a.shard.to_bytes().unwrap(), bytes.clone());
        if stored.footer.unwrap().lookup_tables {
            prop_assert_eq!(a.tables.as_ref(), Some(&stored.lookup_tables().unwrap()));
        }
        assert_lookups(&a, &s)?;
        // Upload form of the parsed stored shard parses back to the same content.
        let up = a.shard.clone().into_upload();
        let up_bytes = up.to_upload_bytes().unwrap();
        prop_assert_eq!(&up_bytes[48..], &bytes[48..up_bytes.len()]);
        prop_assert_eq!(Shard::parse(&up_bytes, &Limits::default()).unwrap(), up);
        // Keying twice is refused.
        if keyed {
            prop_assert!(matches!(stored.clone().into_stored(opts), Err(ShardError::AlreadyKeyed { .. })), "keyed twice");
        }
        // Index built in memory answers like the one parsed from bytes.
        let idx = ParsedShard::from_shard(stored.clone()).unwrap();
        assert_lookups(&idx, &s)?;
    }

    #[test]
    fn lookup_tables_sorted_and_complete(s in shard()) {
        let t = s.lookup_tables().unwrap();
        prop_assert!(t.files.windows(2).all(|w| w[0].key <= w[1].key));
        prop_assert!(t.cas.windows(2).all(|w| w[0].key <= w[1].key));
        prop_assert!(t.chunks.windows(2).all(|w| w[0].key <= w[1].key));
        prop_assert_eq!(t.files.len(), s.files.len());
        prop_assert_eq!(t.cas.len(), s.cas.len());
        prop_assert_eq!(t.chunks.len(), s.cas.iter().map(|c| c.chunks.len()).sum::<usize>());
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..600), with_header in any::<bool>(), fs in prop::sample::select(vec![0u64, 200])) {
        let mut b = bytes;
        if with_header {
            let mut h = HEADER_TAG.to_vec();
            h.extend_from_slice(&2u64.to_le_bytes());
            h.extend_from_slice(&fs.to_le_bytes());
            h.extend_from_slice(&b);
            b = h;
        }
        let _ = ParsedShard::parse(&b, &Limits::default());
        let _ = ParsedShard::parse_by_footer(&b, &Limits::default());
    }

    #[test]
    fn truncated_and_bit_flipped_shards(s in shard(), opts in stored_opts(), cut in any::<prop::sample::Index>(), flips in prop::collection::vec((any::<prop::sample::Index>(), 0u8..8), 1..4)) {
        let stored = s.into_stored(opts).unwrap();
        for bytes in [stored.to_bytes().unwrap(), stored.to_upload_bytes().unwrap()] {
            // Every strict prefix is rejected.
            let n = cut.index(bytes.len());
            prop_assert!(ParsedShard::parse(&bytes[..n], &Limits::default()).is_err());
            let _ = ParsedShard::parse_by_footer(&bytes[..n], &Limits::default());
            // Bit flips: an error, or a shard that re-serializes to the flipped bytes except
            // at flipped positions (reserved fields are not kept).
            let mut f = bytes.clone();
            let mut flipped = Vec::new();
            for (i, bit) in &flips {
                let i = i.index(f.len());
                f[i] ^= 1 << bit;
                flipped.push(i);
            }
            let results = [ParsedShard::parse(&f, &Limits::default()), ParsedShard::parse_by_footer(&f, &Limits::default())];
            for p in results.into_iter().flatten() {
                let again = p.shard.to_bytes().unwrap();
                prop_assert_eq!(again.len(), f.len());
                // A flip may make other bytes read as reserved fields (a term becoming a
                // metadata entry when the term count drops), which are written back as
                // zeros; every other byte must come back as it was.
                let reserved = reserved_bytes(&p.shard);
                for (k, (a, b)) in again.iter().zip(&f).enumerate() {
                    prop_assert!(
                        a == b || flipped.contains(&k) || (*a == 0 && reserved.contains(&k)),
                        "byte {} changed", k
                    );
                }
            }
        }
    }
}

/// Offsets of the bytes `s.to_bytes()` writes as reserved zeros, which parsing ignores:
/// the tail of each file header, of each verification and metadata entry, of each CAS
/// chunk record, and of both bookends.
fn reserved_bytes(s: &Shard) -> std::collections::HashSet<usize> {
    let mut out = std::collections::HashSet::new();
    let tail = |at: usize, from: usize, out: &mut std::collections::HashSet<usize>| {
        out.extend(at + from..at + RECORD_SIZE);
    };
    let mut off = HEADER_SIZE;
    for f in &s.files {
        tail(off, 40, &mut out);
        off += RECORD_SIZE * (1 + f.terms.len());
        let extra =
            f.verification.as_ref().map_or(0, Vec::len) + usize::from(f.metadata_ext.is_some());
        for _ in 0..extra {
            tail(off, 32, &mut out);
            off += RECORD_SIZE;
        }
    }
    tail(off, 32, &mut out);
    off += RECORD_SIZE;
    for c in &s.cas {
        off += RECORD_SIZE;
        for _ in &c.chunks {
            tail(off, 44, &mut out);
            off += RECORD_SIZE;
        }
    }
    tail(off, 32, &mut out);
    out
}

#[test]
fn all_prefixes_of_a_real_shard_fail_cleanly() {
    for p in xet_testdata::reference_artifacts("shard-cache")
        .into_iter()
        .chain(xet_testdata::reference_artifacts("shards"))
    {
        let bytes = std::fs::read(&p).unwrap();
        for n in 0..bytes.len() {
            assert!(
                ParsedShard::parse(&bytes[..n], &Limits::default()).is_err(),
                "prefix {n} accepted"
            );
            assert!(
                ParsedShard::parse_by_footer(&bytes[..n], &Limits::default()).is_err(),
                "prefix {n} accepted"
            );
        }
        // Every single-bit flip: never a panic.
        for i in 0..bytes.len() {
            for bit in 0..8 {
                let mut f = bytes.clone();
                f[i] ^= 1 << bit;
                let _ = ParsedShard::parse(&f, &Limits::default());
                let _ = ParsedShard::parse_by_footer(&f, &Limits::default());
            }
        }
    }
}
