//! Health, telemetry, token refresh, and the answers for unknown routes and methods.

use super::json;
use crate::error::{ApiError, ApiResult, code};
use crate::sign::unix_now;
use crate::state::AppState;
use crate::state::body::read_body;
use crate::state::extract::{BaseUrl, ReadAccess, shorten};
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::response::Response;
use xet_cas::wire::TokenRefresh;

/// Telemetry is small; anything bigger is not telemetry.
const TELEMETRY_LIMIT: u64 = 1024 * 1024;

pub(crate) async fn health() -> Response {
    json(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

/// Telemetry is accepted and discarded.
pub(crate) async fn telemetry(
    _: ReadAccess,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    read_body(&headers, body, TELEMETRY_LIMIT, "telemetry").await?;
    Ok(json(StatusCode::OK, &serde_json::json!({})))
}

/// `GET /v1/token`: hands back the presented token, for clients that refresh through a
/// URL (`token_refresh_url`), with its real expiry: a minted CAS token's own `exp` (a
/// later one would have the client use a dead token), else `token_ttl` from now, when
/// the client asks again.
pub(crate) async fn token_refresh(
    State(s): State<AppState>,
    ReadAccess(caller): ReadAccess,
    BaseUrl(base): BaseUrl,
) -> Response {
    let body = TokenRefresh {
        access_token: caller.token.unwrap_or_else(|| "anonymous".to_string()),
        exp: caller
            .expires
            .unwrap_or_else(|| unix_now() + s.config.token_ttl.as_secs().max(1)),
        cas_url: base,
    };
    json(StatusCode::OK, &body)
}

/// The `404` of a path no route serves, in the CAS API and the Hub API alike.
pub(crate) fn no_route(method: &Method, path: &str) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        code::NO_ROUTE,
        format!("no route for {method} {}", shorten(path)),
    )
}

pub(crate) async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        code::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", shorten(uri.path())),
    )
}
