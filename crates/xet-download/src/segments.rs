//! Scheduling one file's fetches: the wanted bytes walked in reconstruction segments,
//! each planned into groups (one fetch each) that run as tasks, a few segments at once;
//! terms an earlier run recorded are taken from the journal instead of fetched.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::Ordering;

use tokio::task::JoinSet;
use xet_cas::{ByteRange, ChunkRange, Reconstruction, Term};
use xet_hash::MerkleHash;

use crate::ctx::{Assembled, FileCtx, blocking};
use crate::error::{DownloadError, Result};
use crate::fetch;
use crate::journal::DoneTerm;
use crate::plan::{self, Group, Item};
use crate::types::ProgressEvent;
use crate::write::{STREAM_MEMORY, Written, look_up_chunk_hashes, read_cached, stream_and_write};

/// Result of one group: `(item idx, kept chunks)` per item.
type GroupResult = Vec<(usize, Vec<(MerkleHash, u32)>)>;

/// Walk the segments and run their groups; returns every item's kept chunks in order.
/// On an error, fetches already under way are allowed to finish and write their terms
/// (so a rerun can resume from them) before the error is returned; nothing new starts.
pub(crate) async fn run_segments(
    ctx: Arc<FileCtx>,
    done: HashMap<u64, DoneTerm>,
    first: Option<Reconstruction>,
) -> Result<Assembled> {
    let mut tasks = JoinSet::new();
    let res = walk_segments(&ctx, done, first, &mut tasks).await;
    if res.is_err() {
        ctx.stop.cancel();
        while tasks.join_next().await.is_some() {}
    }
    res
}

/// The loop of [`run_segments`]: query each segment's reconstruction (the first is
/// `first`, asked for ahead) and spawn its groups into `tasks`, with at most
/// [`crate::DownloadOptions::segments_in_flight`] segments running.
async fn walk_segments(
    ctx: &Arc<FileCtx>,
    done: HashMap<u64, DoneTerm>,
    mut first: Option<Reconstruction>,
    tasks: &mut JoinSet<(usize, Result<GroupResult>)>,
) -> Result<Assembled> {
    let opts = &ctx.shared.opts;
    let out = ctx.out;
    let mut covered = out.start;
    let mut walked = Walked::default();
    let mut seg_id = 0usize;
    while covered < out.end {
        while walked.pending.len() >= opts.segments_in_flight.max(1) {
            let j = tasks
                .join_next()
                .await
                .expect("pending segments have tasks");
            walked.record(j)?;
        }
        let seg_len = plan::segment_len(seg_id, opts.segment_bytes);
        let query = plan::segment_query(covered, out.end, seg_len);
        let recon = match first.take() {
            Some(r) => r,
            None => fetch::query_reconstruction(&ctx.shared, ctx.file, query).await?,
        };
        let (items, new_covered) =
            plan::plan_segment(ctx.file, &recon, query, covered, out, walked.results.len())?;
        if ctx.whole && new_covered > out.end {
            return Err(DownloadError::BadReconstruction {
                file: ctx.file,
                detail: format!(
                    "terms extend to byte {new_covered} but the file is {} bytes",
                    out.end
                ),
            });
        }
        let needed = walked.add_items(items, &done, out);
        let groups = plan::group_items(ctx.file, &recon, needed)?;
        if !groups.is_empty() {
            walked.pending.push_back((seg_id, groups.len()));
            for g in groups {
                let ctx = Arc::clone(ctx);
                let id = seg_id;
                tasks.spawn(async move { (id, run_group(ctx, query, g).await) });
            }
        }
        seg_id += 1;
        covered = new_covered;
    }
    while let Some(j) = tasks.join_next().await {
        walked.record(j)?;
    }
    walked.assembled()
}

/// What the segments walked so far hold: every item's term, and its kept chunks once
/// its group (or the journal) gave them.
#[derive(Default)]
struct Walked {
    results: Vec<Option<Vec<(MerkleHash, u32)>>>,
    terms: Vec<Term>,
    /// Per segment still running: (segment id, groups left).
    pending: VecDeque<(usize, usize)>,
}

impl Walked {
    /// Add a segment's `items` (numbered from [`Self::results`]' length on), those an
    /// earlier run recorded with their chunks; returns the items still to fetch.
    fn add_items(
        &mut self,
        items: Vec<Item>,
        done: &HashMap<u64, DoneTerm>,
        out: ByteRange,
    ) -> Vec<Item> {
        self.results.resize(self.results.len() + items.len(), None);
        self.terms.extend(items.iter().map(|i| i.term.clone()));
        resume_recorded(items, done, out, &mut self.results)
    }

    /// A group's task ended: keep its items' chunks; its segment has one group less.
    fn record(
        &mut self,
        joined: std::result::Result<(usize, Result<GroupResult>), tokio::task::JoinError>,
    ) -> Result<()> {
        let (seg, r) = joined.map_err(|e| DownloadError::task("a download task", e))?;
        for (idx, chunks) in r? {
            self.results[idx] = Some(chunks);
        }
        if let Some(p) = self.pending.iter_mut().find(|p| p.0 == seg) {
            p.1 -= 1;
        }
        self.pending.retain(|p| p.1 > 0);
        Ok(())
    }

    /// Every item's term and kept chunks, in file order, once every group has ended.
    fn assembled(self) -> Result<Assembled> {
        self.results
            .into_iter()
            .zip(self.terms)
            .enumerate()
            .map(|(i, (r, t))| match r {
                Some(c) => Ok((t, c)),
                None => Err(DownloadError::Internal(format!(
                    "term {i} was never completed"
                ))),
            })
            .collect()
    }
}

/// Take the chunks of the items an earlier run recorded (with the right length) from
/// the journal into `results`; returns the items still to fetch.
fn resume_recorded(
    items: Vec<Item>,
    done: &HashMap<u64, DoneTerm>,
    out: ByteRange,
    results: &mut [Option<Vec<(MerkleHash, u32)>>],
) -> Vec<Item> {
    let mut needed = Vec::with_capacity(items.len());
    for item in items {
        // Only whole items are journaled, and those start inside the output.
        let recorded = if item.is_whole() {
            done.get(&(item.data_start - out.start))
        } else {
            None
        };
        match recorded {
            Some(t) if t.len == item.term.unpacked_length => {
                results[item.idx] = Some(t.chunks.clone());
            }
            _ => needed.push(item),
        }
    }
    needed
}

/// Fetch (or read from the cache), decode, verify and write the items of one group.
async fn run_group(ctx: Arc<FileCtx>, segment: ByteRange, group: Group) -> Result<GroupResult> {
    let shared = ctx.shared.clone();
    let Group {
        fetch: planned,
        items,
    } = group;
    let xorb = planned.xorb;

    // 1. The chunk cache: all items must be covered, else the fetch serves them all.
    if let Some(cache) = shared.cache.clone()
        && items
            .iter()
            .all(|i| cache.contains(&xorb, i.term.chunks.start, i.term.chunks.end))
    {
        // Reading streams chunk by chunk; reserve a little for the buffers.
        let Some(_mem) = ctx.unless_stopped(shared.memory.reserve(1 << 20)).await else {
            return Ok(Vec::new());
        };
        let lookup = look_up_chunk_hashes(&ctx, &planned);
        let (c2, items2, f2) = (ctx.clone(), items.clone(), planned.clone());
        let read = move || read_cached(&c2, &cache, &f2, &items2, lookup);
        if let Some(done) = blocking(read).await?? {
            let bytes: u64 = items.iter().map(|i| i.term.unpacked_length).sum();
            ctx.stats.from_cache.fetch_add(bytes, Ordering::Relaxed);
            return Ok(report_written(&ctx, done, true));
        }
    }

    // 2. The network: the range is decoded and written as it arrives.
    let needed = ChunkRange::new(
        items
            .iter()
            .map(|i| i.term.chunks.start)
            .min()
            .unwrap_or(planned.chunks.start),
        items
            .iter()
            .map(|i| i.term.chunks.end)
            .max()
            .unwrap_or(planned.chunks.end),
    );
    // Memory: the whole serialized range at first (a store that hands it over in one
    // piece holds all of it); once the first piece shows that it streams, only what a
    // stream holds (`STREAM_MEMORY`).
    // Once the CAS is known to stream, that is what a fetch reserves from the start (a
    // range handed over whole after all is held beyond the budget until written).
    let reserve = if shared.streams.load(Ordering::Relaxed) {
        planned.bytes.len().min(STREAM_MEMORY)
    } else {
        planned.bytes.len()
    };
    let Some(mut mem) = ctx.unless_stopped(shared.memory.reserve(reserve)).await else {
        return Ok(Vec::new());
    };
    let Some(mut slot) = ctx.unless_stopped(shared.fetches.acquire()).await else {
        return Ok(Vec::new());
    };
    let done = stream_and_write(&ctx, segment, planned, needed, items, &mut mem, &mut slot).await?;
    drop(slot);
    drop(mem);
    ctx.stats.fetches.fetch_add(1, Ordering::Relaxed);
    Ok(report_written(&ctx, done, false))
}

/// Report the bytes written for each item of a group ([`ProgressEvent::Written`]) and
/// keep its kept chunks.
fn report_written(ctx: &FileCtx, done: Written, from_cache: bool) -> GroupResult {
    done.into_iter()
        .map(|(idx, kept, n)| {
            ctx.shared.emit(ProgressEvent::Written {
                index: ctx.index,
                bytes: n,
                from_cache,
            });
            (idx, kept)
        })
        .collect()
}
