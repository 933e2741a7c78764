//! Tidy checks over the workspace's own files: rules of docs/ARCHITECTURE.md that the
//! compiler does not enforce by itself.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn crates() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    out.sort();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The one crate allowed to hold `unsafe` (memory maps), with its lints denied locally.
const UNSAFE_CRATE: &str = "xet-mmap";

#[test]
fn every_crate_forbids_unsafe_except_the_mmap_crate() {
    for (name, dir) in crates() {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        if name == UNSAFE_CRATE {
            assert!(
                manifest.contains("unsafe_code = \"deny\""),
                "{name} must deny unsafe code except where allowed explicitly"
            );
            continue;
        }
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "{name}/Cargo.toml must inherit the workspace lints (which forbid unsafe)"
        );
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("allow(unsafe_code)"),
                "{} allows unsafe code; only {UNSAFE_CRATE} may",
                f.display()
            );
        }
    }
    let root_manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(root_manifest.contains("unsafe_code = \"forbid\""));
}

#[test]
fn unsafe_in_the_mmap_crate_is_explained() {
    let src = std::fs::read_to_string(root().join("crates").join(UNSAFE_CRATE).join("src/lib.rs"))
        .unwrap();
    let blocks = src.matches("unsafe {").count();
    assert!(blocks > 0);
    assert_eq!(
        src.matches("// SAFETY:").count(),
        blocks,
        "every unsafe block in {UNSAFE_CRATE} carries a SAFETY comment"
    );
    assert_eq!(
        src.matches("#[allow(unsafe_code)]").count(),
        blocks,
        "each unsafe block sits in its own explicitly allowed function"
    );
}

#[test]
fn architecture_doc_describes_every_crate() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    for (name, _) in crates() {
        assert!(
            doc.contains(&format!("**{name}**")),
            "docs/ARCHITECTURE.md has no code-map paragraph for {name}"
        );
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(readme.contains("cargo xtask test"));
    assert!(
        ci.lines()
            .any(|l| l.trim() == "cargo xtask test" || l.trim() == "exec cargo xtask test"),
        ".ci/run must call exactly the README's test command:\n{ci}"
    );
}
