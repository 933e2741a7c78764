//! The errors of this crate, and the per-object problems `import` and `verify` report.

use std::path::PathBuf;

use xet_cas::CasError;
use xet_hash::MerkleHash;

/// What a bundle key holds, as its manifest says.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Xorb,
    Shard,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Xorb => "xorb",
            Kind::Shard => "shard",
        }
    }
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// Why a bundle could not be opened, created, imported or verified. Problems with single
/// objects during an import or a verification are [`Problem`]s in the report instead.
#[derive(Debug, thiserror::Error)]
pub enum BundleError {
    #[error("cannot read bundle {}", .path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("{} is not a valid bundle: its SWH read shard is damaged", .path.display())]
    Container {
        path: PathBuf,
        #[source]
        source: Box<xet_swh::ReadError>,
    },

    #[error(
        "{} is an SWH read shard but not a xet bundle: it has no manifest (key {})",
        .path.display(),
        xet_hash::hex::encode(&crate::MANIFEST_KEY)
    )]
    NoManifest { path: PathBuf },

    #[error("bundle {}: bad manifest: {reason}", .path.display())]
    Manifest { path: PathBuf, reason: String },

    #[error(
        "bundle {}: the manifest lists {kind} {hash}, but no object is stored under its key {}",
        .path.display(),
        .hash.raw_hex()
    )]
    MissingObject {
        path: PathBuf,
        kind: Kind,
        hash: MerkleHash,
    },

    #[error(
        "bundle {}: the index entry of {kind} {hash} (key {}) is damaged",
        .path.display(),
        .hash.raw_hex()
    )]
    DamagedEntry {
        path: PathBuf,
        kind: Kind,
        hash: MerkleHash,
        #[source]
        source: Box<xet_swh::ReadError>,
    },

    #[error("{what}")]
    Source {
        what: String,
        #[source]
        source: CasError,
    },

    #[error("file {hash} is not registered in the store (no shard of it lists the file)")]
    FileNotFound { hash: MerkleHash },

    #[error("stored shard {hash} does not parse")]
    StoredShard {
        hash: MerkleHash,
        #[source]
        source: Box<xet_shard::ShardError>,
    },

    #[error("stored xorb {hash}: {reason}")]
    StoredXorb { hash: MerkleHash, reason: String },

    #[error("cannot build the shard of the selected files")]
    BuildShard(#[source] Box<xet_shard::ShardError>),

    #[error("cannot write bundle {}", .path.display())]
    Write {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    #[error("cannot write bundle {}", .path.display())]
    Encode {
        path: PathBuf,
        #[source]
        source: Box<xet_swh::WriteError>,
    },

    #[error("{what}")]
    Target {
        what: String,
        #[source]
        source: CasError,
    },

    #[error("a background task failed: {0}")]
    Task(String),
}

impl BundleError {
    /// Whether the bundle file itself is unreadable or invalid (as opposed to a failing
    /// store, target or output).
    pub fn is_invalid_bundle(&self) -> bool {
        matches!(
            self,
            BundleError::Read { .. }
                | BundleError::Container { .. }
                | BundleError::NoManifest { .. }
                | BundleError::Manifest { .. }
                | BundleError::MissingObject { .. }
                | BundleError::DamagedEntry { .. }
        )
    }
}

/// What a [`Problem`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Subject {
    /// A xorb or shard of the bundle.
    Object { kind: Kind, hash: MerkleHash },
    /// A file of the manifest.
    File { hash: MerkleHash },
    /// The SWH read shard itself (header, index, hash function, padding).
    Container,
    /// An object of the SWH shard that the manifest does not list.
    Unlisted { key: [u8; 32] },
}

impl std::fmt::Display for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Subject::Object { kind, hash } => write!(f, "{kind} {hash} (key {})", hash.raw_hex()),
            Subject::File { hash } => write!(f, "file {hash}"),
            Subject::Container => f.write_str("SWH read shard"),
            Subject::Unlisted { key } => write!(f, "key {}", xet_hash::hex::encode(key)),
        }
    }
}

/// One thing wrong with a bundle, found by [`crate::import`] or [`crate::verify`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub subject: Subject,
    pub reason: String,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.subject, self.reason)
    }
}
