//! What the cases run on: the release `xet`, the reference's python and the input file
//! ([`Setup`]), and what they prepare: pseudo-random files, trees of small files, empty
//! directories, inputs read into the page cache.

use super::opts::Opts;
use anyhow::{Context, Result, bail};
use std::path::{Path, PathBuf};
use std::process::Command;

/// What every loopback group gets.
pub struct Setup {
    pub xet: PathBuf,
    pub py: PathBuf,
    /// The big input file, `size` bytes.
    pub input: PathBuf,
    pub size: u64,
    /// Measured runs per contender.
    pub runs: usize,
}

impl Setup {
    /// The reference installed if need be, a release `xet` built, the input written
    /// unless it is there already.
    pub fn new(root: &Path, o: &Opts, size_mib: u64) -> Result<Setup> {
        let py = crate::reference::python()?;
        let xet = build_release(root)?;
        let input = input_file(root, size_mib)?;
        Ok(Setup {
            xet,
            py,
            input,
            size: size_mib << 20,
            runs: o.runs,
        })
    }

    pub fn mib(&self) -> u64 {
        self.size >> 20
    }

    pub fn input_str(&self) -> Result<&str> {
        path_str(&self.input)
    }
}

/// `cargo build --release -p xet`, and the binary it made: in `$CARGO_TARGET_DIR/release`
/// when that is set (relative to the workspace, as cargo takes it), else in
/// `target/release`.
pub fn build_release(root: &Path) -> Result<PathBuf> {
    let mut c = Command::new(env!("CARGO"));
    c.args(["build", "--release", "-p", "xet"])
        .current_dir(root);
    // `cargo run` gave this process its package's CARGO_PKG_* / CARGO_MANIFEST_* variables;
    // build scripts that watch them (ring's) would rebuild the whole TLS stack every time.
    for (k, _) in std::env::vars_os() {
        let k = k.to_string_lossy();
        if [
            "CARGO_PKG_",
            "CARGO_MANIFEST_",
            "CARGO_CRATE_",
            "CARGO_BIN_",
            "CARGO_PRIMARY_",
        ]
        .iter()
        .any(|p| k.starts_with(p))
        {
            c.env_remove(k.as_ref());
        }
    }
    let st = c.status()?;
    if !st.success() {
        bail!("cargo build --release -p xet failed");
    }
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .filter(|d| !d.is_empty())
        .map_or_else(|| root.join("target"), |d| root.join(d));
    Ok(target.join("release/xet"))
}

/// The big-file input of `size_mib` MiB, made once and kept in `target/bench-data`.
pub fn input_file(root: &Path, size_mib: u64) -> Result<PathBuf> {
    let input = root.join(format!("target/bench-data/random-{size_mib}m.bin"));
    ensure_file(&input, size_mib << 20, 0xBE7C)?;
    Ok(input)
}

/// `path` holding `size` pseudo-random bytes from `seed` (written unless it has that
/// size already).
pub fn ensure_file(path: &Path, size: u64, seed: u64) -> Result<()> {
    if std::fs::metadata(path)
        .map(|m| m.len() == size)
        .unwrap_or(false)
    {
        return Ok(());
    }
    eprintln!(
        "writing {} ({} MiB of pseudo-random data)",
        path.display(),
        size >> 20
    );
    std::fs::create_dir_all(path.parent().expect("parent"))?;
    let mut f = std::io::BufWriter::with_capacity(8 << 20, std::fs::File::create(path)?);
    let mut rng = xet_testdata::Rng::new(seed);
    let mut buf = vec![0u8; 8 << 20];
    let mut left = size;
    use std::io::Write;
    while left > 0 {
        let n = left.min(buf.len() as u64) as usize;
        rng.fill(&mut buf[..n]);
        f.write_all(&buf[..n])?;
        left -= n as u64;
    }
    f.flush()?;
    Ok(())
}

/// `xet hash -q FILE`: the file hash downloads ask for.
pub fn file_hash(xet: &Path, file: &Path) -> Result<String> {
    let out = Command::new(xet).args(["hash", "-q"]).arg(file).output()?;
    if !out.status.success() {
        bail!("xet hash {} failed", file.display());
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

/// `count` files of pseudo-random sizes in `sizes` and pseudo-random bytes (from
/// `seed`) in 20 directories under `work`, and a file listing their paths. Returns the
/// tree, the list and the total size.
pub fn small_files(
    work: &Path,
    count: usize,
    sizes: std::ops::RangeInclusive<usize>,
    seed: u64,
) -> Result<(PathBuf, PathBuf, u64)> {
    let tree = work.join("small-files");
    fresh(&tree)?;
    let mut rng = xet_testdata::Rng::new(seed);
    let mut list = String::new();
    let mut total = 0u64;
    let span = (sizes.end() - sizes.start() + 1) as u64;
    for i in 0..count {
        let dir = tree.join(format!("d{:02}", i % 20));
        std::fs::create_dir_all(&dir)?;
        let len = sizes.start() + rng.below(span) as usize;
        let mut data = vec![0u8; len];
        rng.fill(&mut data);
        let path = dir.join(format!("f{i:05}.bin"));
        std::fs::write(&path, &data)?;
        list.push_str(path_str(&path)?);
        list.push('\n');
        total += len as u64;
    }
    let list_path = work.join("small-files.txt");
    std::fs::write(&list_path, list)?;
    Ok((tree, list_path, total))
}

/// Read `path` (a file, or every file under a directory) so a run that follows finds it
/// in the page cache. Done before every timed run that reads it, not once: this VM's
/// DAMON pages out memory left unaccessed for a minute (`pageout` scheme, age 12 × 5 s),
/// so an input read once at the start is partly back on disk by the later rows, and the
/// run that meets the evicted pages waits on disk reads (seen in `sched_switch` traces:
/// the uploader's page faults in `filemap_fault`, uninterruptible).
pub fn warm(path: &Path) -> Result<()> {
    if path.is_dir() {
        for e in std::fs::read_dir(path)? {
            warm(&e?.path())?;
        }
        return Ok(());
    }
    let mut f = std::fs::File::open(path).with_context(|| format!("warming {}", path.display()))?;
    let mut buf = vec![0u8; 8 << 20];
    while std::io::Read::read(&mut f, &mut buf)? > 0 {}
    Ok(())
}

/// An empty directory at `dir`.
pub fn fresh(dir: &Path) -> Result<()> {
    if dir.exists() {
        std::fs::remove_dir_all(dir)?;
    }
    std::fs::create_dir_all(dir)?;
    Ok(())
}

/// `p` as a string, for a command line.
pub fn path_str(p: &Path) -> Result<&str> {
    p.to_str()
        .with_context(|| format!("{} is not UTF-8", p.display()))
}
