//! Upload and download benchmarks (xet vs the reference, embedded/local and over
//! `xet serve`). Filled in as `xet upload`, `xet download` and `xet serve` land.

use crate::bench::{BenchSample, TransferOpts};
use anyhow::Result;
use std::path::Path;

pub fn run(
    _o: &TransferOpts,
    _xet: &Path,
    _py: &Path,
    _input: &Path,
    _size: u64,
    _row: &mut dyn FnMut(String, BenchSample, Option<BenchSample>, &'static str),
    _want: &dyn Fn(&str) -> bool,
) -> Result<()> {
    Ok(())
}
