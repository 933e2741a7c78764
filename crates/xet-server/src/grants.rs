//! Xorb upload grants: `POST /v1/xorb-grants` issues one, the client `PUT`s the xorb
//! body to the grant's signed URL, and `POST /v1/xorb-commits/.../grant/{id}` hands the
//! held data to [`xet_cas::Cas::put_xorb`].
//!
//! Uploaded data is checked against the length and CRC-64/NVME the client declared when
//! asking for the grant, then held until the commit in the [`spool`](crate::spool): in
//! memory while the total held stays under a budget, otherwise in a named spill file under `<spool dir>/xet-grants-<pid>/`
//! (bounded in total bytes, removed when the data is dropped, and the directory of a
//! process that is gone is removed at start-up).
//!
//! Limits: at most `max_open` grants in total and `IssueLimits::per_owner` per identity
//! (bearer token; everyone is one anonymous identity when auth is off). A grant that has
//! received no data dies after `IssueLimits::idle_ttl` (or at its URL's expiry if
//! sooner); uploaded data that is never committed is dropped after `grant_commit_ttl`.
//! Refusals for capacity are `503 grant_capacity` with `Retry-After`.
//!
//! A commit takes the data out only for the duration of the store put: if the put fails
//! (or the request is cancelled) the data goes back, so a retried commit can succeed.
//! The table's lock is never held across an `.await`.

use crate::error::{ApiError, ApiResult, code};
use crate::spool::{Spool, Spooled, Ticket};
use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use xet_cas::ReceivedXorb;
use xet_hash::MerkleHash;

pub use xet_cas::crc::crc64_nvme;

/// The `x-amz-checksum-crc64nvme` header value: base64 of the big-endian CRC.
pub fn amz_checksum_header(crc: u64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

enum State {
    Issued,
    Uploading(u64),
    Uploaded {
        data: Spooled,
        at: Instant,
    },
    /// The data is out with a [`CommitGuard`] (the store put is under way).
    Committing,
}

struct Entry {
    xorb: MerkleHash,
    length: u64,
    crc: u64,
    expires: u64,
    owner: Owner,
    /// While no data has arrived, the grant dies at this time (unix seconds).
    idle_until: u64,
    idle_ttl: u64,
    state: State,
}

impl Entry {
    /// When an issued grant without data dies.
    fn issued_deadline(&self) -> u64 {
        self.expires.min(self.idle_until)
    }
}

/// Who asked for a grant: a digest of the bearer token, or anonymous.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Owner(Option<[u8; 32]>);

impl Owner {
    pub fn anonymous() -> Owner {
        Owner(None)
    }
    /// The identity of `token` (only its digest is kept).
    pub fn token(token: &str) -> Owner {
        Owner(Some(*blake3::hash(token.as_bytes()).as_bytes()))
    }
}

/// Per-request grant limits (from the server config).
#[derive(Debug, Clone, Copy)]
pub struct IssueLimits {
    /// Open grants one identity may hold.
    pub per_owner: usize,
    /// Seconds a grant without data lives.
    pub idle_ttl: u64,
}

/// Grant bookkeeping shared by the grant, upload and commit handlers.
pub struct Grants {
    table: Mutex<HashMap<String, Entry>>,
    spool: Spool,
    max_open: usize,
    commit_ttl: Duration,
    next_upload: AtomicU64,
    sweeper: std::sync::Once,
}

/// How often the background sweep drops expired grants and their data.
const SWEEP_EVERY: Duration = Duration::from_secs(30);

fn gone(id: &str) -> ApiError {
    ApiError::forbidden(
        code::URL_EXPIRED,
        format!("grant {id} is unknown or has expired: request a new grant"),
    )
}

impl Grants {
    /// `spool_dir` is where spill files go (in a `xet-grants-<pid>` directory made on
    /// first use); stale such directories in it are removed now.
    pub fn new(mem_budget: u64, spool_dir: PathBuf, max_open: usize, commit_ttl: Duration) -> Self {
        Grants {
            table: Mutex::new(HashMap::new()),
            spool: Spool::new(mem_budget, spool_dir),
            max_open,
            commit_ttl,
            next_upload: AtomicU64::new(1),
            sweeper: std::sync::Once::new(),
        }
    }

    /// Start (once; call from within the runtime) a task that drops expired grants and
    /// their data (memory, spill files) every 30 s, so nothing waits for the next grant
    /// request to be removed. The task ends when the grants are dropped.
    pub fn start_sweeper(self: &Arc<Self>) {
        self.sweeper.call_once(|| {
            let Ok(rt) = tokio::runtime::Handle::try_current() else {
                return;
            };
            let weak = Arc::downgrade(self);
            rt.spawn(async move {
                loop {
                    tokio::time::sleep(SWEEP_EVERY).await;
                    let Some(g) = weak.upgrade() else { break };
                    g.sweep_now(crate::sign::unix_now());
                }
            });
        });
    }

    /// Where spill files go.
    pub fn spill_dir(&self) -> &Path {
        self.spool.dir()
    }

    /// Bytes held in spill files now.
    pub fn spilled_bytes(&self) -> u64 {
        self.spool.spilled_bytes()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave the map inconsistent (every update
        // is a single insert/remove/assignment), so a poisoned lock is still usable.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sweep(table: &mut HashMap<String, Entry>, now: u64, commit_ttl: Duration) {
        table.retain(|_, e| match &e.state {
            State::Issued => e.issued_deadline() > now,
            State::Uploading(_) | State::Committing => true,
            State::Uploaded { at, .. } => at.elapsed() < commit_ttl,
        });
    }

    /// Drop expired grants and their data now.
    pub fn sweep_now(&self, now: u64) {
        let dropped: Vec<Entry> = {
            let mut t = self.lock();
            let mut out = Vec::new();
            let ids: Vec<String> = t
                .iter()
                .filter(|(_, e)| match &e.state {
                    State::Issued => e.issued_deadline() <= now,
                    State::Uploading(_) | State::Committing => false,
                    State::Uploaded { at, .. } => at.elapsed() >= self.commit_ttl,
                })
                .map(|(k, _)| k.clone())
                .collect();
            for id in ids {
                out.extend(t.remove(&id));
            }
            out
        };
        // Spill files are removed outside the lock.
        drop(dropped);
    }

    /// Open a grant for `ticket` on behalf of `owner`; returns its id.
    pub fn issue(
        &self,
        ticket: Ticket,
        expires: u64,
        now: u64,
        owner: Owner,
        limits: IssueLimits,
    ) -> ApiResult<String> {
        let id = {
            let r: [u8; 16] = rand::random();
            xet_hash::hex::encode(&r)
        };
        let mut t = self.lock();
        Self::sweep(&mut t, now, self.commit_ttl);
        // When the first of `of`'s grants without data dies (for Retry-After).
        let retry_after = |t: &HashMap<String, Entry>, mine: bool| {
            t.values()
                .filter(|e| !mine || e.owner == owner)
                .filter(|e| matches!(e.state, State::Issued))
                .map(|e| e.issued_deadline().saturating_sub(now))
                .min()
                .unwrap_or(limits.idle_ttl)
        };
        let mine = t.values().filter(|e| e.owner == owner).count();
        if mine >= limits.per_owner {
            return Err(ApiError::grant_capacity(
                format!(
                    "{mine} grants are open for this caller (at most {} per token); commit \
                     them, wait for unused ones to expire, or upload the xorb with POST /v1/xorbs",
                    limits.per_owner
                ),
                retry_after(&t, true),
            ));
        }
        if t.len() >= self.max_open {
            return Err(ApiError::grant_capacity(
                format!(
                    "{} grants are open on this server; retry later or upload the xorb with \
                     POST /v1/xorbs",
                    t.len()
                ),
                retry_after(&t, false),
            ));
        }
        t.insert(
            id.clone(),
            Entry {
                xorb: ticket.xorb,
                length: ticket.length,
                crc: ticket.crc,
                expires,
                owner,
                idle_until: now.saturating_add(limits.idle_ttl.max(1)),
                idle_ttl: limits.idle_ttl.max(1),
                state: State::Issued,
            },
        );
        Ok(id)
    }

    /// Start receiving data for grant `id`. A second upload to a grant whose data already
    /// arrived replaces that data; a concurrent one is refused with 409.
    pub fn begin_upload(self: &Arc<Self>, id: &str, now: u64) -> ApiResult<(Ticket, UploadGuard)> {
        let mut t = self.lock();
        Self::sweep(&mut t, now, self.commit_ttl);
        let e = t.get_mut(id).ok_or_else(|| gone(id))?;
        if e.expires <= now {
            return Err(gone(id));
        }
        match e.state {
            State::Issued if e.idle_until <= now => return Err(gone(id)),
            State::Uploading(_) | State::Committing => {
                return Err(ApiError::new(
                    StatusCode::CONFLICT,
                    code::CONFLICT,
                    format!("grant {id} is already receiving an upload or being committed"),
                ));
            }
            _ => {}
        }
        let upload = self.next_upload.fetch_add(1, Ordering::Relaxed);
        e.state = State::Uploading(upload);
        let ticket = Ticket {
            xorb: e.xorb,
            length: e.length,
            crc: e.crc,
        };
        Ok((
            ticket,
            UploadGuard {
                grants: self.clone(),
                id: id.to_string(),
                upload,
                done: false,
            },
        ))
    }

    fn finish_upload(&self, id: &str, upload: u64, data: Spooled) -> ApiResult<()> {
        let mut t = self.lock();
        let e = t.get_mut(id).ok_or_else(|| gone(id))?;
        match e.state {
            State::Uploading(u) if u == upload => {
                e.state = State::Uploaded {
                    data,
                    at: Instant::now(),
                };
                Ok(())
            }
            _ => Err(ApiError::new(
                StatusCode::CONFLICT,
                code::CONFLICT,
                format!("grant {id} changed during the upload"),
            )),
        }
    }

    fn abort_upload(&self, id: &str, upload: u64) {
        let mut t = self.lock();
        if let Some(e) = t
            .get_mut(id)
            .filter(|e| matches!(e.state, State::Uploading(u) if u == upload))
        {
            e.state = State::Issued;
            // A failed upload may be retried: the idle clock starts again.
            e.idle_until = crate::sign::unix_now().saturating_add(e.idle_ttl);
        }
    }

    /// Take the data uploaded for grant `id` of `xorb` for its commit. The grant closes
    /// only when [`CommitGuard::done`] is called; otherwise the data goes back.
    pub fn begin_commit(self: &Arc<Self>, id: &str, xorb: &MerkleHash) -> ApiResult<CommitGuard> {
        let mut t = self.lock();
        let no_data = || {
            ApiError::not_found(format!(
                "no data arrived for grant {id} of xorb {xorb}: request a new grant"
            ))
        };
        let Some(e) = t.get_mut(id) else {
            return Err(no_data());
        };
        if e.xorb != *xorb {
            return Err(no_data());
        }
        match e.state {
            State::Uploaded { .. } => {}
            State::Committing => {
                return Err(ApiError::new(
                    StatusCode::SERVICE_UNAVAILABLE,
                    code::BUSY,
                    format!("grant {id} of xorb {xorb} is being committed: retry shortly"),
                )
                .with_header(header::RETRY_AFTER, HeaderValue::from_static("1")));
            }
            _ => return Err(no_data()),
        }
        let State::Uploaded { data, at } = std::mem::replace(&mut e.state, State::Committing)
        else {
            unreachable!("checked above")
        };
        Ok(CommitGuard {
            grants: self.clone(),
            id: id.to_string(),
            data: Some(data),
            at,
        })
    }

    /// Take the data uploaded for grant `id` of `xorb`; the grant is closed.
    pub fn take_for_commit(self: &Arc<Self>, id: &str, xorb: &MerkleHash) -> ApiResult<Spooled> {
        let mut g = self.begin_commit(id, xorb)?;
        let data = g.data.take().expect("held until done");
        g.done();
        Ok(data)
    }

    fn end_commit(&self, id: &str, data: Option<(Spooled, Instant)>) {
        let mut t = self.lock();
        let Some(e) = t
            .get_mut(id)
            .filter(|e| matches!(e.state, State::Committing))
        else {
            return;
        };
        match data {
            Some((data, at)) => e.state = State::Uploaded { data, at },
            None => {
                t.remove(id);
            }
        }
    }

    /// Number of open grants (for tests and metrics).
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    /// Receive `body` for `ticket` into the [`spool`](crate::spool), checking its length
    /// and CRC as it streams in: in memory within the memory budget, else in a spill file;
    /// past `spill_limit` bytes of those, expired grants' data is dropped before the
    /// upload is refused (`503 grant_capacity`).
    pub async fn receive(
        &self,
        ticket: &Ticket,
        body: Body,
        spill_limit: u64,
    ) -> ApiResult<Spooled> {
        let make_room = || self.sweep_now(crate::sign::unix_now());
        self.spool
            .receive(ticket, body, spill_limit, make_room)
            .await
    }
}

impl Drop for Grants {
    fn drop(&mut self) {
        // Held data (and with it every spill file) goes first, then the spool removes
        // its then-empty directory.
        self.table
            .get_mut()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }
}

/// Puts a grant back to "issued" if its upload does not complete (error or client gone).
pub struct UploadGuard {
    grants: Arc<Grants>,
    id: String,
    upload: u64,
    done: bool,
}

impl UploadGuard {
    pub fn complete(mut self, data: Spooled) -> ApiResult<()> {
        self.done = true;
        self.grants.finish_upload(&self.id, self.upload, data)
    }
}

impl Drop for UploadGuard {
    fn drop(&mut self) {
        if !self.done {
            self.grants.abort_upload(&self.id, self.upload);
        }
    }
}

/// A grant's data, out for its commit. Unless [`CommitGuard::done`] is called (the store
/// has it), the data goes back to the grant when this is dropped, for a retried commit.
pub struct CommitGuard {
    grants: Arc<Grants>,
    id: String,
    data: Option<Spooled>,
    at: Instant,
}

impl CommitGuard {
    /// The held xorb (a copy: the data stays held).
    pub async fn xorb(&self) -> ApiResult<ReceivedXorb> {
        self.data.as_ref().expect("held until done").load().await
    }

    /// The store has the xorb (or refused it for good): close the grant, drop the data.
    pub fn done(mut self) {
        self.data = None;
        self.grants.end_commit(&self.id, None);
    }
}

impl Drop for CommitGuard {
    fn drop(&mut self) {
        if let Some(data) = self.data.take() {
            self.grants.end_commit(&self.id, Some((data, self.at)));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;

    const LIM: IssueLimits = IssueLimits {
        per_owner: usize::MAX,
        idle_ttl: 1000,
    };

    fn ticket(xorb: MerkleHash, length: u64, crc: u64) -> Ticket {
        Ticket { xorb, length, crc }
    }

    #[test]
    fn crc_check_value_and_header() {
        assert_eq!(crc64_nvme(b"123456789"), 0xae8b14860a799888);
        // From cas-http-api.md §1.2: decimal 15303692543314527138 ↔ "1GGjSSQOg6I=".
        assert_eq!(amz_checksum_header(15303692543314527138), "1GGjSSQOg6I=");
    }

    #[tokio::test]
    async fn lifecycle() {
        let g = Arc::new(Grants::new(
            10,
            std::env::temp_dir(),
            2,
            Duration::from_secs(60),
        ));
        let x = xet_hash::chunk_hash(b"x");
        let data = b"hello world, spooled".to_vec();
        let crc = crc64_nvme(&data);
        let id = g
            .issue(
                ticket(x, data.len() as u64, crc),
                100,
                0,
                Owner::anonymous(),
                LIM,
            )
            .unwrap();
        assert_eq!(
            g.take_for_commit(&id, &x).err().unwrap().status,
            StatusCode::NOT_FOUND
        );
        let (t, guard) = g.begin_upload(&id, 1).unwrap();
        // A concurrent upload is refused.
        assert_eq!(
            g.begin_upload(&id, 1).err().unwrap().status,
            StatusCode::CONFLICT
        );
        // Over the 10-byte memory budget: goes to a file.
        let s = g
            .receive(&t, Body::from(data.clone()), u64::MAX)
            .await
            .unwrap();
        assert!(matches!(s, Spooled::File { .. }));
        guard.complete(s).unwrap();
        let other = xet_hash::chunk_hash(b"y");
        assert!(g.take_for_commit(&id, &other).is_err());
        let s = g.take_for_commit(&id, &x).unwrap();
        assert_eq!(s.into_xorb().await.unwrap().into_body(), Bytes::from(data));
        assert_eq!(g.open(), 0);
    }

    #[tokio::test]
    async fn aborted_upload_returns_to_issued_and_expiry() {
        let g = Arc::new(Grants::new(
            1 << 20,
            std::env::temp_dir(),
            1,
            Duration::from_secs(60),
        ));
        let x = xet_hash::chunk_hash(b"x");
        let id = g
            .issue(
                ticket(x, 3, crc64_nvme(b"abc")),
                100,
                0,
                Owner::anonymous(),
                LIM,
            )
            .unwrap();
        assert_eq!(
            g.issue(ticket(x, 3, 0), 100, 0, Owner::anonymous(), LIM)
                .err()
                .unwrap()
                .status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        {
            let (t, _guard) = g.begin_upload(&id, 1).unwrap();
            let e = g
                .receive(&t, Body::from("abcd"), u64::MAX)
                .await
                .err()
                .unwrap();
            assert_eq!(e.code, code::LENGTH_MISMATCH);
        }
        let (t, guard) = g.begin_upload(&id, 1).unwrap();
        assert_eq!(
            g.receive(&t, Body::from("abd"), u64::MAX)
                .await
                .err()
                .unwrap()
                .code,
            code::CHECKSUM_MISMATCH
        );
        assert_eq!(
            g.receive(&t, Body::from("ab"), u64::MAX)
                .await
                .err()
                .unwrap()
                .code,
            code::LENGTH_MISMATCH
        );
        drop(guard);
        // Expired.
        assert_eq!(
            g.begin_upload(&id, 100).err().unwrap().status,
            StatusCode::FORBIDDEN
        );
        // Swept on the next issue.
        g.issue(ticket(x, 3, 0), 200, 150, Owner::anonymous(), LIM)
            .unwrap();
        assert_eq!(g.open(), 1);
    }

    /// A commit whose store put fails (or whose request is dropped) gives the data back;
    /// a second commit while one is under way is told to retry.
    #[tokio::test]
    async fn commit_guard_returns_the_data_unless_done() {
        let g = Arc::new(Grants::new(
            1 << 20,
            std::env::temp_dir(),
            4,
            Duration::from_secs(60),
        ));
        let x = xet_hash::chunk_hash(b"x");
        let data = b"abc".to_vec();
        let id = g
            .issue(
                ticket(x, 3, crc64_nvme(&data)),
                100,
                0,
                Owner::anonymous(),
                LIM,
            )
            .unwrap();
        let (t, guard) = g.begin_upload(&id, 1).unwrap();
        let s = g.receive(&t, Body::from(data.clone()), 0).await.unwrap();
        guard.complete(s).unwrap();
        {
            let c = g.begin_commit(&id, &x).unwrap();
            assert_eq!(c.xorb().await.unwrap().body().as_ref(), &data[..]);
            let busy = g.begin_commit(&id, &x).err().unwrap();
            assert_eq!(busy.status, StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(
                g.begin_upload(&id, 1).err().unwrap().status,
                StatusCode::CONFLICT
            );
            // Dropped without `done`: the put failed.
        }
        let c = g.begin_commit(&id, &x).unwrap();
        c.done();
        assert_eq!(g.open(), 0);
        assert_eq!(
            g.begin_commit(&id, &x).err().unwrap().status,
            StatusCode::NOT_FOUND
        );
    }

    #[test]
    fn grants_are_limited_per_owner_and_unused_ones_die_early() {
        let g = Grants::new(1 << 20, std::env::temp_dir(), 10, Duration::from_secs(60));
        let lim = IssueLimits {
            per_owner: 2,
            idle_ttl: 5,
        };
        let x = xet_hash::chunk_hash(b"x");
        let (a, b) = (Owner::token("a"), Owner::token("b"));
        for _ in 0..2 {
            g.issue(ticket(x, 3, 0), 1000, 0, a, lim).unwrap();
        }
        let e = g.issue(ticket(x, 3, 0), 1000, 1, a, lim).err().unwrap();
        assert_eq!(
            (e.status, e.code),
            (StatusCode::SERVICE_UNAVAILABLE, code::GRANT_CAPACITY)
        );
        assert_eq!(e.headers[0].1, "4", "the first of a's grants dies at 5");
        g.issue(ticket(x, 3, 0), 1000, 1, b, lim).unwrap();
        g.issue(ticket(x, 3, 0), 1000, 1, Owner::anonymous(), lim)
            .unwrap();
        // At 5 the unused grants are gone, long before their URLs expire at 1000.
        g.issue(ticket(x, 3, 0), 1000, 5, a, lim).unwrap();
        assert_eq!(g.open(), 3);
    }

    /// Expired uploaded data in a spill file is removed by a sweep, and the directory
    /// goes with its last file.
    #[tokio::test]
    async fn sweeps_remove_expired_spill_files() {
        let spool = tempfile::tempdir().unwrap();
        let g = Arc::new(Grants::new(
            0,
            spool.path().to_path_buf(),
            4,
            Duration::ZERO,
        ));
        let x = xet_hash::chunk_hash(b"x");
        let id = g
            .issue(
                ticket(x, 3, crc64_nvme(b"abc")),
                100,
                0,
                Owner::anonymous(),
                LIM,
            )
            .unwrap();
        let (t, guard) = g.begin_upload(&id, 1).unwrap();
        let s = g.receive(&t, Body::from("abc"), 3).await.unwrap();
        assert!(matches!(s, Spooled::File { .. }));
        assert_eq!(g.spilled_bytes(), 3);
        guard.complete(s).unwrap();
        assert_eq!(std::fs::read_dir(g.spill_dir()).unwrap().count(), 1);
        g.sweep_now(2);
        assert_eq!(g.open(), 0);
        assert_eq!(g.spilled_bytes(), 0);
        assert!(!g.spill_dir().exists());
    }
}
