//! The Hub API over HTTP against an in-memory store: the routes and rules the real
//! clients' tests (tests/cli/hub_serve.rs) do not reach: paging, paths-info in both body
//! forms, regular files by path, ranges, branches, whoami, the LFS batch answer, private
//! repositories, minted CAS tokens, and commits that must change nothing.

use std::sync::Arc;

use base64::Engine as _;
use reqwest::StatusCode;
use serde_json::{Value, json};
use xet_server::{ServerConfig, Token};

use crate::common::{TestServer, client, fixture, fixture_claiming, memory_store, put_fixture};

const W: &str = "hub-w";
const R: &str = "hub-r";

struct Hub {
    server: TestServer,
    store: Arc<xet_store::MemoryStore>,
    http: reqwest::Client,
}

impl Hub {
    async fn start() -> Hub {
        let store = memory_store().await;
        let config = ServerConfig {
            tokens: vec![Token::write(W), Token::read(R)],
            cas_token_key: Some([9; 32]),
            ..Default::default()
        };
        let repos = xet_hub::Repos::new(store.clone());
        let server = TestServer::start_hub(config, store.clone(), Some(repos)).await;
        Hub {
            server,
            store,
            http: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    async fn send(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<(&str, Vec<u8>)>,
    ) -> reqwest::Response {
        let mut r = self.http.request(method, self.url(path));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        if let Some((ct, b)) = body {
            r = r.header("content-type", ct).body(b);
        }
        r.send().await.unwrap()
    }

    async fn get(&self, path: &str, token: Option<&str>) -> reqwest::Response {
        self.send(reqwest::Method::GET, path, token, None).await
    }

    async fn post_json(&self, path: &str, token: Option<&str>, v: Value) -> reqwest::Response {
        let body = serde_json::to_vec(&v).unwrap();
        self.send(
            reqwest::Method::POST,
            path,
            token,
            Some(("application/json", body)),
        )
        .await
    }

    async fn commit(&self, repo: &str, lines: &[Value]) -> reqwest::Response {
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.send(
            reqwest::Method::POST,
            &format!("/api/models/{repo}/commit/main"),
            Some(W),
            Some(("application/x-ndjson", body.into_bytes())),
        )
        .await
    }

    async fn head_sha(&self, repo: &str, rev: &str) -> String {
        let r = self
            .get(&format!("/api/models/{repo}/revision/{rev}"), Some(R))
            .await;
        assert_eq!(r.status(), StatusCode::OK);
        r.json::<Value>().await.unwrap()["sha"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn create(&self, name: &str) {
        let r = self
            .post_json(
                "/api/repos/create",
                Some(W),
                json!({"name": name, "organization": "org"}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::OK);
    }
}

fn header() -> Value {
    json!({"key": "header", "value": {"summary": "test"}})
}

fn inline(path: &str, content: &[u8]) -> Value {
    let b64 = base64::engine::general_purpose::STANDARD.encode(content);
    json!({"key": "file", "value": {"path": path, "content": b64, "encoding": "base64"}})
}

fn sha256_hex(data: &[u8]) -> String {
    xet_hash::hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(data))
}

#[tokio::test]
async fn create_is_idempotent_in_answer_and_needs_a_write_token() {
    let hub = Hub::start().await;
    hub.create("a").await;
    let again = hub
        .post_json(
            "/api/repos/create",
            Some(W),
            json!({"name": "a", "organization": "org"}),
        )
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let v: Value = again.json().await.unwrap();
    assert_eq!(v["url"], hub.url("/org/a"));
    let r = hub
        .post_json(
            "/api/repos/create",
            Some(R),
            json!({"name": "b", "organization": "org"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = hub
        .post_json(
            "/api/repos/create",
            None,
            json!({"name": "b", "organization": "org"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNAUTHORIZED);
    // Without an organization the repository goes to the server's user.
    let r = hub
        .post_json("/api/repos/create", Some(W), json!({"name": "mine"}))
        .await;
    assert_eq!(
        r.json::<Value>().await.unwrap()["url"],
        hub.url("/user/mine")
    );
    let r = hub
        .post_json(
            "/api/repos/create",
            Some(W),
            json!({"name": "../x", "organization": "org"}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn trees_page_and_paths_info_takes_json_and_forms() {
    let hub = Hub::start().await;
    hub.create("t").await;
    let mut lines = vec![header()];
    for p in ["a/1.txt", "a/2.txt", "a/b/3.txt", "c.txt", "d/4.txt"] {
        lines.push(inline(p, p.as_bytes()));
    }
    assert_eq!(hub.commit("org/t", &lines).await.status(), StatusCode::OK);
    // Recursive, two entries a page: every file and folder exactly once, in order.
    let mut next = Some(hub.url("/api/models/org/t/tree/main?recursive=true&limit=2"));
    let mut seen = Vec::new();
    let mut pages = 0;
    while let Some(u) = next.take() {
        let r = hub.http.get(&u).bearer_auth(R).send().await.unwrap();
        assert_eq!(r.status(), StatusCode::OK);
        next = r
            .headers()
            .get("link")
            .map(|l| l.to_str().unwrap().to_string())
            .map(|l| {
                l.trim_start_matches('<')
                    .split('>')
                    .next()
                    .unwrap()
                    .to_string()
            });
        for e in r.json::<Vec<Value>>().await.unwrap() {
            seen.push(format!(
                "{}:{}",
                e["type"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            ));
        }
        pages += 1;
    }
    assert_eq!(pages, 4);
    assert_eq!(
        seen,
        [
            "directory:a",
            "file:a/1.txt",
            "file:a/2.txt",
            "directory:a/b",
            "file:a/b/3.txt",
            "file:c.txt",
            "directory:d",
            "file:d/4.txt"
        ]
    );
    let top: Vec<Value> = hub
        .get("/api/models/org/t/tree/main/a", Some(R))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(top.len(), 3, "{top:?}");
    let missing = hub.get("/api/models/org/t/tree/main/zz", Some(R)).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(missing.headers()["x-error-code"], "EntryNotFound");
    assert!(missing.headers().contains_key("x-repo-commit"));
    // paths-info: JSON (huggingface.js) and a form (huggingface_hub); absent paths left out.
    let j: Vec<Value> = hub
        .post_json(
            "/api/models/org/t/paths-info/main",
            Some(R),
            json!({"paths": ["c.txt", "a", "nope"], "expand": true}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(j.len(), 2);
    assert_eq!(j[0]["oid"], xet_hub::commit::git_blob_oid(b"c.txt"));
    let f: Vec<Value> = hub
        .send(
            reqwest::Method::POST,
            "/api/models/org/t/paths-info/main",
            Some(R),
            Some((
                "application/x-www-form-urlencoded",
                b"paths=a%2Fb%2F3.txt&paths=d&expand=false".to_vec(),
            )),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        f.iter()
            .map(|e| e["path"].as_str().unwrap())
            .collect::<Vec<_>>(),
        ["a/b/3.txt", "d"]
    );
}

#[tokio::test]
async fn regular_files_by_path_with_ranges() {
    let hub = Hub::start().await;
    hub.create("f").await;
    let content: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let r = hub
        .commit("org/f", &[header(), inline("data/x.txt", &content)])
        .await;
    let commit: Value = r.json().await.unwrap();
    let url = "/org/f/resolve/main/data/x.txt";
    let whole = hub.get(url, Some(R)).await;
    assert_eq!(whole.status(), StatusCode::OK);
    let h = whole.headers().clone();
    assert_eq!(h["x-repo-commit"], commit["commitOid"].as_str().unwrap());
    assert_eq!(
        h["etag"],
        format!("\"{}\"", xet_hub::commit::git_blob_oid(&content)).as_str()
    );
    assert!(
        !h.contains_key("x-xet-hash"),
        "inline files are plain git files"
    );
    assert!(whole.bytes().await.unwrap() == content);
    let part = hub
        .http
        .get(hub.url(url))
        .bearer_auth(R)
        .header("range", "bytes=-1000")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(
        part.headers()["content-range"],
        "bytes 199000-199999/200000"
    );
    assert!(part.bytes().await.unwrap() == content[199_000..]);
    let past = hub
        .http
        .get(hub.url(url))
        .bearer_auth(R)
        .header("range", "bytes=200000-")
        .send()
        .await
        .unwrap();
    assert_eq!(past.status(), StatusCode::RANGE_NOT_SATISFIABLE);
    assert_eq!(past.headers()["content-range"], "bytes */200000");
    // The file is content-addressed in the CAS as well.
    let sha = sha256_hex(&content);
    let sha: [u8; 32] = xet_hash::hex::decode(&sha).unwrap().try_into().unwrap();
    let claims = xet_hub::RepoStore::files_claiming_sha256(hub.store.as_ref(), &sha)
        .await
        .unwrap();
    assert_eq!(claims.len(), 1);
}

/// An inline file too long to hold as one line (over 1 MiB of base64) is spooled to
/// disk as the body arrives and committed like any other: its bytes, sha256 and git blob
/// id are the content's.
#[tokio::test]
async fn a_long_inline_file_is_committed_from_the_spool() {
    let hub = Hub::start().await;
    hub.create("long").await;
    let content: Vec<u8> = (0..3_000_000u32).map(|i| (i % 253) as u8).collect();
    let r = hub
        .commit(
            "org/long",
            &[
                header(),
                inline("a/long.bin", &content),
                inline("b.txt", b"b"),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let got = hub.get("/org/long/resolve/main/a/long.bin", Some(R)).await;
    assert_eq!(got.status(), StatusCode::OK);
    assert!(got.bytes().await.unwrap() == content);
    let info: Value = hub
        .post_json(
            "/api/models/org/long/paths-info/main",
            Some(R),
            json!({"paths": ["a/long.bin"]}),
        )
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(info[0]["oid"], xet_hub::commit::git_blob_oid(&content));
    assert_eq!(info[0]["size"], content.len());
}

#[tokio::test]
async fn xet_files_are_committed_by_checked_sha256_only() {
    let hub = Hub::start().await;
    hub.create("x").await;
    let honest = fixture(1, &[5000, 7000, 3000]);
    put_fixture(hub.store.as_ref(), &honest).await;
    // A shard that claims another file's sha256 for its own content.
    let liar = fixture_claiming(
        2,
        &[4000, 4000],
        Some(<sha2::Sha256 as sha2::Digest>::digest(b"someone else").into()),
    );
    put_fixture(hub.store.as_ref(), &liar).await;
    let lfs = |path: &str, oid: String, size: u64| json!({"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": oid, "size": size}});
    let before = hub.head_sha("org/x", "main").await;
    let r = hub
        .commit(
            "org/x",
            &[header(), lfs("lie.bin", sha256_hex(b"someone else"), 8000)],
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert!(r.text().await.unwrap().contains("lie.bin"));
    assert_eq!(
        hub.head_sha("org/x", "main").await,
        before,
        "a refused commit changed the branch"
    );
    // The wrong size is refused too, and one bad file refuses the whole commit.
    let good = lfs("w.bin", sha256_hex(&honest.data), honest.data.len() as u64);
    let r = hub
        .commit(
            "org/x",
            &[
                header(),
                good.clone(),
                lfs("v.bin", sha256_hex(&honest.data), 1),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(hub.head_sha("org/x", "main").await, before);
    assert_eq!(
        hub.commit("org/x", &[header(), good]).await.status(),
        StatusCode::OK
    );
    let head = hub.get("/org/x/resolve/main/w.bin", Some(R)).await;
    assert_eq!(
        head.headers()["x-xet-hash"],
        honest.file.to_string().as_str()
    );
    assert_eq!(
        head.headers()["x-linked-size"],
        honest.data.len().to_string().as_str()
    );
    assert!(head.bytes().await.unwrap() == honest.data);
    // huggingface.js asks for the Xet facts only.
    let info = hub
        .http
        .get(hub.url("/org/x/resolve/main/w.bin"))
        .bearer_auth(R)
        .header("accept", "application/vnd.xet-fileinfo+json, */*")
        .header("range", "bytes=0-0")
        .send()
        .await
        .unwrap();
    assert_eq!(
        info.headers()["content-type"],
        "application/vnd.xet-fileinfo+json"
    );
    let link = info.headers()["link"].to_str().unwrap().to_string();
    assert!(link.contains("rel=\"xet-auth\"") && link.contains("rel=\"xet-reconstruction-info\""));
}

/// A component git refuses, at any depth and in every spelling `verify_path` knows, is
/// refused by commits (inline, Xet and deletions) and by preupload, with `400` naming
/// it; nothing moves.
#[tokio::test]
async fn paths_git_refuses_are_refused_at_any_depth() {
    let hub = Hub::start().await;
    hub.create("g").await;
    let ok = hub
        .commit("org/g", &[header(), inline("a.txt", b"a")])
        .await;
    assert_eq!(ok.status(), StatusCode::OK);
    let before = hub.head_sha("org/g", "main").await;
    let planted = [
        ".git/config",
        "sub/.git/config",
        "a/b/.GIT/hooks/post-checkout",
        "sub/.git./config",
        "sub/.git /config",
        "sub/.git::$INDEX_ALLOCATION/config",
        "sub/git~1/config",
        "sub/GIT~1./config",
        "sub/.g\u{200c}it/config",
        "sub/\u{feff}.GiT/config",
        "sub/.git",
    ];
    for path in planted {
        let lines = [
            inline(path, b"[core]\n\tfsmonitor = x\n"),
            json!({"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": "ab".repeat(32), "size": 1}}),
            json!({"key": "deletedFile", "value": {"path": path}}),
        ];
        for line in lines {
            let r = hub.commit("org/g", &[header(), line.clone()]).await;
            assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{line}");
            let text = r.text().await.unwrap();
            assert!(text.contains("git refuses"), "{line}: {text}");
        }
        let r = hub
            .post_json(
                "/api/models/org/g/preupload/main",
                Some(W),
                json!({"files": [{"path": path, "size": 1, "sample": ""}]}),
            )
            .await;
        assert_eq!(r.status(), StatusCode::BAD_REQUEST, "{path}");
    }
    assert_eq!(hub.head_sha("org/g", "main").await, before);
    // What git accepts still commits.
    let fine = hub
        .commit(
            "org/g",
            &[
                header(),
                inline(".gitattributes", b"*.bin filter=lfs\n"),
                inline("sub/.gitignore", b"x\n"),
                inline("sub/git~2/a", b"a"),
                inline("sub/.git.x/a", b"a"),
            ],
        )
        .await;
    assert_eq!(fine.status(), StatusCode::OK);
}

#[tokio::test]
async fn deletions_clashes_and_branches() {
    let hub = Hub::start().await;
    hub.create("d").await;
    let ok = hub
        .commit(
            "org/d",
            &[header(), inline("a/b.txt", b"b"), inline("c.txt", b"c")],
        )
        .await;
    assert_eq!(ok.status(), StatusCode::OK);
    let before = hub.head_sha("org/d", "main").await;
    let cases = [
        (
            json!({"key": "deletedFile", "value": {"path": "nope.txt"}}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"key": "deletedFolder", "value": {"path": "nope/"}}),
            StatusCode::NOT_FOUND,
        ),
        (
            inline("a", b"file where a folder is"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            inline("c.txt/d", b"below a file"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            inline("C.TXT", b"one file with c.txt on macOS and Windows"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
        (
            inline("A/e.txt", b"into folder a, spelled A"),
            StatusCode::UNPROCESSABLE_ENTITY,
        ),
    ];
    for (line, status) in cases {
        let r = hub.commit("org/d", &[header(), line.clone()]).await;
        assert_eq!(r.status(), status, "{line}");
        assert_eq!(hub.head_sha("org/d", "main").await, before, "{line}");
    }
    let r = hub
        .commit(
            "org/d",
            &[
                header(),
                json!({"key": "deletedFolder", "value": {"path": "a/"}}),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let files: Vec<Value> = hub
        .get("/api/models/org/d/tree/main?recursive=true", Some(R))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(files.len(), 1);
    // Operations apply in the body's order: a file becomes a folder of its name when
    // its deletion comes first (as huggingface_hub sends deletions first), not after.
    let r = hub
        .commit(
            "org/d",
            &[
                header(),
                json!({"key": "deletedFile", "value": {"path": "c.txt"}}),
                inline("c.txt/now-a-folder", b"x"),
            ],
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let r = hub
        .commit(
            "org/d",
            &[
                header(),
                inline("c.txt/z", b"y"),
                json!({"key": "deletedFolder", "value": {"path": "c.txt"}}),
            ],
        )
        .await;
    assert_eq!(
        r.status(),
        StatusCode::OK,
        "the folder's deletion comes after the addition, so it takes it too"
    );
    let files: Vec<Value> = hub
        .get("/api/models/org/d/tree/main?recursive=true", Some(R))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(files, Vec::<Value>::new());
    // Branches: created from main, a second time 409, then they diverge.
    let b = hub
        .post_json("/api/models/org/d/branch/dev", Some(W), json!({}))
        .await;
    assert_eq!(b.status(), StatusCode::OK);
    let again = hub
        .post_json("/api/models/org/d/branch/dev", Some(W), json!({}))
        .await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    let main = hub.head_sha("org/d", "main").await;
    assert_eq!(hub.head_sha("org/d", "dev").await, main);
    let quoted = hub
        .get("/api/models/org/d/revision/refs%2Fheads%2Fdev", Some(R))
        .await;
    assert_eq!(quoted.status(), StatusCode::OK);
    let nope = hub
        .get("/api/models/org/d/revision/nobranch", Some(R))
        .await;
    assert_eq!(nope.headers()["x-error-code"], "RevisionNotFound");
}

#[tokio::test]
async fn whoami_lfs_batch_private_repos_and_minted_tokens() {
    let hub = Hub::start().await;
    let me: Value = hub
        .get("/api/whoami-v2", Some(R))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(
        (
            me["name"].as_str(),
            me["auth"]["accessToken"]["role"].as_str()
        ),
        (Some("user"), Some("read"))
    );
    assert_eq!(
        hub.get("/api/whoami-v2", Some("wrong")).await.status(),
        StatusCode::UNAUTHORIZED
    );
    let r = hub
        .post_json(
            "/api/repos/create",
            Some(W),
            json!({"name": "p", "organization": "org", "private": true}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let info: Value = hub
        .get("/api/models/org/p", Some(R))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(info["private"], true);
    // The LFS batch: Xet for uploads, the write token in each unknown object's header.
    let known = fixture(3, &[3000]);
    put_fixture(hub.store.as_ref(), &known).await;
    let batch = |transfers: Value| {
        json!({"operation": "upload", "transfers": transfers, "hash_algo": "sha_256",
               "objects": [{"oid": sha256_hex(&known.data), "size": known.data.len()},
                           {"oid": "ab".repeat(32), "size": 10}]})
    };
    let answer = |transfers: Value| async {
        let r = hub
            .post_json(
                "/org/p.git/info/lfs/objects/batch",
                Some(W),
                batch(transfers),
            )
            .await;
        r.json::<Value>().await.unwrap()
    };
    let r = answer(json!(["basic", "xet"])).await;
    assert_eq!(r["transfer"], "xet");
    // Stored, but not in this repository: the answer does not tell (an upload is asked
    // for), so no writer learns what other repositories hold.
    assert!(r["objects"][0]["actions"]["upload"].is_object(), "{r}");
    let up = &r["objects"][1]["actions"]["upload"];
    assert!(
        up["href"]
            .as_str()
            .unwrap()
            .ends_with("/api/models/org/p/xet-write-token/main")
    );
    let token = up["header"]["X-Xet-Access-Token"]
        .as_str()
        .unwrap()
        .to_string();
    let r = answer(json!(["basic"])).await;
    assert_eq!(r["objects"][1]["error"]["code"], 501);
    // Once this repository holds it, its upload is skipped.
    let lfs = json!({"key": "lfsFile", "value": {"path": "k.bin", "algo": "sha256",
        "oid": sha256_hex(&known.data), "size": known.data.len()}});
    assert_eq!(
        hub.commit("org/p", &[header(), lfs]).await.status(),
        StatusCode::OK
    );
    let r = answer(json!(["basic", "xet"])).await;
    assert!(r["objects"][0].get("actions").is_none(), "{r}");
    assert!(r["objects"][1]["actions"]["upload"].is_object(), "{r}");
    // The minted token works on the CAS (a junk shard is a 400, not a 401), a user token's
    // read scope gives a read CAS token, and minted tokens are no Hub tokens.
    let shard = hub
        .send(
            reqwest::Method::POST,
            "/v1/shards",
            Some(&token),
            Some(("application/octet-stream", b"junk".to_vec())),
        )
        .await;
    assert_eq!(shard.status(), StatusCode::BAD_REQUEST);
    let read: Value = hub
        .get("/api/models/org/p/xet-read-token/main", Some(R))
        .await
        .json()
        .await
        .unwrap();
    let rt = read["accessToken"].as_str().unwrap();
    let shard = hub
        .send(
            reqwest::Method::POST,
            "/v1/shards",
            Some(rt),
            Some(("application/octet-stream", b"junk".to_vec())),
        )
        .await;
    assert_eq!(shard.status(), StatusCode::FORBIDDEN);
    assert_eq!(
        hub.get("/api/models/org/p", Some(&token)).await.status(),
        StatusCode::UNAUTHORIZED
    );
}

/// A body that sends `first` and then nothing, never ending, claiming `len` bytes: a
/// route that reads it before answering waits for the body timeout (408).
fn stalled_body(first: &'static [u8]) -> reqwest::Body {
    use futures_util::StreamExt as _;
    let head = futures_util::stream::once(async move {
        Ok::<bytes::Bytes, std::io::Error>(bytes::Bytes::from_static(first))
    });
    reqwest::Body::wrap_stream(head.chain(futures_util::stream::pending()))
}

/// On a server with tokens, the routes that took a body before checking the caller
/// (validate-yaml, the LFS batch) answer a caller without a token, or with too little
/// access, at once: the stalled 16 MiB bodies are never waited for.
#[tokio::test]
async fn callers_are_checked_before_their_bodies_are_read() {
    let hub = Hub::start().await;
    hub.create("b").await;
    let cases = [
        ("/api/validate-yaml", None, StatusCode::UNAUTHORIZED),
        (
            "/api/validate-yaml",
            Some("wrong"),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/org/b.git/info/lfs/objects/batch",
            None,
            StatusCode::UNAUTHORIZED,
        ),
        (
            "/org/b.git/info/lfs/objects/batch",
            Some("wrong"),
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (path, token, status) in cases {
        let mut r = hub
            .http
            .post(hub.url(path))
            .header("content-type", "application/json")
            .header("content-length", (16u64 << 20).to_string())
            .body(stalled_body(b"{\"content\": \""));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        let r = tokio::time::timeout(std::time::Duration::from_secs(20), r.send())
            .await
            .unwrap_or_else(|_| panic!("{path}: no answer while the body stalls"))
            .unwrap();
        assert_eq!(r.status(), status, "{path} {token:?}");
    }
    // A read token may ask the LFS batch for downloads, not uploads.
    let batch = |op: &str| json!({"operation": op, "transfers": ["xet"], "objects": []});
    let path = "/org/b.git/info/lfs/objects/batch";
    let up = hub.post_json(path, Some(R), batch("upload")).await;
    assert_eq!(up.status(), StatusCode::FORBIDDEN);
    let down = hub.post_json(path, Some(R), batch("download")).await;
    assert_eq!(down.status(), StatusCode::OK);
    let yaml = hub
        .post_json(
            "/api/validate-yaml",
            Some(R),
            json!({"content": "license: mit"}),
        )
        .await;
    assert_eq!(yaml.status(), StatusCode::OK);
}

/// `GET /v1/token` with a minted CAS token answers that token's own expiry, not a
/// later one (the client would keep using a dead token).
#[tokio::test]
async fn the_token_route_tells_a_minted_token_s_real_expiry() {
    let hub = Hub::start().await;
    hub.create("t").await;
    let minted: Value = hub
        .get("/api/models/org/t/xet-read-token/main", Some(R))
        .await
        .json()
        .await
        .unwrap();
    let (token, exp) = (
        minted["accessToken"].as_str().unwrap(),
        minted["exp"].as_u64().unwrap(),
    );
    let r: Value = hub
        .get("/v1/token", Some(token))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(r["exp"].as_u64(), Some(exp), "{r}");
    assert_eq!(r["accessToken"].as_str(), Some(token));
}

/// An open server (no tokens) sharing a store with a token server: a private repository
/// of that store and one that does not exist answer alike (status, error code and
/// message but for the name), so an open server tells nobody which private ones exist.
#[tokio::test]
async fn an_open_server_answers_private_and_missing_repositories_alike() {
    let hub = Hub::start().await;
    let r = hub
        .post_json(
            "/api/repos/create",
            Some(W),
            json!({"name": "secret", "organization": "org", "private": true}),
        )
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let config = ServerConfig {
        cas_token_key: Some([9; 32]),
        ..Default::default()
    };
    let repos = xet_hub::Repos::new(hub.store.clone());
    let open = TestServer::start_hub(config, hub.store.clone(), Some(repos)).await;
    let http = client();
    let ask = |name: &'static str| {
        let url = open.url(&format!("/api/models/org/{name}"));
        let http = http.clone();
        async move {
            let r = http.get(url).send().await.unwrap();
            let code = r.headers().get("x-error-code").cloned();
            let status = r.status();
            let body = r.text().await.unwrap().replace(name, "NAME");
            (status, code, body)
        }
    };
    let (secret, missing) = (ask("secret").await, ask("nothing").await);
    assert_eq!(secret, missing);
    assert_eq!(secret.0, StatusCode::UNAUTHORIZED);
    for path in [
        "/org/secret/resolve/main/x",
        "/api/models/org/secret/tree/main",
    ] {
        let a = http.get(open.url(path)).send().await.unwrap().status();
        let b = http
            .get(open.url(&path.replace("secret", "nothing")))
            .send()
            .await
            .unwrap()
            .status();
        assert_eq!(a, b, "{path}");
    }
}
