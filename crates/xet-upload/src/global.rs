//! Global dedup queries, issued as soon as a chunk's hash is known and answered to the
//! dedup stage when it reaches that chunk.
//!
//! A chunk is queried if it is the first chunk of its file or its hash is eligible
//! (`MerkleHash::is_global_dedup_eligible`), unless the local shard cache (as loaded at
//! the start) already knows it. A hash is queried once per session; every occurrence
//! waits for that one answer. Neither depends on timing, so dedup decisions (and with
//! them the xorbs formed) are the same from run to run against the same CAS.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{Semaphore, watch};
use tokio_util::sync::CancellationToken;
use xet_cas::{Cas, CasError};
use xet_hash::MerkleHash;
use xet_shard::{ParsedShard, Shard};

use crate::cache::LocalCache;
use crate::dedup::KnownIndex;

/// What a query produced: a parsed answer shard, nothing, or a fatal error.
pub(crate) type Answer = Result<Option<Arc<Shard>>, CasError>;

/// A pending answer.
pub(crate) type AnswerRx = watch::Receiver<Option<Answer>>;

pub(crate) struct GlobalDedup {
    cas: Arc<dyn Cas>,
    handle: tokio::runtime::Handle,
    sem: Arc<Semaphore>,
    cache_index: Arc<KnownIndex>,
    /// Where to store answers (`None` in a dry run or without a cache directory).
    cache: Option<Arc<LocalCache>>,
    cancel: CancellationToken,
    queried: Mutex<HashMap<MerkleHash, AnswerRx>>,
    pub queries: AtomicU64,
    pub answers: AtomicU64,
}

impl GlobalDedup {
    pub fn new(
        cas: Arc<dyn Cas>,
        handle: tokio::runtime::Handle,
        max_in_flight: usize,
        cache_index: Arc<KnownIndex>,
        cache: Option<Arc<LocalCache>>,
        cancel: CancellationToken,
    ) -> Self {
        GlobalDedup {
            cas,
            handle,
            sem: Arc::new(Semaphore::new(max_in_flight)),
            cache_index,
            cache,
            cancel,
            queried: Mutex::new(HashMap::new()),
            queries: AtomicU64::new(0),
            answers: AtomicU64::new(0),
        }
    }

    /// Start a query for `chunk` (the `index`-th chunk of its file) if it should be
    /// queried; callable from any thread.
    pub fn maybe_query(self: &Arc<Self>, chunk: &MerkleHash, index: u64) -> Option<AnswerRx> {
        if index != 0 && !chunk.is_global_dedup_eligible() {
            return None;
        }
        if self.cache_index.contains(chunk) {
            return None;
        }
        let (tx, rx) = {
            let mut q = self.queried.lock().unwrap_or_else(|p| p.into_inner());
            if let Some(rx) = q.get(chunk) {
                return Some(rx.clone());
            }
            let (tx, rx) = watch::channel(None);
            q.insert(*chunk, rx.clone());
            (tx, rx)
        };
        let this = self.clone();
        let chunk = *chunk;
        self.handle.spawn(async move {
            let answer = tokio::select! {
                a = this.query(chunk) => a,
                _ = this.cancel.cancelled() => return,
            };
            let _ = tx.send(Some(answer));
        });
        Some(rx)
    }

    async fn query(&self, chunk: MerkleHash) -> Answer {
        let _permit = self.sem.acquire().await.expect("semaphore never closed");
        self.queries.fetch_add(1, Ordering::Relaxed);
        let bytes = match self.cas.dedup_shard(&chunk).await {
            Ok(Some(b)) => b,
            Ok(None) => return Ok(None),
            // As the reference: a failed query is a miss, except bad credentials.
            Err(e @ CasError::Unauthorized(_)) => return Err(e),
            Err(e) => {
                tracing::warn!(%chunk, "global dedup query failed, continuing without it: {e}");
                return Ok(None);
            }
        };
        let cache = self.cache.clone();
        let parsed = tokio::task::spawn_blocking(move || {
            let parsed = ParsedShard::parse(&bytes, &xet_shard::Limits::default());
            if let (Ok(_), Some(c)) = (&parsed, cache)
                && let Err(e) = c.save_shard(&bytes)
            {
                tracing::warn!("cannot cache a global dedup answer: {e}");
            }
            parsed
        })
        .await;
        match parsed {
            Ok(Ok(p)) => {
                self.answers.fetch_add(1, Ordering::Relaxed);
                Ok(Some(Arc::new(p.shard)))
            }
            Ok(Err(e)) => {
                tracing::warn!(%chunk, "ignoring an invalid global dedup answer: {e}");
                Ok(None)
            }
            Err(e) => {
                tracing::warn!(%chunk, "global dedup answer task failed: {e}");
                Ok(None)
            }
        }
    }
}
