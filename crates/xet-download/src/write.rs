//! The write path of one group: its range fetched and decoded as it arrives (or read
//! from the chunk cache), every chunk written at its offsets in the `.part`, then each
//! term's length checked and the term journaled.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::sync::OwnedSemaphorePermit;
use xet_cas::{ByteRange, ChunkRange, XorbFetch};
use xet_hash::MerkleHash;

use crate::cache::{ChunkCache, PendingEntry};
use crate::chunk_hashes::Lookup;
use crate::ctx::{FileCtx, XorbCandidate};
use crate::decode;
use crate::error::{DownloadError, Result};
use crate::fetch;
use crate::fsio;
use crate::journal::DoneTerm;
use crate::limit::Slot;
use crate::plan::Item;
use crate::split;
use crate::sync::lock;

/// Pieces of a range queued between the network and its decoder.
const PIECES_QUEUED: usize = 16;

/// Memory a streamed range holds: the queued pieces (at most about 400 KiB each from
/// the HTTP client) and the decoder's unwritten batch (decoded chunks, or the pieces
/// its stored chunks are slices of).
pub(crate) const STREAM_MEMORY: u64 = PIECES_QUEUED as u64 * (400 << 10) + WRITE_BATCH + (1 << 20);

/// Decoded bytes handed to the writer at once: large writes, few of them (one staging
/// buffer of the direct writer; a larger batch is no faster and holds more memory).
const WRITE_BATCH: u64 = 8 << 20;

/// `(item idx, kept chunks, bytes written)`.
pub(crate) type WrittenItem = (usize, Vec<(MerkleHash, u32)>, u64);
pub(crate) type Written = Vec<WrittenItem>;

/// Fetch one range (in parts where the CAS is known to stream, see [`split`]) and
/// decode, verify and write it as it arrives: the network side ([`fetch::pump_range`])
/// feeds pieces through a bounded queue to a decoder on a blocking thread
/// ([`decode_and_write`]).
pub(crate) async fn stream_and_write(
    ctx: &Arc<FileCtx>,
    segment: ByteRange,
    fetch: XorbFetch,
    needed: ChunkRange,
    items: Vec<Item>,
    mem: &mut OwnedSemaphorePermit,
    slot: &mut Slot,
) -> Result<Written> {
    let (tx, rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(PIECES_QUEUED);
    let lookup = look_up_chunk_hashes(ctx, &fetch);
    let (c2, f2) = (ctx.clone(), fetch.clone());
    let decoder =
        tokio::task::spawn_blocking(move || decode_and_write(&c2, &f2, &items, rx, lookup));
    let shared = &ctx.shared;
    // A CAS known to stream (it says so, or an earlier range showed it) gets a large
    // range asked for in parts, those ahead of their turn with memory of their own.
    let parts = if shared.streams.load(Ordering::Relaxed) {
        shared.memory.shrink(mem, STREAM_MEMORY);
        split::parts(fetch.bytes, split::PART_BYTES)
    } else {
        vec![fetch.bytes]
    };
    let pumped = if parts.len() > 1 {
        let c = ctx.clone();
        let split = split::Split {
            shared,
            file: ctx.file,
            segment,
            fetch: &fetch,
            needed,
            counter: Arc::new(move |n| {
                c.stats.fetched.fetch_add(n, Ordering::Relaxed);
            }),
        };
        split.pump(&parts, &tx, slot).await
    } else {
        let total = fetch.bytes.len();
        let mut first = true;
        let pieces = fetch::Pieces::Decoder(&tx);
        fetch::pump_range(shared, ctx.file, segment, fetch, needed, pieces, |piece| {
            ctx.stats
                .fetched
                .fetch_add(piece.len() as u64, Ordering::Relaxed);
            slot.delivered(piece.len() as u64);
            if std::mem::take(&mut first) && (piece.len() as u64) < total {
                shared.streams.store(true, Ordering::Relaxed);
                shared.memory.shrink(mem, STREAM_MEMORY);
            }
        })
        .await
    };
    drop(tx);
    let decoded = decoder
        .await
        .map_err(|e| DownloadError::task("the decoding task", e))?;
    match (pumped, decoded) {
        (Ok(fetch::Pumped::Complete), Ok(Some(done))) => Ok(done),
        // The decoder stopped early: its error is the one to report.
        (Ok(_), Err(e)) => Err(e),
        // The range did not arrive whole: the network's error says why, unless the
        // decoder found something wrong in what did arrive.
        (Err(e), Ok(None)) | (Err(e), Ok(Some(_))) => Err(e),
        (Err(pe), Err(de)) => Err(if de.kind() == crate::ErrorKind::Verification {
            de
        } else {
            pe
        }),
        (Ok(p), Ok(_)) => Err(DownloadError::Internal(format!(
            "fetching ended {p:?} but the decoder saw the range end early"
        ))),
    }
}

/// Serve `items` (of `fetch`) from the cache (blocking), their chunk hashes checked
/// against their xorb's where `lookup` looks them up (an entry cached before, or by a
/// run that did not check them, is checked now). `None` if any item missed.
pub(crate) fn read_cached(
    ctx: &FileCtx,
    cache: &ChunkCache,
    fetch: &XorbFetch,
    items: &[Item],
    lookup: Option<HashLookup>,
) -> Result<Option<Written>> {
    let mut entries = Vec::with_capacity(items.len());
    for item in items {
        let got = cache.read_chunks(
            &item.term.xorb,
            item.term.chunks.start,
            item.term.chunks.end,
            |off, data| write_clipped(ctx, item, item.data_start + off, [data]),
        );
        match got.map_err(|e| DownloadError::io("writing", &ctx.part_path, e))? {
            Some(e) => entries.push(e),
            None => return Ok(None),
        }
        lock(&ctx.cache_touched).push((
            item.term.xorb,
            item.term.chunks.start,
            item.term.chunks.end,
        ));
    }
    if let Some(lookup) = lookup {
        let found = lookup.blocking_recv().map_err(|_| lookup_lost())??;
        for (item, e) in items.iter().zip(&entries) {
            let hashes: Vec<MerkleHash> = e.iter().map(|(h, _)| *h).collect();
            let one = std::slice::from_ref(item);
            check_chunk_hashes(
                ctx,
                fetch,
                one,
                found.clone(),
                item.term.chunks.start,
                &hashes,
            )?;
        }
    }
    writes_landed(ctx)?;
    items
        .iter()
        .zip(entries)
        .map(|(item, e)| finish_item(ctx, item, e))
        .collect::<Result<Vec<_>>>()
        .map(Some)
}

/// Decode a range from the pieces arriving on `rx` and write its chunks where the items
/// want them (blocking). `None` if the pieces stopped before the range was whole (the
/// sender knows why).
fn decode_and_write(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    items: &[Item],
    mut rx: tokio::sync::mpsc::Receiver<bytes::Bytes>,
    lookup: Option<HashLookup>,
) -> Result<Option<Written>> {
    let bad = |rel: Option<usize>, message: &str| range_error(ctx, fetch, items, rel, message);
    let n = fetch.chunks.len() as usize;
    let mut decoder = decode::RangeDecoder::new(fetch.bytes.len(), n, WRITE_BATCH)
        .map_err(|e| bad(e.chunk, &e.message))?;
    let spans = item_spans(fetch, items);
    let mut pending = match &ctx.shared.cache {
        Some(c) if !ctx.link_cache => c.begin(&fetch.xorb, fetch.chunks.start, n),
        _ => None,
    };
    let mut cache_ok = true;
    let mut sink = |first: usize, pieces: &[decode::Piece], ends: &[u64]| {
        write_pieces(ctx, items, &spans, first, pieces, ends)?;
        if let Some(p) = pending.as_mut().filter(|_| cache_ok) {
            cache_ok = pieces.iter().all(|piece| p.append(piece.bytes()).is_ok());
        }
        Ok(())
    };
    let failed = |e: decode::EachError<std::io::Error>| match e {
        decode::EachError::Decode(d) => bad(d.chunk, &d.message),
        decode::EachError::Sink(io) => DownloadError::io("writing", &ctx.part_path, io),
    };
    while let Some(piece) = rx.blocking_recv() {
        decoder.feed(piece, &mut sink).map_err(failed)?;
    }
    if decoder.fed() < fetch.bytes.len() {
        return Ok(None);
    }
    let (hashes, ends) = decoder.finish(&mut sink).map_err(failed)?;
    for (item, &(a, b)) in items.iter().zip(&spans) {
        check_term_len(ctx, item, start_of(&ends, b) - start_of(&ends, a))?;
    }
    if let Some(lookup) = lookup {
        let found = lookup.blocking_recv().map_err(|_| lookup_lost())??;
        check_chunk_hashes(ctx, fetch, items, found, fetch.chunks.start, &hashes)?;
    }
    let chunks: Vec<(MerkleHash, u32)> = (0..hashes.len())
        .map(|i| {
            (
                hashes[i],
                (start_of(&ends, i + 1) - start_of(&ends, i)) as u32,
            )
        })
        .collect();
    keep_decoded(ctx, fetch, pending.filter(|_| cache_ok), &hashes, &chunks);
    writes_landed(ctx)?;
    items
        .iter()
        .zip(&spans)
        .map(|(item, &(a, b))| finish_item(ctx, item, chunks[a..b].to_vec()))
        .collect::<Result<_>>()
        .map(Some)
}

/// The chunk hashes of a fetch's xorb ([`ChunkHashes`]), looked up on a task of their
/// own while the range is fetched and decoded, so they cost no round trip of their own.
pub(crate) type HashLookup = tokio::sync::oneshot::Receiver<Result<Lookup>>;

/// Start looking up the chunk hashes for `fetch` where they are wanted: a range
/// download with [`crate::DownloadOptions::chunk_hashes`] (a whole file is checked
/// against its file hash instead).
pub(crate) fn look_up_chunk_hashes(ctx: &Arc<FileCtx>, fetch: &XorbFetch) -> Option<HashLookup> {
    let hashes = ctx
        .shared
        .opts
        .chunk_hashes
        .clone()
        .filter(|_| !ctx.whole)?;
    let (tx, rx) = tokio::sync::oneshot::channel();
    let (cas, fetch, file) = (ctx.shared.cas.clone(), fetch.clone(), ctx.file);
    tokio::spawn(async move {
        let found = hashes.for_fetch(cas.as_ref(), &fetch).await;
        // The receiver is gone when the range failed first: nothing to tell then.
        let _ = tx.send(found.map_err(|e| DownloadError::from_cas(file, e)));
    });
    Some(rx)
}

fn lookup_lost() -> DownloadError {
    DownloadError::Internal("the lookup of a xorb's chunk hashes ended without an answer".into())
}

/// Compare `hashes`, those of chunks `first..` of `fetch`'s xorb (decoded, or read from
/// the cache), with the xorb's. A CAS that gives no chunk hashes leaves the file's
/// report saying so.
fn check_chunk_hashes(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    items: &[Item],
    found: Lookup,
    first: u32,
    hashes: &[MerkleHash],
) -> Result<()> {
    let xorb = match found {
        Lookup::Found(x) => x,
        Lookup::NotServed => {
            ctx.stats.unchecked.store(true, Ordering::Relaxed);
            return Ok(());
        }
    };
    match xorb.mismatch(first, hashes) {
        None => Ok(()),
        Some((at, want)) => {
            let got = hashes[(at - first) as usize];
            let rel = (at - fetch.chunks.start) as usize;
            let message = format!("its hash is {got}, the xorb's footer says {want}");
            Err(range_error(ctx, fetch, items, Some(rel), &message))
        }
    }
}

/// Each item's chunks, relative to the fetch.
fn item_spans(fetch: &XorbFetch, items: &[Item]) -> Vec<(usize, usize)> {
    items
        .iter()
        .map(|i| {
            (
                (i.term.chunks.start - fetch.chunks.start) as usize,
                (i.term.chunks.end - fetch.chunks.start) as usize,
            )
        })
        .collect()
}

/// What is wrong with chunk `rel` of `fetch` (relative to the fetch; `None`: the
/// range as a whole), naming the terms it serves.
fn range_error(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    items: &[Item],
    rel: Option<usize>,
    message: &str,
) -> DownloadError {
    let chunk = rel.map_or(String::new(), |r| {
        format!("chunk {} of ", fetch.chunks.start as usize + r)
    });
    let users: Vec<String> = items.iter().map(Item::describe).collect();
    DownloadError::Verification {
        source: None,
        file: ctx.file,
        detail: format!(
            "{chunk}xorb {} (fetched bytes {}..{} for chunks {}..{}, used by {}): {message}",
            fetch.xorb,
            fetch.bytes.start,
            fetch.bytes.end,
            fetch.chunks.start,
            fetch.chunks.end,
            users.join(", "),
        ),
    }
}

/// Write the decoded chunks `first..first + pieces.len()` of a fetch (`ends`: where
/// each chunk of the fetch ends in its data, so far) into the items they belong to.
fn write_pieces(
    ctx: &FileCtx,
    items: &[Item],
    spans: &[(usize, usize)],
    first: usize,
    pieces: &[decode::Piece],
    ends: &[u64],
) -> std::io::Result<()> {
    let last = first + pieces.len();
    for (item, &(a, b)) in items.iter().zip(spans) {
        let (lo, hi) = (a.max(first), b.min(last));
        if lo < hi {
            // Clipped to the item's part of the output, so chunks of a wrong length
            // (caught once the range is whole) cannot land outside it.
            write_clipped(
                ctx,
                item,
                item.data_start + start_of(ends, lo) - start_of(ends, a),
                pieces[lo - first..hi - first]
                    .iter()
                    .map(decode::Piece::bytes),
            )?;
        }
    }
    Ok(())
}

/// Write the part of consecutive chunks `pieces` (the first at file offset `at`) that
/// falls in `item.write`, with one vectored positional write. Writers of one file take
/// turns: concurrent writes to one file only contend on its inode lock in the kernel.
fn write_clipped<'a>(
    ctx: &FileCtx,
    item: &Item,
    mut at: u64,
    pieces: impl IntoIterator<Item = &'a [u8]>,
) -> std::io::Result<()> {
    let mut bufs: Vec<&[u8]> = Vec::new();
    let mut first_off = None;
    for data in pieces {
        let lo = at.max(item.write.start);
        let hi = (at + data.len() as u64).min(item.write.end);
        if lo < hi {
            first_off.get_or_insert(lo);
            bufs.push(&data[(lo - at) as usize..(hi - at) as usize]);
        }
        at += data.len() as u64;
    }
    if let Some(off) = first_off {
        let pos = off - ctx.out.start;
        let len: u64 = bufs.iter().map(|b| b.len() as u64).sum();
        let through_cache = {
            let mut turn = lock(&ctx.write_turn);
            match turn.as_mut() {
                Some(direct) => direct.write(&ctx.part, &bufs, pos)?,
                None => {
                    fsio::write_all_vectored_at(&ctx.part, &bufs, pos)?;
                    len
                }
            }
        };
        // Only spans written through the page cache in full are worth starting early.
        if ctx.renamed && through_cache == len {
            fsio::start_writeback(&ctx.part, pos, len);
        }
        if let Some(d) = &ctx.sha256 {
            d.wrote(&ctx.part, pos, &bufs);
        }
    }
    Ok(())
}

/// Where chunk `i` of a decoded range starts in its data, given each chunk's end.
fn start_of(ends: &[u64], i: usize) -> u64 {
    if i == 0 { 0 } else { ends[i - 1] }
}

/// Keep what a whole decoded range offers beyond its items: the chunk cache entry
/// written alongside (`pending`, published with the chunks' `hashes`), and, for a
/// range that may be a whole xorb, its `chunks` for [`XorbCandidate`].
fn keep_decoded(
    ctx: &FileCtx,
    fetch: &XorbFetch,
    pending: Option<PendingEntry>,
    hashes: &[MerkleHash],
    chunks: &[(MerkleHash, u32)],
) {
    if let (Some(p), Some(cache)) = (pending, &ctx.shared.cache) {
        cache.commit(p, hashes);
        lock(&ctx.cache_touched).push((fetch.xorb, fetch.chunks.start, fetch.chunks.end));
    }
    if ctx.whole && fetch.chunks.start == 0 && fetch.bytes.start == 0 {
        lock(&ctx.candidates).push(XorbCandidate {
            fetch: fetch.clone(),
            chunks: chunks.to_vec(),
        });
    }
}

/// Before terms are journaled: wait until the bytes written for them are in the part
/// (direct writes complete on the writer thread).
fn writes_landed(ctx: &FileCtx) -> Result<()> {
    match (&ctx.written, &ctx.journal) {
        (Some(w), Some(_)) => w
            .wait()
            .map_err(|e| DownloadError::io("writing", &ctx.part_path, e)),
        _ => Ok(()),
    }
}

/// After an item's chunks are written: check its length, journal it, keep its chunks.
fn finish_item(ctx: &FileCtx, item: &Item, entries: Vec<(MerkleHash, u32)>) -> Result<WrittenItem> {
    let len: u64 = entries.iter().map(|e| u64::from(e.1)).sum();
    check_term_len(ctx, item, len)?;
    if item.is_whole()
        && let Some(j) = &ctx.journal
    {
        let t = DoneTerm {
            len,
            chunks: entries.clone(),
        };
        j.append(item.data_start - ctx.out.start, &t)
            .map_err(|e| DownloadError::io("writing", j.path(), e))?;
    }
    let kept = if ctx.whole {
        kept_chunks(ctx, item, entries)?
    } else {
        Vec::new()
    };
    Ok((item.idx, kept, item.write.len()))
}

fn check_term_len(ctx: &FileCtx, item: &Item, got: u64) -> Result<()> {
    if got != item.term.unpacked_length {
        return Err(DownloadError::Verification {
            source: None,
            file: ctx.file,
            detail: format!(
                "{} decodes to {got} bytes, the reconstruction says {}",
                item.describe(),
                item.term.unpacked_length
            ),
        });
    }
    Ok(())
}

/// The chunks of `item` that lie at or after `keep_from` (all of them unless a later
/// segment's answer overlapped an earlier one); the cut must be a chunk boundary.
fn kept_chunks(
    ctx: &FileCtx,
    item: &Item,
    entries: Vec<(MerkleHash, u32)>,
) -> Result<Vec<(MerkleHash, u32)>> {
    let skip = item.keep_from - item.data_start;
    if skip == 0 {
        return Ok(entries);
    }
    let mut acc = 0u64;
    for (i, e) in entries.iter().enumerate() {
        if acc == skip {
            return Ok(entries[i..].to_vec());
        }
        acc += u64::from(e.1);
    }
    Err(DownloadError::BadReconstruction {
        file: ctx.file,
        detail: format!(
            "{} overlaps the previous segment at byte {}, not at a chunk boundary",
            item.describe(),
            item.keep_from
        ),
    })
}
