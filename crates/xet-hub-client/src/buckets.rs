//! Storage buckets through the Hub API (`buckets-api.md`): info, create, delete, tree
//! listings, paths-info, the NDJSON batch, and the Xet token routes (no revision).
//!
//! A bucket is a [`RepoRef`] of kind [`RepoType::Bucket`]; its messages say
//! `bucket NS/NAME`. Every listed path is checked to be a valid relative path before it
//! is used (it may become a file name).

use reqwest::{Method, StatusCode};
use xet_hub::api::buckets::{
    BatchLine, BatchReport, BucketEntry, BucketInfo, BucketPathsInfoRequest, CreateBucketRequest,
};
use xet_hub::api::quote_path;
use xet_hub::{RepoPath, RepoRef, RepoType};

use crate::client::{HubClient, TokenKind};
use crate::error::{HubError, RepoTarget, Result};

/// Paths per paths-info request, as huggingface_hub sends them.
pub const PATHS_PER_REQUEST: usize = 1000;
/// Operations per batch request, as huggingface_hub sends them.
pub const LINES_PER_BATCH: usize = 1000;

/// The bucket `ns/name`.
pub fn bucket_ref(id: xet_hub::RepoId) -> RepoRef {
    RepoRef::new(RepoType::Bucket, id)
}

impl HubClient {
    fn bucket_url(&self, bucket: &RepoRef, tail: &str) -> String {
        format!("{}/api/buckets/{}{tail}", self.endpoint(), bucket.id)
    }

    /// `GET /api/buckets/{id}`.
    pub async fn bucket_info(&self, bucket: &RepoRef) -> Result<BucketInfo> {
        let u = self.bucket_url(bucket, "");
        self.call(Method::GET, u, "reading", RepoTarget::repo(bucket))
            .json(|rb| rb)
            .await
    }

    /// `POST /api/buckets/{id}`; `Ok(false)` when it exists already (409).
    pub async fn create_bucket(&self, bucket: &RepoRef, private: bool) -> Result<bool> {
        let u = self.bucket_url(bucket, "");
        let body = CreateBucketRequest {
            visibility: Some(if private { "private" } else { "public" }.to_string()),
            ..Default::default()
        };
        let call = self.call(Method::POST, u, "creating", RepoTarget::repo(bucket));
        let r = call.send(|rb| rb.json(&body)).await?;
        match r.status() {
            s if s.is_success() => Ok(true),
            StatusCode::CONFLICT => Ok(false),
            _ => Err(call.failure(r).await),
        }
    }

    /// `DELETE /api/buckets/{id}`.
    pub async fn delete_bucket(&self, bucket: &RepoRef) -> Result<()> {
        let u = self.bucket_url(bucket, "");
        self.call(Method::DELETE, u, "deleting", RepoTarget::repo(bucket))
            .ok(|rb| rb)
            .await?;
        Ok(())
    }

    /// `GET /api/buckets/{id}/tree[/{prefix}]`, every page: the entries at or below
    /// `prefix` (the server matches a raw key prefix; only `prefix` itself and what lies
    /// below `prefix/` are kept). Recursive listings hold files only.
    pub async fn list_bucket_tree(
        &self,
        bucket: &RepoRef,
        prefix: Option<&RepoPath>,
        recursive: bool,
    ) -> Result<Vec<BucketEntry>> {
        let mut out = Vec::new();
        self.each_bucket_page(bucket, prefix, recursive, |page| {
            out.extend(page);
            Ok(())
        })
        .await?;
        Ok(out)
    }

    /// [`list_bucket_tree`](Self::list_bucket_tree) a page at a time, each handed to `f`
    /// as it arrives, checked and filtered the same way (a listing of any size in the
    /// memory of one page).
    pub async fn each_bucket_page(
        &self,
        bucket: &RepoRef,
        prefix: Option<&RepoPath>,
        recursive: bool,
        mut f: impl FnMut(Vec<BucketEntry>) -> Result<()>,
    ) -> Result<()> {
        let mut subject = RepoTarget::repo(bucket);
        let mut u = self.bucket_url(bucket, "/tree");
        if let Some(p) = prefix {
            subject = subject.path(p.as_str());
            u = format!("{u}/{}", quote_path(p.as_str()));
        }
        u.push_str(&format!("?recursive={recursive}&limit=10000"));
        let call = self.call(Method::GET, u.clone(), "listing", subject.clone());
        call.each_page(|entries: Vec<BucketEntry>| {
            let mut kept = Vec::with_capacity(entries.len());
            for e in entries {
                let path = entry_path(&e);
                // A path this machine may write (it may become a file name); the server
                // matched a raw key prefix, so only the prefix and what lies below it stay.
                if let Err(source) = RepoPath::parse(path) {
                    return Err(HubError::UnsafePath {
                        subject: subject.clone(),
                        url: u.clone(),
                        source,
                    });
                }
                let under = prefix.is_none_or(|p| {
                    path == p.as_str()
                        || path
                            .strip_prefix(p.as_str())
                            .is_some_and(|rest| rest.starts_with('/'))
                });
                if under {
                    kept.push(e);
                }
            }
            f(kept)
        })
        .await
    }

    /// `POST /api/buckets/{id}/paths-info`, [`PATHS_PER_REQUEST`] at a time: the files
    /// among `paths` (folders and missing paths are left out).
    pub async fn bucket_paths_info(
        &self,
        bucket: &RepoRef,
        paths: &[RepoPath],
    ) -> Result<Vec<BucketEntry>> {
        let mut out = Vec::new();
        for chunk in paths.chunks(PATHS_PER_REQUEST) {
            let mut subject = RepoTarget::repo(bucket);
            if let [one] = chunk {
                subject = subject.path(one.as_str());
            }
            let body = BucketPathsInfoRequest {
                paths: chunk.iter().map(ToString::to_string).collect(),
            };
            let u = self.bucket_url(bucket, "/paths-info");
            let entries: Vec<BucketEntry> = self
                .call(Method::POST, u, "reading", subject)
                .json(|rb| rb.json(&body))
                .await?;
            out.extend(entries);
        }
        Ok(out)
    }

    /// `POST /api/buckets/{id}/batch` of `lines` (at most [`LINES_PER_BATCH`]): the
    /// report, whether some lines applied (200) or none (422).
    pub async fn bucket_batch(&self, bucket: &RepoRef, lines: &[BatchLine]) -> Result<BatchReport> {
        let mut body = String::new();
        for l in lines {
            body.push_str(&serde_json::to_string(l).expect("a batch line serializes"));
            body.push('\n');
        }
        let u = self.bucket_url(bucket, "/batch");
        let call = self.call(Method::POST, u, "writing to", RepoTarget::repo(bucket));
        let r = call
            .send(|rb| {
                rb.header("content-type", "application/x-ndjson")
                    .body(body.clone())
            })
            .await?;
        if r.status().is_success() || r.status() == StatusCode::UNPROCESSABLE_ENTITY {
            return call.read_json(r).await;
        }
        Err(call.failure(r).await)
    }

    /// `{endpoint}/api/buckets/{id}/xet-{read,write}-token`.
    pub fn bucket_token_url(&self, bucket: &RepoRef, kind: TokenKind) -> String {
        let what = match kind {
            TokenKind::Read => "/xet-read-token",
            TokenKind::Write => "/xet-write-token",
        };
        self.bucket_url(bucket, what)
    }
}

/// The path of an entry.
pub fn entry_path(e: &BucketEntry) -> &str {
    match e {
        BucketEntry::File { path, .. } | BucketEntry::Directory { path, .. } => path,
    }
}

/// Why a batch left lines unapplied: the first few paths and their reasons.
pub fn batch_failure(bucket: &RepoRef, report: &BatchReport) -> Option<HubError> {
    if report.failed.is_empty() {
        return None;
    }
    let shown: Vec<String> = report
        .failed
        .iter()
        .take(10)
        .map(|f| format!("{}: {}", f.path, f.error))
        .collect();
    Some(HubError::BatchFailed {
        subject: RepoTarget::repo(bucket),
        failed: report.failed.len(),
        first: shown.join("; "),
    })
}
