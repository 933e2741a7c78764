//! CAS HTTP routes as the reference client speaks them (`cas-http-api.md`). Paths are
//! appended directly to the endpoint: there is no `/api` prefix.

use xet_hash::MerkleHash;

/// The prefix hf_xet uses for xorbs and dedup queries.
pub const DEFAULT_PREFIX: &str = "default";
/// The draft's prefix; servers accept it too.
pub const MERKLEDB_PREFIX: &str = "default-merkledb";

pub const HEALTH: &str = "/health";
pub const TELEMETRY: &str = "/v1/telemetry";
pub const SHARDS_V1: &str = "/v1/shards";
pub const SHARDS_V2: &str = "/v2/shards";
pub const RECONSTRUCTIONS_BATCH_V1: &str = "/v1/reconstructions";

/// Header carrying the per-call session id on every request.
pub const SESSION_ID_HEADER: &str = "x-xet-session-id";
/// Content type of the `/v2/shards` progress stream.
pub const NDJSON: &str = "application/x-ndjson";

pub fn xorb_grant(hash: &MerkleHash) -> String {
    format!("/v1/xorb-grants/{DEFAULT_PREFIX}/{hash}")
}
pub fn xorb_commit(hash: &MerkleHash, grant_id: &str) -> String {
    format!("/v1/xorb-commits/{DEFAULT_PREFIX}/{hash}/grant/{grant_id}")
}
pub fn xorb(hash: &MerkleHash) -> String {
    format!("/v1/xorbs/{DEFAULT_PREFIX}/{hash}")
}
pub fn chunk(hash: &MerkleHash) -> String {
    format!("/v1/chunks/{DEFAULT_PREFIX}/{hash}")
}
pub fn reconstruction_v1(file: &MerkleHash) -> String {
    format!("/v1/reconstructions/{file}")
}
pub fn reconstruction_v2(file: &MerkleHash) -> String {
    format!("/v2/reconstructions/{file}")
}
pub fn file(hash: &MerkleHash) -> String {
    format!("/v1/files/{hash}")
}

/// Whether a path segment is a prefix the server accepts.
pub fn is_known_prefix(p: &str) -> bool {
    p == DEFAULT_PREFIX || p == MERKLEDB_PREFIX
}
