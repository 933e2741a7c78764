//! The XET upload pipeline over any [`xet_cas::Cas`], byte-compatible with `hf_xet` 1.8.0
//! in what it stores: the same chunks and file hashes, xorbs in the reference's format
//! (compressed per chunk, footer-less bodies), shards in the reference's upload form.
//!
//! # API
//!
//! ```no_run
//! # async fn f(cas: std::sync::Arc<dyn xet_cas::Cas>) -> Result<(), xet_upload::UploadError> {
//! use std::sync::Arc;
//! use xet_upload::{NoProgress, UploadOptions, collect_files, upload};
//! let files = collect_files(&["model/".into()])?; // directories → files, stable order
//! let opts = UploadOptions { cache_dir: Some("/home/me/.cache/xet/upload/abc".into()), ..Default::default() };
//! let report = upload(cas, &files, &opts, Arc::new(NoProgress)).await?;
//! for f in &report.files {
//!     println!("{} {} {}", f.hash, f.size, f.path.display());
//! }
//! # Ok(()) }
//! ```
//!
//! [`upload`] takes file paths (not directories: [`collect_files`] expands those), an
//! [`UploadOptions`] and a [`Progress`] sink, and returns an [`UploadReport`] (per file:
//! path, XET hash, size, sha256, new and deduplicated bytes; totals: bytes, new bytes,
//! xorbs and shards sent, elapsed time) that serializes with serde. Errors are one
//! [`UploadError`] enum: `Input` (names the path), `Cas` (wraps [`xet_cas::CasError`]),
//! `Interrupted` (the [`UploadOptions::cancel`] token fired), `Cache` (names the cache
//! path) and `Internal`.
//!
//! # Pipeline
//!
//! ```text
//! scheduler ─▶ reader per file or group of small files (blocking thread + read thread +
//!   │           sha256 thread; rayon: chunk hashes, and compression while most chunks
//!   │           are new; starts global dedup queries) ─▶ bounded channel per file
//!   └─────────▶ dedup stage (one blocking thread; files in input order, chunks in file order)
//!                 ─▶ bounded channel of sealed xorbs ─▶ uploader (rayon: xorb bodies, compressing
//!                    what the readers did not; put_xorb in as many upload slots as the
//!                    link is measured to need)
//!                 ─▶ shard(s) once all xorbs are stored
//! ```
//!
//! Several files are read, chunked and hashed at once (up to `max_files_in_flight` (16)
//! readers, and within the `read_ahead_bytes` (128 MiB) budget, reserved per file in
//! input order, so the file being deduplicated always proceeds); each holds at most 7
//! blocks of `block_size` (8 MiB). Files of at most 256 KiB are read in groups (up to 64
//! files or 4 MiB) by one reader; a file of one block is read, hashed and chunked on its
//! reader's thread alone. At most `max_xorbs_in_flight` (4) sealed xorbs of ≤ 16 MiB are
//! being compressed or waiting for an upload slot, plus the one being filled, and at most
//! as many are being sent as there are upload slots: `xorb_uploads_initial` (12) at the
//! start, then what the throughput measured calls for, between 2 and `max_xorb_uploads`
//! (16) (see *Upload slots* below). Memory therefore stays flat whatever the input size
//! (≈ 128 MiB read-ahead + 5 × 16 MiB xorbs + the bodies being sent: about 400 MiB for
//! a 10 GiB file on a link 12 uploads fill). A xorb's new chunks stay slices of the blocks
//! they were read in where most of a block was new, and are copied out of it otherwise,
//! so a xorb keeps at most a third more than its data alive, plus a block at either end.
//! CPU work never runs on the async executor: reading, chunking, sha256 and dedup run
//! on blocking threads, chunk hashes and compression on rayon. No lock is held across
//! an `.await`.
//!
//! The dedup stage is sequential and processes files in input order, so the xorbs
//! formed are a deterministic function of the inputs, the options and what the CAS and
//! the local cache answer: a rerun forms the same xorbs, which is what makes resume work.
//! New chunks are packed into xorbs across files, in order, up to 8192 chunks /
//! `xorb_max_bytes` (16 MiB: a quarter of the protocol's limit, see
//! [`DEFAULT_XORB_MAX_BYTES`] for why) uncompressed, except the first xorbs of an
//! upload: where a file starts (its first chunk is new), the first xorb is sealed once
//! it holds `xorb_first_bytes` (4 MiB), the second at twice that, and so on up to 16 MiB
//! from the third on. An upload of 2,000 small files (64 MiB in all) would otherwise
//! send its first bytes only once 16 MiB of files were decided; this way bytes go out
//! from the first 4 MiB on. It costs at most two more xorbs per upload; the early
//! boundaries are all file starts, whose first chunks global dedup queries, so a later
//! upload of the same files from another client finds the xorb after such a boundary
//! (a boundary inside a file would hide it until one of its rare eligible chunks came
//! up). It depends on the xorb's place in the session and the inputs alone, so the
//! xorbs formed stay a function of the inputs.
//!
//! # Upload slots
//!
//! A link whose bandwidth-delay product is larger than what a few TCP connections carry
//! needs more xorb uploads at once; a loopback or a slow link gains nothing from more
//! and would only hold more bodies. Uploads start with `xorb_uploads_initial` (12) slots
//! (the reference starts lower and climbs); the count is raised by half while xorbs wait
//! for a slot and each raise brought at least 15% more throughput, and a raise that did
//! not is undone and retried a few rounds later (`uploads.rs`). It decides when xorbs
//! are sent, never which. Slots go to xorbs in the order they were built (about the
//! order they were sealed; a slower build does not hold the others back), so the last
//! xorb of an upload is not overtaken and left to finish alone. Why 12: a round lasts
//! as many uploads as there are slots, so on a long link (a 64 MiB xorb took 3-6 s at
//! 200 ms) the first raise comes late; at 200 ms / 1 Gbit with 4 MiB TCP windows a
//! 1 GiB upload of 64 MiB xorbs took 11.0-11.8 s starting at 12 against 12.0-12.8 s at
//! 8 (`bench --wan`), and where uploads keep up (loopback) the count changes nothing.
//!
//! # Inputs that change while they are read
//!
//! Files are read with `read(2)` into buffers of the pipeline's own, never
//! memory-mapped: a mapped file that another process truncates kills the reader with
//! `SIGBUS`, and one rewritten in place would show new bytes between hashing a chunk and
//! sending it. Each file's size and modification time when opened are compared once it
//! has been read; a file that changed fails the upload with [`UploadError::Input`] naming
//! it, whose cause is an [`InputChanged`] ("changed during upload"), before anything
//! registers it: shards are sent only after every file has been read and checked. The
//! copy costs about 0.3 s of CPU and 0.14 s of wall time per GiB (a 1 GiB upload to the
//! embedded store: 2.46 s of CPU against 2.17 s mapped); see `docs/RELIABILITY.md`.
//!
//! # Dedup
//!
//! For each chunk, in file order, the first rule that applies:
//!
//! 1. **Run continuation**: the previous chunk was deduplicated against xorb X and this
//!    chunk is in X too (any index), or the previous chunk was X's last chunk and this
//!    one is chunk 0 of another xorb of the same source → deduplicated.
//! 2. **Repeat inside the file**: the chunk equals a chunk this file already stored as
//!    new → a term of its own for that one chunk (this is what hf_xet does: 1 MiB of
//!    zeros is one stored chunk and eight `[i, i+1)` terms).
//! 3. **Dedup run**: the chunk is found, in this order, in a xorb of this session (new
//!    chunks of earlier files), in the local shard cache (shards this client uploaded and
//!    global dedup answers it received, unexpired), or in a global dedup answer
//!    (matching keyed hashes when the answer has an HMAC key). The *run* is the
//!    maximal sequence of following chunks that continue it (rule 1). **Fragmentation
//!    prevention** (draft §10.4): the run is used only if
//!    - it has at least `min_dedup_run_chunks` (8) chunks, or at least
//!      `min_dedup_run_bytes` (1 MiB), or
//!    - it reaches the last chunk of the file (this includes a run covering the whole
//!      file), or
//!    - it cannot add a term: the chunk before it was not stored as new (it was
//!      deduplicated, or the run starts the file) and the chunk after it is found too
//!      (rules 2–3). Storing such a run again would cost bytes and save no term; this
//!      is what makes a second upload of the same files send nothing even when the
//!      first one interleaved short new and deduplicated stretches.
//!
//!    Otherwise this chunk is stored as new (joining the new chunks around it in one
//!    term), and the next chunk is judged the same way.
//! 4. Otherwise the chunk is **new**: appended to the open xorb.
//!
//! Terms: a chunk at index `i` of xorb X extends the previous term when that term is in
//! X and ends at `i` (rule 2 always starts a new term, as hf_xet).
//!
//! Global dedup queries (`Cas::dedup_shard`) are made for the first chunk of each file
//! and for chunks whose hash is eligible (`MerkleHash::is_global_dedup_eligible`), unless
//! the local shard cache already knows the chunk; each hash once per upload. They start
//! as soon as the chunk is hashed; the dedup stage waits for an answer before deciding
//! the batch it belongs to, so decisions do not depend on timing. Up to
//! `max_dedup_queries_in_flight` (128) queries run at once, handed out in input order
//! (file, then chunk) rather than in the order the readers ran ahead: the dedup stage
//! waits only for the answers of the files it is deciding, while the readers' queries
//! for later files are already on the way, and the xorbs it seals meanwhile are sent.
//! Over a long round trip the number of queries in flight is what bounds how many
//! files per second are decided (2,000 files at 80 ms with 16 at a time: 10 s). A failed
//! query is a miss (as in hf_xet), except `Unauthorized`, which fails the upload.
//! Answers are written to the shard cache (not in a dry run).
//!
//! # Shards
//!
//! After every xorb is stored: one shard in upload form (no footer) with every file
//! (sorted by hash, flags `0xC0000000`, one verification entry per term,
//! FileMetadataExt with the byte-swapped sha256; the empty file with 0 terms and a zero
//! sha256) and only the xorbs new in this upload (chunk flags 0, `num_bytes_on_disk`
//! 0). Split into several shards if it would exceed `shard_max_bytes` (63 MiB). Each
//! shard sent is also written to the shard cache in stored form (lookup tables, creation
//! time, expiry 21 days later).
//!
//! # Local cache and resume
//!
//! `cache_dir` (specific to one CAS endpoint; see [`cache_dir_for`]) holds
//! `shard-cache/<shard hash>.mdb`, the records of uploaded files
//! `unchanged-files.json` (below) and the resume journal `xorb-journal`: one line
//! `"<xorb hash string> <body length>\n"` appended after each successful `put_xorb`.
//! A later upload that forms a xorb listed in the journal with the same body length asks
//! `Cas::xorb_size` and skips `put_xorb` if the CAS has it (counted in
//! `Totals::xorbs_resumed`). After a successful upload the journal lines of its xorbs
//! are removed (the shard cache covers them from then on). Shards in the cache whose
//! footer `key_expiry` is in the past are deleted when the cache is opened (0 means no
//! expiry); beyond `shard_cache_max_bytes` the oldest (by modification time) are deleted.
//! If the CAS turns out not to hold a xorb the shard cache says it does (the store was
//! emptied or made anew), every cached shard is deleted and the upload runs again, once.
//!
//! # Unchanged files
//!
//! With a `cache_dir`, each uploaded file's identity on disk (size, modification and
//! change times, inode, device) is recorded with its file hash, sha256 and term count. A
//! later upload reports a file whose identity is the recorded one without reading it
//! (`Totals::files_unchanged`), once the CAS confirms it still has the file at that size
//! (`Cas::file_size`). A record counts only if the file was not modified within 2 s of
//! being recorded. With [`UploadOptions::rehash`] such a file is chunked and hashed
//! again instead, and reported from the record (`Totals::files_verified`) only if its
//! file hash is still the recorded one; otherwise it is uploaded.
//!
//! # Dry run
//!
//! Everything is computed (including compression, so byte counts are exact) and global
//! dedup queries and `xorb_size` checks are made, but nothing is sent and nothing is
//! written to the cache directory. The report's numbers are what a real upload would
//! send right then.

mod build;
mod cache;
mod cut;
mod dedup;
mod error;
mod global;
mod incremental;
mod input;
mod options;
mod pipeline;
mod pool;
mod prepare;
mod progress;
mod read;
mod report;
pub mod scan;
mod shards;
mod unchanged;
mod uploads;
mod walk;

pub use error::{Result, UploadError};
pub use incremental::{upload, upload_inputs};
pub use input::{Input, InputChanged};
pub use options::{
    DEFAULT_BLOCK_SIZE, DEFAULT_MAX_XORB_UPLOADS, DEFAULT_MIN_DEDUP_RUN_BYTES,
    DEFAULT_MIN_DEDUP_RUN_CHUNKS, DEFAULT_SHARD_CACHE_BYTES, DEFAULT_SHARD_MAX_BYTES,
    DEFAULT_XORB_FIRST_BYTES, DEFAULT_XORB_MAX_BYTES, DEFAULT_XORB_UPLOADS_INITIAL, UploadOptions,
    cache_dir_for,
};
pub use progress::{NoProgress, Progress};
pub use report::{FileReport, Totals, UploadReport};
pub use walk::collect_files;

/// Re-exported so callers can build a cancellation token without depending on tokio-util.
pub use tokio_util::sync::CancellationToken;
