//! The store garbage collection is measured and tested on (the bench
//! `xtask/src/bench/gc.rs`, the store test `gc_requests`): one-file uploads of 1 to
//! 4 KiB, each its own xorb and shard; all but every `garbage_every`-th committed to the
//! model repository `org/live` in one commit, so the rest is garbage.

use std::sync::Arc;

use bytes::Bytes;
use xet_cas::Cas;
use xet_hash::MerkleHash;
use xet_hub::{
    BranchName, CommitMeta, FileEntry, Operation, RepoId, RepoPath, RepoRef, RepoStore, RepoType,
    Repos, Sha256,
};

use crate::upload_of;

pub type Error = Box<dyn std::error::Error + Send + Sync>;

/// How many files, which of them garbage, in how many folders, written how many at once.
#[derive(Debug, Clone, Copy)]
pub struct GcStore {
    pub files: usize,
    /// Every `garbage_every`-th file is named by no commit.
    pub garbage_every: usize,
    /// The committed files are spread over this many folders.
    pub folders: usize,
    /// Files written at once.
    pub at_once: usize,
}

/// File `i`: unique pseudo-random bytes, 1 to 4 KiB.
pub fn file(i: usize) -> Vec<u8> {
    let mut x = (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let len = 1024 + (i * 7919) % 3072;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x >> 24) as u8
        })
        .collect()
}

impl GcStore {
    /// Write the files into `store` (an upload's xorbs, then its shard, each), then the
    /// commit.
    pub async fn populate<S>(&self, store: Arc<S>) -> Result<(), Error>
    where
        S: Cas + RepoStore + 'static,
    {
        let mut written = Vec::with_capacity(self.files);
        let mut tasks = tokio::task::JoinSet::new();
        for i in 0..self.files {
            if tasks.len() >= self.at_once.max(1) {
                written.push(tasks.join_next().await.expect("a task")??);
            }
            let store = Arc::clone(&store);
            tasks.spawn(async move {
                let data = file(i);
                let hash = put_file(&*store, &data).await?;
                Ok::<_, Error>((i, hash, data.len() as u64))
            });
        }
        while let Some(done) = tasks.join_next().await {
            written.push(done??);
        }
        written.sort_unstable_by_key(|w| w.0);
        self.commit(store, &written).await
    }

    async fn commit<S>(
        &self,
        store: Arc<S>,
        written: &[(usize, MerkleHash, u64)],
    ) -> Result<(), Error>
    where
        S: RepoStore + 'static,
    {
        let ops = written
            .iter()
            .filter(|(i, _, _)| i % self.garbage_every != 0)
            .map(|&(i, hash, size)| {
                let folder = i % self.folders.max(1);
                Ok(Operation::Add {
                    path: RepoPath::parse(&format!("d{folder:03}/f{i:06}.bin"))?,
                    entry: FileEntry::lfs(hash, Sha256::from_bytes([1; 32]), size),
                })
            })
            .collect::<Result<Vec<_>, Error>>()?;
        let repos = Repos::new(store);
        let repo = RepoRef::new(RepoType::Model, RepoId::new("org", "live")?);
        repos.create(&repo, "bench", false, 1).await?;
        let meta = CommitMeta {
            summary: "live files".into(),
            author: "bench".into(),
            created_at: 1_800_000_000,
            ..CommitMeta::default()
        };
        repos
            .commit_to_branch(&repo, &BranchName::main(), None, &ops, &meta)
            .await?;
        Ok(())
    }
}

/// Store `data` as an upload would: its xorbs, then its shard. The file's hash.
pub async fn put_file(store: &dyn Cas, data: &[u8]) -> Result<MerkleHash, Error> {
    let up = upload_of(&[data.to_vec()]);
    for x in &up.xorbs {
        store
            .put_xorb(&x.hash, Bytes::from(x.body.clone()).into())
            .await?;
    }
    store.put_shard(Bytes::from(up.shard)).await?;
    Ok(up.files[0])
}
