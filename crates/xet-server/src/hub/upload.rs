//! Before a commit: `preupload` (which files go to Xet) and the xet token routes (CAS
//! tokens for the client's transfers).

use axum::body::Body;
use axum::http::StatusCode;
use axum::response::Response;
use base64::Engine as _;
use xet_hub::api::{
    PreuploadAnswer, PreuploadRequest, PreuploadResponse, UploadMode, XetToken, header as hh,
};
use xet_hub::mode::upload_mode;
use xet_hub::{Item, RepoPath, RepoRef, Revision, Storage};

use super::ctx::Ctx;
use super::reply::{HubReply, HubResult, header_value, set};
use crate::config::Access;
use crate::routes::json;
use crate::sign::unix_now;

/// Most files in one preupload request (clients send 100 or 256).
const MAX_PREUPLOAD_FILES: usize = 10_000;

pub(super) async fn preupload(
    ctx: &Ctx,
    repo: &RepoRef,
    rev: &str,
    body: Body,
) -> HubResult<Response> {
    let caller = ctx.caller(Access::Write)?;
    let repo = &ctx.open(repo, &caller).await?;
    let req: PreuploadRequest = super::repo::json_body(ctx, body, "preupload").await?;
    if req.files.len() > MAX_PREUPLOAD_FILES {
        return Err(HubReply::bad_request(format!(
            "preupload names {} files; send at most {MAX_PREUPLOAD_FILES} per request",
            req.files.len()
        )));
    }
    // A branch that does not exist yet has no files; the commit will create it.
    let head = match Revision::parse(rev) {
        Ok(Revision::Branch(b)) if ctx.repos().store().branch(&repo.at, &b).await?.is_none() => {
            None
        }
        _ => Some(super::repo::resolve(ctx, repo, rev).await?),
    };
    let mut files = Vec::with_capacity(req.files.len());
    for f in &req.files {
        let path = RepoPath::parse(&f.path)?;
        let sample = base64::engine::general_purpose::STANDARD
            .decode(f.sample.as_bytes())
            .unwrap_or_default();
        let mode = upload_mode(path.as_str(), f.size, &sample);
        let remote = match &head {
            Some((_, c)) => match ctx.repos().entry(&repo.at, &c.tree, &path).await? {
                Some(Item::File(e)) => Some(e),
                _ => None,
            },
            None => None,
        };
        // The remote id in the id space the client will compare with: sha256 for Xet
        // files, the git blob id for inline ones (only known for files stored inline).
        let oid = remote.and_then(|e| match mode {
            UploadMode::Lfs => Some(e.sha256.to_string()),
            UploadMode::Regular => (e.storage == Storage::Regular).then(|| e.git_oid.to_string()),
        });
        files.push(PreuploadAnswer {
            path: f.path.clone(),
            upload_mode: mode,
            should_ignore: false,
            oid,
        });
    }
    Ok(json(
        StatusCode::OK,
        &PreuploadResponse {
            files,
            commit_oid: head.map(|(id, _)| id.to_string()),
        },
    ))
}

/// A CAS token for `repo`, in headers (huggingface_hub reads those) and the JSON body
/// (hf_xet and huggingface.js read that). `need` is the route's scope.
pub(super) async fn xet_token(ctx: &Ctx, repo: &RepoRef, need: Access) -> HubResult<Response> {
    let caller = ctx.caller(need)?;
    // Bound to where the repository keeps its files, not its name: the files its
    // uploads register, and those it reads, follow it through a move.
    let repo = &ctx.open(repo, &caller).await?;
    token_answer(ctx, &repo.at, need)
}

/// The answer of a xet token route for `repo` (a repository or a bucket), whose access
/// the caller was checked for.
pub(super) fn token_answer(ctx: &Ctx, repo: &RepoRef, need: Access) -> HubResult<Response> {
    let token = mint(ctx, repo, need)?;
    let mut r = json(StatusCode::OK, &token);
    set(&mut r, hh::XET_CAS_URL, header_value(&token.cas_url));
    set(
        &mut r,
        hh::XET_ACCESS_TOKEN,
        header_value(&token.access_token),
    );
    set(
        &mut r,
        hh::XET_TOKEN_EXPIRATION,
        header_value(&token.exp.to_string()),
    );
    Ok(r)
}

/// A CAS token with `access` to the files of `repo`, valid for the configured token
/// lifetime, for the CAS on this same listener.
pub(super) fn mint(ctx: &Ctx, repo: &RepoRef, access: Access) -> HubResult<XetToken> {
    let exp = unix_now() + ctx.state.config.token_ttl.as_secs().max(60);
    let access_token = match ctx.state.auth.minter() {
        Some(m) => m.mint(access, repo, exp),
        // Only reachable on an open server (the CLI always sets a key with a hub):
        // the CAS accepts anything there.
        None => "anonymous".to_string(),
    };
    Ok(XetToken {
        access_token,
        exp,
        cas_url: ctx.base.clone(),
    })
}
