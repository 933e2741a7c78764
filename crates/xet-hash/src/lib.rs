//! XET hashing (draft-denis-xet-03 §6), byte-compatible with the reference `hf_xet`.
//!
//! Everything here is pure and synchronous. The one place the reference differs from the
//! draft is the empty file: its file hash is 32 zero bytes (see [`file_hash`]).

use std::fmt;
use std::str::FromStr;

/// Key for chunk hashes (draft §6.1).
pub const DATA_KEY: [u8; 32] = [
    0x66, 0x97, 0xf5, 0x77, 0x5b, 0x95, 0x50, 0xde, 0x31, 0x35, 0xcb, 0xac, 0xa5, 0x97, 0x18, 0x1c,
    0x9d, 0xe4, 0x21, 0x10, 0x9b, 0xeb, 0x2b, 0x58, 0xb4, 0xd0, 0xb0, 0x4b, 0x93, 0xad, 0xf2, 0x29,
];
/// Key for Merkle internal nodes (draft §6.2.1).
pub const INTERNAL_NODE_KEY: [u8; 32] = [
    0x01, 0x7e, 0xc5, 0xc7, 0xa5, 0x47, 0x29, 0x96, 0xfd, 0x94, 0x66, 0x66, 0xb4, 0x8a, 0x02, 0xe6,
    0x5d, 0xdd, 0x53, 0x6f, 0x37, 0xc7, 0x6d, 0xd2, 0xf8, 0x63, 0x52, 0xe6, 0x4a, 0x53, 0x71, 0x3f,
];
/// Key for term verification hashes (draft §6.4).
pub const VERIFICATION_KEY: [u8; 32] = [
    0x7f, 0x18, 0x57, 0xd6, 0xce, 0x56, 0xed, 0x66, 0x12, 0x7f, 0xf9, 0x13, 0xe7, 0xa5, 0xc3, 0xf3,
    0xa4, 0xcd, 0x26, 0xd5, 0xb5, 0xdb, 0x49, 0xe6, 0x41, 0x24, 0x98, 0x7f, 0x28, 0xfb, 0x94, 0xc3,
];
/// Key for the final file-hash step (draft §6.3).
pub const ZERO_KEY: [u8; 32] = [0; 32];

/// Merkle tree shape (draft §6.2.2.1).
const MEAN_BRANCHING_FACTOR: u64 = 4;
const MAX_CHILDREN: usize = 2 * MEAN_BRANCHING_FACTOR as usize + 1;

/// Global-dedup eligibility modulus (draft §10.3.1).
pub const GLOBAL_DEDUP_MODULUS: u64 = 1024;

/// Errors from parsing hash strings.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    #[error("hash string must be 64 hex digits, got {len} characters")]
    BadLength { len: usize },
    #[error("hash string has a non-hex character at position {position}")]
    BadDigit { position: usize },
}

/// A 32-byte XET hash. `Display`/`FromStr` use the XET hash string form (draft §6.5):
/// four little-endian u64 words, each printed as 16 hex digits.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct MerkleHash(pub [u8; 32]);

impl MerkleHash {
    pub const ZERO: MerkleHash = MerkleHash([0; 32]);

    pub fn from_bytes(b: [u8; 32]) -> Self {
        MerkleHash(b)
    }
    pub fn as_bytes(&self) -> &[u8; 32] {
        &self.0
    }
    pub fn is_zero(&self) -> bool {
        self.0 == [0; 32]
    }
    /// The i-th little-endian u64 word (0..4).
    pub fn word(&self, i: usize) -> u64 {
        u64::from_le_bytes(self.0[i * 8..i * 8 + 8].try_into().expect("8 bytes"))
    }
    /// Hash string (draft §6.5).
    pub fn hex(&self) -> String {
        self.to_string()
    }
    /// Plain hex of the raw bytes in order (not the hash string form).
    pub fn raw_hex(&self) -> String {
        hex::encode(&self.0)
    }
    /// Parse the hash string form (draft §6.5). Accepts upper or lower case.
    pub fn from_hex(s: &str) -> Result<Self, HashError> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return Err(HashError::BadLength {
                len: s.chars().count(),
            });
        }
        let mut out = [0u8; 32];
        for w in 0..4 {
            let mut v: u64 = 0;
            for (j, &c) in b[w * 16..w * 16 + 16].iter().enumerate() {
                let d = hex_val(c).ok_or(HashError::BadDigit {
                    position: w * 16 + j,
                })?;
                v = (v << 4) | d as u64;
            }
            out[w * 8..w * 8 + 8].copy_from_slice(&v.to_le_bytes());
        }
        Ok(MerkleHash(out))
    }
    /// Parse plain hex of raw bytes (e.g. a sha256 digest as printed by `sha256sum`).
    pub fn from_raw_hex(s: &str) -> Result<Self, HashError> {
        let b = s.as_bytes();
        if b.len() != 64 {
            return Err(HashError::BadLength {
                len: s.chars().count(),
            });
        }
        let mut out = [0u8; 32];
        for i in 0..32 {
            let hi = hex_val(b[2 * i]).ok_or(HashError::BadDigit { position: 2 * i })?;
            let lo = hex_val(b[2 * i + 1]).ok_or(HashError::BadDigit {
                position: 2 * i + 1,
            })?;
            out[i] = (hi << 4) | lo;
        }
        Ok(MerkleHash(out))
    }
    /// Whether this chunk hash is eligible for a global dedup query on its own
    /// (draft §10.3.1; the first chunk of a file is eligible regardless).
    pub fn is_global_dedup_eligible(&self) -> bool {
        self.word(3).is_multiple_of(GLOBAL_DEDUP_MODULUS)
    }
}

/// Plain hex of bytes, the one encoder and decoder of the workspace (the format crate
/// xet-swh, which depends on no xet crate, keeps its own).
pub mod hex {
    /// Lowercase hex of `bytes`.
    pub fn encode(bytes: &[u8]) -> String {
        let mut s = String::with_capacity(bytes.len() * 2);
        for &b in bytes {
            super::push_hex_byte(&mut s, b);
        }
        s
    }

    /// Bytes of hex text (either case); `None` on an odd length or a non-hex digit.
    pub fn decode(s: &str) -> Option<Vec<u8>> {
        let b = s.as_bytes();
        if !b.len().is_multiple_of(2) {
            return None;
        }
        b.chunks(2)
            .map(|p| Some(super::hex_val(p[0])? << 4 | super::hex_val(p[1])?))
            .collect()
    }

    #[cfg(test)]
    mod tests {
        #[test]
        fn round_trip() {
            assert_eq!(super::encode(&[0, 0xab, 0x5f]), "00ab5f");
            assert_eq!(super::decode("00AB5f"), Some(vec![0, 0xab, 0x5f]));
            assert_eq!(super::decode("abc"), None);
            assert_eq!(super::decode("zz"), None);
        }
    }
}

fn hex_val(c: u8) -> Option<u8> {
    match c {
        b'0'..=b'9' => Some(c - b'0'),
        b'a'..=b'f' => Some(c - b'a' + 10),
        b'A'..=b'F' => Some(c - b'A' + 10),
        _ => None,
    }
}

fn push_hex_byte(s: &mut String, b: u8) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    s.push(HEX[(b >> 4) as usize] as char);
    s.push(HEX[(b & 15) as usize] as char);
}

impl fmt::Display for MerkleHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for w in 0..4 {
            write!(f, "{:016x}", self.word(w))?;
        }
        Ok(())
    }
}

impl fmt::Debug for MerkleHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "MerkleHash({self})")
    }
}

impl FromStr for MerkleHash {
    type Err = HashError;
    fn from_str(s: &str) -> Result<Self, HashError> {
        MerkleHash::from_hex(s)
    }
}

impl From<[u8; 32]> for MerkleHash {
    fn from(b: [u8; 32]) -> Self {
        MerkleHash(b)
    }
}

fn keyed(key: &[u8; 32], data: &[u8]) -> MerkleHash {
    MerkleHash(*blake3::keyed_hash(key, data).as_bytes())
}

/// Chunk hash (draft §6.1).
pub fn chunk_hash(data: &[u8]) -> MerkleHash {
    keyed(&DATA_KEY, data)
}

/// Keyed chunk hash as stored in HMAC-protected shards (global dedup answers):
/// `blake3_keyed(key, raw_chunk_hash)`.
pub fn keyed_chunk_hash(key: &MerkleHash, chunk: &MerkleHash) -> MerkleHash {
    keyed(&key.0, &chunk.0)
}

/// Merkle internal node over `(hash, size)` children (draft §6.2.2.3).
pub fn internal_node_hash(children: &[(MerkleHash, u64)]) -> (MerkleHash, u64) {
    use std::fmt::Write;
    // 64 hex + " : " + up to 20 digits + "\n"
    let mut buf = String::with_capacity(children.len() * 90);
    let mut total = 0u64;
    for (h, s) in children {
        writeln!(buf, "{h} : {s}").expect("write to String");
        total = total.wrapping_add(*s);
    }
    (keyed(&INTERNAL_NODE_KEY, buf.as_bytes()), total)
}

/// Number of leading entries to merge into the next node (draft §6.2.2.2).
fn next_merge_cut(hashes: &[(MerkleHash, u64)]) -> usize {
    let n = hashes.len();
    if n <= 2 {
        return n;
    }
    let end = MAX_CHILDREN.min(n);
    for (i, (h, _)) in hashes.iter().enumerate().take(end).skip(2) {
        if h.word(3) % MEAN_BRANCHING_FACTOR == 0 {
            return i + 1;
        }
    }
    end
}

/// Root of the aggregated hash tree (draft §6.2.2.4). Empty input gives [`MerkleHash::ZERO`].
pub fn merkle_root(entries: &[(MerkleHash, u64)]) -> MerkleHash {
    if entries.is_empty() {
        return MerkleHash::ZERO;
    }
    let mut hv: Vec<(MerkleHash, u64)> = entries.to_vec();
    while hv.len() > 1 {
        let mut write = 0;
        let mut read = 0;
        while read < hv.len() {
            let cut = read + next_merge_cut(&hv[read..]);
            hv[write] = internal_node_hash(&hv[read..cut]);
            write += 1;
            read = cut;
        }
        hv.truncate(write);
    }
    hv[0].0
}

/// Xorb hash: Merkle root of its chunks' `(hash, uncompressed size)` (draft §6.2.3).
pub fn xorb_hash(chunks: &[(MerkleHash, u64)]) -> MerkleHash {
    merkle_root(chunks)
}

/// File hash (draft §6.3), with the reference's rule for the empty file:
/// no chunks gives 32 zero bytes, not `blake3_keyed(ZERO_KEY, ZERO_HASH)`.
pub fn file_hash(chunks: &[(MerkleHash, u64)]) -> MerkleHash {
    if chunks.is_empty() {
        return MerkleHash::ZERO;
    }
    keyed(&ZERO_KEY, &merkle_root(chunks).0)
}

/// Term verification hash over the raw chunk hashes of one term (draft §6.4).
pub fn verification_hash(chunk_hashes: &[MerkleHash]) -> MerkleHash {
    let mut h = blake3::Hasher::new_keyed(&VERIFICATION_KEY);
    for c in chunk_hashes {
        h.update(&c.0);
    }
    MerkleHash(*h.finalize().as_bytes())
}

/// The sha256 as the reference stores it in FileMetadataExt: the digest's hex string
/// parsed as a hash string, so each 8-byte group is byte-reversed.
pub fn sha256_to_metadata_hash(digest: &[u8; 32]) -> MerkleHash {
    let mut out = [0u8; 32];
    for w in 0..4 {
        for j in 0..8 {
            out[w * 8 + j] = digest[w * 8 + 7 - j];
        }
    }
    MerkleHash(out)
}

/// Inverse of [`sha256_to_metadata_hash`].
pub fn metadata_hash_to_sha256(h: &MerkleHash) -> [u8; 32] {
    // The transform is an involution.
    sha256_to_metadata_hash(&h.0).0
}

/// A hash serializes as its hash string (the form every report, record and API shows).
#[cfg(feature = "serde")]
impl serde::Serialize for MerkleHash {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

#[cfg(feature = "serde")]
impl<'de> serde::Deserialize<'de> for MerkleHash {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let s = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        MerkleHash::from_hex(&s).map_err(serde::de::Error::custom)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn h(s: &str) -> MerkleHash {
        MerkleHash::from_hex(s).unwrap()
    }

    #[test]
    fn appendix_c1_chunk_hash() {
        let got = chunk_hash(b"Hello World!");
        assert_eq!(
            got.raw_hex(),
            "a29cfb08e608d4d8726dd8659a90b9134b3240d5d8e42d5fcb28e2a6e763a3e8"
        );
        assert_eq!(
            got.to_string(),
            "d8d408e608fb9ca213b9909a65d86d725f2de4d8d540324be8a363e7a6e228cb"
        );
    }

    #[test]
    fn appendix_c2_hash_string() {
        let mut b = [0u8; 32];
        for (i, x) in b.iter_mut().enumerate() {
            *x = i as u8;
        }
        let s = MerkleHash(b).to_string();
        assert_eq!(
            s,
            "07060504030201000f0e0d0c0b0a090817161514131211101f1e1d1c1b1a1918"
        );
        assert_eq!(MerkleHash::from_hex(&s).unwrap(), MerkleHash(b));
    }

    #[test]
    fn appendix_c3_internal_node() {
        let c1 = h("c28f58387a60d4aa200c311cda7c7f77f686614864f5869eadebf765d0a14a69");
        let c2 = h("6e4e3263e073ce2c0e78cc770c361e2778db3b054b98ab65e277fc084fa70f22");
        let (got, size) = internal_node_hash(&[(c1, 100), (c2, 200)]);
        assert_eq!(size, 300);
        assert_eq!(
            got.to_string(),
            "be64c7003ccd3cf4357364750e04c9592b3c36705dee76a71590c011766b6c14"
        );
        // Two children merge into one node, so the root is that node.
        assert_eq!(merkle_root(&[(c1, 100), (c2, 200)]), got);
    }

    #[test]
    fn appendix_c4_verification() {
        let a = MerkleHash::from_raw_hex(
            "aad4607a38588fc2777f7cda1c310c209e86f564486186f6694aa1d065f7ebad",
        )
        .unwrap();
        let b = MerkleHash::from_raw_hex(
            "2cce73e063324e6e271e360c77cc780e65ab984b053bdb78220fa74f08fc77e2",
        )
        .unwrap();
        assert_eq!(
            verification_hash(&[a, b]).to_string(),
            "eb06a8ad81d588ac05d1d9a079232d9c1e7d0b07232fa58091caa7bf333a2768"
        );
    }

    #[test]
    fn empty_file_is_zero() {
        assert_eq!(file_hash(&[]), MerkleHash::ZERO);
        assert_eq!(merkle_root(&[]), MerkleHash::ZERO);
    }

    #[test]
    fn single_chunk_root_is_the_chunk() {
        let c = chunk_hash(b"x");
        assert_eq!(merkle_root(&[(c, 1)]), c);
        assert_ne!(file_hash(&[(c, 1)]), c);
    }

    #[test]
    fn bad_hash_strings() {
        assert_eq!(
            MerkleHash::from_hex("abc"),
            Err(HashError::BadLength { len: 3 })
        );
        let mut s = "0".repeat(64);
        s.replace_range(10..11, "g");
        assert_eq!(
            MerkleHash::from_hex(&s),
            Err(HashError::BadDigit { position: 10 })
        );
    }

    #[test]
    fn sha256_metadata_form_reads_back_as_hex() {
        // Reading the stored bytes with the hash-string conversion gives the plain digest hex.
        let digest = MerkleHash::from_raw_hex(
            "238ea472db6d866f0e51466869fcd683b77f547a725b0f0b2dd75a2b9f1cf6c4",
        )
        .unwrap();
        let stored = sha256_to_metadata_hash(&digest.0);
        assert_eq!(stored.to_string(), digest.raw_hex());
        assert_eq!(metadata_hash_to_sha256(&stored), digest.0);
    }

    proptest::proptest! {
        #[test]
        fn hash_string_roundtrip(b in proptest::array::uniform32(proptest::num::u8::ANY)) {
            let h = MerkleHash(b);
            proptest::prop_assert_eq!(MerkleHash::from_hex(&h.to_string()).unwrap(), h);
            proptest::prop_assert_eq!(MerkleHash::from_raw_hex(&h.raw_hex()).unwrap(), h);
        }

        #[test]
        fn merkle_root_matches_naive_levels(n in 1usize..200, seed in 0u64..1000) {
            // A second code path: build levels with explicit Vec allocation per level.
            let entries: Vec<(MerkleHash, u64)> = (0..n)
                .map(|i| (chunk_hash(&(seed * 1000 + i as u64).to_le_bytes()), i as u64 + 1))
                .collect();
            let mut level = entries.clone();
            while level.len() > 1 {
                let mut next = Vec::new();
                let mut rest = &level[..];
                while !rest.is_empty() {
                    let cut = next_merge_cut(rest);
                    next.push(internal_node_hash(&rest[..cut]));
                    rest = &rest[cut..];
                }
                level = next;
            }
            proptest::prop_assert_eq!(merkle_root(&entries), level[0].0);
        }
    }
}
