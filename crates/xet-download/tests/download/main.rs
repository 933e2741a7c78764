//! The download pipeline's integration tests.
//! One test binary for the crate (one build, one link); a module per former file.

mod common;

mod download;
mod fs_store;
mod over_http;
mod sha256;
mod stream;
