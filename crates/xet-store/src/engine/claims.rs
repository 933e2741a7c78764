//! The index refreshes that sha256 misses ask for (see [`ClaimRefresh::since`]): shared
//! between misses, one at a time, paced. Knows nothing of the store but the refresh it
//! is handed, so the CAS and the repositories both use it without importing each other.

use std::future::Future;
use std::sync::Mutex;

use tokio::time::{Duration, Instant};
use xet_cas::{CasError, Result};

/// The least pause between two refreshes that sha256 misses run (see
/// [`ClaimRefresh::since`]); the pause is longer after a refresh that took longer.
pub(crate) const MIN_CLAIM_REFRESH_PAUSE: Duration = Duration::from_millis(100);

/// The refreshes of the index that sha256 misses ask for: at most one in flight, each
/// shared by every miss it can answer, and a pause after each at least as long as it
/// took (see [`ClaimRefresh::since`]).
#[derive(Default)]
pub(crate) struct ClaimRefresh {
    state: Mutex<ClaimRefreshState>,
    done: tokio::sync::Notify,
}

#[derive(Default)]
struct ClaimRefreshState {
    /// A refresh is in flight.
    running: bool,
    /// When the next refresh may start.
    next_allowed: Option<Instant>,
    /// When the latest refresh that succeeded started.
    succeeded: Option<Instant>,
    /// When the latest refresh that failed started, and why.
    failed: Option<(Instant, CasError)>,
}

/// What a miss does next.
enum Step {
    /// A refresh that started after the miss has succeeded: look again.
    Fresh,
    /// A refresh that started after the miss has failed.
    Failed(CasError),
    /// Another refresh is in flight: wait for it to end.
    WaitForRunning,
    /// The last refresh ended too recently: wait until this time.
    WaitUntil(Instant),
    /// Run the refresh (started now).
    Run(Instant),
}

impl ClaimRefresh {
    fn lock(&self) -> std::sync::MutexGuard<'_, ClaimRefreshState> {
        // Every critical section assigns a few fields; a panic cannot leave them torn.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn next_step(&self, since: Instant) -> Step {
        let mut st = self.lock();
        if st.succeeded.is_some_and(|s| s >= since) {
            return Step::Fresh;
        }
        if let Some((s, why)) = &st.failed
            && *s >= since
        {
            return Step::Failed(why.clone());
        }
        if st.running {
            return Step::WaitForRunning;
        }
        let now = Instant::now();
        if let Some(next) = st.next_allowed
            && next > now
        {
            return Step::WaitUntil(next);
        }
        st.running = true;
        Step::Run(now)
    }

    /// Return once a refresh (`refresh`, the index listing its shards) that started at or after `since` has completed.
    ///
    /// Why a refresh on a miss at all: a commit names a sha256 only after the client's
    /// shard upload returned, possibly through another server sharing the backend, and
    /// the periodic refresh may not have run since. A listing that starts after the miss
    /// sees that shard (the backends' listings are consistent); an older one may not, so
    /// a miss never settles for a refresh that started before it. Why not one refresh per
    /// miss: a refresh lists all of `shards/` (one S3 request per 1000 shards), and a
    /// flood of commits naming unknown sha256s would list without end. So misses share
    /// refreshes (any that started after them), one runs at a time, and after each the
    /// next waits at least as long as it took (and [`MIN_CLAIM_REFRESH_PAUSE`]): misses
    /// can keep the index listing at most half of the time, whatever the store's size,
    /// while a lone miss waits for one listing, and one that arrives during a refresh for
    /// about three.
    pub(crate) async fn since<F>(&self, since: Instant, refresh: impl Fn() -> F) -> Result<()>
    where
        F: Future<Output = Result<usize>>,
    {
        loop {
            // Registered before the state is read, so a refresh ending in between still
            // wakes this miss.
            let ended = self.done.notified();
            tokio::pin!(ended);
            ended.as_mut().enable();
            match self.next_step(since) {
                Step::Fresh => return Ok(()),
                Step::Failed(why) => return Err(why),
                Step::WaitForRunning => ended.await,
                Step::WaitUntil(t) => tokio::time::sleep_until(t).await,
                Step::Run(start) => {
                    let mut running = Running {
                        refresh: self,
                        start,
                        outcome: None,
                    };
                    let result = refresh().await;
                    running.outcome = Some(match &result {
                        Ok(_) => Ok(()),
                        Err(e) => Err(CasError::storage_with(
                            "refreshing the store index",
                            e.clone(),
                        )),
                    });
                    drop(running);
                    return result.map(drop);
                }
            }
        }
    }
}

/// Ends the refresh started at `start`, also when the future running it is dropped (a
/// client gone away), so waiting misses never wait for a refresh nobody runs.
struct Running<'a> {
    refresh: &'a ClaimRefresh,
    start: Instant,
    outcome: Option<Result<()>>,
}

impl Drop for Running<'_> {
    fn drop(&mut self) {
        {
            let mut st = self.refresh.lock();
            let now = Instant::now();
            st.running = false;
            st.next_allowed = Some(now + (now - self.start).max(MIN_CLAIM_REFRESH_PAUSE));
            match self.outcome.take() {
                Some(Ok(())) => st.succeeded = Some(self.start),
                Some(Err(why)) => st.failed = Some((self.start, why)),
                // Cancelled: the misses waiting for it start their own.
                None => {}
            }
        }
        self.refresh.done.notify_waiters();
    }
}
