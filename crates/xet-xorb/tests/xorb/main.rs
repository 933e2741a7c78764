//! The xorb format's integration tests.
//! One test binary for the crate (one build, one link); a module per former file.

mod adversarial;
mod limits;
mod reference;
mod roundtrip;
