//! [`import`]: a bundle's objects into any [`Cas`], each validated there as an upload is.

use std::sync::Arc;

use bytes::Bytes;
use futures_util::StreamExt;
use xet_cas::{Cas, CasError, XorbBody};
use xet_hash::MerkleHash;
use xet_shard::ParsedShard;

use crate::{Bundle, BundleError, BundlePart, Kind, Problem, Progress, Reason};

/// How [`import`] runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ImportOptions {
    /// Objects being converted and stored at once (the target validates on its own
    /// threads; over HTTP this hides the round trips).
    pub concurrency: usize,
}

impl Default for ImportOptions {
    fn default() -> Self {
        ImportOptions { concurrency: 4 }
    }
}

/// Per kind: how many objects the target newly stored, already had, or refused.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct KindCounts {
    pub stored: u64,
    pub present: u64,
    pub rejected: u64,
}

/// What [`import`] did. A rejected object is named in `rejected`; the others were
/// imported regardless.
#[derive(Debug, Clone, Default)]
pub struct ImportReport {
    pub xorbs: KindCounts,
    pub shards: KindCounts,
    /// Bytes (stored forms, as in the bundle) of the objects newly stored.
    pub bytes_stored: u64,
    /// The objects refused, by kind then hash string.
    pub rejected: Vec<Problem>,
}

/// Import every object of `bundle` into `target`, trusting none: each xorb goes to
/// [`Cas::put_xorb`] as an upload body (its chunk region: the footer is only used to find
/// where that ends, and must name the xorb), each shard to [`Cas::put_shard`] in upload
/// form (after checking it is stored under its own name). The target validates them as
/// `xet serve` validates uploads. Xorbs go first (shards need them); a xorb the target
/// already has is not sent again, so a second import stores nothing.
///
/// An object the target refuses as invalid (or a shard needing a refused xorb) is
/// reported and the others imported. Any other failure of the target (storage, network,
/// authorization, a read-only target) stops the import with an error.
pub async fn import(
    bundle: Arc<Bundle>,
    target: Arc<dyn Cas>,
    options: ImportOptions,
    progress: Arc<dyn Progress>,
) -> Result<ImportReport, BundleError> {
    let run = Run {
        bundle,
        target,
        form: XorbForm::Upload,
        skip_present: true,
        concurrency: options.concurrency.max(1),
        progress,
    };
    Ok(run.put_all().await?.0)
}

/// Which form of a xorb goes to `put_xorb`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum XorbForm {
    /// The chunk region: what every `Cas` takes, the HTTP API included.
    Upload,
    /// The whole stored form: a store then also checks that the footer agrees with the
    /// chunks (what `verify` wants).
    Stored,
}

/// A file as a shard that was accepted registers it: hash, size, sha256 claim.
pub(crate) type Claim = (MerkleHash, u64, Option<[u8; 32]>);

/// One import (or verification) of a bundle into a target.
pub(crate) struct Run {
    pub bundle: Arc<Bundle>,
    pub target: Arc<dyn Cas>,
    pub form: XorbForm,
    /// Ask the target for each xorb's size first and skip the ones it has.
    pub skip_present: bool,
    pub concurrency: usize,
    pub progress: Arc<dyn Progress>,
}

enum Outcome {
    Stored(u64),
    Present,
    Rejected(Reason),
}

impl Run {
    /// Every xorb, then every shard; the report, and the files the accepted shards
    /// register.
    pub(crate) async fn put_all(&self) -> Result<(ImportReport, Vec<Claim>), BundleError> {
        let m = self.bundle.manifest();
        self.progress.start(self.bundle.object_bytes());
        let mut report = ImportReport::default();
        let mut claims = Vec::new();
        let mut xorbs = futures_util::stream::iter(m.xorbs.iter().copied())
            .map(|h| async move { (h, self.put_xorb(h).await) })
            .buffer_unordered(self.concurrency);
        while let Some((hash, outcome)) = xorbs.next().await {
            let outcome = outcome?;
            count(&mut report, Kind::Xorb, hash, outcome);
        }
        drop(xorbs);
        let mut shards = futures_util::stream::iter(m.shards.iter().copied())
            .map(|h| async move { (h, self.put_shard(h).await) })
            .buffer_unordered(self.concurrency);
        while let Some((hash, outcome)) = shards.next().await {
            let (outcome, files) = outcome?;
            claims.extend(files);
            count(&mut report, Kind::Shard, hash, outcome);
        }
        report.rejected.sort_by_key(|p| match p.subject {
            BundlePart::Object { kind, hash } => (kind == Kind::Shard, hash.to_string()),
            _ => (true, String::new()),
        });
        Ok((report, claims))
    }

    fn stored(&self, kind: Kind, hash: &MerkleHash) -> Bytes {
        self.bundle
            .object(kind, hash)
            .expect("the bundle located every object its manifest lists when it was opened")
    }

    async fn put_xorb(&self, hash: MerkleHash) -> Result<Outcome, BundleError> {
        let stored = self.stored(Kind::Xorb, &hash);
        let len = stored.len() as u64;
        let outcome = self.try_put_xorb(hash, stored).await;
        self.progress.advance(len);
        outcome
    }

    async fn try_put_xorb(&self, hash: MerkleHash, stored: Bytes) -> Result<Outcome, BundleError> {
        let len = stored.len() as u64;
        let failed = |e| target_err(format!("storing xorb {hash}"), e);
        if self.skip_present
            && self
                .target
                .xorb_size(&hash)
                .await
                .map_err(failed)?
                .is_some()
        {
            return Ok(Outcome::Present);
        }
        let body = match self.form {
            XorbForm::Stored => stored,
            XorbForm::Upload => match blocking(move || upload_body(&hash, &stored)).await? {
                Ok(b) => b,
                Err(reason) => return Ok(Outcome::Rejected(reason)),
            },
        };
        match self.target.put_xorb(&hash, XorbBody::Bytes(body)).await {
            Ok(true) => Ok(Outcome::Stored(len)),
            Ok(false) => Ok(Outcome::Present),
            Err(e) if is_rejection(&e) => Ok(Outcome::Rejected(Reason::Rejected(e))),
            Err(e) => Err(failed(e)),
        }
    }

    async fn put_shard(&self, hash: MerkleHash) -> Result<(Outcome, Vec<Claim>), BundleError> {
        let stored = self.stored(Kind::Shard, &hash);
        let len = stored.len() as u64;
        let converted = blocking(move || upload_shard(&hash, &stored)).await?;
        self.progress.advance(len);
        let (upload, claims) = match converted {
            Ok(c) => c,
            Err(reason) => return Ok((Outcome::Rejected(reason), Vec::new())),
        };
        match self.target.put_shard(upload).await {
            Ok(true) => Ok((Outcome::Stored(len), claims)),
            Ok(false) => Ok((Outcome::Present, claims)),
            Err(e) if is_rejection(&e) => Ok((Outcome::Rejected(Reason::Rejected(e)), Vec::new())),
            Err(e) => Err(target_err(format!("registering shard {hash}"), e)),
        }
    }
}

fn count(report: &mut ImportReport, kind: Kind, hash: MerkleHash, outcome: Outcome) {
    let counts = match kind {
        Kind::Xorb => &mut report.xorbs,
        Kind::Shard => &mut report.shards,
    };
    match outcome {
        Outcome::Stored(len) => {
            counts.stored += 1;
            report.bytes_stored += len;
        }
        Outcome::Present => counts.present += 1,
        Outcome::Rejected(reason) => {
            counts.rejected += 1;
            report.rejected.push(Problem {
                subject: BundlePart::Object { kind, hash },
                reason,
            });
        }
    }
}

/// The target's verdict on the object itself, as opposed to a failure of the target.
fn is_rejection(e: &CasError) -> bool {
    matches!(
        e,
        CasError::InvalidXorb { .. } | CasError::InvalidShard { .. } | CasError::MissingXorb { .. }
    )
}

fn target_err(what: String, source: CasError) -> BundleError {
    BundleError::Target { what, source }
}

pub(crate) async fn blocking<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> Result<T, BundleError> {
    tokio::task::spawn_blocking(f)
        .await
        .map_err(BundleError::Task)
}

/// The chunk region of a stored xorb (a slice, no copy): where its footer says the region
/// ends. The footer must parse and name the xorb; the chunks are the target's to check.
fn upload_body(hash: &MerkleHash, stored: &Bytes) -> Result<Bytes, Reason> {
    let (footer, region_len) =
        xet_xorb::parse_footer(stored, &xet_xorb::Limits::PROTOCOL).map_err(Reason::Footer)?;
    if footer.xorb_hash != *hash {
        return Err(Reason::FooterNames(footer.xorb_hash));
    }
    Ok(stored.slice(..region_len))
}

/// Largest shard converted (the store's default upload limit).
const MAX_SHARD_BYTES: u64 = 1 << 30;

/// The upload form of a stored shard, once it is found stored under its own name, and
/// the files it registers.
fn upload_shard(hash: &MerkleHash, stored: &[u8]) -> Result<(Bytes, Vec<Claim>), Reason> {
    let named = xet_shard::shard_hash(stored);
    if named != *hash {
        return Err(Reason::ShardNamed(named));
    }
    let limits = xet_shard::Limits {
        max_bytes: MAX_SHARD_BYTES,
        max_entries: u64::MAX,
    };
    let parsed = ParsedShard::parse(stored, &limits).map_err(Reason::ShardParse)?;
    let claims = parsed
        .shard
        .files
        .iter()
        .map(|f| (f.file_hash, f.size(), f.sha256_digest()))
        .collect();
    let upload = parsed
        .shard
        .into_upload()
        .to_upload_bytes()
        .map_err(Reason::NoUploadForm)?;
    Ok((Bytes::from(upload), claims))
}
