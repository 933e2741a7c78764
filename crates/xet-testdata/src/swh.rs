//! The real Software Heritage shard package (PyPI `swh-shard`, C core with cmph linked in),
//! the interop peer of `xet-swh`'s tests, installed into the reference virtualenv
//! (`target/refvenv`, see [`crate::reference_python`]).

use std::path::PathBuf;
use std::sync::OnceLock;

/// The swh-shard version the interop tests run against.
pub const SWH_SHARD_VERSION: &str = "2.2.1";

/// What `pip install` is given for it.
pub fn swh_shard_requirement() -> String {
    format!("swh-shard=={SWH_SHARD_VERSION}")
}

/// A Python interpreter with `swh-shard` [`SWH_SHARD_VERSION`] (its modules importing),
/// from the test virtualenv as for [`crate::reference_python`]. The package's CLI is `python -m swh.shard.cli`. Found (or installed)
/// once per process.
pub fn swh_python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            crate::venv::python_with(&crate::venv::Pins {
                packages: &[("swh-shard", SWH_SHARD_VERSION)],
                imports: &["swh.shard", "swh.shard.cli"],
            })
            .map(|found| found.python)
        })
        .clone()
}
