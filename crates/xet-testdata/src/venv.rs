//! The one installer of the tests' Python peers: pinned packages in the test virtualenv
//! `target/refvenv` (the rules, `$XET_REF_PYTHON` among them, are on
//! [`crate::reference_python`]).

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::Command;

/// What a test needs from the interpreter: packages at pinned versions.
pub(crate) struct Pins<'a> {
    /// `(name, version)` as PyPI spells them; pip is given `name==version`.
    pub packages: &'a [(&'a str, &'a str)],
    /// Modules that must import as well: a package whose native part does not load is
    /// as good as missing.
    pub imports: &'a [&'a str],
}

/// An interpreter that has the pins, and the directory of its console scripts (`hf`,
/// `weed`).
#[derive(Debug, Clone)]
pub(crate) struct Python {
    pub python: PathBuf,
    pub scripts: PathBuf,
}

impl Python {
    /// The console script `name` (installed by one of the pins).
    pub fn script(&self, name: &str) -> Result<PathBuf, String> {
        let path = self.scripts.join(name);
        if path.is_file() {
            Ok(path)
        } else {
            Err(format!(
                "{} has its packages but no `{name}` in {}",
                self.python.display(),
                self.scripts.display()
            ))
        }
    }
}

impl Pins<'_> {
    /// The requirements as pip takes them.
    fn requirements(&self) -> Vec<String> {
        self.packages
            .iter()
            .map(|(name, version)| format!("{name}=={version}"))
            .collect()
    }

    /// `python` with its scripts directory if it has every pin and every import works.
    fn found_in(&self, python: &Path) -> Option<Python> {
        let imports: String = self.imports.iter().map(|m| format!(", {m}")).collect();
        let pins: String = self
            .packages
            .iter()
            .map(|(name, version)| format!("('{name}', '{version}'), "))
            .collect();
        let script = format!(
            "import importlib.metadata as m, sys, sysconfig{imports}; \
             sys.exit(1) if any(m.version(n) != v for n, v in [{pins}]) \
             else print(sysconfig.get_path('scripts'))"
        );
        let out = Command::new(python).args(["-c", &script]).output().ok()?;
        let scripts = String::from_utf8(out.stdout).ok()?;
        out.status.success().then(|| Python {
            python: python.to_path_buf(),
            scripts: PathBuf::from(scripts.trim()),
        })
    }
}

/// An interpreter with `pins`: `$XET_REF_PYTHON` if it has them, else the test
/// virtualenv's, created and given the packages with pip if missing (see the module doc).
pub(crate) fn python_with(pins: &Pins) -> Result<Python, String> {
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/refvenv");
    let ours = venv.join("bin/python");
    if let Some(p) = std::env::var_os("XET_REF_PYTHON") {
        let p = PathBuf::from(p);
        if let Some(found) = pins.found_in(&p) {
            return Ok(found);
        }
        if !is_venv_python(&p, &venv) {
            return Err(format!(
                "{} (XET_REF_PYTHON) has no {}: install it there, or unset XET_REF_PYTHON \
                 to use {}",
                p.display(),
                pins.requirements().join(", "),
                venv.display()
            ));
        }
    }
    if let Some(found) = pins.found_in(&ours) {
        return Ok(found);
    }
    install(pins, &venv)?;
    pins.found_in(&ours).ok_or_else(|| {
        format!(
            "{} still lacks {} after pip install",
            ours.display(),
            pins.requirements().join(", ")
        )
    })
}

/// Whether `python` is `venv`'s own interpreter (its directory resolved, not the file: a
/// venv's python is a link to the system one).
fn is_venv_python(python: &Path, venv: &Path) -> bool {
    let dir = |p: &Path| p.parent().and_then(|d| d.canonicalize().ok());
    let ours = venv.join("bin/python");
    python.file_name() == ours.file_name() && dir(python).is_some() && dir(python) == dir(&ours)
}

/// Creates the virtualenv if missing and pip-installs the pins into it, holding
/// `refvenv.lock` beside it: tests in other threads and other test processes use the same
/// virtualenv, and two pips at once in one environment can leave it broken.
fn install(pins: &Pins, venv: &Path) -> Result<(), String> {
    let python = venv.join("bin/python");
    let lock_path = venv.with_extension("lock");
    let _lock = lock_path
        .parent()
        .map_or(Ok(()), std::fs::create_dir_all)
        .and_then(|()| {
            File::options()
                .create(true)
                .truncate(false)
                .write(true)
                .open(&lock_path)
        })
        .and_then(|f| f.lock().map(|()| f))
        .map_err(|e| format!("locking {}: {e}", lock_path.display()))?;
    // Whoever held the lock before may have installed them meanwhile.
    if pins.found_in(&python).is_some() {
        return Ok(());
    }
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(venv))?;
    }
    run(Command::new(&python)
        .args([
            "-m",
            "pip",
            "install",
            "--quiet",
            "--disable-pip-version-check",
        ])
        .args(pins.requirements()))
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The probe refuses a version other than the pinned one and a module that does not
    /// import, and finds the scripts directory of an interpreter that has the pins.
    #[test]
    fn probe_checks_versions_and_imports() {
        let pins = Pins {
            packages: &[("hf-xet", crate::HF_XET_VERSION)],
            imports: &[],
        };
        let found = match python_with(&pins) {
            Ok(found) => found,
            Err(e) if std::env::var("XET_REQUIRE_REFERENCE").as_deref() != Ok("1") => {
                eprintln!("SKIP: {e}");
                return;
            }
            Err(e) => panic!("{e}"),
        };
        assert!(found.scripts.join("pip").is_file(), "{found:?}");
        let other = Pins {
            packages: &[("hf-xet", "0.0.1")],
            imports: &[],
        };
        assert!(other.found_in(&found.python).is_none());
        let no_module = Pins {
            packages: &[("hf-xet", crate::HF_XET_VERSION)],
            imports: &["no_such_module_xet"],
        };
        assert!(no_module.found_in(&found.python).is_none());
    }
}
