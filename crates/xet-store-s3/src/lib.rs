//! The S3-compatible backend of xet's CAS store: a [`StoreCas`] whose objects live in a
//! bucket (AWS S3, MinIO, Ceph RGW, R2, …), so several servers on several machines can
//! share one store.
//!
//! Every [`ObjectKey`] maps to the object `<prefix>/<key>` of the bucket (see
//! `docs/STORE.md`):
//!
//! ```text
//! s3://BUCKET/PREFIX/xorbs/<hash>
//! s3://BUCKET/PREFIX/shards/<hash>.mdb
//! s3://BUCKET/PREFIX/meta/dedup-secret
//! s3://BUCKET/PREFIX/hub/…              (Hub repositories, sha256 records)
//! ```
//!
//! * `put_if_absent` is a single `PutObject` with `If-None-Match: *` (a conditional
//!   write): the server refuses it with 412 when the key exists, so exactly one of several
//!   racing writers wins, and a `PutObject` is atomic (readers see no object or all of it).
//! * `get_range` is a ranged `GET`, `size` a `HEAD`, `list` a `ListObjectsV2` (sorted),
//!   `delete` a `HEAD` + `DELETE`.
//!
//! ## Servers without conditional writes
//!
//! [`S3Backend::open`] probes whether the server honours `If-None-Match: *` (some
//! S3-compatible servers ignore the header and overwrite, others reject it). Without it
//! ([`ConditionalPut`]):
//!
//! * xorbs, shards, Hub commits and verified sha256 records
//!   ([`ObjectKey::is_content_addressed`]) are written with `HEAD` then `PutObject`. Their
//!   stored form is a pure function of their key, so a racing writer of the same key
//!   writes the same bytes: the only cost is that two racing writers may both report
//!   `true`.
//! * the other objects — metadata (`meta/…`, the dedup-key secret), Hub repository
//!   records and branch versions — are **never** overwritten once they exist, and are not
//!   content-addressed: two processes creating a new store at the same moment would each
//!   write a different secret, two commits racing for a branch would each see their
//!   write succeed. With [`ConditionalPut::Auto`] creating one is therefore refused with
//!   an error saying what to do; with [`ConditionalPut::Disabled`] (an explicit choice:
//!   only one process writes them) it is written after a `HEAD`, then read back after
//!   [`META_SETTLE`], and a different answer (another writer's) is reported as `false`.
//!   That makes a branch move cost a second, and the read-back catches a racing writer
//!   only if both writes land within [`META_SETTLE`]: several servers committing to one
//!   bucket need conditional writes.

use std::fmt;
use std::str::FromStr;
use std::time::Duration;

use bytes::Bytes;
use futures_util::TryStreamExt;
use object_store::aws::{AmazonS3, AmazonS3Builder, AmazonS3ConfigKey, S3ConditionalPut};
use object_store::path::Path;
use object_store::{
    BackoffConfig, ClientConfigKey, GetOptions, GetRange, ObjectStore, ObjectStoreExt, PutMode,
    PutOptions, PutPayload, RetryConfig,
};
use xet_cas::{ByteRange, CasError, Cause, Result};
use xet_store::{META_PREFIX, ObjectBackend, ObjectKey, StoreCas, StoreConfig, check_range};

/// The URL scheme of S3 stores: `s3://BUCKET[/PREFIX]`.
pub const S3_SCHEME: &str = "s3://";

/// How long a metadata object written without a conditional put is left to settle before
/// it is read back (see the crate documentation).
pub const META_SETTLE: Duration = Duration::from_secs(1);

/// Timeout of one request (a shard can be up to 1 GiB).
const REQUEST_TIMEOUT: &str = "600s";
/// Attempts `put_if_absent` makes when the server answers "exists" but the object is gone.
const PUT_ATTEMPTS: usize = 3;

/// Whether `s` names an S3 store (`s3://…`).
pub fn is_s3_url(s: &str) -> bool {
    s.get(..S3_SCHEME.len())
        .is_some_and(|p| p.eq_ignore_ascii_case(S3_SCHEME))
}

/// Use of conditional writes (`PutObject` with `If-None-Match: *`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum ConditionalPut {
    /// Probe the server when opening; use conditional writes if it honours them, else
    /// fall back (see the crate documentation) and refuse to create metadata objects.
    #[default]
    Auto,
    /// Always use conditional writes; opening fails if the server does not honour them.
    Required,
    /// Never send `If-None-Match` (for servers that reject it). The operator guarantees
    /// that only one process creates a new store.
    Disabled,
}

impl FromStr for ConditionalPut {
    type Err = String;
    fn from_str(s: &str) -> std::result::Result<Self, String> {
        match s.to_ascii_lowercase().as_str() {
            "auto" => Ok(ConditionalPut::Auto),
            "on" | "required" => Ok(ConditionalPut::Required),
            "off" | "disabled" => Ok(ConditionalPut::Disabled),
            _ => Err(format!(
                "conditional put mode {s:?}: expected auto, on or off"
            )),
        }
    }
}

impl fmt::Display for ConditionalPut {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ConditionalPut::Auto => "auto",
            ConditionalPut::Required => "on",
            ConditionalPut::Disabled => "off",
        })
    }
}

/// Static credentials. `Debug` does not show the secret.
#[derive(Clone, PartialEq, Eq)]
pub struct S3Credentials {
    pub access_key_id: String,
    pub secret_access_key: String,
    pub session_token: Option<String>,
}

impl fmt::Debug for S3Credentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Credentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"<redacted>")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "<redacted>"),
            )
            .finish()
    }
}

/// Where a store lives and how to reach it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct S3Config {
    pub bucket: String,
    /// Key prefix inside the bucket: `""` or segments joined by `/` (no leading or
    /// trailing `/`), each of `[A-Za-z0-9._-]`, never `.` or `..`.
    pub prefix: String,
    /// Endpoint of an S3-compatible server (`http://127.0.0.1:9000`); `None`: AWS (or
    /// `AWS_ENDPOINT_URL` when [`use_env`](Self::use_env)).
    pub endpoint: Option<String>,
    /// Region (`None`: `AWS_REGION`/`AWS_DEFAULT_REGION` when `use_env`, else `us-east-1`).
    pub region: Option<String>,
    /// Static credentials (`None`: the `AWS_*` variables and the other sources of the
    /// standard chain when `use_env`).
    pub credentials: Option<S3Credentials>,
    /// Start from the standard `AWS_*` environment variables; the fields above win.
    pub use_env: bool,
    /// Allow a plain-HTTP endpoint that is not a loopback address (loopback endpoints
    /// are always allowed; `AWS_ALLOW_HTTP=true` also allows it when `use_env`).
    pub allow_http: bool,
    pub conditional_put: ConditionalPut,
}

impl S3Config {
    /// A config for `bucket` and `prefix` with nothing taken from the environment.
    pub fn new(bucket: impl Into<String>, prefix: impl Into<String>) -> Result<Self> {
        let bucket = bucket.into();
        let prefix = prefix.into();
        let prefix = prefix.trim_matches('/').to_string();
        validate_bucket(&bucket)?;
        validate_prefix(&prefix)?;
        Ok(S3Config {
            bucket,
            prefix,
            endpoint: None,
            region: None,
            credentials: None,
            use_env: false,
            allow_http: false,
            conditional_put: ConditionalPut::Auto,
        })
    }

    /// Parse `s3://BUCKET[/PREFIX]`; the result reads the `AWS_*` environment
    /// ([`use_env`](Self::use_env)).
    pub fn from_url(url: &str) -> Result<Self> {
        if !is_s3_url(url) {
            return Err(CasError::storage(format!(
                "{url:?} is not an S3 store URL (s3://BUCKET[/PREFIX])"
            )));
        }
        let rest = &url[S3_SCHEME.len()..];
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        let mut c = S3Config::new(bucket, prefix)?;
        c.use_env = true;
        Ok(c)
    }

    /// `s3://BUCKET[/PREFIX]`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("{S3_SCHEME}{}", self.bucket)
        } else {
            format!("{S3_SCHEME}{}/{}", self.bucket, self.prefix)
        }
    }
}

fn validate_bucket(b: &str) -> Result<()> {
    let ok = (3..=63).contains(&b.len())
        && b.bytes()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'.' || c == b'-')
        && b.as_bytes()[0].is_ascii_alphanumeric()
        && b.as_bytes()[b.len() - 1].is_ascii_alphanumeric();
    if ok {
        Ok(())
    } else {
        Err(CasError::storage(format!(
            "invalid bucket name {b:?}: 3 to 63 of a-z, 0-9, '.', '-', starting and ending with a letter or digit"
        )))
    }
}

fn validate_prefix(p: &str) -> Result<()> {
    if p.is_empty() {
        return Ok(());
    }
    for seg in p.split('/') {
        let ok = !seg.is_empty()
            && seg != "."
            && seg != ".."
            && seg
                .bytes()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'.' | b'_' | b'-'));
        if !ok {
            return Err(CasError::storage(format!(
                "invalid key prefix {p:?}: segments of A-Z, a-z, 0-9, '.', '_', '-' separated by '/' (not '.' or '..')"
            )));
        }
    }
    Ok(())
}

/// Whether `url` is `http://` to a loopback host (`localhost`, `127.0.0.0/8`, `[::1]`).
pub fn is_loopback_http(url: &str) -> bool {
    let lower = url.to_ascii_lowercase();
    let Some(rest) = lower.strip_prefix("http://") else {
        return false;
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host_port = authority.rsplit('@').next().unwrap_or("");
    let host = match host_port.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => host_port.split(':').next().unwrap_or(""),
    };
    host == "localhost"
        || host
            .parse::<std::net::IpAddr>()
            .is_ok_and(|ip| ip.is_loopback())
}

/// Whether the S3 server refused the request for its credentials (a 401/403 answer or
/// the codes S3 servers give for a bad signature or an unknown key).
fn refused(e: &object_store::Error) -> bool {
    if matches!(
        e,
        object_store::Error::PermissionDenied { .. } | object_store::Error::Unauthenticated { .. }
    ) {
        return true;
    }
    let text = S3Error::text(e);
    [
        "SignatureDoesNotMatch",
        "InvalidAccessKeyId",
        "AccessDenied",
        "403 Forbidden",
    ]
    .iter()
    .any(|c| text.contains(c))
}

/// The S3 client's error, as the cause of a [`CasError`]. object_store writes each
/// cause into its own message and also returns it from `source()`, so a chain printer
/// would repeat it: this shows each message of the chain once and ends the chain there.
/// [`S3Error::inner`] is the error itself.
#[derive(Debug)]
pub struct S3Error(object_store::Error);

impl S3Error {
    pub fn inner(&self) -> &object_store::Error {
        &self.0
    }

    /// The messages of `e` and its causes, each once.
    fn text(e: &(dyn std::error::Error + 'static)) -> String {
        let mut s = e.to_string();
        let mut cur = e.source();
        while let Some(c) = cur {
            let m = c.to_string();
            if !s.contains(&m) {
                s.push_str(": ");
                s.push_str(&m);
            }
            cur = c.source();
        }
        s
    }
}

impl std::fmt::Display for S3Error {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&S3Error::text(&self.0))
    }
}

// No `source()`: the message already holds every cause (see the type's docs).
impl std::error::Error for S3Error {}

/// Objects in an S3-compatible bucket under a key prefix.
pub struct S3Backend {
    store: AmazonS3,
    bucket: String,
    prefix: String,
    endpoint: String,
    conditional: bool,
    mode: ConditionalPut,
}

impl fmt::Debug for S3Backend {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("S3Backend")
            .field("bucket", &self.bucket)
            .field("prefix", &self.prefix)
            .field("endpoint", &self.endpoint)
            .field("conditional_puts", &self.conditional)
            .field("mode", &self.mode)
            .finish()
    }
}

impl S3Backend {
    /// The keys starting with `prefix` with what the listing says of them, sorted.
    /// Listing is by whole path segments: the directory holding `prefix`, filtered.
    async fn list_meta(&self, prefix: &str) -> Result<Vec<(ObjectKey, object_store::ObjectMeta)>> {
        let dir = prefix.rfind('/').map_or("", |i| &prefix[..i]);
        let root = self.path_of(dir);
        let strip = if self.prefix.is_empty() {
            String::new()
        } else {
            format!("{}/", self.prefix)
        };
        let mut stream = self.store.list(Some(&root));
        let mut out = Vec::new();
        while let Some(meta) = stream
            .try_next()
            .await
            .map_err(|e| self.err("listing", &root, e))?
        {
            let Some(rel) = meta.location.as_ref().strip_prefix(strip.as_str()) else {
                continue;
            };
            if let Some(k) = ObjectKey::parse(rel).filter(|k| k.as_str().starts_with(prefix)) {
                out.push((k, meta));
            }
        }
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        Ok(out)
    }
    /// Connect to the bucket: check that it is reachable and exists, then (unless
    /// [`ConditionalPut::Disabled`]) probe conditional writes with a temporary object
    /// under `PREFIX/tmp/` (removed afterwards; never listed as an object).
    pub async fn open(config: S3Config) -> Result<Self> {
        validate_bucket(&config.bucket)?;
        validate_prefix(&config.prefix)?;
        let url = config.url();
        let mut b = if config.use_env {
            AmazonS3Builder::from_env()
        } else {
            AmazonS3Builder::new()
        };
        b = b
            .with_bucket_name(&config.bucket)
            .with_conditional_put(S3ConditionalPut::ETagMatch)
            .with_config(
                AmazonS3ConfigKey::Client(ClientConfigKey::Timeout),
                REQUEST_TIMEOUT,
            );
        if let Some(e) = &config.endpoint {
            // Also the S3-specific key, which would otherwise win over an explicit endpoint.
            b = b
                .with_endpoint(e)
                .with_config(AmazonS3ConfigKey::S3Endpoint, e);
        }
        if let Some(r) = &config.region {
            b = b.with_region(r);
        }
        if let Some(c) = &config.credentials {
            b = b
                .with_access_key_id(&c.access_key_id)
                .with_secret_access_key(&c.secret_access_key);
            if let Some(t) = &c.session_token {
                b = b.with_token(t);
            }
        }
        let endpoint = b
            .get_config_value(&AmazonS3ConfigKey::S3Endpoint)
            .or_else(|| b.get_config_value(&AmazonS3ConfigKey::Endpoint));
        if let Some(e) = &endpoint
            && e.to_ascii_lowercase().starts_with("http://")
        {
            let env_allows = b
                .get_config_value(&AmazonS3ConfigKey::Client(ClientConfigKey::AllowHttp))
                .is_some_and(|v| v.eq_ignore_ascii_case("true"));
            if is_loopback_http(e) || config.allow_http {
                b = b.with_allow_http(true);
            } else if !env_allows {
                return Err(CasError::storage(format!(
                    "{url}: endpoint {e} is plain HTTP to a non-loopback host; use https, or set AWS_ALLOW_HTTP=true to allow it"
                )));
            }
        }
        let endpoint = endpoint.unwrap_or_else(|| "AWS".to_string());
        let build = |b: AmazonS3Builder, retries: usize, timeout: u64| {
            b.with_retry(RetryConfig {
                backoff: BackoffConfig::default(),
                max_retries: retries,
                retry_timeout: Duration::from_secs(timeout),
            })
            .build()
            .map_err(|e| CasError::storage_with(format!("configuring {url}"), S3Error(e)))
        };
        // Opening fails fast on an unreachable server; later requests retry longer.
        let quick = build(b.clone(), 2, 10)?;
        let store = build(b, 5, 120)?;
        let mut backend = S3Backend {
            store: quick,
            bucket: config.bucket.clone(),
            prefix: config.prefix.clone(),
            endpoint,
            conditional: config.conditional_put != ConditionalPut::Disabled,
            mode: config.conditional_put,
        };
        backend.check_reachable().await?;
        if config.conditional_put != ConditionalPut::Disabled {
            backend.conditional = backend.probe_conditional_put().await?;
            if !backend.conditional {
                if config.conditional_put == ConditionalPut::Required {
                    return Err(CasError::storage(format!(
                        "{url} (endpoint {}): the server does not honour conditional writes (If-None-Match: *), which were required",
                        backend.endpoint
                    )));
                }
                tracing::warn!(
                    store = %url,
                    endpoint = %backend.endpoint,
                    "the S3 server does not honour conditional writes (If-None-Match: *): \
                     xorbs and shards are written after an existence check, and metadata \
                     objects are never created by this process"
                );
            }
        }
        backend.store = store;
        Ok(backend)
    }

    /// `s3://BUCKET[/PREFIX]`.
    pub fn url(&self) -> String {
        if self.prefix.is_empty() {
            format!("{S3_SCHEME}{}", self.bucket)
        } else {
            format!("{S3_SCHEME}{}/{}", self.bucket, self.prefix)
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// Whether writes are conditional (`If-None-Match: *`), i.e. put-if-absent is atomic.
    pub fn conditional_puts(&self) -> bool {
        self.conditional
    }

    /// The object path of `rel` (a key, or a directory of keys) under the prefix.
    fn path_of(&self, rel: &str) -> Path {
        Path::from_iter(
            self.prefix
                .split('/')
                .chain(rel.split('/'))
                .filter(|s| !s.is_empty()),
        )
    }

    fn path(&self, key: &ObjectKey) -> Path {
        self.path_of(key.as_str())
    }

    fn err(&self, op: &str, path: &Path, e: object_store::Error) -> CasError {
        let what = format!(
            "{op} s3://{}/{path} (endpoint {})",
            self.bucket, self.endpoint
        );
        CasError::storage_with(what, S3Error(e))
    }

    async fn check_reachable(&self) -> Result<()> {
        let root = self.path_of("");
        match self.store.list_with_delimiter(Some(&root)).await {
            Ok(_) => Ok(()),
            // `NoSuchBucket` is the S3 error code of a missing bucket (listing reports
            // it as a generic error).
            Err(e)
                if matches!(e, object_store::Error::NotFound { .. })
                    || S3Error::text(&e).contains("NoSuchBucket") =>
            {
                Err(CasError::storage(format!(
                    "{}: bucket {:?} does not exist at endpoint {}",
                    self.url(),
                    self.bucket,
                    self.endpoint
                )))
            }
            // The server answered, and refused: the credentials (or their rights) are
            // what to check, not the network.
            Err(e) if refused(&e) => Err(CasError::Unauthorized {
                message: format!(
                    "{}: the server at {} refused access to bucket {:?}; check \
                     AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY and the key's rights on the bucket",
                    self.url(),
                    self.endpoint,
                    self.bucket,
                ),
                source: Some(Cause::new(S3Error(e))),
            }),
            Err(e) => {
                let what = format!(
                    "{}: cannot reach bucket {:?} at endpoint {}",
                    self.url(),
                    self.bucket,
                    self.endpoint,
                );
                Err(CasError::storage_with(what, S3Error(e)))
            }
        }
    }

    /// Write a fresh temporary object twice with `If-None-Match: *`: the server honours
    /// conditional writes if the second write is refused.
    async fn probe_conditional_put(&self) -> Result<bool> {
        let probe = self.path_of(&format!(
            "tmp/conditional-put-probe-{:016x}",
            rand::random::<u64>()
        ));
        let create = |data: &'static [u8]| {
            self.store.put_opts(
                &probe,
                PutPayload::from_static(data),
                PutOptions::from(PutMode::Create),
            )
        };
        let supported = match create(b"first").await {
            Ok(_) => match create(b"second").await {
                Err(object_store::Error::AlreadyExists { .. }) => true,
                Ok(_) => false,
                Err(e) => return Err(self.err("probing conditional writes at", &probe, e)),
            },
            Err(first) => {
                // Rejected: does a plain write work? Then only the condition is unsupported.
                match self
                    .store
                    .put(&probe, PutPayload::from_static(b"plain"))
                    .await
                {
                    Ok(_) => {
                        tracing::info!(error = %S3Error::text(&first), "conditional write rejected");
                        false
                    }
                    Err(e) => return Err(self.err("writing", &probe, e)),
                }
            }
        };
        if let Err(e) = self.store.delete(&probe).await {
            tracing::warn!(object = %probe, error = %S3Error::text(&e), "cannot remove the probe object");
        }
        Ok(supported)
    }

    async fn head(&self, path: &Path) -> Result<Option<u64>> {
        match self.store.head(path).await {
            Ok(m) => Ok(Some(m.size)),
            Err(object_store::Error::NotFound { .. }) => Ok(None),
            Err(e) => Err(self.err("HEAD", path, e)),
        }
    }

    async fn put_overwrite(&self, path: &Path, data: Bytes) -> Result<()> {
        self.store
            .put(path, PutPayload::from(data))
            .await
            .map(|_| ())
            .map_err(|e| self.err("writing", path, e))
    }

    /// Put-if-absent without a conditional write (see the crate documentation).
    async fn put_unconditional(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        let path = self.path(key);
        if self.head(&path).await?.is_some() {
            return Ok(false);
        }
        if key.is_content_addressed() {
            self.put_overwrite(&path, data).await?;
            return Ok(true);
        }
        if self.mode != ConditionalPut::Disabled {
            let advice = if key.as_str().starts_with(META_PREFIX) {
                "two processes creating this store at once could each write a different value. \
                 Open it once with conditional puts off (xet serve --s3-conditional-put off) \
                 while no other process opens it"
            } else {
                "two servers writing this repository at once could each see their write \
                 succeed. Use a server that honours them, or run a single server with \
                 conditional puts off (xet serve --s3-conditional-put off)"
            };
            return Err(CasError::storage(format!(
                "cannot create s3://{}/{path}: the server at {} does not honour conditional writes \
                 (If-None-Match: *), so {advice}",
                self.bucket, self.endpoint
            )));
        }
        tracing::warn!(object = %path, "creating an object that is not content-addressed without a conditional write");
        self.put_overwrite(&path, data.clone()).await?;
        tokio::time::sleep(META_SETTLE).await;
        match self.get(key).await? {
            Some(now) => Ok(now == data),
            None => Err(CasError::storage(format!(
                "s3://{}/{path} vanished right after it was written",
                self.bucket
            ))),
        }
    }
}

#[async_trait::async_trait]
impl ObjectBackend for S3Backend {
    async fn put_if_absent(&self, key: &ObjectKey, data: Bytes) -> Result<bool> {
        if !self.conditional {
            return self.put_unconditional(key, data).await;
        }
        let path = self.path(key);
        for _ in 0..PUT_ATTEMPTS {
            let opts = PutOptions::from(PutMode::Create);
            match self
                .store
                .put_opts(&path, PutPayload::from(data.clone()), opts)
                .await
            {
                Ok(_) => return Ok(true),
                // 412 (exists) or 409 (a conflicting request, e.g. a delete, was in flight):
                // it is absent only in the second case, then try again.
                Err(object_store::Error::AlreadyExists { .. }) => {
                    if self.head(&path).await?.is_some() {
                        return Ok(false);
                    }
                }
                Err(e) => return Err(self.err("writing", &path, e)),
            }
        }
        Err(CasError::storage(format!(
            "writing s3://{}/{path} (endpoint {}): the server keeps refusing the write as \
             conflicting but the object does not exist",
            self.bucket, self.endpoint
        )))
    }

    async fn get(&self, key: &ObjectKey) -> Result<Option<Bytes>> {
        let path = self.path(key);
        let res = match self.store.get(&path).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => return Err(self.err("reading", &path, e)),
        };
        res.bytes()
            .await
            .map(Some)
            .map_err(|e| self.err("reading", &path, e))
    }

    async fn get_range(&self, key: &ObjectKey, range: ByteRange) -> Result<Option<Bytes>> {
        let path = self.path(key);
        if range.start >= range.end {
            // An empty (or inverted) range cannot be asked for over HTTP: check it only.
            let Some(size) = self.head(&path).await? else {
                return Ok(None);
            };
            check_range(key, range, size)?;
            return Ok(Some(Bytes::new()));
        }
        let opts = GetOptions {
            range: Some(GetRange::Bounded(range.start..range.end)),
            ..GetOptions::default()
        };
        let res = match self.store.get_opts(&path, opts).await {
            Ok(r) => r,
            Err(object_store::Error::NotFound { .. }) => return Ok(None),
            Err(e) => {
                // 416 when the range starts past the end: name it like the other backends.
                return match self.head(&path).await? {
                    None => Ok(None),
                    Some(size) => {
                        check_range(key, range, size)?;
                        Err(self.err(
                            &format!("reading bytes {}..{} of", range.start, range.end),
                            &path,
                            e,
                        ))
                    }
                };
            }
        };
        // The server answers a range running past the end with the bytes there are.
        check_range(key, range, res.meta.size)?;
        let bytes = res.bytes().await.map_err(|e| {
            self.err(
                &format!("reading bytes {}..{} of", range.start, range.end),
                &path,
                e,
            )
        })?;
        if bytes.len() as u64 != range.len() {
            return Err(CasError::storage(format!(
                "reading bytes {}..{} of s3://{}/{path}: got {} bytes",
                range.start,
                range.end,
                self.bucket,
                bytes.len()
            )));
        }
        Ok(Some(bytes))
    }

    async fn size(&self, key: &ObjectKey) -> Result<Option<u64>> {
        self.head(&self.path(key)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectKey>> {
        Ok(self
            .list_meta(prefix)
            .await?
            .into_iter()
            .map(|(k, _)| k)
            .collect())
    }

    async fn list_aged(&self, prefix: &str) -> Result<Vec<xet_store::AgedObject>> {
        Ok(self
            .list_meta(prefix)
            .await?
            .into_iter()
            .map(|(key, meta)| xet_store::AgedObject {
                key,
                size: meta.size,
                written: std::time::SystemTime::from(meta.last_modified),
            })
            .collect())
    }

    async fn delete(&self, key: &ObjectKey) -> Result<bool> {
        // S3 answers a DELETE of a missing key with success: ask first (maintenance only,
        // so the race with another deleter does not matter).
        let path = self.path(key);
        if self.head(&path).await?.is_none() {
            return Ok(false);
        }
        self.store
            .delete(&path)
            .await
            .map_err(|e| self.err("deleting", &path, e))?;
        Ok(true)
    }

    async fn delete_many(&self, keys: &[ObjectKey]) -> Result<()> {
        // DeleteObjects, 1,000 keys to a request (the client sends up to 20 at once and
        // retries each): S3 answers a missing key as deleted; a server that names it
        // missing instead is no error either.
        use futures_util::StreamExt as _;
        let paths: Vec<object_store::Result<Path>> =
            keys.iter().map(|k| Ok(self.path(k))).collect();
        let mut results = self
            .store
            .delete_stream(futures_util::stream::iter(paths).boxed());
        while let Some(r) = results.next().await {
            match r {
                Ok(_) | Err(object_store::Error::NotFound { .. }) => {}
                Err(e) => return Err(self.err("deleting objects of", &self.path_of(""), e)),
            }
        }
        Ok(())
    }
}

/// A store in the bucket of `config` with the default configuration.
pub async fn open_store(config: S3Config) -> Result<StoreCas<S3Backend>> {
    StoreCas::open(S3Backend::open(config).await?).await
}

/// A store in the bucket of `config`.
pub async fn open_store_with(config: S3Config, store: StoreConfig) -> Result<StoreCas<S3Backend>> {
    StoreCas::open_with(S3Backend::open(config).await?, store).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_parse_and_validate() {
        let c = S3Config::from_url("s3://my-bucket/team/xet-store/").unwrap();
        assert_eq!(
            (c.bucket.as_str(), c.prefix.as_str()),
            ("my-bucket", "team/xet-store")
        );
        assert!(c.use_env);
        assert_eq!(c.url(), "s3://my-bucket/team/xet-store");
        let c = S3Config::from_url("S3://bkt").unwrap();
        assert_eq!((c.bucket.as_str(), c.prefix.as_str()), ("bkt", ""));
        assert_eq!(c.url(), "s3://bkt");
        for bad in [
            "s3://",
            "s3:///prefix",
            "s3://ab",
            "s3://Upper/x",
            "s3://bucket/a//b",
            "s3://bucket/a/../b",
            "s3://bucket/./b",
            "s3://bucket/a b",
            "s3://-bucket",
            "http://bucket/x",
            "/tmp/store",
        ] {
            assert!(S3Config::from_url(bad).is_err(), "{bad}");
        }
        assert!(
            is_s3_url("s3://b") && !is_s3_url("s3:/b") && !is_s3_url("s") && !is_s3_url("s3:/é")
        );
        assert!(S3Config::from_url("s3://bücket").is_err());
    }

    #[test]
    fn conditional_put_modes() {
        for (s, m) in [
            ("auto", ConditionalPut::Auto),
            ("on", ConditionalPut::Required),
            ("required", ConditionalPut::Required),
            ("OFF", ConditionalPut::Disabled),
            ("disabled", ConditionalPut::Disabled),
        ] {
            assert_eq!(s.parse::<ConditionalPut>(), Ok(m));
        }
        assert!("maybe".parse::<ConditionalPut>().is_err());
        assert_eq!(ConditionalPut::Required.to_string(), "on");
    }

    #[test]
    fn loopback_detection() {
        for yes in [
            "http://127.0.0.1:9000",
            "http://localhost:9000/",
            "HTTP://LOCALHOST",
            "http://127.1.2.3",
            "http://[::1]:9000/x",
            "http://user:pw@127.0.0.1:1",
        ] {
            assert!(is_loopback_http(yes), "{yes}");
        }
        for no in [
            "https://127.0.0.1:9000",
            "http://10.0.0.1:9000",
            "http://example.com",
            "http://localhost.example.com",
            "http://127.0.0.1.example.com",
            "http://[::2]:9000",
            "http://evil@example.com",
        ] {
            assert!(!is_loopback_http(no), "{no}");
        }
    }

    #[test]
    fn credentials_are_not_printed() {
        let c = S3Credentials {
            access_key_id: "AKIDEXAMPLE".into(),
            secret_access_key: "very-secret".into(),
            session_token: Some("token-secret".into()),
        };
        let s = format!("{c:?}");
        assert!(
            s.contains("AKIDEXAMPLE") && !s.contains("very-secret") && !s.contains("token-secret")
        );
    }

    #[tokio::test]
    async fn plain_http_to_a_remote_host_is_refused_before_any_request() {
        let mut c = S3Config::new("bucket", "").unwrap();
        c.endpoint = Some("http://192.0.2.1:9000".into());
        let e = S3Backend::open(c).await.unwrap_err().to_string();
        assert!(
            e.contains("plain HTTP") && e.contains("AWS_ALLOW_HTTP"),
            "{e}"
        );
    }
}
