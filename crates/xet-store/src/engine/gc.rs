//! Garbage collection (`docs/STORE.md`, "Deletion and garbage collection"): condemn what
//! a mark finds dead, delete it in a later run after the grace period and a second mark.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use futures_util::{StreamExt as _, TryStreamExt as _};
use xet_cas::{CasError, Result};
use xet_hash::MerkleHash;

use super::backend::{META_PREFIX, ObjectBackend, ObjectKey};
use super::cas::StoreCas;
use super::condemned::{CONDEMNED_PREFIX, Condemned, DOOMED_PREFIX, DOOMED_VIEW_TTL, Named};
use super::mark::{Marked, mark};

/// Listings and reads of the Hub marks of reclaimed files in flight at once (each is a
/// round trip on S3).
const DELETES_AT_ONCE: usize = 32;

/// How a collection runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GcOptions {
    /// Objects younger than this are live, and a condemned list is acted on only once it
    /// is this old.
    pub grace: Duration,
    /// Mark and report; write and delete nothing.
    pub dry_run: bool,
    /// How long a deleting run waits between writing its doomed list and marking, so
    /// that every server acts on the list first (longer than a server's cached view of
    /// the doomed lists, 2 s, plus the longest reference being written).
    pub settle: Duration,
}

impl GcOptions {
    /// A collection with `grace`, settling half a minute, never longer than the grace
    /// (a zero grace, for quiet stores, waits not at all).
    pub fn with_grace(grace: Duration) -> GcOptions {
        GcOptions {
            grace,
            dry_run: false,
            settle: grace.min(Duration::from_secs(30)),
        }
    }
}

impl Default for GcOptions {
    fn default() -> Self {
        GcOptions::with_grace(Duration::from_secs(24 * 3600))
    }
}

/// What a collection found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize)]
pub struct GcReport {
    pub live_files: u64,
    pub live_shards: u64,
    pub live_xorbs: u64,
    /// Condemned by this run (deleted by a later one, or at once with a zero grace).
    pub condemned_shards: u64,
    pub condemned_xorbs: u64,
    pub condemned_bytes: u64,
    pub deleted_shards: u64,
    pub deleted_xorbs: u64,
    /// Bytes of the deleted shards and xorbs.
    pub freed_bytes: u64,
    /// Condemned earlier, not yet past the grace period.
    pub pending_objects: u64,
    pub elapsed_ms: u64,
}

fn millis(t: SystemTime) -> u64 {
    t.duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

impl<B: ObjectBackend> StoreCas<B> {
    /// Every list named `meta/<prefix>…` in the store, with when it was written.
    async fn lists(&self, prefix: &str) -> Result<Vec<(ObjectKey, SystemTime, Condemned)>> {
        let mut out = Vec::new();
        for o in self
            .backend()
            .list_aged(&format!("{META_PREFIX}{prefix}"))
            .await?
        {
            let Some(bytes) = self.backend().get(&o.key).await? else {
                continue; // finished by another run since the listing
            };
            let list = Condemned::decode(&o.key, &bytes)?;
            out.push((o.key, o.written, list));
        }
        Ok(out)
    }

    /// The xorbs and shards every list named `meta/<prefix>…` names now (one listing;
    /// lists already read are not read again: they never change).
    pub(super) async fn named_now(&self, prefix: &str) -> Result<Named> {
        let keys = self
            .backend()
            .list(&format!("{META_PREFIX}{prefix}"))
            .await?;
        let mut named = Named::default();
        for key in keys {
            let cached = self
                .condemned_seen
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .get(&key)
                .cloned();
            let list = match cached {
                Some(l) => l,
                None => {
                    let Some(bytes) = self.backend().get(&key).await? else {
                        continue;
                    };
                    let l = Arc::new(Condemned::decode(&key, &bytes)?);
                    self.condemned_seen
                        .lock()
                        .unwrap_or_else(|e| e.into_inner())
                        .insert(key, l.clone());
                    l
                }
            };
            named.xorbs.extend(list.xorbs.iter().copied());
            named.shards.extend(list.shards.iter().copied());
        }
        Ok(named)
    }

    /// What a deleting run is about to delete, read now: new references to these are
    /// refused.
    pub(super) async fn doomed_now(&self) -> Result<Named> {
        self.named_now(DOOMED_PREFIX).await
    }

    /// [`doomed_now`](Self::doomed_now), at most [`DOOMED_VIEW_TTL`] old (what a file's
    /// size, asked many times per commit, checks; a deleting run waits longer than this
    /// before its mark).
    pub(super) async fn doomed_recently(&self) -> Result<Arc<Named>> {
        if let Some((at, view)) = &*self.doomed_view.lock().unwrap_or_else(|e| e.into_inner())
            && at.elapsed() < DOOMED_VIEW_TTL
        {
            return Ok(view.clone());
        }
        let view = Arc::new(self.doomed_now().await?);
        *self.doomed_view.lock().unwrap_or_else(|e| e.into_inner()) =
            Some((Instant::now(), view.clone()));
        Ok(view)
    }

    /// One garbage collection: deletes what lists at least `grace` old condemned and a
    /// new mark still finds dead (after dooming it and waiting [`GcOptions::settle`]),
    /// then condemns what this mark found dead and no list names yet. With a zero grace,
    /// both in one call (for quiet stores and tests).
    pub async fn gc(self: &Arc<Self>, opts: GcOptions) -> Result<GcReport> {
        let started = Instant::now();
        let mut report = GcReport::default();
        // With a zero grace the second pass deletes what the first condemned. Its mark
        // reads again the roots and the listings, not the shards the first one read.
        let mut known = Vec::new();
        for pass in 0..2 {
            let young_after = SystemTime::now()
                .checked_sub(opts.grace)
                .unwrap_or(UNIX_EPOCH);
            let (mut due, pending): (Vec<_>, Vec<_>) = self
                .lists(CONDEMNED_PREFIX)
                .await?
                .into_iter()
                .partition(|(_, written, _)| *written <= young_after);
            // Doomed lists a killed run left are finished now.
            due.extend(self.lists(DOOMED_PREFIX).await?);
            report.pending_objects = pending.iter().map(|(_, _, l)| l.len() as u64).sum();
            if !due.is_empty() && !opts.dry_run {
                due.push(self.doom(&due).await?);
                tokio::time::sleep(opts.settle).await;
            }
            let marked = mark(self, young_after, &known).await?;
            report.live_files = marked.live_files.len() as u64;
            report.live_shards = marked.live_shards.len() as u64;
            report.live_xorbs = marked.live_xorbs.len() as u64;
            if !opts.dry_run {
                self.delete_due(&marked, &due, &mut report).await?;
            }
            // Pending lists still name theirs; what due lists named was just deleted
            // (or found live): neither is condemned again.
            let named: HashSet<MerkleHash> = pending
                .iter()
                .chain(&due)
                .flat_map(|(_, _, l)| l.shards.iter().chain(&l.xorbs).copied())
                .collect();
            let wrote = self
                .condemn(&marked, &named, opts.dry_run, &mut report)
                .await?;
            if pass == 0 && !(opts.grace.is_zero() && wrote) {
                break;
            }
            known = marked.shards;
        }
        report.elapsed_ms = started.elapsed().as_millis() as u64;
        Ok(report)
    }

    /// Writes the doomed list of `due`: from now on every server refuses new references
    /// to what it names.
    async fn doom(
        &self,
        due: &[(ObjectKey, SystemTime, Condemned)],
    ) -> Result<(ObjectKey, SystemTime, Condemned)> {
        let mut list = Condemned::default();
        for (_, _, l) in due {
            list.shards.extend(l.shards.iter().copied());
            list.xorbs.extend(l.xorbs.iter().copied());
        }
        let key = self.write_list(DOOMED_PREFIX, &list).await?;
        Ok((key, SystemTime::now(), list))
    }

    /// Writes `list` as `meta/<prefix><20-digit ms>` (the next free name).
    async fn write_list(&self, prefix: &str, list: &Condemned) -> Result<ObjectKey> {
        let mut at = millis(SystemTime::now());
        loop {
            let key = ObjectKey::meta(&format!("{prefix}{at:020}"));
            if self.backend().put_if_absent(&key, list.encode()).await? {
                return Ok(key);
            }
            at += 1;
        }
    }

    /// Every `every` (the first one `every` after the call), a collection with `opts`,
    /// logged; a failed run is logged and the next one tries again. The task holds the
    /// store weakly and ends when the store is dropped.
    pub fn spawn_gc(
        self: &Arc<Self>,
        every: Duration,
        opts: GcOptions,
    ) -> tokio::task::JoinHandle<()> {
        let store = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(every);
            tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            tick.tick().await;
            loop {
                tick.tick().await;
                let Some(store) = store.upgrade() else { break };
                match store.gc(opts).await {
                    Ok(r) => tracing::info!(
                        condemned = r.condemned_shards + r.condemned_xorbs,
                        deleted = r.deleted_shards + r.deleted_xorbs,
                        freed_bytes = r.freed_bytes,
                        elapsed_ms = r.elapsed_ms,
                        "garbage collection"
                    ),
                    Err(e) => tracing::warn!(
                        error = %xet_cas::error_chain(&e),
                        "garbage collection failed; the next run tries again"
                    ),
                }
            }
        })
    }

    /// Writes the objects `marked` found dead that no pending list names, as a new list.
    /// Returns whether it wrote one.
    async fn condemn(
        &self,
        marked: &Marked,
        named: &HashSet<MerkleHash>,
        dry_run: bool,
        report: &mut GcReport,
    ) -> Result<bool> {
        let mut list = Condemned::default();
        for s in &marked.shards {
            if let Some(h) = s.object.key.shard_hash()
                && !marked.live_shards.contains(&h)
                && !named.contains(&h)
            {
                list.shards.insert(h);
                report.condemned_bytes += s.object.size;
            }
        }
        for x in &marked.xorbs {
            if let Some(h) = x.key.xorb_hash()
                && !marked.live_xorbs.contains(&h)
                && !named.contains(&h)
            {
                list.xorbs.insert(h);
                report.condemned_bytes += x.size;
            }
        }
        report.condemned_shards += list.shards.len() as u64;
        report.condemned_xorbs += list.xorbs.len() as u64;
        if list.len() == 0 || dry_run {
            return Ok(false);
        }
        let key = self.write_list(CONDEMNED_PREFIX, &list).await?;
        tracing::info!(list = %key, objects = list.len(), "condemned unreferenced objects");
        Ok(true)
    }

    /// Deletes what the `due` lists condemned and `marked` still finds dead: shards,
    /// then xorbs, then the Hub's records of files no remaining shard registers, then
    /// the lists.
    async fn delete_due(
        &self,
        marked: &Marked,
        due: &[(ObjectKey, SystemTime, Condemned)],
        report: &mut GcReport,
    ) -> Result<()> {
        if due.is_empty() {
            return Ok(());
        }
        let condemned_shards: HashSet<MerkleHash> = due
            .iter()
            .flat_map(|(_, _, l)| l.shards.iter().copied())
            .collect();
        let condemned_xorbs: HashSet<MerkleHash> = due
            .iter()
            .flat_map(|(_, _, l)| l.xorbs.iter().copied())
            .collect();
        let mut gone_files = HashSet::new();
        let mut kept_files = HashSet::new();
        let mut doomed_shards = Vec::new();
        for s in &marked.shards {
            let Some(h) = s.object.key.shard_hash() else {
                continue;
            };
            let files = s.files.iter().flatten();
            if condemned_shards.contains(&h) && !marked.live_shards.contains(&h) {
                doomed_shards.push((h, s.object.key.clone(), s.object.size));
                gone_files.extend(files.map(|(f, sha)| (*f, *sha)));
            } else {
                kept_files.extend(files.map(|(f, _)| *f));
            }
        }
        let doomed_xorbs: Vec<(MerkleHash, ObjectKey, u64)> = marked
            .xorbs
            .iter()
            .filter_map(|x| Some((x.key.xorb_hash()?, x.key.clone(), x.size)))
            .filter(|(h, _, _)| condemned_xorbs.contains(h) && !marked.live_xorbs.contains(h))
            .collect();
        // Shards before xorbs, so no stored shard ever names a xorb that is gone; within
        // each kind, deletions go out at once (each is a round trip on S3).
        let (deleted_shards, n, bytes) = self.delete_objects(doomed_shards).await?;
        report.deleted_shards += n;
        report.freed_bytes += bytes;
        let (deleted_xorbs, n, bytes) = self.delete_objects(doomed_xorbs).await?;
        report.deleted_xorbs += n;
        report.freed_bytes += bytes;
        let gone: Vec<(MerkleHash, Option<[u8; 32]>)> = gone_files
            .into_iter()
            .filter(|(f, _)| !kept_files.contains(f))
            .collect();
        self.forget_files(gone, marked.live_files.len()).await?;
        self.forget_objects(&deleted_shards, &deleted_xorbs).await;
        let lists: Vec<ObjectKey> = due.iter().map(|(key, _, _)| key.clone()).collect();
        self.backend().delete_many(&lists).await
    }

    /// Deletes `objects` (hash, key, listed size) in one bulk delete; their hashes, and
    /// how many and how many bytes: counted from the listing the mark made (a bulk
    /// delete does not tell which keys were there, and asking would cost a request per
    /// object on S3), so one a concurrent run deleted since that listing counts here too.
    async fn delete_objects(
        &self,
        objects: Vec<(MerkleHash, ObjectKey, u64)>,
    ) -> Result<(Vec<MerkleHash>, u64, u64)> {
        let keys: Vec<ObjectKey> = objects.iter().map(|(_, k, _)| k.clone()).collect();
        self.backend().delete_many(&keys).await?;
        let bytes = objects.iter().map(|(_, _, size)| size).sum();
        let hashes = objects.into_iter().map(|(h, _, _)| h).collect::<Vec<_>>();
        let count = hashes.len() as u64;
        Ok((hashes, count, bytes))
    }

    /// Removes the Hub's marks of reclaimed files (`live` files being live): which
    /// repositories referenced them, and the verified sha256 naming each. The references
    /// are found by one listing of every reference when that is fewer requests than a
    /// listing per file (about one reference per live file), else file by file; all the
    /// marks go in one bulk delete.
    async fn forget_files(
        &self,
        gone: Vec<(MerkleHash, Option<[u8; 32]>)>,
        live: usize,
    ) -> Result<()> {
        if gone.is_empty() {
            return Ok(());
        }
        let mut marks: Vec<ObjectKey> = if gone.len() > (live + gone.len()) / 1000 + 1 {
            let files: HashSet<MerkleHash> = gone.iter().map(|(f, _)| *f).collect();
            self.backend()
                .list(ObjectKey::hub_files_prefix())
                .await?
                .into_iter()
                .filter(|k| k.file_reference_file().is_some_and(|f| files.contains(&f)))
                .collect()
        } else {
            let files: Vec<MerkleHash> = gone.iter().map(|(f, _)| *f).collect();
            let listed: Vec<Vec<ObjectKey>> = futures_util::stream::iter(files)
                .map(|file| async move {
                    let prefix = ObjectKey::hub_file_references_prefix(&file);
                    self.backend().list(&prefix).await
                })
                .buffer_unordered(DELETES_AT_ONCE)
                .try_collect()
                .await?;
            listed.into_iter().flatten().collect()
        };
        let verified: Vec<(MerkleHash, [u8; 32])> = gone
            .into_iter()
            .filter_map(|(file, sha256)| Some((file, sha256?)))
            .collect();
        let named: Vec<Option<ObjectKey>> = futures_util::stream::iter(verified)
            .map(|(file, sha256)| async move {
                let key = ObjectKey::hub_sha256(&sha256);
                let bytes = self.backend().get(&key).await?;
                Ok::<_, CasError>(bytes.and_then(|b| {
                    std::str::from_utf8(&b)
                        .is_ok_and(|s| s.trim() == file.to_string())
                        .then_some(key)
                }))
            })
            .buffer_unordered(DELETES_AT_ONCE)
            .try_collect()
            .await?;
        marks.extend(named.into_iter().flatten());
        self.backend().delete_many(&marks).await
    }
}
