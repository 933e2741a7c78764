//! [`verify`]: everything about a bundle that can be checked, without a store to import to.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::Bytes;
use xet_cas::{ByteRange, Cas, CasError, Result as CasResult};
use xet_hash::MerkleHash;
use xet_store::{ObjectBackend, ObjectKey, StoreCas, check_range};
use xet_swh::{ReadLimits, ShardReader};

use crate::import::{Claim, Run, XorbForm, blocking};
use crate::{
    Bundle, BundleError, BundlePart, EMPTY_SHA256, MANIFEST_KEY, Problem, Progress, Reason,
};

/// What [`verify`] found. The bundle is sound when `problems` is empty.
#[derive(Debug, Clone)]
pub struct VerifyReport {
    /// The SWH structure's counts, when its check passed.
    pub swh: Option<xet_swh::VerifyReport>,
    pub xorbs: u64,
    pub shards: u64,
    pub files: u64,
    /// Bytes of the listed objects.
    pub object_bytes: u64,
    /// Everything wrong, in the order checked: the SWH shard, objects, files.
    pub problems: Vec<Problem>,
}

impl VerifyReport {
    pub fn is_ok(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Check a bundle opened with [`Bundle::open`]:
///
/// 1. the SWH read shard ([`ShardReader::verify`]: every index entry in the slot the hash
///    function gives its key, records in bounds and not overlapping, padding zero), and
///    that the manifest lists every object it holds;
/// 2. every xorb and shard, validated exactly as [`crate::import`] would have a store
///    validate them (every chunk decompressed and rehashed, the xorb hash; each shard
///    against the xorbs), xorbs in their stored form so that their footers are checked too
///    — into a store that keeps only footers, so nothing is held but metadata;
/// 3. every file of the manifest registered by an accepted shard, of the manifest's size
///    and sha256, with a reconstruction.
///
/// Problems are collected, not returned as errors; an error means the check itself could
/// not run.
pub async fn verify(
    bundle: Arc<Bundle>,
    progress: Arc<dyn Progress>,
) -> Result<VerifyReport, BundleError> {
    let b = bundle.clone();
    let (swh, mut problems) = blocking(move || check_container(&b)).await?;
    let store = StoreCas::open(FooterBackend::default())
        .await
        .map_err(|source| BundleError::Target {
            what: "opening the verification store".into(),
            source,
        })?;
    let store = Arc::new(store);
    let concurrency = std::thread::available_parallelism().map_or(2, |n| n.get());
    let run = Run {
        bundle: bundle.clone(),
        target: store.clone(),
        form: XorbForm::Stored,
        skip_present: false,
        concurrency,
        progress,
    };
    let (imported, claims) = run.put_all().await?;
    problems.extend(imported.rejected);
    problems.extend(check_files(&bundle, store.as_ref(), &claims).await);
    let m = bundle.manifest();
    Ok(VerifyReport {
        swh,
        xorbs: m.xorbs.len() as u64,
        shards: m.shards.len() as u64,
        files: m.files.len() as u64,
        object_bytes: bundle.object_bytes(),
        problems,
    })
}

/// The SWH shard's own check, and objects the manifest does not list.
fn check_container(bundle: &Bundle) -> (Option<xet_swh::VerifyReport>, Vec<Problem>) {
    let problem = |e| Problem {
        subject: BundlePart::Container,
        reason: Reason::Container(e),
    };
    // Opened once already (within the caller's limits): this only re-reads the header.
    let reader = match ShardReader::open(bundle.bytes(), &ReadLimits::unlimited()) {
        Ok(r) => r,
        Err(e) => return (None, vec![problem(e)]),
    };
    let mut problems = Vec::new();
    let swh = match reader.verify() {
        Ok(r) => Some(r),
        Err(e) => {
            problems.push(problem(e));
            None
        }
    };
    let listed: HashSet<[u8; 32]> = bundle.manifest().objects().map(|(_, h)| h.0).collect();
    for item in reader.iter() {
        match item {
            Ok((key, _)) if *key == MANIFEST_KEY || listed.contains(key) => {}
            Ok((key, _)) => problems.push(Problem {
                subject: BundlePart::Unlisted { key: *key },
                reason: Reason::Unlisted,
            }),
            // `verify` reported the damaged entry already.
            Err(_) => break,
        }
    }
    (swh, problems)
}

/// Each file of the manifest against what the accepted shards register.
async fn check_files<B: ObjectBackend>(
    bundle: &Bundle,
    store: &StoreCas<B>,
    claims: &[Claim],
) -> Vec<Problem> {
    let claimed: HashMap<MerkleHash, (u64, Option<[u8; 32]>)> = claims
        .iter()
        .map(|&(h, size, sha)| (h, (size, sha)))
        .collect();
    let mut problems = Vec::new();
    for f in &bundle.manifest().files {
        let mut bad = |reason: Reason| {
            problems.push(Problem {
                subject: BundlePart::File { hash: f.hash },
                reason,
            })
        };
        if f.hash.is_zero() {
            if f.size != 0 || f.sha256.is_some_and(|s| s != EMPTY_SHA256) {
                bad(Reason::EmptyFile);
            }
            continue;
        }
        let Some(&(size, sha)) = claimed.get(&f.hash) else {
            bad(Reason::Unregistered);
            continue;
        };
        if size != f.size {
            bad(Reason::Size {
                manifest: f.size,
                shard: size,
            });
        }
        if let (Some(listed), Some(claim)) = (f.sha256, sha)
            && listed != claim
        {
            bad(Reason::Sha256 {
                manifest: listed,
                shard: claim,
            });
        }
        if let Err(e) = store.reconstruction(&f.hash, None).await {
            bad(Reason::Unreconstructible(e));
        }
    }
    problems
}

/// The most of a xorb [`FooterBackend`] keeps: a v1 footer of the most chunks a xorb can
/// have, and its `info_length`.
const FOOTER_ROOM: u64 = xet_xorb::footer_len_v1(xet_xorb::MAX_XORB_CHUNKS) as u64 + 4;

/// What [`FooterBackend`] keeps of an object: its length and its last bytes.
#[derive(Debug, Clone)]
struct Kept {
    len: u64,
    tail: Bytes,
}

/// The backend of the store `verify` imports into: a `StoreCas` validates every xorb and
/// shard put into it, and afterwards reads only xorb footers (from the objects' tails) and
/// shards, so this keeps xorbs' last [`FOOTER_ROOM`] bytes and everything else whole. A
/// read of a xorb's chunk region is an error, which no check here makes.
#[derive(Debug, Default)]
struct FooterBackend {
    objects: Mutex<BTreeMap<ObjectKey, Kept>>,
}

impl FooterBackend {
    fn objects(&self) -> MutexGuard<'_, BTreeMap<ObjectKey, Kept>> {
        self.objects.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn kept(&self, key: &ObjectKey) -> Option<Kept> {
        self.objects().get(key).cloned()
    }
}

/// The last `keep` bytes of the concatenation of `parts`.
fn tail_of(parts: &[Bytes], keep: u64) -> Bytes {
    let mut need = keep as usize;
    let mut pieces = Vec::new();
    for p in parts.iter().rev() {
        if need == 0 {
            break;
        }
        let take = need.min(p.len());
        pieces.push(p.slice(p.len() - take..));
        need -= take;
    }
    pieces.reverse();
    Bytes::from(pieces.concat())
}

#[async_trait::async_trait]
impl ObjectBackend for FooterBackend {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> CasResult<bool> {
        self.put_parts_if_absent(key, vec![data]).await
    }

    async fn put_parts_if_absent(&self, key: &ObjectKey, parts: Vec<Bytes>) -> CasResult<bool> {
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        let keep = if key.xorb_hash().is_some() {
            FOOTER_ROOM
        } else {
            len
        };
        let mut map = self.objects();
        if map.contains_key(key) {
            return Ok(false);
        }
        let tail = tail_of(&parts, keep);
        map.insert(key.clone(), Kept { len, tail });
        Ok(true)
    }

    async fn get(&self, key: &ObjectKey) -> CasResult<Option<Bytes>> {
        let Some(k) = self.kept(key) else {
            return Ok(None);
        };
        if k.tail.len() as u64 != k.len {
            return Err(footer_only(key));
        }
        Ok(Some(k.tail))
    }

    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> CasResult<Option<Bytes>> {
        let Some(k) = self.kept(key) else {
            return Ok(None);
        };
        check_range(key, range, k.len)?;
        let kept_from = k.len - k.tail.len() as u64;
        if range.start < kept_from {
            return Err(footer_only(key));
        }
        let (s, e) = (
            (range.start - kept_from) as usize,
            (range.end - kept_from) as usize,
        );
        Ok(Some(k.tail.slice(s..e)))
    }

    async fn size(&self, key: &ObjectKey) -> CasResult<Option<u64>> {
        Ok(self.kept(key).map(|k| k.len))
    }

    async fn list(&self, prefix: &str) -> CasResult<Vec<ObjectKey>> {
        Ok(self
            .objects()
            .keys()
            .filter(|k| k.as_str().starts_with(prefix))
            .cloned()
            .collect())
    }

    async fn delete(&self, key: &ObjectKey) -> CasResult<bool> {
        Ok(self.objects().remove(key).is_some())
    }
}

fn footer_only(key: &ObjectKey) -> CasError {
    CasError::storage(format!(
        "the verification store keeps only the footer of {key}"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tails_span_parts() {
        let parts = [Bytes::from_static(b"abc"), Bytes::from_static(b"defg")];
        assert_eq!(tail_of(&parts, 5), Bytes::from_static(b"cdefg"));
        assert_eq!(tail_of(&parts, 2), Bytes::from_static(b"fg"));
        assert_eq!(tail_of(&parts, 99), Bytes::from_static(b"abcdefg"));
    }

    #[tokio::test]
    async fn keeps_xorb_tails_and_refuses_reads_before_them() {
        let b = FooterBackend::default();
        let h = xet_hash::chunk_hash(b"x");
        let big = Bytes::from(vec![7u8; FOOTER_ROOM as usize + 10]);
        assert!(
            b.put_if_absent(&ObjectKey::xorb(&h), big.clone())
                .await
                .unwrap()
        );
        let key = ObjectKey::xorb(&h);
        let len = big.len() as u64;
        assert_eq!(b.size(&key).await.unwrap(), Some(len));
        let end = b
            .get_range(&key, ByteRange::new(len - 4, len))
            .await
            .unwrap();
        assert_eq!(end, Some(big.slice(big.len() - 4..)));
        assert!(b.get_range(&key, ByteRange::new(0, 4)).await.is_err());
        assert!(b.get(&key).await.is_err());
        let shard = ObjectKey::shard(&h);
        assert!(b.put_if_absent(&shard, big.clone()).await.unwrap());
        assert_eq!(b.get(&shard).await.unwrap(), Some(big));
        assert!(!b.put_if_absent(&shard, Bytes::new()).await.unwrap());
    }
}
