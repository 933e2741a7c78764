//! Condemned lists (`meta/gc-condemned-<20-digit ms>`): the objects one garbage
//! collection mark found dead, one `shard <hash>` or `xorb <hash>` per line. Written
//! once, read by every server before it accepts a new reference, deleted when done.

use std::collections::BTreeSet;

use bytes::Bytes;
use xet_cas::{CasError, Result};
use xet_hash::MerkleHash;

use super::backend::ObjectKey;

/// The name every condemned list starts with (after `meta/`).
pub(super) const CONDEMNED_PREFIX: &str = "gc-condemned-";

/// A condemned list: the objects one mark found dead.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Condemned {
    pub shards: BTreeSet<MerkleHash>,
    pub xorbs: BTreeSet<MerkleHash>,
}

impl Condemned {
    pub(super) fn encode(&self) -> Bytes {
        let mut s = String::new();
        for h in &self.shards {
            s.push_str(&format!("shard {h}\n"));
        }
        for h in &self.xorbs {
            s.push_str(&format!("xorb {h}\n"));
        }
        Bytes::from(s)
    }

    pub(super) fn decode(key: &ObjectKey, bytes: &[u8]) -> Result<Condemned> {
        let bad = || CasError::storage(format!("the condemned list {key} is not valid"));
        let text = std::str::from_utf8(bytes).map_err(|_| bad())?;
        let mut out = Condemned::default();
        for line in text.lines() {
            let (kind, hash) = line.split_once(' ').ok_or_else(bad)?;
            let hash = MerkleHash::from_hex(hash).map_err(|_| bad())?;
            match kind {
                "shard" => out.shards.insert(hash),
                "xorb" => out.xorbs.insert(hash),
                _ => return Err(bad()),
            };
        }
        Ok(out)
    }

    pub(super) fn len(&self) -> usize {
        self.shards.len() + self.xorbs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lists_round_trip_and_refuse_junk() {
        let key = ObjectKey::meta("gc-condemned-00000000000000000001");
        let mut l = Condemned::default();
        l.shards.insert(xet_hash::chunk_hash(b"s"));
        l.xorbs.insert(xet_hash::chunk_hash(b"x"));
        assert_eq!(Condemned::decode(&key, &l.encode()).unwrap(), l);
        for bad in ["shard nothex\n", "tree 00\n", "xorb\n"] {
            assert!(Condemned::decode(&key, bad.as_bytes()).is_err(), "{bad}");
        }
    }
}
