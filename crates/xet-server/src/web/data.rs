//! The data of each page, read from the Hub's indexes (records, branch heads, commits,
//! trees with the facts of their files): a listing reads the folders it shows, never a
//! file. Two pages read file content, bounded: a README (rendered once per content, by
//! its Xet hash) and a small text file shown inline.

use std::sync::Arc;

use bytes::Bytes;
use xet_hub::{
    BranchName, Commit, CommitId, FileEntry, Item, RepoError, RepoId, RepoPath, RepoRecord,
    RepoRef, RepoType, Revision,
};
use xet_web::{
    BlobPage, BucketPage, CommitRow, CommitsPage, Entry, FrontPage, Link, RepoHeader, RepoRow,
    TreePage, encode_component, encode_path, href, human_size,
};

use super::session::Viewer;
use crate::state::{AppState, Hub};

/// Entries on one page of a folder (a folder of 10,000 files is 50 pages).
pub(crate) const FOLDER_PAGE: usize = 200;
/// Commits on one page of a history.
pub(crate) const HISTORY_PAGE: usize = 30;
/// Repositories and buckets on the front page (search narrows).
pub(crate) const FRONT_PAGE: usize = 500;
/// Largest file shown inline on its page.
pub(crate) const MAX_INLINE: u64 = 256 * 1024;
/// Largest README rendered.
pub(crate) const MAX_README: u64 = 512 * 1024;

/// Why a page cannot be shown.
#[derive(Debug)]
pub(crate) enum Fail {
    /// Missing, or not this reader's to see (the two look alike).
    NotFound(String),
    /// Nothing is readable without signing in on this server.
    SignIn,
    BadRequest(String),
    Internal(String),
}

impl From<RepoError> for Fail {
    fn from(e: RepoError) -> Fail {
        match e {
            RepoError::RepoNotFound(_)
            | RepoError::RevisionNotFound { .. }
            | RepoError::EntryNotFound { .. } => Fail::NotFound(e.to_string()),
            RepoError::Store(s) => Fail::Internal(xet_cas::error_chain(&s)),
            other => Fail::Internal(other.to_string()),
        }
    }
}

impl From<xet_hub::NameError> for Fail {
    fn from(e: xet_hub::NameError) -> Fail {
        Fail::NotFound(e.to_string())
    }
}

pub(crate) type PageResult<T> = Result<T, Fail>;

/// Where a paged listing is: the cursor asked for and the page's own path.
pub(crate) struct Paging<'a> {
    pub cursor: Option<&'a str>,
    pub page_path: &'a str,
}

/// Whether `viewer` may see a repository with this record (as the API decides).
fn visible(viewer: &Viewer, repo: &RepoRef, record: &RepoRecord) -> bool {
    viewer.may_read && viewer.caller.scope.reaches(repo) && (!record.private || viewer.caller.user)
}

/// The record of `repo` if `viewer` may see it; a missing one and a hidden one answer
/// alike.
async fn open(hub: &Hub, viewer: &Viewer, repo: &RepoRef) -> PageResult<RepoRecord> {
    if !viewer.may_read {
        return Err(Fail::SignIn);
    }
    let hidden = || {
        Fail::NotFound(format!(
            "{} {} not found (or private: sign in)",
            repo.kind.as_str(),
            repo.id
        ))
    };
    match hub.repos.record(repo).await {
        Ok(r) if visible(viewer, repo, &r) => Ok(r),
        Ok(_) | Err(RepoError::RepoNotFound(_)) => Err(hidden()),
        Err(e) => Err(e.into()),
    }
}

fn date(secs: u64) -> String {
    let (y, m, d) = xet_hub::time::civil((secs / 86_400) as i64);
    format!("{y:04}-{m:02}-{d:02}")
}

fn date_time(secs: u64) -> String {
    let rem = secs % 86_400;
    format!("{} {:02}:{:02} UTC", date(secs), rem / 3600, rem / 60 % 60)
}

/// The URL segments of a repository's pages: `[ns, name]`, `["datasets", ns, name]`.
fn repo_segments(repo: &RepoRef) -> Vec<String> {
    let mut s = Vec::new();
    if repo.kind != RepoType::Model {
        s.push(repo.kind.plural().to_string());
    }
    s.push(repo.id.namespace().to_string());
    s.push(repo.id.name().to_string());
    s
}

fn repo_home(repo: &RepoRef) -> String {
    href(&repo_segments(repo))
}

/// `/{P}{ns}/{name}/{what}/{rev}[/{path}]`.
fn repo_url(repo: &RepoRef, what: &str, rev: &str, path: &str) -> String {
    let mut s = repo_segments(repo);
    s.push(what.to_string());
    s.push(rev.to_string());
    let mut u = href(&s);
    if !path.is_empty() {
        u.push('/');
        u.push_str(&encode_path(path));
    }
    u
}

fn commit_row(repo: &RepoRef, id: &CommitId, c: &Commit) -> CommitRow {
    let id = id.to_string();
    CommitRow {
        short: id.chars().take(8).collect(),
        href: repo_url(repo, "tree", &id, ""),
        id,
        title: c.summary.clone(),
        author: c.author.clone(),
        date: date_time(c.created_at),
    }
}

/// `/`: the repositories and buckets `viewer` may see whose name contains `query`.
pub(crate) async fn front(
    state: &AppState,
    hub: &Hub,
    viewer: &Viewer,
    query: &str,
) -> PageResult<FrontPage> {
    let mut repos = Vec::new();
    let mut buckets = Vec::new();
    let mut more = 0;
    if viewer.may_read {
        let records = state
            .web
            .records(hub.repos.store())
            .await
            .map_err(Fail::Internal)?;
        let needle = query.to_lowercase();
        let mut shown: Vec<(RepoRef, &RepoRecord)> = records
            .iter()
            .map(|r| (RepoRef::new(r.kind, r.id.clone()), r))
            .filter(|(repo, r)| visible(viewer, repo, r))
            .filter(|(repo, _)| {
                needle.is_empty() || repo.id.to_string().to_lowercase().contains(&needle)
            })
            .collect();
        shown.sort_by_key(|a| (a.0.id.to_string(), a.0.kind));
        more = shown.len().saturating_sub(FRONT_PAGE);
        for (repo, r) in shown.into_iter().take(FRONT_PAGE) {
            let row = RepoRow {
                kind: repo.kind.as_str().to_string(),
                name: repo.id.to_string(),
                href: if repo.kind == RepoType::Bucket {
                    href(&["buckets", repo.id.namespace(), repo.id.name()])
                } else {
                    repo_home(&repo)
                },
                private: r.private,
                created: date(r.created_at),
            };
            if repo.kind == RepoType::Bucket {
                buckets.push(row);
            } else {
                repos.push(row);
            }
        }
    }
    Ok(FrontPage {
        chrome: Default::default(),
        query: query.to_string(),
        repos,
        buckets,
        more,
        figures: super::cache::figures(&state.web),
    })
}

/// The branches and tags of `repo` (kept at `at`) to switch to, each linking the same
/// view (`what`, `path`) there; pull requests' refs are left out.
async fn refs(
    hub: &Hub,
    repo: &RepoRef,
    at: &RepoRef,
    what: &str,
    path: &str,
) -> PageResult<Vec<Link>> {
    let refs = hub
        .repos
        .store()
        .branches(at)
        .await
        .map_err(RepoError::from)?;
    let (mut branches, mut tags) = (Vec::new(), Vec::new());
    for (name, _) in refs {
        if let Some(tag) = name.tag() {
            tags.push(Link {
                href: repo_url(repo, what, tag, path),
                text: format!("tag: {tag}"),
            });
        } else if name.is_plain() {
            branches.push(Link {
                href: repo_url(repo, what, name.as_str(), path),
                text: name.as_str().to_string(),
            });
        }
    }
    branches.extend(tags);
    Ok(branches)
}

async fn header(
    hub: &Hub,
    repo: &RepoRef,
    record: &RepoRecord,
    rev: &str,
    what: &str,
    path: &str,
) -> PageResult<RepoHeader> {
    Ok(RepoHeader {
        kind: repo.kind.as_str().to_string(),
        name: repo.id.to_string(),
        home: repo_home(repo),
        private: record.private,
        rev: rev.to_string(),
        refs: refs(hub, repo, &record.storage(), what, path).await?,
        files_href: repo_url(repo, "tree", rev, ""),
        commits_href: repo_url(repo, "commits", rev, ""),
    })
}

/// `rev` of `repo` (kept at `at`).
async fn resolve(
    hub: &Hub,
    repo: &RepoRef,
    at: &RepoRef,
    rev: &str,
) -> PageResult<(CommitId, Commit)> {
    let parsed = Revision::parse(rev)
        .map_err(|_| Fail::NotFound(format!("revision {rev} not found in {repo}")))?;
    Ok(hub
        .repos
        .resolve(at, &parsed)
        .await
        .map_err(|e| e.renamed(at, repo))?)
}

/// The crumbs of `path` (each prefix linked with `link(prefix)`), the root first.
fn crumbs(root: &str, root_href: String, path: &str, link: impl Fn(&str) -> String) -> Vec<Link> {
    let mut out = vec![Link {
        text: root.to_string(),
        href: root_href,
    }];
    let mut at = String::new();
    for c in path.split('/').filter(|c| !c.is_empty()) {
        if !at.is_empty() {
            at.push('/');
        }
        at.push_str(c);
        out.push(Link {
            text: c.to_string(),
            href: link(&at),
        });
    }
    out
}

fn entries(listed: &[xet_hub::Listed], link: impl Fn(&str, bool) -> String) -> Vec<Entry> {
    listed
        .iter()
        .map(|l| {
            let name = l.path.rsplit('/').next().unwrap_or(&l.path).to_string();
            match &l.item {
                Item::Folder(_) => Entry {
                    name,
                    href: link(&l.path, true),
                    folder: true,
                    size: String::new(),
                },
                Item::File(e) => Entry {
                    name,
                    href: link(&l.path, false),
                    folder: false,
                    size: human_size(e.size),
                },
            }
        })
        .collect()
}

/// This page's URL with `cursor` set to the last path shown.
fn next_url(page_path: &str, last: &str) -> String {
    format!("{page_path}?cursor={}", encode_component(last))
}

/// `/{P}{ns}/{name}` and `/.../tree/{rev}[/{path}]`: a folder, its README rendered.
pub(crate) async fn tree(
    state: &AppState,
    hub: &Hub,
    viewer: &Viewer,
    repo: &RepoRef,
    rev: &str,
    path: &str,
    paging: Paging<'_>,
) -> PageResult<TreePage> {
    let Paging { cursor, page_path } = paging;
    let record = open(hub, viewer, repo).await?;
    let at = record.storage();
    let (id, commit) = resolve(hub, repo, &at, rev).await?;
    let folder = if path.is_empty() {
        None
    } else {
        Some(RepoPath::parse_folder(path)?)
    };
    let after =
        match cursor {
            Some(c) => Some(RepoPath::parse(c).map_err(|_| {
                Fail::BadRequest(format!("cursor {c:?} is not one this server gave"))
            })?),
            None => None,
        };
    let page = hub
        .repos
        .list(
            &at,
            &commit.tree,
            folder.as_ref(),
            false,
            after.as_ref(),
            FOLDER_PAGE,
        )
        .await?
        .ok_or_else(|| Fail::NotFound(format!("{path} is not a folder at {rev} of {repo}")))?;
    let link = |p: &str, folder: bool| repo_url(repo, if folder { "tree" } else { "blob" }, rev, p);
    let next = match (page.more, page.entries.last()) {
        (true, Some(last)) => Some(next_url(page_path, &last.path)),
        _ => None,
    };
    // The README of the folder, on its first page only.
    let readme = if after.is_none() {
        readme(state, hub, &at, &commit, folder.as_ref()).await?
    } else {
        None
    };
    Ok(TreePage {
        chrome: Default::default(),
        header: header(hub, repo, &record, rev, "tree", path).await?,
        crumbs: if path.is_empty() {
            Vec::new()
        } else {
            crumbs(repo.id.name(), repo_url(repo, "tree", rev, ""), path, |p| {
                link(p, true)
            })
        },
        entries: entries(&page.entries, link),
        commit: Some(commit_row(repo, &id, &commit)),
        readme_meta: readme.as_ref().and_then(|r| r.metadata.clone()),
        readme_html: readme.map(|r| r.html.clone()),
        next,
    })
}

/// The README (`README.md`, any case) of `folder`, rendered (cached by content).
async fn readme(
    state: &AppState,
    hub: &Hub,
    at: &RepoRef,
    commit: &Commit,
    folder: Option<&RepoPath>,
) -> PageResult<Option<Arc<xet_web::markdown::Readme>>> {
    let dir = match folder {
        Some(f) => match hub.repos.entry(at, &commit.tree, f).await? {
            Some(Item::Folder(id)) => hub.repos.folder(at, &id).await?,
            _ => return Ok(None),
        },
        None => hub.repos.folder(at, &commit.tree).await?,
    };
    let Some(file) = dir.entries.iter().find_map(|(n, i)| match i {
        Item::File(e) if n.eq_ignore_ascii_case("readme.md") => Some(e.clone()),
        _ => None,
    }) else {
        return Ok(None);
    };
    if let Some(r) = state.web.readme(&file.xet_hash) {
        return Ok(Some(r));
    }
    let bytes = read_head(state, &file, MAX_README).await?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let rendered = tokio::task::spawn_blocking(move || xet_web::markdown::render(&text))
        .await
        .map_err(|e| Fail::Internal(format!("rendering a README: {e}")))?;
    Ok(Some(state.web.keep_readme(file.xet_hash, rendered)))
}

/// The first `max` bytes of a stored file, read and checked as a download is.
async fn read_head(state: &AppState, file: &FileEntry, max: u64) -> PageResult<Bytes> {
    let n = file.size.min(max);
    if n == 0 {
        return Ok(Bytes::new());
    }
    let range = (n < file.size).then_some(xet_cas::ByteRange { start: 0, end: n });
    let mut rx = xet_download::file_stream(state.cas.clone(), file.xet_hash, range);
    let mut out = Vec::with_capacity(n as usize);
    while let Some(piece) = rx.recv().await {
        let piece = piece.map_err(|e| Fail::Internal(xet_cas::error_chain(&e)))?;
        out.extend_from_slice(&piece);
    }
    Ok(Bytes::from(out))
}

/// `/.../blob/{rev}/{path}`: a file's facts, a download link, small text inline.
pub(crate) async fn blob(
    state: &AppState,
    hub: &Hub,
    viewer: &Viewer,
    repo: &RepoRef,
    rev: &str,
    path: &str,
) -> PageResult<BlobPage> {
    let record = open(hub, viewer, repo).await?;
    let at = record.storage();
    let (id, commit) = resolve(hub, repo, &at, rev).await?;
    let p = RepoPath::parse(path)?;
    let Some(Item::File(file)) = hub.repos.entry(&at, &commit.tree, &p).await? else {
        return Err(Fail::NotFound(format!("no file {path} at {rev} of {repo}")));
    };
    let (text, no_text) = if file.size > MAX_INLINE {
        (
            None,
            format!("Larger than {}: not shown here.", human_size(MAX_INLINE)),
        )
    } else {
        let bytes = read_head(state, &file, MAX_INLINE).await?;
        match std::str::from_utf8(&bytes) {
            Ok(t) if !t.contains('\0') => (Some(t.to_string()), String::new()),
            _ => (None, "Binary content: not shown here.".to_string()),
        }
    };
    let name = p
        .as_str()
        .rsplit('/')
        .next()
        .unwrap_or(p.as_str())
        .to_string();
    let parent = p.as_str().rsplit_once('/').map(|(d, _)| d).unwrap_or("");
    let mut crumbs = crumbs(
        repo.id.name(),
        repo_url(repo, "tree", rev, ""),
        parent,
        |d| repo_url(repo, "tree", rev, d),
    );
    crumbs.push(Link {
        text: name.clone(),
        href: repo_url(repo, "blob", rev, p.as_str()),
    });
    Ok(BlobPage {
        chrome: Default::default(),
        header: header(hub, repo, &record, rev, "blob", p.as_str()).await?,
        crumbs,
        size: human_size(file.size),
        size_bytes: file.size,
        xet_hash: file.xet_hash.to_string(),
        sha256: file.sha256.to_string(),
        git_oid: file.git_oid.to_string(),
        commit: Some(commit_row(repo, &id, &commit)),
        download: format!(
            "{}?download=true",
            repo_url(repo, "resolve", rev, p.as_str())
        ),
        name,
        text,
        no_text,
    })
}

/// The history of `rev`, newest first: up to [`HISTORY_PAGE`] commits from `from` (the
/// revision's commit if `None`), and the commit the next page starts at.
pub(crate) async fn history(
    hub: &Hub,
    repo: &RepoRef,
    at: &RepoRef,
    rev: &str,
    from: Option<CommitId>,
) -> PageResult<(Vec<(CommitId, Commit)>, Option<CommitId>)> {
    let (head, _) = resolve(hub, repo, at, rev).await?;
    // A cursor is the reader's: a commit this repository lacks is not found.
    if let Some(id) = from
        && hub.repos.commit(at, &id).await?.is_none()
    {
        return Err(Fail::NotFound(format!("commit {id} not found in {repo}")));
    }
    let (out, more) = hub
        .repos
        .history(at, from.unwrap_or(head), 0, HISTORY_PAGE)
        .await
        .map_err(|e| e.renamed(at, repo))?;
    let next = if more {
        out.last().and_then(|(_, c)| c.parent)
    } else {
        None
    };
    Ok((out, next))
}

/// `/.../commits/{rev}`.
pub(crate) async fn commits(
    hub: &Hub,
    viewer: &Viewer,
    repo: &RepoRef,
    rev: &str,
    from: Option<&str>,
    page_path: &str,
) -> PageResult<CommitsPage> {
    let record = open(hub, viewer, repo).await?;
    let from = match from {
        Some(f) => Some(
            xet_hub::ObjectId::parse(f)
                .ok_or_else(|| Fail::BadRequest(format!("p={f:?} is not a commit id")))?,
        ),
        None => None,
    };
    let (list, next) = history(hub, repo, &record.storage(), rev, from).await?;
    Ok(CommitsPage {
        chrome: Default::default(),
        header: header(hub, repo, &record, rev, "commits", "").await?,
        commits: list.iter().map(|(id, c)| commit_row(repo, id, c)).collect(),
        next: next.map(|n| format!("{page_path}?p={n}")),
    })
}

/// `/buckets/{ns}/{name}[/tree/{prefix}]`.
pub(crate) async fn bucket(
    hub: &Hub,
    viewer: &Viewer,
    ns: &str,
    name: &str,
    prefix: &str,
    paging: Paging<'_>,
) -> PageResult<BucketPage> {
    let Paging { cursor, page_path } = paging;
    if !viewer.may_read {
        return Err(Fail::SignIn);
    }
    let bucket = RepoRef::new(RepoType::Bucket, RepoId::new(ns, name)?);
    let hidden = || {
        Fail::NotFound(format!(
            "bucket {} not found (or private: sign in)",
            bucket.id
        ))
    };
    let state = match hub.repos.bucket(&bucket).await {
        Ok(s) if visible(viewer, &bucket, &s.record) => s,
        Ok(_) | Err(RepoError::RepoNotFound(_)) => return Err(hidden()),
        Err(e) => return Err(e.into()),
    };
    let home = href(&["buckets", ns, name]);
    let link = |p: &str| format!("{home}/tree/{}", encode_path(p));
    let after =
        match cursor {
            Some(c) => Some(RepoPath::parse(c).map_err(|_| {
                Fail::BadRequest(format!("cursor {c:?} is not one this server gave"))
            })?),
            None => None,
        };
    let (listed, next) = match state.tree {
        None => (Vec::new(), None),
        Some(root) => {
            let folder = if prefix.is_empty() {
                None
            } else {
                Some(RepoPath::parse_folder(prefix)?)
            };
            let page = hub
                .repos
                .list(
                    &state.storage,
                    &root,
                    folder.as_ref(),
                    false,
                    after.as_ref(),
                    FOLDER_PAGE,
                )
                .await?
                .ok_or_else(|| {
                    Fail::NotFound(format!("no folder {prefix} in bucket {}", bucket.id))
                })?;
            let next = match (page.more, page.entries.last()) {
                (true, Some(last)) => Some(next_url(page_path, &last.path)),
                _ => None,
            };
            (page.entries, next)
        }
    };
    let resolve_href = |p: &str| format!("{home}/resolve/{}", encode_path(p));
    Ok(BucketPage {
        chrome: Default::default(),
        name: bucket.id.to_string(),
        home: home.clone(),
        private: state.record.private,
        crumbs: if prefix.is_empty() {
            Vec::new()
        } else {
            crumbs(name, home.clone(), prefix, link)
        },
        entries: entries(
            &listed,
            |p, folder| if folder { link(p) } else { resolve_href(p) },
        ),
        next,
    })
}

/// The default branch's name.
pub(crate) const DEFAULT_REV: &str = BranchName::MAIN;
