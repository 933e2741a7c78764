//! Repositories stored as git stores them (docs/STORE.md, "Repositories"): real `git`
//! takes every stored commit and tree for the object its id names and lists the same
//! files; a commit writes only the folders it changes; stores written before git trees
//! (one JSON object per commit) are read as they are and committed on.

use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::Arc;

use xet_hub::commit::LegacyCommit;
use xet_hub::{
    BranchName, CommitMeta, FileEntry, Item, Operation, RepoId, RepoPath, RepoRef, RepoStore,
    RepoType, Repos, Revision,
};
use xet_store::{ObjectBackend as _, open_store};

fn p(s: &str) -> RepoPath {
    RepoPath::parse(s).unwrap()
}

fn regular(content: &[u8]) -> FileEntry {
    FileEntry::regular(xet_hash::chunk_hash(content), content)
}

fn lfs(n: u8, size: u64) -> FileEntry {
    FileEntry::lfs(
        xet_hash::chunk_hash(&[n]),
        xet_hub::Sha256::from_bytes([n; 32]),
        size,
    )
}

fn add(path: &str, entry: FileEntry) -> Operation {
    Operation::Add {
        path: p(path),
        entry,
    }
}

fn git(dir: &Path, args: &[&str], stdin: &[u8]) -> String {
    let mut child = Command::new("git")
        .args(args)
        .current_dir(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("git runs");
    use std::io::Write as _;
    child.stdin.take().unwrap().write_all(stdin).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// Every object under `repo_dir/<kind>s/`, written into the git repository `git_dir`
/// with `git hash-object -w`, which must name each by the id the store did.
fn load_into_git(repo_dir: &Path, git_dir: &Path) -> usize {
    let mut n = 0;
    for (dir, kind) in [("commits", "commit"), ("trees", "tree")] {
        for e in std::fs::read_dir(repo_dir.join(dir)).unwrap() {
            let path = e.unwrap().path();
            let bytes = std::fs::read(&path).unwrap();
            let body = &bytes[bytes.iter().position(|&b| b == 0).unwrap() + 1..];
            let id = git(git_dir, &["hash-object", "-t", kind, "-w", "--stdin"], body);
            assert_eq!(
                id.trim(),
                path.file_name().unwrap().to_str().unwrap(),
                "git names this {kind} as the store did"
            );
            n += 1;
        }
    }
    n
}

fn repo() -> RepoRef {
    RepoRef::new(RepoType::Model, RepoId::parse("org/git").unwrap())
}

fn meta(summary: &str) -> CommitMeta {
    CommitMeta {
        summary: summary.into(),
        description: "why\nand how".into(),
        author: "alice".into(),
        created_at: 1_800_000_000,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stored_objects_are_the_git_objects_their_ids_name() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let r = repo();
    repos.create(&r, "alice", false, 1).await.unwrap();
    let main = BranchName::main();
    // Names whose order differs between plain byte order and git's (a folder sorts as
    // if its name ended in `/`), an LFS file, nesting.
    let ops = [
        add("a/b.txt", regular(b"hello\n")),
        add("a-b", regular(b"x")),
        add("a.txt", regular(b"y")),
        add("deep/er/still/w.bin", lfs(3, 1 << 30)),
        add("README.md", regular(b"# hi\n")),
    ];
    let first = repos
        .commit_to_branch(&r, &main, None, &ops, &meta("first"))
        .await
        .unwrap();
    let second = repos
        .commit_to_branch(
            &r,
            &main,
            Some(first.id),
            &[Operation::DeleteFile { path: p("a.txt") }],
            &meta("second"),
        )
        .await
        .unwrap();

    let rk: String = xet_store::hub_repo_name(&r)
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    let repo_dir = dir.path().join("hub/repos").join(rk);
    let g = tempfile::tempdir().unwrap();
    git(g.path(), &["init", "-q"], b"");
    assert!(load_into_git(&repo_dir, g.path()) >= 8);
    // git lists the tree of the head as the Hub API does, blob ids included (an LFS
    // file's blob is its pointer).
    let listed = git(
        g.path(),
        &["ls-tree", "-r", "--full-tree", &second.id.to_string()],
        b"",
    );
    let (_, head) = repos
        .resolve(&r, &Revision::Branch(main.clone()))
        .await
        .unwrap();
    let ours: Vec<String> = repos
        .files(&r, &head.tree)
        .await
        .unwrap()
        .into_iter()
        .map(|(path, e)| format!("100644 blob {}\t{path}", e.git_oid))
        .collect();
    let mut theirs: Vec<String> = listed.lines().map(str::to_string).collect();
    theirs.sort();
    assert_eq!(ours, theirs);
    assert!(listed.contains(&format!(
        "{}\tdeep/er/still/w.bin",
        xet_hub::commit::git_blob_oid(
            xet_hub::commit::lfs_pointer(&xet_hub::Sha256::from_bytes([3; 32]), 1 << 30).as_bytes()
        )
    )));
    // The commit as git reads it: parent, author, message.
    let shown = git(
        g.path(),
        &[
            "log",
            "--format=%H %P|%an|%at|%s|%b",
            &second.id.to_string(),
        ],
        b"",
    );
    let lines: Vec<&str> = shown.lines().filter(|l| !l.is_empty()).collect();
    assert!(
        lines[0].starts_with(&format!(
            "{} {}|alice|1800000000|second|why",
            second.id, first.id
        )),
        "{shown}"
    );
    assert!(lines[1] == "and how", "{shown}");
    let count = git(
        g.path(),
        &["rev-list", "--count", &second.id.to_string()],
        b"",
    );
    assert_eq!(count.trim(), "3", "second, first, the initial commit");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_commit_writes_only_the_folders_it_changes() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let repos = Repos::new(store.clone());
    let r = repo();
    repos.create(&r, "alice", false, 1).await.unwrap();
    let main = BranchName::main();
    let ops: Vec<Operation> = (0..200)
        .map(|i| {
            add(
                &format!("d{:02}/f{i}.txt", i % 20),
                regular(format!("{i}").as_bytes()),
            )
        })
        .collect();
    repos
        .commit_to_branch(&r, &main, None, &ops, &meta("many"))
        .await
        .unwrap();
    let before = store.backend().list("hub/").await.unwrap().len();
    let done = repos
        .commit_to_branch(
            &r,
            &main,
            None,
            &[add("d07/new.txt", regular(b"new"))],
            &meta("one"),
        )
        .await
        .unwrap();
    let after = store.backend().list("hub/").await.unwrap().len();
    // The commit, the branch version, two folders (d07 and the root), each a tree and
    // its facts, and the new file's reference to the repository.
    assert_eq!(after - before, 7);
    // A fresh reader (no cache) finds the file, and a sibling folder is unchanged.
    let fresh = Repos::new(store.clone());
    let (_, c) = fresh.resolve(&r, &Revision::Commit(done.id)).await.unwrap();
    assert!(matches!(
        fresh.entry(&r, &c.tree, &p("d07/new.txt")).await.unwrap(),
        Some(Item::File(e)) if e == regular(b"new")
    ));
    assert!(matches!(
        fresh.entry(&r, &c.tree, &p("d08")).await.unwrap(),
        Some(Item::Folder(_))
    ));
    assert_eq!(
        fresh.entry(&r, &c.tree, &p("d07/new.txt/x")).await.unwrap(),
        None
    );
    assert_eq!(fresh.entry(&r, &c.tree, &p("d99")).await.unwrap(), None);
    // Pages of a recursive listing, resumed after each page's last path, are the whole
    // listing in git's order, a folder before its content.
    let root = c.tree;
    let whole = fresh
        .list(&r, &root, None, true, None, usize::MAX)
        .await
        .unwrap()
        .unwrap();
    assert!(!whole.more);
    assert_eq!(whole.entries.len(), 201 + 20);
    assert_eq!(whole.entries[0].path, "d00");
    assert_eq!(whole.entries[1].path, "d00/f0.txt");
    for limit in [1, 7, 50] {
        let mut paged = Vec::new();
        let mut after: Option<RepoPath> = None;
        loop {
            let page = fresh
                .list(&r, &root, None, true, after.as_ref(), limit)
                .await
                .unwrap()
                .unwrap();
            assert!(page.entries.len() <= limit);
            paged.extend(page.entries.iter().cloned());
            if !page.more {
                break;
            }
            after = Some(p(&page.entries.last().unwrap().path));
        }
        assert_eq!(paged, whole.entries, "pages of {limit}");
    }
    // One folder, not recursive, paged.
    let d07 = p("d07");
    let page = fresh
        .list(&r, &root, Some(&d07), false, Some(&p("d07/f127.txt")), 3)
        .await
        .unwrap()
        .unwrap();
    let names: Vec<&str> = page.entries.iter().map(|l| l.path.as_str()).collect();
    assert_eq!(names, ["d07/f147.txt", "d07/f167.txt", "d07/f187.txt"]);
    assert!(page.more);
    assert!(
        fresh
            .list(&r, &root, Some(&p("d07/new.txt")), false, None, 3)
            .await
            .unwrap()
            .is_none(),
        "a file is not a folder to list"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_of_json_commits_is_read_as_it_is_and_committed_on() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open_store(dir.path()).await.unwrap());
    let r = repo();
    let main = BranchName::main();
    // What an older xet wrote: a record, one JSON commit holding its whole tree (with a
    // path git refuses, planted before the rule), and `main` pointing at it.
    let record = xet_hub::RepoRecord {
        kind: xet_hub::RepoType::Model,
        id: xet_hub::RepoId::parse("org/git").unwrap(),
        private: false,
        owner: "alice".into(),
        created_at: 1,
        created_ms: None,
        incarnation: None,
        home: None,
        moving_to: None,
    };
    assert!(store.create_repo(&r, &record).await.unwrap());
    let legacy_json = format!(
        r#"{{"version":1,"parent":null,"summary":"old","description":"","author":"alice","created_at":5,"files":{{"a/b.txt":{},"sub/.git/config":{},"w.bin":{}}}}}"#,
        serde_json::to_string(&regular(b"b")).unwrap(),
        serde_json::to_string(&regular(b"[core]")).unwrap(),
        serde_json::to_string(&lfs(9, 100)).unwrap(),
    );
    let legacy: LegacyCommit = serde_json::from_str(&legacy_json).unwrap();
    let (old_id, bytes) = legacy.encode();
    store
        .put_object(&r, xet_hub::RepoObject::Commit, &old_id, bytes.into())
        .await
        .unwrap();
    store.update_branch(&r, &main, None, &old_id).await.unwrap();

    let repos = Repos::new(store.clone());
    let (id, c) = repos
        .resolve(&r, &Revision::Branch(main.clone()))
        .await
        .unwrap();
    assert_eq!(id, old_id, "the old id stays the commit's id");
    assert_eq!((c.summary.as_str(), c.created_at), ("old", 5));
    let files: Vec<String> = repos
        .files(&r, &c.tree)
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(files, ["a/b.txt", "w.bin"], "the planted path is left out");
    // The LFS batch's question is answered for the old files too.
    let sha: [u8; 32] = [9; 32];
    assert_eq!(
        store.lfs_file(&r, &sha).await.unwrap(),
        Some(xet_hash::chunk_hash(&[9]))
    );
    let done = repos
        .commit_to_branch(
            &r,
            &main,
            Some(old_id),
            &[add("c.txt", regular(b"c"))],
            &meta("new"),
        )
        .await
        .unwrap();
    assert_eq!(done.commit.parent, Some(old_id));
    // Another process (no cache) reads both.
    let fresh = Repos::new(store.clone());
    let (_, head) = fresh.resolve(&r, &Revision::Branch(main)).await.unwrap();
    let files: Vec<String> = fresh
        .files(&r, &head.tree)
        .await
        .unwrap()
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    assert_eq!(files, ["a/b.txt", "c.txt", "w.bin"]);
    let (_, old) = fresh.resolve(&r, &Revision::Commit(old_id)).await.unwrap();
    assert_eq!(old.tree, c.tree);
}
