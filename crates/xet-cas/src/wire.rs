//! JSON bodies exactly as hf_xet 1.8.0 sends and expects them (`cas-http-api.md`).
//! Byte ranges on the wire are end-inclusive; chunk ranges are end-exclusive.

use crate::types::*;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use xet_hash::MerkleHash;

/// `{"start": s, "end": e}`: chunk ranges end-exclusive, byte ranges end-inclusive.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireRange {
    pub start: u64,
    pub end: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireTerm {
    pub hash: String,
    pub unpacked_length: u64,
    pub range: WireRange,
}

/// `GET /v2/reconstructions/{file}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconstructionV2 {
    pub offset_into_first_range: u64,
    pub terms: Vec<WireTerm>,
    pub xorbs: BTreeMap<String, Vec<XorbFetchV2>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XorbFetchV2 {
    pub url: String,
    pub ranges: Vec<XorbRangeV2>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct XorbRangeV2 {
    pub chunks: WireRange,
    /// End-inclusive.
    pub bytes: WireRange,
}

/// `GET /v1/reconstructions/{file}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReconstructionV1 {
    pub offset_into_first_range: u64,
    pub terms: Vec<WireTerm>,
    pub fetch_info: BTreeMap<String, Vec<FetchInfoV1>>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FetchInfoV1 {
    pub range: WireRange,
    pub url: String,
    /// End-inclusive.
    pub url_range: WireRange,
}

/// `GET /v1/reconstructions?file_id=..`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchReconstructionV1 {
    pub files: BTreeMap<String, Vec<WireTerm>>,
    pub fetch_info: BTreeMap<String, Vec<FetchInfoV1>>,
}

/// `POST /v1/xorb-grants/...` request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GrantRequest {
    pub length: u64,
    pub checksum: Checksum,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Checksum {
    /// `"crc64nvme"`.
    pub algo: String,
    /// Decimal string.
    pub value: String,
}

/// `201` answer to a grant request.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Grant {
    pub id: String,
    pub method: String,
    pub url: String,
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
}

/// `POST /v1/xorbs/...` answer (and `200` on a grant request for an existing xorb).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WasInserted {
    pub was_inserted: bool,
}

/// `POST /v1/shards` answer: 1 registered, 0 already existed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardResultV1 {
    pub result: u8,
}

/// One NDJSON frame of `POST /v2/shards`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ShardFrame {
    Validating {
        verified: u64,
        total: u64,
    },
    Committing {
        stage: String,
    },
    Result {},
    Error {
        message: String,
        retryable: bool,
    },
    #[serde(other)]
    Unknown,
}

/// Token refresh answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TokenRefresh {
    #[serde(rename = "accessToken")]
    pub access_token: String,
    pub exp: u64,
    #[serde(rename = "casUrl")]
    pub cas_url: String,
}

/// JSON body of every 4xx/5xx our server sends.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    pub error: String,
    pub reason: String,
}

/// A reconstruction's wire form that does not make a [`Reconstruction`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum WireError {
    #[error("bad xorb hash {value:?}")]
    Hash {
        value: String,
        #[source]
        source: xet_hash::HashError,
    },
    #[error("chunk index {index} is too large")]
    ChunkIndex { index: u64 },
    #[error("chunk range {start}..{end} is reversed")]
    ChunkRangeReversed { start: u32, end: u32 },
    #[error("byte range {start}-{end} is reversed")]
    ByteRangeReversed { start: u64, end: u64 },
    #[error("byte range end {end} overflows")]
    ByteRangeOverflow { end: u64 },
}

fn parse_hash(s: &str) -> Result<MerkleHash, WireError> {
    MerkleHash::from_hex(s).map_err(|source| WireError::Hash {
        value: s.to_string(),
        source,
    })
}

fn wire_term(t: &Term) -> WireTerm {
    WireTerm {
        hash: t.xorb.to_string(),
        unpacked_length: t.unpacked_length,
        range: WireRange {
            start: t.chunks.start as u64,
            end: t.chunks.end as u64,
        },
    }
}

fn chunk_range(r: &WireRange) -> Result<ChunkRange, WireError> {
    let index = |i: u64| u32::try_from(i).map_err(|_| WireError::ChunkIndex { index: i });
    let (start, end) = (index(r.start)?, index(r.end)?);
    if end < start {
        return Err(WireError::ChunkRangeReversed { start, end });
    }
    Ok(ChunkRange::new(start, end))
}

/// Inclusive wire byte range → exclusive.
fn byte_range_incl(r: &WireRange) -> Result<ByteRange, WireError> {
    let end = r
        .end
        .checked_add(1)
        .ok_or(WireError::ByteRangeOverflow { end: r.end })?;
    if end < r.start {
        return Err(WireError::ByteRangeReversed {
            start: r.start,
            end: r.end,
        });
    }
    Ok(ByteRange::new(r.start, end))
}

fn terms_from_wire(terms: &[WireTerm]) -> Result<Vec<Term>, WireError> {
    terms
        .iter()
        .map(|t| {
            Ok(Term {
                xorb: parse_hash(&t.hash)?,
                chunks: chunk_range(&t.range)?,
                unpacked_length: t.unpacked_length,
            })
        })
        .collect()
}

impl Reconstruction {
    /// The v2 wire form. Every fetch must carry a URL (`url_for` fills in missing ones).
    pub fn to_v2(&self, url_for: impl Fn(&XorbFetch) -> String) -> ReconstructionV2 {
        let mut xorbs: BTreeMap<String, Vec<XorbFetchV2>> = BTreeMap::new();
        for f in &self.fetches {
            let url = f.url.clone().unwrap_or_else(|| url_for(f));
            let range = XorbRangeV2 {
                chunks: WireRange {
                    start: f.chunks.start as u64,
                    end: f.chunks.end as u64,
                },
                bytes: WireRange {
                    start: f.bytes.start,
                    end: f.bytes.end.saturating_sub(1),
                },
            };
            let list = xorbs.entry(f.xorb.to_string()).or_default();
            // One URL entry per xorb holding all its ranges, as the reference server does.
            match list.iter_mut().find(|e| e.url == url) {
                Some(e) => e.ranges.push(range),
                None => list.push(XorbFetchV2 {
                    url,
                    ranges: vec![range],
                }),
            }
        }
        ReconstructionV2 {
            offset_into_first_range: self.offset_into_first_range,
            terms: self.terms.iter().map(wire_term).collect(),
            xorbs,
        }
    }

    pub fn to_v1(&self, url_for: impl Fn(&XorbFetch) -> String) -> ReconstructionV1 {
        ReconstructionV1 {
            offset_into_first_range: self.offset_into_first_range,
            terms: self.terms.iter().map(wire_term).collect(),
            fetch_info: fetch_info_v1(&self.fetches, url_for),
        }
    }

    pub fn from_v2(w: &ReconstructionV2) -> Result<Self, WireError> {
        let mut fetches = Vec::new();
        for (h, list) in &w.xorbs {
            let xorb = parse_hash(h)?;
            for e in list {
                for r in &e.ranges {
                    fetches.push(XorbFetch {
                        xorb,
                        chunks: chunk_range(&r.chunks)?,
                        bytes: byte_range_incl(&r.bytes)?,
                        url: Some(e.url.clone()),
                    });
                }
            }
        }
        Ok(Reconstruction {
            offset_into_first_range: w.offset_into_first_range,
            terms: terms_from_wire(&w.terms)?,
            fetches,
        })
    }

    pub fn from_v1(w: &ReconstructionV1) -> Result<Self, WireError> {
        let mut fetches = Vec::new();
        for (h, list) in &w.fetch_info {
            let xorb = parse_hash(h)?;
            for e in list {
                fetches.push(XorbFetch {
                    xorb,
                    chunks: chunk_range(&e.range)?,
                    bytes: byte_range_incl(&e.url_range)?,
                    url: Some(e.url.clone()),
                });
            }
        }
        Ok(Reconstruction {
            offset_into_first_range: w.offset_into_first_range,
            terms: terms_from_wire(&w.terms)?,
            fetches,
        })
    }
}

pub fn fetch_info_v1(
    fetches: &[XorbFetch],
    url_for: impl Fn(&XorbFetch) -> String,
) -> BTreeMap<String, Vec<FetchInfoV1>> {
    let mut out: BTreeMap<String, Vec<FetchInfoV1>> = BTreeMap::new();
    for f in fetches {
        out.entry(f.xorb.to_string())
            .or_default()
            .push(FetchInfoV1 {
                range: WireRange {
                    start: f.chunks.start as u64,
                    end: f.chunks.end as u64,
                },
                url: f.url.clone().unwrap_or_else(|| url_for(f)),
                url_range: WireRange {
                    start: f.bytes.start,
                    end: f.bytes.end.saturating_sub(1),
                },
            });
    }
    out
}

/// CRC-64/NVME of `data`: the grant request's `checksum.value` (decimal on the wire).
/// SIMD (carry-less multiply) where the CPU has it; a table fallback elsewhere.
pub fn crc64_nvme(data: &[u8]) -> u64 {
    crc_fast::crc64_nvme(data)
}

/// CRC-64/NVME of `a ++ b` from `crc64_nvme(a)`, `crc64_nvme(b)` and `b.len()`, without
/// reading either: the CRC of `a` moved past `len_b` zero bytes (a multiplication by
/// x^(8·len_b) modulo the polynomial), plus the CRC of `b`. (Init and final XOR are both
/// all ones, so their contributions cancel.) About a microsecond, so per-chunk CRCs taken
/// while each chunk is in cache can be joined into a body's.
pub fn crc64_nvme_combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    // x^(8·len_b) = product of x^(2^k) over the set bits k of 8·len_b, i.e. bits k-3 of len_b.
    let mut shift = ONE;
    let mut n = len_b;
    let mut k = 3;
    while n != 0 {
        if n & 1 != 0 {
            shift = gf2_mul_mod(X_POW_2_POW[k], shift);
        }
        n >>= 1;
        k += 1;
    }
    gf2_mul_mod(shift, crc_a) ^ crc_b
}

/// CRC-64/NVME's polynomial, bit-reflected (x^0 in the top bit, as the CRC register holds it).
const POLY_REFLECTED: u64 = 0x9a6c_9329_ac4b_c9b5;
/// The polynomial 1 in that representation.
const ONE: u64 = 1 << 63;

/// `a · b mod P` over GF(2), both reflected.
const fn gf2_mul_mod(a: u64, mut b: u64) -> u64 {
    let mut p = 0;
    let mut m = ONE;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        // b · x: one step towards x^63, reduced when it passes it.
        b = if b & 1 != 0 {
            (b >> 1) ^ POLY_REFLECTED
        } else {
            b >> 1
        };
        m >>= 1;
    }
    p
}

/// `X_POW_2_POW[k]` = x^(2^k) mod P, for every bit of a `u64` length times 8.
const X_POW_2_POW: [u64; 67] = {
    let mut t = [0u64; 67];
    t[0] = ONE >> 1; // x
    let mut k = 1;
    while k < t.len() {
        t[k] = gf2_mul_mod(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// Streaming CRC-64/NVME, for bodies that arrive in pieces.
pub struct Crc64Nvme(crc_fast::Digest);

impl Default for Crc64Nvme {
    fn default() -> Self {
        Crc64Nvme(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme))
    }
}

impl Crc64Nvme {
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data)
    }
    pub fn finalize(&self) -> u64 {
        self.0.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_nvme_check_value_and_streaming() {
        assert_eq!(crc64_nvme(b"123456789"), 0xae8b14860a799888);
        assert_eq!(crc64_nvme(b""), 0);
        // Long enough for the SIMD path; every split must agree with one shot.
        let data: Vec<u8> = (0..10_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let whole = crc64_nvme(&data);
        for split in [0, 1, 15, 16, 17, 255, 4096, 9_999, 10_000] {
            let mut d = Crc64Nvme::default();
            d.update(&data[..split]);
            d.update(&data[split..]);
            assert_eq!(d.finalize(), whole, "split at {split}");
        }
    }

    #[test]
    fn crc64_nvme_combine_equals_one_shot() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        for (a, b) in [
            (0, 0),
            (0, 1),
            (1, 0),
            (1, 1),
            (8, 65_536),
            (7, 131_073),
            (100_000, 0),
            (65_536, 8),
            (3, 299_997),
            (299_999, 1),
        ] {
            let (x, y) = (&data[..a], &data[a..a + b]);
            let want = crc64_nvme(&data[..a + b]);
            let got = crc64_nvme_combine(crc64_nvme(x), crc64_nvme(y), b as u64);
            assert_eq!(got, want, "{a} + {b} bytes");
        }
        // A chain of combines, as a xorb body's headers and payloads are joined.
        let mut crc = 0;
        let mut pos = 0;
        for len in [8usize, 8192, 8, 0, 1, 131_072, 8, 77_777] {
            crc = crc64_nvme_combine(crc, crc64_nvme(&data[pos..pos + len]), len as u64);
            pos += len;
        }
        assert_eq!(crc, crc64_nvme(&data[..pos]));
    }

    fn sample() -> Reconstruction {
        let a = xet_hash::chunk_hash(b"a");
        let b = xet_hash::chunk_hash(b"b");
        Reconstruction {
            offset_into_first_range: 5,
            terms: vec![
                Term {
                    xorb: a,
                    chunks: ChunkRange::new(0, 2),
                    unpacked_length: 100,
                },
                Term {
                    xorb: b,
                    chunks: ChunkRange::new(1, 3),
                    unpacked_length: 50,
                },
                Term {
                    xorb: a,
                    chunks: ChunkRange::new(4, 5),
                    unpacked_length: 10,
                },
            ],
            fetches: vec![
                XorbFetch {
                    xorb: a,
                    chunks: ChunkRange::new(0, 2),
                    bytes: ByteRange::new(0, 80),
                    url: None,
                },
                XorbFetch {
                    xorb: a,
                    chunks: ChunkRange::new(4, 5),
                    bytes: ByteRange::new(120, 130),
                    url: None,
                },
                XorbFetch {
                    xorb: b,
                    chunks: ChunkRange::new(1, 3),
                    bytes: ByteRange::new(30, 70),
                    url: None,
                },
            ],
        }
    }

    fn urls(r: &Reconstruction) -> Reconstruction {
        let mut r = r.clone();
        for f in &mut r.fetches {
            f.url = Some(format!("http://x/{}", f.xorb));
        }
        r
    }

    #[test]
    fn v2_round_trip_and_inclusive_bytes() {
        let r = sample();
        let w = r.to_v2(|f| format!("http://x/{}", f.xorb));
        let json = serde_json::to_value(&w).unwrap();
        let a = r.terms[0].xorb.to_string();
        // One URL entry per xorb with both ranges; byte end is inclusive on the wire.
        assert_eq!(json["xorbs"][&a].as_array().unwrap().len(), 1);
        assert_eq!(json["xorbs"][&a][0]["ranges"][0]["bytes"]["end"], 79);
        let back = Reconstruction::from_v2(&w).unwrap();
        let mut got = back.fetches.clone();
        let mut want = urls(&r).fetches;
        got.sort_by_key(|f| (f.xorb, f.chunks.start));
        want.sort_by_key(|f| (f.xorb, f.chunks.start));
        assert_eq!(got, want);
        assert_eq!(back.terms, r.terms);
    }

    #[test]
    fn v1_round_trip() {
        let r = sample();
        let w = r.to_v1(|f| format!("http://x/{}", f.xorb));
        let json = serde_json::to_string(&w).unwrap();
        let back = Reconstruction::from_v1(&serde_json::from_str(&json).unwrap()).unwrap();
        assert_eq!(back.terms, r.terms);
        assert_eq!(back.fetches.len(), 3);
        assert!(back.terms.iter().all(|t| back.fetch_for(t).is_some()));
    }

    #[test]
    fn shard_frames_parse_as_hf_xet_sends_them() {
        let lines = [
            r#"{"type": "validating", "verified": 0, "total": 3}"#,
            r#"{"type": "committing", "stage": "uploading"}"#,
            r#"{"type": "result"}"#,
            r#"{"type":"error","message":"boom","retryable":true}"#,
            r#"{"type":"something-new","x":1}"#,
        ];
        let f: Vec<ShardFrame> = lines
            .iter()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert_eq!(
            f[0],
            ShardFrame::Validating {
                verified: 0,
                total: 3
            }
        );
        assert_eq!(f[2], ShardFrame::Result {});
        assert_eq!(
            f[3],
            ShardFrame::Error {
                message: "boom".into(),
                retryable: true
            }
        );
        assert_eq!(f[4], ShardFrame::Unknown);
        assert_eq!(
            serde_json::to_string(&ShardFrame::Result {}).unwrap(),
            r#"{"type":"result"}"#
        );
    }

    #[test]
    fn bad_wire_values_are_errors() {
        let mut w = sample().to_v2(|_| "u".into());
        w.terms[0].range = WireRange { start: 5, end: 2 };
        assert_eq!(
            Reconstruction::from_v2(&w),
            Err(WireError::ChunkRangeReversed { start: 5, end: 2 })
        );
        w.terms[0].range = WireRange {
            start: 1 << 32,
            end: 1 << 33,
        };
        assert_eq!(
            Reconstruction::from_v2(&w),
            Err(WireError::ChunkIndex { index: 1 << 32 })
        );
        let mut w = sample().to_v2(|_| "u".into());
        w.terms[0].hash = "zz".into();
        let e = Reconstruction::from_v2(&w).unwrap_err();
        assert!(
            matches!(&e, WireError::Hash { value, .. } if value == "zz"),
            "{e:?}"
        );
        // The hash error is the cause, not repeated in the message.
        let cause = std::error::Error::source(&e).expect("a cause").to_string();
        assert!(cause.contains("64 hex digits") && !e.to_string().contains(&cause));
        let mut v1 = sample().to_v1(|_| "u".into());
        let fetch = v1.fetch_info.values_mut().next().unwrap();
        fetch[0].url_range = WireRange {
            start: 0,
            end: u64::MAX,
        };
        assert_eq!(
            Reconstruction::from_v1(&v1),
            Err(WireError::ByteRangeOverflow { end: u64::MAX })
        );
        let fetch = v1.fetch_info.values_mut().next().unwrap();
        fetch[0].url_range = WireRange { start: 10, end: 2 };
        assert_eq!(
            Reconstruction::from_v1(&v1),
            Err(WireError::ByteRangeReversed { start: 10, end: 2 })
        );
    }

    #[test]
    fn token_refresh_field_names() {
        let t: TokenRefresh =
            serde_json::from_str(r#"{"accessToken":"t","exp":5,"casUrl":"http://h"}"#).unwrap();
        assert_eq!(t.access_token, "t");
    }
}
