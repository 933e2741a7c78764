//! Names of the Hub (`xet-hub::id`), which turn into file names on clients and storage
//! keys on servers: `RepoPath::parse` / `parse_folder`, `git_reserved`, `Revision::parse`,
//! `BranchName::parse`, `RepoId::parse`, `CommitId::parse`.
//!
//! Input: UTF-8 text (anything else never reaches these parsers: paths come from JSON
//! strings and percent-decoded URLs).
//! Checks: no panic; an accepted path is the input itself, relative, within 4096 bytes,
//! with no empty, `.` or `..` segment, no control character or backslash, and no
//! component git refuses (a refused one is `NameError::GitPath` naming that component);
//! its parents are its prefixes; `parse_folder` accepts exactly the path and the path
//! plus one `/`; an accepted revision prints back to what parses to the same revision;
//! a repository id prints back to itself.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_hub::{BranchName, CommitId, NameError, RepoId, RepoPath, Revision, git_reserved};

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        return;
    };
    path(s);
    revision(s);
    if let Ok(id) = RepoId::parse(s) {
        assert_eq!(id.to_string(), s);
    }
    if let Some(c) = CommitId::parse(s) {
        assert_eq!(c.to_string(), s.to_ascii_lowercase());
    }
});

fn path(s: &str) {
    match RepoPath::parse(s) {
        Ok(p) => {
            assert_eq!(p.as_str(), s);
            assert!(!s.is_empty() && s.len() <= 4096 && !s.starts_with('/'));
            assert!(!s.chars().any(|c| c.is_control() || c == '\\'));
            for seg in s.split('/') {
                assert!(!matches!(seg, "" | "." | ".."), "{s:?}");
                assert!(!git_reserved(seg), "{s:?} holds {seg:?}");
            }
            for parent in p.parents() {
                assert!(s.starts_with(parent) && s.as_bytes()[parent.len()] == b'/');
                assert!(p.is_within(&RepoPath::parse(parent).expect("a parent parses")));
            }
            assert_eq!(RepoPath::parse_folder(&format!("{s}/")).as_ref(), Ok(&p));
        }
        Err(NameError::GitPath { path, component }) => {
            assert_eq!(path, s);
            assert!(git_reserved(&component));
            assert!(s.split('/').any(|seg| seg == component));
        }
        Err(_) => {}
    }
}

fn revision(s: &str) {
    let Ok(r) = Revision::parse(s) else {
        return;
    };
    let printed = r.to_string();
    assert_eq!(Revision::parse(&printed).as_ref(), Ok(&r), "{s:?}");
    if let Revision::Branch(b) = &r {
        assert_eq!(BranchName::parse(b.as_str()).as_ref(), Ok(b));
    }
}
