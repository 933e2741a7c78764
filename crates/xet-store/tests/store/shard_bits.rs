//! Shards mean what they say: every single-bit variant of a valid uploaded shard is
//! either refused, or accepted without being stored again, or (only in a file's
//! FileMetadataExt sha256, a claim the store cannot check without the file's data) stored
//! as the different claim it is.
//!
//! Each bit is classified by the field it falls in, and the field says what must happen:
//! a flip in anything the store checks or relies on (hashes, ranges, sizes, verification
//! entries, the empty file's sha256, header, bookends, lookup tables, footer layout) is
//! refused; a flip in a reserved field or an undefined flag bit is refused; a flip in
//! what the store ignores (footer timestamps, the chunks' global-dedup hint, a
//! `num_bytes_on_disk` or footer statistic that is still one of the allowed values) is
//! accepted and finds the original's stored form. Three forms are flipped: the upload
//! form (what hf_xet and `xet upload` send), the upload form with huggingface.js's
//! footer, and the stored form with lookup tables (what the reference's shard cache
//! holds).

use std::collections::BTreeMap;

use bytes::Bytes;
use xet_cas::{Cas, CasError};
use xet_hash::MerkleHash;
use xet_shard::{
    CasInfo, FOOTER_SIZE, FileInfoBuilder, HEADER_SIZE, Limits, ParsedShard, RECORD_SIZE,
    RawFooter, Shard, ShardBuilder, StoredOptions,
};
use xet_store::{MemoryStore, ObjectBackend, SHARD_PREFIX};

/// What a flip in a field must do.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Expect {
    Refused,
    /// Accepted, and the stored form is the original's: nothing new stored.
    SameObject,
    /// Accepted as a different sha256 claim: one more stored shard.
    NewClaim,
}

/// The field each byte of a serialized shard belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Field {
    Header,
    FileHash,
    FileFlags,
    FileEntries,
    FileReserved,
    TermXorb,
    TermFlags,
    TermBytes,
    TermRange,
    Verification,
    VerificationReserved,
    Sha256 { empty_file: bool },
    Sha256Reserved,
    Bookend,
    CasHash,
    CasFlags,
    CasEntries,
    CasBytes,
    CasOnDisk { xorb: usize },
    ChunkHash,
    ChunkStart,
    ChunkBytes,
    ChunkFlags,
    ChunkReserved,
    LookupTables,
    FooterLayout,
    FooterKey,
    FooterTimestamps,
    FooterReserved,
    FooterStat { which: usize },
}

/// A xorb as a client uploads it (`body`) and as a store keeps it (`footered`).
struct BuiltXorb {
    hash: MerkleHash,
    body: Vec<u8>,
    footered: Vec<u8>,
    chunks: Vec<(MerkleHash, u64)>,
}

fn build_xorb(chunks: &[&[u8]]) -> BuiltXorb {
    let mut b = xet_xorb::XorbBuilder::new();
    for c in chunks {
        b.add_chunk(c).unwrap();
    }
    let x = b.finish().unwrap();
    BuiltXorb {
        hash: x.hash(),
        footered: x.to_footered(),
        chunks: x.info().hash_entries(),
        body: x.into_body(),
    }
}

/// Two xorbs (in the shard's order), a file of two terms (one per xorb), a file of one
/// term, the empty file.
struct Fixture {
    xorbs: Vec<BuiltXorb>,
    shard: Shard,
}

fn fixture() -> Fixture {
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 9000, 11);
    let a = build_xorb(&[&data[..1000], &data[1000..3000], &data[3000..4500]]);
    let b = build_xorb(&[&data[4500..7000], &data[7000..9000]]);
    let cas = |x: &BuiltXorb| CasInfo::from_chunks(x.hash, &x.chunks, 0).unwrap();
    let (ca, cb) = (cas(&a), cas(&b));
    let file = |terms: &[(&CasInfo, std::ops::Range<u32>)], bytes: &[u8]| {
        let chunks: Vec<(MerkleHash, u64)> = terms
            .iter()
            .flat_map(|(c, r)| c.chunks[r.start as usize..r.end as usize].iter())
            .map(|ch| (ch.hash, u64::from(ch.unpacked_segment_bytes)))
            .collect();
        let mut f = FileInfoBuilder::new(xet_hash::file_hash(&chunks));
        for (c, r) in terms {
            f.add_term_from_cas(c, r.clone()).unwrap();
        }
        // hf_xet writes zeros for the empty file's sha256, the digest otherwise.
        let sha = if bytes.is_empty() {
            [0; 32]
        } else {
            <[u8; 32]>::from(<sha2::Sha256 as sha2::Digest>::digest(bytes))
        };
        f.sha256(sha);
        f.build()
    };
    let mut s = ShardBuilder::new();
    s.add_file(file(
        &[(&ca, 0..2), (&cb, 0..2)],
        &[&data[..3000], &data[4500..]].concat(),
    ));
    s.add_file(file(&[(&ca, 2..3)], &data[3000..4500]));
    s.add_file(file(&[], &[]));
    s.add_cas(ca);
    s.add_cas(cb);
    let shard = s.build();
    // In the shard's (hash) order, as the CAS blocks are.
    let mut xorbs = vec![a, b];
    xorbs.sort_by_key(|x| shard.cas.iter().position(|c| c.xorb_hash == x.hash));
    Fixture { xorbs, shard }
}

/// The field of every byte of `bytes`, a serialization of `shard` (either form).
fn layout(shard: &Shard, bytes: &[u8]) -> Vec<Field> {
    use Field::*;
    let mut out = vec![Header; HEADER_SIZE];
    let record = |out: &mut Vec<Field>, fields: &[(usize, Field)]| {
        for (len, f) in fields {
            out.extend(std::iter::repeat_n(*f, *len));
        }
    };
    for f in &shard.files {
        let header = [
            (32, FileHash),
            (4, FileFlags),
            (4, FileEntries),
            (8, FileReserved),
        ];
        record(&mut out, &header);
        for _ in &f.terms {
            let term = [
                (32, TermXorb),
                (4, TermFlags),
                (4, TermBytes),
                (8, TermRange),
            ];
            record(&mut out, &term);
        }
        for _ in &f.terms {
            record(&mut out, &[(32, Verification), (16, VerificationReserved)]);
        }
        let empty_file = f.terms.is_empty();
        record(
            &mut out,
            &[(32, Sha256 { empty_file }), (16, Sha256Reserved)],
        );
    }
    record(&mut out, &[(RECORD_SIZE, Bookend)]);
    for (xorb, c) in shard.cas.iter().enumerate() {
        let header = [(32, CasHash), (4, CasFlags), (4, CasEntries), (4, CasBytes)];
        record(&mut out, &header);
        record(&mut out, &[(4, CasOnDisk { xorb })]);
        for _ in &c.chunks {
            let chunk = [(32, ChunkHash), (4, ChunkStart), (4, ChunkBytes)];
            record(&mut out, &chunk);
            record(&mut out, &[(4, ChunkFlags), (4, ChunkReserved)]);
        }
    }
    record(&mut out, &[(RECORD_SIZE, Bookend)]);
    if out.len() < bytes.len() {
        let tables = bytes.len() - FOOTER_SIZE - out.len();
        let footer = [(tables, LookupTables), (72, FooterLayout), (32, FooterKey)];
        record(&mut out, &footer);
        record(&mut out, &[(16, FooterTimestamps), (48, FooterReserved)]);
        for which in 0..3 {
            record(&mut out, &[(8, FooterStat { which })]);
        }
        record(&mut out, &[(8, FooterLayout)]);
    }
    assert_eq!(out.len(), bytes.len(), "the layout covers the shard");
    out
}

/// What flipping `bit` of byte `at` (in `field`) of `bytes` must do.
fn expect(fx: &Fixture, bytes: &[u8], field: Field, at: usize, bit: u8) -> Expect {
    // Where the record holding `at` starts: records are 48 bytes from the header on,
    // through the CAS section's bookend.
    let record = || at - (at - HEADER_SIZE) % RECORD_SIZE;
    // The little-endian integer of `len` bytes at `start`, with the bit flipped.
    let flipped = |start: usize, len: usize| {
        let mut v = [0u8; 8];
        v[..len].copy_from_slice(&bytes[start..start + len]);
        u64::from_le_bytes(v) ^ (1u64 << ((at - start) * 8 + bit as usize))
    };
    let allowed = |ok: &[u64], v: u64| {
        if ok.contains(&v) {
            Expect::SameObject
        } else {
            Expect::Refused
        }
    };
    match field {
        // A claim: only the file's data could show it false.
        Field::Sha256 { empty_file: false } => Expect::NewClaim,
        Field::FooterTimestamps => Expect::SameObject,
        // Bit 31 of the chunk flags: the reference's global-dedup hint.
        Field::ChunkFlags if at == record() + 43 && bit == 7 => Expect::SameObject,
        Field::CasOnDisk { xorb } => {
            let x = &fx.xorbs[xorb];
            let ok = [0, x.body.len() as u64, x.footered.len() as u64];
            allowed(&ok, flipped(record() + 44, 4))
        }
        Field::FooterStat { which } => {
            let parsed = ParsedShard::parse(bytes, &Limits::default()).unwrap().shard;
            let right = [
                parsed.stored_bytes_on_disk(),
                parsed.materialized_bytes(),
                parsed.stored_bytes(),
            ];
            let start = bytes.len() - FOOTER_SIZE + 168 + 8 * which;
            allowed(&[0, right[which]], flipped(start, 8))
        }
        _ => Expect::Refused,
    }
}

/// The three forms a client may upload.
fn forms(fx: &Fixture) -> Vec<(&'static str, Vec<u8>)> {
    let upload = fx.shard.to_upload_bytes().unwrap();
    // huggingface.js: each xorb's serialized length as num_bytes_on_disk, then a footer
    // with its creation time, no lookup tables and table offsets 0, and no
    // materialized_bytes.
    let mut js_shard = fx.shard.clone();
    for (c, x) in js_shard.cas.iter_mut().zip(&fx.xorbs) {
        c.num_bytes_on_disk = x.body.len() as u32;
    }
    let mut js = js_shard.to_upload_bytes().unwrap();
    let cas_info_offset = HEADER_SIZE
        + RECORD_SIZE * (1 + fx.shard.files.iter().map(|f| f.num_records()).sum::<u64>() as usize);
    let footer = RawFooter {
        version: 1,
        file_info_offset: HEADER_SIZE as u64,
        cas_info_offset: cas_info_offset as u64,
        file_lookup_offset: 0,
        file_lookup_num_entries: 0,
        cas_lookup_offset: 0,
        cas_lookup_num_entries: 0,
        chunk_lookup_offset: 0,
        chunk_lookup_num_entries: 0,
        chunk_hash_key: MerkleHash::default(),
        creation_timestamp: 1_764_000_000,
        key_expiry: 0,
        reserved: [0; 6],
        stored_bytes_on_disk: js_shard.stored_bytes_on_disk(),
        materialized_bytes: 0,
        stored_bytes: js_shard.stored_bytes(),
        footer_offset: js.len() as u64,
    };
    js[40..48].copy_from_slice(&(FOOTER_SIZE as u64).to_le_bytes());
    js.extend_from_slice(&footer.to_bytes());
    let stored = fx
        .shard
        .clone()
        .into_stored(StoredOptions::shard_cache(1_764_000_000))
        .unwrap()
        .to_bytes()
        .unwrap();
    vec![
        ("upload form", upload),
        ("huggingface.js form", js),
        ("stored form", stored),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bit_of_an_uploaded_shard_is_checked_or_ignored() {
    let fx = fixture();
    for (form, bytes) in forms(&fx) {
        let store = MemoryStore::in_memory().await.unwrap();
        for x in &fx.xorbs {
            store
                .put_xorb(&x.hash, Bytes::from(x.body.clone()).into())
                .await
                .unwrap();
        }
        assert_eq!(
            xet_cas_conformance::text_err(store.put_shard(Bytes::from(bytes.clone())).await),
            Ok(true),
            "{form}"
        );
        let fields = layout(&fx.shard, &bytes);

        let mut wrong = Vec::new();
        let mut accepted: BTreeMap<String, usize> = BTreeMap::new();
        let mut claims = 0;
        for at in 0..bytes.len() {
            for bit in 0..8u8 {
                let mut v = bytes.clone();
                v[at] ^= 1 << bit;
                let want = expect(&fx, &bytes, fields[at], at, bit);
                let got = match store.put_shard(Bytes::from(v)).await {
                    Ok(true) => Expect::NewClaim,
                    Ok(false) => Expect::SameObject,
                    Err(CasError::InvalidShard { .. } | CasError::MissingXorb { .. }) => {
                        Expect::Refused
                    }
                    Err(e) => panic!("{form}, byte {at} bit {bit}: {e}"),
                };
                if got != want {
                    wrong.push(format!(
                        "byte {at} bit {bit} ({:?}): {got:?}, expected {want:?}",
                        fields[at]
                    ));
                }
                if got != Expect::Refused {
                    *accepted.entry(format!("{:?}", fields[at])).or_default() += 1;
                }
                claims += usize::from(got == Expect::NewClaim);
            }
        }
        let shown: Vec<&String> = wrong.iter().take(20).collect();
        assert!(
            wrong.is_empty(),
            "{form}: {} of {} variants wrong, first: {shown:#?}",
            wrong.len(),
            bytes.len() * 8
        );
        // The accepted variants that make no other claim share the original's one stored
        // shard; each other sha256 claim is one more.
        let stored = store.backend().list(SHARD_PREFIX).await.unwrap();
        assert_eq!(stored.len(), 1 + claims, "{form}");
        let non_empty_files = fx
            .shard
            .files
            .iter()
            .filter(|f| !f.terms.is_empty())
            .count();
        assert_eq!(claims, 256 * non_empty_files, "{form}");
        eprintln!(
            "{form}: {} variants, accepted by field: {accepted:?}",
            bytes.len() * 8
        );
    }
}

/// The order of a shard's blocks means nothing either: the same shard with its files and
/// xorbs listed in reverse is the stored one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_with_its_blocks_reordered_is_not_stored_again() {
    let fx = fixture();
    let store = MemoryStore::in_memory().await.unwrap();
    for x in &fx.xorbs {
        store
            .put_xorb(&x.hash, Bytes::from(x.body.clone()).into())
            .await
            .unwrap();
    }
    let sorted = fx.shard.to_upload_bytes().unwrap();
    assert_eq!(
        xet_cas_conformance::text_err(store.put_shard(Bytes::from(sorted)).await),
        Ok(true)
    );
    let mut reversed = fx.shard.clone();
    reversed.files.reverse();
    reversed.cas.reverse();
    let reversed = reversed.to_upload_bytes().unwrap();
    assert_eq!(
        xet_cas_conformance::text_err(store.put_shard(Bytes::from(reversed)).await),
        Ok(false)
    );
    assert_eq!(store.backend().list(SHARD_PREFIX).await.unwrap().len(), 1);
}
