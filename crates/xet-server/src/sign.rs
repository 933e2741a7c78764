//! Presigned URLs: `?X-Xet-Expires=<unix secs>&X-Xet-Signature=<hex>` where the
//! signature is `blake3_keyed(per-process secret, purpose \0 resource \0 expires)`.
//! URLs die with the process (a restart invalidates them; clients re-query).

use std::time::{SystemTime, UNIX_EPOCH};

pub const EXPIRES_PARAM: &str = "X-Xet-Expires";
pub const SIGNATURE_PARAM: &str = "X-Xet-Signature";

/// Why a presigned URL was refused (both answer 403).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignatureError {
    Missing,
    Bad,
    Expired,
}

pub struct UrlSigner {
    key: [u8; 32],
}

impl UrlSigner {
    pub fn random() -> Self {
        UrlSigner {
            key: rand::random(),
        }
    }

    /// A signer with a given key (one shared by several servers, so each accepts what
    /// another signed).
    pub fn with_key(key: [u8; 32]) -> Self {
        UrlSigner { key }
    }

    /// The signature of `purpose` on `resource` until `expires`, as hex.
    pub fn sign(&self, purpose: &str, resource: &str, expires: u64) -> String {
        self.mac(purpose, resource, expires).to_hex().to_string()
    }

    /// Whether `sig` (hex) is the signature of `purpose` on `resource` until `expires`
    /// (constant-time comparison; expiry not checked).
    pub fn check(&self, purpose: &str, resource: &str, expires: u64, sig: &str) -> bool {
        blake3::Hash::from_hex(sig).is_ok_and(|s| self.mac(purpose, resource, expires) == s)
    }

    fn mac(&self, purpose: &str, resource: &str, expires: u64) -> blake3::Hash {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(purpose.as_bytes());
        h.update(&[0]);
        h.update(resource.as_bytes());
        h.update(&[0]);
        h.update(expires.to_string().as_bytes());
        h.finalize()
    }

    /// The query string (without `?`) authorizing `purpose` on `resource` until `expires`.
    pub fn query(&self, purpose: &str, resource: &str, expires: u64) -> String {
        let sig = self.mac(purpose, resource, expires).to_hex();
        format!("{EXPIRES_PARAM}={expires}&{SIGNATURE_PARAM}={sig}")
    }

    /// Check a raw query string. The signature is checked before the expiry.
    pub fn verify(
        &self,
        purpose: &str,
        resource: &str,
        query: Option<&str>,
        now: u64,
    ) -> Result<u64, SignatureError> {
        let mut expires = None;
        let mut sig = None;
        for (k, v) in query_pairs(query.unwrap_or("")) {
            match k {
                EXPIRES_PARAM => expires = Some(v),
                SIGNATURE_PARAM => sig = Some(v),
                _ => {}
            }
        }
        let (Some(expires), Some(sig)) = (expires, sig) else {
            return Err(SignatureError::Missing);
        };
        let expires: u64 = expires.parse().map_err(|_| SignatureError::Bad)?;
        let sig = blake3::Hash::from_hex(sig).map_err(|_| SignatureError::Bad)?;
        // blake3::Hash equality is constant-time.
        if self.mac(purpose, resource, expires) != sig {
            return Err(SignatureError::Bad);
        }
        if now >= expires {
            return Err(SignatureError::Expired);
        }
        Ok(expires)
    }
}

/// `k=v` pairs of a query string. Values are taken verbatim (ours never need escaping).
pub fn query_pairs(q: &str) -> impl Iterator<Item = (&str, &str)> {
    q.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
}

pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sign_verify() {
        let s = UrlSigner::random();
        let q = s.query("xorb", "default/abc", 100);
        assert_eq!(s.verify("xorb", "default/abc", Some(&q), 99), Ok(100));
        assert_eq!(
            s.verify("xorb", "default/abc", Some(&q), 100),
            Err(SignatureError::Expired)
        );
        assert_eq!(
            s.verify("xorb", "default/abd", Some(&q), 99),
            Err(SignatureError::Bad)
        );
        assert_eq!(
            s.verify("grant", "default/abc", Some(&q), 99),
            Err(SignatureError::Bad)
        );
        let forged = q.replace("=100&", "=200&");
        assert_eq!(
            s.verify("xorb", "default/abc", Some(&forged), 99),
            Err(SignatureError::Bad)
        );
        assert_eq!(
            s.verify("xorb", "default/abc", None, 99),
            Err(SignatureError::Missing)
        );
        let other = UrlSigner::random();
        assert_eq!(
            other.verify("xorb", "default/abc", Some(&q), 99),
            Err(SignatureError::Bad)
        );
    }
}
