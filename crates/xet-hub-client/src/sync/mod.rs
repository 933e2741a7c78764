//! `xet sync`: a local folder and a bucket folder made alike, one way, with the rules of
//! `hf buckets sync` (`buckets-api.md` §3) so a user of either gets the same plan:
//!
//! - both sides are listed ([`listing`]), the filter applied to relative paths on both;
//! - each relative path is compared ([`compare`]): new files are sent, files in both
//!   sent when sizes differ or the source is newer by more than [`TIME_WINDOW_MS`],
//!   files only at the destination deleted with `--delete`;
//! - the plan can be written and applied later in the JSONL form `hf` writes and reads
//!   ([`plan_file`]);
//! - it runs ([`run`]) through the bucket transfers: uploads through the upload pipeline
//!   (dedup, resume), downloads verified, each given the bucket's `mtime`.
//!
//! Two things go beyond `hf`: a download keeps the bucket's `mtime`, so syncing the same
//! folder back up sends nothing; and `--checksum` compares Xet hashes (computed locally,
//! for files whose sizes agree) instead of times.

pub mod filter;
pub mod listing;
pub mod plan_file;
pub mod run;

use std::collections::BTreeMap;

use xet_hash::MerkleHash;
use xet_hub::time::python_isoformat_ms;

pub use filter::Filter;

/// A source newer than the destination by at most this much counts as the same time.
pub const TIME_WINDOW_MS: i64 = 1000;

/// One file of a side, by its path relative to the synced folder.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SideFile {
    pub size: u64,
    /// Milliseconds since the Unix epoch; 0 when the bucket has none.
    pub mtime_ms: i64,
    /// The bucket's Xet hash (remote side), or the local one once computed.
    pub xet_hash: Option<MerkleHash>,
}

/// A side's files by relative path (sorted, so plans come out in path order).
pub type Listing = BTreeMap<String, SideFile>;

/// Which way files go.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    Upload,
    Download,
}

impl Direction {
    fn transfer(self) -> Action {
        match self {
            Direction::Upload => Action::Upload,
            Direction::Download => Action::Download,
        }
    }

    /// The reasons `hf` gives when one side is newer: (source newer, destination newer).
    fn newer_labels(self) -> (&'static str, &'static str) {
        match self {
            Direction::Upload => ("local newer", "remote newer"),
            Direction::Download => ("remote newer", "local newer"),
        }
    }
}

/// How files present on both sides are compared, and what else is done.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Rules {
    /// Delete destination files the source does not have.
    pub delete: bool,
    /// Compare sizes only.
    pub ignore_times: bool,
    /// Compare times only.
    pub ignore_sizes: bool,
    /// Only update files the destination has.
    pub existing: bool,
    /// Never touch files the destination has.
    pub ignore_existing: bool,
    /// Compare sizes, then Xet hashes; times are not looked at.
    pub checksum: bool,
}

impl Rules {
    /// The flag pairs `hf` refuses together; `None` when the rules are consistent.
    pub fn conflict(&self) -> Option<&'static str> {
        let pairs = [
            (
                self.ignore_times && self.ignore_sizes,
                "--ignore-times and --ignore-sizes",
            ),
            (
                self.existing && self.ignore_existing,
                "--existing and --ignore-existing",
            ),
            (
                self.checksum && self.ignore_sizes,
                "--checksum and --ignore-sizes",
            ),
            (
                self.checksum && self.ignore_times,
                "--checksum and --ignore-times",
            ),
        ];
        pairs.into_iter().find(|(on, _)| *on).map(|(_, what)| what)
    }
}

/// What a plan does with one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Action {
    Upload,
    Download,
    Delete,
    Skip,
}

impl Action {
    pub fn as_str(self) -> &'static str {
        match self {
            Action::Upload => "upload",
            Action::Download => "download",
            Action::Delete => "delete",
            Action::Skip => "skip",
        }
    }

    /// The verb of `-v` output (`Uploading: PATH (REASON)`).
    pub fn verb(self) -> &'static str {
        match self {
            Action::Upload => "Uploading",
            Action::Download => "Downloading",
            Action::Delete => "Deleting",
            Action::Skip => "Skipping",
        }
    }
}

/// One line of a plan: the fields `hf` writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Op {
    pub action: Action,
    /// Relative to the local folder and to the bucket prefix.
    pub path: String,
    pub reason: String,
    /// The source's size (the deleted file's for deletes).
    pub size: Option<u64>,
    /// Python `isoformat()` UTC times, as `hf` writes them.
    pub local_mtime: Option<String>,
    pub remote_mtime: Option<String>,
}

/// Counts of a plan, as in its header.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Summary {
    pub uploads: u64,
    pub downloads: u64,
    pub deletes: u64,
    pub skips: u64,
    /// Bytes of the uploads and downloads.
    pub total_size: u64,
}

/// A sync plan: what runs, from `source` to `dest` (the command's own arguments).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub source: String,
    pub dest: String,
    /// When it was made, Python `isoformat()` UTC.
    pub timestamp: String,
    pub ops: Vec<Op>,
}

impl Plan {
    pub fn summary(&self) -> Summary {
        let mut s = Summary::default();
        for op in &self.ops {
            match op.action {
                Action::Upload => s.uploads += 1,
                Action::Download => s.downloads += 1,
                Action::Delete => s.deletes += 1,
                Action::Skip => s.skips += 1,
            }
            if matches!(op.action, Action::Upload | Action::Download) {
                s.total_size += op.size.unwrap_or(0);
            }
        }
        s
    }

    /// Whether running it changes anything.
    pub fn is_noop(&self) -> bool {
        self.ops.iter().all(|o| o.action == Action::Skip)
    }
}

/// The plan's operations: every path of either side, in path order. Files present on
/// both sides under `--checksum` must carry their Xet hashes on both sides when their
/// sizes agree ([`listing::hash_local`] fills the local ones).
pub fn compare(direction: Direction, source: &Listing, dest: &Listing, rules: &Rules) -> Vec<Op> {
    let mut paths: Vec<&String> = source.keys().chain(dest.keys()).collect();
    paths.sort();
    paths.dedup();
    let mut ops = Vec::new();
    for path in paths {
        let op = match (source.get(path), dest.get(path)) {
            (Some(s), None) => Some(new_file(direction, path, s, rules)),
            (Some(s), Some(d)) => Some(both(direction, path, s, d, rules)),
            (None, Some(d)) if rules.delete => Some(Op {
                action: Action::Delete,
                reason: "not in source (--delete)".into(),
                size: Some(d.size),
                ..times(direction, path, None, Some(d))
            }),
            _ => None,
        };
        ops.extend(op);
    }
    ops
}

fn new_file(direction: Direction, path: &str, s: &SideFile, rules: &Rules) -> Op {
    let (action, reason) = if rules.existing {
        (Action::Skip, "new file (--existing)")
    } else {
        (direction.transfer(), "new file")
    };
    Op {
        action,
        reason: reason.into(),
        size: Some(s.size),
        ..times(direction, path, Some(s), None)
    }
}

/// `_compare_files_for_sync`, plus `--checksum`.
fn both(direction: Direction, path: &str, s: &SideFile, d: &SideFile, rules: &Rules) -> Op {
    let (src_newer_label, dst_newer_label) = direction.newer_labels();
    let src_newer = s.mtime_ms - d.mtime_ms > TIME_WINDOW_MS;
    let dst_newer = d.mtime_ms - s.mtime_ms > TIME_WINDOW_MS;
    let sizes_differ = s.size != d.size;
    let send = direction.transfer();
    let (action, reason) = if rules.ignore_existing {
        (Action::Skip, "exists on receiver (--ignore-existing)")
    } else if rules.checksum {
        match (
            sizes_differ,
            s.xet_hash.is_some() && s.xet_hash == d.xet_hash,
        ) {
            (true, _) => (send, "size differs"),
            (false, false) => (send, "checksum differs"),
            (false, true) => (Action::Skip, "same checksum"),
        }
    } else if rules.ignore_sizes {
        match (src_newer, dst_newer) {
            (true, _) => (send, src_newer_label),
            (false, true) => (Action::Skip, dst_newer_label),
            (false, false) => (Action::Skip, "same mtime"),
        }
    } else if rules.ignore_times {
        if sizes_differ {
            (send, "size differs")
        } else {
            (Action::Skip, "same size")
        }
    } else if sizes_differ {
        (send, "size differs")
    } else if src_newer {
        (send, src_newer_label)
    } else {
        (Action::Skip, "identical")
    };
    Op {
        action,
        reason: reason.into(),
        size: Some(s.size),
        ..times(direction, path, Some(s), Some(d))
    }
}

/// An op for `path` with the local and remote times of the sides given.
fn times(direction: Direction, path: &str, src: Option<&SideFile>, dst: Option<&SideFile>) -> Op {
    let (local, remote) = match direction {
        Direction::Upload => (src, dst),
        Direction::Download => (dst, src),
    };
    Op {
        action: Action::Skip,
        path: path.to_string(),
        reason: String::new(),
        size: None,
        local_mtime: local.map(|f| python_isoformat_ms(f.mtime_ms)),
        remote_mtime: remote.map(|f| python_isoformat_ms(f.mtime_ms)),
    }
}

#[cfg(test)]
mod tests;
