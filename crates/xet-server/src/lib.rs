//! The local XET CAS server behind `xet serve`: the HTTP API the reference client
//! `hf_xet` 1.8.0 speaks (`cas-http-api.md`), over any [`Cas`].
//!
//! ```no_run
//! # async fn f(cas: std::sync::Arc<dyn xet_cas::Cas>) -> Result<(), xet_server::ServerError> {
//! use xet_server::{Server, ServerConfig, Token};
//! let config = ServerConfig { listen: "127.0.0.1:0".into(), tokens: vec![Token::write("t")], ..Default::default() };
//! let server = Server::bind(config, cas).await?;
//! println!("listening on {}", server.url());
//! server.serve(xet_server::shutdown_signal()).await?;
//! # Ok(()) }
//! ```
//!
//! # Routes
//!
//! | route | auth | answer |
//! |---|---|---|
//! | `GET /health` | none | `{"status":"ok"}` |
//! | `POST /v1/xorb-grants/{prefix}/{xorb}` | write | `201` grant (signed `PUT` URL on this server), `200 {"was_inserted":false}` if stored |
//! | `PUT /_grant-upload/{id}?X-Xet-Expires&X-Xet-Signature` | signed URL | `200`; length and CRC-64/NVME must match the grant (400), expired/forged `403` |
//! | `POST /v1/xorb-commits/{prefix}/{xorb}/grant/{id}` | write | `200 {"was_inserted":b}`; `404` when no data arrived |
//! | `POST /v1/xorbs/{prefix}/{xorb}` | write | `200 {"was_inserted":b}` |
//! | `HEAD /v1/xorbs/{prefix}/{xorb}` | read | `200` + content-length of the chunk region, or `404` |
//! | `POST /v2/shards` | write | `200` NDJSON frames (`validating`, `committing`, then `{"type":"result","was_inserted":b}` or `error`) |
//! | `POST /v1/shards` | write | `200 {"result":1\|0}` |
//! | `GET /v2/reconstructions/{file}` | read | v2 JSON; `Range: bytes=S-E` / `S-` / `-N`, `416` past the end |
//! | `GET /v1/reconstructions/{file}` | read | v1 JSON, same ranges |
//! | `GET /v1/reconstructions?file_id=..&file_id=..` | read | batch v1 JSON (unknown files left out) |
//! | `HEAD /v1/files/{file}` | read | `200` + content-length of the file, or `404` |
//! | `GET /v1/chunks/{prefix}/{chunk}` | read | `200` dedup shard bytes or `404` |
//! | `GET /_xorb/{prefix}/{xorb}?X-Xet-Expires&X-Xet-Signature` | signed URL | the stored xorb (chunk region, then footer and `info_length`, so `bytes=-N` gives the footer): `200` whole, `206` one range, `206 multipart/byteranges` several (≤ `max_ranges`, not overlapping), `416` none satisfiable, `403` expired/forged |
//! | `POST /v1/telemetry` | read | `200 {}` (discarded) |
//! | `GET /v1/token` | read | `{"accessToken","exp","casUrl"}`: the presented token, `exp` = a minted CAS token's own, else now + `token_ttl` |
//!
//! `{prefix}` is `default` or `default-merkledb`; anything else is `400 bad_prefix`.
//! Hashes are XET hash strings, parsed strictly (`400 bad_hash`); storage keys only ever
//! come from parsed hashes. Unknown routes (including other `/v2/...` ones) are `404`, so
//! hf_xet falls back to v1; `allow_v2 = false` turns the v2 routes into such 404s and
//! `allow_grants = false` the grant routes (clients then `POST /v1/xorbs`).
//!
//! Every rejection is a 4xx/5xx with a JSON [`xet_cas::wire::ErrorBody`]
//! `{"error": <code>, "reason": <text>}`; codes are in [`error::code`]. An invalid shard on
//! `/v2/shards` is the exception: it is an `error` frame with `retryable: false` (plus an
//! `error` code field) in a `200` stream, because hf_xet shows the frame's message to the
//! user. Storage failures are `500` (or a `retryable: true` frame).
//!
//! Reconstruction ranges: `bytes=S-E` (inclusive end, clamped to the file), `bytes=S-` and
//! `bytes=-N`; a start at or past the end is `416` with `Content-Range: bytes */SIZE`; a
//! malformed or multi-range header is `400 bad_range`. A range covering the whole file is
//! asked of the store as "whole file". The empty file (hash zero) reconstructs to no terms
//! without being registered; any range of it is `416` (`Content-Range: bytes */0`).
//!
//! # Limits
//!
//! Xorb bodies ≤ `max_xorb_bytes` (65 MiB: hf_xet's bodies can exceed 64 MiB slightly),
//! shards ≤ `max_shard_bytes` (64 MiB), both `413`. A body is read whole before its
//! upload takes one of `max_concurrent_uploads` permits, which bound store writes, so a
//! stalled sender never holds one. Grant data waiting for its commit is kept in memory up
//! to `grant_memory_budget` in total, then spilled to named files in
//! `<spool_dir>/xet-grants-<pid>/` (`xet serve`: `ROOT/grants/`), at most
//! `grant_spill_limit` bytes; a commit removes the data only once the store took it. At
//! most `max_open_grants` grants are open, `max_grants_per_token` per token, and a grant
//! nothing was sent to expires after `grant_unused_ttl`; a refusal for capacity is `503`
//! with `"error":"grant_capacity"` and `Retry-After`, on which our client uploads the xorb
//! directly.
//!
//! Connections ([`conn`]; `xet serve` flags in brackets): a connection must send its
//! request head within `header_timeout` (30 s, `--header-timeout`) of opening, else it is
//! closed (`408` if part of a head came); a kept-alive connection idle for
//! `keepalive_timeout` (60 s, `--keepalive-timeout`) after an answer is closed; a request
//! body that delivers nothing for `body_timeout` (30 s, `--body-timeout`) is abandoned
//! with `408 request_timeout` and the connection closed; an answer the client does not
//! read for `send_timeout` (60 s, `--send-timeout`) is dropped and the connection closed.
//! At most `max_connections` (512, `--max-connections`, lowered to fit the open-file
//! limit) are open: at the cap the longest-idle connection is closed to make room, and
//! when all are busy a new one gets `503 busy` with `Retry-After: 1`. Zero turns a
//! timeout off.
//!
//! # Authentication
//!
//! `Authorization: Bearer <token>`. Tokens are read+write or read-only
//! ([`config`] documents the token file format). Missing/unknown token: `401`; a read-only
//! token on an upload route: `403`. With no token configured the server only binds
//! loopback addresses ([`ServerError::NoTokenOnPublicAddress`]). Presigned xorb URLs and
//! grant upload URLs carry no bearer token: they are signed with a per-process key and
//! expire after `url_ttl` (then `403`, which makes hf_xet re-query or re-grant).

pub mod app;
pub mod auth;
pub mod config;
pub mod conn;
pub mod error;
pub mod grants;
pub mod hub;
pub mod multipart;
pub mod range;
mod routes;
pub mod sign;
pub mod spool;
pub mod state;
pub mod web;

pub use config::{
    Access, BucketEventsConfig, RepoPattern, ServerConfig, Token, TokenError, load_token_file,
    parse_token_file,
};

use std::future::Future;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use xet_cas::Cas;

/// Why the server could not start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Worded for any caller; a CLI adds how to pass a token.
    #[error(
        "refusing to serve {listen} without a token: only loopback addresses (127.0.0.1, ::1, localhost) may be served \
         without one"
    )]
    NoTokenOnPublicAddress { listen: String },
    #[error("cannot resolve listen address {listen}: {message}")]
    Resolve { listen: String, message: String },
    #[error("cannot listen on {listen}: {cause}")]
    Bind {
        listen: String,
        cause: std::io::Error,
    },
    #[error("invalid public URL {url:?}: it must start with http:// or https://")]
    PublicUrl { url: String },
    #[error("spool directory {0} does not exist or is not a directory")]
    SpoolDir(PathBuf),
    #[error(transparent)]
    Token(#[from] TokenError),
    #[error("server failed")]
    Io(#[from] std::io::Error),
}

/// A bound, not yet serving, server.
pub struct Server {
    listener: tokio::net::TcpListener,
    state: state::AppState,
}

impl Server {
    /// Resolve and bind `config.listen` (port 0 picks a free port).
    pub async fn bind(config: ServerConfig, cas: Arc<dyn Cas>) -> Result<Server, ServerError> {
        Self::bind_with_hub(config, cas, None).await
    }

    /// [`bind`](Self::bind), also serving the Hub API over `repos` (see [`hub`]); CAS
    /// tokens are minted with `config.cas_token_key` (a random key if unset, so tokens
    /// then work on this process only).
    pub async fn bind_with_hub(
        config: ServerConfig,
        cas: Arc<dyn Cas>,
        repos: Option<xet_hub::Repos>,
    ) -> Result<Server, ServerError> {
        let listen = config.listen.clone();
        let addrs: Vec<SocketAddr> = tokio::net::lookup_host(&listen)
            .await
            .map_err(|e| ServerError::Resolve {
                listen: listen.clone(),
                message: e.to_string(),
            })?
            .collect();
        if addrs.is_empty() {
            return Err(ServerError::Resolve {
                listen,
                message: "no addresses".to_string(),
            });
        }
        if config.tokens.is_empty() && !addrs.iter().all(|a| a.ip().is_loopback()) {
            return Err(ServerError::NoTokenOnPublicAddress { listen });
        }
        if let Some(u) = config
            .public_url
            .as_ref()
            .filter(|u| !(u.starts_with("http://") || u.starts_with("https://")))
        {
            return Err(ServerError::PublicUrl { url: u.clone() });
        }
        let spool_dir = config.spool_dir.clone().unwrap_or_else(std::env::temp_dir);
        if !spool_dir.is_dir() {
            return Err(ServerError::SpoolDir(spool_dir));
        }
        let listener = tokio::net::TcpListener::bind(addrs.as_slice())
            .await
            .map_err(|source| ServerError::Bind {
                listen: listen.clone(),
                cause: source,
            })?;
        let local_addr = listener.local_addr()?;
        let grants = Arc::new(grants::Grants::new(
            config.grant_memory_budget,
            spool_dir,
            config.max_open_grants,
            config.grant_commit_ttl,
        ));
        let mut auth = auth::Auth::new(config.tokens.clone());
        if repos.is_some() {
            auth = auth.with_minter(auth::TokenMinter::new(
                config.cas_token_key.unwrap_or_else(rand::random),
            ));
        }
        let state = Arc::new(state::Shared {
            cas,
            auth,
            hub: repos.map(|repos| {
                // Applying a commit and decoding large folders is CPU work: the blocking
                // pool's, not the executor's.
                let repos = repos.with_offload(Arc::new(|work| {
                    Box::pin(async move {
                        let _ = tokio::task::spawn_blocking(work).await;
                    })
                }));
                let events = &config.bucket_events;
                let followers = state::follow::Followers::new(
                    repos.clone(),
                    events.poll_interval,
                    events.max_streams,
                );
                Arc::new(state::Hub { repos, followers })
            }),
            signer: sign::UrlSigner::random(),
            grants,
            upload_permits: Arc::new(tokio::sync::Semaphore::new(
                config.max_concurrent_uploads.max(1),
            )),
            config,
            local_addr,
            web: Default::default(),
        });
        Ok(Server { listener, state })
    }

    pub fn local_addr(&self) -> SocketAddr {
        self.state.local_addr
    }

    /// Where the front page's store figures (bytes of files, bytes stored) come from;
    /// computed in the background at most once a minute. Without one the front page
    /// shows none.
    pub fn set_store_figures(&self, source: web::FiguresSource) {
        self.state.web.set_figures_source(source);
    }

    /// `http://HOST:PORT` of the bound socket.
    pub fn url(&self) -> String {
        format!("http://{}", self.state.local_addr)
    }

    /// The router (e.g. to embed it elsewhere or drive it with `tower::ServiceExt`).
    pub fn router(&self) -> axum::Router {
        app::router(self.state.clone())
    }

    /// The bound listener and the router, to serve them some other way (extra layers,
    /// a custom accept loop). [`conn::serve`] with [`conn::ConnLimits::from_config`]
    /// serves them with the connection limits [`Server::serve`] applies; the body timeout
    /// is in the router already.
    pub fn into_parts(self) -> (tokio::net::TcpListener, axum::Router) {
        let router = app::router(self.state.clone());
        (self.listener, router)
    }

    /// Serve until `shutdown` completes, then stop accepting and finish in-flight requests.
    /// Connections are limited as the config says (timeouts, `max_connections`; see
    /// [`conn`]).
    pub async fn serve<F>(self, shutdown: F) -> Result<(), ServerError>
    where
        F: Future<Output = ()> + Send + 'static,
    {
        let limits = conn::ConnLimits::from_config(&self.state.config);
        if limits.max_connections < self.state.config.max_connections {
            tracing::warn!(
                "serving at most {} connections, not {}: the open-file limit is {}",
                limits.max_connections,
                self.state.config.max_connections,
                conn::open_file_limit().unwrap_or(0)
            );
        }
        let router = app::router(self.state.clone());
        // Bucket event streams would hold a graceful shutdown for as long as they last:
        // told it began, they say `reconnect` and end.
        let state = self.state.clone();
        let shutdown = async move {
            shutdown.await;
            if let Some(hub) = &state.hub {
                hub.followers.close();
            }
        };
        conn::serve(self.listener, router, limits, shutdown).await?;
        Ok(())
    }
}

/// `listener`, with `TCP_NODELAY` on every accepted connection. Without it a streamed
/// answer stalls: the NDJSON frames of `/v2/shards` are small, and each one after the
/// first waits for the client's delayed ACK of the one before (40 ms on Linux, seen at
/// the end of every upload). Use it for any other way of serving [`Server::into_parts`].
pub fn nodelay(
    listener: tokio::net::TcpListener,
) -> axum::serve::TapIo<tokio::net::TcpListener, fn(&mut tokio::net::TcpStream)> {
    use axum::serve::ListenerExt;
    let set: fn(&mut tokio::net::TcpStream) = |tcp| conn::set_nodelay(tcp);
    listener.tap_io(set)
}

/// Completes on SIGINT (Ctrl-C) or, on Unix, SIGTERM.
pub async fn shutdown_signal() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! {
        _ = ctrl_c => tracing::info!("SIGINT: shutting down"),
        _ = term => tracing::info!("SIGTERM: shutting down"),
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn refusing_to_serve_without_a_token_leaves_flag_advice_to_the_cli() {
        let e = super::ServerError::NoTokenOnPublicAddress {
            listen: "0.0.0.0:80".into(),
        };
        let m = e.to_string();
        assert!(m.contains("0.0.0.0:80") && m.contains("loopback"), "{m}");
        assert!(!m.contains("--"), "{m}");
    }

    #[tokio::test]
    async fn accepted_connections_do_not_wait_to_coalesce_small_writes() {
        use axum::serve::Listener;
        let inner = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = inner.local_addr().unwrap();
        let mut listener = super::nodelay(inner);
        let (client, (accepted, _)) =
            tokio::join!(tokio::net::TcpStream::connect(addr), listener.accept());
        client.unwrap();
        assert!(
            accepted.nodelay().unwrap(),
            "served sockets must have TCP_NODELAY (streamed answers stall 40 ms per frame)"
        );
    }
}
