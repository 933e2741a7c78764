//! The SWH read shard's integration tests.
//! One test binary for the crate (one build, one link); a module per former file.

mod damaged;
mod golden;
mod interop;
mod props;
mod writer;
