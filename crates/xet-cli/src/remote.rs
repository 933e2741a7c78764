//! Where data goes: a CAS server (`--endpoint` / `XET_ENDPOINT`, or the one a
//! `--token-url` names) or, without either, the embedded store on disk (`--store` /
//! `XET_STORE` / the platform data dir), the same layout `xet serve --store` serves.

use crate::exit::{CliResult, Code, Failure};
use anyhow::Context;
use clap::Args;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use xet_cas::Cas;

#[derive(Args, Debug, Clone)]
pub struct RemoteArgs {
    /// CAS server URL (e.g. http://127.0.0.1:8080). Without it, the embedded local store is used.
    #[arg(long, env = "XET_ENDPOINT")]
    pub endpoint: Option<String>,
    /// Embedded store directory (used when no endpoint is given); a bundle file is a
    /// read-only store.
    #[arg(long, env = "XET_STORE")]
    pub store: Option<PathBuf>,
    /// Bearer token for the CAS server.
    #[arg(long, env = "XET_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// URL answering {"accessToken","exp","casUrl"}; the token is refreshed before it expires.
    #[arg(long, env = "XET_TOKEN_URL")]
    pub token_url: Option<String>,
    /// Cache directory (chunk cache, shard cache, resume records).
    #[arg(long, env = "XET_CACHE")]
    pub cache_dir: Option<PathBuf>,
    /// A request to the server during which no byte moves for this many seconds is
    /// cut and retried (default 60); a download fetch also gets this long plus time
    /// for its size.
    #[arg(
        long,
        env = "XET_STALL_TIMEOUT",
        value_name = "SECS",
        value_parser = clap::value_parser!(u64).range(1..)
    )]
    pub stall_timeout: Option<u64>,
}

impl RemoteArgs {
    /// `--stall-timeout` as a duration, if given.
    pub fn stall_timeout(&self) -> Option<std::time::Duration> {
        self.stall_timeout.map(std::time::Duration::from_secs)
    }
}

pub fn default_store_dir() -> PathBuf {
    dirs::data_dir()
        .unwrap_or_else(std::env::temp_dir)
        .join("xet")
        .join("store")
}

pub fn cache_dir(dir: &Option<PathBuf>) -> PathBuf {
    dir.clone().unwrap_or_else(|| {
        dirs::cache_dir()
            .unwrap_or_else(std::env::temp_dir)
            .join("xet")
    })
}

/// What a command talks to, decided once from [`RemoteArgs`] so that opening, messages
/// and cache keys cannot disagree.
#[derive(Debug)]
pub enum Target {
    /// The store directory on this machine: no `--endpoint` and no `--token-url`.
    Embedded(PathBuf),
    /// A CAS server. With a `token_url`, the `casUrl` it answers replaces `endpoint`.
    Http {
        endpoint: Option<String>,
        token_url: Option<String>,
    },
}

impl RemoteArgs {
    pub fn target(&self) -> Target {
        if self.endpoint.is_none() && self.token_url.is_none() {
            Target::Embedded(self.store.clone().unwrap_or_else(default_store_dir))
        } else {
            Target::Http {
                endpoint: self.endpoint.clone(),
                token_url: self.token_url.clone(),
            }
        }
    }
}

impl Target {
    pub fn is_embedded(&self) -> bool {
        matches!(self, Target::Embedded(_))
    }

    /// For messages: "upload to {describe} failed".
    pub fn describe(&self) -> String {
        match self {
            Target::Embedded(file) if xet_bundle::is_bundle(file) => {
                format!("bundle {} (read-only)", file.display())
            }
            Target::Embedded(dir) => format!("embedded store {}", dir.display()),
            Target::Http {
                token_url: Some(u), ..
            } => format!(
                "the CAS server named by token URL {}",
                xet_client::redact_url(u)
            ),
            Target::Http { endpoint, .. } => endpoint.clone().unwrap_or_default(),
        }
    }

    /// Names the CAS for per-CAS caches (the upload's shard cache): two CASes must never
    /// share one, or what one holds would be taken as present on the other.
    pub fn cache_identity(&self) -> String {
        match self {
            // The absolute path: `--store store` run from two directories names two
            // stores. (After `open`, which creates the directory.)
            Target::Embedded(dir) => std::fs::canonicalize(dir)
                .unwrap_or_else(|_| dir.clone())
                .display()
                .to_string(),
            // The server's URL is known only after the first refresh; the token URL
            // decides it, so it stands for the server.
            Target::Http {
                token_url: Some(u), ..
            } => u.clone(),
            Target::Http { endpoint, .. } => endpoint.clone().unwrap_or_default(),
        }
    }
}

/// Refuse a bundle as the store of a command that writes, before any work is done (the
/// bundle would refuse each write, `CasError::ReadOnly`, only once the data is ready).
pub fn check_writable(target: &Target) -> CliResult {
    match target {
        Target::Embedded(file) if xet_bundle::is_bundle(file) => Err(Failure::new(
            Code::ReadOnly,
            anyhow::anyhow!(
                "{} is a bundle, which is read-only: write to a store directory (and `xet \
                 bundle import` the bundle into it first if you want its files there too)",
                file.display()
            ),
        )),
        _ => Ok(()),
    }
}

/// A bundle as a read-only store (`--store BUNDLE`, a file starting with the SWH magic):
/// its objects are served from the mapped file, any write is refused.
pub async fn open_bundle(file: &Path) -> CliResult<xet_store::StoreCas<xet_bundle::BundleBackend>> {
    let backend = xet_bundle::BundleBackend::open(file, xet_bundle::OpenLimits::default())
        .await
        .map_err(|e| {
            let code = if e.is_invalid_bundle() {
                Code::Input
            } else {
                Code::Failure
            };
            Failure::new(code, e)
        })?;
    xet_store::StoreCas::open(backend)
        .await
        .with_context(|| format!("cannot serve the bundle {}", file.display()))
        .map_err(|e| Failure::new(Code::Failure, e))
}

/// Open the store at `dir`: a bundle (read-only) if it is one, else the store directory
/// (created if needed): the embedded store, or what `xet serve --store DIR` serves.
pub async fn open_store(dir: &Path) -> CliResult<Arc<dyn Cas>> {
    if xet_bundle::is_bundle(dir) {
        return Ok(Arc::new(open_bundle(dir).await?));
    }
    Ok(Arc::new(open_dir(dir).await?))
}

/// A store directory, created if needed.
pub async fn open_dir(dir: &Path) -> CliResult<xet_store::StoreCas<xet_store::FsBackend>> {
    std::fs::create_dir_all(dir)
        .with_context(|| format!("cannot create the store directory {}", dir.display()))
        .map_err(Failure::input)?;
    xet_store::open_store(dir)
        .await
        .with_context(|| format!("cannot open the store at {}", dir.display()))
        .map_err(|e| Failure::new(Code::Failure, e))
}

/// Open `target`; `r` gives the credentials and timeouts of an HTTP one.
pub async fn open(target: &Target, r: &RemoteArgs) -> CliResult<Arc<dyn Cas>> {
    let (endpoint, token_url) = match target {
        Target::Embedded(dir) => return open_store(dir).await,
        Target::Http {
            endpoint,
            token_url,
        } => (endpoint, token_url),
    };
    let mut cfg = xet_client::ClientConfig::new(endpoint.clone().unwrap_or_default());
    if let Some(idle) = r.stall_timeout() {
        cfg.idle_timeout = idle;
    }
    if let Some(url) = token_url {
        let mut refresh = xet_client::TokenRefresh::new(url.clone());
        if let Some(t) = &r.token {
            // A token for the refresh URL itself (e.g. a Hub token).
            refresh.headers.push((
                "authorization".into(),
                xet_client::Secret::new(format!("Bearer {t}")),
            ));
        }
        cfg = cfg.with_token_source(xet_client::TokenSource::Refresh(refresh));
    } else if let Some(t) = &r.token {
        cfg = cfg.with_token(xet_client::Secret::new(t.clone()));
    }
    let client = xet_client::HttpCas::new(cfg)
        .map_err(|e| Failure::new(Code::Usage, anyhow::anyhow!("{e}")))?;
    Ok(Arc::new(client))
}

/// Exit code for a CAS error.
pub fn cas_code(e: &xet_cas::CasError) -> Code {
    use xet_cas::CasError::*;
    match e {
        Unauthorized { .. } | Forbidden(_) => Code::Auth,
        Network { .. } => Code::Network,
        Server { status, .. } if *status >= 500 || *status == 429 => Code::Network,
        Corrupt { .. } => Code::Corrupt,
        Storage { .. } => Code::Failure,
        ReadOnly(_) | Server { status: 405, .. } => Code::ReadOnly,
        _ => Code::Rejected,
    }
}
