//! The router: every route of the CAS API (handlers in `crate::routes`, one module per
//! route group), the Hub API's dispatcher (`crate::hub`), and the layers around them
//! (body deadline, request log in `log`).

use crate::routes::grants::{grant_upload, xorb_commit, xorb_grant};
use crate::routes::misc::{health, method_not_allowed, telemetry, token_refresh};
use crate::routes::reconstructions::{
    file_head, reconstruction_batch, reconstruction_v1, reconstruction_v2,
};
use crate::routes::shards::{dedup_chunk, shards_v1, shards_v2};
use crate::routes::xorb_data::xorb_data;
use crate::routes::xorbs::{xorb_head, xorb_post};
use crate::state::{AppState, GRANT_UPLOAD_PREFIX, XORB_DATA_PREFIX};
use axum::Router;
use axum::middleware;
use axum::routing::{any, get, head, post, put};
use xet_cas::routes;

mod log;

/// Token refresh route (see the crate docs).
pub const TOKEN_REFRESH: &str = "/v1/token";

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
        // Pages for browsers; every other request goes on without its cookies.
        .layer(middleware::from_fn_with_state(
            state.clone(),
            crate::web::layer,
        ))
        // Inside the log, so a stalled body's 408 is what the log says.
        .layer(middleware::from_fn(move |req, next| {
            crate::conn::body_deadline(body_timeout, req, next)
        }))
        .layer(middleware::from_fn(log::request_log))
        .with_state(state)
}
