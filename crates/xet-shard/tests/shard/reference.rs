//! Real shards written by the reference client.

use std::collections::HashMap;
use std::path::{Path, PathBuf};

use xet_hash::MerkleHash;
use xet_shard::*;

fn data_sessions() -> Vec<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data");
    vec![d.join("session1"), d.join("session2")]
}

fn mdb_in(dir: &Path) -> Vec<PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "mdb"))
        .collect();
    v.sort();
    v
}

/// (local-store shards, shard-cache shards) of every session we have.
fn sessions() -> Vec<(Vec<PathBuf>, Vec<PathBuf>)> {
    let mut out: Vec<(Vec<PathBuf>, Vec<PathBuf>)> = data_sessions()
        .iter()
        .map(|d| (mdb_in(&d.join("shards")), mdb_in(&d.join("shard-cache"))))
        .collect();
    out.push((
        xet_testdata::reference_artifacts("shards"),
        xet_testdata::reference_artifacts("shard-cache"),
    ));
    for (a, b) in &out {
        assert!(!a.is_empty() && !b.is_empty(), "missing reference shards");
    }
    out
}

fn all_shards() -> Vec<PathBuf> {
    sessions()
        .into_iter()
        .flat_map(|(a, b)| a.into_iter().chain(b))
        .collect()
}

/// assert_eq for byte strings that reports the first difference instead of dumping both.
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

fn stem_hash(p: &Path) -> MerkleHash {
    MerkleHash::from_hex(p.file_stem().unwrap().to_str().unwrap()).unwrap()
}

#[test]
fn reference_shards_parse_and_reserialize_identically() {
    for p in all_shards() {
        let bytes = std::fs::read(&p).unwrap();
        let a = ParsedShard::parse(&bytes, &Limits::default())
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        let b = ParsedShard::parse_by_footer(&bytes, &Limits::default()).unwrap();
        assert_eq!(a.shard, b.shard, "{}", p.display());
        assert_eq!(a.tables, b.tables);
        assert_same_bytes(
            &a.shard.to_bytes().unwrap(),
            &bytes,
            &p.display().to_string(),
        );
        // Nothing a store's strict check refuses: hf_xet's shards must stay accepted.
        a.check_strict()
            .unwrap_or_else(|e| panic!("{}: {e}", p.display()));
        b.check_strict().unwrap();
        // The footer we write is the footer we read.
        let f = a.footer.unwrap();
        assert_eq!(f.to_bytes()[..], bytes[bytes.len() - FOOTER_SIZE..]);
        assert_eq!(f.reserved, [0; 6]);
        // Every file as hf_xet writes it: verification + metadata ext, blocks sorted.
        for w in a.shard.files.windows(2) {
            assert!(hash_order_key(&w[0].file_hash) < hash_order_key(&w[1].file_hash));
        }
        for w in a.shard.cas.windows(2) {
            assert!(hash_order_key(&w[0].xorb_hash) < hash_order_key(&w[1].xorb_hash));
        }
        for f in &a.shard.files {
            assert_eq!(f.flags, 0xC000_0000);
        }
        // Footer statistics are what we compute.
        let info = a.shard.footer.unwrap();
        assert_eq!(info.materialized_bytes, a.shard.materialized_bytes());
        assert_eq!(info.stored_bytes, a.shard.stored_bytes());
        assert_eq!(info.stored_bytes_on_disk, a.shard.stored_bytes_on_disk());
        assert!(info.chunk_hash_key.is_zero());
    }
}

#[test]
fn shard_file_name_is_chunk_hash_of_whole_file() {
    for p in all_shards() {
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(shard_hash(&bytes), stem_hash(&p), "{}", p.display());
        assert_eq!(
            shard_hash(&bytes).to_string(),
            p.file_stem().unwrap().to_str().unwrap()
        );
    }
}

#[test]
fn upload_form_roundtrip() {
    for p in all_shards() {
        let bytes = std::fs::read(&p).unwrap();
        let s = Shard::parse(&bytes, &Limits::default()).unwrap();
        let up = s.clone().into_upload().to_upload_bytes().unwrap();
        assert_eq!(u64::from_le_bytes(up[40..48].try_into().unwrap()), 0);
        // The upload form is the stored form's prefix up to the CAS bookend (except footer_size).
        let cas_end = up.len();
        assert_same_bytes(&up[48..], &bytes[48..cas_end], "sections");
        assert_eq!(up[..40], bytes[..40]);
        let back = ParsedShard::parse(&up, &Limits::default()).unwrap();
        assert!(back.footer.is_none() && back.tables.is_none());
        assert_eq!(back.shard, s.clone().into_upload());
        assert!(matches!(
            ParsedShard::parse_by_footer(&up, &Limits::default()),
            Err(ShardError::NoFooter)
        ));
    }
}

#[test]
fn shard_cache_lookup_tables_match_reference_bytes() {
    for (_, cache) in sessions() {
        for p in cache {
            let bytes = std::fs::read(&p).unwrap();
            let parsed = ParsedShard::parse(&bytes, &Limits::default()).unwrap();
            let f = parsed.footer.unwrap();
            let ours = parsed.shard.lookup_tables().unwrap();
            assert_eq!(Some(&ours), parsed.tables.as_ref(), "{}", p.display());
            assert_eq!(ours.files.len(), parsed.shard.files.len());
            assert_eq!(ours.chunks.len() as u64, f.chunk_lookup_num_entries);
            // Byte for byte: the table region we write equals the reference's.
            let info = parsed.shard.footer.unwrap();
            assert!(info.lookup_tables);
            let again = parsed.shard.to_stored_bytes(&info).unwrap();
            let (s, e) = (f.file_lookup_offset as usize, f.footer_offset as usize);
            assert_same_bytes(&again[s..e], &bytes[s..e], "lookup tables");
            // Expiry is creation + 21 days; rebuilding with the preset reproduces the file.
            assert_eq!(f.key_expiry, f.creation_timestamp + SHARD_CACHE_EXPIRY_SECS);
            let rebuilt = parsed
                .shard
                .clone()
                .into_upload()
                .into_stored(StoredOptions::shard_cache(f.creation_timestamp))
                .unwrap();
            assert_same_bytes(
                &rebuilt.to_bytes().unwrap(),
                &bytes,
                "rebuilt shard-cache shard",
            );
        }
    }
}

#[test]
fn lookup_values_are_record_indices() {
    // session2 has three xorbs: the CAS table and the chunk table's first value are the
    // record index of the CAS block header (0, 1 + 101, 1 + 101 + 1 + 1051), not 0/1/2.
    let p = mdb_in(&data_sessions()[1].join("shard-cache")).remove(0);
    let parsed = ParsedShard::parse(&std::fs::read(p).unwrap(), &Limits::default()).unwrap();
    let t = parsed.tables.as_ref().unwrap();
    let mut idx: Vec<u32> = t.cas.iter().map(|e| e.entry_index).collect();
    idx.sort();
    assert_eq!(idx, vec![0, 102, 1154]);
    let mut per: HashMap<u32, usize> = HashMap::new();
    for e in &t.chunks {
        *per.entry(e.cas_entry_index).or_default() += 1;
    }
    assert_eq!(per, HashMap::from([(0, 101), (102, 1051), (1154, 1058)]));
    // Keys are word 0 of the hash.
    for e in &t.chunks {
        let ci = parsed
            .shard
            .cas_entry_indices()
            .unwrap()
            .binary_search(&e.cas_entry_index)
            .unwrap();
        let h = parsed.shard.cas[ci].chunks[e.chunk_index as usize].hash;
        assert_eq!(e.key, u64::from_le_bytes(h.0[..8].try_into().unwrap()));
    }
}

#[test]
fn local_store_shard_derives_from_shard_cache_shard() {
    // The local:// store's shard = the uploaded shard with global-dedup chunk flags set,
    // written with empty lookup tables and zero timestamps.
    for (store, cache) in sessions() {
        assert_eq!(store.len(), 1);
        assert_eq!(cache.len(), 1);
        let cache_bytes = std::fs::read(&cache[0]).unwrap();
        let store_bytes = std::fs::read(&store[0]).unwrap();
        let c = Shard::parse(&cache_bytes, &Limits::default()).unwrap();
        assert!(
            c.cas.iter().flat_map(|x| &x.chunks).all(|ch| ch.flags == 0),
            "shard cache has no chunk flags"
        );
        let mut up = c.into_upload();
        up.mark_global_dedup_chunks();
        let stored = up.into_stored(StoredOptions::local_store()).unwrap();
        let bytes = stored.to_bytes().unwrap();
        assert_same_bytes(&bytes, &store_bytes, &store[0].display().to_string());
        assert_eq!(shard_hash(&bytes), stem_hash(&store[0]));
        // Exactly the first chunk of each non-empty file is flagged (not the chunks that are
        // eligible by hash: session1 has one, chunk 21, and it stays unflagged).
        let flagged = stored
            .cas
            .iter()
            .flat_map(|x| &x.chunks)
            .filter(|ch| ch.flags == CHUNK_FLAG_GLOBAL_DEDUP)
            .count();
        let firsts: std::collections::HashSet<_> = stored
            .files
            .iter()
            .filter_map(|f| f.terms.first())
            .map(|t| (t.xorb_hash, t.chunk_index_start))
            .collect();
        assert_eq!(flagged, firsts.len());
        assert!(
            stored
                .cas
                .iter()
                .flat_map(|x| &x.chunks)
                .all(|ch| ch.flags & !CHUNK_FLAG_GLOBAL_DEDUP == 0)
        );
    }
}

#[test]
fn lookups_on_reference_shards() {
    for p in all_shards() {
        let parsed = ParsedShard::parse(&std::fs::read(&p).unwrap(), &Limits::default()).unwrap();
        let linear = &parsed.shard;
        for f in &linear.files {
            assert_eq!(parsed.find_file(&f.file_hash), Some(f));
        }
        for (ci, c) in linear.cas.iter().enumerate() {
            assert_eq!(parsed.find_cas(&c.xorb_hash), Some(c));
            for (j, ch) in c.chunks.iter().enumerate() {
                let loc = ChunkLocation {
                    xorb_hash: c.xorb_hash,
                    cas_index: ci,
                    chunk_index: j as u32,
                };
                assert_eq!(parsed.find_chunk(&ch.hash), Some(loc));
                assert_eq!(linear.find_chunk(&ch.hash), Some(loc));
            }
        }
        let absent = xet_hash::chunk_hash(b"not in any shard");
        assert_eq!(parsed.find_chunk(&absent), None);
        assert_eq!(parsed.find_file(&absent), None);
    }
}

#[test]
fn verification_entries_and_sha256_match_golden_files() {
    let golden = xet_testdata::golden_files();
    let by_hash: HashMap<MerkleHash, &xet_testdata::GoldenFile> = golden
        .iter()
        .map(|(_, g)| (MerkleHash::from_hex(&g.hash).unwrap(), g))
        .collect();
    let mut checked = 0;
    for p in all_shards() {
        let s = Shard::parse(&std::fs::read(&p).unwrap(), &Limits::default()).unwrap();
        for f in &s.files {
            let Some(g) = by_hash.get(&f.file_hash) else {
                continue;
            };
            let chunks: Vec<MerkleHash> = g
                .chunks
                .iter()
                .map(|c| MerkleHash::from_hex(&c.hash).unwrap())
                .collect();
            f.verify_file_chunks(&chunks).unwrap();
            assert_eq!(f.size(), g.size);
            let sha = MerkleHash::from_raw_hex(&g.sha256).unwrap();
            assert_eq!(f.sha256_digest(), Some(sha.0));
            // The stored form reads back as the plain hex with the hash-string conversion.
            assert_eq!(f.metadata_ext.unwrap().to_string(), g.sha256);
            // Tampering is detected.
            if let Some(first) = chunks.first() {
                let mut bad = chunks.clone();
                bad[0] = xet_hash::chunk_hash(&first.0);
                assert!(matches!(
                    f.verify_file_chunks(&bad),
                    Err(ShardError::VerificationMismatch { .. })
                ));
            }
            checked += 1;
        }
    }
    assert!(checked >= 4, "only {checked} files checked");
}

#[test]
fn verification_against_xorb_chunks_in_the_same_shard() {
    // Terms pointing at xorbs listed in the shard verify against the CAS entries.
    for p in all_shards() {
        let s = Shard::parse(&std::fs::read(&p).unwrap(), &Limits::default()).unwrap();
        for f in &s.files {
            f.verify_terms(|t| {
                let c = s.find_cas(&t.xorb_hash)?;
                let r = c
                    .chunks
                    .get(t.chunk_index_start as usize..t.chunk_index_end as usize)?;
                Some(r.iter().map(|ch| ch.hash).collect())
            })
            .unwrap();
            // And each term's size is the sum of its chunks.
            for t in &f.terms {
                let c = s.find_cas(&t.xorb_hash).unwrap();
                let sum: u64 = c.chunks
                    [t.chunk_range().start as usize..t.chunk_range().end as usize]
                    .iter()
                    .map(|ch| ch.unpacked_segment_bytes as u64)
                    .sum();
                assert_eq!(sum, t.unpacked_segment_bytes as u64);
            }
        }
    }
}

#[test]
fn builders_reproduce_reference_upload_form() {
    // Rebuild every shard from scratch with the builders, from the CAS chunk lists and
    // the terms' ranges, and compare with the reference bytes.
    for p in all_shards() {
        let bytes = std::fs::read(&p).unwrap();
        let s = Shard::parse(&bytes, &Limits::default()).unwrap();
        let mut b = ShardBuilder::new();
        // Insert in reverse order: the builder sorts.
        for c in s.cas.iter().rev() {
            let chunks: Vec<(MerkleHash, u64)> = c
                .chunks
                .iter()
                .map(|ch| (ch.hash, ch.unpacked_segment_bytes as u64))
                .collect();
            let mut built =
                CasInfo::from_chunks(c.xorb_hash, &chunks, c.num_bytes_on_disk).unwrap();
            for (x, y) in built.chunks.iter_mut().zip(&c.chunks) {
                x.flags = y.flags;
            }
            assert_eq!(&built, c);
            assert!(b.add_cas(built));
        }
        let cas_by_hash: HashMap<MerkleHash, &CasInfo> =
            s.cas.iter().map(|c| (c.xorb_hash, c)).collect();
        for f in s.files.iter().rev() {
            let mut fb = FileInfoBuilder::new(f.file_hash);
            for t in &f.terms {
                fb.add_term_from_cas(cas_by_hash[&t.xorb_hash], t.chunk_range())
                    .unwrap();
            }
            fb.sha256(f.sha256_digest().unwrap());
            let built = fb.build();
            assert_eq!(&built, f);
            assert!(b.add_file(built.clone()));
            assert!(!b.add_file(built));
        }
        let rebuilt = b.build();
        assert_same_bytes(
            &rebuilt.to_upload_bytes().unwrap(),
            &s.clone().into_upload().to_upload_bytes().unwrap(),
            "rebuilt",
        );
    }
}
