//! The graph garbage collection, `check` and `stats` read (`docs/STORE.md`, "Deletion
//! and garbage collection"): which files the repositories and buckets name, and what
//! every stored shard registers and names.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::SystemTime;

use xet_cas::{CasError, Result};
use xet_hash::MerkleHash;
use xet_hub::{CommitId, ObjectId, RepoRecord, RepoRef, RepoStore, RepoType, Repos};

use super::backend::{AgedObject, HUB_PREFIX, ObjectBackend, SHARD_PREFIX, XORB_PREFIX};
use super::cas::StoreCas;
use super::format;

/// A repository or bucket and the files its live commits name (Xet hash → size).
#[derive(Debug, Clone)]
pub struct RepoFiles {
    pub record: RepoRecord,
    pub files: HashMap<MerkleHash, u64>,
}

/// A stored shard: what it registers and names.
#[derive(Debug, Clone)]
pub struct ShardFacts {
    pub object: AgedObject,
    /// `None` when the stored shard does not parse (it is then never reclaimed).
    pub files: Option<Vec<(MerkleHash, Option<[u8; 32]>)>>,
    /// Every xorb named by a file's terms or a CAS block.
    pub xorbs: HashSet<MerkleHash>,
}

/// The files every record names, read through the Hub layer.
pub(super) async fn repo_files<B: ObjectBackend>(
    store: &Arc<StoreCas<B>>,
) -> Result<Vec<RepoFiles>> {
    let repos = Repos::new(store.clone() as Arc<dyn RepoStore>);
    let mut out = Vec::new();
    for record in records(store).await? {
        out.push(files_of(store, &repos, record).await?);
    }
    Ok(out)
}

/// The files the live commits of `record`'s repository or bucket name.
pub(super) async fn files_of<B: ObjectBackend>(
    store: &Arc<StoreCas<B>>,
    repos: &Repos,
    record: RepoRecord,
) -> Result<RepoFiles> {
    // A bucket's objects and branch may live under a storage name of its own.
    let repo = record.storage();
    let mut walk = Walk::default();
    if record.kind == RepoType::Bucket {
        // Only a bucket's head is shown: older commits name nothing live.
        let branch = xet_hub::bucket::incarnation_branch(record.incarnation.unwrap_or(0));
        if let Some(head) = store.branch(&repo, &branch).await? {
            walk.commit(repos, &repo, head.commit, false).await?;
        }
    } else {
        for (_, head) in store.branches(&repo).await? {
            walk.commit(repos, &repo, head.commit, true).await?;
        }
    }
    Ok(RepoFiles {
        record,
        files: walk.files,
    })
}

/// Every live repository record (buckets included): the names found under
/// `hub/repos/` that have a record, each read as the Hub layer reads it (its current
/// version; a deleted one is left out).
pub(super) async fn records<B: ObjectBackend>(store: &StoreCas<B>) -> Result<Vec<RepoRecord>> {
    // One record object per name is enough to learn the name; the current one is read
    // through the record chain.
    let mut seen = std::collections::BTreeMap::new();
    for key in store.backend().list(&format!("{HUB_PREFIX}repos/")).await? {
        let k = key.as_str();
        let Some(rest) = k.strip_prefix(&format!("{HUB_PREFIX}repos/")) else {
            continue;
        };
        let Some((rk, tail)) = rest.split_once('/') else {
            continue;
        };
        if tail == "record" || tail.starts_with("records/") {
            seen.entry(rk.to_string()).or_insert(key);
        }
    }
    let mut out = Vec::new();
    for key in seen.into_values() {
        let Some(bytes) = store.backend().get(&key).await? else {
            continue; // gone since the listing
        };
        let Some(repo) = names_of(&bytes) else {
            return Err(CasError::storage(format!("the record {key} is not valid")));
        };
        if let Some(record) = store.repo(&repo).await? {
            out.push(record);
        }
    }
    Ok(out)
}

/// The repository a stored record version (a record or a deletion) names.
fn names_of(bytes: &[u8]) -> Option<RepoRef> {
    #[derive(serde::Deserialize)]
    struct Names {
        kind: RepoType,
        id: xet_hub::RepoId,
    }
    let n: Names = serde_json::from_slice(bytes).ok()?;
    Some(RepoRef::new(n.kind, n.id))
}

#[derive(Default)]
struct Walk {
    commits: HashSet<CommitId>,
    trees: HashSet<ObjectId>,
    files: HashMap<MerkleHash, u64>,
}

impl Walk {
    /// The files of `id`'s tree and, with `history`, of every ancestor's.
    async fn commit(
        &mut self,
        repos: &Repos,
        repo: &RepoRef,
        id: CommitId,
        history: bool,
    ) -> Result<()> {
        let mut next = Some(id);
        while let Some(id) = next.take() {
            if !self.commits.insert(id) {
                break;
            }
            let commit = repos
                .commit(repo, &id)
                .await
                .map_err(store_error)?
                .ok_or_else(|| {
                    CasError::storage(format!(
                        "repository {repo}: commit {id} is named but not stored"
                    ))
                })?;
            self.tree(repos, repo, commit.tree).await?;
            if history {
                next = commit.parent;
            }
        }
        Ok(())
    }

    async fn tree(&mut self, repos: &Repos, repo: &RepoRef, root: ObjectId) -> Result<()> {
        let mut stack = vec![root];
        while let Some(id) = stack.pop() {
            if !self.trees.insert(id) {
                continue;
            }
            let folder = repos.folder(repo, &id).await.map_err(store_error)?;
            for (_, item) in &folder.entries {
                match item {
                    xet_hub::Item::File(e) => {
                        self.files.insert(e.xet_hash, e.size);
                    }
                    xet_hub::Item::Folder(child) => stack.push(*child),
                }
            }
        }
        Ok(())
    }
}

fn store_error(e: xet_hub::RepoError) -> CasError {
    match e {
        xet_hub::RepoError::Store(e) => e,
        other => CasError::storage(other.to_string()),
    }
}

/// Every stored shard, parsed, with its age (as listed now). A shard `known` holds (read
/// earlier in this process) is not read again: a shard's name is the hash of its bytes,
/// so what it registers and names cannot have changed; its presence and age are this
/// listing's.
pub(super) async fn shards<B: ObjectBackend>(
    store: &StoreCas<B>,
    known: &[ShardFacts],
) -> Result<Vec<ShardFacts>> {
    use futures_util::{StreamExt, TryStreamExt};
    let listed = store.backend().list_aged(SHARD_PREFIX).await?;
    let (mut out, unseen) = {
        let known: HashMap<&super::backend::ObjectKey, &ShardFacts> =
            known.iter().map(|s| (&s.object.key, s)).collect();
        let (seen, unseen): (Vec<AgedObject>, Vec<AgedObject>) =
            listed.into_iter().partition(|o| known.contains_key(&o.key));
        let out: Vec<ShardFacts> = seen
            .into_iter()
            .map(|object| {
                let facts = known[&object.key];
                ShardFacts {
                    object,
                    files: facts.files.clone(),
                    xorbs: facts.xorbs.clone(),
                }
            })
            .collect();
        (out, unseen)
    };
    // Several reads in flight: on S3 each is a round trip, and a store holds many shards.
    let read: Vec<Option<ShardFacts>> = futures_util::stream::iter(unseen)
        .map(|object| read_shard(store, object))
        .buffer_unordered(SHARD_READS_AT_ONCE)
        .try_collect()
        .await?;
    out.extend(read.into_iter().flatten());
    out.sort_by(|a, b| a.object.key.cmp(&b.object.key));
    Ok(out)
}

/// Stored shards read at once while marking.
const SHARD_READS_AT_ONCE: usize = 16;

/// A stored shard's facts; `None` if it was deleted since it was listed.
async fn read_shard<B: ObjectBackend>(
    store: &StoreCas<B>,
    object: AgedObject,
) -> Result<Option<ShardFacts>> {
    let Some(bytes) = store.backend().get(&object.key).await? else {
        return Ok(None);
    };
    let parsed = tokio::task::spawn_blocking(move || format::parse_stored_shard(&bytes))
        .await
        .map_err(|e| CasError::storage_with("a shard parsing task failed", e))?;
    Ok(Some(match parsed {
        Ok(content) => facts_of(object, &content),
        Err(e) => {
            tracing::warn!(shard = %object.key, error = %e, "a stored shard does not parse; it is kept");
            ShardFacts {
                object,
                files: None,
                xorbs: HashSet::new(),
            }
        }
    }))
}

fn facts_of(object: AgedObject, c: &format::ShardContent) -> ShardFacts {
    let mut xorbs: HashSet<MerkleHash> = c.xorbs.iter().map(|x| x.hash).collect();
    for f in &c.files {
        xorbs.extend(f.terms.iter().map(|t| t.xorb));
    }
    ShardFacts {
        object,
        files: Some(c.files.iter().map(|f| (f.hash, f.sha256)).collect()),
        xorbs,
    }
}

/// Every stored xorb with its age.
pub(super) async fn xorbs<B: ObjectBackend>(store: &StoreCas<B>) -> Result<Vec<AgedObject>> {
    store.backend().list_aged(XORB_PREFIX).await
}

/// What one mark found: the live sets and everything stored.
pub(super) struct Marked {
    pub shards: Vec<ShardFacts>,
    pub xorbs: Vec<AgedObject>,
    pub live_files: HashSet<MerkleHash>,
    pub live_shards: HashSet<MerkleHash>,
    pub live_xorbs: HashSet<MerkleHash>,
}

/// Marks the store: roots first (records and heads), then the shards and xorbs, so an
/// object written after the roots were read is at worst young, never missed. The shards
/// of an earlier mark (`known`) are not read again (see [`shards`]).
pub(super) async fn mark<B: ObjectBackend>(
    store: &Arc<StoreCas<B>>,
    young_after: SystemTime,
    known: &[ShardFacts],
) -> Result<Marked> {
    let repos = repo_files(store).await?;
    let shards = shards(store, known).await?;
    let xorbs = xorbs(store).await?;
    let live_files: HashSet<MerkleHash> =
        repos.iter().flat_map(|r| r.files.keys().copied()).collect();
    let mut live_shards = HashSet::new();
    let mut live_xorbs = HashSet::new();
    for s in &shards {
        let Some(h) = s.object.key.shard_hash() else {
            continue;
        };
        let live = s.object.written > young_after
            || s.files
                .as_ref()
                .is_none_or(|fs| fs.iter().any(|(f, _)| live_files.contains(f)));
        if live {
            live_shards.insert(h);
            live_xorbs.extend(s.xorbs.iter().copied());
        }
    }
    for x in &xorbs {
        if x.written > young_after
            && let Some(h) = x.key.xorb_hash()
        {
            live_xorbs.insert(h);
        }
    }
    Ok(Marked {
        shards,
        xorbs,
        live_files,
        live_shards,
        live_xorbs,
    })
}
