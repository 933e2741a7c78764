//! HttpCas against a real server.
//! One test binary for the crate (one build, one link); a module per former file.

mod support;

mod auth;
mod conformance;
mod faults;
mod streams;
