//! The git objects and tree facts a Hub repository is stored as (`xet-hub::git`,
//! `xet-hub::tree`): read back from a directory or bucket other processes (and people)
//! can write to.
//!
//! Input: the first byte picks the parser, the rest is its input: 0 a commit body
//! (`GitCommit::decode`), 1 a tree body (`decode_tree`), 2 a folder (`Folder::decode`,
//! a tree body of the length the next two bytes give, little-endian, then its facts),
//! 3 a stored commit (`Commit::decode`, git or legacy JSON, named by its own SHA-1).
//! Checks: no panic; what is accepted encodes back to what decodes to the same thing,
//! and a tree or folder without names git refuses encodes back to the input bytes.
#![no_main]

use libfuzzer_sys::fuzz_target;
use sha1::Digest as _;
use xet_hub::commit::{Commit, Stored};
use xet_hub::git::{self, GitCommit};
use xet_hub::{CommitId, Folder, git_reserved};

fuzz_target!(|data: &[u8]| {
    let Some((&which, rest)) = data.split_first() else {
        return;
    };
    match which % 4 {
        0 => commit_body(rest),
        1 => tree(rest),
        2 => folder(rest),
        _ => stored(rest),
    }
});

fn commit_body(b: &[u8]) {
    if let Ok(c) = GitCommit::decode(b) {
        assert_eq!(GitCommit::decode(&c.encode()).as_ref(), Ok(&c));
    }
}

fn tree(b: &[u8]) {
    if let Ok(entries) = git::decode_tree(b) {
        let again = git::encode_tree(&entries);
        assert_eq!(again, b, "a tree encodes back to its bytes");
        assert!(entries.iter().all(|e| git_reserved(&e.name) || git::valid_name(&e.name)));
    }
}

fn folder(b: &[u8]) {
    if b.len() < 2 {
        return;
    }
    let n = usize::from(u16::from_le_bytes([b[0], b[1]])).min(b.len() - 2);
    let (tree, facts) = b[2..].split_at(n);
    if let Ok(f) = Folder::decode(tree, facts) {
        let (id, whole, facts_again) = f.encode();
        let body = git::unframe("tree", &id, &whole).expect("an encoded tree unframes");
        assert_eq!(Folder::decode(body, &facts_again).as_ref(), Ok(&f));
        let planted = git::decode_tree(tree)
            .expect("decoded once")
            .iter()
            .any(|e| git_reserved(&e.name));
        if !planted {
            assert_eq!((body, &facts_again[..]), (tree, facts));
        }
    }
}

fn stored(b: &[u8]) {
    let id = CommitId::from_bytes(sha1::Sha1::digest(b).into());
    match Commit::decode(&id, b) {
        Ok(Stored::Git(c)) => {
            let (id2, bytes) = c.encode();
            match Commit::decode(&id2, &bytes) {
                Ok(Stored::Git(again)) => assert_eq!(again, c),
                other => panic!("a commit's encoding does not decode: {other:?}"),
            }
        }
        Ok(Stored::Legacy(_)) | Err(_) => {}
    }
}
