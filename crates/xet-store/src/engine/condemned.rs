//! Garbage collection's lists, one `shard <hash>` or `xorb <hash>` per line, written once:
//! condemned (`meta/gc-condemned-<20-digit ms>`: what one mark found dead; dedup answers
//! leave them out) and doomed (`meta/gc-doomed-<20-digit ms>`: what a deleting run is
//! about to delete; every server refuses new references to them). Both are deleted when
//! the run that acts on them is done.

use std::collections::BTreeSet;

use bytes::Bytes;
use xet_cas::{CasError, Result};
use xet_hash::MerkleHash;

use super::backend::ObjectKey;

/// The name every condemned list starts with (after `meta/`).
pub(super) const CONDEMNED_PREFIX: &str = "gc-condemned-";
/// The name every doomed list starts with (after `meta/`).
pub(super) const DOOMED_PREFIX: &str = "gc-doomed-";
/// How old a server's view of the doomed lists may be where it is asked often (a file's
/// size); a deleting run waits longer than this between dooming and marking.
pub(super) const DOOMED_VIEW_TTL: std::time::Duration = std::time::Duration::from_secs(2);

/// What some lists name.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct Named {
    pub xorbs: std::collections::HashSet<MerkleHash>,
    pub shards: std::collections::HashSet<MerkleHash>,
}

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
