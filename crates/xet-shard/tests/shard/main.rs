//! Shard parsing, writing and the reference's shards.
//! One test binary for the crate (one build, one link); a module per former file.

mod errors;
mod props;
mod reference;
