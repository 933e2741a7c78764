//! Global dedup queries, issued as soon as a chunk's hash is known and answered to the
//! dedup stage when it reaches that chunk.
//!
//! Queries wait for one of `max_dedup_queries_in_flight` slots in input order (file,
//! then chunk), not in the order readers asked: several readers run ahead at once, and
//! served first come first, the files the dedup stage needs next would queue behind
//! queries for files it reaches much later (with 16 readers, the first xorb of 2,000
//! small files waited for nearly every answer).
//!
//! A chunk is queried if it is the first chunk of its file or its hash is eligible
//! (`MerkleHash::is_global_dedup_eligible`), unless the local shard cache (as loaded at
//! the start) already knows it. A hash is queried once per session; every occurrence
//! waits for that one answer. Neither depends on timing, so dedup decisions (and with
//! them the xorbs formed) are the same from run to run against the same CAS.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::{oneshot, watch};
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
    slots: Arc<OrderedSlots>,
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
            slots: OrderedSlots::new(max_in_flight),
            cache_index,
            cache,
            cancel,
            queried: Mutex::new(HashMap::new()),
            queries: AtomicU64::new(0),
            answers: AtomicU64::new(0),
        }
    }

    /// The queries of the `file`-th input.
    pub fn for_file(self: &Arc<Self>, file: u64) -> FileQueries {
        FileQueries {
            global: self.clone(),
            file,
        }
    }

    /// Start a query for `chunk` (the `index`-th chunk of the `file`-th input) if it
    /// should be queried; callable from any thread.
    fn maybe_query(
        self: &Arc<Self>,
        chunk: &MerkleHash,
        file: u64,
        index: u64,
    ) -> Option<AnswerRx> {
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
                a = this.query(chunk, (file, index)) => a,
                _ = this.cancel.cancelled() => return,
            };
            let _ = tx.send(Some(answer));
        });
        Some(rx)
    }

    async fn query(&self, chunk: MerkleHash, order: (u64, u64)) -> Answer {
        let _slot = self.slots.clone().acquire(order).await;
        self.queries.fetch_add(1, Ordering::Relaxed);
        tracing::trace!(%chunk, "global dedup query");
        let bytes = match self.cas.dedup_shard(&chunk).await {
            Ok(Some(b)) => b,
            Ok(None) => {
                tracing::trace!(%chunk, "global dedup answer: none");
                return Ok(None);
            }
            // As the reference: a failed query is a miss, except bad credentials.
            Err(e @ CasError::Unauthorized { .. }) => return Err(e),
            Err(e) => {
                let e = xet_cas::error_chain(&e);
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

/// Queries of one input file, in its place in the input order.
pub(crate) struct FileQueries {
    global: Arc<GlobalDedup>,
    file: u64,
}

impl FileQueries {
    /// Start a query for `chunk`, the `index`-th chunk of the file, if it should be
    /// queried; callable from any thread.
    pub fn maybe_query(&self, chunk: &MerkleHash, index: u64) -> Option<AnswerRx> {
        self.global.maybe_query(chunk, self.file, index)
    }
}

/// Query slots handed out smallest order first (a semaphore whose waiters are served by
/// their position in the input rather than by arrival).
struct OrderedSlots {
    state: Mutex<SlotState>,
}

struct SlotState {
    free: usize,
    /// Waiters by (order, arrival); arrival breaks ties and names the sender.
    waiting: BinaryHeap<Reverse<((u64, u64), u64)>>,
    wake: HashMap<u64, oneshot::Sender<()>>,
    arrivals: u64,
}

/// A query slot, handed to the next waiter (or freed) when dropped.
struct QuerySlot(Arc<OrderedSlots>);

impl OrderedSlots {
    fn new(slots: usize) -> Arc<Self> {
        Arc::new(OrderedSlots {
            state: Mutex::new(SlotState {
                free: slots.max(1),
                waiting: BinaryHeap::new(),
                wake: HashMap::new(),
                arrivals: 0,
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, SlotState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    async fn acquire(self: Arc<Self>, order: (u64, u64)) -> QuerySlot {
        let rx = {
            let mut s = self.lock();
            if s.free > 0 {
                s.free -= 1;
                return QuerySlot(self.clone());
            }
            let (tx, rx) = oneshot::channel();
            let id = s.arrivals;
            s.arrivals += 1;
            s.waiting.push(Reverse((order, id)));
            s.wake.insert(id, tx);
            rx
        };
        // The sender is only dropped after a slot was handed over through it.
        let _ = rx.await;
        QuerySlot(self)
    }

    /// Hand a slot to the first waiter still waiting, or free it.
    fn release(&self) {
        let mut s = self.lock();
        while let Some(Reverse((_, id))) = s.waiting.pop() {
            if let Some(tx) = s.wake.remove(&id)
                && tx.send(()).is_ok()
            {
                return;
            }
        }
        s.free += 1;
    }
}

impl Drop for QuerySlot {
    fn drop(&mut self) {
        self.0.release();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Waiters get slots by order, whatever order they came in.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_go_to_the_earliest_input_first() {
        let slots = OrderedSlots::new(1);
        let held = slots.clone().acquire((0, 0)).await;
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        let mut tasks = Vec::new();
        for file in [5u64, 3, 9, 1, 7] {
            let (s, tx) = (slots.clone(), tx.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = s.acquire((file, 0)).await;
                tx.send(file).unwrap();
            }));
            // Each one queued before the next (a waiter is queued by `acquire` itself).
            while slots.lock().waiting.len() < tasks.len() {
                tokio::task::yield_now().await;
            }
        }
        // A waiter that gave up does not take a slot with it.
        let gone = tokio::spawn(slots.clone().acquire((0, 5)));
        while slots.lock().waiting.len() < 6 {
            tokio::task::yield_now().await;
        }
        gone.abort();
        let _ = gone.await;
        drop(held);
        for t in tasks {
            t.await.unwrap();
        }
        drop(tx);
        let mut got = Vec::new();
        while let Some(f) = rx.recv().await {
            got.push(f);
        }
        assert_eq!(got, [1, 3, 5, 7, 9]);
        assert_eq!(slots.lock().free, 1);
    }
}
