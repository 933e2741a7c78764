//! The server over real HTTP on 127.0.0.1 (reqwest, and the reference client hf_xet),
//! backed by the in-memory store. One test binary (one build, one link), its tests
//! grouped by route in modules.

#[path = "../common/mod.rs"]
mod common;
mod reference;
mod support;

mod auth;
mod buckets;
mod grants;
mod hardening;
mod hub;
mod hub_access;
mod interop;
mod limits;
mod load;
mod reconstructions;
mod ref_ranges;
mod server;
mod uploads;
mod xorb_data;
