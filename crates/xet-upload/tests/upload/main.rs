//! The upload pipeline against real stores and the reference's shards.
//! One test binary for the crate (one build, one link); a module per former file.

mod common;

mod changing_input;
mod fs_store;
mod overlap;
mod reference;
mod upload;
