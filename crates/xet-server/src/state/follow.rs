//! Following buckets for their events feed: one poller per followed bucket, shared by
//! every stream following it, reading the bucket's record and head from the store (which
//! every server on it shares, so a batch through another server is seen too).
//!
//! A poller publishes what it saw in a `watch` channel: only the latest state is kept,
//! never a queue, so a slow stream costs nothing here; each stream diffs from where it
//! was to the latest state when it gets to it. The poller ends at its first poll with no
//! stream left. No lock is held across an `.await`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, watch};
use xet_hub::{BucketState, RepoError, RepoRef, Repos};

/// What a poll saw of a bucket.
#[derive(Debug, Clone)]
pub enum Seen {
    /// Not polled yet.
    Pending,
    Bucket(Arc<BucketState>),
    /// No bucket of that name any more (deleted, moved).
    Gone,
}

impl Seen {
    /// Whether `self` and `other` differ in anything a stream acts on: the record (its
    /// privacy, its incarnation) or the head.
    fn differs(&self, other: &Seen) -> bool {
        match (self, other) {
            (Seen::Bucket(a), Seen::Bucket(b)) => a.record != b.record || a.head != b.head,
            (Seen::Pending, Seen::Pending) | (Seen::Gone, Seen::Gone) => false,
            _ => true,
        }
    }
}

type Channels = HashMap<RepoRef, Arc<watch::Sender<Seen>>>;

/// The pollers of followed buckets, the streams' permits and the server's closing.
pub struct Followers {
    repos: Repos,
    poll: Duration,
    channels: Arc<Mutex<Channels>>,
    streams: Arc<Semaphore>,
    closing: watch::Sender<bool>,
}

impl Followers {
    pub fn new(repos: Repos, poll: Duration, max_streams: usize) -> Followers {
        Followers {
            repos,
            poll: poll.max(Duration::from_millis(10)),
            channels: Arc::default(),
            streams: Arc::new(Semaphore::new(max_streams.max(1))),
            closing: watch::Sender::new(false),
        }
    }

    /// A place for one more stream, if there is one.
    pub fn stream_permit(&self) -> Option<OwnedSemaphorePermit> {
        Arc::clone(&self.streams).try_acquire_owned().ok()
    }

    /// Turns `true` when the server begins to shut down: streams say `reconnect` and end,
    /// so a graceful shutdown does not wait for them.
    pub fn closing(&self) -> watch::Receiver<bool> {
        self.closing.subscribe()
    }

    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// What the poller of `bucket` sees, starting one if none runs.
    pub fn subscribe(&self, bucket: &RepoRef) -> watch::Receiver<Seen> {
        let mut channels = self.channels.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(tx) = channels.get(bucket) {
            return tx.subscribe();
        }
        let tx = Arc::new(watch::Sender::new(Seen::Pending));
        let rx = tx.subscribe();
        channels.insert(bucket.clone(), Arc::clone(&tx));
        drop(channels);
        tokio::spawn(poll(
            self.repos.clone(),
            bucket.clone(),
            tx,
            Arc::clone(&self.channels),
            self.poll,
        ));
        rx
    }
}

/// Poll `bucket` every `every` while anyone follows it.
async fn poll(
    repos: Repos,
    bucket: RepoRef,
    tx: Arc<watch::Sender<Seen>>,
    channels: Arc<Mutex<Channels>>,
    every: Duration,
) {
    loop {
        {
            // Under the lock that subscribing takes, so nobody subscribes to a poller
            // that has decided to end.
            let mut map = channels.lock().unwrap_or_else(PoisonError::into_inner);
            if tx.receiver_count() == 0 {
                if map.get(&bucket).is_some_and(|t| Arc::ptr_eq(t, &tx)) {
                    map.remove(&bucket);
                }
                return;
            }
        }
        let seen = match repos.bucket(&bucket).await {
            Ok(state) => Some(Seen::Bucket(Arc::new(state))),
            Err(RepoError::RepoNotFound(_)) => Some(Seen::Gone),
            Err(e) => {
                // A passing store failure: the next poll tries again.
                tracing::debug!(bucket = %bucket.id, "polling the bucket for its events: {e}");
                None
            }
        };
        if let Some(seen) = seen {
            tx.send_if_modified(|current| {
                let changed = current.differs(&seen);
                if changed {
                    *current = seen;
                }
                changed
            });
        }
        tokio::time::sleep(every).await;
    }
}
