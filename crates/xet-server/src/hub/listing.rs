//! `GET /api/models`, `/api/datasets`, `/api/spaces`: the repositories of a kind the
//! caller may see, filtered by `author` and `search`, sorted by `sort`, paged by
//! `limit` with a `Link: rel="next"` cursor (an offset into the sorted list).

use axum::http::{StatusCode, header};
use axum::response::Response;
use xet_hub::{BranchName, RepoRecord, RepoRef, RepoType, Revision};

use super::ctx::Ctx;
use super::reply::{HubReply, HubResult, header_value};
use super::repo::{rfc3339_ms, url_with};
use crate::config::Access;
use crate::routes::json;

/// Repositories per page unless `limit` says fewer.
const PAGE: usize = 1000;

/// How a listing is ordered. The Hub's popularity orders (`downloads`, `likes`,
/// `trendingScore`) have no figures here: they list the newest first, as `createdAt`.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Sort {
    Id,
    CreatedAt,
    LastModified,
}

impl Sort {
    fn parse(s: Option<&str>) -> HubResult<Sort> {
        match s {
            None | Some("createdAt" | "created_at" | "downloads" | "likes" | "trendingScore") => {
                Ok(Sort::CreatedAt)
            }
            Some("id" | "modelId") => Ok(Sort::Id),
            Some("lastModified" | "last_modified") => Ok(Sort::LastModified),
            Some(other) => Err(HubReply::bad_request(format!(
                "sort {other:?} is not one this server has: createdAt, lastModified, id, \
                 downloads, likes, trendingScore"
            ))),
        }
    }
}

/// One listed repository with the head of its default branch, if it has one.
struct Found {
    record: RepoRecord,
    sha: Option<String>,
    last_modified: Option<u64>,
}

pub(super) async fn list(ctx: &Ctx, kind: RepoType) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let author = ctx.query_param("author");
    let search = ctx.query_param("search").map(|s| s.to_lowercase());
    let sort = Sort::parse(ctx.query_param("sort").as_deref())?;
    let limit = ctx
        .query_param("limit")
        .and_then(|l| l.parse::<usize>().ok())
        .filter(|&l| l > 0)
        .map_or(PAGE, |l| l.min(PAGE));
    let offset = match ctx.query_param("cursor") {
        Some(c) => c.parse::<usize>().map_err(|_| {
            HubReply::bad_request(format!("cursor {c:?} is not one this server gave"))
        })?,
        None => 0,
    };
    let visible = ctx
        .repos()
        .store()
        .repos(kind)
        .await?
        .into_iter()
        .filter(|r| {
            let repo = RepoRef::new(r.kind, r.id.clone());
            caller.scope.reaches(&repo)
                && (!r.private || caller.user)
                && author.as_deref().is_none_or(|a| r.id.namespace() == a)
                && search
                    .as_deref()
                    .is_none_or(|s| r.id.to_string().to_lowercase().contains(s))
        });
    let mut found: Vec<Found> = Vec::new();
    for record in visible {
        // The head only where the order needs it for every repository; else for the
        // page alone, below.
        let head = if sort == Sort::LastModified {
            head_of(ctx, &record).await?
        } else {
            None
        };
        let (sha, last_modified) = head.unzip();
        found.push(Found {
            sha,
            last_modified,
            record,
        });
    }
    match sort {
        Sort::Id => found.sort_by(|a, b| a.record.id.cmp(&b.record.id)),
        Sort::CreatedAt => found.sort_by(|a, b| {
            (b.record.created_at, &a.record.id).cmp(&(a.record.created_at, &b.record.id))
        }),
        Sort::LastModified => found
            .sort_by(|a, b| (b.last_modified, &a.record.id).cmp(&(a.last_modified, &b.record.id))),
    }
    let more = found.len() > offset.saturating_add(limit);
    let mut page = Vec::with_capacity(limit);
    for mut f in found.into_iter().skip(offset).take(limit) {
        if f.sha.is_none() {
            (f.sha, f.last_modified) = head_of(ctx, &f.record).await?.unzip();
        }
        page.push(info_of(kind, &f));
    }
    let mut r = json(StatusCode::OK, &page);
    if more {
        let next = url_with(ctx, "cursor", &(offset + limit).to_string());
        r.headers_mut().insert(
            header::LINK,
            header_value(&format!("<{next}>; rel=\"next\"")),
        );
    }
    Ok(r)
}

/// The commit `main` of `record`'s repository points at and its time (seconds); `None`
/// if it has no `main` (deleted meanwhile, or never committed).
async fn head_of(ctx: &Ctx, record: &RepoRecord) -> HubResult<Option<(String, u64)>> {
    match ctx
        .repos()
        .resolve(&record.storage(), &Revision::Branch(BranchName::main()))
        .await
    {
        Ok((id, commit)) => Ok(Some((id.to_string(), commit.created_at))),
        Err(xet_hub::RepoError::RevisionNotFound { .. } | xet_hub::RepoError::RepoNotFound(_)) => {
            Ok(None)
        }
        Err(e) => Err(e.into()),
    }
}

/// A repository as the Hub lists it (`ModelInfo`, `DatasetInfo`, `SpaceInfo` read these).
fn info_of(kind: RepoType, f: &Found) -> serde_json::Value {
    let id = f.record.id.to_string();
    let mut v = serde_json::json!({
        "_id": id,
        "id": id,
        "author": f.record.id.namespace(),
        "private": f.record.private,
        "gated": false,
        "disabled": false,
        "downloads": 0,
        "likes": 0,
        "tags": [],
        "createdAt": rfc3339_ms(f.record.created_at.saturating_mul(1000)),
    });
    if let Some(o) = v.as_object_mut() {
        if let Some(sha) = &f.sha {
            o.insert("sha".into(), sha.clone().into());
        }
        if let Some(t) = f.last_modified {
            o.insert(
                "lastModified".into(),
                rfc3339_ms(t.saturating_mul(1000)).into(),
            );
        }
        if kind == RepoType::Model {
            o.insert("modelId".into(), id.into());
        }
    }
    v
}
