//! The route handlers, one module per route group; [`crate::app::router`] wires them up.

pub(crate) mod grants;
pub(crate) mod misc;
pub(crate) mod reconstructions;
pub(crate) mod shards;
pub(crate) mod xorb_data;
pub(crate) mod xorbs;

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};

/// `v` as a JSON answer with `status` (the CAS routes and the Hub API alike).
pub(crate) fn json<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    (status, Json(v)).into_response()
}

/// The answer to a `HEAD` of a `len`-byte object.
fn head_response(len: u64) -> Response {
    let mut r = StatusCode::OK.into_response();
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

/// A `200` of raw bytes.
fn octets(data: impl Into<axum::body::Body>) -> Response {
    let mut r = Response::new(data.into());
    r.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/octet-stream"),
    );
    r
}
