//! Commands over the formats alone: `hash`, `chunk`, `xorb`, `shard`. No store, no network.

use crate::exit::{CliResult, Code, Failure};
use crate::output::Out;
use crate::scan::scan_file;
use anyhow::Context;
use serde_json::json;
use std::path::Path;

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

fn read_input(path: &Path) -> CliResult<Vec<u8>> {
    std::fs::read(path)
        .with_context(|| format!("cannot read {}", path.display()))
        .map_err(Failure::input)
}

pub fn hash(out: &Out, files: &[std::path::PathBuf], sha256: bool) -> CliResult {
    let mut docs = Vec::new();
    for path in files {
        let s = scan_file(path, sha256)
            .with_context(|| format!("cannot read {}", path.display()))
            .map_err(Failure::input)?;
        let h = s.file_hash().to_string();
        let sha = s.sha256.map(|d| hex(&d));
        if out.quiet {
            out.line(&h);
        } else {
            match &sha {
                Some(sha) => out.line(format!("{h}  {:>12}  {sha}  {}", s.size, path.display())),
                None => out.line(format!("{h}  {:>12}  {}", s.size, path.display())),
            }
        }
        let mut d = json!({ "path": path.display().to_string(), "hash": h, "size": s.size });
        if let Some(sha) = sha {
            d["sha256"] = json!(sha);
        }
        docs.push(d);
    }
    out.doc(&json!({ "ok": true, "files": docs }));
    Ok(())
}

pub fn chunk(out: &Out, file: &Path) -> CliResult {
    let s = scan_file(file, false)
        .with_context(|| format!("cannot read {}", file.display()))
        .map_err(Failure::input)?;
    let mut offset = 0u64;
    let mut docs = Vec::with_capacity(s.chunks.len());
    for (h, len) in &s.chunks {
        out.line(format!("{offset:>12}  {len:>6}  {h}"));
        docs.push(json!({ "offset": offset, "len": len, "hash": h.to_string() }));
        offset += len;
    }
    out.doc(
        &json!({ "ok": true, "path": file.display().to_string(), "size": s.size,
                     "hash": s.file_hash().to_string(), "chunks": docs }),
    );
    Ok(())
}

pub fn xorb_inspect(_out: &Out, _file: &Path) -> CliResult {
    Err(Failure::new(
        Code::Failure,
        anyhow::anyhow!("xorb inspect: not wired yet"),
    ))
}
pub fn xorb_verify(_out: &Out, _file: &Path, _hash: Option<&str>) -> CliResult {
    Err(Failure::new(
        Code::Failure,
        anyhow::anyhow!("xorb verify: not wired yet"),
    ))
}
pub fn shard_inspect(_out: &Out, _file: &Path) -> CliResult {
    Err(Failure::new(
        Code::Failure,
        anyhow::anyhow!("shard inspect: not wired yet"),
    ))
}
pub fn shard_verify(_out: &Out, _file: &Path) -> CliResult {
    let _ = read_input;
    Err(Failure::new(
        Code::Failure,
        anyhow::anyhow!("shard verify: not wired yet"),
    ))
}
