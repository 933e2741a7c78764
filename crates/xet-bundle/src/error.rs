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

    #[error("{} is not a valid bundle: its manifest is bad", .path.display())]
    Manifest {
        path: PathBuf,
        #[source]
        source: ManifestError,
    },

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

    /// The source store failed (`what` says doing what).
    #[error("{what}")]
    Source {
        what: String,
        #[source]
        source: CasError,
    },

    #[error(
        "{kind} {hash} was listed by the source store, then not found in it: run the command \
         again once nothing deletes from that store"
    )]
    Vanished { kind: Kind, hash: MerkleHash },

    #[error("file {hash} is not registered in the store (no shard of it lists the file)")]
    FileNotFound { hash: MerkleHash },

    #[error("stored shard {hash} of the source store does not parse")]
    StoredShard {
        hash: MerkleHash,
        #[source]
        source: Box<xet_shard::ShardError>,
    },

    #[error("stored xorb {hash} of the source store cannot be bundled")]
    StoredXorb {
        hash: MerkleHash,
        #[source]
        source: Box<StoredXorbError>,
    },

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

    /// The target store failed (`what` says doing what).
    #[error("{what}")]
    Target {
        what: String,
        #[source]
        source: CasError,
    },

    #[error("the thread writing bundle {} stopped before the bundle was complete", .path.display())]
    WriterStopped { path: PathBuf },

    #[error(
        "bundle {} was not written: its objects stopped coming before the last one",
        .path.display()
    )]
    Incomplete { path: PathBuf },

    #[error("a background task of the bundle operation failed")]
    Task(#[source] tokio::task::JoinError),

    /// [`crate::create_from_cas`] could not make its staging directory (or a folder in
    /// it) at `path`.
    #[error("cannot create a staging directory in {}", .path.display())]
    Stage {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },

    /// [`crate::create_from_cas`] could not open its staging store at `path`.
    #[error("cannot open the staging store at {}", .path.display())]
    StagingStore {
        path: PathBuf,
        #[source]
        source: CasError,
    },

    /// [`crate::create_from_cas`]: downloading the files to bundle failed (the source
    /// names the file).
    #[error("cannot download the files to bundle")]
    Download(#[from] xet_download::DownloadError),

    /// [`crate::create_from_cas`]: storing the downloaded files in the staging store
    /// failed.
    #[error("cannot store the downloaded files in the staging store")]
    Upload(#[from] xet_upload::UploadError),

    /// [`crate::create_from_cas`]: a downloaded file was stored under another hash than
    /// the one asked for (the download verified it, so this is a bug, not the source).
    #[error("file {file} was downloaded as content whose hash is {content}")]
    HashMismatch {
        file: MerkleHash,
        content: MerkleHash,
    },

    /// [`crate::create_from_cas`]: the upload reported another number of files than it
    /// was given (a bug).
    #[error("{asked} files were downloaded, but the staging store got {stored}")]
    StagedFiles { asked: usize, stored: usize },
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

/// What is wrong with a manifest ([`crate::Manifest::parse`], or its size at open).
#[derive(Debug, thiserror::Error)]
pub enum ManifestError {
    #[error("it is {len} bytes, more than the budget of {max}")]
    TooLarge { len: u64, max: u64 },

    #[error("it is not manifest JSON")]
    Json(#[source] serde_json::Error),

    #[error("its format is {found:?}, expected {:?}", crate::FORMAT)]
    Format { found: String },

    #[error(
        "its version {found} is not supported (this xet reads version {}): use a newer xet",
        crate::VERSION
    )]
    Version { found: u64 },

    #[error("it lists {kind} {hash}, which cannot be a key (zero, or the manifest's own key)")]
    NotAKey { kind: Kind, hash: MerkleHash },

    #[error("it lists {kind} {hash} twice")]
    Twice { kind: Kind, hash: MerkleHash },
}

/// Why a stored xorb of the source cannot go into a bundle (`create` reads only its
/// footer when it builds the shard of selected files).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoredXorbError {
    #[error("a file of the selection uses it, and the source store does not have it")]
    Missing,

    #[error("{len} bytes is too short for a stored xorb")]
    TooShort { len: u64 },

    #[error("its last 4 bytes give a footer of {tail_len} bytes, more than its {len}")]
    FooterLength { tail_len: u64, len: u64 },

    #[error("its footer does not parse")]
    Footer(#[source] xet_xorb::XorbError),

    #[error("its footer names xorb {0}")]
    FooterNames(MerkleHash),

    #[error("the uncompressed offset of its chunk {chunk} is below the previous chunk's")]
    UnpackedOffsets { chunk: usize },

    #[error("its footer (v0) has no unpacked chunk offsets")]
    NoUnpackedOffsets,

    #[error("its chunks do not fit a shard's CAS entry")]
    CasEntry(#[source] xet_shard::ShardError),
}

/// What a [`Problem`] is about.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BundlePart {
    /// A xorb or shard of the bundle.
    Object { kind: Kind, hash: MerkleHash },
    /// A file of the manifest.
    File { hash: MerkleHash },
    /// The SWH read shard itself (header, index, hash function, padding).
    Container,
    /// An object of the SWH shard that the manifest does not list.
    Unlisted { key: [u8; 32] },
}

impl std::fmt::Display for BundlePart {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            BundlePart::Object { kind, hash } => {
                write!(f, "{kind} {hash} (key {})", hash.raw_hex())
            }
            BundlePart::File { hash } => write!(f, "file {hash}"),
            BundlePart::Container => f.write_str("SWH read shard"),
            BundlePart::Unlisted { key } => write!(f, "key {}", xet_hash::hex::encode(key)),
        }
    }
}

/// One thing wrong with a bundle, found by [`crate::import`] or [`crate::verify`]. Its
/// message names the subject; `source()` is the [`Reason`] (print the chain).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{subject}")]
pub struct Problem {
    pub subject: BundlePart,
    #[source]
    pub reason: Reason,
}

/// Why a [`Problem`]'s subject is wrong. Errors of the format crates and of the target
/// are sources, so a chain printer shows them.
#[derive(Debug, Clone, thiserror::Error)]
pub enum Reason {
    #[error("its footer does not parse")]
    Footer(#[source] xet_xorb::XorbError),

    #[error("its footer names xorb {0}")]
    FooterNames(MerkleHash),

    #[error("its bytes are shard {0}, not the shard its key names")]
    ShardNamed(MerkleHash),

    #[error("it does not parse as a shard")]
    ShardParse(#[source] xet_shard::ShardError),

    #[error("it has no upload form")]
    NoUploadForm(#[source] xet_shard::ShardError),

    /// The target's verdict on the object (invalid, or a shard needing a missing xorb).
    #[error("rejected")]
    Rejected(#[source] CasError),

    #[error("the SWH structure is damaged")]
    Container(#[source] xet_swh::ReadError),

    #[error("the manifest does not list this object")]
    Unlisted,

    #[error("the empty file's hash with a size or sha256 of other content")]
    EmptyFile,

    #[error("no valid shard of the bundle registers it")]
    Unregistered,

    #[error("the manifest says {manifest} bytes, its shard {shard}")]
    Size { manifest: u64, shard: u64 },

    #[error(
        "the manifest says sha256 {}, its shard {}",
        xet_hash::hex::encode(.manifest),
        xet_hash::hex::encode(.shard)
    )]
    Sha256 { manifest: [u8; 32], shard: [u8; 32] },

    #[error("it cannot be reconstructed")]
    Unreconstructible(#[source] CasError),
}
