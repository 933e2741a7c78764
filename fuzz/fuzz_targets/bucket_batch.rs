//! The body of `POST /api/buckets/{id}/batch` (NDJSON of
//! `xet_hub::api::buckets::BatchLine`) and what the server makes of each line: its path
//! (`RepoPath::parse`) and Xet hash (`MerkleHash::from_hex`).
//!
//! Input: the request body, any bytes.
//! Checks: no panic; a line that parses writes back to JSON that parses to the same
//! line; a path that parses is the line's path as written.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_hash::MerkleHash;
use xet_hub::RepoPath;
use xet_hub::api::buckets::BatchLine;

fuzz_target!(|data: &[u8]| {
    for raw in data.split(|&b| b == b'\n') {
        let Ok(line) = serde_json::from_slice::<BatchLine>(raw) else {
            continue;
        };
        let again: BatchLine =
            serde_json::from_str(&serde_json::to_string(&line).unwrap()).unwrap();
        assert_eq!(again, line);
        if let Ok(p) = RepoPath::parse(line.path()) {
            assert_eq!(p.as_str(), line.path());
        }
        if let BatchLine::AddFile { xet_hash, .. } | BatchLine::CopyFile { xet_hash, .. } = &line
            && let Ok(h) = MerkleHash::from_hex(xet_hash)
        {
            assert!(xet_hash.eq_ignore_ascii_case(&h.to_string()));
        }
    }
});
