//! The manifest: the one object of a bundle that is not a store object, under a fixed key.

use std::collections::HashSet;

use serde::{Deserialize, Serialize};
use xet_hash::MerkleHash;

use crate::{Kind, ManifestError};

/// The key of the manifest: `"xet-bundle-manifest"` and 13 zero bytes. Hex, as SWH tools
/// print and take it: `7865742d62756e646c652d6d616e6966657374` followed by 26 zeros. Not a
/// hash, so it is no object's key (a hash equal to it would be a preimage of 13 zero bytes).
pub const MANIFEST_KEY: [u8; 32] = *b"xet-bundle-manifest\0\0\0\0\0\0\0\0\0\0\0\0\0";

/// The manifest's `format` field.
pub const FORMAT: &str = "xet-bundle";

/// The manifest's `version` field: the only version there is.
pub const VERSION: u64 = 1;

/// SHA-256 of no bytes: the empty file's, which the bundle names without storing anything
/// (stored shards give the empty file a zero digest, as hf_xet writes it).
pub const EMPTY_SHA256: [u8; 32] = [
    0xe3, 0xb0, 0xc4, 0x42, 0x98, 0xfc, 0x1c, 0x14, 0x9a, 0xfb, 0xf4, 0xc8, 0x99, 0x6f, 0xb9, 0x24,
    0x27, 0xae, 0x41, 0xe4, 0x64, 0x9b, 0x93, 0x4c, 0xa4, 0x95, 0x99, 0x1b, 0x78, 0x52, 0xb8, 0x55,
];

/// What a bundle holds: its files, and the kind of every other key.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    /// Always [`FORMAT`].
    pub format: String,
    /// Always [`VERSION`].
    pub version: u64,
    /// The files the bundle reconstructs, in the order they were asked for.
    pub files: Vec<FileEntry>,
    /// Xorbs, each stored under its hash's raw bytes, in key order.
    pub xorbs: Vec<MerkleHash>,
    /// Shards (stored form), each stored under its hash's raw bytes, in key order.
    pub shards: Vec<MerkleHash>,
}

/// One file of a bundle.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileEntry {
    /// The XET file hash (hash string in JSON).
    pub hash: MerkleHash,
    pub size: u64,
    /// SHA-256 of the content (64 hex digits in JSON), as the shard registering the file
    /// claims it; absent when the shard has no FileMetadataExt.
    #[serde(default, skip_serializing_if = "Option::is_none", with = "sha_hex")]
    pub sha256: Option<[u8; 32]>,
    /// The name the file was bundled under, when one was given.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

impl Manifest {
    pub fn new(files: Vec<FileEntry>, xorbs: Vec<MerkleHash>, shards: Vec<MerkleHash>) -> Self {
        Manifest {
            format: FORMAT.to_string(),
            version: VERSION,
            files,
            xorbs,
            shards,
        }
    }

    /// The JSON stored under [`MANIFEST_KEY`] (pretty, so `swh-shard get` shows it legibly).
    pub fn to_json(&self) -> Vec<u8> {
        serde_json::to_vec_pretty(self).expect("a manifest always serializes")
    }

    /// Parse and check a manifest: the format and version, hashes that can be keys (not
    /// zero, not the manifest's key), and every key listed once.
    pub fn parse(bytes: &[u8]) -> Result<Manifest, ManifestError> {
        let m: Manifest = serde_json::from_slice(bytes).map_err(ManifestError::Json)?;
        if m.format != FORMAT {
            return Err(ManifestError::Format { found: m.format });
        }
        if m.version != VERSION {
            return Err(ManifestError::Version { found: m.version });
        }
        let mut seen = HashSet::with_capacity(m.xorbs.len() + m.shards.len());
        for (kind, hash) in m.objects() {
            if hash.is_zero() || hash.0 == MANIFEST_KEY {
                return Err(ManifestError::NotAKey { kind, hash });
            }
            if !seen.insert(hash) {
                return Err(ManifestError::Twice { kind, hash });
            }
        }
        Ok(m)
    }

    /// Every listed object with its kind: shards, then xorbs.
    pub fn objects(&self) -> impl Iterator<Item = (Kind, MerkleHash)> + '_ {
        let shards = self.shards.iter().map(|h| (Kind::Shard, *h));
        shards.chain(self.xorbs.iter().map(|h| (Kind::Xorb, *h)))
    }
}

/// `Option<[u8; 32]>` as 64 lowercase hex digits.
mod sha_hex {
    use serde::{Deserialize, Deserializer, Serializer, de::Error};

    pub fn serialize<S: Serializer>(v: &Option<[u8; 32]>, s: S) -> Result<S::Ok, S::Error> {
        match v {
            Some(d) => s.serialize_str(&xet_hash::hex::encode(d)),
            None => s.serialize_none(),
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<[u8; 32]>, D::Error> {
        let Some(s) = Option::<String>::deserialize(d)? else {
            return Ok(None);
        };
        xet_hash::hex::decode(&s)
            .and_then(|b| <[u8; 32]>::try_from(b).ok())
            .map(Some)
            .ok_or_else(|| D::Error::custom(format!("sha256 {s:?} is not 64 hex digits")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(i: u8) -> MerkleHash {
        xet_hash::chunk_hash(&[i])
    }

    #[test]
    fn round_trips_and_names_hashes_as_strings() {
        let m = Manifest::new(
            vec![FileEntry {
                hash: h(1),
                size: 5,
                sha256: Some([7; 32]),
                name: Some("a/b.bin".into()),
            }],
            vec![h(2), h(3)],
            vec![h(4)],
        );
        let json = m.to_json();
        assert_eq!(Manifest::parse(&json).unwrap(), m);
        let text = String::from_utf8(json).unwrap();
        assert!(text.contains(&h(2).to_string()) && !text.contains(&h(2).raw_hex()));
        assert!(text.contains(&"07".repeat(32)));
        assert_eq!(
            m.objects().collect::<Vec<_>>(),
            [(Kind::Shard, h(4)), (Kind::Xorb, h(2)), (Kind::Xorb, h(3))]
        );
    }

    #[test]
    fn the_key_is_the_documented_text() {
        assert_eq!(
            xet_hash::hex::encode(&MANIFEST_KEY),
            format!("7865742d62756e646c652d6d616e6966657374{}", "0".repeat(26))
        );
    }

    #[test]
    fn refuses_what_could_not_be_keys_or_is_not_a_manifest() {
        let ok = Manifest::new(vec![], vec![h(1)], vec![h(2)]);
        let with = |f: &dyn Fn(&mut Manifest)| {
            let mut m = ok.clone();
            f(&mut m);
            Manifest::parse(&m.to_json()).unwrap_err()
        };
        let (x1, s1) = ((Kind::Xorb, h(1)), (Kind::Shard, MerkleHash(MANIFEST_KEY)));
        assert!(matches!(
            with(&|m| m.version = 2),
            ManifestError::Version { found: 2 }
        ));
        assert!(
            matches!(with(&|m| m.format = "other".into()), ManifestError::Format { found } if found == "other")
        );
        assert!(
            matches!(with(&|m| m.xorbs.push(h(1))), ManifestError::Twice { kind, hash } if (kind, hash) == x1)
        );
        assert!(matches!(
            with(&|m| m.shards.push(h(1))),
            ManifestError::Twice {
                kind: Kind::Xorb,
                ..
            }
        ));
        assert!(matches!(
            with(&|m| m.xorbs.push(MerkleHash::ZERO)),
            ManifestError::NotAKey {
                kind: Kind::Xorb,
                ..
            }
        ));
        assert!(
            matches!(with(&|m| m.shards.push(MerkleHash(MANIFEST_KEY))), ManifestError::NotAKey { kind, hash } if (kind, hash) == s1)
        );
        assert!(with(&|m| m.version = 2).to_string().contains("version 2"));
        for bad in [
            &b"{"[..],
            b"[]",
            br#"{"format":"xet-bundle","version":1,"files":[],"xorbs":["zz"],"shards":[]}"#,
            br#"{"format":"xet-bundle","version":1,"files":[{"hash":"00","size":1}],"xorbs":[],"shards":[]}"#,
        ] {
            assert!(matches!(
                Manifest::parse(bad),
                Err(ManifestError::Json(_))
            ));
        }
        let bad_sha = format!(
            r#"{{"format":"xet-bundle","version":1,"files":[{{"hash":"{}","size":1,"sha256":"abc"}}],"xorbs":[],"shards":[]}}"#,
            h(1)
        );
        let err = Manifest::parse(bad_sha.as_bytes()).unwrap_err();
        let ManifestError::Json(cause) = err else {
            panic!("{err:?}")
        };
        assert!(cause.to_string().contains("sha256"), "{cause}");
    }
}
