//! Router, shared state and the route handlers.

use crate::auth::{Auth, ReadAccess, WriteAccess};
use crate::config::ServerConfig;
use crate::error::{ApiError, ApiResult, code};
use crate::grants::{Grants, amz_checksum_header};
use crate::range::{RangeSpec, parse_range_header};
use crate::sign::{SignatureError, UrlSigner, query_pairs, unix_now};
use axum::Json;
use axum::Router;
use axum::body::Body;
use axum::extract::{FromRequestParts, Path, RawQuery, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, head, post, put};
use bytes::Bytes;
use http_body_util::BodyExt;
use serde::de::DeserializeOwned;
use std::collections::BTreeMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;
use xet_cas::wire::{
    BatchReconstructionV1, FetchInfoV1, Grant, GrantRequest, ShardResultV1, TokenRefresh,
    WasInserted,
};
use xet_cas::{
    ByteRange, Cas, CasError, ChunkRange, ReceivedXorb, Reconstruction, XorbFetch, XorbReceiver,
    routes,
};
use xet_hash::MerkleHash;

/// Path of presigned xorb data URLs: `/_xorb/{prefix}/{hash}?X-Xet-Expires=..&X-Xet-Signature=..`.
pub const XORB_DATA_PREFIX: &str = "/_xorb";
/// Path of grant upload URLs: `/_grant-upload/{id}?X-Xet-Expires=..&X-Xet-Signature=..`.
pub const GRANT_UPLOAD_PREFIX: &str = "/_grant-upload";
/// Token refresh route (see the crate docs).
pub const TOKEN_REFRESH: &str = "/v1/token";

const SIGN_XORB: &str = "xorb";
const SIGN_GRANT: &str = "grant-upload";
const SMALL_BODY_LIMIT: u64 = 1024 * 1024;

pub struct Shared {
    pub cas: Arc<dyn Cas>,
    pub auth: Auth,
    pub signer: UrlSigner,
    pub grants: Arc<Grants>,
    pub config: ServerConfig,
    pub local_addr: SocketAddr,
    /// Bounds the upload bodies held in memory at once.
    pub upload_permits: Arc<tokio::sync::Semaphore>,
}

pub type AppState = Arc<Shared>;

impl Shared {
    async fn upload_permit(&self) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
        self.upload_permits
            .clone()
            .acquire_owned()
            .await
            .map_err(|_| ApiError::internal("server is shutting down"))
    }

    fn url_expiry(&self) -> u64 {
        unix_now() + self.config.url_ttl.as_secs().max(1)
    }

    fn xorb_url(&self, base: &str, xorb: &MerkleHash, expires: u64) -> String {
        let resource = format!("{}/{xorb}", routes::DEFAULT_PREFIX);
        format!(
            "{base}{XORB_DATA_PREFIX}/{resource}?{}",
            self.signer.query(SIGN_XORB, &resource, expires)
        )
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
    r.fallback(no_route)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(middleware::from_fn(request_log))
        .with_state(state)
}

// ---------------------------------------------------------------------------------------
// Extractors and helpers

/// `Path<T>` with a JSON rejection.
pub struct PathParams<T>(pub T);

impl<T, S> FromRequestParts<S> for PathParams<T>
where
    T: DeserializeOwned + Send,
    S: Send + Sync,
{
    type Rejection = ApiError;
    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, ApiError> {
        match Path::<T>::from_request_parts(parts, state).await {
            Ok(Path(t)) => Ok(PathParams(t)),
            Err(e) => Err(ApiError::bad_request(code::BAD_REQUEST, e.body_text())),
        }
    }
}

/// Base URL for URLs handed to the client: the configured public URL, or `http://` + the
/// `Host` the client connected to (so loopback clients get loopback URLs), or the bound
/// address.
pub struct BaseUrl(pub String);

fn plausible_host(h: &str) -> bool {
    !h.is_empty()
        && h.len() <= 255
        && h.bytes().all(|b| {
            b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b':' | b'[' | b']')
        })
}

impl FromRequestParts<AppState> for BaseUrl {
    type Rejection = Infallible;
    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, Infallible> {
        if let Some(p) = &state.config.public_url {
            return Ok(BaseUrl(p.trim_end_matches('/').to_string()));
        }
        let host = parts
            .headers
            .get(header::HOST)
            .and_then(|v| v.to_str().ok())
            .or_else(|| parts.uri.authority().map(|a| a.as_str()))
            .filter(|h| plausible_host(h));
        Ok(BaseUrl(match host {
            Some(h) => format!("http://{h}"),
            None => format!("http://{}", state.local_addr),
        }))
    }
}

fn shorten(s: &str) -> String {
    if s.chars().count() <= 80 {
        s.to_string()
    } else {
        format!("{}…", s.chars().take(80).collect::<String>())
    }
}

fn parse_hash(what: &str, s: &str) -> ApiResult<MerkleHash> {
    MerkleHash::from_hex(s).map_err(|e| {
        ApiError::bad_request(
            code::BAD_HASH,
            format!("{what} hash {:?} is not 64 hex digits: {e}", shorten(s)),
        )
    })
}

fn check_prefix(p: &str) -> ApiResult<()> {
    if routes::is_known_prefix(p) {
        Ok(())
    } else {
        Err(ApiError::bad_request(
            code::BAD_PREFIX,
            format!(
                "unknown prefix {:?} (expected {:?} or {:?})",
                shorten(p),
                routes::DEFAULT_PREFIX,
                routes::MERKLEDB_PREFIX
            ),
        ))
    }
}

fn content_length(headers: &HeaderMap) -> Option<u64> {
    headers
        .get(header::CONTENT_LENGTH)?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Read a whole request body, refusing more than `limit` bytes (413).
pub async fn read_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    what: &str,
) -> ApiResult<Bytes> {
    receive_body(headers, body, limit, what, |_| {}).await
}

/// [`read_body`] for the xorb `hash`, verified as it arrives if its length is declared
/// (see [`XorbReceiver`]).
async fn read_xorb_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    hash: &MerkleHash,
) -> ApiResult<ReceivedXorb> {
    let Some(declared) = content_length(headers) else {
        return Ok(ReceivedXorb::unverified(
            read_body(headers, body, limit, "xorb").await?,
        ));
    };
    let mut receiver = XorbReceiver::new(declared);
    // As for grant uploads: a frame's worth of hashing on the runtime thread, while the
    // frame is in the cache.
    let body = receive_body(headers, body, limit, "xorb", |b| receiver.advance(b)).await?;
    Ok(receiver.finish(body, hash))
}

/// Read a whole request body, refusing more than `limit` bytes (413); `seen` is given
/// the body so far after each frame.
async fn receive_body(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    what: &str,
    mut seen: impl FnMut(&[u8]),
) -> ApiResult<Bytes> {
    let declared = content_length(headers);
    if declared.is_some_and(|n| n > limit) {
        return Err(ApiError::too_large(what, limit));
    }
    // Large (xorb) bodies go into recycled buffers (see `xet_cas::buffers`).
    // Page-aligned, so the store's direct writes need no staging copy.
    let mut buf =
        xet_cas::buffers::BodyBuf::with_capacity(declared.unwrap_or(0).min(limit) as usize);
    let mut body = body;
    while let Some(frame) = body.frame().await {
        let frame = frame.map_err(|e| {
            ApiError::bad_request(code::BAD_REQUEST, format!("{what} body failed: {e}"))
        })?;
        if let Ok(data) = frame.into_data() {
            if (buf.len() + data.len()) as u64 > limit {
                return Err(ApiError::too_large(what, limit));
            }
            buf.extend_from_slice(&data);
            seen(buf.as_slice());
        }
    }
    Ok(buf.freeze())
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

fn json_ok<T: serde::Serialize>(status: StatusCode, v: &T) -> Response {
    (status, Json(v)).into_response()
}

/// One log line per request, written once the answer is sent in full (or cut off):
/// `ms` is the whole answer, `head_ms` the time to its headers. A streamed answer (the
/// NDJSON of `/v2/shards`, a xorb range) is mostly body, so the time to its headers
/// alone hides where it spends its time.
async fn request_log(req: Request, next: Next) -> Response {
    let id = uuid::Uuid::now_v7();
    let method = req.method().clone();
    let path = req.uri().path().chars().take(200).collect::<String>();
    let start = Instant::now();
    let mut resp = next.run(req).await;
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        resp.headers_mut().insert("x-request-id", v);
    }
    let head_ms = start.elapsed().as_millis() as u64;
    let status = resp.status().as_u16();
    let (parts, body) = resp.into_parts();
    let logged = LoggedBody {
        inner: body,
        bytes: 0,
        ended: false,
        line: RequestLine {
            id,
            method,
            path,
            status,
            start,
            head_ms,
        },
    };
    Response::from_parts(parts, Body::new(logged))
}

struct RequestLine {
    id: uuid::Uuid,
    method: Method,
    path: String,
    status: u16,
    start: Instant,
    head_ms: u64,
}

/// An answer's body, counting what is sent; logs the request when dropped (hyper drops it
/// once the body is sent, or when the connection goes away first).
struct LoggedBody {
    inner: Body,
    bytes: u64,
    ended: bool,
    line: RequestLine,
}

impl http_body::Body for LoggedBody {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, axum::Error>>> {
        let polled = std::pin::Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            std::task::Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes += data.len() as u64;
                }
            }
            std::task::Poll::Ready(None) => self.ended = true,
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        // Passed on as it is, so a known length still goes out as `Content-Length`.
        self.inner.size_hint()
    }
}

impl Drop for LoggedBody {
    fn drop(&mut self) {
        let l = &self.line;
        // A HEAD answer's body is never sent; any other body not read to its end was cut
        // off (the client went away, or the body failed).
        let complete =
            self.ended || http_body::Body::is_end_stream(&self.inner) || l.method == Method::HEAD;
        tracing::info!(
            request_id = %l.id,
            method = %l.method,
            path = %l.path,
            status = l.status,
            ms = l.start.elapsed().as_millis() as u64,
            head_ms = l.head_ms,
            bytes = self.bytes,
            complete,
            "request"
        );
    }
}

async fn no_route(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        code::NO_ROUTE,
        format!("no route for {method} {}", shorten(uri.path())),
    )
}

async fn method_not_allowed(method: Method, uri: Uri) -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        code::METHOD_NOT_ALLOWED,
        format!("{method} is not allowed on {}", shorten(uri.path())),
    )
}

// ---------------------------------------------------------------------------------------
// Misc routes

async fn health() -> Response {
    json_ok(StatusCode::OK, &serde_json::json!({"status": "ok"}))
}

/// Telemetry is accepted and discarded.
async fn telemetry(_: ReadAccess, headers: HeaderMap, body: Body) -> ApiResult<Response> {
    read_body(&headers, body, SMALL_BODY_LIMIT, "telemetry").await?;
    Ok(json_ok(StatusCode::OK, &serde_json::json!({})))
}

/// `GET /v1/token`: hands back the presented token with a fresh expiry, for clients that
/// refresh through a URL (`token_refresh_url`).
async fn token_refresh(
    State(s): State<AppState>,
    ReadAccess(caller): ReadAccess,
    BaseUrl(base): BaseUrl,
) -> Response {
    let body = TokenRefresh {
        access_token: caller.token.unwrap_or_else(|| "anonymous".to_string()),
        exp: unix_now() + s.config.token_ttl.as_secs().max(1),
        cas_url: base,
    };
    json_ok(StatusCode::OK, &body)
}

// ---------------------------------------------------------------------------------------
// Xorb uploads

async fn xorb_grant(
    State(s): State<AppState>,
    _: WriteAccess,
    BaseUrl(base): BaseUrl,
    PathParams((prefix, hash)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    let body = read_body(&headers, body, 64 * 1024, "grant request").await?;
    let req: GrantRequest = serde_json::from_slice(&body).map_err(|e| {
        ApiError::bad_request(
            code::BAD_REQUEST,
            format!("grant request is not valid JSON: {e}"),
        )
    })?;
    if !req.checksum.algo.eq_ignore_ascii_case("crc64nvme") {
        return Err(ApiError::bad_request(
            code::BAD_REQUEST,
            format!(
                "checksum algorithm {:?} is not supported (use crc64nvme)",
                shorten(&req.checksum.algo)
            ),
        ));
    }
    let crc: u64 = req.checksum.value.trim().parse().map_err(|_| {
        ApiError::bad_request(
            code::BAD_REQUEST,
            format!(
                "checksum value {:?} is not a decimal u64",
                shorten(&req.checksum.value)
            ),
        )
    })?;
    if req.length == 0 {
        return Err(ApiError::bad_request(
            code::INVALID_XORB,
            format!("xorb {xorb}: a grant for 0 bytes"),
        ));
    }
    if req.length > s.config.max_xorb_bytes {
        return Err(ApiError::too_large("xorb", s.config.max_xorb_bytes));
    }
    if s.cas.xorb_size(&xorb).await?.is_some() {
        return Ok(json_ok(
            StatusCode::OK,
            &WasInserted {
                was_inserted: false,
            },
        ));
    }
    let now = unix_now();
    let expires = s.url_expiry();
    let id = s.grants.issue(xorb, req.length, crc, expires, now)?;
    let url = format!(
        "{base}{GRANT_UPLOAD_PREFIX}/{id}?{}",
        s.signer.query(SIGN_GRANT, &id, expires)
    );
    let headers = BTreeMap::from([
        (
            "Content-Type".to_string(),
            "application/octet-stream".to_string(),
        ),
        ("Content-Length".to_string(), req.length.to_string()),
        (
            "x-amz-checksum-crc64nvme".to_string(),
            amz_checksum_header(crc),
        ),
    ]);
    Ok(json_ok(
        StatusCode::CREATED,
        &Grant {
            id,
            method: "PUT".to_string(),
            url,
            headers,
        },
    ))
}

/// `PUT /_grant-upload/{id}?...`: no bearer auth, the URL is signed.
async fn grant_upload(
    State(s): State<AppState>,
    PathParams(id): PathParams<String>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let now = unix_now();
    s.signer
        .verify(SIGN_GRANT, &id, query.as_deref(), now)
        .map_err(|e| signature_error(e, "grant upload"))?;
    let (ticket, guard) = s.grants.begin_upload(&id, now)?;
    if let Some(n) = content_length(&headers) {
        if n != ticket.length {
            return Err(ApiError::bad_request(
                code::LENGTH_MISMATCH,
                format!(
                    "upload for xorb {} declares {n} bytes but the grant is for {}",
                    ticket.xorb, ticket.length
                ),
            ));
        }
    }
    let want = amz_checksum_header(ticket.crc);
    for v in headers.get_all("x-amz-checksum-crc64nvme") {
        if v.as_bytes() != want.as_bytes() {
            return Err(ApiError::bad_request(
                code::CHECKSUM_MISMATCH,
                format!(
                    "x-amz-checksum-crc64nvme of the upload for xorb {} does not match the grant",
                    ticket.xorb
                ),
            ));
        }
    }
    let data = s.grants.receive(&ticket, body).await?;
    guard.complete(data)?;
    Ok(StatusCode::OK.into_response())
}

async fn xorb_commit(
    State(s): State<AppState>,
    _: WriteAccess,
    PathParams((prefix, hash, id)): PathParams<(String, String, String)>,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    let held = s.grants.take_for_commit(&id, &xorb)?;
    let _permit = s.upload_permit().await?;
    let data = held.into_xorb().await?;
    let was_inserted = s.cas.put_received_xorb(&xorb, data).await?;
    Ok(json_ok(StatusCode::OK, &WasInserted { was_inserted }))
}

async fn xorb_post(
    State(s): State<AppState>,
    _: WriteAccess,
    PathParams((prefix, hash)): PathParams<(String, String)>,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    let _permit = s.upload_permit().await?;
    let body = read_xorb_body(&headers, body, s.config.max_xorb_bytes, &xorb).await?;
    let was_inserted = s.cas.put_received_xorb(&xorb, body).await?;
    Ok(json_ok(StatusCode::OK, &WasInserted { was_inserted }))
}

fn head_response(len: u64) -> Response {
    let mut r = StatusCode::OK.into_response();
    r.headers_mut()
        .insert(header::CONTENT_LENGTH, HeaderValue::from(len));
    r
}

async fn xorb_head(
    State(s): State<AppState>,
    _: ReadAccess,
    PathParams((prefix, hash)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    match s.cas.xorb_size(&xorb).await? {
        Some(n) => Ok(head_response(n)),
        None => Err(ApiError::not_found(format!("xorb {xorb} not found"))),
    }
}

// ---------------------------------------------------------------------------------------
// Shards

async fn shards_v1(
    State(s): State<AppState>,
    _: WriteAccess,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let _permit = s.upload_permit().await?;
    let body = read_body(&headers, body, s.config.max_shard_bytes, "shard").await?;
    let inserted = s.cas.put_shard(body).await?;
    Ok(json_ok(
        StatusCode::OK,
        &ShardResultV1 {
            result: inserted as u8,
        },
    ))
}

fn frame(v: serde_json::Value) -> Bytes {
    let mut line = serde_json::to_vec(&v).expect("json");
    line.push(b'\n');
    Bytes::from(line)
}

/// Whether an error frame for `e` should tell the client to retry.
fn retryable(e: &CasError) -> bool {
    matches!(e, CasError::Storage(_)) || e.is_retryable()
}

/// `POST /v2/shards`: the shard is read and size-checked first (413/400 as HTTP
/// statuses), then the answer is a `200` NDJSON stream ending in
/// `{"type":"result","was_inserted":b}` or an error frame. Validation failures arrive as
/// `{"type":"error","message":..,"retryable":false,"error":<code>}` (hf_xet shows the
/// message to the user; a 400 would only show the status); storage failures as the same
/// frame with `retryable: true`.
async fn shards_v2(
    State(s): State<AppState>,
    _: WriteAccess,
    headers: HeaderMap,
    body: Body,
) -> ApiResult<Response> {
    let permit = s.upload_permit().await?;
    let body = read_body(&headers, body, s.config.max_shard_bytes, "shard").await?;
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(8);
    let cas = s.cas.clone();
    tokio::spawn(async move {
        let _permit = permit;
        let _ = tx
            .send(frame(
                serde_json::json!({"type": "validating", "verified": 0, "total": 1}),
            ))
            .await;
        match cas.put_shard(body).await {
            Ok(inserted) => {
                for f in [
                    serde_json::json!({"type": "validating", "verified": 1, "total": 1}),
                    serde_json::json!({"type": "committing", "stage": "uploading"}),
                    serde_json::json!({"type": "committing", "stage": "syncing"}),
                    // `was_inserted` is our addition (hf_xet ignores it): false when the shard
                    // was already registered.
                    serde_json::json!({"type": "result", "was_inserted": inserted}),
                ] {
                    if tx.send(frame(f)).await.is_err() {
                        break;
                    }
                }
            }
            Err(e) => {
                let retry = retryable(&e);
                if retry {
                    tracing::error!("shard upload failed: {e}");
                } else {
                    tracing::debug!("shard rejected: {e}");
                }
                let _ = tx
                    .send(frame(serde_json::json!({
                        "type": "error",
                        "message": e.to_string(),
                        "retryable": retry,
                        "error": ApiError::code_of(&e),
                    })))
                    .await;
            }
        }
    });
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<Bytes, Infallible>(b), rx))
    });
    let mut resp = Response::new(Body::from_stream(stream));
    resp.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static(routes::NDJSON),
    );
    Ok(resp)
}

// ---------------------------------------------------------------------------------------
// Reconstructions

fn single_range(headers: &HeaderMap) -> ApiResult<Option<RangeSpec>> {
    let Some(v) = headers.get(header::RANGE) else {
        return Ok(None);
    };
    let v = v
        .to_str()
        .map_err(|_| ApiError::bad_request(code::BAD_RANGE, "Range header is not ASCII"))?;
    let specs = parse_range_header(v).map_err(|e| ApiError::bad_request(code::BAD_RANGE, e))?;
    match specs.as_slice() {
        [one] => Ok(Some(*one)),
        _ => Err(ApiError::bad_request(
            code::BAD_RANGE,
            "reconstructions take a single byte range",
        )),
    }
}

async fn reconstruct(
    s: &Shared,
    file: &MerkleHash,
    range: Option<RangeSpec>,
) -> ApiResult<Reconstruction> {
    if file.is_zero() {
        return Ok(s.cas.reconstruction(file, None).await?);
    }
    let size = s
        .cas
        .file_size(file)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("file {file} not found")))?;
    let range = match range {
        None => None,
        Some(spec) => match spec.resolve(size) {
            None => {
                return Err(ApiError::unsatisfiable(
                    format!(
                        "range starts at byte {} but file {file} is {size} bytes",
                        spec.start()
                    ),
                    size,
                ));
            }
            Some(r) if r.start == 0 && r.end == size => None,
            Some(r) => Some(r),
        },
    };
    Ok(s.cas.reconstruction(file, range).await?)
}

async fn reconstruction_v2(
    State(s): State<AppState>,
    _: ReadAccess,
    BaseUrl(base): BaseUrl,
    PathParams(hash): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let file = parse_hash("file", &hash)?;
    let rec = reconstruct(&s, &file, single_range(&headers)?).await?;
    let expires = s.url_expiry();
    Ok(json_ok(
        StatusCode::OK,
        &rec.to_v2(|f| s.xorb_url(&base, &f.xorb, expires)),
    ))
}

async fn reconstruction_v1(
    State(s): State<AppState>,
    _: ReadAccess,
    BaseUrl(base): BaseUrl,
    PathParams(hash): PathParams<String>,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let file = parse_hash("file", &hash)?;
    let rec = reconstruct(&s, &file, single_range(&headers)?).await?;
    let expires = s.url_expiry();
    Ok(json_ok(
        StatusCode::OK,
        &rec.to_v1(|f| s.xorb_url(&base, &f.xorb, expires)),
    ))
}

/// `GET /v1/reconstructions?file_id=a&file_id=b`: whole files. Unknown files are left
/// out of `files`; a malformed id is a 400.
async fn reconstruction_batch(
    State(s): State<AppState>,
    _: ReadAccess,
    BaseUrl(base): BaseUrl,
    RawQuery(query): RawQuery,
) -> ApiResult<Response> {
    let mut ids = Vec::new();
    for (k, v) in query_pairs(query.as_deref().unwrap_or("")) {
        if k == "file_id" {
            ids.push(parse_hash("file", v)?);
        }
    }
    if ids.is_empty() {
        return Err(ApiError::bad_request(code::BAD_REQUEST, "no file_id given"));
    }
    if ids.len() > s.config.max_batch_files {
        return Err(ApiError::bad_request(
            code::BAD_REQUEST,
            format!(
                "{} file_ids; at most {} per request",
                ids.len(),
                s.config.max_batch_files
            ),
        ));
    }
    let expires = s.url_expiry();
    let mut out = BatchReconstructionV1 {
        files: BTreeMap::new(),
        fetch_info: BTreeMap::new(),
    };
    for file in ids {
        if out.files.contains_key(&file.to_string()) {
            continue;
        }
        let rec = match reconstruct(&s, &file, None).await {
            Ok(r) => r,
            Err(e) if e.status == StatusCode::NOT_FOUND => continue,
            Err(e) => return Err(e),
        };
        let v1 = rec.to_v1(|f| s.xorb_url(&base, &f.xorb, expires));
        out.files.insert(file.to_string(), v1.terms);
        for (xorb, list) in v1.fetch_info {
            let entry: &mut Vec<FetchInfoV1> = out.fetch_info.entry(xorb).or_default();
            for f in list {
                if !entry
                    .iter()
                    .any(|e| e.range == f.range && e.url_range == f.url_range)
                {
                    entry.push(f);
                }
            }
        }
    }
    Ok(json_ok(StatusCode::OK, &out))
}

async fn file_head(
    State(s): State<AppState>,
    _: ReadAccess,
    PathParams(hash): PathParams<String>,
) -> ApiResult<Response> {
    let file = parse_hash("file", &hash)?;
    if file.is_zero() {
        return Ok(head_response(0));
    }
    match s.cas.file_size(&file).await? {
        Some(n) => Ok(head_response(n)),
        None => Err(ApiError::not_found(format!("file {file} not found"))),
    }
}

async fn dedup_chunk(
    State(s): State<AppState>,
    _: ReadAccess,
    PathParams((prefix, hash)): PathParams<(String, String)>,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let chunk = parse_hash("chunk", &hash)?;
    match s.cas.dedup_shard(&chunk).await? {
        Some(shard) => {
            let mut r = Response::new(Body::from(shard));
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/octet-stream"),
            );
            Ok(r)
        }
        None => Err(ApiError::not_found(format!(
            "chunk {chunk} is not tracked for global dedup"
        ))),
    }
}

// ---------------------------------------------------------------------------------------
// Presigned xorb data

/// `GET /_xorb/{prefix}/{hash}?X-Xet-Expires=..&X-Xet-Signature=..` (no bearer auth).
/// No `Range`: 200 with the whole chunk region. One range: 206 + `Content-Range`.
/// Several: 206 `multipart/byteranges`. Unsatisfiable: 416. Expired or forged: 403.
async fn xorb_data(
    State(s): State<AppState>,
    PathParams((prefix, hash)): PathParams<(String, String)>,
    RawQuery(query): RawQuery,
    headers: HeaderMap,
) -> ApiResult<Response> {
    check_prefix(&prefix)?;
    let xorb = parse_hash("xorb", &hash)?;
    // Sign over the canonical form, so only URLs this server made verify.
    s.signer
        .verify(
            SIGN_XORB,
            &format!("{}/{xorb}", routes::DEFAULT_PREFIX),
            query.as_deref(),
            unix_now(),
        )
        .map_err(|e| signature_error(e, "xorb"))?;
    let size = s
        .cas
        .xorb_size(&xorb)
        .await?
        .ok_or_else(|| ApiError::not_found(format!("xorb {xorb} not found")))?;
    let fetch = |r: ByteRange| {
        let cas = s.cas.clone();
        async move {
            cas.fetch_xorb_range(&XorbFetch {
                xorb,
                chunks: ChunkRange::new(0, 0),
                bytes: r,
                url: None,
            })
            .await
        }
    };
    let octet = HeaderValue::from_static("application/octet-stream");
    let Some(range_header) = headers.get(header::RANGE) else {
        let data = fetch(ByteRange::new(0, size)).await?;
        let mut r = Response::new(Body::from(data));
        r.headers_mut().insert(header::CONTENT_TYPE, octet);
        r.headers_mut()
            .insert(header::ACCEPT_RANGES, HeaderValue::from_static("bytes"));
        return Ok(r);
    };
    let v = range_header
        .to_str()
        .map_err(|_| ApiError::bad_request(code::BAD_RANGE, "Range header is not ASCII"))?;
    let specs = parse_range_header(v).map_err(|e| ApiError::bad_request(code::BAD_RANGE, e))?;
    if specs.len() > s.config.max_ranges {
        return Err(ApiError::bad_request(
            code::BAD_RANGE,
            format!(
                "{} ranges; at most {} per request",
                specs.len(),
                s.config.max_ranges
            ),
        ));
    }
    let ranges: Vec<ByteRange> = specs.iter().filter_map(|r| r.resolve(size)).collect();
    // Overlapping ranges could make the answer many times the xorb's size.
    if ranges.iter().map(|r| r.len()).sum::<u64>() > size {
        return Err(ApiError::bad_request(
            code::BAD_RANGE,
            format!(
                "the requested ranges overlap (they add up to more than the {size} bytes of xorb {xorb})"
            ),
        ));
    }
    tracing::debug!(%xorb, range = v, satisfiable = ranges.len(), "xorb data");
    let content_range = |r: &ByteRange| format!("bytes {}-{}/{size}", r.start, r.end - 1);
    match ranges.as_slice() {
        [] => Err(ApiError::unsatisfiable(
            format!("no requested range overlaps xorb {xorb} ({size} bytes)"),
            size,
        )),
        [one] => {
            let data = fetch(*one).await?;
            let mut r = Response::new(Body::from(data));
            *r.status_mut() = StatusCode::PARTIAL_CONTENT;
            r.headers_mut().insert(header::CONTENT_TYPE, octet);
            r.headers_mut().insert(
                header::CONTENT_RANGE,
                HeaderValue::from_str(&content_range(one)).expect("ascii"),
            );
            Ok(r)
        }
        many => {
            let boundary = {
                let b: [u8; 12] = rand::random();
                b.iter().map(|x| format!("{x:02x}")).collect::<String>()
            };
            let mut body = Vec::new();
            for r in many {
                let data = fetch(*r).await?;
                body.extend_from_slice(
                    format!(
                        "--{boundary}\r\nContent-Type: application/octet-stream\r\nContent-Range: {}\r\n\r\n",
                        content_range(r)
                    )
                    .as_bytes(),
                );
                body.extend_from_slice(&data);
                body.extend_from_slice(b"\r\n");
            }
            body.extend_from_slice(format!("--{boundary}--\r\n").as_bytes());
            let mut r = Response::new(Body::from(body));
            *r.status_mut() = StatusCode::PARTIAL_CONTENT;
            r.headers_mut().insert(
                header::CONTENT_TYPE,
                HeaderValue::from_str(&format!("multipart/byteranges; boundary={boundary}"))
                    .expect("ascii"),
            );
            Ok(r)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Log lines written while `f` runs on this thread.
    fn logged(f: impl FnOnce()) -> String {
        let sink = xet_testdata::SharedBuf::default();
        let out = sink.clone();
        let subscriber = tracing_subscriber::fmt()
            .with_writer(move || out.clone())
            .with_ansi(false)
            .finish();
        tracing::subscriber::with_default(subscriber, f);
        String::from_utf8(sink.contents()).unwrap()
    }

    /// A body of three 1,000-byte frames, logged; `frames` of them are sent before it
    /// is dropped.
    fn send(method: Method, frames: usize) -> String {
        logged(|| {
            let rt = tokio::runtime::Builder::new_current_thread()
                .build()
                .unwrap();
            rt.block_on(async {
                let pieces = (0..3).map(|i| Ok::<_, Infallible>(Bytes::from(vec![i as u8; 1000])));
                let mut body = LoggedBody {
                    inner: Body::from_stream(futures_util::stream::iter(pieces)),
                    bytes: 0,
                    ended: false,
                    line: RequestLine {
                        id: uuid::Uuid::now_v7(),
                        method,
                        path: "/_xorb/x".into(),
                        status: 206,
                        start: Instant::now(),
                        head_ms: 0,
                    },
                };
                for _ in 0..frames {
                    body.frame().await.unwrap().unwrap();
                }
                if frames == 3 {
                    assert!(body.frame().await.is_none());
                }
            })
        })
    }

    #[test]
    fn request_lines_say_what_was_sent_and_whether_it_was_all() {
        let whole = send(Method::GET, 3);
        assert!(
            whole.contains("status=206") && whole.contains("bytes=3000 complete=true"),
            "{whole}"
        );
        // Cut off after one frame (the client went away).
        let cut = send(Method::GET, 1);
        assert!(cut.contains("bytes=1000 complete=false"), "{cut}");
        // A HEAD answer's body is never sent, and that is its whole answer.
        let head = send(Method::HEAD, 0);
        assert!(head.contains("bytes=0 complete=true"), "{head}");
        assert_eq!(whole.lines().count(), 1, "one line per request: {whole}");
    }
}
