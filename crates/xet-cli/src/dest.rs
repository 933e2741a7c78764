//! Where `xet download` writes each file, decided and checked before anything is
//! fetched: `-o -` / `-o FILE` / `-o DIR`, and the PATH of `--files-from` lines.

use crate::exit::{CliResult, Code, Failure};
use anyhow::{Context, anyhow};
use std::path::{Component, Path, PathBuf};

/// One file to download.
pub struct Entry {
    pub hash: String,
    /// The PATH of a `HASH PATH` line, and that line ("--files-from LIST line N").
    pub path: Option<(PathBuf, String)>,
}

/// Where the files go.
pub enum Output {
    /// `-o -`, or `-o` naming the file that stdout already is.
    Stdout,
    /// `-o FILE`: exactly one file.
    File(PathBuf),
    /// `-o DIR`, or without `-o` the current directory (`None`).
    Dir(Option<PathBuf>),
}

fn usage(message: String) -> Failure {
    Failure::new(Code::Usage, anyhow!(message))
}

impl Output {
    /// From `-o` and the entries: several files need a directory, and a line's own PATH
    /// cannot also go to one named file or to stdout.
    pub fn resolve(o: Option<&Path>, entries: &[Entry]) -> CliResult<Output> {
        let n = entries.len();
        let with_path = entries.iter().find_map(|e| e.path.as_ref());
        let Some(o) = o else {
            return Ok(Output::Dir(None));
        };
        if o == Path::new("-") || is_stdout(o) {
            if n > 1 {
                return Err(usage(format!(
                    "-o {} writes one file to stdout; {n} hashes given",
                    o.display()
                )));
            }
            if let Some((p, line)) = with_path {
                return Err(usage(format!(
                    "{line} gives the path {}, but -o {} writes to stdout",
                    p.display(),
                    o.display()
                )));
            }
            return Ok(Output::Stdout);
        }
        let written_as_dir = o.to_string_lossy().ends_with(std::path::is_separator);
        if o.is_dir() || written_as_dir {
            return Ok(Output::Dir(Some(o.to_path_buf())));
        }
        if n > 1 {
            return Err(usage(format!(
                "-o {} names one file but {n} hashes are given; several files need -o DIR, \
                 an existing directory or a path written with a trailing /",
                o.display()
            )));
        }
        if let Some((p, line)) = with_path {
            return Err(usage(format!(
                "{line} gives the path {}, but -o {} names one file (it is not an existing \
                 directory, nor written with a trailing /); a line's PATH goes under -o DIR",
                p.display(),
                o.display()
            )));
        }
        Ok(Output::File(o.to_path_buf()))
    }

    /// Every entry's destination, in order; `None` for stdout. A line's PATH must stay
    /// under `-o DIR` (or the current directory): not absolute, no `..`, and, under `-o
    /// DIR`, not through a symbolic link leading out of DIR.
    pub fn destinations(&self, entries: &[Entry]) -> CliResult<Option<Vec<PathBuf>>> {
        let base = match self {
            Output::Stdout => return Ok(None),
            Output::File(f) => return Ok(Some(vec![f.clone(); entries.len()])),
            Output::Dir(d) => d.as_deref(),
        };
        for (p, line) in entries.iter().filter_map(|e| e.path.as_ref()) {
            check_relative(p).map_err(|why| {
                usage(format!(
                    "{line}: {} {why}; a line's PATH is relative to -o DIR (or to the \
                     current directory without -o) and stays under it",
                    p.display()
                ))
            })?;
        }
        // A directory that does not exist yet holds no links.
        if let Some(dir) = base.filter(|d| d.exists()) {
            let canon = std::fs::canonicalize(dir)
                .with_context(|| format!("cannot resolve -o {}", dir.display()))
                .map_err(Failure::input)?;
            for (p, line) in entries.iter().filter_map(|e| e.path.as_ref()) {
                let full = dir.join(p);
                let leads_out = xet_download::dest::leads_out(&canon, &full)
                    .with_context(|| format!("{line}: cannot check where {} leads", p.display()))
                    .map_err(Failure::input)?;
                if leads_out {
                    return Err(usage(format!(
                        "{line}: {} leads out of {} through a symbolic link",
                        p.display(),
                        dir.display()
                    )));
                }
            }
        }
        Ok(Some(
            entries
                .iter()
                .map(|e| {
                    let name = e.path.as_ref().map_or(Path::new(&e.hash), |(p, _)| p);
                    base.map_or_else(|| name.to_path_buf(), |b| b.join(name))
                })
                .collect(),
        ))
    }
}

/// Why `p` does not stay under the directory it is relative to, if it does not.
fn check_relative(p: &Path) -> Result<(), &'static str> {
    for c in p.components() {
        match c {
            Component::Prefix(_) | Component::RootDir => return Err("is absolute"),
            Component::ParentDir => return Err("has a `..` component"),
            Component::CurDir | Component::Normal(_) => {}
        }
    }
    if p.file_name().is_none() {
        return Err("names no file");
    }
    Ok(())
}

/// Whether `p` is the file stdout already writes to (same device and inode as fd 1),
/// e.g. `/dev/stdout`.
#[cfg(unix)]
fn is_stdout(p: &Path) -> bool {
    use std::os::fd::AsFd;
    use std::os::unix::fs::MetadataExt;
    let Ok(target) = std::fs::metadata(p) else {
        return false;
    };
    let Ok(fd) = std::io::stdout().as_fd().try_clone_to_owned() else {
        return false;
    };
    let Ok(stdout) = std::fs::File::from(fd).metadata() else {
        return false;
    };
    (target.dev(), target.ino()) == (stdout.dev(), stdout.ino())
}

#[cfg(not(unix))]
fn is_stdout(_: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_paths_must_stay_relative() {
        assert!(check_relative(Path::new("a/b.bin")).is_ok());
        assert!(check_relative(Path::new("./a")).is_ok());
        assert_eq!(check_relative(Path::new("/etc/x")), Err("is absolute"));
        assert_eq!(
            check_relative(Path::new("a/../b")),
            Err("has a `..` component")
        );
        assert_eq!(check_relative(Path::new("..")), Err("has a `..` component"));
        assert_eq!(check_relative(Path::new(".")), Err("names no file"));
    }
}
