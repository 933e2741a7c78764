//! The context every step of a download shares: [`Shared`] for the whole call,
//! [`FileCtx`] for one file, and what the steps hand each other ([`Assembled`],
//! [`XorbCandidate`]). A leaf of the pipeline: it imports none of the steps.

use std::fs::File;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, Mutex};

use tokio_util::sync::CancellationToken;
use xet_cas::{ByteRange, Cas, Term, XorbFetch};
use xet_hash::MerkleHash;

use crate::budget::MemoryBudget;
use crate::cache::ChunkCache;
use crate::digest::{HeldBytes, InOrderSha256};
use crate::error::{DownloadError, Result};
use crate::fsio;
use crate::journal::Journal;
use crate::limit::FetchLimit;
use crate::types::{DownloadOptions, ProgressEvent, ProgressFn};

/// State shared by all files of one [`crate::download`] call.
pub(crate) struct Shared {
    pub cas: Arc<dyn Cas>,
    pub opts: DownloadOptions,
    pub cache: Option<Arc<ChunkCache>>,
    pub fetches: Arc<FetchLimit>,
    pub memory: MemoryBudget,
    /// The CAS said it streams ([`xet_cas::Cas::streams_ranges`]), or some range arrived
    /// in more than one piece: a fetch reserves what a stream holds from the start rather
    /// than its whole range, and a large range is fetched in parts.
    pub streams: AtomicBool,
    pub progress: Option<ProgressFn>,
    pub cancel: CancellationToken,
    /// Bytes held to compute expected sha256s in order, across the call's files.
    pub sha256_held: Arc<HeldBytes>,
}

impl Shared {
    pub fn emit(&self, ev: ProgressEvent) {
        if let Some(p) = &self.progress {
            p(&ev);
        }
    }
}

#[derive(Default)]
pub(crate) struct FileStats {
    pub fetched: AtomicU64,
    pub from_cache: AtomicU64,
    pub fetches: AtomicU64,
    /// Some chunks of a range were not checked against their xorb's chunk hashes (the
    /// CAS gives none).
    pub unchecked: AtomicBool,
}

/// One file being downloaded.
pub(crate) struct FileCtx {
    pub shared: Arc<Shared>,
    pub index: usize,
    pub file: MerkleHash,
    /// Wanted file bytes.
    pub out: ByteRange,
    /// Whole-file download: the file hash is checked.
    pub whole: bool,
    /// The verified file is hard-linked into the chunk cache at the end, so fetched
    /// chunks are not also copied into it.
    pub link_cache: bool,
    pub part: Arc<File>,
    pub part_path: PathBuf,
    /// The part is renamed into place (fsynced first, so written back as it goes); a
    /// part that is only copied to a writer and deleted never needs the disk.
    pub renamed: bool,
    pub journal: Option<Journal>,
    pub stats: FileStats,
    /// Cache entries this file used or added (removed if verification fails).
    pub cache_touched: Mutex<Vec<(MerkleHash, u32, u32)>>,
    /// Fetches that may be whole xorbs, checked if the file hash is wrong.
    pub candidates: Mutex<Vec<XorbCandidate>>,
    /// Taken while writing to `part` (see `write_clipped`); holds the direct writer
    /// for a large part that is renamed into place.
    pub write_turn: Mutex<Option<fsio::DirectWriter>>,
    /// Waits for the direct writer's queued writes (before terms are journaled).
    pub written: Option<fsio::WriteWaiter>,
    /// The sha256 the request expects, computed as the bytes are written.
    pub sha256: Option<InOrderSha256>,
    /// Set after an error: queued groups give up instead of fetching.
    pub stop: CancellationToken,
}

impl FileCtx {
    /// Await `f` unless the file is being stopped.
    pub async fn unless_stopped<T>(&self, f: impl std::future::Future<Output = T>) -> Option<T> {
        tokio::select! {
            biased;
            _ = self.stop.cancelled() => None,
            v = f => Some(v),
        }
    }
}

/// Every item's term and kept chunks, in file order.
pub(crate) type Assembled = Vec<(Term, Vec<(MerkleHash, u32)>)>;

/// A fetch that started at chunk 0, byte 0 of its xorb: if it turns out to be the
/// whole xorb, its chunk hashes can be checked against the xorb hash when the file
/// hash does not match (to say which xorb is corrupt).
pub(crate) struct XorbCandidate {
    pub fetch: XorbFetch,
    pub chunks: Vec<(MerkleHash, u32)>,
}

/// Run `f` on a blocking thread.
pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(|e| DownloadError::task("a blocking task", e))
}
