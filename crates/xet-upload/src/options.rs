//! Tuning knobs of the pipeline. [`UploadOptions::default`] is what the CLI uses.

use std::path::PathBuf;

use tokio_util::sync::CancellationToken;

/// Default file read block: 8 MiB.
pub const DEFAULT_BLOCK_SIZE: usize = 8 << 20;
/// Default cap on the on-disk shard cache: 256 MiB.
pub const DEFAULT_SHARD_CACHE_BYTES: u64 = 256 << 20;
/// Default minimum dedup run (draft §10.4): 8 chunks...
pub const DEFAULT_MIN_DEDUP_RUN_CHUNKS: usize = 8;
/// ... or 1 MiB.
pub const DEFAULT_MIN_DEDUP_RUN_BYTES: u64 = 1 << 20;
/// Byte limit of an upload's first xorb (the next ones double up to the xorb limit).
pub const DEFAULT_XORB_FIRST_BYTES: u64 = 4 << 20;
/// Uncompressed bytes packed into a xorb: 16 MiB, a quarter of what the protocol allows
/// (and of what hf_xet packs). One xorb is one `POST`, and one TCP connection carries at
/// most its window per round trip: on a long link the last 64 MiB xorbs of an upload
/// were each left on a connection of their own, at that rate, and the first ones waited
/// for 64 MiB to be decided before anything went out. 1 GiB at 200 ms / 1 Gbit took
/// 10.6-10.9 s with 16 MiB xorbs against 11.3-12.3 s with 64 MiB (8 and 32 MiB: as 16);
/// loopback uploads went from 825-835 to 881-890 MB/s (embedded) and 688-720 to 719-744
/// MB/s (to `xet serve`), with half the peak memory (`docs/BENCHMARKS.md`, S20).
pub const DEFAULT_XORB_MAX_BYTES: u64 = 16 << 20;
/// Xorb uploads at once when an upload starts ([`UploadOptions::xorb_uploads_initial`]).
pub const DEFAULT_XORB_UPLOADS_INITIAL: usize = 12;
/// Most xorb uploads at once ([`UploadOptions::max_xorb_uploads`]).
pub const DEFAULT_MAX_XORB_UPLOADS: usize = 16;
/// Uploaded shards are split to stay below this (the protocol's 64 MiB, with margin).
pub const DEFAULT_SHARD_MAX_BYTES: u64 = 63 << 20;

/// How to run an upload.
#[derive(Debug, Clone)]
pub struct UploadOptions {
    /// Compute everything (chunks, dedup, xorbs, shards), send nothing, write nothing to
    /// the cache directory. Global dedup queries and `xorb_size` checks are still made.
    pub dry_run: bool,
    /// Directory for the shard cache and the resume journal. It must be specific to one
    /// CAS endpoint (what it records is only true of that CAS): see [`cache_dir_for`].
    /// `None` disables local-cache dedup and resume.
    pub cache_dir: Option<PathBuf>,
    /// Cap on the shard cache's total size; the oldest shards are evicted beyond it.
    pub shard_cache_max_bytes: u64,
    /// Ask the CAS for global dedup shards (`Cas::dedup_shard`) for eligible chunks.
    pub global_dedup: bool,
    /// File read block size.
    pub block_size: usize,
    /// Readers running ahead of the file being deduplicated, each reading one file or a
    /// group of small ones.
    pub max_files_in_flight: usize,
    /// Memory budget for read-ahead across files, in bytes (the file being
    /// deduplicated always proceeds; see the crate docs).
    pub read_ahead_bytes: u64,
    /// Sealed xorbs being compressed, or built and waiting for an upload slot (the
    /// dedup stage waits for one of these before it hands over the next xorb).
    pub max_xorbs_in_flight: usize,
    /// Xorb uploads (`put_xorb`) at once when the upload starts; the limit then follows
    /// the throughput measured (see the crate docs), between 2 and `max_xorb_uploads`.
    pub xorb_uploads_initial: usize,
    /// Most xorb uploads at once. Each holds a body of up to 64 MiB.
    pub max_xorb_uploads: usize,
    /// Concurrent global dedup queries. They are small requests: over a long round trip
    /// the number in flight is what bounds how many files per second are decided.
    pub max_dedup_queries_in_flight: usize,
    /// Fragmentation prevention: a dedup run shorter than this many chunks...
    pub min_dedup_run_chunks: usize,
    /// ... and shorter than this many bytes is not used, unless it reaches the end of
    /// the file (see the crate docs for the exact rule).
    pub min_dedup_run_bytes: u64,
    /// Xorb limits: at most the protocol's (8192 chunks, 64 MiB uncompressed). The chunk
    /// limit defaults to the protocol's, the byte limit to [`DEFAULT_XORB_MAX_BYTES`];
    /// smaller values are valid xorbs too, and make tests with many xorbs cheap.
    pub xorb_max_chunks: usize,
    pub xorb_max_bytes: u64,
    /// Byte limit of the upload's first xorb where a file starts; each next one may hold
    /// twice as much, up to `xorb_max_bytes`, so bytes go out while the rest is still
    /// being deduplicated (see the crate docs).
    pub xorb_first_bytes: u64,
    /// Uploaded shards are split to stay at or below this size.
    pub shard_max_bytes: u64,
    /// Read every file, even those the cache dir records as unchanged since an earlier
    /// upload to this CAS (by size, times, inode and device; see the crate docs). Such a
    /// file is chunked and hashed again; if its file hash is the recorded one it is
    /// reported as verified (`Totals::files_verified`) with the recorded sha256, else it
    /// is uploaded like any other.
    pub rehash: bool,
    /// Cancels the upload: it stops promptly and fails with
    /// [`crate::UploadError::Interrupted`].
    pub cancel: Option<CancellationToken>,
}

impl Default for UploadOptions {
    fn default() -> Self {
        UploadOptions {
            dry_run: false,
            cache_dir: None,
            shard_cache_max_bytes: DEFAULT_SHARD_CACHE_BYTES,
            global_dedup: true,
            block_size: DEFAULT_BLOCK_SIZE,
            max_files_in_flight: 16,
            read_ahead_bytes: 128 << 20,
            max_xorbs_in_flight: 4,
            xorb_uploads_initial: DEFAULT_XORB_UPLOADS_INITIAL,
            max_xorb_uploads: DEFAULT_MAX_XORB_UPLOADS,
            max_dedup_queries_in_flight: 128,
            min_dedup_run_chunks: DEFAULT_MIN_DEDUP_RUN_CHUNKS,
            min_dedup_run_bytes: DEFAULT_MIN_DEDUP_RUN_BYTES,
            xorb_max_chunks: xet_xorb::MAX_XORB_CHUNKS,
            xorb_max_bytes: DEFAULT_XORB_MAX_BYTES,
            xorb_first_bytes: DEFAULT_XORB_FIRST_BYTES,
            shard_max_bytes: DEFAULT_SHARD_MAX_BYTES,
            rehash: false,
            cancel: None,
        }
    }
}

impl UploadOptions {
    /// Clamp the knobs into working ranges (at least 1 of everything, block size at
    /// least 64 KiB, xorb limits within the protocol's).
    pub(crate) fn normalized(&self) -> UploadOptions {
        let mut o = self.clone();
        o.block_size = o.block_size.clamp(64 << 10, 256 << 20);
        o.max_files_in_flight = o.max_files_in_flight.max(1);
        o.max_xorbs_in_flight = o.max_xorbs_in_flight.max(1);
        o.max_xorb_uploads = o.max_xorb_uploads.max(1);
        o.xorb_uploads_initial = o.xorb_uploads_initial.clamp(1, o.max_xorb_uploads);
        o.max_dedup_queries_in_flight = o.max_dedup_queries_in_flight.max(1);
        o.min_dedup_run_chunks = o.min_dedup_run_chunks.max(1);
        o.xorb_max_chunks = o.xorb_max_chunks.clamp(1, xet_xorb::MAX_XORB_CHUNKS);
        o.xorb_max_bytes = o.xorb_max_bytes.clamp(
            xet_chunk::MAX_CHUNK_SIZE as u64,
            xet_xorb::MAX_XORB_UNPACKED_BYTES,
        );
        o.xorb_first_bytes = o
            .xorb_first_bytes
            .clamp(xet_chunk::MAX_CHUNK_SIZE as u64, o.xorb_max_bytes);
        o.shard_max_bytes = o.shard_max_bytes.max(4 << 10);
        o
    }
}

/// A cache directory for one CAS endpoint under a base cache directory:
/// `base/upload/<first 16 hex digits of the chunk hash of endpoint>`. Any string that
/// identifies the endpoint works (a URL, a store path).
pub fn cache_dir_for(base: &std::path::Path, endpoint: &str) -> PathBuf {
    let h = xet_hash::chunk_hash(endpoint.as_bytes());
    base.join("upload").join(&h.to_string()[..16])
}
