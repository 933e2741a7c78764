//! The Hub commit's NDJSON body (`xet_hub::commit_body::parse`), what `xet serve` reads
//! from any writer before anything is checked against the store.
//!
//! Checks: no panic; an accepted body has every path a valid `RepoPath` (git's rules
//! included: it is the same parser) and decoded inline contents; written back as NDJSON
//! (a header, then the lines in the body's order, contents in base64, sha256s in hex) it
//! parses to the same request.
#![no_main]

use base64::Engine as _;
use libfuzzer_sys::fuzz_target;
use serde_json::json;
use xet_hub::Operation;
use xet_hub::commit_body::{CommitRequest, LineKind, parse};

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
    let (mut inline, mut lfs, mut deletions) =
        (req.inline.iter(), req.lfs.iter(), req.deletions.iter());
    for kind in &req.order {
        let line = match kind {
            LineKind::Inline => {
                let (path, content) = inline.next().expect("an inline file per Inline");
                json!({"key": "file", "value": {
                    "path": path.as_str(), "content": b64.encode(content), "encoding": "base64"}})
            }
            LineKind::Lfs => {
                let (path, sha, size) = lfs.next().expect("an lfsFile per Lfs");
                let mut v = json!({"path": path.as_str(), "algo": "sha256",
                                   "oid": sha.to_string()});
                if let Some(s) = size {
                    v["size"] = json!(s);
                }
                json!({"key": "lfsFile", "value": v})
            }
            LineKind::Deletion => {
                let (key, path) = match deletions.next().expect("a deletion per Deletion") {
                    Operation::DeleteFile { path } => ("deletedFile", path),
                    Operation::DeleteFolder { path } => ("deletedFolder", path),
                    Operation::Add { .. } => unreachable!("deletions are deletions"),
                };
                json!({"key": key, "value": {"path": path.as_str()}})
            }
        };
        lines.push(line);
    }
    assert!(
        inline.next().is_none() && lfs.next().is_none() && deletions.next().is_none(),
        "order names every line"
    );
    lines.iter().map(|l| format!("{l}\n")).collect()
}
