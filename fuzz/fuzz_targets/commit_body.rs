//! The Hub commit's NDJSON body (`xet_hub::commit_body::parse`), what `xet serve` reads
//! from any writer before anything is checked against the store.
//!
//! Checks: no panic; an accepted body has every path a valid `RepoPath` (git's rules
//! included: it is the same parser) and decoded inline contents; written back as NDJSON
//! (a header, then each kind in order, contents in base64, sha256s in hex) it parses to
//! the same request.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use xet_hub::Operation;
use xet_hub::commit_body::{CommitRequest, parse};

fuzz_target!(|data: &[u8]| {
    let Ok(req) = parse(data) else {
        return;
    };
    for (p, _) in &req.inline {
        assert!(xet_hub::RepoPath::parse(p.as_str()).is_ok());
    }
    let again = parse(write(&req).as_bytes()).expect("a written request parses");
    assert_eq!(again, req);
});

/// `req` as the NDJSON a client would send.
fn write(req: &CommitRequest) -> String {
    let b64 = base64::engine::general_purpose::STANDARD;
    let mut header = json!({"summary": req.summary, "description": req.description});
    if let Some(p) = &req.parent {
        header["parentCommit"] = json!(p.to_string());
    }
    let mut lines = vec![json!({"key": "header", "value": header})];
    for (path, content) in &req.inline {
        lines.push(json!({"key": "file", "value": {
            "path": path.as_str(), "content": b64.encode(content), "encoding": "base64"}}));
    }
    for (path, sha, size) in &req.lfs {
        let mut v = json!({"path": path.as_str(), "algo": "sha256",
                           "oid": sha.to_string()});
        if let Some(s) = size {
            v["size"] = json!(s);
        }
        lines.push(json!({"key": "lfsFile", "value": v}));
    }
    for d in &req.deletions {
        let (key, path) = match d {
            Operation::DeleteFile { path } => ("deletedFile", path),
            Operation::DeleteFolder { path } => ("deletedFolder", path),
            Operation::Add { .. } => unreachable!("deletions are deletions"),
        };
        lines.push(json!({"key": key, "value": {"path": path.as_str()}}));
    }
    lines.iter().map(|l| format!("{l}\n")).collect()
}
