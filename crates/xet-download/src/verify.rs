//! The end of one file: the final check (whole files: the file hash over every chunk,
//! with a diagnosis of the corrupt chunk or xorb when it fails), then fsync, linking
//! into the chunk cache, and the rename into place (or the copy to the writer).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use xet_hash::MerkleHash;

use crate::cache::{ChunkCache, FileTerm};
use crate::ctx::{Assembled, FileCtx, XorbCandidate, blocking};
use crate::error::{DownloadError, Result};
use crate::journal::Journal;
use crate::part::{self, BoxWriter};
use crate::sync::lock;

/// The final check (whole files: the file hash over every chunk), then fsync, linking
/// into the chunk cache, and the rename into `final_path` (or the copy to `writer`,
/// shown as `shown`).
pub(crate) async fn verify_and_finish(
    ctx: &Arc<FileCtx>,
    assembled: Assembled,
    size: u64,
    final_path: &Path,
    writer: Option<BoxWriter>,
    shown: &str,
) -> Result<()> {
    if ctx.whole {
        check_file_hash(ctx, &assembled, size).await?;
    }
    let link = cache_link(ctx, &assembled);
    let c = ctx.clone();
    let dest = final_path.to_path_buf();
    let shown = PathBuf::from(shown);
    blocking(move || finish(&c, size, link, &dest, writer, &shown)).await?
}

/// The file hash recomputed from every chunk's `(hash, size)` in file order must be
/// the requested one, and the chunks must add up to `size`.
async fn check_file_hash(ctx: &FileCtx, assembled: &Assembled, size: u64) -> Result<()> {
    let n_terms = assembled.len();
    let all: Vec<(MerkleHash, u64)> = assembled
        .iter()
        .flat_map(|(_, c)| c.iter())
        .map(|(h, s)| (*h, u64::from(*s)))
        .collect();
    let total: u64 = all.iter().map(|c| c.1).sum();
    if total != size {
        return Err(DownloadError::Verification {
            source: None,
            file: ctx.file,
            detail: format!(
                "reassembled {total} bytes from {n_terms} terms, but the file is {size} bytes"
            ),
        });
    }
    let n_chunks = all.len();
    let computed = blocking(move || xet_hash::file_hash(&all)).await?;
    if computed == ctx.file {
        return Ok(());
    }
    let mut culprit = crate::diagnose::find_corrupt_chunk(&ctx.shared, assembled).await;
    if culprit.is_none() {
        culprit = find_corrupt_xorb(ctx).await;
    }
    Err(DownloadError::Verification {
        source: None,
        file: ctx.file,
        detail: format!(
            "the {n_chunks} chunks of {n_terms} terms hash to file hash {computed}, not the requested one{}",
            culprit.map_or_else(
                || " (a xorb holds corrupt data, the cache was corrupted, or the reconstruction is wrong)".to_string(),
                |c| format!("; {c}")
            )
        ),
    })
}

/// When the file is linked into the chunk cache: each term's kept chunks, where they
/// sit in the file (kept chunks are a suffix of the term's).
fn cache_link(ctx: &FileCtx, assembled: &Assembled) -> Option<(Arc<ChunkCache>, Vec<FileTerm>)> {
    let cache = ctx.shared.cache.as_ref().filter(|_| ctx.link_cache)?;
    let mut offset = 0u64;
    let terms: Vec<FileTerm> = assembled
        .iter()
        .map(|(term, kept)| {
            let t = FileTerm {
                xorb: term.xorb,
                start: term.chunks.end - kept.len() as u32,
                offset,
                chunks: kept.clone(),
            };
            offset += kept.iter().map(|c| u64::from(c.1)).sum::<u64>();
            t
        })
        .collect();
    Some((cache.clone(), terms))
}

/// After verification (blocking): complete the direct writes, fsync, link the part
/// into the chunk cache (or copy its terms there), then rename it to `dest` or copy
/// it to `writer`.
fn finish(
    ctx: &FileCtx,
    size: u64,
    link: Option<(Arc<ChunkCache>, Vec<FileTerm>)>,
    dest: &Path,
    writer: Option<BoxWriter>,
    shown: &Path,
) -> Result<()> {
    let part_path = &ctx.part_path;
    // Dropped once done, so its staging buffers are free for a direct read-back.
    let direct = lock(&ctx.write_turn).take();
    let wrote_directly = match direct {
        Some(mut d) => {
            d.finish()
                .map_err(|e| DownloadError::io("writing", part_path, e))?;
            d.direct_bytes() > 0
        }
        None => false,
    };
    check_sha256(ctx, wrote_directly)?;
    // A file renamed into place must be on disk first; a part copied to a writer
    // is deleted right after.
    if writer.is_none() {
        ctx.part
            .sync_all()
            .map_err(|e| DownloadError::io("syncing", part_path, e))?;
    }
    if let Some((cache, terms)) = link
        && let Err(e) = cache.link_file(&ctx.file, part_path, size, &terms)
    {
        tracing::debug!(
            "linking {} into the chunk cache: {e}; copying",
            part_path.display()
        );
        cache.copy_from_file(&ctx.part, &terms);
    }
    match writer {
        Some(mut w) => part::copy_to_writer(part_path, &mut w, shown),
        None => part::rename_into_place(part_path, dest, ctx.journal.as_ref().map(Journal::path)),
    }
}

/// The sha256 the request expects (once every write has landed: what was not hashed
/// as it was written is read back from the part, directly if it was written so).
fn check_sha256(ctx: &FileCtx, wrote_directly: bool) -> Result<()> {
    let Some(d) = &ctx.sha256 else {
        return Ok(());
    };
    match d.finish(&ctx.part, &ctx.part_path, wrote_directly) {
        Err(e) => Err(DownloadError::io("reading", &ctx.part_path, e)),
        Ok(Ok(())) => Ok(()),
        // The chunks matched the file hash: the content is right, the expectation not.
        Ok(Err(m)) => Err(DownloadError::Verification {
            source: None,
            file: ctx.file,
            detail: format!(
                "the content matches the file hash, but its sha256 is {}, not the expected {} (whoever gave that sha256, e.g. a repository listing, disagrees with the file hash)",
                m.got, m.want
            ),
        }),
    }
}

/// After a file-hash mismatch: check every fetched range that was a whole xorb against
/// its xorb hash, to name the corrupt xorb.
async fn find_corrupt_xorb(ctx: &FileCtx) -> Option<String> {
    let candidates: Vec<XorbCandidate> = std::mem::take(&mut *lock(&ctx.candidates));
    for c in candidates {
        let Ok(Some(len)) = ctx.shared.cas.xorb_size(&c.fetch.xorb).await else {
            continue;
        };
        if len != c.fetch.bytes.end {
            continue;
        }
        let entries: Vec<(MerkleHash, u64)> =
            c.chunks.iter().map(|(h, s)| (*h, u64::from(*s))).collect();
        let computed = xet_hash::xorb_hash(&entries);
        if computed != c.fetch.xorb {
            return Some(format!(
                "xorb {} (chunks 0..{}) decodes to chunks hashing to {computed}, not to its name: its stored data is corrupt",
                c.fetch.xorb, c.fetch.chunks.end
            ));
        }
    }
    None
}
