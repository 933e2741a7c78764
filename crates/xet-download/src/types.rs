//! Requests, options, progress events and the report.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tokio_util::sync::CancellationToken;
use xet_hash::MerkleHash;

use crate::chunk_hashes::ChunkHashes;

/// Where a file's bytes go.
pub enum Destination {
    /// A path. Data is written to `<path>.part` (with the resume journal
    /// `<path>.part.jsonl` beside it), verified, fsynced and renamed into place. A
    /// symbolic link is followed (its target is replaced, the link stays); a device
    /// node or FIFO is never replaced: the verified bytes are written into it, as for
    /// a [`Destination::Writer`]. A directory or a dangling link is an output error.
    Path(PathBuf),
    /// A writer (e.g. stdout for `-o -`). The data is assembled and verified in a
    /// temporary file first and copied to the writer only once verified, so a failed
    /// download writes nothing. No resume.
    Writer(Box<dyn Write + Send>),
}

impl Destination {
    /// How the destination is shown in reports and messages (`-` for a writer).
    pub fn display(&self) -> String {
        match self {
            Destination::Path(p) => p.display().to_string(),
            Destination::Writer(_) => "-".to_string(),
        }
    }
}

impl std::fmt::Debug for Destination {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Destination::Path(p) => f.debug_tuple("Path").field(p).finish(),
            Destination::Writer(_) => f.write_str("Writer(..)"),
        }
    }
}

/// A byte range of a file: `start..=end` (`end` inclusive, as in HTTP and `xet get
/// --range`), or `start..` to the end of the file when `end` is `None`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub struct FileRange {
    pub start: u64,
    /// Inclusive end; `None` means "to the end of the file".
    pub end: Option<u64>,
}

impl FileRange {
    pub fn new(start: u64, end_inclusive: Option<u64>) -> Self {
        FileRange {
            start,
            end: end_inclusive,
        }
    }
}

/// One file to download.
#[derive(Debug)]
pub struct DownloadRequest {
    pub file: MerkleHash,
    pub dest: Destination,
    /// Only these bytes (written at offset 0 of the destination). Ranges cannot be
    /// checked against the file hash: see the crate docs.
    pub range: Option<FileRange>,
    /// The file's size if the caller knows it (saves a size query).
    pub size: Option<u64>,
    /// The sha256 the caller expects of the whole file's content (a Hub listing gives
    /// one beside the Xet hash), checked before the file is placed: see
    /// [`DownloadRequest::with_sha256`].
    pub sha256: Option<[u8; 32]>,
}

impl DownloadRequest {
    pub fn to_path(file: MerkleHash, path: impl Into<PathBuf>) -> Self {
        DownloadRequest {
            file,
            dest: Destination::Path(path.into()),
            range: None,
            size: None,
            sha256: None,
        }
    }
    pub fn to_writer(file: MerkleHash, w: Box<dyn Write + Send>) -> Self {
        DownloadRequest {
            file,
            dest: Destination::Writer(w),
            range: None,
            size: None,
            sha256: None,
        }
    }
    pub fn with_range(mut self, range: FileRange) -> Self {
        self.range = Some(range);
        self
    }
    pub fn with_size(mut self, size: u64) -> Self {
        self.size = Some(size);
        self
    }
    /// Also check that the content's sha256 is `sha256`, as the file hash is checked:
    /// a mismatch is a verification error and nothing is placed. It is computed from
    /// the bytes as they are written where they arrive in order, the rest read back
    /// from the part once written, past the page cache where it was written so (see the
    /// crate docs). Whole files only: with a range the download is refused.
    pub fn with_sha256(mut self, sha256: [u8; 32]) -> Self {
        self.sha256 = Some(sha256);
        self
    }
}

/// The on-disk chunk cache.
#[derive(Debug, Clone)]
pub struct CacheConfig {
    /// Cache root (the chunk cache lives in `<dir>/chunks/`).
    pub dir: PathBuf,
    /// Size bound; least recently used entries are evicted beyond it.
    pub max_bytes: u64,
    /// A whole file downloaded to the cache's file system is hard-linked into the
    /// cache instead of copied (no second write, no second copy on disk). Off: the
    /// cache keeps its own copies, independent of the downloaded files.
    pub link_files: bool,
}

impl CacheConfig {
    /// 10 GiB, as the reference client's default chunk cache.
    pub const DEFAULT_MAX_BYTES: u64 = 10 << 30;

    pub fn new(dir: impl Into<PathBuf>) -> Self {
        CacheConfig {
            dir: dir.into(),
            max_bytes: Self::DEFAULT_MAX_BYTES,
            link_files: true,
        }
    }
    pub fn with_max_bytes(mut self, max: u64) -> Self {
        self.max_bytes = max;
        self
    }
    pub fn with_link_files(mut self, link: bool) -> Self {
        self.link_files = link;
        self
    }
}

/// The default cache root: `<user cache dir>/xet` (e.g. `~/.cache/xet`).
pub fn default_cache_dir() -> Option<PathBuf> {
    dirs::cache_dir().map(|d| d.join("xet"))
}

/// Tuning and behaviour. [`DownloadOptions::default`] is sensible for the CLI.
#[derive(Debug, Clone)]
pub struct DownloadOptions {
    /// Reconstructions are queried for ranges of about this many bytes (each answer
    /// is extended to whole terms, so a segment may be up to one xorb longer); the
    /// first query of a download asks for four times as much.
    pub segment_bytes: u64,
    /// Most reconstruction segments of one file being fetched at once.
    pub segments_in_flight: usize,
    /// Most files downloaded at once.
    pub max_concurrent_files: usize,
    /// Most files of at least 8 MiB downloaded at once (within `max_concurrent_files`):
    /// each has a writer thread and staging buffers of up to 32 MiB.
    pub max_concurrent_large_files: usize,
    /// Files whose first reconstruction is asked for ahead of their turn, while earlier
    /// files are being fetched (so many small files cost no round trip each).
    pub reconstructions_ahead: usize,
    /// How many xorb range fetches are in flight at once, across all files.
    pub fetch_concurrency: FetchConcurrency,
    /// Most bytes of fetched (serialized) xorb data held in memory at once, across all
    /// files: a range handed over whole counts whole, a streamed one what it can hold at
    /// once (its queue of pieces and one 8 MiB write batch). Decompressed chunks add at
    /// most one batch per range handed over whole, which is not counted.
    pub memory_budget: u64,
    /// A reconstruction query that has not completed after this long, or a fetch that
    /// delivers nothing for this long or has not completed after this long plus the
    /// size allowance below, is cancelled and retried (a fetch for the bytes it has
    /// not delivered yet).
    pub stall_timeout: Duration,
    /// Size allowance for fetches: the deadline is `stall_timeout + len / min_throughput`
    /// (bytes per second; `len` is what is left to fetch). `0` means no allowance.
    pub min_throughput: u64,
    /// Retries of a retryable failure (network, 5xx, 429, stall), per fetch or query.
    /// Errors of a CAS that retries each request itself ([`xet_cas::Cas::retries_requests`],
    /// the HTTP client) are final and not retried again; deadline overruns always are.
    pub max_retries: u32,
    /// First backoff; doubled per retry, with jitter.
    pub retry_base_delay: Duration,
    /// Reconstruction re-queries after an expired presigned URL, per fetch.
    pub max_url_refreshes: u32,
    /// Continue from `<dest>.part` + journal when present and matching.
    pub resume: bool,
    /// The chunk cache; `None` disables it.
    pub cache: Option<CacheConfig>,
    /// Cancelling this token stops the download with [`crate::DownloadError::Interrupted`]
    /// (the `.part` file and journal stay for a later resume).
    pub cancel: Option<CancellationToken>,
    /// Directory for the temporary file behind a [`Destination::Writer`]; the system
    /// temp dir when `None`.
    pub temp_dir: Option<PathBuf>,
    /// Range downloads: check every chunk against its xorb's chunk hashes, which are
    /// got from the CAS's footers ([`xet_cas::Cas::xorb_footer`], while the range is
    /// fetched) and kept here, so share one across calls. A CAS that gives none leaves
    /// ranges checked as [`Verification::TermLengths`] says. `None`: not asked for.
    pub chunk_hashes: Option<Arc<ChunkHashes>>,
}

impl Default for DownloadOptions {
    fn default() -> Self {
        DownloadOptions {
            segment_bytes: 512 << 20,
            segments_in_flight: 2,
            // This many files and reconstructions ahead: wide enough to keep a
            // high-latency link busy with many small files, each of which costs two round
            // trips (reconstruction, fetch); see docs/BENCHMARKS.md.
            max_concurrent_files: 64,
            max_concurrent_large_files: 4,
            reconstructions_ahead: 64,
            fetch_concurrency: FetchConcurrency::default(),
            memory_budget: 256 << 20,
            stall_timeout: Duration::from_secs(60),
            min_throughput: 512 << 10,
            max_retries: 3,
            retry_base_delay: Duration::from_millis(250),
            max_url_refreshes: 3,
            resume: true,
            cache: None,
            cancel: None,
            temp_dir: None,
            chunk_hashes: None,
        }
    }
}

/// How many xorb range fetches are in flight at once ([`DownloadOptions::fetch_concurrency`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FetchConcurrency {
    /// Exactly this many at most: no adaptation.
    Fixed(usize),
    /// Start at `start` and adapt within `min..=max` to what is measured: more while
    /// the throughput rises with it, less after failures, when more stopped helping,
    /// or when each of long-running fetches would get less than
    /// [`DownloadOptions::min_throughput`] (the method is in the crate docs).
    Adaptive {
        start: usize,
        min: usize,
        max: usize,
    },
}

impl Default for FetchConcurrency {
    /// Adaptive from 32, between 1 and 64.
    fn default() -> Self {
        FetchConcurrency::Adaptive {
            start: 32,
            min: 1,
            max: 64,
        }
    }
}

/// What the CLI shows progress with. `index` is the request's position.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ProgressEvent {
    /// A file started; `total` output bytes, `resumed` of them already present.
    FileStarted {
        index: usize,
        file: MerkleHash,
        dest: String,
        total: u64,
        resumed: u64,
    },
    /// `bytes` more output bytes were written (`from_cache`: served by the chunk cache).
    Written {
        index: usize,
        bytes: u64,
        from_cache: bool,
    },
    /// The file is verified and in place.
    FileFinished { index: usize },
}

pub type ProgressFn = Arc<dyn Fn(&ProgressEvent) + Send + Sync>;

/// How a file's content was checked.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Verification {
    /// Every chunk hashed and the file hash recomputed and equal to the requested one.
    FileHash,
    /// A range: every chunk decoded within bounds and every term's length checked; the
    /// file hash cannot be checked without the whole file.
    TermLengths,
    /// A range: as [`Verification::TermLengths`], and every chunk's hash equal to its
    /// xorb's (from the xorb's footer, whose chunk hashes make up the xorb hash):
    /// [`DownloadOptions::chunk_hashes`].
    ChunkHashes,
    /// The empty file: nothing to check.
    Empty,
}

/// Per file. Field names are those of the upload's report where they mean the same
/// (`hash`, `path`, `size`, `elapsed`), so scripts read both alike.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FileReport {
    /// The file hash (its hash string in JSON).
    pub hash: MerkleHash,
    /// Destination path, or `-` for a writer.
    pub path: PathBuf,
    /// Output bytes (the range's length for a range).
    pub size: u64,
    /// Serialized (compressed) bytes fetched from the CAS for this file.
    pub bytes_fetched: u64,
    /// Decompressed bytes taken from the chunk cache.
    pub bytes_from_cache: u64,
    /// Output bytes already present from an earlier interrupted run.
    pub bytes_resumed: u64,
    /// Xorb range fetches made for this file (a range asked for in parts counts once).
    pub fetches: u64,
    pub verification: Verification,
    /// Seconds.
    pub elapsed: f64,
}

/// Totals of one download (as the upload's `totals`).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Totals {
    pub files: usize,
    /// Output bytes of all files.
    pub bytes: u64,
    pub bytes_fetched: u64,
    pub bytes_from_cache: u64,
    pub bytes_resumed: u64,
    pub fetches: u64,
    /// Wall time of the whole download, in seconds.
    pub elapsed: f64,
}

/// The result of [`crate::download`].
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct DownloadReport {
    /// In request order.
    pub files: Vec<FileReport>,
    pub totals: Totals,
}
