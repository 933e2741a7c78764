//! The chunker's integration tests.
//! One test binary for the crate (one build, one link); a module per former file.

mod common;

mod golden;
mod resolver;
mod rules;
mod scan;
