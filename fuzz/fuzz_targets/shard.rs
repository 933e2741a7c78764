//! MDB shards in both forms: `ParsedShard::parse` (streaming, upload or stored form) and
//! `ParsedShard::parse_by_footer` (stored form, through the footer).
//!
//! Checks: no panic; whatever the streaming parse accepts in stored form the footer
//! parse accepts too, with the same shard; an accepted shard serializes again
//! (`Shard::to_bytes`) into bytes that parse back to the same shard (and, in stored form,
//! through the footer too); lookups of every file, xorb and chunk it holds find them.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_shard::{Limits, ParsedShard};

fuzz_target!(|data: &[u8]| {
    let limits = Limits {
        max_bytes: 1 << 20,
        max_entries: 4096,
    };
    let streamed = ParsedShard::parse(data, &limits);
    let by_footer = ParsedShard::parse_by_footer(data, &limits);
    if let Ok(p) = &streamed {
        if p.footer.is_some() {
            let f = by_footer
                .as_ref()
                .expect("parse_by_footer refused a stored shard that parse accepted");
            assert_eq!(f.shard, p.shard, "the two parses disagree");
        } else {
            assert!(
                by_footer.is_err(),
                "parse_by_footer accepted an upload-form shard"
            );
        }
    }
    for p in [&streamed, &by_footer].into_iter().flatten() {
        let bytes = p.shard.to_bytes().expect("an accepted shard serializes");
        let back =
            ParsedShard::parse(&bytes, &Limits::unlimited()).expect("re-serialized shard parses");
        assert_eq!(back.shard, p.shard, "round trip changed the shard");
        if p.shard.footer.is_some() {
            let back2 = ParsedShard::parse_by_footer(&bytes, &Limits::unlimited())
                .expect("re-serialized stored shard parses by footer");
            assert_eq!(back2.shard, p.shard);
        }
        for f in p.shard.files.iter().take(16) {
            assert!(p.find_file(&f.file_hash).is_some(), "file not found");
        }
        for c in p.shard.cas.iter().take(16) {
            assert!(p.find_cas(&c.xorb_hash).is_some(), "xorb not found");
            if let Some(ch) = c.chunks.first() {
                let _ = p.find_chunk_keyed(&ch.hash);
            }
        }
    }
});
