//! File URLs: `/{P}{ns}/{name}/resolve/{rev}/{path}` (facts and bytes of a file) and
//! the LFS batch endpoint `/{P}{ns}/{name}.git/info/lfs/objects/batch`.

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt as _;
use xet_hub::api::{
    LfsAction, LfsActions, LfsBatchRequest, LfsBatchResponse, LfsObject, LfsObjectError,
    header as hh, url,
};
use xet_hub::{CommitId, FileEntry, Item, RepoError, RepoId, RepoPath, RepoRef, RepoType, Storage};

use super::ctx::{Ctx, segments};
use super::reply::{HubReply, HubResult, content_type, header_value, set};
use crate::config::Access;
use crate::range::{content_range, parse_range_header};
use crate::routes::json;

/// Answer a file URL, or `None` if the path is not one.
pub(super) async fn route(ctx: &Ctx, method: &Method, body: Body) -> HubResult<Option<Response>> {
    let segs = segments(&ctx.path)?;
    let segs: Vec<&str> = segs.iter().map(String::as_str).collect();
    let (kind, rest) = match segs.as_slice() {
        [p, rest @ ..] if is_typed(p, rest) => (url::type_of_prefix(p).expect("checked"), rest),
        rest => (RepoType::Model, rest),
    };
    match (method, rest) {
        (&Method::GET | &Method::HEAD, [ns, name, "resolve" | "raw", rev, path @ ..])
            if !path.is_empty() =>
        {
            let repo = RepoRef::new(kind, RepoId::new(ns, name)?);
            resolve(ctx, method, &repo, rev, &path.join("/"))
                .await
                .map(Some)
        }
        (&Method::POST, [ns, name_git, "info", "lfs", "objects", "batch"]) => {
            let Some(name) = name_git.strip_suffix(".git") else {
                return Ok(None);
            };
            let repo = RepoRef::new(kind, RepoId::new(ns, name)?);
            lfs_batch(ctx, &repo, body).await.map(Some)
        }
        _ => Ok(None),
    }
}

/// Whether `p` is a type prefix of a file URL here (`datasets/ns/name/resolve/...`).
fn is_typed(p: &str, rest: &[&str]) -> bool {
    url::type_of_prefix(p).is_some()
        && (matches!(rest, [_, _, "resolve" | "raw", ..])
            || matches!(rest, [_, n, "info", ..] if n.ends_with(".git")))
}

/// The ETag clients key their cache by: sha256 for Xet files, the git blob id for
/// inline ones, the Xet hash for bucket files (which have no sha256).
pub(super) fn etag(e: &FileEntry) -> String {
    match e.storage {
        Storage::Lfs => e.sha256.to_string(),
        Storage::Regular => e.git_oid.to_string(),
        Storage::Bucket => e.xet_hash.to_string(),
    }
}

async fn resolve(
    ctx: &Ctx,
    method: &Method,
    repo: &RepoRef,
    rev: &str,
    path: &str,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let (id, commit) = super::repo::resolve(ctx, repo, rev).await?;
    let item = match RepoPath::parse(path) {
        Ok(p) => ctx.repos().entry(&repo.at, &commit.tree, &p).await?,
        Err(_) => None,
    };
    let Some(Item::File(entry)) = item else {
        return Err(HubReply::from(RepoError::EntryNotFound {
            repo: repo.name.clone(),
            rev: rev.to_string(),
            path: path.to_string(),
        })
        .at_commit(id));
    };
    let wants_fileinfo = ctx
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(hh::XET_FILEINFO_MEDIA_TYPE));
    if wants_fileinfo && entry.storage == Storage::Lfs {
        let mut r = json(
            StatusCode::OK,
            &serde_json::json!({"hash": entry.xet_hash.to_string(), "size": entry.size}),
        );
        file_headers(ctx, &mut r, &repo.name, &id, &entry);
        content_type(&mut r, hh::XET_FILEINFO_MEDIA_TYPE);
        return Ok(r);
    }
    let range = requested_range(ctx, entry.size)?;
    let (status, len) = match range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.len()),
        None => (StatusCode::OK, entry.size),
    };
    let body = if method == Method::HEAD || len == 0 {
        Body::empty()
    } else {
        file_body(ctx, &entry, range)
    };
    let mut r = (status, body).into_response();
    file_headers(ctx, &mut r, &repo.name, &id, &entry);
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Some(range) = range {
        r.headers_mut().insert(
            header::CONTENT_RANGE,
            header_value(&content_range(&range, entry.size)),
        );
    }
    Ok(r)
}

/// The headers of a file answer: commit, ETag, and for Xet files the Xet facts and links.
fn file_headers(ctx: &Ctx, r: &mut Response, repo: &RepoRef, id: &CommitId, e: &FileEntry) {
    let tag = header_value(&format!("\"{}\"", etag(e)));
    let h = r.headers_mut();
    h.insert(hh::REPO_COMMIT, header_value(&id.to_string()));
    h.insert(header::ETAG, tag.clone());
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    if !h.contains_key(header::CONTENT_TYPE) {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    if e.storage == Storage::Lfs {
        let hash = e.xet_hash.to_string();
        h.insert(hh::XET_HASH, header_value(&hash));
        h.insert(hh::LINKED_SIZE, HeaderValue::from(e.size));
        h.insert(hh::LINKED_ETAG, tag);
        h.insert(header::LINK, xet_links(&ctx.base, repo, id, &hash));
    }
}

/// `Link` header value of the xet routes of a file.
fn xet_links(base: &str, repo: &RepoRef, commit: &CommitId, xet_hash: &str) -> HeaderValue {
    let token = url::api_repo_rev(base, repo, "xet-read-token", &commit.to_string());
    header_value(&format!(
        "<{token}>; rel=\"xet-auth\", <{base}/v1/reconstructions/{xet_hash}>; rel=\"xet-reconstruction-info\""
    ))
}

/// The bytes of a stored file (or `range` of it), streamed from its reconstruction.
pub(super) fn file_body(ctx: &Ctx, e: &FileEntry, range: Option<xet_cas::ByteRange>) -> Body {
    let rx = xet_download::file_stream(ctx.state.cas.clone(), e.xet_hash, range);
    Body::from_stream(tokio_stream_of(rx))
}

/// The one range a `Range` header asks for; several ranges or a malformed header are
/// answered with the whole file (RFC 9110 allows ignoring `Range`), a range past the end
/// is `416`.
pub(super) fn requested_range(ctx: &Ctx, size: u64) -> HubResult<Option<xet_cas::ByteRange>> {
    let Some(v) = ctx.headers.get(header::RANGE).and_then(|v| v.to_str().ok()) else {
        return Ok(None);
    };
    let Ok(specs) = parse_range_header(v) else {
        return Ok(None);
    };
    let [spec] = specs.as_slice() else {
        return Ok(None);
    };
    match spec.resolve(size) {
        Some(r) if r.start == 0 && r.end == size => Ok(None),
        Some(r) => Ok(Some(r)),
        None => Err(HubReply::new(
            StatusCode::RANGE_NOT_SATISFIABLE,
            format!("range {v} is outside the file's {size} bytes"),
        )
        .with_header(
            header::CONTENT_RANGE,
            header_value(&format!("bytes */{size}")),
        )),
    }
}

fn tokio_stream_of(
    rx: tokio::sync::mpsc::Receiver<Result<bytes::Bytes, xet_cas::CasError>>,
) -> impl futures_util::Stream<Item = Result<bytes::Bytes, std::io::Error>> {
    futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|item| (item, rx))
    })
    .map(|r| r.map_err(std::io::Error::other))
}

/// The LFS batch API, for clients that negotiate the transfer there (huggingface_hub
/// 0.36–1.19, huggingface.js): uploads are answered `"transfer": "xet"`, with the write
/// token in each object's `actions.upload.header` and the token route as `href`; objects
/// whose sha256 the store already has get no action. Only Xet is offered: plain LFS
/// uploads and downloads are refused per object, naming what to use instead.
/// Whether `repo` ever committed an LFS file with this sha256 (hex): the uploads the
/// LFS batch may skip. Only this repository's: an answer drawn from the whole store
/// would tell any writer which contents other repositories hold.
async fn lfs_held(ctx: &Ctx, repo: &RepoRef, sha256: &str) -> HubResult<bool> {
    let Some(sha) = xet_hub::Sha256::parse(sha256) else {
        return Ok(false);
    };
    Ok(ctx
        .repos()
        .store()
        .lfs_file(repo, sha.as_bytes())
        .await?
        .is_some())
}

async fn lfs_batch(ctx: &Ctx, repo: &RepoRef, body: Body) -> HubResult<Response> {
    // Read access (and the repository) is checked before the body is read: what a
    // caller without it sends is never buffered. An upload needs write access, known
    // once the body says so.
    let caller = ctx.caller(Access::Read)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: LfsBatchRequest = super::repo::json_body(ctx, body, "LFS batch").await?;
    let upload = req.operation == "upload";
    if upload {
        ctx.caller(Access::Write)?;
    }
    let xet = req.transfers.iter().any(|t| t == "xet");
    let rev = req.reference.as_ref().map_or("main", |r| r.name.as_str());
    let rev = rev.strip_prefix("refs/heads/").unwrap_or(rev);
    let token = if upload && xet {
        Some(super::upload::mint(ctx, &repo.at, Access::Write)?)
    } else {
        None
    };
    let mut objects = Vec::with_capacity(req.objects.len());
    for o in req.objects {
        let known = token.is_some() && lfs_held(ctx, &repo.at, &o.oid).await?;
        let (actions, error) = match &token {
            _ if !upload || !xet => (
                None,
                Some(LfsObjectError {
                    code: 501,
                    message: "this server moves file contents only through Xet: install hf_xet \
                              (pip install hf_xet) or use a client that offers the \"xet\" transfer"
                        .into(),
                }),
            ),
            Some(_) if known => (None, None),
            Some(t) => {
                let mut header = std::collections::BTreeMap::new();
                header.insert("X-Xet-Cas-Url".into(), t.cas_url.clone());
                header.insert("X-Xet-Access-Token".into(), t.access_token.clone());
                header.insert("X-Xet-Token-Expiration".into(), t.exp.to_string());
                header.insert("X-Xet-Session-Id".into(), uuid::Uuid::now_v7().to_string());
                let href = url::api_repo_rev(&ctx.base, &repo.name, "xet-write-token", rev);
                (
                    Some(LfsActions {
                        upload: Some(LfsAction { href, header }),
                    }),
                    None,
                )
            }
            None => (None, None),
        };
        objects.push(LfsObject {
            oid: o.oid,
            size: o.size,
            actions,
            error,
        });
    }
    let mut r = json(
        StatusCode::OK,
        &LfsBatchResponse {
            transfer: if xet { "xet" } else { "basic" }.into(),
            objects,
            hash_algo: Some("sha256".into()),
        },
    );
    content_type(&mut r, "application/vnd.git-lfs+json");
    set(
        &mut r,
        "x-xet-session-id",
        header_value(&uuid::Uuid::now_v7().to_string()),
    );
    Ok(r)
}
