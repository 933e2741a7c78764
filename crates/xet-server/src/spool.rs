//! Where grant data waits for its commit: in memory while the total held stays under a
//! budget, else in named spill files (bounded in total) under this process's spill
//! directory; and the loop that receives an upload into it, checking length and CRC.

use crate::error::{ApiError, ApiResult, code};
use axum::body::Body;
use bytes::Bytes;
use http_body_util::BodyExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::io::AsyncWriteExt;
use xet_cas::{ReceivedXorb, XorbReceiver};
use xet_hash::MerkleHash;

/// What an upload must match.
#[derive(Debug, Clone, Copy)]
pub struct Ticket {
    pub xorb: MerkleHash,
    pub length: u64,
    pub crc: u64,
}

/// The memory and spill budgets of held grant data, and the spill directory.
pub(crate) struct Spool {
    mem_used: Arc<AtomicU64>,
    mem_budget: u64,
    spill_used: Arc<AtomicU64>,
    /// This process's spill directory, made on first use.
    dir: PathBuf,
}

impl Spool {
    /// Spill files go to a `xet-grants-<pid>` directory in `spool_dir`; stale such
    /// directories in it are removed now.
    pub(crate) fn new(mem_budget: u64, spool_dir: PathBuf) -> Spool {
        clean_spill_dirs(&spool_dir);
        Spool {
            mem_used: Arc::new(AtomicU64::new(0)),
            mem_budget,
            spill_used: Arc::new(AtomicU64::new(0)),
            dir: spool_dir.join(spill_dir_name(std::process::id())),
        }
    }

    /// Where spill files go.
    pub(crate) fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes held in spill files now.
    pub(crate) fn spilled_bytes(&self) -> u64 {
        self.spill_used.load(Ordering::Acquire)
    }

    /// Receive `body` for `ticket`, checking its length and CRC as it streams in. Data
    /// over the memory budget goes to a spill file; past `spill_limit` bytes of those in
    /// total, `make_room` is called (to drop expired data) and the space asked for once
    /// more before the upload is refused (`503 grant_capacity`).
    pub(crate) async fn receive(
        &self,
        ticket: &Ticket,
        body: Body,
        spill_limit: u64,
        make_room: impl FnOnce(),
    ) -> ApiResult<Spooled> {
        enum Sink {
            Mem(xet_cas::buffers::BodyBuf, MemReservation, XorbReceiver),
            File(Spooled, tokio::fs::File),
        }
        let mut sink = match reserve(&self.mem_used, self.mem_budget, ticket.length) {
            // Large (xorb) bodies go into recycled, page-aligned buffers (see
            // `xet_cas::buffers`), and are verified as they arrive.
            Some(r) => Sink::Mem(
                xet_cas::buffers::BodyBuf::with_capacity(ticket.length as usize),
                r,
                XorbReceiver::new(ticket.length),
            ),
            None => {
                let spooled = self.spill_file(ticket, spill_limit, make_room)?;
                let Spooled::File { file, .. } = &spooled else {
                    unreachable!("spill_file makes files")
                };
                let f = file
                    .as_file()
                    .try_clone()
                    .map_err(|e| ApiError::internal(format!("cannot open a spill file: {e}")))?;
                Sink::File(spooled, tokio::fs::File::from_std(f))
            }
        };
        let mut digest = xet_cas::crc::Crc64Nvme::default();
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
                Sink::File(_, f) => f
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
            Sink::File(mut spooled, mut f) => {
                f.flush()
                    .await
                    .map_err(|e| ApiError::internal(format!("cannot spool grant data: {e}")))?;
                if let Spooled::File { len, .. } = &mut spooled {
                    *len = received;
                }
                spooled
            }
        })
    }

    fn spill_file(
        &self,
        ticket: &Ticket,
        spill_limit: u64,
        make_room: impl FnOnce(),
    ) -> ApiResult<Spooled> {
        let over = || {
            ApiError::grant_capacity(
                format!(
                    "grant data waiting for commits fills the {spill_limit}-byte spill budget; \
                     retry later or upload xorb {} with POST /v1/xorbs",
                    ticket.xorb
                ),
                5,
            )
        };
        let r = match reserve(&self.spill_used, spill_limit, ticket.length) {
            Some(r) => r,
            None => {
                // Expired data may still be held: drop it and try again.
                make_room();
                reserve(&self.spill_used, spill_limit, ticket.length).ok_or_else(over)?
            }
        };
        let cannot = |e: std::io::Error| {
            ApiError::internal(format!(
                "cannot create a spill file in {}: {e}",
                self.dir.display()
            ))
        };
        let r = SpillReservation {
            bytes: r,
            dir: self.dir.clone(),
        };
        let mut tries = 0;
        let file = loop {
            std::fs::create_dir_all(&self.dir).map_err(cannot)?;
            match tempfile::Builder::new()
                .prefix("grant-")
                .tempfile_in(&self.dir)
            {
                Ok(f) => break f,
                // The last spill file's owner removed the directory in between.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound && tries < 3 => tries += 1,
                Err(e) => return Err(cannot(e)),
            }
        };
        Ok(Spooled::File {
            file,
            len: 0,
            _reservation: r,
        })
    }
}

impl Drop for Spool {
    fn drop(&mut self) {
        // `Grants` drops the data it holds first, so the directory is empty by now unless
        // a commit still has a spill file out (whose reservation then removes it).
        let _ = std::fs::remove_dir(&self.dir);
    }
}

/// Held grant data.
pub enum Spooled {
    Memory {
        xorb: ReceivedXorb,
        _reservation: MemReservation,
    },
    File {
        /// A named file in the spill directory, removed when dropped.
        file: tempfile::NamedTempFile,
        len: u64,
        /// Dropped after `file`: removes the directory once it holds no spilled data.
        _reservation: SpillReservation,
    },
}

/// Bytes counted against the spill budget until dropped; the last one out removes the
/// (then empty) spill directory, so nothing is left behind while the server idles.
pub struct SpillReservation {
    bytes: MemReservation,
    dir: PathBuf,
}

impl Drop for SpillReservation {
    fn drop(&mut self) {
        if self.bytes.counter.fetch_sub(self.bytes.n, Ordering::AcqRel) == self.bytes.n {
            // Fails (harmlessly) if another spill file appeared meanwhile.
            let _ = std::fs::remove_dir(&self.dir);
        }
        // `bytes` must not subtract again.
        self.bytes.n = 0;
    }
}

/// Bytes counted against a budget (memory or spill files) until dropped.
pub struct MemReservation {
    counter: Arc<AtomicU64>,
    n: u64,
}

impl Drop for MemReservation {
    fn drop(&mut self) {
        self.counter.fetch_sub(self.n, Ordering::AcqRel);
    }
}

fn reserve(counter: &Arc<AtomicU64>, budget: u64, n: u64) -> Option<MemReservation> {
    let mut cur = counter.load(Ordering::Acquire);
    loop {
        if cur.checked_add(n)? > budget {
            return None;
        }
        match counter.compare_exchange(cur, cur + n, Ordering::AcqRel, Ordering::Acquire) {
            Ok(_) => {
                return Some(MemReservation {
                    counter: counter.clone(),
                    n,
                });
            }
            Err(actual) => cur = actual,
        }
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

    /// The held xorb, leaving the data held: verified as it arrived if it was received
    /// into memory.
    pub async fn load(&self) -> ApiResult<ReceivedXorb> {
        match self {
            Spooled::Memory { xorb, .. } => Ok(xorb.clone()),
            Spooled::File { file, len, .. } => {
                let mut file = file
                    .as_file()
                    .try_clone()
                    .map_err(|e| ApiError::internal(format!("cannot reopen a spill file: {e}")))?;
                let len = *len;
                tokio::task::spawn_blocking(move || {
                    use std::io::{Read, Seek, SeekFrom};
                    file.seek(SeekFrom::Start(0))?;
                    let mut buf = Vec::with_capacity(len as usize);
                    file.read_to_end(&mut buf)?;
                    Ok::<_, std::io::Error>(ReceivedXorb::unverified(Bytes::from(buf)))
                })
                .await
                .map_err(|e| ApiError::internal(format!("spool reader failed: {e}")))?
                .map_err(|e| ApiError::internal(format!("cannot read spooled grant data: {e}")))
            }
        }
    }

    /// The held xorb; the data is released.
    pub async fn into_xorb(self) -> ApiResult<ReceivedXorb> {
        match self {
            Spooled::Memory { xorb, .. } => Ok(xorb),
            file => file.load().await,
        }
    }
}

/// Name of this process's spill directory under the spool dir.
fn spill_dir_name(pid: u32) -> String {
    format!("xet-grants-{pid}")
}

/// Remove the spill directories in `spool_dir` (grants' `xet-grants-<pid>`, Hub commits'
/// `xet-commits-<pid>`) of this process id and of processes that are gone (checked
/// through `/proc` where there is one), and every `xet-commit-*` directory: older servers
/// kept a Hub commit's inline files there, and a commit killed mid-way left its
/// directory behind.
fn clean_spill_dirs(spool_dir: &Path) {
    let Ok(rd) = std::fs::read_dir(spool_dir) else {
        return;
    };
    let me = std::process::id();
    let proc = Path::new("/proc/self").exists();
    for d in rd.flatten() {
        let name = d.file_name();
        if name.to_str().is_some_and(|n| n.starts_with("xet-commit-")) {
            match std::fs::remove_dir_all(d.path()) {
                Ok(()) => tracing::info!("removed stale commit dir {}", d.path().display()),
                Err(e) => tracing::warn!("cannot remove {}: {e}", d.path().display()),
            }
            continue;
        }
        // Grant spill files, and a Hub commit's long inline files (`xet-commits-<pid>`,
        // which other servers of this process may be using: only a gone process's).
        let name = name.to_str().unwrap_or("");
        let (pid, mine_too) = match (
            name.strip_prefix("xet-grants-"),
            name.strip_prefix("xet-commits-"),
        ) {
            (Some(p), _) => (p.parse::<u32>().ok(), true),
            (_, Some(p)) => (p.parse::<u32>().ok(), false),
            _ => (None, false),
        };
        let Some(pid) = pid else {
            continue;
        };
        let gone = proc && !Path::new(&format!("/proc/{pid}")).exists();
        let stale = (mine_too && pid == me) || gone;
        if stale {
            match std::fs::remove_dir_all(d.path()) {
                Ok(()) => tracing::info!("removed stale grant spill dir {}", d.path().display()),
                Err(e) => tracing::warn!("cannot remove {}: {e}", d.path().display()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a killed commit of an older server left (`xet-commit-*`) and this process's
    /// own spill directory are removed when a server starts; anything else stays.
    #[test]
    fn leftovers_of_killed_commits_are_removed_at_start() {
        let dir = tempfile::tempdir().unwrap();
        let commit = dir.path().join("xet-commit-Ab12cd");
        std::fs::create_dir_all(&commit).unwrap();
        std::fs::write(commit.join("0"), b"inline file").unwrap();
        let mine = dir.path().join(spill_dir_name(std::process::id()));
        std::fs::create_dir_all(&mine).unwrap();
        // A commit spool of a process that is gone; this process's own is in use.
        let my_commits = dir.path().join(format!("xet-commits-{}", u32::MAX - 1));
        std::fs::create_dir_all(&my_commits).unwrap();
        let live = dir
            .path()
            .join(format!("xet-commits-{}", std::process::id()));
        std::fs::create_dir_all(&live).unwrap();
        let other = dir.path().join("not-ours");
        std::fs::create_dir_all(&other).unwrap();
        let _spool = Spool::new(1 << 20, dir.path().to_path_buf());
        assert!(!commit.exists() && !mine.exists() && !my_commits.exists());
        assert!(other.exists() && live.exists());
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
        let spool = Spool::new(1 << 20, std::env::temp_dir());
        let crc = xet_cas::crc::crc64_nvme(&body);
        for (hash, verified) in [(x.hash(), true), (xet_hash::chunk_hash(b"other"), false)] {
            let ticket = Ticket {
                xorb: hash,
                length: body.len() as u64,
                crc,
            };
            let frames: Vec<Result<Bytes, std::io::Error>> = body
                .chunks(4093)
                .map(|c| Ok(Bytes::copy_from_slice(c)))
                .collect();
            let stream = futures_util::stream::iter(frames);
            let s = spool
                .receive(&ticket, Body::from_stream(stream), u64::MAX, || {})
                .await
                .unwrap();
            let Spooled::Memory { xorb, .. } = &s else {
                panic!("a body within the budget is held in memory");
            };
            assert_eq!(xorb.is_verified(), verified, "granted as {hash}");
            assert_eq!(xorb.body().as_ref(), &body[..]);
        }
    }
}
