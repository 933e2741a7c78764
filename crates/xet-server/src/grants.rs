//! Xorb upload grants: `POST /v1/xorb-grants` issues one, the client `PUT`s the xorb
//! body to the grant's signed URL, and `POST /v1/xorb-commits/.../grant/{id}` hands the
//! held data to [`xet_cas::Cas::put_xorb`].
//!
//! Uploaded data is checked against the length and CRC-64/NVME the client declared when
//! asking for the grant, then held until the commit: in memory while the total held stays
//! under a budget, otherwise in an anonymous temp file (deleted when dropped). Issued
//! grants die at their URL's expiry; uploaded data that is never committed is dropped
//! after `grant_commit_ttl`. The table's lock is never held across an `.await`.

use crate::error::{ApiError, ApiResult, code};
use axum::body::Body;
use axum::http::StatusCode;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::io::AsyncWriteExt;
use xet_cas::{ReceivedXorb, XorbReceiver};
use xet_hash::MerkleHash;

pub use xet_cas::wire::crc64_nvme;

/// The `x-amz-checksum-crc64nvme` header value: base64 of the big-endian CRC.
pub fn amz_checksum_header(crc: u64) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(crc.to_be_bytes())
}

enum State {
    Issued,
    Uploading(u64),
    Uploaded { data: Spooled, at: Instant },
}

struct Entry {
    xorb: MerkleHash,
    length: u64,
    crc: u64,
    expires: u64,
    state: State,
}

/// Grant bookkeeping shared by the grant, upload and commit handlers.
pub struct Grants {
    table: Mutex<HashMap<String, Entry>>,
    mem_used: Arc<AtomicU64>,
    mem_budget: u64,
    spool_dir: PathBuf,
    max_open: usize,
    commit_ttl: Duration,
    next_upload: AtomicU64,
}

/// What an upload must match.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub xorb: MerkleHash,
    pub length: u64,
    pub crc: u64,
}

/// Held grant data.
pub enum Spooled {
    Memory {
        xorb: ReceivedXorb,
        _reservation: MemReservation,
    },
    File {
        file: std::fs::File,
        len: u64,
    },
}

/// Bytes counted against the in-memory budget until dropped.
pub struct MemReservation {
    counter: Arc<AtomicU64>,
    n: u64,
}

impl Drop for MemReservation {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.n, Ordering::AcqRel);
    }
}

impl Spooled {
    pub fn len(&self) -> u64 {
        match self {
            Spooled::Memory { xorb, .. } => xorb.body().len() as u64,
            Spooled::File { len, .. } => *len,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The held xorb: verified as it arrived if it was received into memory.
    pub async fn into_xorb(self) -> ApiResult<ReceivedXorb> {
        match self {
            Spooled::Memory { xorb, .. } => Ok(xorb),
            Spooled::File { mut file, len } => tokio::task::spawn_blocking(move || {
                use std::io::{Read, Seek, SeekFrom};
                file.seek(SeekFrom::Start(0))?;
                let mut buf = Vec::with_capacity(len as usize);
                file.read_to_end(&mut buf)?;
                Ok::<_, std::io::Error>(ReceivedXorb::unverified(Bytes::from(buf)))
            })
            .await
            .map_err(|e| ApiError::internal(format!("spool reader failed: {e}")))?
            .map_err(|e| ApiError::internal(format!("cannot read spooled grant data: {e}"))),
        }
    }
}

fn gone(id: &str) -> ApiError {
    ApiError::forbidden(
        code::URL_EXPIRED,
        format!("grant {id} is unknown or has expired: request a new grant"),
    )
}

impl Grants {
    pub fn new(mem_budget: u64, spool_dir: PathBuf, max_open: usize, commit_ttl: Duration) -> Self {
        Grants {
            table: Mutex::new(HashMap::new()),
            mem_used: Arc::new(AtomicU64::new(0)),
            mem_budget,
            spool_dir,
            max_open,
            commit_ttl,
            next_upload: AtomicU64::new(1),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        // A panic while holding the lock cannot leave the map inconsistent (every update
        // is a single insert/remove/assignment), so a poisoned lock is still usable.
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn sweep(table: &mut HashMap<String, Entry>, now: u64, commit_ttl: Duration) {
        table.retain(|_, e| match &e.state {
            State::Issued => e.expires > now,
            State::Uploading(_) => true,
            State::Uploaded { at, .. } => at.elapsed() < commit_ttl,
        });
    }

    /// Open a grant; returns its id.
    pub fn issue(
        &self,
        xorb: MerkleHash,
        length: u64,
        crc: u64,
        expires: u64,
        now: u64,
    ) -> ApiResult<String> {
        let id = {
            let r: [u8; 16] = rand::random();
            r.iter().map(|b| format!("{b:02x}")).collect::<String>()
        };
        let mut t = self.lock();
        Self::sweep(&mut t, now, self.commit_ttl);
        if t.len() >= self.max_open {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                code::BUSY,
                format!(
                    "{} grants are open; commit or let them expire, then retry",
                    t.len()
                ),
            ));
        }
        t.insert(
            id.clone(),
            Entry {
                xorb,
                length,
                crc,
                expires,
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
        if matches!(e.state, State::Uploading(_)) {
            return Err(ApiError::new(
                StatusCode::CONFLICT,
                code::CONFLICT,
                format!("grant {id} is already receiving an upload"),
            ));
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
        }
    }

    /// Take the data uploaded for grant `id` of `xorb`; the grant is closed.
    pub fn take_for_commit(&self, id: &str, xorb: &MerkleHash) -> ApiResult<Spooled> {
        let mut t = self.lock();
        let no_data = || {
            ApiError::not_found(format!(
                "no data arrived for grant {id} of xorb {xorb}: request a new grant"
            ))
        };
        let Some(e) = t.get(id) else {
            return Err(no_data());
        };
        if e.xorb != *xorb || !matches!(e.state, State::Uploaded { .. }) {
            return Err(no_data());
        }
        match t.remove(id).map(|e| e.state) {
            Some(State::Uploaded { data, .. }) => Ok(data),
            _ => Err(no_data()),
        }
    }

    /// Number of open grants (for tests and metrics).
    pub fn open(&self) -> usize {
        self.lock().len()
    }

    fn reserve(&self, n: u64) -> Option<MemReservation> {
        let mut cur = self.mem_used.load(Ordering::Acquire);
        loop {
            if cur.checked_add(n)? > self.mem_budget {
                return None;
            }
            match self
                .mem_used
                .compare_exchange(cur, cur + n, Ordering::AcqRel, Ordering::Acquire)
            {
                Ok(_) => {
                    return Some(MemReservation {
                        counter: self.mem_used.clone(),
                        n,
                    });
                }
                Err(actual) => cur = actual,
            }
        }
    }

    /// Receive `body` for `ticket`, checking its length and CRC as it streams in.
    pub async fn receive(&self, ticket: &Ticket, body: Body) -> ApiResult<Spooled> {
        enum Sink {
            Mem(xet_cas::buffers::BodyBuf, MemReservation, XorbReceiver),
            File(tokio::fs::File),
        }
        let mut sink = match self.reserve(ticket.length) {
            // Large (xorb) bodies go into recycled, page-aligned buffers (see
            // `xet_cas::buffers`), and are verified as they arrive.
            Some(r) => Sink::Mem(
                xet_cas::buffers::BodyBuf::with_capacity(ticket.length as usize),
                r,
                XorbReceiver::new(ticket.length),
            ),
            None => {
                let f = tempfile::tempfile_in(&self.spool_dir).map_err(|e| {
                    ApiError::internal(format!(
                        "cannot create a spool file in {}: {e}",
                        self.spool_dir.display()
                    ))
                })?;
                Sink::File(tokio::fs::File::from_std(f))
            }
        };
        let mut digest = xet_cas::wire::Crc64Nvme::default();
        let mut received: u64 = 0;
        let mut body = body;
        while let Some(frame) = body.frame().await {
            let frame = frame.map_err(|e| {
                ApiError::bad_request(code::BAD_REQUEST, format!("upload body failed: {e}"))
            })?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            received += data.len() as u64;
            if received > ticket.length {
                return Err(ApiError::bad_request(
                    code::LENGTH_MISMATCH,
                    format!(
                        "upload for xorb {} is longer than the {} bytes granted",
                        ticket.xorb, ticket.length
                    ),
                ));
            }
            digest.update(&data);
            match &mut sink {
                Sink::Mem(v, _, xorb) => {
                    v.extend_from_slice(&data);
                    // Chunks that are now whole are checked here, on the runtime thread,
                    // while this frame is in the cache: no more than a frame's worth of
                    // hashing (hyper's frames are at most a few hundred KiB), and it
                    // saves a pass over the whole xorb from memory at commit time.
                    xorb.advance(v.as_slice());
                }
                Sink::File(f) => f
                    .write_all(&data)
                    .await
                    .map_err(|e| ApiError::internal(format!("cannot spool grant data: {e}")))?,
            }
        }
        if received != ticket.length {
            return Err(ApiError::bad_request(
                code::LENGTH_MISMATCH,
                format!(
                    "upload for xorb {} has {received} bytes but the grant is for {}",
                    ticket.xorb, ticket.length
                ),
            ));
        }
        let crc = digest.finalize();
        if crc != ticket.crc {
            return Err(ApiError::bad_request(
                code::CHECKSUM_MISMATCH,
                format!(
                    "upload for xorb {} has CRC-64/NVME {crc} but the grant is for {}",
                    ticket.xorb, ticket.crc
                ),
            ));
        }
        Ok(match sink {
            Sink::Mem(v, r, xorb) => Spooled::Memory {
                xorb: xorb.finish(v.freeze(), &ticket.xorb),
                _reservation: r,
            },
            Sink::File(mut f) => {
                f.flush()
                    .await
                    .map_err(|e| ApiError::internal(format!("cannot spool grant data: {e}")))?;
                Spooled::File {
                    file: f.into_std().await,
                    len: received,
                }
            }
        })
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

#[cfg(test)]
mod tests {
    use super::*;

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
        let id = g.issue(x, data.len() as u64, crc, 100, 0).unwrap();
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
        let s = g.receive(&t, Body::from(data.clone())).await.unwrap();
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
        let id = g.issue(x, 3, crc64_nvme(b"abc"), 100, 0).unwrap();
        assert_eq!(
            g.issue(x, 3, 0, 100, 0).err().unwrap().status,
            StatusCode::SERVICE_UNAVAILABLE
        );
        {
            let (t, _guard) = g.begin_upload(&id, 1).unwrap();
            let e = g.receive(&t, Body::from("abcd")).await.err().unwrap();
            assert_eq!(e.code, code::LENGTH_MISMATCH);
        }
        let (t, guard) = g.begin_upload(&id, 1).unwrap();
        assert_eq!(
            g.receive(&t, Body::from("abd")).await.err().unwrap().code,
            code::CHECKSUM_MISMATCH
        );
        assert_eq!(
            g.receive(&t, Body::from("ab")).await.err().unwrap().code,
            code::LENGTH_MISMATCH
        );
        drop(guard);
        // Expired.
        assert_eq!(
            g.begin_upload(&id, 100).err().unwrap().status,
            StatusCode::FORBIDDEN
        );
        // Swept on the next issue.
        g.issue(x, 3, 0, 200, 150).unwrap();
        assert_eq!(g.open(), 1);
    }

    /// A xorb body streamed in many frames is verified on the way in when held in memory,
    /// and only as the xorb granted: a body under another grant is held unverified, for
    /// the store to check (and refuse) at commit.
    #[tokio::test]
    async fn memory_uploads_are_verified_as_they_arrive() {
        let mut b = xet_xorb::XorbBuilder::new();
        for i in 0..5u8 {
            b.add_chunk(&vec![i; 30_000 + usize::from(i)]).unwrap();
        }
        let x = b.finish().unwrap();
        let body = x.body().to_vec();
        let g = Arc::new(Grants::new(
            1 << 20,
            std::env::temp_dir(),
            4,
            Duration::from_secs(60),
        ));
        let crc = crc64_nvme(&body);
        for (hash, verified) in [(x.hash(), true), (xet_hash::chunk_hash(b"other"), false)] {
            let id = g.issue(hash, body.len() as u64, crc, 100, 0).unwrap();
            let (t, guard) = g.begin_upload(&id, 1).unwrap();
            let frames: Vec<Result<Bytes, std::io::Error>> = body
                .chunks(4093)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let stream = futures_util::stream::iter(frames);
            let s = g.receive(&t, Body::from_stream(stream)).await.unwrap();
            let Spooled::Memory { xorb, .. } = &s else {
                panic!("a body within the budget is held in memory");
            };
            assert_eq!(xorb.is_verified(), verified, "granted as {hash}");
            assert_eq!(xorb.body().as_ref(), &body[..]);
            guard.complete(s).unwrap();
        }
    }
}
