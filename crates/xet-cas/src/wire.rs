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

#[cfg(test)]
mod tests {
    use super::*;

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
