//! Versioned chains: how a Hub value that changes (a branch head, a repository record, the
//! holder of a bucket's storage, a discussion) is kept in objects that never change.
//!
//! A chain is the objects `…/<version>` for versions 1, 2, … without gaps, each written
//! by put-if-absent and never removed, plus a hint naming the last version its last
//! writer created. Its value is the highest version present. Changing it from version
//! `v` is the put-if-absent of version `v + 1`: of several writers racing from `v`, in
//! any processes, exactly one creates it, which is a compare-and-swap with no lock and
//! nothing but the backend's atomic put-if-absent (`link`/`renameat2` on a directory, a
//! conditional `PutObject` on S3).

use bytes::Bytes;
use xet_cas::Result;

use super::backend::{HubName, ObjectBackend, ObjectKey};

/// Which chain: a branch of a repository, a repository's record, the holder of a bucket
/// storage, or a discussion (each by the hub names of the repository and branch, or the
/// discussion's number).
#[derive(Debug, Clone, Copy)]
pub(crate) enum Chain {
    Branch(HubName, HubName),
    Record(HubName),
    Holder(HubName),
    /// A discussion (or pull request) of a repository, by its number.
    Discussion(HubName, u64),
}

impl Chain {
    /// The object of version `version`.
    pub(crate) fn version(&self, version: u64) -> ObjectKey {
        match self {
            Chain::Branch(rk, bk) => ObjectKey::hub_branch_version(rk, bk, version),
            Chain::Record(rk) => ObjectKey::hub_record_version(rk, version),
            Chain::Holder(rk) => ObjectKey::hub_holder_version(rk, version),
            Chain::Discussion(rk, num) => ObjectKey::hub_discussion_version(rk, *num, version),
        }
    }

    fn hint(&self) -> ObjectKey {
        match self {
            Chain::Branch(rk, bk) => ObjectKey::hub_branch_hint(rk, bk),
            Chain::Record(rk) => ObjectKey::hub_record_hint(rk),
            Chain::Holder(rk) => ObjectKey::hub_holder_hint(rk),
            Chain::Discussion(rk, num) => ObjectKey::hub_discussion_hint(rk, *num),
        }
    }

    /// The last version of the chain, `None` if it has none, found without a listing:
    /// from the hint its last writer left (current, or behind after a crash or a race
    /// between writers) forward, the step doubling while versions are present, then
    /// halving back to the last one. Two reads past the version itself when the hint is
    /// current; O(log n) without one (stores written before hints, or a hint being
    /// rewritten).
    pub(crate) async fn head<B: ObjectBackend>(&self, backend: &B) -> Result<Option<u64>> {
        let present = |v: u64| {
            let key = self.version(v);
            async move { backend.exists(&key).await }
        };
        let mut lo = match self.hinted(backend).await? {
            Some(v) if v >= 1 && present(v).await? => v,
            _ if present(1).await? => 1,
            _ => return Ok(None),
        };
        // `lo` is present; find a missing `hi` above it, then close in.
        let mut step = 1u64;
        let mut hi = loop {
            let probe = lo.saturating_add(step);
            if probe == lo || !present(probe).await? {
                break probe;
            }
            lo = probe;
            step = step.saturating_mul(2);
        };
        while hi - lo > 1 {
            let mid = lo + (hi - lo) / 2;
            if present(mid).await? {
                lo = mid;
            } else {
                hi = mid;
            }
        }
        Ok(Some(lo))
    }

    /// The version the hint names; `None` if there is none or it does not read as a
    /// version (it is advice: [`head`](Chain::head) checks it).
    async fn hinted<B: ObjectBackend>(&self, backend: &B) -> Result<Option<u64>> {
        let Some(bytes) = backend.get(&self.hint()).await? else {
            return Ok(None);
        };
        Ok(std::str::from_utf8(&bytes)
            .ok()
            .and_then(|s| s.trim().parse().ok()))
    }

    /// Write `body` as version `version` (the compare-and-swap from `version - 1`);
    /// whether this call created it. The winner points the hint at its version.
    pub(crate) async fn put<B: ObjectBackend>(
        &self,
        backend: &B,
        version: u64,
        body: Bytes,
    ) -> Result<bool> {
        let created = backend.put_if_absent(&self.version(version), body).await?;
        if created {
            self.write_hint(backend, version).await;
        }
        Ok(created)
    }

    /// Point the hint at `version`, which its writer just created. Best effort: a hint
    /// missing, or left behind by a racing writer, costs readers a few more probes,
    /// never a wrong head.
    async fn write_hint<B: ObjectBackend>(&self, backend: &B, version: u64) {
        let key = self.hint();
        let written = async {
            backend.delete(&key).await?;
            backend
                .put_if_absent(&key, Bytes::from(version.to_string()))
                .await
        };
        if let Err(e) = written.await {
            tracing::debug!("cannot update {key} to version {version}: {e}");
        }
    }
}
