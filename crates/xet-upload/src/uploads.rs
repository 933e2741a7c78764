//! How many xorb uploads run at once: a limit that starts at
//! `UploadOptions::xorb_uploads_initial` and follows the throughput measured.
//!
//! A link whose bandwidth-delay product is larger than what a few connections carry
//! (each TCP connection moves at most its window per round trip) needs more uploads in
//! flight; a loopback or a slow link gains nothing from them and would only hold more
//! bodies. So the limit is raised only while raising it pays:
//!
//! - The uploads are measured in *rounds*: a round ends when as many uploads have
//!   finished as the limit allows at once; its throughput is the bytes they stored over
//!   the round's wall time.
//! - A round in which no built xorb waited for an upload slot says nothing about more
//!   slots (the uploads kept up with the dedup stage): the limit stays.
//! - Otherwise the limit is raised by half (at least one), up to
//!   `UploadOptions::max_xorb_uploads`, as long as each raise brought at least 15% more
//!   throughput than the round before it; a raise that did not goes back to the limit
//!   before it, which is then held for [`HOLD_ROUNDS`] rounds before trying again (the
//!   link may have changed).
//!
//! The limit decides only when xorbs are sent, never which xorbs are formed.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio::sync::{Semaphore, SemaphorePermit};

/// The limit never goes below this.
const MIN_UPLOADS: usize = 2;
/// A raise is kept if the round after it moved at least this much more than the one before.
const GAIN: f64 = 1.15;
/// Rounds held at a limit whose raise did not pay before trying again.
pub(crate) const HOLD_ROUNDS: u32 = 4;

/// The decisions, apart from the waiting (unit-tested with made-up throughputs).
#[derive(Debug)]
pub(crate) struct Controller {
    limit: usize,
    max: usize,
    /// The round being measured: its start, bytes and uploads finished, whether a xorb
    /// waited for a slot.
    round_start: Option<Duration>,
    round_bytes: u64,
    round_done: usize,
    waited: bool,
    /// The limit and throughput of the round before the last raise.
    before: Option<(usize, f64)>,
    /// Rounds left to hold the limit.
    hold: u32,
}

impl Controller {
    pub fn new(initial: usize, max: usize) -> Self {
        let max = max.max(1);
        Controller {
            limit: initial.clamp(MIN_UPLOADS.min(max), max),
            max,
            round_start: None,
            round_bytes: 0,
            round_done: 0,
            waited: false,
            before: None,
            hold: 0,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    /// An upload starts at `now` (time since any fixed origin).
    pub fn started(&mut self, now: Duration) {
        self.round_start.get_or_insert(now);
    }

    /// A built xorb found every slot taken.
    pub fn waited(&mut self) {
        self.waited = true;
    }

    /// An upload of `bytes` finished at `now`.
    pub fn finished(&mut self, bytes: u64, now: Duration) {
        self.round_bytes += bytes;
        self.round_done += 1;
        if self.round_done < self.limit {
            return;
        }
        let start = self.round_start.unwrap_or(now);
        let secs = (now.saturating_sub(start)).as_secs_f64().max(1e-6);
        let throughput = self.round_bytes as f64 / secs;
        let waited = self.waited;
        self.round_start = Some(now);
        self.round_bytes = 0;
        self.round_done = 0;
        self.waited = false;
        self.decide(throughput, waited);
    }

    fn decide(&mut self, throughput: f64, waited: bool) {
        if !waited {
            // The uploads kept up: more slots would change nothing.
            self.before = None;
            return;
        }
        match self.before {
            Some((limit, before)) if self.limit > limit => {
                if throughput >= before * GAIN {
                    self.raise(throughput);
                } else {
                    self.limit = limit;
                    self.before = Some((limit, before.max(throughput)));
                    self.hold = HOLD_ROUNDS;
                }
            }
            _ if self.hold > 0 => self.hold -= 1,
            _ => self.raise(throughput),
        }
    }

    fn raise(&mut self, throughput: f64) {
        self.before = Some((self.limit, throughput));
        self.limit = (self.limit + (self.limit / 2).max(1)).min(self.max);
    }
}

/// The upload slots: [`UploadSlots::acquire`] waits for a free one. They are permits of
/// a tokio semaphore, which serves waiters first come, first served (a waiter whose
/// task is dropped leaves the line): the xorbs sealed first are sent first, and the last
/// one of an upload is not overtaken by later ones (it would end the upload alone, at
/// one connection's rate). The semaphore's size follows the [`Controller`].
pub(crate) struct UploadSlots {
    sem: Semaphore,
    state: Mutex<State>,
    origin: Instant,
}

struct State {
    ctl: Controller,
    /// Permits to take out of circulation as they come back (after a decrease).
    owed: usize,
}

/// One upload slot, given back when dropped; [`Slot::stored`] records what it moved.
pub(crate) struct Slot<'a> {
    slots: &'a UploadSlots,
    permit: Option<SemaphorePermit<'a>>,
}

impl UploadSlots {
    pub fn new(initial: usize, max: usize) -> Self {
        let ctl = Controller::new(initial, max);
        UploadSlots {
            sem: Semaphore::new(ctl.limit()),
            state: Mutex::new(State { ctl, owed: 0 }),
            origin: Instant::now(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Waits for a free slot; slots are handed out in the order `acquire` was called.
    pub async fn acquire(&self) -> Slot<'_> {
        // With waiters in line no permit is free, so this never jumps the line.
        let permit = match self.sem.try_acquire() {
            Ok(p) => p,
            Err(_) => {
                self.lock().ctl.waited();
                self.sem
                    .acquire()
                    .await
                    .expect("the upload semaphore is never closed")
            }
        };
        self.lock().ctl.started(self.origin.elapsed());
        Slot {
            slots: self,
            permit: Some(permit),
        }
    }

    /// Resize the semaphore from `old` permits to the controller's limit.
    fn follow(&self, s: &mut State, old: usize) {
        let new = s.ctl.limit();
        if new > old {
            let repaid = (new - old).min(s.owed);
            s.owed -= repaid;
            self.sem.add_permits(new - old - repaid);
        } else if new < old {
            s.owed += old - new;
            // Free permits leave at once; the others as their uploads end.
            while s.owed > 0
                && let Ok(p) = self.sem.try_acquire()
            {
                p.forget();
                s.owed -= 1;
            }
        }
        if new != old {
            tracing::debug!(from = old, to = new, "xorb upload limit");
        }
    }
}

impl Slot<'_> {
    /// The upload stored `bytes`.
    pub fn stored(&self, bytes: u64) {
        let now = self.slots.origin.elapsed();
        let mut s = self.slots.lock();
        let before = s.ctl.limit();
        s.ctl.finished(bytes, now);
        self.slots.follow(&mut s, before);
    }
}

impl Drop for Slot<'_> {
    fn drop(&mut self) {
        let Some(p) = self.permit.take() else { return };
        let mut s = self.slots.lock();
        if s.owed > 0 {
            s.owed -= 1;
            p.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Run `rounds` rounds of a link where `n` uploads at once move `rate(n)` bytes per
    /// second, every round with a xorb waiting if `busy`; the limits seen, per round.
    fn run(
        c: &mut Controller,
        rounds: usize,
        busy: bool,
        rate: impl Fn(usize) -> f64,
    ) -> Vec<usize> {
        let mut now = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..rounds {
            let n = c.limit();
            c.started(now);
            if busy {
                c.waited();
            }
            // One round: n uploads of 16 MiB at the link's rate for n.
            let bytes = 16u64 << 20;
            let secs = (n as u64 * bytes) as f64 / rate(n);
            for i in 1..=n {
                c.finished(
                    bytes,
                    now + Duration::from_secs_f64(secs * i as f64 / n as f64),
                );
            }
            now += Duration::from_secs_f64(secs);
            seen.push(c.limit());
        }
        seen
    }

    #[test]
    fn rises_until_the_link_is_full_then_holds() {
        // Each upload moves 10 MB/s (its window over the round trip); the link 120 MB/s.
        let mut c = Controller::new(8, 32);
        let seen = run(&mut c, 12, true, |n| (n as f64 * 10e6).min(120e6));
        // 8 → 12 paid (80 → 120 MB/s); 12 → 18 did not: back to 12, held for
        // HOLD_ROUNDS rounds, tried again.
        assert_eq!(seen, [12, 18, 12, 12, 12, 12, 12, 18, 12, 12, 12, 12]);
    }

    #[test]
    fn a_link_that_needs_many_reaches_the_maximum() {
        let mut c = Controller::new(8, 32);
        let seen = run(&mut c, 6, true, |n| n as f64 * 1e6);
        assert_eq!(seen, [12, 18, 27, 32, 32, 32]);
    }

    #[test]
    fn uploads_that_keep_up_keep_the_limit() {
        // Loopback: the dedup stage never waits for a slot.
        let mut c = Controller::new(8, 32);
        let seen = run(&mut c, 10, false, |n| n as f64 * 1e9);
        assert!(seen.iter().all(|&l| l == 8), "{seen:?}");
    }

    #[test]
    fn a_full_link_at_the_start_keeps_the_initial_limit() {
        let mut c = Controller::new(8, 32);
        let seen = run(&mut c, 10, true, |_| 50e6);
        assert_eq!(seen[..2], [12, 8]);
        assert!(seen.iter().all(|&l| l == 8 || l == 12), "{seen:?}");
        assert!(seen.iter().filter(|&&l| l == 8).count() >= 7, "{seen:?}");
    }

    #[test]
    fn limits_are_clamped() {
        assert_eq!(Controller::new(100, 16).limit(), 16);
        assert_eq!(Controller::new(0, 16).limit(), MIN_UPLOADS);
        assert_eq!(Controller::new(4, 1).limit(), 1);
    }

    /// Waiters `0..n`, queued in that order behind one slot held; the order in which they
    /// got it. On a current-thread runtime, so that yielding lets each spawned waiter
    /// run up to its `acquire` before the next one is spawned.
    async fn order_of_service(n: usize, give_up: Option<usize>) -> Vec<usize> {
        use std::sync::Arc;
        let slots = Arc::new(UploadSlots::new(1, 1));
        let held = slots.acquire().await;
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for i in 0..n {
            let (s, o) = (slots.clone(), order.clone());
            tasks.push(tokio::spawn(async move {
                let _slot = s.acquire().await;
                o.lock().unwrap().push(i);
                tokio::task::yield_now().await;
            }));
            for _ in 0..4 {
                tokio::task::yield_now().await;
            }
        }
        if let Some(i) = give_up {
            let t = tasks.remove(i);
            t.abort();
            let _ = t.await;
        }
        drop(held);
        for t in tasks {
            let _ = t.await;
        }
        order.lock().unwrap().clone()
    }

    #[tokio::test(flavor = "current_thread")]
    async fn slots_go_out_in_the_order_they_were_asked_for() {
        assert_eq!(order_of_service(6, None).await, [0, 1, 2, 3, 4, 5]);
    }

    #[tokio::test(flavor = "current_thread")]
    async fn a_waiter_that_gives_up_does_not_hold_up_the_others() {
        assert_eq!(order_of_service(4, Some(1)).await, [0, 2, 3]);
        assert_eq!(order_of_service(3, Some(0)).await, [1, 2]);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn slots_wait_for_a_free_one() {
        let slots = std::sync::Arc::new(UploadSlots::new(2, 2));
        let a = slots.acquire().await;
        let b = slots.acquire().await;
        let s = slots.clone();
        let third = tokio::spawn(async move {
            let _c = s.acquire().await;
        });
        tokio::task::yield_now().await;
        assert!(!third.is_finished());
        drop(a);
        third.await.unwrap();
        drop(b);
        assert_eq!(slots.sem.available_permits(), 2);
    }

    /// A lower limit takes free slots at once and busy ones as their uploads end; a
    /// higher one first cancels what is still owed.
    #[tokio::test(flavor = "current_thread")]
    async fn the_slots_follow_the_limit() {
        let slots = UploadSlots::new(4, 8);
        let (a, b) = (slots.acquire().await, slots.acquire().await);
        let set = |limit: usize| {
            let mut s = slots.lock();
            let old = s.ctl.limit;
            s.ctl.limit = limit;
            slots.follow(&mut s, old);
        };
        set(1);
        assert_eq!((slots.sem.available_permits(), slots.lock().owed), (0, 1));
        drop(a);
        assert_eq!((slots.sem.available_permits(), slots.lock().owed), (0, 0));
        drop(b);
        assert_eq!(slots.sem.available_permits(), 1);
        let c = slots.acquire().await;
        set(2); // 1 → 2: one more free
        assert_eq!(slots.sem.available_permits(), 1);
        set(1); // 2 → 1: the free one leaves at once
        assert_eq!((slots.sem.available_permits(), slots.lock().owed), (0, 0));
        drop(c);
        assert_eq!(slots.sem.available_permits(), 1);
    }
}
