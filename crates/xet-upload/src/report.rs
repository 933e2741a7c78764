//! What an upload did, serializable for `--json`.

use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use xet_hash::MerkleHash;

/// One uploaded (or, in a dry run, examined) file.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileReport {
    /// The path as given in the inputs.
    pub path: PathBuf,
    /// XET file hash (hash-string form in JSON). 64 zeros for an empty file.
    pub hash: MerkleHash,
    pub size: u64,
    /// Plain sha256 hex of the content (the shard stores it byte-swapped, and zeros for
    /// an empty file, as the reference does).
    pub sha256: String,
    /// Bytes of this file stored in new xorbs of this upload.
    pub new_bytes: u64,
    /// Bytes of this file found already stored (or already placed by this upload).
    pub deduped_bytes: u64,
    /// Number of reconstruction terms.
    pub terms: usize,
}

/// Totals of one upload.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Totals {
    pub files: usize,
    /// Sum of the file sizes.
    pub bytes: u64,
    /// Uncompressed bytes placed in new xorbs (would be new in a dry run).
    pub new_bytes: u64,
    /// `bytes - new_bytes`: found in this session, the local shard cache or by global
    /// dedup, or repeated inside a file.
    pub deduped_bytes: u64,
    pub chunks: u64,
    pub new_chunks: u64,
    /// Xorbs formed from new chunks.
    pub xorbs_new: usize,
    /// Xorbs sent with `put_xorb` (in a dry run: that would be sent).
    pub xorbs_sent: usize,
    /// Xorbs not sent because the resume journal says they were stored by an earlier,
    /// interrupted run (and the CAS confirmed it).
    pub xorbs_resumed: usize,
    /// Serialized bytes of the xorbs sent (would be sent).
    pub xorb_bytes_sent: u64,
    /// Shards sent with `put_shard` (would be sent).
    pub shards_sent: usize,
    pub shard_bytes_sent: u64,
    /// Global dedup queries made, and how many returned a shard.
    pub dedup_queries: u64,
    pub dedup_answers: u64,
    /// Files not read at all: unchanged on disk since an earlier upload to this CAS,
    /// which still has them (see `UploadOptions::rehash`).
    #[serde(default)]
    pub files_unchanged: usize,
    /// Files read again (`UploadOptions::rehash`) and found to have the content recorded
    /// at an earlier upload to this CAS, which still has them: nothing else was done.
    #[serde(default)]
    pub files_verified: usize,
    /// Wall time of the whole upload.
    #[serde(with = "secs_f64")]
    pub elapsed: Duration,
}

/// The result of [`crate::upload`].
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct UploadReport {
    pub dry_run: bool,
    /// In input order.
    pub files: Vec<FileReport>,
    pub totals: Totals,
}

mod secs_f64 {
    use std::time::Duration;

    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_f64(d.as_secs_f64())
    }
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Duration, D::Error> {
        let v = f64::deserialize(d)?;
        Duration::try_from_secs_f64(v).map_err(serde::de::Error::custom)
    }
}
