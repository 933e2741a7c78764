//! Progress reporting hooks.

use crate::report::FileReport;

/// Receives progress events. Every method has an empty default, so an implementation
/// overrides only what it shows. Calls come from several threads; keep them cheap (an
/// atomic add, an `indicatif::ProgressBar::inc`).
pub trait Progress: Send + Sync {
    /// Called before any data is read: how many files and bytes will be processed (sizes
    /// as found when the inputs were listed). Called again, with larger totals, when more
    /// work is found: `rehash` first checks recorded files, then uploads those that
    /// changed.
    fn start(&self, _files: usize, _total_bytes: u64) {}
    /// `bytes` more file bytes were chunked, hashed and deduplicated.
    fn processed(&self, _bytes: u64) {}
    /// `bytes` more serialized xorb or shard bytes were stored by the CAS (never called
    /// in a dry run).
    fn uploaded(&self, _bytes: u64) {}
    /// A file is fully processed (its hash is final; its data may still be uploading).
    fn file_done(&self, _file: &FileReport) {}
}

/// Ignores every event.
#[derive(Debug, Default, Clone, Copy)]
pub struct NoProgress;

impl Progress for NoProgress {}
