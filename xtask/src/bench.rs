//! `cargo xtask bench` (filled in below as the pipelines land).
use anyhow::Result;

pub fn run(_args: &[String]) -> Result<()> {
    anyhow::bail!("bench: not implemented yet")
}
