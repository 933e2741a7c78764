//! Router and shared state. The handlers are in `crate::routes`, one module per route
//! group; extractors and body reading in `extract`, the request log in `log`.

use crate::auth::Auth;
use crate::config::ServerConfig;
use crate::error::{ApiError, ApiResult, code};
use crate::grants::Grants;
use crate::routes::grants::{grant_upload, xorb_commit, xorb_grant};
use crate::routes::misc::{health, method_not_allowed, telemetry, token_refresh};
use crate::routes::reconstructions::{
    file_head, reconstruction_batch, reconstruction_v1, reconstruction_v2,
};
use crate::routes::shards::{dedup_chunk, shards_v1, shards_v2};
use crate::routes::xorb_data::xorb_data;
use crate::routes::xorbs::{xorb_head, xorb_post};
use crate::sign::{SignatureError, UrlSigner, unix_now};
use axum::Router;
use axum::middleware;
use axum::routing::{any, get, head, post, put};
use std::net::SocketAddr;
use std::sync::Arc;
use xet_cas::routes;
use xet_hash::MerkleHash;

pub(crate) mod extract;
mod log;

pub use extract::{BaseUrl, PathParams, base_url, read_body};

/// Path of presigned xorb data URLs: `/_xorb/{prefix}/{hash}?X-Xet-Expires=..&X-Xet-Signature=..`.
pub const XORB_DATA_PREFIX: &str = "/_xorb";
/// Path of grant upload URLs: `/_grant-upload/{id}?X-Xet-Expires=..&X-Xet-Signature=..`.
pub const GRANT_UPLOAD_PREFIX: &str = "/_grant-upload";
/// Token refresh route (see the crate docs).
pub const TOKEN_REFRESH: &str = "/v1/token";

// Signature purposes, so a URL signed for one kind of resource never verifies as another.
const SIGN_XORB: &str = "xorb";
const SIGN_GRANT: &str = "grant-upload";

pub struct Shared {
    pub cas: Arc<dyn xet_cas::Cas>,
    pub auth: Auth,
    pub signer: UrlSigner,
    pub grants: Arc<Grants>,
    pub config: ServerConfig,
    pub local_addr: SocketAddr,
    /// Bounds the upload bodies held in memory at once.
    pub upload_permits: Arc<tokio::sync::Semaphore>,
    /// The Hub API's repositories, when it is on.
    pub hub: Option<Arc<crate::hub::Hub>>,
}

pub type AppState = Arc<Shared>;

impl Shared {
    pub(crate) async fn upload_permit(&self) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
        self.upload_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("server is shutting down"))
    }

    /// When URLs handed out now expire.
    pub(crate) fn url_expiry(&self) -> u64 {
        unix_now() + self.config.url_ttl.as_secs().max(1)
    }

    /// The presigned data URL of `xorb`, on the server at `base`.
    pub(crate) fn xorb_url(&self, base: &str, xorb: &MerkleHash, expires: u64) -> String {
        let resource = xorb_resource(xorb);
        format!(
            "{base}{XORB_DATA_PREFIX}/{resource}?{}",
            self.signer.query(SIGN_XORB, &resource, expires)
        )
    }

    /// Check the signature of a xorb data URL (`query`) for `xorb`; returns its expiry.
    pub(crate) fn verify_xorb_url(&self, xorb: &MerkleHash, query: Option<&str>) -> ApiResult<u64> {
        self.signer
            .verify(SIGN_XORB, &xorb_resource(xorb), query, unix_now())
            .map_err(|e| signature_error(e, "xorb"))
    }

    /// The signed upload URL of grant `id`, on the server at `base`.
    pub(crate) fn grant_url(&self, base: &str, id: &str, expires: u64) -> String {
        format!(
            "{base}{GRANT_UPLOAD_PREFIX}/{id}?{}",
            self.signer.query(SIGN_GRANT, id, expires)
        )
    }

    /// Check the signature of grant `id`'s upload URL (`query`) at time `now`; returns its
    /// expiry.
    pub(crate) fn verify_grant_url(
        &self,
        id: &str,
        query: Option<&str>,
        now: u64,
    ) -> ApiResult<u64> {
        self.signer
            .verify(SIGN_GRANT, id, query, now)
            .map_err(|e| signature_error(e, "grant upload"))
    }
}

/// What a xorb data URL signs: the canonical prefix and the parsed hash, whatever prefix
/// the client used, so only URLs this server made verify.
fn xorb_resource(xorb: &MerkleHash) -> String {
    format!("{}/{xorb}", routes::DEFAULT_PREFIX)
}

fn signature_error(e: SignatureError, what: &str) -> ApiError {
    match e {
        SignatureError::Expired => {
            ApiError::forbidden(code::URL_EXPIRED, format!("the {what} URL has expired"))
        }
        SignatureError::Missing => ApiError::forbidden(
            code::BAD_SIGNATURE,
            format!("the {what} URL carries no X-Xet-Expires/X-Xet-Signature"),
        ),
        SignatureError::Bad => ApiError::forbidden(
            code::BAD_SIGNATURE,
            format!("the {what} URL signature is not valid"),
        ),
    }
}

/// Build the router over `state`.
pub fn router(state: AppState) -> Router {
    let mut r = Router::new()
        .route(routes::HEALTH, get(health))
        .route(routes::TELEMETRY, post(telemetry))
        .route(TOKEN_REFRESH, get(token_refresh))
        .route("/v1/xorbs/{prefix}/{hash}", post(xorb_post).head(xorb_head))
        .route(routes::SHARDS_V1, post(shards_v1))
        .route("/v1/reconstructions/{hash}", get(reconstruction_v1))
        .route(routes::RECONSTRUCTIONS_BATCH_V1, get(reconstruction_batch))
        .route("/v1/files/{hash}", head(file_head))
        .route("/v1/chunks/{prefix}/{hash}", get(dedup_chunk))
        .route(
            &format!("{XORB_DATA_PREFIX}/{{prefix}}/{{hash}}"),
            get(xorb_data),
        );
    if state.config.allow_grants {
        r = r
            .route("/v1/xorb-grants/{prefix}/{hash}", post(xorb_grant))
            .route(
                "/v1/xorb-commits/{prefix}/{hash}/grant/{id}",
                post(xorb_commit),
            )
            .route(&format!("{GRANT_UPLOAD_PREFIX}/{{id}}"), put(grant_upload));
    }
    if state.config.allow_v2 {
        r = r
            .route(routes::SHARDS_V2, post(shards_v2))
            .route("/v2/reconstructions/{hash}", get(reconstruction_v2));
    }
    if state.hub.is_some() {
        r = r.route("/api/{*rest}", any(crate::hub::api));
    }
    let body_timeout = state.config.body_timeout;
    r.fallback(crate::hub::files)
        .method_not_allowed_fallback(method_not_allowed)
        // Inside the log, so a stalled body's 408 is what the log says.
        .layer(middleware::from_fn(move |req, next| {
            crate::conn::body_deadline(body_timeout, req, next)
        }))
        .layer(middleware::from_fn(log::request_log))
        .with_state(state)
}
