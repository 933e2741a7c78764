//! Keys for the chunk hashes of global-dedup answers.
//!
//! A dedup answer lists every chunk of the xorbs that hold the queried chunk; keying the
//! hashes (`blake3_keyed(key, raw_hash)`) means a client can only recognise chunks it
//! already has. The key is derived from a secret persisted in the backend
//! (`meta/dedup-secret`, 32 random bytes written once) and the current epoch
//! (`unix_time / period`), so it rotates every period and is the same across restarts
//! and across processes sharing the backend.

use std::time::Duration;

use xet_hash::MerkleHash;

/// How dedup answers key their chunk hashes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DedupKeys {
    /// Zero key: raw chunk hashes (the reference client accepts both).
    Unkeyed,
    /// A key derived from the store secret that changes every `period`.
    Rotating { period: Duration },
}

impl Default for DedupKeys {
    fn default() -> Self {
        DedupKeys::Rotating {
            period: Duration::from_secs(24 * 3600),
        }
    }
}

/// The secret and the mode; computes the key for a point in time.
#[derive(Clone)]
pub(crate) struct KeyRing {
    secret: MerkleHash,
    mode: DedupKeys,
}

impl std::fmt::Debug for KeyRing {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeyRing")
            .field("mode", &self.mode)
            .finish_non_exhaustive()
    }
}

const DOMAIN: &[u8; 16] = b"xet-dedup-key-v1";

impl KeyRing {
    pub(crate) fn new(secret: [u8; 32], mode: DedupKeys) -> Self {
        KeyRing {
            secret: MerkleHash(secret),
            mode,
        }
    }

    /// A key for another purpose, derived from the store secret with `context` (so it is
    /// the same in every process sharing the backend, and tells nothing of the secret).
    pub(crate) fn derive(&self, context: &str) -> [u8; 32] {
        xet_hash::keyed_chunk_hash(&self.secret, &xet_hash::chunk_hash(context.as_bytes())).0
    }

    /// The key for unix time `now` (seconds); `None` when unkeyed.
    pub(crate) fn key_at(&self, now: u64) -> Option<MerkleHash> {
        let DedupKeys::Rotating { period } = self.mode else {
            return None;
        };
        let epoch = now / period.as_secs().max(1);
        let mut input = [0u8; 32];
        input[..16].copy_from_slice(DOMAIN);
        input[16..24].copy_from_slice(&epoch.to_le_bytes());
        let key = xet_hash::keyed_chunk_hash(&self.secret, &MerkleHash(input));
        // A zero key would mean "unkeyed" on the wire; astronomically unlikely, but never send it.
        Some(if key.is_zero() {
            MerkleHash([1; 32])
        } else {
            key
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_rotate_per_period_and_depend_on_the_secret() {
        let day = Duration::from_secs(86400);
        let r = KeyRing::new([7; 32], DedupKeys::Rotating { period: day });
        let k0 = r.key_at(86400 * 100).unwrap();
        assert_eq!(r.key_at(86400 * 100 + 86399), Some(k0));
        assert_ne!(r.key_at(86400 * 101), Some(k0));
        assert_ne!(
            KeyRing::new([8; 32], DedupKeys::Rotating { period: day }).key_at(86400 * 100),
            Some(k0)
        );
        assert_eq!(KeyRing::new([7; 32], DedupKeys::Unkeyed).key_at(5), None);
    }
}
