//! The wire of the Hub API: JSON bodies, NDJSON commit lines, header names and URL
//! forms, as `huggingface_hub` 2.4.0, `hf_xet` 1.8.0 and `@huggingface/hub` read and
//! send them. Field names follow the Hub (camelCase where it uses it).

use percent_encoding::{AsciiSet, CONTROLS, utf8_percent_encode};
use serde::{Deserialize, Serialize};

use crate::id::{RepoPath, RepoRef, RepoType};

/// Response headers of the Hub API.
pub mod header {
    pub const ERROR_CODE: &str = "x-error-code";
    pub const ERROR_MESSAGE: &str = "x-error-message";
    pub const REPO_COMMIT: &str = "x-repo-commit";
    pub const XET_HASH: &str = "x-xet-hash";
    pub const LINKED_SIZE: &str = "x-linked-size";
    pub const LINKED_ETAG: &str = "x-linked-etag";
    pub const XET_CAS_URL: &str = "x-xet-cas-url";
    pub const XET_ACCESS_TOKEN: &str = "x-xet-access-token";
    pub const XET_TOKEN_EXPIRATION: &str = "x-xet-token-expiration";
    pub const XET_SESSION_ID: &str = "x-xet-session-id";
    /// The media type huggingface.js asks a resolve URL for to get Xet facts only.
    pub const XET_FILEINFO_MEDIA_TYPE: &str = "application/vnd.xet-fileinfo+json";
}

/// Values of `X-Error-Code` the clients map to typed errors.
pub mod error_code {
    pub const REPO_NOT_FOUND: &str = "RepoNotFound";
    pub const REVISION_NOT_FOUND: &str = "RevisionNotFound";
    pub const ENTRY_NOT_FOUND: &str = "EntryNotFound";
    pub const GATED_REPO: &str = "GatedRepo";
}

/// `{"error": "..."}`, the body of every Hub API error.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
}

/// `DELETE /api/repos/delete`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeleteRepoRequest {
    pub name: String,
    #[serde(default)]
    pub organization: Option<String>,
    /// `model` (also when absent), `dataset` or `space`.
    #[serde(default, rename = "type")]
    pub repo_type: Option<String>,
}

/// `POST /api/repos/create`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CreateRepoRequest {
    pub name: String,
    #[serde(default)]
    pub organization: Option<String>,
    /// `model` (also when absent), `dataset` or `space`.
    #[serde(default, rename = "type")]
    pub repo_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<bool>,
    /// `private` or `public` (huggingface_hub ≥ 1.x sends this instead of `private`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sdk: Option<String>,
}

impl CreateRepoRequest {
    pub fn is_private(&self) -> bool {
        self.private == Some(true) || self.visibility.as_deref() == Some("private")
    }
}

/// `PUT /api/{type}s/{id}/settings`: huggingface_hub sends `visibility` (and `gated`),
/// other clients `private`. Fields absent change nothing; others are ignored.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct RepoSettings {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private: Option<bool>,
    /// `private` or `public`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub visibility: Option<String>,
    /// `"auto"`, `"manual"` or `false`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gated: Option<serde_json::Value>,
}

/// `POST /api/repos/move`: ids `namespace/name`; `type` `model` (also when absent),
/// `dataset`, `space` or `bucket`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct MoveRepoRequest {
    pub from_repo: String,
    pub to_repo: String,
    #[serde(default, rename = "type")]
    pub repo_type: Option<String>,
}

/// Answer of `POST /api/repos/create` (200, and with the 409 of an existing repository).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateRepoResponse {
    pub url: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// An entry of `siblings`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Sibling {
    pub rfilename: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    #[serde(default, rename = "blobId", skip_serializing_if = "Option::is_none")]
    pub blob_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lfs: Option<SiblingLfs>,
}

/// `siblings[].lfs` (note: `sha256`, where the tree says `oid`).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct SiblingLfs {
    pub size: u64,
    pub sha256: String,
    #[serde(rename = "pointerSize")]
    pub pointer_size: u64,
}

/// `GET /api/{type}s/{ns}/{name}[/revision/{rev}]`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct RepoInfo {
    pub id: String,
    /// The resolved commit.
    pub sha: String,
    #[serde(default)]
    pub private: bool,
    #[serde(default)]
    pub siblings: Vec<Sibling>,
    #[serde(
        default,
        rename = "lastModified",
        skip_serializing_if = "Option::is_none"
    )]
    pub last_modified: Option<String>,
    #[serde(default, rename = "createdAt", skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub author: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub gated: bool,
    #[serde(default)]
    pub disabled: bool,
}

/// `lfs` of a tree entry.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TreeLfs {
    /// sha256 of the content.
    pub oid: String,
    pub size: u64,
    #[serde(rename = "pointerSize")]
    pub pointer_size: u64,
}

/// An entry of `GET .../tree/{rev}[/{path}]` and of `paths-info`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum TreeEntry {
    File {
        /// The git blob id (of the LFS pointer for LFS files).
        oid: String,
        path: String,
        size: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        lfs: Option<TreeLfs>,
        #[serde(default, rename = "xetHash", skip_serializing_if = "Option::is_none")]
        xet_hash: Option<String>,
    },
    Directory {
        oid: String,
        path: String,
        #[serde(default)]
        size: u64,
    },
}

impl TreeEntry {
    pub fn path(&self) -> &str {
        match self {
            TreeEntry::File { path, .. } | TreeEntry::Directory { path, .. } => path,
        }
    }
}

/// `POST .../paths-info/{rev}` (JSON from huggingface.js, a form from huggingface_hub).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PathsInfoRequest {
    pub paths: Vec<String>,
    #[serde(default)]
    pub expand: bool,
}

/// A file of `POST .../preupload/{rev}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreuploadFile {
    pub path: String,
    /// Base64 of the first 512 bytes.
    #[serde(default)]
    pub sample: String,
    pub size: u64,
}

/// `POST .../preupload/{rev}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct PreuploadRequest {
    pub files: Vec<PreuploadFile>,
    #[serde(default, rename = "gitIgnore", skip_serializing_if = "Option::is_none")]
    pub git_ignore: Option<String>,
    #[serde(
        default,
        rename = "gitAttributes",
        skip_serializing_if = "Option::is_none"
    )]
    pub git_attributes: Option<String>,
}

/// `lfs`: content goes to Xet; `regular`: inline in the commit.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum UploadMode {
    Lfs,
    Regular,
}

/// An answer of `preupload`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreuploadAnswer {
    pub path: String,
    #[serde(rename = "uploadMode")]
    pub upload_mode: UploadMode,
    #[serde(rename = "shouldIgnore")]
    pub should_ignore: bool,
    /// The file's current remote id in the id space of `upload_mode` (sha256 for `lfs`,
    /// git blob id for `regular`), when the file exists.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub oid: Option<String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct PreuploadResponse {
    pub files: Vec<PreuploadAnswer>,
    #[serde(default, rename = "commitOid", skip_serializing_if = "Option::is_none")]
    pub commit_oid: Option<String>,
}

/// The xet token routes' JSON body (also sent as `X-Xet-*` headers).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XetToken {
    #[serde(rename = "accessToken")]
    pub access_token: String,
    /// Unix seconds.
    pub exp: u64,
    #[serde(rename = "casUrl")]
    pub cas_url: String,
}

/// `header` line of a commit.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CommitHeader {
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub description: String,
    #[serde(
        default,
        rename = "parentCommit",
        skip_serializing_if = "Option::is_none"
    )]
    pub parent_commit: Option<String>,
}

/// `file` line: inline content.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitFile {
    pub path: String,
    pub content: String,
    /// `base64` (the only encoding clients send; `utf-8` is accepted too).
    #[serde(default = "base64_encoding")]
    pub encoding: String,
}

fn base64_encoding() -> String {
    "base64".into()
}

/// `lfsFile` line: content uploaded through Xet, named by sha256.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitLfsFile {
    pub path: String,
    #[serde(default = "sha256_algo")]
    pub algo: String,
    pub oid: String,
    /// Absent on copies of an LFS file.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
}

fn sha256_algo() -> String {
    "sha256".into()
}

/// `deletedFile` / `deletedFolder` line.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitDeletion {
    pub path: String,
}

/// One NDJSON line of `POST .../commit/{rev}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "key", content = "value")]
pub enum CommitLine {
    #[serde(rename = "header")]
    Header(CommitHeader),
    #[serde(rename = "file")]
    File(CommitFile),
    #[serde(rename = "lfsFile")]
    LfsFile(CommitLfsFile),
    #[serde(rename = "deletedFile")]
    DeletedFile(CommitDeletion),
    #[serde(rename = "deletedFolder")]
    DeletedFolder(CommitDeletion),
}

/// Answer of a commit.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitResponse {
    #[serde(rename = "commitOid")]
    pub commit_oid: String,
    #[serde(rename = "commitUrl")]
    pub commit_url: String,
    #[serde(
        default,
        rename = "pullRequestUrl",
        skip_serializing_if = "Option::is_none"
    )]
    pub pull_request_url: Option<String>,
    #[serde(default, rename = "hookOutput")]
    pub hook_output: String,
    #[serde(default)]
    pub success: bool,
}

/// `POST .../tag/{rev}`: the tag to create at `rev`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CreateTagRequest {
    pub tag: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// `POST .../super-squash/{branch}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SuperSquashRequest {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// One ref of `GET .../refs`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GitRef {
    /// `main`, `v1`, `refs/pr/1`.
    pub name: String,
    /// `refs/heads/main`, `refs/tags/v1`, `refs/pr/1`.
    #[serde(rename = "ref")]
    pub full: String,
    #[serde(rename = "targetCommit")]
    pub target_commit: String,
}

/// `GET .../refs[?include_prs=1]`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GitRefs {
    pub branches: Vec<GitRef>,
    pub converts: Vec<GitRef>,
    pub tags: Vec<GitRef>,
    #[serde(
        rename = "pullRequests",
        default,
        skip_serializing_if = "Option::is_none"
    )]
    pub pull_requests: Option<Vec<GitRef>>,
}

/// An author of a commit in `GET .../commits/{rev}`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitAuthor {
    pub user: String,
}

/// One commit of `GET .../commits/{rev}`, newest first.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CommitInfo {
    pub id: String,
    pub title: String,
    pub message: String,
    pub authors: Vec<CommitAuthor>,
    /// RFC 3339.
    pub date: String,
}

/// `POST .../branch/{name}`.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct CreateBranchRequest {
    #[serde(
        default,
        rename = "startingPoint",
        skip_serializing_if = "Option::is_none"
    )]
    pub starting_point: Option<String>,
}

/// An object of the LFS batch API.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsObject {
    pub oid: String,
    pub size: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub actions: Option<LfsActions>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<LfsObjectError>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsActions {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub upload: Option<LfsAction>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsAction {
    pub href: String,
    #[serde(default)]
    pub header: std::collections::BTreeMap<String, String>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsObjectError {
    pub code: u16,
    pub message: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsRef {
    pub name: String,
}

/// `POST /{prefix}{ns}/{name}.git/info/lfs/objects/batch`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsBatchRequest {
    pub operation: String,
    #[serde(default)]
    pub transfers: Vec<String>,
    pub objects: Vec<LfsObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_algo: Option<String>,
    #[serde(default, rename = "ref", skip_serializing_if = "Option::is_none")]
    pub reference: Option<LfsRef>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct LfsBatchResponse {
    pub transfer: String,
    pub objects: Vec<LfsObject>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hash_algo: Option<String>,
}

/// `GET /api/whoami-v2`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Whoami {
    #[serde(rename = "type")]
    pub kind: String,
    pub name: String,
    pub auth: WhoamiAuth,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhoamiAuth {
    #[serde(rename = "accessToken")]
    pub access_token: WhoamiToken,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct WhoamiToken {
    #[serde(rename = "displayName")]
    pub display_name: String,
    /// `read` or `write`.
    pub role: String,
}

/// Characters `quote(rev, safe="")` escapes: everything but unreserved ones.
const REV_ESCAPE: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'!')
    .add(b'"')
    .add(b'#')
    .add(b'$')
    .add(b'%')
    .add(b'&')
    .add(b'\'')
    .add(b'(')
    .add(b')')
    .add(b'*')
    .add(b'+')
    .add(b',')
    .add(b'/')
    .add(b':')
    .add(b';')
    .add(b'<')
    .add(b'=')
    .add(b'>')
    .add(b'?')
    .add(b'@')
    .add(b'[')
    .add(b'\\')
    .add(b']')
    .add(b'^')
    .add(b'`')
    .add(b'{')
    .add(b'|')
    .add(b'}');

/// The same, keeping `/` (file paths in URLs).
const PATH_ESCAPE: &AsciiSet = &REV_ESCAPE.remove(b'/');

/// A revision as a single URL segment (`refs/pr/1` → `refs%2Fpr%2F1`).
pub fn quote_revision(rev: &str) -> String {
    utf8_percent_encode(rev, REV_ESCAPE).to_string()
}

/// A repository path in a URL, `/` kept.
pub fn quote_path(path: &str) -> String {
    utf8_percent_encode(path, PATH_ESCAPE).to_string()
}

/// Percent-decode a URL segment; `None` if the result is not UTF-8.
pub fn unquote(s: &str) -> Option<String> {
    percent_encoding::percent_decode_str(s)
        .decode_utf8()
        .ok()
        .map(|c| c.into_owned())
}

/// URL builders on a Hub at `base` (scheme and host, no trailing `/`).
pub mod url {
    use super::*;

    /// `{base}/api/{type}s/{ns}/{name}`.
    pub fn api_repo(base: &str, repo: &RepoRef) -> String {
        format!("{base}/api/{}/{}", repo.kind.plural(), repo.id)
    }

    /// `{base}/api/{type}s/{ns}/{name}/{what}/{rev}` (`revision`, `tree`, `preupload`,
    /// `commit`, `xet-read-token`, `xet-write-token`, `paths-info`).
    pub fn api_repo_rev(base: &str, repo: &RepoRef, what: &str, rev: &str) -> String {
        format!("{}/{what}/{}", api_repo(base, repo), quote_revision(rev))
    }

    /// `{base}/{prefix}{ns}/{name}`: the repository's page, as `create` answers it.
    pub fn repo_page(base: &str, repo: &RepoRef) -> String {
        format!("{base}/{repo}")
    }

    /// `{base}/{prefix}{ns}/{name}/resolve/{rev}/{path}`.
    pub fn resolve(base: &str, repo: &RepoRef, rev: &str, path: &RepoPath) -> String {
        format!(
            "{base}/{repo}/resolve/{}/{}",
            quote_revision(rev),
            quote_path(path.as_str())
        )
    }

    /// `{base}/{prefix}{ns}/{name}/commit/{oid}`.
    pub fn commit_page(base: &str, repo: &RepoRef, oid: &str) -> String {
        format!("{base}/{repo}/commit/{oid}")
    }

    /// The type from a URL prefix segment (`datasets`, `spaces`), for file URLs.
    pub fn type_of_prefix(seg: &str) -> Option<RepoType> {
        match seg {
            "datasets" => Some(RepoType::Dataset),
            "spaces" => Some(RepoType::Space),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::id::RepoId;

    #[test]
    fn quoting_matches_python() {
        assert_eq!(quote_revision("refs/pr/1"), "refs%2Fpr%2F1");
        assert_eq!(quote_revision("main"), "main");
        assert_eq!(quote_path("a b/c#d.bin"), "a%20b/c%23d.bin");
        assert_eq!(quote_path("ü/x-y_z.~"), "%C3%BC/x-y_z.~");
        assert_eq!(unquote("refs%2Fpr%2F1").unwrap(), "refs/pr/1");
        let r = RepoRef::new(RepoType::Dataset, RepoId::parse("o/n").unwrap());
        assert_eq!(
            url::resolve("http://h", &r, "main", &RepoPath::parse("a b").unwrap()),
            "http://h/datasets/o/n/resolve/main/a%20b"
        );
        assert_eq!(
            url::api_repo_rev("http://h", &r, "xet-read-token", "refs/pr/2"),
            "http://h/api/datasets/o/n/xet-read-token/refs%2Fpr%2F2"
        );
    }

    #[test]
    fn commit_lines_parse_as_clients_send_them() {
        let lines = [
            r#"{"key": "header", "value": {"summary": "s", "description": "", "parentCommit": "abc"}}"#,
            r#"{"key": "file", "value": {"content": "aGk=", "path": "README.md", "encoding": "base64"}}"#,
            r#"{"key": "lfsFile", "value": {"path": "b.bin", "algo": "sha256", "oid": "00", "size": 3}}"#,
            r#"{"key": "lfsFile", "value": {"path": "c.bin", "algo": "sha256", "oid": "00"}}"#,
            r#"{"key": "deletedFile", "value": {"path": "old.txt"}}"#,
            r#"{"key": "deletedFolder", "value": {"path": "logs/"}}"#,
        ];
        for l in lines {
            serde_json::from_str::<CommitLine>(l).unwrap_or_else(|e| panic!("{l}: {e}"));
        }
        assert!(serde_json::from_str::<CommitLine>(r#"{"key":"nope","value":{}}"#).is_err());
    }

    #[test]
    fn bucket_changes_of_the_events_feed() {
        use super::buckets::{BucketChanges, ChangeOp, EventTime};
        let c: BucketChanges = serde_json::from_str(
            r#"{"cursor":"c1","changes":[
            {"path":"a/b.bin","op":"add","size":3,"xetHash":"ab","uploadedAt":"2026-02-06T17:37:57.123Z","mtime":null,"mtimeNanos":null},
            {"path":"c","op":"update","uploadedAt":"2026-02-06T17:37:58.000Z","mtime":1700000000250,"mtimeNanos":1700000000250000000},
            {"path":"d","op":"delete"},
            {"path":"e","op":"rename","future":true}]}"#,
        )
        .unwrap();
        let [a, u, d, other] = &c.changes[..] else {
            panic!("{c:?}")
        };
        assert_eq!(
            (a.op, a.size, a.mtime.as_ref()),
            (ChangeOp::Add, Some(3), None)
        );
        assert_eq!(
            a.time_ms(),
            crate::time::parse_rfc3339_ms("2026-02-06T17:37:57.123Z")
        );
        assert_eq!(u.mtime, Some(EventTime::Millis(1_700_000_000_250)));
        assert_eq!(u.time_ms(), Some(1_700_000_000_250));
        assert_eq!(
            (d.op, d.xet_hash.as_deref(), d.time_ms()),
            (ChangeOp::Delete, None, None)
        );
        assert_eq!(other.op, ChangeOp::Other);
        // What the server writes reads back the same.
        let again: BucketChanges =
            serde_json::from_str(&serde_json::to_string(&c).unwrap()).unwrap();
        assert_eq!(again.changes[..3], c.changes[..3]);
    }

    #[test]
    fn tree_entries() {
        let t: Vec<TreeEntry> = serde_json::from_str(
            r#"[{"oid":"57","path":"regression","size":0,"type":"directory"},
            {"lfs":{"oid":"cd","pointerSize":132,"size":1048576},"oid":"c9","path":"r/x.bin","size":1048576,"type":"file","xetHash":"f8"},
            {"oid":"e5","path":"r/y.txt","size":186,"type":"file"}]"#,
        )
        .unwrap();
        assert_eq!(t.len(), 3);
        let back = serde_json::to_value(&t[1]).unwrap();
        assert_eq!(back["type"], "file");
        assert_eq!(back["xetHash"], "f8");
        assert_eq!(back["lfs"]["pointerSize"], 132);
    }
}

/// The Buckets API (`buckets-api.md`): bodies of `/api/buckets/...`.
pub mod buckets {
    use serde::{Deserialize, Serialize};

    /// `POST /api/buckets/{ns}/{name}`: huggingface_hub sends `visibility`, the Rust
    /// client `private`; both are read.
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct CreateBucketRequest {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub visibility: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub private: Option<bool>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub resource_group_id: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub region: Option<String>,
    }

    impl CreateBucketRequest {
        pub fn is_private(&self) -> bool {
            self.private == Some(true) || self.visibility.as_deref() == Some("private")
        }
    }

    /// Answer of a create: `url` is `{endpoint}/buckets/{ns}/{name}`.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    pub struct CreateBucketResponse {
        pub url: String,
        pub name: String,
        pub id: String,
    }

    /// `GET /api/buckets/{ns}/{name}` and each item of a namespace's list.
    #[derive(Debug, Clone, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct BucketInfo {
        #[serde(rename = "_id")]
        pub object_id: String,
        pub id: String,
        pub author: String,
        pub private: bool,
        pub repo_type: String,
        pub created_at: String,
        pub updated_at: String,
        /// Bytes of all files.
        pub size: u64,
        pub total_files: u64,
        #[serde(default)]
        pub cdn_regions: Vec<serde_json::Value>,
        #[serde(default)]
        pub resource_group: Option<serde_json::Value>,
    }

    /// `PUT /api/buckets/{ns}/{name}/settings`. Fields absent change nothing; others
    /// (`cdnRegions`) are ignored.
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct BucketSettings {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub private: Option<bool>,
    }

    /// An entry of a tree listing or a paths-info answer. Paths are full bucket paths.
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(
        tag = "type",
        rename_all = "lowercase",
        rename_all_fields = "camelCase"
    )]
    pub enum BucketEntry {
        File {
            path: String,
            size: u64,
            xet_hash: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            mtime: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            uploaded_at: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            content_type: Option<String>,
        },
        Directory {
            path: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            uploaded_at: Option<String>,
        },
    }

    /// `POST /api/buckets/{ns}/{name}/paths-info`.
    #[derive(Debug, Clone, Default, Serialize, Deserialize)]
    pub struct BucketPathsInfoRequest {
        #[serde(default)]
        pub paths: Vec<String>,
    }

    /// One line of a batch (`application/x-ndjson`). `mtime` is milliseconds since the
    /// Unix epoch (huggingface_hub, hf-mount; the Rust client sends seconds).
    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(
        tag = "type",
        rename_all = "camelCase",
        rename_all_fields = "camelCase"
    )]
    pub enum BatchLine {
        AddFile {
            path: String,
            xet_hash: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            mtime: Option<i64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            content_type: Option<String>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            size: Option<u64>,
        },
        CopyFile {
            path: String,
            xet_hash: String,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            mtime: Option<i64>,
            #[serde(default, skip_serializing_if = "Option::is_none")]
            content_type: Option<String>,
            source_repo_type: String,
            source_repo_id: String,
        },
        DeleteFile {
            path: String,
        },
    }

    impl BatchLine {
        pub fn path(&self) -> &str {
            match self {
                BatchLine::AddFile { path, .. }
                | BatchLine::CopyFile { path, .. }
                | BatchLine::DeleteFile { path } => path,
            }
        }
    }

    /// The answer of a batch: `200` when something applied, `422` when nothing did.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct BatchReport {
        pub success: bool,
        pub processed: u64,
        pub succeeded: u64,
        pub failed: Vec<BatchFailure>,
    }

    #[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
    pub struct BatchFailure {
        pub path: String,
        pub error: String,
    }

    /// The events feed of a bucket (`GET /api/buckets/{ns}/{name}/events`,
    /// `buckets-api.md` §1.8): server-sent events named by [`event`], each with one
    /// `data:` line of JSON.
    pub mod event {
        /// Replay done, live follows: [`super::EventCursor`].
        pub const READY: &str = "ready";
        /// Files that changed: [`super::BucketChanges`].
        pub const CHANGES: &str = "changes";
        /// The resume point is out of reach; the stream ends and the client lists the
        /// bucket again: [`super::EventReset`].
        pub const RESET: &str = "reset";
        /// The server ends the stream; resume from its cursor: [`super::EventCursor`].
        pub const RECONNECT: &str = "reconnect";
        /// The media type of the feed (its `Accept` and `Content-Type`).
        pub const MEDIA_TYPE: &str = "text/event-stream";
    }

    /// The data of `ready` and `reconnect`: where to resume after (absent while the
    /// bucket has no change to resume after).
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct EventCursor {
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub cursor: Option<String>,
    }

    /// The data of `reset`.
    #[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
    pub struct EventReset {
        #[serde(default)]
        pub reason: String,
    }

    /// The data of `changes`: a batch of changes, and the cursor that resumes after it.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    pub struct BucketChanges {
        pub cursor: String,
        pub changes: Vec<BucketChange>,
    }

    /// What happened to a path. Ops this client does not know are [`ChangeOp::Other`].
    #[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
    #[serde(rename_all = "lowercase")]
    pub enum ChangeOp {
        Add,
        Update,
        Delete,
        #[serde(other)]
        Other,
    }

    /// One changed file of a `changes` event: its full bucket path, and the facts that
    /// changed (an absent field is unchanged; an identical re-upload is an `update`
    /// with only `uploadedAt`; `xetHash` only for a reader of the content).
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(rename_all = "camelCase")]
    pub struct BucketChange {
        pub path: String,
        pub op: ChangeOp,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub size: Option<u64>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub xet_hash: Option<String>,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub uploaded_at: Option<String>,
        /// As the tree route writes it (RFC 3339); `null` is absent.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mtime: Option<EventTime>,
        /// Its type is undocumented (`buckets-api.md` §8): kept as sent, never required.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        pub mtime_nanos: Option<serde_json::Value>,
    }

    /// A time of the feed: RFC 3339 text (as the tree route writes times) or a number
    /// of milliseconds since the Unix epoch; anything else is kept and unread.
    #[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
    #[serde(untagged)]
    pub enum EventTime {
        Text(String),
        Millis(i64),
        Other(serde_json::Value),
    }

    impl EventTime {
        /// Milliseconds since the Unix epoch, if this is a time.
        pub fn ms(&self) -> Option<i64> {
            match self {
                EventTime::Text(t) => crate::time::parse_rfc3339_ms(t),
                EventTime::Millis(ms) => Some(*ms),
                EventTime::Other(_) => None,
            }
        }
    }

    impl BucketChange {
        /// The file's time now, in milliseconds since the Unix epoch: `mtime`, else
        /// `uploadedAt` (as a listing shows it); `None` if neither came.
        pub fn time_ms(&self) -> Option<i64> {
            self.mtime.as_ref().and_then(EventTime::ms).or_else(|| {
                self.uploaded_at
                    .as_deref()
                    .and_then(crate::time::parse_rfc3339_ms)
            })
        }
    }
}
