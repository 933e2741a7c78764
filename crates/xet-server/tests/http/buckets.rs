//! The Buckets API of `xet serve` (issue 37, `buckets-api.md`) over loopback: create,
//! info, list, tree, paths-info, batch (partial failures, 422, replays, hostile lines),
//! resolve with every header clients read and ranges, the token routes, access, delete.

use std::sync::Arc;

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::{Value, json};
use xet_cas::Cas as _;
use xet_server::{RepoPattern, ServerConfig, Token};

use crate::common::{Fixture, TestServer, client, fixture, fixture_without_sha256, memory_store};

const W: &str = "bkt-w";
const R: &str = "bkt-r";
/// Reads and writes `orgb/*` only.
const OTHER: &str = "bkt-orgb";

struct Setup {
    server: TestServer,
    store: Arc<xet_store::MemoryStore>,
    http: reqwest::Client,
}

impl Setup {
    async fn start() -> Setup {
        let store = memory_store().await;
        let config = ServerConfig {
            tokens: vec![
                Token::write(W),
                Token::read(R),
                Token::write(OTHER).scoped(RepoPattern::parse("orgb/*").unwrap()),
            ],
            cas_token_key: Some([6; 32]),
            ..Default::default()
        };
        let repos = xet_hub::Repos::new(store.clone());
        let server = TestServer::start_hub(config, store.clone(), Some(repos)).await;
        Setup {
            server,
            store,
            http: client(),
        }
    }

    fn url(&self, path: &str) -> String {
        self.server.url(path)
    }

    async fn get(&self, path: &str, token: &str) -> reqwest::Response {
        let r = self.http.get(self.url(path)).bearer_auth(token);
        r.send().await.unwrap()
    }

    async fn json(&self, path: &str, token: &str) -> Value {
        let r = self.get(path, token).await;
        assert_eq!(r.status(), StatusCode::OK, "GET {path}");
        r.json().await.unwrap()
    }

    async fn batch(&self, bucket: &str, lines: &[Value], token: &str) -> (StatusCode, Value) {
        let body: String = lines.iter().map(|l| format!("{l}\n")).collect();
        self.batch_raw(bucket, body, token).await
    }

    async fn batch_raw(&self, bucket: &str, body: String, token: &str) -> (StatusCode, Value) {
        let r = self
            .http
            .post(self.url(&format!("/api/buckets/{bucket}/batch")))
            .bearer_auth(token)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap();
        let status = r.status();
        (status, r.json().await.unwrap_or(Value::Null))
    }

    /// Upload `f` (xorb, then its shard under the bucket's write CAS token).
    async fn upload(&self, bucket: &str, f: &Fixture, token: &str) {
        let cas = self
            .json(&format!("/api/buckets/{bucket}/xet-write-token"), token)
            .await;
        let cas = cas["accessToken"].as_str().unwrap().to_string();
        self.store
            .put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()).into())
            .await
            .unwrap();
        let r = self
            .http
            .post(self.url("/v1/shards"))
            .bearer_auth(&cas)
            .body(f.shard.clone())
            .send()
            .await
            .unwrap();
        let status = r.status();
        assert_eq!(
            status,
            StatusCode::OK,
            "shard upload: {}",
            r.text().await.unwrap()
        );
    }

    async fn create(&self, bucket: &str, body: Value, token: &str) -> reqwest::Response {
        self.http
            .post(self.url(&format!("/api/buckets/{bucket}")))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }
}

fn add(path: &str, f: &Fixture, mtime: i64) -> Value {
    json!({"type": "addFile", "path": path, "xetHash": f.file.to_string(), "mtime": mtime,
           "contentType": "application/octet-stream"})
}

fn paths(entries: &Value) -> Vec<String> {
    entries
        .as_array()
        .unwrap()
        .iter()
        .map(|e| {
            format!(
                "{}:{}",
                e["type"].as_str().unwrap(),
                e["path"].as_str().unwrap()
            )
        })
        .collect()
}

#[tokio::test]
async fn a_bucket_from_creation_to_deletion() {
    let s = Setup::start().await;
    let r = s
        .create("orga/ckpt", json!({"visibility": "private"}), W)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    let v: Value = r.json().await.unwrap();
    assert_eq!(v["url"], s.url("/buckets/orga/ckpt"));
    assert_eq!(v["id"], "orga/ckpt");
    let again = s.create("orga/ckpt", json!({}), W).await;
    assert_eq!(again.status(), StatusCode::CONFLICT);
    assert_eq!(
        s.create("orga/other", json!({}), R).await.status(),
        StatusCode::FORBIDDEN,
        "a read token creates nothing"
    );

    let (one, two) = (
        fixture_without_sha256(71, &[3000, 5000]),
        fixture_without_sha256(72, &[4000]),
    );
    s.upload("orga/ckpt", &one, W).await;
    s.upload("orga/ckpt", &two, W).await;
    let never = fixture(73, &[1000]);
    let (status, report) = s
        .batch(
            "orga/ckpt",
            &[
                add("a.bin", &one, 1_765_000_000_123),
                add("dir/b.bin", &two, 1_765_000_000),
                add("dir/nope.bin", &never, 1),
                add("../up.bin", &one, 1),
                add("x/.git/hooks/post-checkout", &one, 1),
                json!({"type": "deleteFile", "path": "never/there"}),
            ],
            W,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    assert_eq!(report["processed"], 6);
    assert_eq!(report["succeeded"], 3);
    assert_eq!(report["success"], false);
    let failed: Vec<&str> = report["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(
        failed,
        ["dir/nope.bin", "../up.bin", "x/.git/hooks/post-checkout"]
    );
    assert!(
        report["failed"][0]["error"]
            .as_str()
            .unwrap()
            .contains("was uploaded")
    );

    let info = s.json("/api/buckets/orga/ckpt", R).await;
    let total = (one.data.len() + two.data.len()) as u64;
    assert_eq!(info["size"], total);
    assert_eq!(info["totalFiles"], 2);
    assert_eq!(info["private"], true);
    assert!(info["updatedAt"].as_str().unwrap().ends_with('Z'));
    assert!(info["createdAt"].as_str().unwrap().ends_with('Z'));

    // Trees: one level with folders, everything below (files only), a file, nothing.
    let root = s.json("/api/buckets/orga/ckpt/tree", R).await;
    assert_eq!(paths(&root), ["file:a.bin", "directory:dir"]);
    assert_eq!(root[0]["size"], one.data.len());
    assert_eq!(root[0]["xetHash"], one.file.to_string());
    assert_eq!(root[0]["mtime"], "2025-12-06T05:46:40.123Z");
    let all = s
        .json("/api/buckets/orga/ckpt/tree?recursive=true", R)
        .await;
    assert_eq!(paths(&all), ["file:a.bin", "file:dir/b.bin"]);
    assert_eq!(
        all[1]["mtime"], "2025-12-06T05:46:40.000Z",
        "seconds read as seconds"
    );
    for prefix in ["dir%2Fb.bin", "dir/b.bin"] {
        let one_file = s
            .json(&format!("/api/buckets/orga/ckpt/tree/{prefix}"), R)
            .await;
        assert_eq!(paths(&one_file), ["file:dir/b.bin"]);
    }
    let dir = s
        .json("/api/buckets/orga/ckpt/tree/dir?recursive=false", R)
        .await;
    assert_eq!(paths(&dir), ["file:dir/b.bin"]);
    let none = s.json("/api/buckets/orga/ckpt/tree/missing", R).await;
    assert_eq!(none, json!([]));
    // Pages of one, followed by their Link.
    let mut next = Some(s.url("/api/buckets/orga/ckpt/tree?recursive=true&limit=1"));
    let mut seen = Vec::new();
    while let Some(url) = next {
        let r = s.http.get(&url).bearer_auth(R).send().await.unwrap();
        next = r.headers().get("link").map(|l| {
            l.to_str()
                .unwrap()
                .split(['<', '>'])
                .nth(1)
                .unwrap()
                .to_string()
        });
        seen.extend(paths(&r.json().await.unwrap()));
    }
    assert_eq!(seen, paths(&all));

    let info = s
        .http
        .post(s.url("/api/buckets/orga/ckpt/paths-info"))
        .bearer_auth(R)
        .json(&json!({"paths": ["a.bin", "dir", "nope", "../x"]}))
        .send()
        .await
        .unwrap();
    assert_eq!(paths(&info.json().await.unwrap()), ["file:a.bin"]);

    // Resolve: the headers every client reads, bytes, ranges, the file info.
    let head = s
        .http
        .head(s.url("/buckets/orga/ckpt/resolve/dir%2Fb.bin"))
        .bearer_auth(R)
        .send()
        .await
        .unwrap();
    assert_eq!(head.status(), StatusCode::OK);
    let h = head.headers();
    assert_eq!(h["x-xet-hash"], two.file.to_string().as_str());
    assert_eq!(h["x-linked-size"], two.data.len().to_string().as_str());
    assert_eq!(h["content-length"], two.data.len().to_string().as_str());
    assert_eq!(h["etag"], format!("\"{}\"", two.file).as_str());
    assert!(h["last-modified"].to_str().unwrap().ends_with(" GMT"));
    let link = h["link"].to_str().unwrap();
    assert!(
        link.contains(&format!(
            "<{}>; rel=\"xet-auth\"",
            s.url("/api/buckets/orga/ckpt/xet-read-token")
        )),
        "{link}"
    );
    let body = s
        .get("/buckets/orga/ckpt/resolve/a.bin", R)
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.as_ref(), one.data.as_slice());
    let part = s
        .http
        .get(s.url("/buckets/orga/ckpt/resolve/a.bin"))
        .bearer_auth(R)
        .header("range", "bytes=2999-3001")
        .send()
        .await
        .unwrap();
    assert_eq!(part.status(), StatusCode::PARTIAL_CONTENT);
    assert_eq!(part.bytes().await.unwrap().as_ref(), &one.data[2999..3002]);
    let fileinfo = s
        .http
        .get(s.url("/buckets/orga/ckpt/resolve/a.bin"))
        .bearer_auth(R)
        .header("accept", "application/vnd.xet-fileinfo+json, */*")
        .send()
        .await
        .unwrap();
    let fi: Value = fileinfo.json().await.unwrap();
    assert_eq!(fi["hash"], one.file.to_string());
    assert_eq!(fi["size"], one.data.len());
    let missing = s.get("/buckets/orga/ckpt/resolve/dir", R).await;
    assert_eq!(missing.status(), StatusCode::NOT_FOUND);
    assert_eq!(missing.headers()["x-error-code"], "EntryNotFound");

    // The bucket's read CAS token reads its files.
    let read = s.json("/api/buckets/orga/ckpt/xet-read-token", R).await;
    let read = read["accessToken"].as_str().unwrap();
    let rec = s
        .get(&format!("/v1/reconstructions/{}", one.file), read)
        .await;
    assert_eq!(rec.status(), StatusCode::OK);

    // Namespace listing; the scoped token sees nothing of orga, existence included.
    let listed = s.json("/api/buckets/orga", R).await;
    assert_eq!(listed.as_array().unwrap().len(), 1);
    assert_eq!(listed[0]["id"], "orga/ckpt");
    for path in [
        "/api/buckets/orga/ckpt",
        "/api/buckets/orga/ckpt/tree",
        "/buckets/orga/ckpt/resolve/a.bin",
    ] {
        let r = s.get(path, OTHER).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        assert_eq!(r.headers()["x-error-code"], "RepoNotFound", "{path}");
    }
    assert_eq!(s.json("/api/buckets/orga", OTHER).await, json!([]));
    let (status, _) = s.batch("orga/ckpt", &[add("c", &one, 1)], R).await;
    assert_eq!(status, StatusCode::FORBIDDEN, "a read token writes nothing");

    // Delete: gone, answered as missing; created again, empty.
    let del = s
        .http
        .delete(s.url("/api/buckets/orga/ckpt"))
        .bearer_auth(W)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), StatusCode::OK);
    let gone = s.get("/api/buckets/orga/ckpt", W).await;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    assert_eq!(gone.headers()["x-error-code"], "RepoNotFound");
    assert_eq!(
        s.create("orga/ckpt", json!({}), W).await.status(),
        StatusCode::OK
    );
    let info = s.json("/api/buckets/orga/ckpt", W).await;
    assert_eq!(
        (info["totalFiles"].clone(), info["private"].clone()),
        (json!(0), json!(false))
    );
    assert_eq!(s.json("/api/buckets/orga/ckpt/tree", W).await, json!([]));
}

#[tokio::test]
async fn batches_replay_fail_whole_on_bad_lines_and_answer_422_when_nothing_applies() {
    let s = Setup::start().await;
    assert_eq!(
        s.create("orgb/data", json!({"private": false}), OTHER)
            .await
            .status(),
        StatusCode::OK
    );
    let f = fixture_without_sha256(81, &[2000, 2000]);
    s.upload("orgb/data", &f, OTHER).await;
    let lines = [
        add("shard-000.parquet", &f, 1_765_000_000_000),
        json!({"type": "deleteFile", "path": "old.parquet"}),
    ];
    let (status, first) = s.batch("orgb/data", &lines, OTHER).await;
    assert_eq!(
        (status, first["succeeded"].clone()),
        (StatusCode::OK, json!(2))
    );
    let before = s.json("/api/buckets/orgb/data", OTHER).await;
    // Replayed (a client retrying after a timeout): the same file, nothing else moves.
    let (status, again) = s.batch("orgb/data", &lines, OTHER).await;
    assert_eq!(
        (status, again["succeeded"].clone()),
        (StatusCode::OK, json!(2))
    );
    let after = s.json("/api/buckets/orgb/data", OTHER).await;
    assert_eq!(
        (after["size"].clone(), after["totalFiles"].clone()),
        (before["size"].clone(), before["totalFiles"].clone())
    );
    assert!(after["updatedAt"].as_str() >= before["updatedAt"].as_str());

    // Nothing applies: 422 with the same report shape.
    let unknown = fixture(82, &[500]);
    let (status, report) = s
        .batch(
            "orgb/data",
            &[
                add("u.bin", &unknown, 1),
                add("/abs", &f, 1),
                add("a//b", &f, 1),
            ],
            OTHER,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{report}");
    assert_eq!(report["succeeded"], 0);
    assert_eq!(report["failed"].as_array().unwrap().len(), 3);

    // A file where a folder is, and below a file: those lines fail alone.
    let (status, report) = s
        .batch(
            "orgb/data",
            &[
                add("shard-000.parquet/inner", &f, 1),
                add("deep/x", &f, 1),
                add("deep", &f, 1),
            ],
            OTHER,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let failed: Vec<&str> = report["failed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["path"].as_str().unwrap())
        .collect();
    assert_eq!(failed, ["shard-000.parquet/inner", "deep"]);

    // Malformed lines refuse the whole body: nothing applied.
    let tree = s
        .json("/api/buckets/orgb/data/tree?recursive=true", OTHER)
        .await;
    for bad in [
        format!("{}\nnot json\n", add("z1", &f, 1)),
        format!(
            "{}\n{{\"type\":\"renameFile\",\"path\":\"z\"}}\n",
            add("z2", &f, 1)
        ),
        format!(
            "{}\n{{\"type\":\"addFile\",\"path\":\"z3\"}}\n",
            add("z3", &f, 1)
        ),
    ] {
        let (status, _) = s.batch_raw("orgb/data", bad, OTHER).await;
        assert_eq!(status, StatusCode::BAD_REQUEST);
    }
    assert_eq!(
        s.json("/api/buckets/orgb/data/tree?recursive=true", OTHER)
            .await,
        tree
    );

    // A hash from another bucket the caller cannot read: refused as not uploaded.
    assert_eq!(
        s.create("orga/private", json!({"visibility": "private"}), W)
            .await
            .status(),
        StatusCode::OK
    );
    let secret = fixture_without_sha256(83, &[1500]);
    s.upload("orga/private", &secret, W).await;
    let (status, report) = s
        .batch("orgb/data", &[add("stolen", &secret, 1)], OTHER)
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{report}");
    // Nor copied from a bucket it cannot see; copied from its own, no bytes move.
    let copy = |from: &str, hash: &str| {
        json!({"type": "copyFile", "path": "copied.bin", "xetHash": hash, "mtime": 5,
               "sourceRepoType": "bucket", "sourceRepoId": from})
    };
    let (status, _) = s
        .batch(
            "orgb/data",
            &[copy("orga/private", &secret.file.to_string())],
            OTHER,
        )
        .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    let (status, report) = s
        .batch(
            "orgb/data",
            &[copy("orgb/data", &f.file.to_string())],
            OTHER,
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{report}");
    let info = s.json("/api/buckets/orgb/data", OTHER).await;
    assert_eq!(info["totalFiles"], 3, "shard, deep/x, copied");
}

/// A batch at the limit (100,000 lines) applies; one line more is refused whole, and
/// nothing of it is applied.
#[tokio::test]
async fn a_hundred_thousand_lines_apply_and_one_more_is_refused_whole() {
    let s = Setup::start().await;
    assert_eq!(
        s.create("orga/many", json!({}), W).await.status(),
        StatusCode::OK
    );
    let f = fixture_without_sha256(91, &[1000]);
    s.upload("orga/many", &f, W).await;
    let add = format!(
        "{}\n",
        json!({"type": "addFile", "path": "kept.bin", "xetHash": f.file.to_string()})
    );
    let deletes: String = (0..99_999)
        .map(|i| format!("{{\"type\":\"deleteFile\",\"path\":\"gone/{i}\"}}\n"))
        .collect();
    let (status, report) = s.batch_raw("orga/many", format!("{add}{deletes}"), W).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(report["processed"], 100_000);
    assert_eq!(report["succeeded"], 100_000);
    let over = format!(
        "{}{deletes}{{\"type\":\"deleteFile\",\"path\":\"kept.bin\"}}\n{}",
        add.replace("kept.bin", "new.bin"),
        "{\"type\":\"deleteFile\",\"path\":\"x\"}\n"
    );
    let (status, _) = s.batch_raw("orga/many", over, W).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    let tree = s
        .json("/api/buckets/orga/many/tree?recursive=true", W)
        .await;
    assert_eq!(
        paths(&tree),
        ["file:kept.bin"],
        "nothing of the refused batch applied"
    );
}

impl Setup {
    async fn put_settings(&self, bucket: &str, body: Value, token: &str) -> reqwest::Response {
        self.http
            .put(self.url(&format!("/api/buckets/{bucket}/settings")))
            .bearer_auth(token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    async fn move_bucket(&self, from: &str, to: &str, token: &str) -> reqwest::Response {
        self.http
            .post(self.url("/api/repos/move"))
            .bearer_auth(token)
            .json(&json!({"fromRepo": from, "toRepo": to, "type": "bucket"}))
            .send()
            .await
            .unwrap()
    }

    /// A CAS token of `bucket` (`read`/`write`).
    async fn cas_token(&self, bucket: &str, which: &str, token: &str) -> String {
        let v = self
            .json(&format!("/api/buckets/{bucket}/xet-{which}-token"), token)
            .await;
        v["accessToken"].as_str().unwrap().to_string()
    }
}

/// Status and `X-Error-Code` of a token-less GET.
async fn anonymous(http: &reqwest::Client, url: String) -> (StatusCode, Option<String>) {
    let r = http.get(url).send().await.unwrap();
    let code = r
        .headers()
        .get("x-error-code")
        .map(|v| v.to_str().unwrap().to_string());
    (r.status(), code)
}

/// `PUT settings` flips a bucket's privacy for every reader at once, on every server of
/// the store: a token-less reader (of a server without tokens sharing the store) sees
/// the private bucket exactly as a missing one, and none of its files through the CAS.
#[tokio::test]
async fn settings_make_a_bucket_private_for_every_reader_at_once() {
    let s = Setup::start().await;
    // A second server on the same store, without tokens: every reader is anonymous.
    let open = TestServer::start_hub(
        ServerConfig::default(),
        s.store.clone(),
        Some(xet_hub::Repos::new(s.store.clone())),
    )
    .await;
    assert_eq!(
        s.create("orga/flip", json!({}), W).await.status(),
        StatusCode::OK
    );
    let f = fixture_without_sha256(101, &[2500]);
    s.upload("orga/flip", &f, W).await;
    let (status, _) = s.batch("orga/flip", &[add("f.bin", &f, 1)], W).await;
    assert_eq!(status, StatusCode::OK);
    let reads = [
        "/api/buckets/orga/flip",
        "/api/buckets/orga/flip/tree",
        "/buckets/orga/flip/resolve/f.bin",
    ];
    let reconstruction = format!("/v1/reconstructions/{}", f.file);
    for path in reads.iter().chain([&reconstruction.as_str()]) {
        assert_eq!(
            anonymous(&s.http, open.url(path)).await.0,
            StatusCode::OK,
            "public: {path}"
        );
    }

    // Settings need write access; a bad body changes nothing; unknown fields are ignored.
    let r = s
        .put_settings("orga/flip", json!({"private": true}), R)
        .await;
    assert_eq!(r.status(), StatusCode::FORBIDDEN);
    let r = s
        .put_settings("orga/flip", json!({"private": "yes"}), W)
        .await;
    assert_eq!(r.status(), StatusCode::BAD_REQUEST);
    let r = s
        .put_settings("orga/flip", json!({"cdnRegions": []}), W)
        .await;
    assert_eq!(r.status(), StatusCode::OK, "no private: nothing to change");
    assert_eq!(s.json("/api/buckets/orga/flip", R).await["private"], false);
    let r = s
        .put_settings("orga/flip", json!({"private": true}), OTHER)
        .await;
    assert_eq!(
        r.status(),
        StatusCode::NOT_FOUND,
        "out of the token's scope"
    );

    let body = json!({"private": true, "cdnRegions": [{"provider": "x", "region": "us"}]});
    let r = s.put_settings("orga/flip", body, W).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    assert_eq!(s.json("/api/buckets/orga/flip", R).await["private"], true);
    let missing = anonymous(&s.http, open.url("/api/buckets/orga/none")).await;
    assert_eq!(
        missing,
        (StatusCode::NOT_FOUND, Some("RepoNotFound".to_string()))
    );
    for path in reads {
        assert_eq!(
            anonymous(&s.http, open.url(path)).await,
            missing,
            "private, as a missing bucket: {path}"
        );
    }
    let rec = anonymous(&s.http, open.url(&reconstruction)).await;
    assert_ne!(
        rec.0,
        StatusCode::OK,
        "a private bucket's file through the CAS"
    );
    // The open server makes nothing private: nobody could read it there.
    let r = s
        .http
        .put(open.url("/api/buckets/orga/flip/settings"))
        .json(&json!({"private": false}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND, "it cannot even see it");

    // Public again: readable again, at once.
    let r = s
        .put_settings("orga/flip", json!({"private": false}), W)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    for path in reads.iter().chain([&reconstruction.as_str()]) {
        assert_eq!(
            anonymous(&s.http, open.url(path)).await.0,
            StatusCode::OK,
            "public again: {path}"
        );
    }
    let r = s
        .http
        .put(open.url("/api/buckets/orga/flip/settings"))
        .json(&json!({"private": true}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        r.status(),
        StatusCode::BAD_REQUEST,
        "no private buckets without tokens"
    );
}

/// A move writes records only: the bucket answers at its new name with its files,
/// totals and creation time (its CAS token reading its files), the old name is missing,
/// and created again it starts empty, its token reading none of the moved bucket's files.
/// A taken target is a 409 and changes nothing.
#[tokio::test]
async fn a_moved_bucket_keeps_everything_and_frees_its_name() {
    let s = Setup::start().await;
    assert_eq!(
        s.create("orgb/src", json!({}), OTHER).await.status(),
        StatusCode::OK
    );
    let (one, two) = (
        fixture_without_sha256(111, &[3000]),
        fixture_without_sha256(112, &[1000, 1000]),
    );
    s.upload("orgb/src", &one, OTHER).await;
    s.upload("orgb/src", &two, OTHER).await;
    let lines = [add("a.bin", &one, 5), add("d/b.bin", &two, 6)];
    assert_eq!(s.batch("orgb/src", &lines, OTHER).await.0, StatusCode::OK);
    let before = s.json("/api/buckets/orgb/src", OTHER).await;
    let tree = s
        .json("/api/buckets/orgb/src/tree?recursive=true", OTHER)
        .await;

    // Refusals first: another kind, a read token, a source out of scope.
    let r = s
        .http
        .post(s.url("/api/repos/move"))
        .bearer_auth(W)
        .json(&json!({"fromRepo": "orgb/src", "toRepo": "orgb/x", "type": "model"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_IMPLEMENTED);
    assert_eq!(
        s.move_bucket("orgb/src", "orgb/x", R).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        s.move_bucket("orgb/src", "orga/x", OTHER).await.status(),
        StatusCode::FORBIDDEN,
        "the target's namespace is out of the token's scope"
    );
    assert_eq!(
        s.create("orgb/taken", json!({}), OTHER).await.status(),
        StatusCode::OK
    );
    let r = s.move_bucket("orgb/src", "orgb/taken", OTHER).await;
    assert_eq!(r.status(), StatusCode::CONFLICT);
    assert_eq!(s.json("/api/buckets/orgb/src", OTHER).await, before);
    assert_eq!(
        s.batch("orgb/src", &[add("c.bin", &one, 7)], OTHER).await.0,
        StatusCode::OK,
        "a refused move leaves the source writable"
    );
    let (status, _) = s
        .batch(
            "orgb/src",
            &[json!({"type": "deleteFile", "path": "c.bin"})],
            OTHER,
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let before = s.json("/api/buckets/orgb/src", OTHER).await;

    let r = s.move_bucket("orgb/src", "orgb/dst", OTHER).await;
    assert_eq!(r.status(), StatusCode::OK, "{}", r.text().await.unwrap());
    let after = s.json("/api/buckets/orgb/dst", OTHER).await;
    for key in [
        "size",
        "totalFiles",
        "createdAt",
        "updatedAt",
        "private",
        "_id",
    ] {
        assert_eq!(after[key], before[key], "{key}");
    }
    assert_eq!(after["id"], "orgb/dst");
    assert_eq!(
        s.json("/api/buckets/orgb/dst/tree?recursive=true", OTHER)
            .await,
        tree
    );
    let body = s
        .get("/buckets/orgb/dst/resolve/d/b.bin", OTHER)
        .await
        .bytes()
        .await
        .unwrap();
    assert_eq!(body.as_ref(), two.data.as_slice());
    let read = s.cas_token("orgb/dst", "read", OTHER).await;
    let rec = s
        .get(&format!("/v1/reconstructions/{}", one.file), &read)
        .await;
    assert_eq!(
        rec.status(),
        StatusCode::OK,
        "the moved bucket's token reads its files"
    );
    let gone = s.get("/api/buckets/orgb/src", OTHER).await;
    assert_eq!(gone.status(), StatusCode::NOT_FOUND);
    assert_eq!(gone.headers()["x-error-code"], "RepoNotFound");
    assert_eq!(
        s.move_bucket("orgb/src", "orgb/other", OTHER)
            .await
            .status(),
        StatusCode::NOT_FOUND
    );
    let listed: Vec<Value> = s
        .json("/api/buckets/orgb", OTHER)
        .await
        .as_array()
        .unwrap()
        .clone();
    let ids: Vec<&str> = listed.iter().map(|b| b["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["orgb/dst", "orgb/taken"]);

    // The old name, created again: empty, and nothing of the moved bucket is its.
    assert_eq!(
        s.create("orgb/src", json!({}), OTHER).await.status(),
        StatusCode::OK
    );
    let fresh = s.json("/api/buckets/orgb/src", OTHER).await;
    assert_eq!(
        (fresh["totalFiles"].clone(), fresh["size"].clone()),
        (json!(0), json!(0))
    );
    assert_eq!(s.json("/api/buckets/orgb/src/tree", OTHER).await, json!([]));
    let fresh_read = s.cas_token("orgb/src", "read", OTHER).await;
    let rec = s
        .get(&format!("/v1/reconstructions/{}", one.file), &fresh_read)
        .await;
    assert_ne!(
        rec.status(),
        StatusCode::OK,
        "the new bucket's token reads none of them"
    );
    // Writing to one does not touch the other.
    let three = fixture_without_sha256(113, &[700]);
    s.upload("orgb/src", &three, OTHER).await;
    assert_eq!(
        s.batch("orgb/src", &[add("a.bin", &three, 9)], OTHER)
            .await
            .0,
        StatusCode::OK
    );
    assert_eq!(
        s.json("/api/buckets/orgb/dst/tree?recursive=true", OTHER)
            .await,
        tree
    );
    // And the moved one moves again, its files with it.
    let r = s.move_bucket("orgb/dst", "orgb/again", OTHER).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        s.json("/api/buckets/orgb/again/tree?recursive=true", OTHER)
            .await,
        tree
    );
}
