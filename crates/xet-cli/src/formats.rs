//! Commands over the formats alone: `hash`, `chunk`, `xorb`, `shard`. No store, no network.

use crate::exit::{CliResult, Code, Failure};
use crate::output::Out;
use anyhow::Context;
use serde_json::json;
use std::path::Path;
use xet_upload::scan::scan_file;

use xet_hash::hex::encode as hex;

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

/// Verify a xorb in whichever form it is: with a footer (stored) or a bare chunk region
/// (upload body). Returns the info and the form's name.
fn verify_xorb(
    path: &Path,
    expected: Option<&xet_hash::MerkleHash>,
) -> CliResult<(xet_xorb::XorbInfo, &'static str, u64)> {
    let bytes = read_input(path)?;
    let limits = xet_xorb::Limits::default();
    let footered = xet_xorb::parse_footer(&bytes, &limits).is_ok();
    let res = if footered {
        xet_xorb::verify(&bytes, expected, &limits)
    } else {
        xet_xorb::verify_body(&bytes, expected, &limits)
    };
    let form = if footered { "footered" } else { "upload body" };
    let info = res
        .with_context(|| format!("{} is not a valid xorb ({form})", path.display()))
        .map_err(Failure::input)?;
    Ok((info, form, bytes.len() as u64))
}

fn parse_expected(hash: Option<&str>) -> CliResult<Option<xet_hash::MerkleHash>> {
    hash.map(|h| {
        xet_hash::MerkleHash::from_hex(h)
            .with_context(|| format!("--hash {h:?} is not a xet hash"))
            .map_err(|e| Failure::new(Code::Usage, e))
    })
    .transpose()
}

pub fn xorb_inspect(out: &Out, file: &Path) -> CliResult {
    let (info, form, len) = verify_xorb(file, None)?;
    out.line(format!(
        "xorb {}  {form}  {} chunks  {} bytes ({} chunk region, {} unpacked)",
        info.hash,
        info.chunks.len(),
        len,
        info.body_len(),
        info.unpacked_len()
    ));
    let mut chunks = Vec::with_capacity(info.chunks.len());
    for (i, c) in info.chunks.iter().enumerate() {
        out.line(format!(
            "{i:>5}  offset {:>9}  {:>6} -> {:>6}  {:<16}  {}",
            c.offset,
            c.compressed_size,
            c.uncompressed_size,
            c.scheme.name(),
            c.hash
        ));
        chunks.push(json!({ "index": i, "offset": c.offset, "compressed_size": c.compressed_size,
                            "uncompressed_size": c.uncompressed_size, "scheme": c.scheme.name(), "hash": c.hash.to_string() }));
    }
    out.doc(&json!({ "ok": true, "path": file.display().to_string(), "hash": info.hash.to_string(), "form": form,
                     "bytes": len, "chunk_region_bytes": info.body_len(), "unpacked_bytes": info.unpacked_len(), "chunks": chunks }));
    Ok(())
}

pub fn xorb_verify(out: &Out, file: &Path, hash: Option<&str>) -> CliResult {
    let expected = parse_expected(hash)?;
    let (info, form, _) = verify_xorb(file, expected.as_ref())?;
    let what = if expected.is_some() {
        "matches --hash"
    } else {
        "computed"
    };
    out.line(format!(
        "ok: {} is a valid xorb ({form}), {} chunks, hash {} ({what})",
        file.display(),
        info.chunks.len(),
        info.hash
    ));
    out.doc(&json!({ "ok": true, "path": file.display().to_string(), "form": form, "hash": info.hash.to_string(),
                     "chunks": info.chunks.len(), "hash_checked": expected.is_some() }));
    Ok(())
}

fn parse_shard(path: &Path) -> CliResult<(Vec<u8>, xet_shard::ParsedShard)> {
    let bytes = read_input(path)?;
    let parsed = xet_shard::ParsedShard::parse(&bytes, &xet_shard::Limits::default())
        .with_context(|| format!("{} is not a valid shard", path.display()))
        .map_err(Failure::input)?;
    Ok((bytes, parsed))
}

/// Chunk hashes and sizes of a term, when the shard itself lists its xorb unkeyed.
fn term_chunks(
    shard: &xet_shard::Shard,
    t: &xet_shard::FileTerm,
) -> Option<Vec<(xet_hash::MerkleHash, u64)>> {
    if shard.chunk_hash_key().is_some_and(|k| !k.is_zero()) {
        return None;
    }
    let cas = shard.find_cas(&t.xorb_hash)?;
    let r = t.chunk_range();
    cas.chunks.get(r.start as usize..r.end as usize).map(|cs| {
        cs.iter()
            .map(|c| (c.hash, c.unpacked_segment_bytes as u64))
            .collect()
    })
}

pub fn shard_inspect(out: &Out, file: &Path) -> CliResult {
    let (bytes, p) = parse_shard(file)?;
    let sh = &p.shard;
    let form = if p.footer.is_some() {
        "stored"
    } else {
        "upload"
    };
    out.line(format!(
        "shard {}  {} bytes  {} form  hash {}",
        file.display(),
        bytes.len(),
        form,
        xet_shard::shard_hash(&bytes)
    ));
    let mut files = Vec::new();
    for f in &sh.files {
        let sha = f.sha256_digest().map(|d| hex(&d));
        out.line(format!(
            "file {}  {:>12} bytes  {} terms  flags {:#010x}{}",
            f.file_hash,
            f.size(),
            f.terms.len(),
            f.flags,
            sha.as_ref()
                .map(|s| format!("  sha256 {s}"))
                .unwrap_or_default()
        ));
        let terms: Vec<_> = f
            .terms
            .iter()
            .map(|t| {
                out.line(format!("  term xorb {} chunks {}..{} {} bytes", t.xorb_hash, t.chunk_index_start, t.chunk_index_end, t.unpacked_segment_bytes));
                json!({ "xorb": t.xorb_hash.to_string(), "chunks": [t.chunk_index_start, t.chunk_index_end], "unpacked_bytes": t.unpacked_segment_bytes })
            })
            .collect();
        files.push(json!({ "hash": f.file_hash.to_string(), "size": f.size(), "flags": f.flags, "sha256": sha,
                           "verification": f.has_verification(), "terms": terms }));
    }
    let mut xorbs = Vec::new();
    for c in &sh.cas {
        out.line(format!(
            "xorb {}  {} chunks  {} bytes  {} on disk",
            c.xorb_hash,
            c.chunks.len(),
            c.num_bytes_in_cas,
            c.num_bytes_on_disk
        ));
        xorbs.push(json!({ "hash": c.xorb_hash.to_string(), "chunks": c.chunks.len(), "bytes": c.num_bytes_in_cas,
                           "bytes_on_disk": c.num_bytes_on_disk }));
    }
    let footer = p.footer.as_ref().map(|f| {
        out.line(format!(
            "footer  key {}  created {}  key expiry {}  lookup tables: {} files, {} xorbs, {} chunks",
            if f.chunk_hash_key.is_zero() { "none".to_string() } else { f.chunk_hash_key.to_string() },
            f.creation_timestamp,
            f.key_expiry,
            f.file_lookup_num_entries,
            f.cas_lookup_num_entries,
            f.chunk_lookup_num_entries
        ));
        json!({ "chunk_hash_key": f.chunk_hash_key.to_string(), "creation_timestamp": f.creation_timestamp,
                "key_expiry": f.key_expiry, "file_lookup_entries": f.file_lookup_num_entries,
                "cas_lookup_entries": f.cas_lookup_num_entries, "chunk_lookup_entries": f.chunk_lookup_num_entries })
    });
    out.doc(&json!({ "ok": true, "path": file.display().to_string(), "bytes": bytes.len(), "form": form,
                     "hash": xet_shard::shard_hash(&bytes).to_string(), "files": files, "xorbs": xorbs, "footer": footer }));
    Ok(())
}

/// Structure, both parse paths for the stored form, and every verification entry and file
/// hash that the shard's own CAS section makes checkable.
pub fn shard_verify(out: &Out, file: &Path) -> CliResult {
    let (bytes, p) = parse_shard(file)?;
    let invalid = |e: anyhow::Error| {
        Failure::input(e.context(format!("{} is not a valid shard", file.display())))
    };
    p.shard.validate().map_err(|e| invalid(e.into()))?;
    if p.footer.is_some() {
        let by_footer =
            xet_shard::ParsedShard::parse_by_footer(&bytes, &xet_shard::Limits::default())
                .map_err(|e| invalid(e.into()))?;
        if by_footer.shard != p.shard {
            return Err(invalid(anyhow::anyhow!(
                "reading by footer offsets gives different contents than reading in order"
            )));
        }
    }
    let (mut checked_terms, mut checked_files, mut unchecked_terms) = (0u64, 0u64, 0u64);
    for f in &p.shard.files {
        let mut all: Option<Vec<(xet_hash::MerkleHash, u64)>> = Some(Vec::new());
        for (i, t) in f.terms.iter().enumerate() {
            match term_chunks(&p.shard, t) {
                Some(cs) => {
                    if let Some(v) = f.verification.as_ref().and_then(|v| v.get(i)) {
                        let hs: Vec<_> = cs.iter().map(|c| c.0).collect();
                        if xet_hash::verification_hash(&hs) != *v {
                            return Err(invalid(anyhow::anyhow!(
                                "file {} term {i}: verification hash does not match the chunks of xorb {}",
                                f.file_hash,
                                t.xorb_hash
                            )));
                        }
                        checked_terms += 1;
                    }
                    let real: u64 = cs.iter().map(|c| c.1).sum();
                    if real != t.unpacked_segment_bytes as u64 {
                        return Err(invalid(anyhow::anyhow!(
                            "file {} term {i}: unpacked_segment_bytes is {} but its chunks hold {real}",
                            f.file_hash,
                            t.unpacked_segment_bytes
                        )));
                    }
                    if let Some(a) = all.as_mut() {
                        a.extend(cs);
                    }
                }
                None => {
                    unchecked_terms += 1;
                    all = None;
                }
            }
        }
        if let Some(a) = all {
            if xet_hash::file_hash(&a) != f.file_hash {
                return Err(invalid(anyhow::anyhow!(
                    "file {}: its chunks hash to {}",
                    f.file_hash,
                    xet_hash::file_hash(&a)
                )));
            }
            checked_files += 1;
        }
    }
    out.line(format!(
        "ok: {} ({} files, {} xorbs; {checked_files} file hashes and {checked_terms} verification hashes checked, {unchecked_terms} terms reference xorbs not listed in this shard)",
        file.display(),
        p.shard.files.len(),
        p.shard.cas.len()
    ));
    out.doc(&json!({ "ok": true, "path": file.display().to_string(), "files": p.shard.files.len(), "xorbs": p.shard.cas.len(),
                     "checked_file_hashes": checked_files, "checked_verification_hashes": checked_terms,
                     "unchecked_terms": unchecked_terms }));
    Ok(())
}
