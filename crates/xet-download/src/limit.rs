//! How many xorb range fetches run at once ([`crate::FetchConcurrency`]): a fixed
//! number, or a limit adapted to what is measured.
//!
//! The adaptive limit climbs a hill. Time is cut into windows of a few round trips
//! (the shortest time to a fetch's first byte stands for the round trip). At the end
//! of each window that was *saturated* (a fetch waited for a slot, so more slots could
//! have been used), the bytes delivered in it give the throughput:
//! - while the throughput keeps rising with the limit (by [`RISE`]), the limit grows
//!   by half;
//! - when a larger limit brought less (by [`FALL`]), it goes back to the last one;
//!   otherwise it stays, and is probed upwards again after [`PROBE_AFTER`] windows;
//! - a retried or failed fetch (a deadline overrun, a broken transfer) takes a quarter
//!   off at once;
//! - when the throughput per fetch stays below the floor for two windows in a row
//!   (a slow link split too many ways, where each transfer would overrun its deadline),
//!   the limit drops to what the link carries at the floor per fetch. Only long
//!   transfers can overrun a deadline (it is at least the stall timeout): a window in
//!   which at least as many fetches started as there are slots (each lasted a window or
//!   less on average) is exempt. Small fetches over a long round trip move little per
//!   fetch however many run, and cutting their number only makes that worse, down to
//!   one fetch at a time for a download of many small files.
//!
//! [`Controller`] is a pure function of its observations (times are passed in), so its
//! decisions are unit-tested with synthetic measurements; [`FetchLimit`] applies them
//! to a semaphore.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::{OwnedSemaphorePermit, Semaphore};

/// A limit is kept when a window brings at least this much more throughput than the
/// last one (relative), and grown again.
pub(crate) const RISE: f64 = 0.05;
/// A larger limit that brings this much less throughput (relative) is taken back.
pub(crate) const FALL: f64 = 0.10;
/// Saturated windows at a steady limit before it is probed upwards again.
pub(crate) const PROBE_AFTER: u32 = 8;
/// Window length: this many round trips, within [`MIN_WINDOW`, `MAX_WINDOW`].
const WINDOW_RTTS: u32 = 4;
const MIN_WINDOW: Duration = Duration::from_millis(250);
const MAX_WINDOW: Duration = Duration::from_secs(2);

/// The bounds and start of an adaptive limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Bounds {
    pub start: usize,
    pub min: usize,
    pub max: usize,
    /// Bytes per second below which a fetch is too slow (the pipeline's
    /// `min_throughput`); `0`: no floor.
    pub floor: u64,
}

/// What the pipeline tells the controller.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) enum Event {
    /// Bytes of fetched data arrived.
    Bytes(u64),
    /// A fetch got its first byte this long after it started.
    FirstByte(Duration),
    /// A fetch waited for a slot: the limit, not the demand, bounds the fetches.
    Waited,
    /// A fetch failed or was retried (deadline overrun, broken transfer, error).
    Failed,
}

/// The adaptive limit's state. `observe` takes the time since any fixed instant.
#[derive(Debug, Clone)]
pub(crate) struct Controller {
    bounds: Bounds,
    limit: usize,
    window_start: Option<Duration>,
    bytes: u64,
    saturated: bool,
    failed: bool,
    /// Fetches that got their first byte in this window.
    started: usize,
    /// Shortest time to a first byte seen: the round trip, roughly.
    rtt: Option<Duration>,
    /// The last saturated window's limit and throughput (bytes per second).
    last: Option<(usize, f64)>,
    steady: u32,
    slow_windows: u32,
    /// Windows completed (the first is warm-up: connections are being opened).
    windows: u32,
}

impl Controller {
    pub fn new(bounds: Bounds) -> Self {
        let min = bounds.min.max(1);
        let max = bounds.max.max(min);
        let bounds = Bounds {
            start: bounds.start.clamp(min, max),
            min,
            max,
            floor: bounds.floor,
        };
        Controller {
            bounds,
            limit: bounds.start,
            window_start: None,
            bytes: 0,
            saturated: false,
            failed: false,
            started: 0,
            rtt: None,
            last: None,
            steady: 0,
            slow_windows: 0,
            windows: 0,
        }
    }

    pub fn limit(&self) -> usize {
        self.limit
    }

    fn window(&self) -> Duration {
        self.rtt
            .map_or(MIN_WINDOW, |r| r * WINDOW_RTTS)
            .clamp(MIN_WINDOW, MAX_WINDOW)
    }

    /// Take one observation made at `now`; returns the limit from now on.
    pub fn observe(&mut self, now: Duration, event: Event) -> usize {
        let start = *self.window_start.get_or_insert(now);
        match event {
            Event::Bytes(n) => self.bytes += n,
            Event::FirstByte(d) => {
                self.rtt = Some(self.rtt.map_or(d, |r| r.min(d)));
                self.started += 1;
            }
            Event::Waited => self.saturated = true,
            Event::Failed => {
                // At once: a server or link in trouble is not asked for more meanwhile.
                let cut = (self.limit / 4).max(1);
                self.limit = self.limit.saturating_sub(cut).max(self.bounds.min);
                self.failed = true;
                self.last = None;
            }
        }
        let elapsed = now.saturating_sub(start);
        if elapsed >= self.window() {
            self.end_window(elapsed);
            self.window_start = Some(now);
        }
        self.limit
    }

    fn end_window(&mut self, elapsed: Duration) {
        let throughput = self.bytes as f64 / elapsed.as_secs_f64().max(1e-6);
        let (saturated, failed, started) = (self.saturated, self.failed, self.started);
        self.bytes = 0;
        self.started = 0;
        self.saturated = false;
        self.failed = false;
        self.windows += 1;
        if self.windows == 1 || failed {
            // Warm-up, or the decrease already made: nothing to compare with.
            return;
        }
        if self.too_slow_per_fetch(throughput, started) {
            return;
        }
        if saturated {
            self.climb(throughput);
        } else {
            // Fewer fetches wanted than allowed: the throughput says nothing about the
            // limit; compare afresh once it binds again.
            self.last = None;
        }
    }

    /// Whether the throughput per fetch is below the floor (then the limit does not
    /// grow; the second such window in a row brings it down to what fits). A window in
    /// which `started` fetches, at least one per slot, got their first byte held short
    /// fetches only, which no deadline threatens.
    fn too_slow_per_fetch(&mut self, throughput: f64, started: usize) -> bool {
        let floor = self.bounds.floor as f64;
        if floor <= 0.0
            || throughput <= 0.0
            || throughput / self.limit as f64 >= floor
            || started >= self.limit
        {
            self.slow_windows = 0;
            return false;
        }
        self.slow_windows += 1;
        if self.slow_windows >= 2 {
            self.slow_windows = 0;
            let fits = (throughput / floor) as usize;
            self.limit = fits.clamp(self.bounds.min, self.limit);
            self.last = None;
        }
        true
    }

    /// A saturated window at the current limit brought `throughput`.
    fn climb(&mut self, throughput: f64) {
        let during = self.limit;
        let grown = (during + (during / 2).max(1)).min(self.bounds.max);
        match self.last {
            // The limit grew before this window.
            Some((before, was)) if during > before => {
                if throughput >= was * (1.0 + RISE) {
                    self.limit = grown;
                } else if throughput < was * (1.0 - FALL) {
                    // More parallelism hurt: back to where it was.
                    self.limit = before;
                    self.last = None;
                    self.steady = 0;
                    return;
                } else {
                    // More parallelism stopped helping: stay.
                    self.steady = 0;
                }
            }
            Some((before, _)) if during == before => {
                self.steady += 1;
                if self.steady >= PROBE_AFTER {
                    self.steady = 0;
                    self.limit = grown;
                }
            }
            // Nothing to compare with yet: try more.
            _ => self.limit = grown,
        }
        self.last = Some((during, throughput));
    }
}

/// Fetch slots: a semaphore whose size follows the [`Controller`] (or stays fixed).
pub(crate) struct FetchLimit {
    sem: Arc<Semaphore>,
    state: Mutex<LimitState>,
    epoch: Instant,
}

struct LimitState {
    /// `None`: a fixed limit.
    controller: Option<Controller>,
    /// The current limit (permits in use plus free, less those `owed`).
    limit: usize,
    /// Permits to take out of circulation as they come back (after a decrease).
    owed: usize,
}

/// A fetch slot, held while the fetch runs.
pub(crate) struct Slot {
    permit: Option<OwnedSemaphorePermit>,
    limit: Arc<FetchLimit>,
    started: Instant,
    first_byte_seen: bool,
}

impl FetchLimit {
    pub fn fixed(n: usize) -> Arc<Self> {
        let n = n.max(1);
        Arc::new(FetchLimit {
            sem: Arc::new(Semaphore::new(n)),
            state: Mutex::new(LimitState {
                controller: None,
                limit: n,
                owed: 0,
            }),
            epoch: Instant::now(),
        })
    }

    pub fn adaptive(bounds: Bounds) -> Arc<Self> {
        let c = Controller::new(bounds);
        Arc::new(FetchLimit {
            sem: Arc::new(Semaphore::new(c.limit())),
            state: Mutex::new(LimitState {
                limit: c.limit(),
                controller: Some(c),
                owed: 0,
            }),
            epoch: Instant::now(),
        })
    }

    /// The current limit.
    #[cfg(test)]
    pub fn current(&self) -> usize {
        crate::sync::lock(&self.state).limit
    }

    /// Wait for a slot.
    pub async fn acquire(self: &Arc<Self>) -> Slot {
        let permit = match self.sem.clone().try_acquire_owned() {
            Ok(p) => p,
            Err(_) => {
                self.observe(Event::Waited);
                self.sem
                    .clone()
                    .acquire_owned()
                    .await
                    .expect("the fetch semaphore is never closed")
            }
        };
        Slot {
            permit: Some(permit),
            limit: self.clone(),
            started: Instant::now(),
            first_byte_seen: false,
        }
    }

    /// A slot if one is free now. None free counts as demand for more, as a fetch
    /// that waits for one does.
    pub fn try_acquire(self: &Arc<Self>) -> Option<Slot> {
        match self.sem.clone().try_acquire_owned() {
            Ok(permit) => Some(Slot {
                permit: Some(permit),
                limit: self.clone(),
                started: Instant::now(),
                first_byte_seen: false,
            }),
            Err(_) => {
                self.observe(Event::Waited);
                None
            }
        }
    }

    /// A fetch failed or is being retried.
    pub fn failed(&self) {
        self.observe(Event::Failed);
    }

    fn observe(&self, event: Event) {
        let now = self.epoch.elapsed();
        let mut st = crate::sync::lock(&self.state);
        let Some(c) = st.controller.as_mut() else {
            return;
        };
        let new = c.observe(now, event);
        let old = st.limit;
        if new > old {
            let mut add = new - old;
            let repaid = add.min(st.owed);
            st.owed -= repaid;
            add -= repaid;
            self.sem.add_permits(add);
        } else if new < old {
            st.owed += old - new;
            // Free permits leave at once; the others as their fetches end.
            while st.owed > 0
                && let Ok(p) = self.sem.try_acquire()
            {
                p.forget();
                st.owed -= 1;
            }
        }
        if new != old {
            tracing::debug!(from = old, to = new, "fetch concurrency");
        }
        st.limit = new;
    }
}

impl Slot {
    /// Bytes of the fetch arrived.
    pub fn delivered(&mut self, n: u64) {
        if !std::mem::replace(&mut self.first_byte_seen, true) {
            self.limit.observe(Event::FirstByte(self.started.elapsed()));
        }
        self.limit.observe(Event::Bytes(n));
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let Some(p) = self.permit.take() else {
            return;
        };
        let mut st = crate::sync::lock(&self.limit.state);
        if st.owed > 0 {
            st.owed -= 1;
            p.forget();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn bounds() -> Bounds {
        Bounds {
            start: 16,
            min: 1,
            max: 64,
            floor: 0,
        }
    }

    /// Feed `windows` windows of `window` each, saturated or not, delivering what
    /// `rate(limit)` (bytes per second) says; returns the limits after each window.
    fn run(
        c: &mut Controller,
        t: &mut Duration,
        windows: usize,
        saturated: bool,
        rate: impl Fn(usize) -> f64,
    ) -> Vec<usize> {
        let mut out = Vec::new();
        for _ in 0..windows {
            let limit = c.limit();
            // Ten observations per window, the last one closing it.
            let step = Duration::from_millis(30);
            for i in 0..10 {
                if saturated && i == 0 {
                    c.observe(*t, Event::Waited);
                }
                *t += step;
                let n = (rate(limit) * step.as_secs_f64()) as u64;
                c.observe(*t, Event::Bytes(n));
            }
            out.push(c.limit());
        }
        out
    }

    fn started(b: Bounds) -> (Controller, Duration) {
        let mut c = Controller::new(b);
        // A round trip of 50 ms: windows of 250 ms (the minimum).
        c.observe(Duration::ZERO, Event::FirstByte(50 * MS));
        (c, Duration::ZERO)
    }

    #[test]
    fn grows_while_throughput_rises_and_stops_where_it_flattens() {
        // A link that each fetch fills by 1 MB/s, up to 40 MB/s.
        let (mut c, mut t) = started(bounds());
        let limits = run(&mut c, &mut t, 12, true, |l| (l as f64).min(40.0) * 1e6);
        // 16 → 24 → 36 → 54: 54 brings nothing over 36's 36 MB/s... 40 vs 36 is +11%,
        // so it is kept; the next step (64) brings nothing and stays.
        assert_eq!(limits[0], 16, "the first window is warm-up");
        assert!(
            limits.windows(2).take(4).all(|w| w[1] >= w[0]),
            "{limits:?}"
        );
        let last = *limits.last().unwrap();
        assert!((40..=64).contains(&last), "{limits:?}");
        assert!(limits.iter().all(|&l| l <= 64));
    }

    #[test]
    fn a_flat_link_does_not_make_the_limit_grow_forever() {
        // Already full at 4 fetches: more never helps.
        let (mut c, mut t) = started(bounds());
        let limits = run(&mut c, &mut t, 6, true, |_| 100e6);
        // One probe (16 → 24) brings nothing; it stays at 24 until the next probe.
        assert_eq!(&limits[..4], &[16, 24, 24, 24], "{limits:?}");
        let limits = run(&mut c, &mut t, PROBE_AFTER as usize + 2, true, |_| 100e6);
        assert!(limits.iter().all(|&l| l <= 36), "{limits:?}");
    }

    #[test]
    fn more_parallelism_that_hurts_is_taken_back() {
        // Best at 16; above it the server thrashes.
        let (mut c, mut t) = started(bounds());
        let limits = run(
            &mut c,
            &mut t,
            4,
            true,
            |l| {
                if l <= 16 { 50e6 } else { 30e6 }
            },
        );
        assert_eq!(&limits[..3], &[16, 24, 16], "{limits:?}");
    }

    #[test]
    fn unsaturated_windows_change_nothing() {
        let (mut c, mut t) = started(bounds());
        let limits = run(&mut c, &mut t, 10, false, |l| l as f64 * 1e6);
        assert!(limits.iter().all(|&l| l == 16), "{limits:?}");
    }

    #[test]
    fn failures_take_a_quarter_off_down_to_the_minimum() {
        let mut c = Controller::new(bounds());
        assert_eq!(c.observe(MS, Event::Failed), 12);
        assert_eq!(c.observe(2 * MS, Event::Failed), 9);
        for i in 0..20 {
            c.observe((3 + i) * MS, Event::Failed);
        }
        assert_eq!(c.limit(), 1);
    }

    #[test]
    fn a_slow_link_is_not_split_below_the_floor_per_fetch() {
        // 1.25 MB/s in all (10 Mbit/s), a floor of 512 KiB/s per fetch: two fetches at most.
        let b = Bounds {
            floor: 512 << 10,
            ..bounds()
        };
        let (mut c, mut t) = started(b);
        let limits = run(&mut c, &mut t, 4, true, |_| 1.25e6);
        assert_eq!(limits[0], 16, "warm-up");
        assert_eq!(
            limits[1], 16,
            "a slow window does not grow; one is not enough to cut"
        );
        assert_eq!(limits[2], 2, "{limits:?}");
        // And it stays there: two fetches carry 625 KB/s each.
        let limits = run(&mut c, &mut t, 10, true, |_| 1.25e6);
        assert!(limits.iter().all(|&l| l <= 3), "{limits:?}");
    }

    /// Many small fetches over a long round trip: each moves little, whatever the
    /// limit, but they come and go within a window. The floor does not apply.
    #[test]
    fn short_fetches_are_not_cut_to_the_floor() {
        let b = Bounds {
            floor: 512 << 10,
            ..bounds()
        };
        let (mut c, mut t) = started(b);
        // Windows of 250 ms in which each slot serves 4 fetches of 30 KiB: 480 KiB/s per
        // slot, under the floor (the old rule cut 16 down to 2 this way).
        for _ in 0..8 {
            let limit = c.limit();
            c.observe(t, Event::Waited);
            for _ in 0..4 * limit {
                t += Duration::from_micros(250_000 / (4 * limit as u64));
                c.observe(t, Event::FirstByte(80 * MS));
                c.observe(t, Event::Bytes(30 << 10));
            }
        }
        assert!(c.limit() >= 16, "{}", c.limit());
        // The same bytes in long transfers (no fetch starting) are cut.
        let (mut c, mut t) = started(b);
        let limits = run(&mut c, &mut t, 4, true, |l| l as f64 * (480 << 10) as f64);
        assert!(limits[3] < 16, "{limits:?}");
    }

    #[test]
    fn windows_follow_the_round_trip() {
        let mut c = Controller::new(bounds());
        c.observe(Duration::ZERO, Event::FirstByte(200 * MS));
        assert_eq!(c.window(), 800 * MS);
        c.observe(MS, Event::FirstByte(10 * MS));
        assert_eq!(c.window(), MIN_WINDOW);
        let mut c = Controller::new(bounds());
        c.observe(Duration::ZERO, Event::FirstByte(Duration::from_secs(3)));
        assert_eq!(c.window(), MAX_WINDOW);
    }

    #[test]
    fn bounds_are_sane() {
        let c = Controller::new(Bounds {
            start: 500,
            min: 0,
            max: 8,
            floor: 0,
        });
        assert_eq!(c.limit(), 8);
    }

    #[tokio::test]
    async fn slots_follow_the_limit() {
        let l = FetchLimit::fixed(2);
        let a = l.acquire().await;
        let _b = l.acquire().await;
        assert!(l.sem.clone().try_acquire_owned().is_err());
        drop(a);
        let _c = l.acquire().await;
        assert_eq!(l.current(), 2);

        // A decrease takes free permits at once and the others as they come back.
        let l = FetchLimit::adaptive(Bounds {
            start: 4,
            min: 1,
            max: 8,
            floor: 0,
        });
        let held: Vec<Slot> = vec![l.acquire().await, l.acquire().await];
        l.failed(); // 4 → 3
        assert_eq!(l.current(), 3);
        assert_eq!(l.sem.available_permits(), 1);
        l.failed(); // 3 → 2: free permits go first
        l.failed(); // 2 → 1: one held slot is owed
        assert_eq!(l.sem.available_permits(), 0);
        drop(held);
        assert_eq!(l.sem.available_permits(), l.current());
    }
}
