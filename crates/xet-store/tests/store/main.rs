//! The store engine: the conformance suite on every backend, the reference corpus, shard bit flips.
//! One test binary for the crate (one build, one link); a module per former file.

mod buckets;
mod fs;
mod gc;
mod gc_requests;
mod git_trees;
mod memory;
mod reference;
mod shard_bits;
