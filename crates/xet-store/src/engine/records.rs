//! Repository records and the holders of bucket storages, each a versioned chain
//! ([`Chain`]), so that they change by compare-and-swap across every process sharing the
//! backend:
//!
//! ```text
//! hub/repos/<rk>/record             the first record of a store written before versions (version 0)
//! hub/repos/<rk>/records/<version>  the record after its version-th change, or its deletion
//! hub/repos/<rk>/holders/<version>  the name holding the bucket storage <rk>
//! ```
//!
//! A deletion is a version too (never a removal), so a writer that read a record cannot
//! bring it back after someone deleted it: its put of the next version finds the
//! deletion there. Creating a repository again writes the version after its deletion.

use bytes::Bytes;
use xet_cas::{CasError, Result};
use xet_hub::{RecordHead, RepoId, RepoRecord, RepoRef, RepoType, StorageHolder};

use super::backend::{HubName, ObjectBackend, ObjectKey};
use super::cas::StoreCas;
use super::chains::Chain;
use super::repos::hub_repo_name;

/// What a version of a record holds: the record, or the repository's deletion (naming the
/// repository, as records do, so a read checks it is the one asked for).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(untagged)]
enum RecordVersion {
    Deleted {
        deleted: bool,
        kind: RepoType,
        id: RepoId,
    },
    Live(RepoRecord),
}

impl RecordVersion {
    fn names(&self) -> (RepoType, &RepoId) {
        match self {
            RecordVersion::Deleted { kind, id, .. } => (*kind, id),
            RecordVersion::Live(r) => (r.kind, &r.id),
        }
    }

    fn live(self) -> Option<RepoRecord> {
        match self {
            RecordVersion::Live(r) => Some(r),
            RecordVersion::Deleted { .. } => None,
        }
    }
}

/// What a version of a storage holder holds: the storage (as `type/id`, since a storage
/// name is no repository name) and the name holding it.
#[derive(serde::Serialize, serde::Deserialize)]
struct HolderObject {
    storage: String,
    name: RepoId,
}

fn storage_text(storage: &RepoRef) -> String {
    format!("{}/{}", storage.kind.as_str(), storage.id)
}

/// Changes a record may lose in a row to other writers before giving up (each loss is
/// another writer's change landing).
const MAX_RECORD_ATTEMPTS: u32 = 64;

impl<B: ObjectBackend> StoreCas<B> {
    /// The current version of the record kept at `rk` and what it holds, unchecked: the
    /// last version of its chain, else the record of a store written before versions
    /// (version 0).
    async fn record_version(&self, rk: &HubName) -> Result<Option<(u64, RecordVersion)>> {
        let chain = Chain::Record(*rk);
        let (version, key) = match chain.head(self.backend()).await? {
            Some(v) => (v, chain.version(v)),
            None => (0, ObjectKey::hub_record(rk)),
        };
        let Some(bytes) = self.backend().get(&key).await? else {
            // Found present above, unless there is no record at all (versions are never
            // removed; a store written before versions removed deleted records).
            return Ok(None);
        };
        let v: RecordVersion = serde_json::from_slice(&bytes)
            .map_err(|e| CasError::storage_with(format!("{key} is not a valid record"), e))?;
        Ok(Some((version, v)))
    }

    /// The record of `repo` with its version if it exists, checked to be `repo`'s.
    pub(super) async fn record_head(&self, repo: &RepoRef) -> Result<Option<RecordHead>> {
        let Some((version, v)) = self.record_version(&hub_repo_name(repo)).await? else {
            return Ok(None);
        };
        check_names(repo, &v)?;
        Ok(v.live().map(|record| RecordHead { record, version }))
    }

    /// The live record kept at `rk`, whichever repository it names (listings, which
    /// know hub names only, check that themselves).
    pub(super) async fn live_record_at(&self, rk: &HubName) -> Result<Option<RepoRecord>> {
        Ok(self.record_version(rk).await?.and_then(|(_, v)| v.live()))
    }

    /// Write `record` as the first version of `repo` or the one after its deletion;
    /// `false` if `repo` exists.
    pub(super) async fn create_record(&self, repo: &RepoRef, record: &RepoRecord) -> Result<bool> {
        check_record(repo, record)?;
        let rk = hub_repo_name(repo);
        let body = Bytes::from(
            serde_json::to_vec(&RecordVersion::Live(record.clone()))
                .map_err(|e| CasError::storage_with(format!("encoding the record of {repo}"), e))?,
        );
        for _ in 0..MAX_RECORD_ATTEMPTS {
            let next = match self.record_version(&rk).await? {
                Some((_, RecordVersion::Live(_))) => return Ok(false),
                Some((v, RecordVersion::Deleted { .. })) => v + 1,
                None => 1,
            };
            if Chain::Record(rk)
                .put(self.backend(), next, body.clone())
                .await?
            {
                return Ok(true);
            }
            // Another creator won the version: the next read finds its record.
        }
        Err(contention(repo))
    }

    /// Replace the record of `repo` at `from` by `to` (`None`: the deletion); the new
    /// version if this call wrote it.
    pub(super) async fn swap_record(
        &self,
        repo: &RepoRef,
        from: &RecordHead,
        to: Option<&RepoRecord>,
    ) -> Result<Option<u64>> {
        if let Some(to) = to {
            check_record(repo, to)?;
        }
        let rk = hub_repo_name(repo);
        // The record was at `from` only if that version holds `from.record`. Versions are
        // immutable, so this cannot change after the check; whether it is still the last
        // one is decided by the put below.
        let key = match from.version {
            0 => ObjectKey::hub_record(&rk),
            v => Chain::Record(rk).version(v),
        };
        let at_from = match self.backend().get(&key).await? {
            Some(bytes) => serde_json::from_slice::<RecordVersion>(&bytes).ok(),
            None => None,
        };
        if !matches!(at_from, Some(RecordVersion::Live(r)) if r == from.record) {
            return Ok(None);
        }
        let next = from
            .version
            .checked_add(1)
            .ok_or_else(|| contention(repo))?;
        let to = match to {
            Some(r) => RecordVersion::Live(r.clone()),
            None => RecordVersion::Deleted {
                deleted: true,
                kind: repo.kind,
                id: repo.id.clone(),
            },
        };
        let body = serde_json::to_vec(&to)
            .map_err(|e| CasError::storage_with(format!("encoding the record of {repo}"), e))?;
        let written = Chain::Record(rk)
            .put(self.backend(), next, Bytes::from(body))
            .await?;
        Ok(written.then_some(next))
    }

    /// Delete `repo` from whatever version it is at; `false` if it does not exist.
    pub(super) async fn delete_record(&self, repo: &RepoRef) -> Result<bool> {
        for _ in 0..MAX_RECORD_ATTEMPTS {
            let Some(head) = self.record_head(repo).await? else {
                return Ok(false);
            };
            if self.swap_record(repo, &head, None).await?.is_some() {
                return Ok(true);
            }
        }
        Err(contention(repo))
    }

    /// The holder of the storage kept at `rk`, unchecked.
    async fn holder_at(&self, rk: &HubName) -> Result<Option<(u64, HolderObject)>> {
        let chain = Chain::Holder(*rk);
        let Some(version) = chain.head(self.backend()).await? else {
            return Ok(None);
        };
        let key = chain.version(version);
        let Some(bytes) = self.backend().get(&key).await? else {
            return Err(CasError::storage(format!(
                "{key} was found but cannot be read"
            )));
        };
        let h: HolderObject = serde_json::from_slice(&bytes)
            .map_err(|e| CasError::storage_with(format!("{key} is not a valid holder"), e))?;
        Ok(Some((version, h)))
    }

    /// The holder of `storage`, checked to be `storage`'s.
    pub(super) async fn storage_holder_of(
        &self,
        storage: &RepoRef,
    ) -> Result<Option<StorageHolder>> {
        let Some((version, h)) = self.holder_at(&hub_repo_name(storage)).await? else {
            return Ok(None);
        };
        if h.storage != storage_text(storage) {
            return Err(CasError::storage(format!(
                "the holder read for storage {} belongs to {}",
                storage_text(storage),
                h.storage
            )));
        }
        Ok(Some(StorageHolder {
            name: h.name,
            version,
        }))
    }

    /// Make `name` the holder of `storage`, from version `from` (`None`: none yet).
    pub(super) async fn swap_holder(
        &self,
        storage: &RepoRef,
        from: Option<u64>,
        name: &RepoId,
    ) -> Result<bool> {
        let chain = Chain::Holder(hub_repo_name(storage));
        let next = match from {
            None => 1,
            // A version that is not there is no holder to move from (and putting the
            // one after it would leave a gap).
            Some(v) if !self.backend().exists(&chain.version(v)).await? => return Ok(false),
            Some(v) => v.checked_add(1).ok_or_else(|| contention(storage))?,
        };
        let body = serde_json::to_vec(&HolderObject {
            storage: storage_text(storage),
            name: name.clone(),
        })
        .map_err(|e| CasError::storage_with(format!("encoding the holder of {storage}"), e))?;
        chain.put(self.backend(), next, Bytes::from(body)).await
    }

    /// The record of the repository whose storage is kept at `rk`: through the storage's
    /// holder where one is set (a bucket kept apart from its name), else the record at
    /// `rk` itself; only if that record's storage is indeed `rk` (a name that was moved
    /// away, then created again elsewhere, holds nothing kept at its old place).
    pub(super) async fn record_of_storage(&self, rk: &HubName) -> Result<Option<RepoRecord>> {
        let record = match self.holder_at(rk).await? {
            Some((_, h)) => {
                let name = RepoRef::new(RepoType::Bucket, h.name);
                self.live_record_at(&hub_repo_name(&name)).await?
            }
            None => self.live_record_at(rk).await?,
        };
        Ok(record.filter(|r| hub_repo_name(&r.storage()) == *rk))
    }
}

/// A record naming another repository would make every later read of this one fail (see
/// [`check_names`]); refuse to write it.
fn check_record(repo: &RepoRef, record: &RepoRecord) -> Result<()> {
    if record.kind != repo.kind || record.id != repo.id {
        return Err(CasError::storage(format!(
            "refusing to store a record of {} {} as repository {repo}",
            record.kind, record.id
        )));
    }
    Ok(())
}

/// Keys are hashes of the names; this catches a record put under the wrong one.
fn check_names(repo: &RepoRef, v: &RecordVersion) -> Result<()> {
    let (kind, id) = v.names();
    if kind != repo.kind || *id != repo.id {
        return Err(CasError::storage(format!(
            "the record of repository {repo} describes {kind} {id}"
        )));
    }
    Ok(())
}

fn contention(repo: &RepoRef) -> CasError {
    CasError::storage(format!(
        "the record of {repo} kept changing under this write; try again"
    ))
}
