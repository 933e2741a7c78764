//! Reading a bucket: its tree (a prefix, one level or everything below, paged), the
//! facts of named paths, and a file's facts and bytes (`resolve`).

use axum::body::Body;
use axum::http::{HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use xet_hub::api::buckets::{BucketEntry, BucketPathsInfoRequest};
use xet_hub::api::{error_code, header as hh};
use xet_hub::{FileEntry, Item, Listed, RepoPath, RepoRef};

use super::super::ctx::Ctx;
use super::super::reply::{HubReply, HubResult, content_type, header_value};
use super::access::{bucket_ref, open};
use crate::config::Access;
use crate::routes::json;

/// Entries per page unless `limit` says otherwise, and the most a page may hold.
const TREE_PAGE: usize = 1000;
const MAX_TREE_PAGE: usize = 10_000;
/// Most paths one paths-info request may name (clients send 1000).
const MAX_PATHS: usize = 10_000;

/// The entry of a bucket file at `path`.
pub(super) fn file_entry(path: &str, e: &FileEntry) -> BucketEntry {
    let m = &e.meta;
    BucketEntry::File {
        path: path.to_string(),
        size: e.size,
        xet_hash: e.xet_hash.to_string(),
        mtime: m
            .mtime_ms
            .map(|t| super::super::repo::rfc3339_ms(u64::try_from(t).unwrap_or(0))),
        uploaded_at: Some(super::super::repo::rfc3339_ms(m.uploaded_ms)),
        content_type: m.content_type.clone(),
    }
}

fn entry_of(listed: &Listed) -> BucketEntry {
    match &listed.item {
        Item::File(e) => file_entry(&listed.path, e),
        Item::Folder(_) => BucketEntry::Directory {
            path: listed.path.clone(),
            uploaded_at: None,
        },
    }
}

/// `GET /api/buckets/{id}/tree[/{prefix}]`. A prefix naming a folder lists it, one
/// naming a file answers that file, anything else an empty list (a folder that does not
/// exist cannot be told from an empty one).
pub(super) async fn tree(ctx: &Ctx, bucket: &RepoRef, prefix: &str) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let state = open(ctx, bucket, &caller).await?;
    let Some(root) = state.tree else {
        return Ok(json(StatusCode::OK, &Vec::<BucketEntry>::new()));
    };
    let recursive = ctx
        .query_param("recursive")
        .is_some_and(|v| v == "true" || v == "1");
    let limit = ctx
        .query_param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0)
        .unwrap_or(TREE_PAGE)
        .min(MAX_TREE_PAGE);
    let after = match ctx.query_param("cursor") {
        Some(c) => Some(RepoPath::parse(&c).map_err(|_| {
            HubReply::bad_request(format!("cursor {c:?} is not one this server gave"))
        })?),
        None => None,
    };
    let folder = if prefix.trim_matches('/').is_empty() {
        None
    } else {
        let Ok(p) = RepoPath::parse_folder(prefix) else {
            return Ok(json(StatusCode::OK, &Vec::<BucketEntry>::new()));
        };
        match ctx.repos().entry(&state.storage, &root, &p).await? {
            Some(Item::Folder(_)) => Some(p),
            Some(Item::File(e)) if after.is_none() => {
                return Ok(json(StatusCode::OK, &[file_entry(p.as_str(), &e)]));
            }
            _ => return Ok(json(StatusCode::OK, &Vec::<BucketEntry>::new())),
        }
    };
    let page = ctx
        .repos()
        .list(
            &state.storage,
            &root,
            folder.as_ref(),
            recursive,
            after.as_ref(),
            limit,
        )
        .await?
        .unwrap_or_default();
    // Recursive listings carry files only; clients rebuild folders from the paths.
    let entries: Vec<BucketEntry> = page
        .entries
        .iter()
        .filter(|l| !recursive || matches!(l.item, Item::File(_)))
        .map(entry_of)
        .collect();
    let mut r = json(StatusCode::OK, &entries);
    if let (true, Some(last)) = (page.more, page.entries.last()) {
        let next = super::super::repo::next_page_url(ctx, &last.path);
        r.headers_mut().insert(
            header::LINK,
            header_value(&format!("<{next}>; rel=\"next\"")),
        );
    }
    Ok(r)
}

/// `POST /api/buckets/{id}/paths-info`: the files among `paths`; folders, missing and
/// invalid paths are left out.
pub(super) async fn paths_info(ctx: &Ctx, bucket: &RepoRef, body: Body) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let state = open(ctx, bucket, &caller).await?;
    let req: BucketPathsInfoRequest =
        super::super::repo::json_body(ctx, body, "paths-info").await?;
    if req.paths.len() > MAX_PATHS {
        return Err(HubReply::bad_request(format!(
            "paths-info names {} paths; send at most {MAX_PATHS} per request",
            req.paths.len()
        )));
    }
    let mut out = Vec::new();
    if let Some(root) = state.tree {
        for p in &req.paths {
            let Ok(path) = RepoPath::parse(p) else {
                continue;
            };
            if let Some(Item::File(e)) = ctx.repos().entry(&state.storage, &root, &path).await? {
                out.push(file_entry(path.as_str(), &e));
            }
        }
    }
    Ok(json(StatusCode::OK, &out))
}

/// `HEAD`/`GET /buckets/{ns}/{name}/resolve/{path}`: the facts clients read (`X-Xet-Hash`,
/// the `xet-auth` link, sizes, ETag, `Last-Modified`) and for `GET` the bytes.
pub(crate) async fn resolve(
    ctx: &Ctx,
    method: &Method,
    ns: &str,
    name: &str,
    path: &str,
) -> HubResult<Response> {
    let bucket = bucket_ref(ctx, ns, name)?;
    let caller = ctx.caller(Access::Read)?;
    let state = open(ctx, &bucket, &caller).await?;
    let entry = match (state.tree, RepoPath::parse(path)) {
        (Some(root), Ok(p)) => match ctx.repos().entry(&state.storage, &root, &p).await? {
            Some(Item::File(e)) => Some(e),
            _ => None,
        },
        _ => None,
    };
    let Some(entry) = entry else {
        return Err(HubReply::coded(
            StatusCode::NOT_FOUND,
            error_code::ENTRY_NOT_FOUND,
            format!("{path} is not a file of bucket {}", bucket.id),
        ));
    };
    let wants_fileinfo = ctx
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains(hh::XET_FILEINFO_MEDIA_TYPE));
    let hash = entry.xet_hash.to_string();
    let token_url = format!("{}/api/buckets/{}/xet-read-token", ctx.base, bucket.id);
    let reconstruction = format!("{}/v1/reconstructions/{hash}", ctx.base);
    if wants_fileinfo {
        let mut r = json(
            StatusCode::OK,
            &serde_json::json!({
                "hash": hash, "refreshUrl": token_url, "reconstructionUrl": reconstruction,
                "etag": hash, "size": entry.size,
                "contentType": entry.meta.content_type.as_deref().unwrap_or("application/octet-stream"),
            }),
        );
        file_headers(&mut r, &entry, &token_url, &reconstruction);
        content_type(&mut r, hh::XET_FILEINFO_MEDIA_TYPE);
        return Ok(r);
    }
    let range = super::super::files::requested_range(ctx, entry.size)?;
    let (status, len) = match range {
        Some(r) => (StatusCode::PARTIAL_CONTENT, r.len()),
        None => (StatusCode::OK, entry.size),
    };
    let body = if method == Method::HEAD || len == 0 {
        Body::empty()
    } else {
        super::super::files::file_body(ctx, &entry, range)
    };
    let mut r = (status, body).into_response();
    if let Some(ct) = entry.meta.content_type.as_deref() {
        r.headers_mut()
            .insert(header::CONTENT_TYPE, header_value(ct));
    }
    file_headers(&mut r, &entry, &token_url, &reconstruction);
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    if let Some(range) = range {
        r.headers_mut().insert(
            header::CONTENT_RANGE,
            header_value(&crate::range::content_range(&range, entry.size)),
        );
    }
    Ok(r)
}

fn file_headers(r: &mut Response, e: &FileEntry, token_url: &str, reconstruction: &str) {
    let hash = e.xet_hash.to_string();
    let tag = header_value(&format!("\"{hash}\""));
    let modified = e
        .meta
        .mtime_ms
        .and_then(|t| u64::try_from(t).ok())
        .unwrap_or(e.meta.uploaded_ms);
    let h = r.headers_mut();
    if !h.contains_key(header::CONTENT_TYPE) {
        h.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
    }
    h.insert(hh::XET_HASH, header_value(&hash));
    h.insert(hh::LINKED_SIZE, HeaderValue::from(e.size));
    h.insert(header::ETAG, tag.clone());
    h.insert(hh::LINKED_ETAG, tag);
    h.insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
    h.insert(
        header::LAST_MODIFIED,
        header_value(&super::super::repo::http_date(modified / 1000)),
    );
    h.insert(
        header::LINK,
        header_value(&format!(
            "<{token_url}>; rel=\"xet-auth\", <{reconstruction}>; rel=\"xet-reconstruction-info\""
        )),
    );
}
