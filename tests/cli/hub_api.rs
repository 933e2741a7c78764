//! The Hub API beyond uploads and downloads, driven by the real `huggingface_hub`
//! (pinned in the test virtualenv) against `xet serve`: history, refs, tags, branches,
//! pull requests, settings, listings, super-squash; on two servers sharing a store; and
//! hostile names and races.

use crate::hub_buckets::python_ok;
use crate::hub_serve::{Py, WRITE, serve, serve_tokens};
use crate::store_gc::store_json;

/// Commits, refs, tags and branches, and `list_repo_tree(expand=True)`.
const HISTORY_PY: &str = r#"
import sys, datetime
from huggingface_hub import HfApi, hf_hub_download, CommitOperationAdd
api = HfApi()
r = "org/hist"
api.create_repo(r)
# 55 commits: more than a page (50) of list_repo_commits.
for i in range(55):
    api.create_commit(r, operations=[CommitOperationAdd(f"f{i % 3}.txt", f"v{i}".encode())],
                      commit_message=f"commit {i}", commit_description=f"body {i}")
commits = api.list_repo_commits(r)
assert len(commits) == 56, len(commits)
assert [c.title for c in commits[:3]] == ["commit 54", "commit 53", "commit 52"], commits[:3]
assert commits[0].message == "body 54" and commits[-1].title == "initial commit"
assert all(c.authors for c in commits) and isinstance(commits[0].created_at, datetime.datetime)
assert len({c.commit_id for c in commits}) == 56

# A tag (with a message) on an older commit; downloads at the tag and at a full id.
old = commits[10]  # "commit 44": f2.txt = v44
api.create_tag(r, tag="v1.0", tag_message="first release", revision=old.commit_id)
assert open(hf_hub_download(r, "f2.txt", revision="v1.0")).read() == "v44"
assert open(hf_hub_download(r, "f2.txt", revision=commits[1].commit_id)).read() == "v53"
api.create_branch(r, branch="dev", revision="v1.0")
refs = api.list_repo_refs(r, include_pull_requests=True)
assert [b.name for b in refs.branches] == ["dev", "main"], refs
assert [(t.name, t.ref, t.target_commit) for t in refs.tags] == [("v1.0", "refs/tags/v1.0", old.commit_id)], refs
assert refs.pull_requests == [] and refs.converts == []
assert [c.title for c in api.list_repo_commits(r, revision="v1.0")][:2] == ["commit 44", "commit 43"]

api.delete_branch(r, branch="dev")
api.delete_tag(r, tag="v1.0")
refs = api.list_repo_refs(r)
assert [b.name for b in refs.branches] == ["main"] and refs.tags == [], refs
try:
    hf_hub_download(r, "f2.txt", revision="v1.0")
    raise SystemExit("a deleted tag still resolves")
except Exception as e:
    assert "404" in str(e) or "not found" in str(e).lower(), e
# A name deleted can be made again, and points where asked.
api.create_tag(r, tag="v1.0", revision=commits[2].commit_id)
assert api.list_repo_refs(r).tags[0].target_commit == commits[2].commit_id

# expand=True: lastCommit on files and folders, over more than one page (50).
ops = [CommitOperationAdd(f"many/{i:03}.txt", b"x%d" % i) for i in range(60)]
api.create_commit(r, operations=ops, commit_message="many files")
api.create_commit(r, operations=[CommitOperationAdd("many/007.txt", b"changed")], commit_message="touch 007")
tree = list(api.list_repo_tree(r, path_in_repo="many", expand=True))
assert len(tree) == 60, len(tree)
last = {f.path: f.last_commit.title for f in tree}
assert last["many/007.txt"] == "touch 007" and last["many/000.txt"] == "many files", last
top = {f.path: f.last_commit.title for f in api.list_repo_tree(r, expand=True)}
assert top["many"] == "touch 007" and top["f0.txt"] == "commit 54" and top["f1.txt"] == "commit 52", top
print("ok")
"#;

#[test]
fn history_refs_tags_branches_and_expanded_trees() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let out = python_ok(&py, &server.url, HISTORY_PY, &[]);
    assert!(out.contains("ok"), "{out}");
}

/// Pull requests: `create_pr` commits, more commits onto `refs/pr/N`, downloads there,
/// the discussions listing and details, a merge whose base moved (no conflict), a
/// conflicting one refused with nothing changed, closing.
const PR_PY: &str = r#"
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
r = "org/prs"
api.create_repo(r)
api.upload_file(path_or_fileobj=b"base", path_in_repo="a.txt", repo_id=r, commit_message="base")
ci = api.upload_file(path_or_fileobj=b"pr b", path_in_repo="b.txt", repo_id=r,
                     commit_message="add b", create_pr=True)
assert ci.pr_num == 1 and ci.pr_revision == "refs/pr/1", (ci.pr_url, ci.pr_num)
assert open(hf_hub_download(r, "b.txt", revision="refs/pr/1")).read() == "pr b"
assert "b.txt" not in api.list_repo_files(r)
api.upload_file(path_or_fileobj=b"pr c", path_in_repo="c.txt", repo_id=r,
                revision="refs/pr/1", commit_message="add c")
prs = api.list_repo_refs(r, include_pull_requests=True).pull_requests
assert [p.ref for p in prs] == ["refs/pr/1"], prs
ds = list(api.get_repo_discussions(r))
assert [(d.num, d.title, d.status, d.is_pull_request) for d in ds] == [(1, "add b", "open", True)], ds
det = api.get_discussion_details(r, 1)
assert det.target_branch == "refs/heads/main" and [e.type for e in det.events] == ["comment", "commit", "commit"], det

# The base moves (another file): the merge applies the pull request on top.
api.upload_file(path_or_fileobj=b"main d", path_in_repo="d.txt", repo_id=r, commit_message="main moves")
api.merge_pull_request(r, 1)
assert sorted(api.list_repo_files(r)) == ["a.txt", "b.txt", "c.txt", "d.txt"], api.list_repo_files(r)
det = api.get_discussion_details(r, 1)
assert det.status == "merged" and det.merge_commit_oid == api.repo_info(r).sha, det
try:
    api.merge_pull_request(r, 1)
    raise SystemExit("merged twice")
except Exception as e:
    assert "merged" in str(e), e

# A conflicting pull request: refused, naming the file; main unchanged.
pr2 = api.create_pull_request(r, title="second", description="try a.txt")
assert pr2.num == 2 and pr2.status == "draft" and pr2.is_pull_request
api.upload_file(path_or_fileobj=b"pr a", path_in_repo="a.txt", repo_id=r, revision="refs/pr/2", commit_message="x")
api.upload_file(path_or_fileobj=b"main a", path_in_repo="a.txt", repo_id=r, commit_message="y")
head = api.repo_info(r).sha
try:
    api.merge_pull_request(r, 2)
    raise SystemExit("a conflict merged")
except Exception as e:
    assert "409" in str(e) and "a.txt" in str(e), e
assert api.repo_info(r).sha == head
assert open(hf_hub_download(r, "a.txt")).read() == "main a"
api.comment_discussion(r, 2, "conflicts, closing")
api.change_discussion_status(r, 2, "closed")
assert [(d.num, d.status) for d in api.get_repo_discussions(r)] == [(2, "closed"), (1, "merged")]
assert [d.num for d in api.get_repo_discussions(r, discussion_status="open")] == []
try:
    api.upload_file(path_or_fileobj=b"late", path_in_repo="late.txt", repo_id=r, revision="refs/pr/2")
    raise SystemExit("a commit reached a closed pull request")
except Exception as e:
    assert "closed" in str(e), e
print("ok")
"#;

#[test]
fn pull_requests_open_commit_merge_and_refuse_conflicts() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let out = python_ok(&py, &server.url, PR_PY, &[]);
    assert!(out.contains("ok"), "{out}");
}

/// Listings of each kind with author, search, sort, limit and pages; privacy in the
/// listing and in settings; `gated` refused clearly.
const LISTING_PY: &str = r#"
import os, time
from huggingface_hub import HfApi
api = HfApi()
for name in ["alpha", "beta", "gamma"]:
    api.create_repo(f"org/{name}")
api.create_repo("other/alpha-two")
api.create_repo("org/ds1", repo_type="dataset")
api.create_repo("org/sp1", repo_type="space", space_sdk="static")
api.create_repo("org/hidden", private=True)
time.sleep(1.1)  # commit times are in seconds
api.upload_file(path_or_fileobj=b"x", path_in_repo="x", repo_id="org/beta")  # newest change

ids = lambda it: [m.id for m in it]
assert sorted(ids(api.list_models())) == ["org/alpha", "org/beta", "org/gamma", "org/hidden", "other/alpha-two"]
assert sorted(ids(api.list_models(author="org"))) == ["org/alpha", "org/beta", "org/gamma", "org/hidden"]
assert sorted(ids(api.list_models(search="alpha"))) == ["org/alpha", "other/alpha-two"]
assert ids(api.list_models(sort="last_modified", limit=1)) == ["org/beta"]
assert ids(api.list_datasets()) == ["org/ds1"] and ids(api.list_spaces()) == ["org/sp1"]
# A token scoped to other/* lists only what it reaches; private ones only if it reaches them.
team = HfApi(token=os.environ["SCOPED"])
assert ids(team.list_models()) == ["other/alpha-two"], ids(team.list_models())
api.update_repo_settings("other/alpha-two", private=True)
assert api.model_info("other/alpha-two").private
assert ids(team.list_models()) == ["other/alpha-two"]
api.update_repo_settings("other/alpha-two", private=False)
assert not api.model_info("other/alpha-two").private
try:
    api.update_repo_settings("org/alpha", gated="auto")
    raise SystemExit("gated accepted")
except Exception as e:
    assert "gated" in str(e), e
print("ok")
"#;

#[test]
fn listings_settings_and_privacy() {
    const SCOPED: &str = "hub-other-token";
    let store = tempfile::tempdir().unwrap();
    let server = serve_tokens(
        store.path(),
        &[&format!("write:{WRITE}"), &format!("read:{SCOPED}:other/*")],
    );
    let py = Py::new();
    let code = format!("import os\nos.environ['SCOPED'] = {SCOPED:?}\n{LISTING_PY}");
    let out = python_ok(&py, &server.url, &code, &[]);
    assert!(out.contains("ok"), "{out}");
    // Pages: more repositories than one page of `limit`, each listed once.
    let raw = format!(
        r#"
import json, urllib.request
url, seen = "{}/api/models?limit=2", []
while url:
    r = urllib.request.urlopen(urllib.request.Request(url, headers={{"Authorization": "Bearer {WRITE}"}}))
    seen += [m["id"] for m in json.load(r)]
    link = r.headers.get("Link")
    url = link[1:link.index(">")] if link else None
print(json.dumps(seen))
"#,
        server.url
    );
    let out = py.python(&server.url, Some(WRITE), &raw, &[]);
    let seen: Vec<String> = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    let mut sorted = seen.clone();
    sorted.sort();
    sorted.dedup();
    assert_eq!(sorted.len(), seen.len(), "{seen:?}");
    assert_eq!(
        sorted,
        [
            "org/alpha",
            "org/beta",
            "org/gamma",
            "org/hidden",
            "other/alpha-two"
        ],
        "pages"
    );
}

/// `super_squash_history` leaves one commit of the current tree; what only the old
/// history (and a deleted branch) held is reclaimed by `xet store gc`, what is live
/// stays readable.
const SQUASH_PY: &str = r#"
import sys, random
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
r = "org/sq"
api.create_repo(r)
blob = lambda seed: random.Random(seed).randbytes(3 << 20)
api.upload_file(path_or_fileobj=blob(1), path_in_repo="w.bin", repo_id=r, commit_message="v1")
api.upload_file(path_or_fileobj=blob(2), path_in_repo="w.bin", repo_id=r, commit_message="v2")
api.create_branch(r, branch="exp")
api.upload_file(path_or_fileobj=blob(3), path_in_repo="w.bin", repo_id=r, revision="exp", commit_message="v3")
api.delete_branch(r, branch="exp")
api.super_squash_history(r, commit_message="squashed")
commits = api.list_repo_commits(r)
assert [c.title for c in commits] == ["squashed"], commits
try:
    api.super_squash_history(r, branch="v9")
    raise SystemExit("squashed a missing branch")
except Exception as e:
    assert "404" in str(e), e
print("ok")
"#;

const CHECK_PY: &str = r#"
import random
from huggingface_hub import hf_hub_download
assert open(hf_hub_download("org/sq", "w.bin"), "rb").read() == random.Random(2).randbytes(3 << 20)
print("ok")
"#;

#[test]
fn super_squash_and_deleted_branches_are_reclaimed_by_gc() {
    let store = tempfile::tempdir().unwrap();
    let store_s = store.path().to_str().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    assert!(python_ok(&py, &server.url, SQUASH_PY, &[]).contains("ok"));
    let home = tempfile::tempdir().unwrap();
    let r = store_json(home.path(), &["gc", "--grace", "0s", "--store", store_s]);
    let freed = r["gc"]["freed_bytes"].as_u64().unwrap();
    // v1 and v3 (3 MiB each, random, so stored whole) are garbage; v2 is live.
    assert!(freed >= 2 * (3 << 20) * 9 / 10, "freed {freed}: {r}");
    assert!(
        freed < 3 * (3 << 20),
        "freed {freed}, more than the garbage: {r}"
    );
    assert!(python_ok(&py, &server.url, CHECK_PY, &[]).contains("ok"));
}

/// Two servers on one store: a tag, a branch deletion and a pull request made through
/// one are seen, committed to and merged through the other.
const TWO_A_PY: &str = r#"
from huggingface_hub import HfApi
api = HfApi()
api.create_repo("org/shared")
api.upload_file(path_or_fileobj=b"1", path_in_repo="a.txt", repo_id="org/shared")
api.create_tag("org/shared", tag="t1")
ci = api.upload_file(path_or_fileobj=b"2", path_in_repo="b.txt", repo_id="org/shared", create_pr=True)
print(ci.pr_num)
"#;

const TWO_B_PY: &str = r#"
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
refs = api.list_repo_refs("org/shared", include_pull_requests=True)
assert [t.name for t in refs.tags] == ["t1"] and [p.ref for p in refs.pull_requests] == ["refs/pr/1"], refs
api.upload_file(path_or_fileobj=b"3", path_in_repo="c.txt", repo_id="org/shared", revision="refs/pr/1")
api.merge_pull_request("org/shared", 1)
assert sorted(api.list_repo_files("org/shared")) == ["a.txt", "b.txt", "c.txt"]
assert open(hf_hub_download("org/shared", "a.txt", revision="t1")).read() == "1"
print("ok")
"#;

#[test]
fn two_servers_share_tags_and_pull_requests() {
    let store = tempfile::tempdir().unwrap();
    let a = serve(store.path());
    let b = serve(store.path());
    let py = Py::new();
    assert_eq!(python_ok(&py, &a.url, TWO_A_PY, &[]).trim(), "1");
    assert!(python_ok(&py, &b.url, TWO_B_PY, &[]).contains("ok"));
    let check = r#"
from huggingface_hub import HfApi
api = HfApi()
assert api.get_discussion_details("org/shared", 1).status == "merged"
print("ok")
"#;
    assert!(python_ok(&py, &a.url, check, &[]).contains("ok"));
}

/// Hostile names and races: clear errors, nothing half-applied.
const HOSTILE_PY: &str = r#"
import json, concurrent.futures, urllib.request, urllib.error, os
from huggingface_hub import HfApi
api = HfApi()
r = "org/h"
api.create_repo(r)
api.upload_file(path_or_fileobj=b"1", path_in_repo="a.txt", repo_id=r)
def refused(f, status, *words):
    try:
        f()
    except Exception as e:
        got = getattr(getattr(e, "response", None), "status_code", None)
        assert got == status, (status, got, str(e))
        for w in words:
            assert w in str(e), (w, str(e))
        return
    raise SystemExit(f"accepted: {status} {words}")
refused(lambda: api.create_tag(r, tag="a..b"), 400)
refused(lambda: api.create_tag(r, tag="refs/pr/1"), 400)
refused(lambda: api.create_branch(r, branch="refs/tags/x"), 400)
refused(lambda: api.create_branch(r, branch="refs/pr/7"), 400)
refused(lambda: api.create_branch(r, branch="x..y"), 400)
refused(lambda: api.delete_branch(r, branch="main"), 403, "default branch")
refused(lambda: api.delete_tag(r, tag="nope"), 404)
refused(lambda: api.delete_branch(r, branch="nope"), 404)
# `refs/heads/dev` names the branch dev.
api.create_branch(r, branch="refs/heads/dev")
assert "dev" in [b.name for b in api.list_repo_refs(r).branches]
# A tag and a branch never share a name; a tag takes no commits.
refused(lambda: api.create_tag(r, tag="dev"), 409)
api.create_tag(r, tag="rel")
refused(lambda: api.create_branch(r, branch="rel"), 409)
refused(lambda: api.upload_file(path_or_fileobj=b"2", path_in_repo="a.txt", repo_id=r, revision="rel"), 400, "tag")
refused(lambda: api.super_squash_history(r, branch="rel"), 400, "tag")
# A repository of 10,000 tags lists them all.
url = os.environ["HF_ENDPOINT"] + f"/api/models/{r}/tag/main"
def tag(i):
    req = urllib.request.Request(url, data=json.dumps({"tag": f"t{i:05}"}).encode(), method="POST",
        headers={"Authorization": "Bearer " + os.environ["HF_TOKEN"], "Content-Type": "application/json"})
    return urllib.request.urlopen(req).status
with concurrent.futures.ThreadPoolExecutor(8) as ex:
    assert set(ex.map(tag, range(10000))) == {200}
tags = api.list_repo_refs(r).tags
assert sorted(t.name for t in tags) == ["rel"] + [f"t{i:05}" for i in range(10000)], len(tags)
# The same tag made twice at once: one wins, the other is a conflict.
with concurrent.futures.ThreadPoolExecutor(2) as ex:
    def twice(_):
        try:
            return tag(20000)
        except urllib.error.HTTPError as e:
            return e.code
    assert sorted(ex.map(twice, range(2))) == [200, 409]
print("ok")
"#;

#[test]
fn hostile_ref_names_and_ten_thousand_tags() {
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let py = Py::new();
    let out = py.python(&server.url, Some(WRITE), HOSTILE_PY, &[]);
    assert!(
        out.status.success() && String::from_utf8_lossy(&out.stdout).contains("ok"),
        "{}\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The client where users expect it: `xet upload --create-pr` prints the pull request,
/// `xet ls` and `xet download` at a tag and at `refs/pr/N`; `huggingface_hub` sees and
/// merges what `xet` opened.
#[test]
fn xet_uploads_pull_requests_and_reads_tags() {
    use crate::hub_buckets::xet_ok;
    let store = tempfile::tempdir().unwrap();
    let server = serve(store.path());
    let url = server.url.as_str();
    let py = Py::new();
    let home = tempfile::tempdir().unwrap();
    let src = tempfile::tempdir().unwrap();
    let weights = crate::hub_serve::pseudo_random(400_000, 39);
    std::fs::write(src.path().join("w.bin"), &weights).unwrap();
    std::fs::write(src.path().join("a.txt"), "one").unwrap();
    let src_s = src.path().to_str().unwrap();
    xet_ok(url, home.path(), &["upload", src_s, "hf://org/cli"]);
    python_ok(
        &py,
        url,
        "from huggingface_hub import HfApi\nHfApi().create_tag('org/cli', tag='v1')\n",
        &[],
    );
    std::fs::write(src.path().join("a.txt"), "two").unwrap();
    let o = xet_ok(
        url,
        home.path(),
        &[
            "--json",
            "upload",
            src_s,
            "hf://org/cli",
            "--create-pr",
            "-m",
            "two",
        ],
    );
    let doc: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(doc["pull_request"]["num"], 1, "{doc}");
    assert_eq!(doc["pull_request"]["revision"], "refs/pr/1", "{doc}");
    let o = xet_ok(
        url,
        home.path(),
        &["upload", src_s, "hf://org/cli", "--create-pr"],
    );
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(
        text.contains("pull request #2 (refs/pr/2)") && text.contains("/discussions/2"),
        "{text}"
    );

    let cat = |rev: &str| {
        let o = xet_ok(
            url,
            home.path(),
            &["download", &format!("hf://org/cli@{rev}/a.txt"), "-o", "-"],
        );
        String::from_utf8(o.stdout).unwrap()
    };
    assert_eq!(cat("v1"), "one");
    assert_eq!(cat("main"), "one", "a pull request changed main");
    assert_eq!(cat("refs/pr/1"), "two");
    let listed = xet_ok(url, home.path(), &["ls", "hf://org/cli@refs/pr/1"]);
    let listed = String::from_utf8_lossy(&listed.stdout);
    assert!(
        listed.contains("a.txt") && listed.contains("w.bin"),
        "{listed}"
    );
    let out = tempfile::tempdir().unwrap();
    xet_ok(
        url,
        home.path(),
        &[
            "download",
            "hf://org/cli@v1",
            "-o",
            out.path().to_str().unwrap(),
        ],
    );
    assert_eq!(std::fs::read(out.path().join("w.bin")).unwrap(), weights);

    let merge = r#"
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
assert [d.num for d in api.get_repo_discussions("org/cli", discussion_type="pull_request")] == [2, 1]
api.merge_pull_request("org/cli", 1)
assert open(hf_hub_download("org/cli", "a.txt")).read() == "two"
print("ok")
"#;
    assert!(python_ok(&py, url, merge, &[]).contains("ok"));
}

/// `move_repo` writes records only: the new name has the files, history, tags and pull
/// requests and takes commits; the old name is free, and created again (like a deleted
/// one) starts empty; moving onto an existing name is refused with nothing changed.
const MOVE_PY: &str = r#"
import random
from huggingface_hub import HfApi, hf_hub_download
api = HfApi()
blob = random.Random(5).randbytes(500_000)
api.create_repo("org/a", repo_type="dataset")
api.upload_file(path_or_fileobj=blob, path_in_repo="w.bin", repo_id="org/a", repo_type="dataset")
api.create_tag("org/a", tag="v1", repo_type="dataset")
api.create_pull_request("org/a", title="pending", repo_type="dataset")
api.create_repo("org/taken", repo_type="dataset")
try:
    api.move_repo("org/a", "org/taken", repo_type="dataset")
    raise SystemExit("moved onto an existing name")
except Exception as e:
    assert e.response.status_code == 409, e
assert api.list_repo_files("org/taken", repo_type="dataset") == []
api.move_repo("org/a", "org/b", repo_type="dataset")
assert open(hf_hub_download("org/b", "w.bin", repo_type="dataset", revision="v1"), "rb").read() == blob
assert [d.title for d in api.get_repo_discussions("org/b", repo_type="dataset")] == ["pending"]
api.upload_file(path_or_fileobj=b"after", path_in_repo="after.txt", repo_id="org/b", repo_type="dataset")
assert sorted(api.list_repo_files("org/b", repo_type="dataset")) == ["after.txt", "w.bin"]
assert not api.repo_exists("org/a", repo_type="dataset")
api.create_repo("org/a", repo_type="dataset")
assert api.list_repo_files("org/a", repo_type="dataset") == []
assert api.list_repo_refs("org/a", repo_type="dataset").tags == []
assert [c.title for c in api.list_repo_commits("org/a", repo_type="dataset")] == ["initial commit"]
# A deleted repository created again is empty too.
api.delete_repo("org/b", repo_type="dataset")
api.create_repo("org/b", repo_type="dataset")
assert api.list_repo_files("org/b", repo_type="dataset") == []
assert sorted(d.id for d in api.list_datasets()) == ["org/a", "org/b", "org/taken"]
print("ok")
"#;

#[test]
fn move_repo_keeps_everything_and_frees_the_old_name() {
    let store = tempfile::tempdir().unwrap();
    let a = serve(store.path());
    let b = serve(store.path());
    let py = Py::new();
    assert!(python_ok(&py, &a.url, MOVE_PY, &[]).contains("ok"));
    // The other server sees the same names.
    let check = r#"
from huggingface_hub import HfApi
api = HfApi()
assert sorted(d.id for d in api.list_datasets()) == ["org/a", "org/b", "org/taken"]
assert api.list_repo_files("org/b", repo_type="dataset") == []
print("ok")
"#;
    assert!(python_ok(&py, &b.url, check, &[]).contains("ok"));
}
