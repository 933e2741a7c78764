//! Object backends: where a [`crate::StoreCas`] keeps its bytes.
//!
//! The semantics are those of an object store (S3, GCS, a directory): whole objects are
//! written once and never modified, reads may be ranged. A backend only ever sees keys
//! built by [`ObjectKey`] from hashes (or a few fixed metadata names), never anything
//! taken from a request path.

use std::collections::BTreeMap;
use std::sync::{Arc, RwLock};

use bytes::Bytes;
use xet_hash::MerkleHash;

use xet_cas::{ByteRange, CasError, Result};
use xet_hub::store::RepoObject;

/// Prefix of stored xorbs (footered form): `xorbs/<hash>`.
pub const XORB_PREFIX: &str = "xorbs/";
/// Prefix of stored shards (stored form): `shards/<hash>.mdb`.
pub const SHARD_PREFIX: &str = "shards/";
/// Prefix of store metadata: `meta/<name>`.
pub const META_PREFIX: &str = "meta/";
/// Prefix of Hub repositories and sha256 records: `hub/…` (see `docs/STORE.md`).
pub const HUB_PREFIX: &str = "hub/";
const SHARD_SUFFIX: &str = ".mdb";
const HUB_REPOS: &str = "hub/repos/";
const HUB_SHA256: &str = "hub/sha256/";
const HUB_FILES: &str = "hub/files/";
const HUB_BUCKETS: &str = "hub/buckets/";
const HUB_LISTED: &str = "hub/listed/";

/// A repository or branch name as it appears in a hub key: the first 16 bytes of its
/// SHA-256, never the name itself (see `xet_store`'s `RepoStore` implementation).
pub type HubName = [u8; 16];

/// The name of an object. Only four shapes exist, and every one is safe as a relative
/// file path or an S3 key: `xorbs/<hash>`, `shards/<hash>.mdb`, `meta/<name>` where
/// `<hash>` is a 64-digit XET hash string and `<name>` is `[a-z0-9-]{1,64}`, and the hub
/// objects, built from fixed-size hashes only (lowercase hex; `<rk>` and `<bk>` are a
/// [`HubName`] of a repository and a branch, `<version>` 20 decimal digits):
///
/// ```text
/// hub/repos/<rk>/record
/// hub/repos/<rk>/records/<version>
/// hub/repos/<rk>/holders/<version>
/// hub/repos/<rk>/commits/<40 hex git id>
/// hub/repos/<rk>/trees/<40 hex git id>
/// hub/repos/<rk>/facts/<40 hex git id of the tree>
/// hub/repos/<rk>/sha256/<64 hex sha256>
/// hub/repos/<rk>/branches/<bk>/<version>
/// hub/repos/<rk>/discussions/<num>/<version>
/// hub/sha256/<64 hex sha256>
/// hub/files/<64-digit Xet hash>/<rk>
/// hub/buckets/<rk>
/// hub/listed/<rk>
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ObjectKey(String);

impl ObjectKey {
    pub fn xorb(hash: &MerkleHash) -> Self {
        ObjectKey(format!("{XORB_PREFIX}{hash}"))
    }

    pub fn shard(hash: &MerkleHash) -> Self {
        ObjectKey(format!("{SHARD_PREFIX}{hash}{SHARD_SUFFIX}"))
    }

    /// A metadata object. Panics on a name outside `[a-z0-9-]{1,64}` (names are constants).
    pub fn meta(name: &str) -> Self {
        assert!(
            valid_meta_name(name),
            "invalid metadata object name {name:?}"
        );
        ObjectKey(format!("{META_PREFIX}{name}"))
    }

    /// The record of a repository.
    pub fn hub_record(repo: &HubName) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/record", hex(repo)))
    }

    /// Version `version` of a repository's record (the record, or its deletion), after
    /// its `version`-th change; the first record of a store written before versions is
    /// [`hub_record`](Self::hub_record).
    pub fn hub_record_version(repo: &HubName, version: u64) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/records/{version:020}", hex(repo)))
    }

    /// The hint of a record's version (outside `records/`), as for a branch.
    pub fn hub_record_hint(repo: &HubName) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/record-head", hex(repo)))
    }

    /// Version `version` of the holder of a bucket storage (the name holding it).
    pub fn hub_holder_version(repo: &HubName, version: u64) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/holders/{version:020}", hex(repo)))
    }

    /// The hint of a storage holder's version.
    pub fn hub_holder_hint(repo: &HubName) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/holder-head", hex(repo)))
    }

    /// A git object of a repository (`commits/`, `trees/`: the SHA-1 of its bytes), or
    /// the file facts of tree `id` (`facts/`).
    pub fn hub_object(repo: &HubName, kind: RepoObject, id: &[u8; 20]) -> Self {
        let dir = match kind {
            RepoObject::Commit => "commits",
            RepoObject::Tree => "trees",
            RepoObject::Facts => "facts",
        };
        ObjectKey(format!("{HUB_REPOS}{}/{dir}/{}", hex(repo), hex(id)))
    }

    /// The Xet file a repository committed as an LFS file with this sha256.
    pub fn hub_repo_sha256(repo: &HubName, sha256: &[u8; 32]) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/sha256/{}", hex(repo), hex(sha256)))
    }

    /// The prefix every branch object of a repository starts with.
    pub fn hub_branches_prefix(repo: &HubName) -> String {
        format!("{HUB_REPOS}{}/branches/", hex(repo))
    }

    /// The prefix every version of one branch starts with.
    pub fn hub_branch_prefix(repo: &HubName, branch: &HubName) -> String {
        format!("{}{}/", Self::hub_branches_prefix(repo), hex(branch))
    }

    /// The hint of a branch's head: the decimal version its last mover wrote there
    /// (outside `branches/`, so listings of versions never see it).
    pub fn hub_branch_hint(repo: &HubName, branch: &HubName) -> Self {
        ObjectKey(format!("{HUB_REPOS}{}/heads/{}", hex(repo), hex(branch)))
    }

    /// Version `version` of a branch: where it pointed after its `version`-th move.
    pub fn hub_branch_version(repo: &HubName, branch: &HubName, version: u64) -> Self {
        ObjectKey(format!(
            "{}{version:020}",
            Self::hub_branch_prefix(repo, branch)
        ))
    }

    /// Version `version` of discussion (or pull request) `num` of a repository.
    pub fn hub_discussion_version(repo: &HubName, num: u64, version: u64) -> Self {
        ObjectKey(format!(
            "{HUB_REPOS}{}/discussions/{num:020}/{version:020}",
            hex(repo)
        ))
    }

    /// The hint of a discussion's version, as for a branch.
    pub fn hub_discussion_hint(repo: &HubName, num: u64) -> Self {
        ObjectKey(format!(
            "{HUB_REPOS}{}/discussion-heads/{num:020}",
            hex(repo)
        ))
    }

    /// The verified file of a sha256.
    pub fn hub_sha256(sha256: &[u8; 32]) -> Self {
        ObjectKey(format!("{HUB_SHA256}{}", hex(sha256)))
    }

    /// The mark that repository `repo` references `file` (empty).
    pub fn hub_file_reference(file: &MerkleHash, repo: &HubName) -> Self {
        ObjectKey(format!(
            "{}{}",
            Self::hub_file_references_prefix(file),
            hex(repo)
        ))
    }

    /// The mark that bucket `repo` exists (empty; what listing buckets reads).
    pub fn hub_bucket(repo: &HubName) -> Self {
        ObjectKey(format!("{HUB_BUCKETS}{}", hex(repo)))
    }

    /// The prefix of every [`hub_bucket`](Self::hub_bucket) mark.
    pub fn hub_buckets_prefix() -> &'static str {
        HUB_BUCKETS
    }

    /// The bucket of a [`hub_bucket`](Self::hub_bucket) key.
    pub fn bucket_repo(&self) -> Option<HubName> {
        unhex(self.0.strip_prefix(HUB_BUCKETS)?)
    }

    /// The mark that repository `repo` (a model, dataset or space) exists: what listing
    /// repositories reads.
    pub fn hub_listed(repo: &HubName) -> Self {
        ObjectKey(format!("{HUB_LISTED}{}", hex(repo)))
    }

    /// The prefix of every [`hub_listed`](Self::hub_listed) mark.
    pub fn hub_listed_prefix() -> &'static str {
        HUB_LISTED
    }

    /// The repository of a [`hub_listed`](Self::hub_listed) key.
    pub fn listed_repo(&self) -> Option<HubName> {
        unhex(self.0.strip_prefix(HUB_LISTED)?)
    }

    /// The prefix of every [`hub_file_reference`](Self::hub_file_reference) of `file`.
    pub fn hub_file_references_prefix(file: &MerkleHash) -> String {
        format!("{HUB_FILES}{file}/")
    }

    /// The prefix of every [`hub_file_reference`](Self::hub_file_reference).
    pub fn hub_files_prefix() -> &'static str {
        HUB_FILES
    }

    /// The file of a [`hub_file_reference`](Self::hub_file_reference) key.
    pub fn file_reference_file(&self) -> Option<MerkleHash> {
        let rest = self.0.strip_prefix(HUB_FILES)?;
        match rest.split('/').collect::<Vec<_>>()[..] {
            [file, rk] if is_hex(rk, 32) => parse_hash(file),
            _ => None,
        }
    }

    /// The repository of a [`hub_file_reference`](Self::hub_file_reference) key.
    pub fn file_reference_repo(&self) -> Option<HubName> {
        let rest = self.0.strip_prefix(HUB_FILES)?;
        match rest.split('/').collect::<Vec<_>>()[..] {
            [_, rk] => unhex(rk),
            _ => None,
        }
    }

    /// The branch and version of a [`hub_branch_version`](Self::hub_branch_version) key.
    pub fn branch_version(&self) -> Option<(HubName, u64)> {
        let rest = self.0.strip_prefix(HUB_REPOS)?;
        match rest.split('/').collect::<Vec<_>>()[..] {
            [_, "branches", bk, v] => Some((unhex(bk)?, parse_version(v)?)),
            _ => None,
        }
    }

    /// Whether every writer of this key writes the same bytes (the name is a hash of the
    /// content, or the content a function of the name), so that a racing writer
    /// overwriting it changes nothing. Backends that cannot put-if-absent atomically may
    /// write only these with a check and a plain write; the others (metadata, repository
    /// records, branch versions) need a real put-if-absent.
    pub fn is_content_addressed(&self) -> bool {
        // A verified sha256 names one content, whose Xet hash is a function of it; a
        // tree's facts are a function of the tree's blob ids.
        self.0.starts_with(XORB_PREFIX)
            || self.0.starts_with(SHARD_PREFIX)
            || self.0.starts_with(HUB_SHA256)
            || self.0.starts_with(HUB_FILES)
            || self.0.starts_with(HUB_BUCKETS)
            || self.0.starts_with(HUB_LISTED)
            || (self.0.starts_with(HUB_REPOS)
                && ["/commits/", "/trees/", "/facts/", "/sha256/"]
                    .iter()
                    .any(|d| self.0.contains(d)))
    }

    /// Parse a key found while listing a backend; `None` for anything that is not one of
    /// the four shapes (foreign files are ignored, never served).
    pub fn parse(s: &str) -> Option<Self> {
        if let Some(h) = s.strip_prefix(XORB_PREFIX) {
            return parse_hash(h).map(|h| ObjectKey::xorb(&h));
        }
        if let Some(rest) = s.strip_prefix(SHARD_PREFIX) {
            return parse_hash(rest.strip_suffix(SHARD_SUFFIX)?).map(|h| ObjectKey::shard(&h));
        }
        if let Some(name) = s.strip_prefix(META_PREFIX) {
            return valid_meta_name(name).then(|| ObjectKey(s.to_string()));
        }
        if let Some(rest) = s.strip_prefix(HUB_PREFIX) {
            return valid_hub_key(rest).then(|| ObjectKey(s.to_string()));
        }
        None
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// The hash of a xorb key.
    pub fn xorb_hash(&self) -> Option<MerkleHash> {
        self.0.strip_prefix(XORB_PREFIX).and_then(parse_hash)
    }

    /// The hash of a shard key.
    pub fn shard_hash(&self) -> Option<MerkleHash> {
        self.0
            .strip_prefix(SHARD_PREFIX)
            .and_then(|r| r.strip_suffix(SHARD_SUFFIX))
            .and_then(parse_hash)
    }
}

impl std::fmt::Display for ObjectKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

fn parse_hash(s: &str) -> Option<MerkleHash> {
    // Only the canonical lowercase form, so one hash has exactly one key.
    if s.len() != 64
        || !s
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
    {
        return None;
    }
    MerkleHash::from_hex(s).ok()
}

/// Whether `rest` (a key after `hub/`) is one of the shapes the `hub_*` constructors build.
fn valid_hub_key(rest: &str) -> bool {
    match rest.split('/').collect::<Vec<_>>()[..] {
        ["repos", rk, "record"] => is_hex(rk, 32),
        ["repos", rk, "records" | "holders", v] => is_hex(rk, 32) && parse_version(v).is_some(),
        ["repos", rk, "commits" | "trees" | "facts", id] => is_hex(rk, 32) && is_hex(id, 40),
        ["repos", rk, "sha256", h] => is_hex(rk, 32) && is_hex(h, 64),
        ["repos", rk, "branches", bk, v] => {
            is_hex(rk, 32) && is_hex(bk, 32) && parse_version(v).is_some()
        }
        ["repos", rk, "discussions", n, v] => {
            is_hex(rk, 32) && parse_version(n).is_some() && parse_version(v).is_some()
        }
        ["sha256", h] => is_hex(h, 64),
        ["files", file, rk] => is_hex(file, 64) && is_hex(rk, 32),
        ["buckets" | "listed", rk] => is_hex(rk, 32),
        _ => false,
    }
}

/// `len` lowercase hex digits (the only form the constructors write, so one name has
/// exactly one key).
fn is_hex(s: &str, len: usize) -> bool {
    s.len() == len
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

use xet_hash::hex::encode as hex;

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if !is_hex(s, 2 * N) {
        return None;
    }
    let mut out = [0u8; N];
    for (o, pair) in out.iter_mut().zip(s.as_bytes().chunks(2)) {
        let digits = std::str::from_utf8(pair).ok()?;
        *o = u8::from_str_radix(digits, 16).ok()?;
    }
    Some(out)
}

/// A branch version: exactly 20 decimal digits holding a `u64`.
fn parse_version(s: &str) -> Option<u64> {
    if s.len() != 20 || !s.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    s.parse().ok()
}

fn valid_meta_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 64
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
}

/// An immutable-object store.
///
/// Contract (checked by `xet_cas_conformance::backend`):
/// - [`put_if_absent`](ObjectBackend::put_if_absent) is atomic: a concurrent or later
///   reader sees either no object or the whole object, never a prefix, even if the
///   process dies mid-write. Two racing puts of one key: exactly one returns `true`.
/// - Objects are never modified once written.
/// - [`get_range`](ObjectBackend::get_range) returns exactly `range.len()` bytes; a range
///   past the end of the object is an error, never a short read.
/// - Missing objects are `Ok(None)` / `Ok(false)`; I/O failures are [`CasError::Storage`].
#[async_trait::async_trait]
pub trait ObjectBackend: Send + Sync + 'static {
    /// Write `data` under `key` unless an object already exists there. Returns whether
    /// this call wrote it.
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool>;

    /// [`put_if_absent`](ObjectBackend::put_if_absent) of the concatenation of `parts`,
    /// with the same contract. The default joins them; backends that can write the parts
    /// one after the other (a file, a multi-buffer request body) override it to save the
    /// copy (a stored xorb is the uploaded body plus a footer).
    async fn put_parts_if_absent(&self, key: &ObjectKey, parts: Vec<Bytes>) -> Result<bool> {
        let data = match <[Bytes; 1]>::try_from(parts) {
            Ok([one]) => one,
            Err(parts) => Bytes::from(parts.concat()),
        };
        self.put_if_absent(key, data).await
    }

    /// The whole object.
    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>>;

    /// Bytes `range` of the object (`None` if the object does not exist).
    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>>;

    /// Size of the object.
    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>>;

    async fn exists(&self, key: &ObjectKey) -> Result<bool> {
        Ok(self.size(key).await?.is_some())
    }

    /// Every key starting with `prefix` (e.g. [`SHARD_PREFIX`]), sorted.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>>;

    /// Remove an object; returns whether it existed. Only garbage collection
    /// (`StoreCas::gc`), maintenance tools and tests delete.
    async fn delete(&self, key: &ObjectKey) -> Result<bool>;

    /// Remove every object of `keys`: absent keys, and keys named more than once, are no
    /// error (removing what is not there succeeds). Unlike [`delete`](Self::delete) it
    /// does not tell which existed, which on S3 would cost a request per key; a caller
    /// that counts takes its counts from a listing. `Ok` once every key is gone; on an
    /// error some may be removed and others not, and calling again finishes (deletes are
    /// idempotent). The backend retries what its transport retries (on S3 the client
    /// retries each request); the caller does not retry, it reports the error. Only
    /// garbage collection deletes this way. The default removes one key at a time with
    /// [`delete`](Self::delete); S3 sends them 1,000 to a request (DeleteObjects).
    async fn delete_many(&self, keys: &[ObjectKey]) -> Result<()> {
        for key in keys {
            self.delete(key).await?;
        }
        Ok(())
    }

    /// Every key starting with `prefix`, sorted, with its size and when it was written:
    /// what garbage collection's grace period is measured against. A backend that cannot
    /// tell (the default) fails, and such a store is never collected.
    async fn list_aged(&self, prefix: &str) -> Result<Vec<AgedObject>> {
        let _ = prefix;
        Err(CasError::storage(
            "this store cannot tell when its objects were written, so it cannot be garbage-collected",
        ))
    }

    /// Remove what writers that died left behind (partial temporary files), never
    /// anything a live writer, in this process or another, is still using; returns how
    /// many were removed. [`crate::StoreCas::spawn_refresh`] calls it periodically
    /// (`FsBackend` also when it is opened). The default has nothing to remove: a
    /// backend whose writes are atomic leaves nothing behind.
    async fn remove_abandoned(&self) -> Result<usize> {
        Ok(0)
    }
}

#[async_trait::async_trait]
impl<B: ObjectBackend + ?Sized> ObjectBackend for Arc<B> {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        (**self).put_if_absent(key, data).await
    }
    async fn put_parts_if_absent(&self, key: &ObjectKey, parts: Vec<Bytes>) -> Result<bool> {
        (**self).put_parts_if_absent(key, parts).await
    }
    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
        (**self).get(key).await
    }
    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
        (**self).get_range(key, range).await
    }
    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
        (**self).size(key).await
    }
    async fn exists(&self, key: &ObjectKey) -> Result<bool> {
        (**self).exists(key).await
    }
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
        (**self).list(prefix).await
    }
    async fn remove_abandoned(&self) -> Result<usize> {
        (**self).remove_abandoned().await
    }
    async fn delete(&self, key: &ObjectKey) -> Result<bool> {
        (**self).delete(key).await
    }
    async fn delete_many(&self, keys: &[ObjectKey]) -> Result<()> {
        (**self).delete_many(keys).await
    }
    async fn list_aged(&self, prefix: &str) -> Result<Vec<AgedObject>> {
        (**self).list_aged(prefix).await
    }
}

/// An object as [`ObjectBackend::list_aged`] finds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgedObject {
    pub key: ObjectKey,
    pub size: u64,
    /// When it was written (objects are never modified).
    pub written: std::time::SystemTime,
}

/// Check `range` against an object of `size` bytes (shared by backends).
pub fn check_range(key: &ObjectKey, range: ByteRange, size: u64) -> Result<()> {
    if range.start > range.end || range.end > size {
        return Err(CasError::storage(format!(
            "range {}..{} is outside object {key} of {size} bytes",
            range.start, range.end
        )));
    }
    Ok(())
}

/// Objects in memory. Cloning shares the same objects.
#[derive(Debug, Clone, Default)]
pub struct MemoryBackend {
    objects: Arc<RwLock<BTreeMap<ObjectKey, Bytes>>>,
    /// When each object was written.
    written: Arc<RwLock<BTreeMap<ObjectKey, std::time::SystemTime>>>,
}

impl MemoryBackend {
    pub fn new() -> Self {
        Self::default()
    }

    /// Number of objects.
    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, BTreeMap<ObjectKey, Bytes>> {
        // A panic while holding the lock cannot leave a map half-updated (single inserts).
        self.objects.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, BTreeMap<ObjectKey, Bytes>> {
        self.objects.write().unwrap_or_else(|e| e.into_inner())
    }
}

#[async_trait::async_trait]
impl ObjectBackend for MemoryBackend {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        let mut map = self.write();
        if map.contains_key(key) {
            return Ok(false);
        }
        map.insert(key.clone(), data);
        self.written
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key.clone(), std::time::SystemTime::now());
        Ok(true)
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
        Ok(self.read().get(key).cloned())
    }

    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
        let Some(obj) = self.read().get(key).cloned() else {
            return Ok(None);
        };
        check_range(key, range, obj.len() as u64)?;
        Ok(Some(obj.slice(range.start as usize..range.end as usize)))
    }

    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
        Ok(self.read().get(key).map(|b| b.len() as u64))
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
        Ok(self
            .read()
            .keys()
            .filter(|k| k.as_str().starts_with(prefix))
            .cloned()
            .collect())
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool> {
        let removed = self.write().remove(key).is_some();
        self.written
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(key);
        Ok(removed)
    }

    async fn list_aged(&self, prefix: &str) -> Result<Vec<AgedObject>> {
        let written = self.written.read().unwrap_or_else(|e| e.into_inner());
        Ok(self
            .read()
            .iter()
            .filter(|(k, _)| k.as_str().starts_with(prefix))
            .map(|(k, v)| AgedObject {
                key: k.clone(),
                size: v.len() as u64,
                written: written.get(k).copied().unwrap_or(std::time::UNIX_EPOCH),
            })
            .collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_round_trip_and_reject_foreign_names() {
        let h = xet_hash::chunk_hash(b"x");
        let x = ObjectKey::xorb(&h);
        let s = ObjectKey::shard(&h);
        assert_eq!(ObjectKey::parse(x.as_str()), Some(x.clone()));
        assert_eq!(ObjectKey::parse(s.as_str()), Some(s.clone()));
        assert_eq!(x.xorb_hash(), Some(h));
        assert_eq!(s.shard_hash(), Some(h));
        assert_eq!(x.shard_hash(), None);
        assert_eq!(
            ObjectKey::parse("meta/dedup-secret"),
            Some(ObjectKey::meta("dedup-secret"))
        );
        for bad in [
            "xorbs/../etc/passwd",
            "xorbs/abc",
            "shards/x.mdb",
            &format!("xorbs/{}", h.to_string().to_uppercase()),
            &format!("shards/{h}"),
            &format!("shards/{h}.mdb.tmp"),
            "meta/",
            "meta/a/b",
            "tmp/x",
            "",
        ] {
            assert_eq!(ObjectKey::parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn hub_keys_round_trip_and_reject_everything_else() {
        let (rk, bk) = ([0xab; 16], [0x01; 16]);
        let record = ObjectKey::hub_record(&rk);
        let commit = ObjectKey::hub_object(&rk, RepoObject::Commit, &[0xcd; 20]);
        let tree = ObjectKey::hub_object(&rk, RepoObject::Tree, &[0xcd; 20]);
        let facts = ObjectKey::hub_object(&rk, RepoObject::Facts, &[0xcd; 20]);
        let repo_sha = ObjectKey::hub_repo_sha256(&rk, &[0xef; 32]);
        let version = ObjectKey::hub_branch_version(&rk, &bk, 7);
        let sha = ObjectKey::hub_sha256(&[0xef; 32]);
        let record_v = ObjectKey::hub_record_version(&rk, 3);
        let holder_v = ObjectKey::hub_holder_version(&rk, 2);
        let rks = "ab".repeat(16);
        assert_eq!(record.as_str(), format!("hub/repos/{rks}/record"));
        assert_eq!(
            record_v.as_str(),
            format!("hub/repos/{rks}/records/00000000000000000003")
        );
        assert_eq!(
            holder_v.as_str(),
            format!("hub/repos/{rks}/holders/00000000000000000002")
        );
        assert_eq!(
            commit.as_str(),
            format!("hub/repos/{rks}/commits/{}", "cd".repeat(20))
        );
        assert_eq!(
            version.as_str(),
            format!(
                "hub/repos/{rks}/branches/{}/00000000000000000007",
                "01".repeat(16)
            )
        );
        assert_eq!(sha.as_str(), format!("hub/sha256/{}", "ef".repeat(32)));
        assert_eq!(
            tree.as_str(),
            format!("hub/repos/{rks}/trees/{}", "cd".repeat(20))
        );
        assert_eq!(
            facts.as_str(),
            format!("hub/repos/{rks}/facts/{}", "cd".repeat(20))
        );
        assert_eq!(
            repo_sha.as_str(),
            format!("hub/repos/{rks}/sha256/{}", "ef".repeat(32))
        );
        let file_ref = ObjectKey::hub_file_reference(&MerkleHash::default(), &rk);
        assert_eq!(
            file_ref.as_str(),
            format!("hub/files/{}/{rks}", "0".repeat(64))
        );
        assert_eq!(file_ref.file_reference_repo(), Some(rk));
        assert_eq!(file_ref.file_reference_file(), Some(MerkleHash::default()));
        assert_eq!(record.file_reference_file(), None);
        assert!(file_ref.is_content_addressed());
        for k in [
            &record, &record_v, &holder_v, &commit, &tree, &facts, &repo_sha, &version, &sha,
            &file_ref,
        ] {
            assert_eq!(ObjectKey::parse(k.as_str()).as_ref(), Some(k));
        }
        assert!(
            version
                .as_str()
                .starts_with(&ObjectKey::hub_branch_prefix(&rk, &bk))
        );
        assert!(
            version
                .as_str()
                .starts_with(&ObjectKey::hub_branches_prefix(&rk))
        );
        assert_eq!(version.branch_version(), Some((bk, 7)));
        let last = ObjectKey::hub_branch_version(&rk, &bk, u64::MAX);
        assert_eq!(
            ObjectKey::parse(last.as_str()).and_then(|k| k.branch_version()),
            Some((bk, u64::MAX))
        );
        assert_eq!(commit.branch_version(), None);
        for k in [&commit, &tree, &facts, &repo_sha, &sha] {
            assert!(k.is_content_addressed(), "{k}");
        }
        for k in [&record, &record_v, &holder_v, &version] {
            assert!(!k.is_content_addressed(), "{k}");
        }
        assert!(!ObjectKey::meta("dedup-secret").is_content_addressed());

        let b = "01".repeat(16);
        for bad in [
            format!("hub/repos/{rks}"),
            format!("hub/repos/{rks}/"),
            format!("hub/repos/{rks}/record/x"),
            format!("hub/repos/{}/record", "AB".repeat(16)),
            format!("hub/repos/{}/record", "ab".repeat(15)),
            "hub/repos/org/model/record".to_string(),
            format!("hub/repos/{rks}/commits/{}", "cd".repeat(19)),
            format!("hub/repos/{rks}/commits/{}.tmp", "cd".repeat(20)),
            format!("hub/repos/{rks}/blobs/{}", "cd".repeat(20)),
            format!("hub/repos/{rks}/trees/{}", "cd".repeat(32)),
            format!("hub/repos/{rks}/sha256/{}", "cd".repeat(20)),
            format!("hub/files/{}", "0".repeat(64)),
            format!("hub/files/{}/{rks}/x", "0".repeat(64)),
            format!("hub/files/{}/{rks}", "0".repeat(63)),
            format!("hub/repos/{rks}/branches/{b}"),
            format!("hub/repos/{rks}/branches/{b}/7"),
            format!("hub/repos/{rks}/branches/{b}/99999999999999999999"),
            format!("hub/repos/{rks}/branches/main/00000000000000000001"),
            format!("hub/repos/{rks}/branches/{b}/00000000000000000001/x"),
            format!("hub/repos/{rks}/tags/{b}"),
            format!("hub/repos/{rks}/records/7"),
            format!("hub/repos/{rks}/holders/{b}"),
            format!("hub/repos/{rks}/record-head"),
            format!("hub/sha256/{}", "ef".repeat(31)),
            format!("hub/sha256/../{}", "ef".repeat(31)),
            "hub/".to_string(),
            "hub/x".to_string(),
        ] {
            assert_eq!(ObjectKey::parse(&bad), None, "{bad}");
        }
    }
}
