//! The state every handler shares ([`Shared`]: the store, auth, grants, config, the
//! URL signer) and the signed URLs made from it; extractors in `extract`, request bodies
//! in `body`. It imports no handler, so every handler can import it.

use crate::auth::Auth;
use crate::config::ServerConfig;
use crate::error::{ApiError, ApiResult, code};
use crate::grants::Grants;
use crate::sign::{SignatureError, UrlSigner, unix_now};
use std::net::SocketAddr;
use std::sync::Arc;
use xet_cas::routes;
use xet_hash::MerkleHash;
use xet_hub::Repos;

pub mod access;
pub mod body;
pub mod extract;
pub mod follow;

/// Path of presigned xorb data URLs: `/_xorb/{prefix}/{hash}?X-Xet-Expires=..&X-Xet-Signature=..`.
pub const XORB_DATA_PREFIX: &str = "/_xorb";
/// Path of grant upload URLs: `/_grant-upload/{id}?X-Xet-Expires=..&X-Xet-Signature=..`.
pub const GRANT_UPLOAD_PREFIX: &str = "/_grant-upload";

// Signature purposes, so a URL signed for one kind of resource never verifies as another.
const SIGN_XORB: &str = "xorb";
const SIGN_GRANT: &str = "grant-upload";

/// What every handler shares, behind an [`AppState`].
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
    pub hub: Option<Arc<Hub>>,
    /// What the web pages keep between requests.
    pub web: crate::web::cache::WebCache,
}

pub type AppState = Arc<Shared>;

/// The Hub side of a server: where repositories live, and who follows which bucket.
pub struct Hub {
    pub repos: Repos,
    pub followers: follow::Followers,
}

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
