//! The open connections: what each is doing (idle, in a head, serving requests), and
//! which one to close when a new connection needs room.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::Waker;
use std::time::Duration;
use tokio::time::Instant;

/// A connection stuck in a half-sent head this long may be closed to make room.
const STALE_HEAD: Duration = Duration::from_secs(1);

pub(super) struct ConnState {
    /// Requests handed to the router whose answers are not sent yet.
    pub(super) in_flight: usize,
    /// When the first byte of a request head arrived (between requests only).
    pub(super) head_since: Option<Instant>,
    /// When the connection opened or its last answer was sent.
    pub(super) idle_since: Instant,
    /// Answers sent.
    pub(super) served: u64,
    /// Asked to close to make room for a new connection.
    pub(super) shed: bool,
    /// The connection's task (woken to close it, or to start the idle timer when an
    /// answer is done: hyper does not look at the socket again by itself then).
    pub(super) waker: Option<Waker>,
}

pub(super) struct Conn {
    state: Mutex<ConnState>,
}

impl Conn {
    fn new() -> Conn {
        Conn {
            state: Mutex::new(ConnState {
                in_flight: 0,
                head_since: None,
                idle_since: Instant::now(),
                served: 0,
                shed: false,
                waker: None,
            }),
        }
    }

    pub(super) fn state(&self) -> MutexGuard<'_, ConnState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// What to do with a connection asked to make room, by how long it has waited.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Victim {
    Idle,
    StaleHead,
}

struct RegistryInner {
    conns: HashMap<u64, Arc<Conn>>,
    next_id: u64,
    /// Connections in `conns` asked to close, not gone yet.
    shedding: usize,
}

/// The open connections.
pub(super) struct Registry {
    inner: Mutex<RegistryInner>,
    cap: usize,
}

pub(super) enum Admit {
    /// Serve it.
    Yes(u64, Arc<Conn>),
    /// At the cap and every connection busy.
    Full,
}

impl Registry {
    pub(super) fn new(cap: usize) -> Registry {
        Registry {
            inner: Mutex::new(RegistryInner {
                conns: HashMap::new(),
                next_id: 0,
                shedding: 0,
            }),
            cap,
        }
    }

    fn lock(&self) -> MutexGuard<'_, RegistryInner> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Take a new connection, closing an idle one if at the cap. The second value says
    /// whether one was closed.
    pub(super) fn admit(&self) -> (Admit, bool) {
        let mut g = self.lock();
        let mut shed = false;
        if g.conns.len() - g.shedding >= self.cap {
            if !shed_one(&mut g, true) {
                return (Admit::Full, false);
            }
            shed = true;
        }
        let id = g.next_id;
        g.next_id += 1;
        let conn = Arc::new(Conn::new());
        g.conns.insert(id, conn.clone());
        (Admit::Yes(id, conn), shed)
    }

    /// Close the longest-idle connection (e.g. to get a file descriptor back).
    pub(super) fn shed_idle(&self) -> bool {
        shed_one(&mut self.lock(), false)
    }

    pub(super) fn remove(&self, id: u64) {
        let mut g = self.lock();
        if let Some(c) = g.conns.remove(&id)
            && c.state().shed
        {
            g.shedding -= 1;
        }
    }

    pub(super) fn len(&self) -> usize {
        self.lock().conns.len()
    }
}

/// Ask the best candidate in `g` to close: the longest idle, else (if `stale_heads`) the
/// one longest stuck in a half-sent head for over [`STALE_HEAD`].
fn shed_one(g: &mut RegistryInner, stale_heads: bool) -> bool {
    let now = Instant::now();
    let mut best: Option<(Victim, Instant, &Arc<Conn>)> = None;
    for c in g.conns.values() {
        let s = c.state();
        if s.shed || s.in_flight > 0 {
            continue;
        }
        let candidate = match s.head_since {
            None => (Victim::Idle, s.idle_since),
            Some(t) if stale_heads && now.duration_since(t) >= STALE_HEAD => (Victim::StaleHead, t),
            Some(_) => continue,
        };
        if best
            .as_ref()
            .is_none_or(|(v, t, _)| (candidate.0, candidate.1) < (*v, *t))
        {
            best = Some((candidate.0, candidate.1, c));
        }
    }
    let Some((_, _, victim)) = best else {
        return false;
    };
    let waker = {
        let mut s = victim.state();
        s.shed = true;
        s.waker.clone()
    };
    if let Some(w) = waker {
        w.wake();
    }
    g.shedding += 1;
    true
}

/// Counts a request from the moment the router gets it until its answer's body is sent
/// (or dropped).
pub(super) struct InFlight(Arc<Conn>);

impl InFlight {
    pub(super) fn start(conn: Arc<Conn>) -> InFlight {
        {
            let mut s = conn.state();
            s.in_flight += 1;
            s.head_since = None;
        }
        InFlight(conn)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let waker = {
            let mut s = self.0.state();
            s.in_flight -= 1;
            s.served += 1;
            s.idle_since = Instant::now();
            if s.in_flight > 0 {
                return;
            }
            s.waker.clone()
        };
        // Have hyper read again, so the keep-alive timer starts (and a shed connection
        // closes).
        if let Some(w) = waker {
            w.wake();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_connections_are_shed_longest_idle_first_and_busy_ones_never() {
        let r = Registry::new(2);
        let admit = |r: &Registry| match r.admit() {
            (Admit::Yes(id, c), shed) => (id, c, shed),
            (Admit::Full, _) => panic!("full"),
        };
        let (_, a, false) = admit(&r) else { panic!() };
        let (b_id, b, false) = admit(&r) else {
            panic!()
        };
        // `a` is busy, `b` idle: a third connection sheds `b`.
        let a_busy = InFlight::start(a.clone());
        let (_, c, true) = admit(&r) else { panic!() };
        assert!(b.state().shed && !a.state().shed);
        // `c` busy too: nothing can make room.
        let _c_busy = InFlight::start(c.clone());
        assert!(matches!(r.admit(), (Admit::Full, false)));
        // `a`'s answer sent: it idles and makes room.
        drop(a_busy);
        assert!(matches!(r.admit(), (Admit::Yes(..), true)));
        assert!(a.state().shed && !c.state().shed);
        // Shed connections leaving are no longer counted as leaving.
        r.remove(b_id);
        assert_eq!(r.lock().shedding, 1);
    }

    #[test]
    fn a_half_sent_head_is_shed_only_once_stale() {
        let r = Registry::new(1);
        let (Admit::Yes(_, a), false) = r.admit() else {
            panic!()
        };
        a.state().head_since = Some(Instant::now());
        assert!(matches!(r.admit(), (Admit::Full, false)));
        a.state().head_since = Some(Instant::now() - STALE_HEAD);
        assert!(matches!(r.admit(), (Admit::Yes(..), true)));
        assert!(a.state().shed);
    }
}
