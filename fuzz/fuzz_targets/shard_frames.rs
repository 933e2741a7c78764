//! The NDJSON progress stream of `POST /v2/shards`: each line parsed into
//! `xet_cas::wire::ShardFrame` (what our server writes and a client reads), as a client
//! reads the stream: split on `\n`, trim, skip empty lines.
//!
//! (The client's own frame reader, `xet_client::shards::shard_frame`, is private, so it
//! is not fuzzed directly; it parses each line as a `serde_json::Value`, which this target
//! does too.)
//! Checks: no panic; every known frame serializes and parses back equal; a frame with an
//! unknown `type` parses as `Unknown`; an object that parses as a frame has a string
//! `type`.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_cas::wire::ShardFrame;

fuzz_target!(|data: &[u8]| {
    for line in data.split(|&b| b == b'\n').take(256) {
        let line = line.trim_ascii();
        if line.is_empty() {
            continue;
        }
        let value: Option<serde_json::Value> = serde_json::from_slice(line).ok();
        let Ok(frame) = serde_json::from_slice::<ShardFrame>(line) else {
            continue;
        };
        let value = value.expect("a frame is JSON");
        // serde also reads internally tagged enums from arrays (`["result"]`), so only
        // objects are held to their `type` field.
        let ty = value.get("type").and_then(|t| t.as_str());
        if value.is_object() {
            assert!(ty.is_some(), "a frame object without a string type");
        }
        if frame == ShardFrame::Unknown {
            if let Some(ty) = ty {
                assert!(
                    !["validating", "committing", "result", "error"].contains(&ty),
                    "{ty} parsed as Unknown"
                );
            }
            continue;
        }
        let text = serde_json::to_vec(&frame).expect("serialize");
        let back: ShardFrame = serde_json::from_slice(&text).expect("parse what we wrote");
        assert_eq!(back, frame, "frame round trip");
    }
});
