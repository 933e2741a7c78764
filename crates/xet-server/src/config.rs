//! Server configuration and bearer tokens.
//!
//! # Token file format
//!
//! One token per line. Blank lines and lines starting with `#` are ignored; leading and
//! trailing whitespace is trimmed. A token may carry an access prefix:
//!
//! ```text
//! # full access (upload and download)
//! write:s3cr3t-upload-token
//! # download only
//! read:public-download-token
//! # no prefix means read+write
//! another-write-token
//! ```
//!
//! The same `read:` / `write:` prefixes work for `--token` on the command line
//! ([`Token::parse`]). Tokens must be printable ASCII without spaces (they travel in an
//! `Authorization: Bearer` header).
//!
//! A prefixed token may be scoped to Hub repositories with a last `:NAMESPACE/*` (every
//! repository of a namespace) or `:NAMESPACE/NAME` (one repository, of any type):
//!
//! ```text
//! # reads and writes org's repositories, and sees no other, not even whether it exists
//! write:team-token:org/*
//! read:one-repo-token:org/model-a
//! ```
//!
//! The same secret on several lines reaches what any of them grants.

use std::path::{Path, PathBuf};
use std::time::Duration;

/// What a token may do.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Access {
    /// Reconstructions, xorb downloads, dedup queries, HEAD, telemetry, token refresh.
    Read,
    /// Everything `Read` may do, plus xorb and shard uploads.
    Write,
}

/// One accepted bearer token.
#[derive(Clone, PartialEq, Eq)]
pub struct Token {
    pub secret: String,
    pub access: Access,
    /// The Hub repositories it reaches; `None`: all of them.
    pub scope: Option<RepoPattern>,
}

/// Hub repositories a scoped token reaches: `NAMESPACE/*` or `NAMESPACE/NAME`, of any
/// repository type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepoPattern {
    namespace: String,
    /// `None` for `*`.
    name: Option<String>,
}

impl RepoPattern {
    /// `NAMESPACE/*` or `NAMESPACE/NAME`, with the Hub's rules for both.
    pub fn parse(s: &str) -> Option<RepoPattern> {
        let (ns, name) = s.split_once('/')?;
        let name = (name != "*").then(|| name.to_string());
        // The Hub's rules for names, checked on a stand-in where the pattern has `*`.
        xet_hub::RepoId::new(ns, name.as_deref().unwrap_or("x")).ok()?;
        Some(RepoPattern {
            namespace: ns.to_string(),
            name,
        })
    }

    pub fn matches(&self, id: &xet_hub::RepoId) -> bool {
        id.namespace() == self.namespace && self.name.as_deref().is_none_or(|n| n == id.name())
    }
}

impl std::fmt::Display for RepoPattern {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}/{}",
            self.namespace,
            self.name.as_deref().unwrap_or("*")
        )
    }
}

impl std::fmt::Debug for Token {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never print the secret.
        f.debug_struct("Token")
            .field("access", &self.access)
            .field("scope", &self.scope)
            .field("secret", &"<redacted>")
            .finish()
    }
}

/// A malformed token or token file line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum TokenError {
    #[error("{origin}: empty token")]
    Empty { origin: String },
    #[error("{origin}: a token may only contain printable ASCII without spaces")]
    BadCharacter { origin: String },
    #[error("{origin}: {scope:?} is not a repository scope: write NAMESPACE/* or NAMESPACE/NAME")]
    BadScope { origin: String, scope: String },
    #[error("cannot read token file {path}: {message}")]
    Io { path: PathBuf, message: String },
}

impl Token {
    pub fn read(secret: impl Into<String>) -> Token {
        Token {
            secret: secret.into(),
            access: Access::Read,
            scope: None,
        }
    }
    pub fn write(secret: impl Into<String>) -> Token {
        Token {
            secret: secret.into(),
            access: Access::Write,
            scope: None,
        }
    }

    /// The same token, reaching only the repositories `pattern` matches.
    pub fn scoped(mut self, pattern: RepoPattern) -> Token {
        self.scope = Some(pattern);
        self
    }

    /// Parse `read:T`, `write:T` or `T` (read+write); the prefixed forms may end in
    /// `:NAMESPACE/*` or `:NAMESPACE/NAME` (a scope).
    pub fn parse(s: &str) -> Result<Token, TokenError> {
        Self::parse_with_origin(s, "--token")
    }

    fn parse_with_origin(s: &str, origin: &str) -> Result<Token, TokenError> {
        let s = s.trim();
        let (access, secret, prefixed) = if let Some(rest) = s.strip_prefix("read:") {
            (Access::Read, rest, true)
        } else if let Some(rest) = s.strip_prefix("write:") {
            (Access::Write, rest, true)
        } else {
            (Access::Write, s, false)
        };
        // A scope is what follows the last `:` when it names a repository (has a `/`).
        let (secret, scope) = match secret.rsplit_once(':') {
            Some((secret, scope)) if prefixed && scope.contains('/') => {
                let pattern = RepoPattern::parse(scope).ok_or_else(|| TokenError::BadScope {
                    origin: origin.to_string(),
                    scope: scope.to_string(),
                })?;
                (secret, Some(pattern))
            }
            _ => (secret, None),
        };
        if secret.is_empty() {
            return Err(TokenError::Empty {
                origin: origin.to_string(),
            });
        }
        if !secret.bytes().all(|b| b.is_ascii_graphic()) {
            return Err(TokenError::BadCharacter {
                origin: origin.to_string(),
            });
        }
        Ok(Token {
            secret: secret.to_string(),
            access,
            scope,
        })
    }
}

/// Parse the contents of a token file (format in the module docs). `name` is used in
/// error messages.
pub fn parse_token_file(text: &str, name: &str) -> Result<Vec<Token>, TokenError> {
    let mut out = Vec::new();
    for (i, line) in text.lines().enumerate() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        out.push(Token::parse_with_origin(
            line,
            &format!("{name} line {}", i + 1),
        )?);
    }
    Ok(out)
}

/// Read and parse a token file.
pub fn load_token_file(path: &Path) -> Result<Vec<Token>, TokenError> {
    let text = std::fs::read_to_string(path).map_err(|e| TokenError::Io {
        path: path.to_path_buf(),
        message: e.to_string(),
    })?;
    parse_token_file(&text, &path.display().to_string())
}

/// Largest accepted xorb body: 64 MiB of chunk data plus 8192 chunk headers, plus slack
/// (hf_xet's serialized xorbs may exceed 64 MiB slightly; see cas-http-api.md §1.4).
pub const DEFAULT_MAX_XORB_BYTES: u64 = 64 * 1024 * 1024 + 1024 * 1024;
/// Largest accepted shard upload.
pub const DEFAULT_MAX_SHARD_BYTES: u64 = 64 * 1024 * 1024;

/// Default [`ServerConfig::header_timeout`].
pub const DEFAULT_HEADER_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`ServerConfig::keepalive_timeout`].
pub const DEFAULT_KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`ServerConfig::body_timeout`].
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(30);
/// Default [`ServerConfig::send_timeout`].
pub const DEFAULT_SEND_TIMEOUT: Duration = Duration::from_secs(60);
/// Default [`ServerConfig::max_connections`].
pub const DEFAULT_MAX_CONNECTIONS: usize = 512;

/// Everything `xet serve` can be told.
#[derive(Debug, Clone)]
pub struct ServerConfig {
    /// `HOST:PORT` to bind; port 0 picks a free port. Without tokens only loopback
    /// addresses are allowed.
    pub listen: String,
    /// Accepted bearer tokens. Empty: no authentication (loopback only).
    pub tokens: Vec<Token>,
    /// Serve `/v2/shards` and `/v2/reconstructions` (otherwise 404, clients fall back to v1).
    pub allow_v2: bool,
    /// Serve xorb grants (otherwise the grant route answers 404 and clients fall back to
    /// `POST /v1/xorbs`).
    pub allow_grants: bool,
    /// Lifetime of presigned xorb URLs and grant upload URLs.
    pub url_ttl: Duration,
    /// How long uploaded grant data waits for its commit before it is dropped.
    pub grant_commit_ttl: Duration,
    /// `exp` handed out by the token refresh route is now + this.
    pub token_ttl: Duration,
    /// Base URL put into presigned URLs and `casUrl` (e.g. `https://cas.example.org`).
    /// `None`: `http://` + the `Host` the client connected to.
    pub public_url: Option<String>,
    pub max_xorb_bytes: u64,
    pub max_shard_bytes: u64,
    /// Uploaded-but-uncommitted grant data is kept in memory up to this many bytes in
    /// total; beyond that it is spooled to named files in `<spool_dir>/xet-grants-<pid>/`.
    pub grant_memory_budget: u64,
    /// Where grant data is spooled (default: the system temp dir).
    pub spool_dir: Option<PathBuf>,
    /// At most this many grants may be open (issued, uploaded, not yet committed).
    pub max_open_grants: usize,
    /// At most this many grants may be open for one token (everyone is one identity
    /// when auth is off); beyond it grant requests get `503 grant_capacity` and clients
    /// upload with `POST /v1/xorbs`.
    pub max_grants_per_token: usize,
    /// A grant that has received no data expires after this (or at its URL's expiry,
    /// whichever is sooner).
    pub grant_unused_ttl: Duration,
    /// Grant data spilled to files (past `grant_memory_budget`) is bounded to this many
    /// bytes in total; an upload beyond it gets `503 grant_capacity`.
    pub grant_spill_limit: u64,
    /// At most this many ranges in one multi-range xorb GET.
    pub max_ranges: usize,
    /// At most this many `file_id`s in one batch reconstruction.
    pub max_batch_files: usize,
    /// At most this many xorb/shard store writes run at once (direct xorb uploads, grant
    /// commits, shard uploads); further ones wait their turn. Taken only once a body has
    /// fully arrived, so slow or stalled senders never hold one.
    pub max_concurrent_uploads: usize,
    /// A connection must send a whole request head within this time of opening (or of
    /// the head's first byte); then it is closed (`408` if part of a head came). Zero:
    /// no limit. See [`crate::conn`].
    pub header_timeout: Duration,
    /// A kept-alive connection with no new request this long after its last answer is
    /// closed. Zero: no limit.
    pub keepalive_timeout: Duration,
    /// A request body that delivers nothing for this long while it is read is abandoned
    /// (`408`, connection closed). Zero: no limit.
    pub body_timeout: Duration,
    /// An answer the client reads nothing of for this long is dropped and its connection
    /// closed. Zero: no limit.
    pub send_timeout: Duration,
    /// At most this many open connections (idle ones are closed to make room, else new
    /// ones get `503`); lowered to fit the open-file limit.
    pub max_connections: usize,
    /// The Hub API's user: who `whoami` says the caller is, the namespace of a
    /// repository created without one, the author of commits.
    pub hub_user: String,
    /// Key of the short-lived CAS tokens the Hub API hands out (shared by every server on
    /// one store, kept in the store). `None`: the Hub API is off.
    pub cas_token_key: Option<[u8; 32]>,
    /// Largest commit request body (NDJSON with inline files) the Hub API accepts.
    pub max_commit_bytes: u64,
    /// The events feed of buckets (`GET /api/buckets/{ns}/{name}/events`).
    pub bucket_events: BucketEventsConfig,
}

/// Default [`BucketEventsConfig::max_session`].
pub const DEFAULT_EVENTS_SESSION: Duration = Duration::from_secs(20 * 60);

/// The events feed of buckets: how it follows the store and how long a stream lasts.
#[derive(Debug, Clone)]
pub struct BucketEventsConfig {
    /// How often a followed bucket's head is read from the store (the store is shared by
    /// every server on it, so reading it is how a change through another server is
    /// seen). One read per bucket, however many streams follow it.
    pub poll_interval: Duration,
    /// A `: ping` comment is sent this often, so clients and proxies see the stream live.
    pub ping_interval: Duration,
    /// A stream ends with `reconnect` (and its cursor) after this long.
    pub max_session: Duration,
    /// At most this many streams at once; more get `503` + `Retry-After`.
    pub max_streams: usize,
    /// A resume point is replayed only if it is within this many commits (batches) of
    /// the head; an older one gets `reset`.
    pub max_replay: usize,
}

impl Default for BucketEventsConfig {
    fn default() -> Self {
        BucketEventsConfig {
            poll_interval: Duration::from_secs(1),
            ping_interval: Duration::from_secs(30),
            max_session: DEFAULT_EVENTS_SESSION,
            max_streams: 256,
            max_replay: 1000,
        }
    }
}

impl Default for ServerConfig {
    fn default() -> Self {
        ServerConfig {
            listen: "127.0.0.1:0".to_string(),
            tokens: Vec::new(),
            allow_v2: true,
            allow_grants: true,
            url_ttl: Duration::from_secs(3600),
            grant_commit_ttl: Duration::from_secs(3600),
            token_ttl: Duration::from_secs(3600),
            public_url: None,
            max_xorb_bytes: DEFAULT_MAX_XORB_BYTES,
            max_shard_bytes: DEFAULT_MAX_SHARD_BYTES,
            grant_memory_budget: 256 * 1024 * 1024,
            spool_dir: None,
            max_open_grants: 4096,
            max_grants_per_token: 256,
            grant_unused_ttl: Duration::from_secs(300),
            grant_spill_limit: 4 * 1024 * 1024 * 1024,
            max_ranges: 256,
            max_batch_files: 1000,
            max_concurrent_uploads: 8,
            header_timeout: DEFAULT_HEADER_TIMEOUT,
            keepalive_timeout: DEFAULT_KEEPALIVE_TIMEOUT,
            body_timeout: DEFAULT_BODY_TIMEOUT,
            send_timeout: DEFAULT_SEND_TIMEOUT,
            max_connections: DEFAULT_MAX_CONNECTIONS,
            hub_user: "user".to_string(),
            cas_token_key: None,
            max_commit_bytes: 512 * 1024 * 1024,
            bucket_events: BucketEventsConfig::default(),
        }
    }
}

impl ServerConfig {
    /// A loopback config on a free port with everything enabled and no auth.
    pub fn loopback() -> Self {
        Self::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_prefixes() {
        assert_eq!(Token::parse("read:abc").unwrap(), Token::read("abc"));
        assert_eq!(Token::parse("write:abc").unwrap(), Token::write("abc"));
        assert_eq!(Token::parse("abc").unwrap(), Token::write("abc"));
        assert!(matches!(
            Token::parse("read:"),
            Err(TokenError::Empty { .. })
        ));
        assert!(matches!(
            Token::parse("a b"),
            Err(TokenError::BadCharacter { .. })
        ));
    }

    #[test]
    fn token_scopes() {
        let id = |s: &str| xet_hub::RepoId::parse(s).unwrap();
        let t = Token::parse("read:abc:org/*").unwrap();
        let ns = RepoPattern::parse("org/*").unwrap();
        assert_eq!(t, Token::read("abc").scoped(ns.clone()));
        assert!(ns.matches(&id("org/x")) && !ns.matches(&id("org2/x")));
        let one = Token::parse("write:a:b:org/x").unwrap();
        assert_eq!(one.secret, "a:b");
        let p = one.scope.unwrap();
        assert!(p.matches(&id("org/x")) && !p.matches(&id("org/y")));
        assert_eq!(p.to_string(), "org/x");
        // Without a prefix, or with no `/`, the colon is part of the secret.
        assert_eq!(Token::parse("abc:org/*").unwrap().scope, None);
        assert_eq!(Token::parse("read:a:b").unwrap().secret, "a:b");
        for bad in ["read:t:org/", "read:t:/x", "write:t:a/b/c", "read:t:o g/*"] {
            assert!(
                matches!(
                    Token::parse(bad),
                    Err(TokenError::BadScope { .. } | TokenError::BadCharacter { .. })
                ),
                "{bad}"
            );
        }
    }

    #[test]
    fn token_file() {
        let text = "# comment\n\nread:r1\n  write:w1  \nplain\n";
        let t = parse_token_file(text, "f").unwrap();
        assert_eq!(
            t,
            vec![Token::read("r1"), Token::write("w1"), Token::write("plain")]
        );
        let err = parse_token_file("ok\nread:\n", "f").unwrap_err();
        assert_eq!(err.to_string(), "f line 2: empty token");
    }

    #[test]
    fn debug_hides_secret() {
        assert!(!format!("{:?}", Token::write("hunter2")).contains("hunter2"));
    }
}
