//! The Buckets API of `xet serve` (issue 37, `buckets-api.md`) over loopback: create,
//! info, list, tree, paths-info, batch (partial failures, 422, replays, hostile lines),
//! resolve with every header clients read and ranges, the token routes, access, delete.

use std::sync::Arc;

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::{Value, json};
use xet_cas::Cas as _;
use xet_server::{BucketEventsConfig, RepoPattern, ServerConfig, Token};

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
        Setup::start_with(BucketEventsConfig::default()).await
    }

    async fn start_with(bucket_events: BucketEventsConfig) -> Setup {
        let store = memory_store().await;
        let config = ServerConfig {
            tokens: vec![
                Token::write(W),
                Token::read(R),
                Token::write(OTHER).scoped(RepoPattern::parse("orgb/*").unwrap()),
            ],
            cas_token_key: Some([6; 32]),
            bucket_events,
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
    let mut pages = 0;
    while let Some(url) = next {
        pages += 1;
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
    // a.bin, dir (a folder: counted, not shown), dir/b.bin; no empty page after.
    assert_eq!(pages, 3);

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

    async fn move_repo(&self, from: &str, to: &str, token: &str) -> reqwest::Response {
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

    // Refusals first: another kind (no model has that name), a read token, a source out
    // of scope.
    let r = s
        .http
        .post(s.url("/api/repos/move"))
        .bearer_auth(W)
        .json(&json!({"fromRepo": "orgb/src", "toRepo": "orgb/x", "type": "model"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::NOT_FOUND);
    assert_eq!(
        s.move_repo("orgb/src", "orgb/x", R).await.status(),
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        s.move_repo("orgb/src", "orga/x", OTHER).await.status(),
        StatusCode::FORBIDDEN,
        "the target's namespace is out of the token's scope"
    );
    assert_eq!(
        s.create("orgb/taken", json!({}), OTHER).await.status(),
        StatusCode::OK
    );
    let r = s.move_repo("orgb/src", "orgb/taken", OTHER).await;
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

    let r = s.move_repo("orgb/src", "orgb/dst", OTHER).await;
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
        s.move_repo("orgb/src", "orgb/other", OTHER).await.status(),
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
    let r = s.move_repo("orgb/dst", "orgb/again", OTHER).await;
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        s.json("/api/buckets/orgb/again/tree?recursive=true", OTHER)
            .await,
        tree
    );
}

/// An open event stream, read as it arrives.
struct Events {
    resp: reqwest::Response,
    buf: String,
}

impl Events {
    async fn open(http: &reqwest::Client, url: String, token: Option<&str>) -> Events {
        let mut req = http.get(url).header("accept", "text/event-stream");
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        let resp = req.send().await.unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "text/event-stream");
        Events {
            resp,
            buf: String::new(),
        }
    }

    /// The next block (an event, or a `:` comment), `None` at the end of the stream.
    async fn block(&mut self) -> Option<String> {
        loop {
            if let Some(at) = self.buf.find("\n\n") {
                let block = self.buf[..at].to_string();
                self.buf.drain(..at + 2);
                return Some(block);
            }
            let chunk = tokio::time::timeout(std::time::Duration::from_secs(20), self.resp.chunk())
                .await
                .expect("an event within 20 s")
                .expect("a readable stream")?;
            self.buf.push_str(std::str::from_utf8(&chunk).unwrap());
        }
    }

    /// The next event (name, data), comments skipped; `None` at the end of the stream.
    async fn next(&mut self) -> Option<(String, Value)> {
        loop {
            let block = self.block().await?;
            if block.starts_with(':') {
                continue;
            }
            let mut name = String::new();
            let mut data = Value::Null;
            for line in block.lines() {
                if let Some(n) = line.strip_prefix("event: ") {
                    name = n.to_string();
                } else if let Some(d) = line.strip_prefix("data: ") {
                    data = serde_json::from_str(d).unwrap();
                }
            }
            return Some((name, data));
        }
    }

    /// The next event, which must be `name`: its data.
    async fn expect(&mut self, name: &str) -> Value {
        let (got, data) = self.next().await.expect("an event, not the end");
        assert_eq!(got, name, "{data}");
        data
    }
}

/// `path:op` of each change of a `changes` event.
fn ops(changes: &Value) -> Vec<String> {
    changes["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| {
            format!(
                "{}:{}",
                c["path"].as_str().unwrap(),
                c["op"].as_str().unwrap()
            )
        })
        .collect()
}

fn quick_events() -> BucketEventsConfig {
    BucketEventsConfig {
        poll_interval: std::time::Duration::from_millis(50),
        ..BucketEventsConfig::default()
    }
}

/// The feed of a bucket: `ready` (no cursor while nothing was written), then a `changes`
/// event per batch with the right ops and facts; after a disconnect, the cursor of the
/// last event seen replays exactly what was missed (coalesced), and the head's cursor
/// nothing; `since` replays what changed at or after a time. Without `Accept` it is 400.
#[tokio::test]
async fn events_follow_batches_and_resume_by_cursor() {
    let s = Setup::start_with(quick_events()).await;
    assert_eq!(
        s.create("orga/feed", json!({}), W).await.status(),
        StatusCode::OK
    );
    let (f1, f2, f3) = (
        fixture_without_sha256(121, &[1500]),
        fixture_without_sha256(122, &[2500]),
        fixture_without_sha256(123, &[3500]),
    );
    for f in [&f1, &f2, &f3] {
        s.upload("orga/feed", f, W).await;
    }
    let events_url = |q: &str| s.url(&format!("/api/buckets/orga/feed/events{q}"));
    let plain = s
        .http
        .get(events_url(""))
        .bearer_auth(R)
        .send()
        .await
        .unwrap();
    assert_eq!(
        plain.status(),
        StatusCode::BAD_REQUEST,
        "no Accept: text/event-stream"
    );
    for (path, want) in [
        ("/api/buckets/orga/none/events", StatusCode::NOT_FOUND),
        (
            "/api/buckets/orga/feed/events?cursor=nonsense",
            StatusCode::BAD_REQUEST,
        ),
        (
            "/api/buckets/orga/feed/events?since=yesterday",
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let r = s
            .http
            .get(s.url(path))
            .bearer_auth(R)
            .header("accept", "text/event-stream")
            .send()
            .await
            .unwrap();
        assert_eq!(r.status(), want, "{path}");
    }

    let mut live = Events::open(&s.http, events_url(""), Some(R)).await;
    assert_eq!(live.expect("ready").await, json!({}), "nothing written yet");
    let lines = [add("a.bin", &f1, 1_765_000_000_123), add("d/b.bin", &f2, 2)];
    assert_eq!(s.batch("orga/feed", &lines, W).await.0, StatusCode::OK);
    let first = live.expect("changes").await;
    assert_eq!(ops(&first), ["a.bin:add", "d/b.bin:add"]);
    let a = &first["changes"][0];
    assert_eq!(a["size"], f1.data.len());
    assert_eq!(a["xetHash"], f1.file.to_string());
    assert_eq!(a["mtime"], "2025-12-06T05:46:40.123Z");
    assert!(a["uploadedAt"].as_str().unwrap().ends_with('Z'));
    let lines = [
        add("a.bin", &f3, 3),
        json!({"type": "deleteFile", "path": "d/b.bin"}),
    ];
    assert_eq!(s.batch("orga/feed", &lines, W).await.0, StatusCode::OK);
    let second = live.expect("changes").await;
    assert_eq!(ops(&second), ["a.bin:update", "d/b.bin:delete"]);
    assert_eq!(second["changes"][0]["xetHash"], f3.file.to_string());
    assert_eq!(
        second["changes"][1].get("size"),
        None,
        "a deletion carries no facts"
    );
    let seen = second["cursor"].as_str().unwrap().to_string();
    assert_ne!(first["cursor"], second["cursor"]);
    drop(live);

    // Missed while away: replayed from the last cursor seen, exactly.
    let at = s.json("/api/buckets/orga/feed", R).await["updatedAt"].clone();
    let lines = [add("e.bin", &f2, 4)];
    assert_eq!(s.batch("orga/feed", &lines, W).await.0, StatusCode::OK);
    let lines = [json!({"type": "deleteFile", "path": "a.bin"})];
    assert_eq!(s.batch("orga/feed", &lines, W).await.0, StatusCode::OK);
    let mut back = Events::open(&s.http, events_url(&format!("?cursor={seen}")), Some(R)).await;
    let missed = back.expect("changes").await;
    assert_eq!(ops(&missed), ["a.bin:delete", "e.bin:add"]);
    let ready = back.expect("ready").await;
    assert_eq!(ready["cursor"], missed["cursor"]);
    drop(back);
    let head = missed["cursor"].as_str().unwrap();
    let mut current = Events::open(&s.http, events_url(&format!("?cursor={head}")), Some(R)).await;
    assert_eq!(
        current.expect("ready").await["cursor"],
        head,
        "nothing missed"
    );
    drop(current);

    // since: what changed at or after the time of the second batch (its updatedAt).
    let since = at.as_str().unwrap().replace(':', "%3A");
    let mut by_time = Events::open(&s.http, events_url(&format!("?since={since}")), Some(R)).await;
    let replayed = by_time.expect("changes").await;
    assert_eq!(
        ops(&replayed),
        ["a.bin:delete", "d/b.bin:delete", "e.bin:add"]
    );
    assert_eq!(by_time.expect("ready").await["cursor"], head);
}

/// A resume point the server cannot replay gets `reset` and the end of the stream: a
/// cursor farther back than `max_replay` commits, one naming no commit of the bucket, one
/// of the bucket's earlier incarnation; so does a `since` too far back.
#[tokio::test]
async fn events_reset_on_a_cursor_too_old_or_unknown() {
    let s = Setup::start_with(BucketEventsConfig {
        max_replay: 2,
        ..quick_events()
    })
    .await;
    assert_eq!(
        s.create("orga/old", json!({}), W).await.status(),
        StatusCode::OK
    );
    let f = fixture_without_sha256(131, &[900]);
    s.upload("orga/old", &f, W).await;
    let url = |q: String| s.url(&format!("/api/buckets/orga/old/events{q}"));
    let mut live = Events::open(&s.http, url(String::new()), Some(R)).await;
    live.expect("ready").await;
    let mut cursors = Vec::new();
    for i in 0..4 {
        let lines = [add(&format!("f{i}"), &f, 1)];
        assert_eq!(s.batch("orga/old", &lines, W).await.0, StatusCode::OK);
        let c = live.expect("changes").await;
        assert_eq!(ops(&c), [format!("f{i}:add")]);
        cursors.push(c["cursor"].as_str().unwrap().to_string());
    }
    drop(live);
    let replay = |q: String| {
        let url = url(q);
        async { Events::open(&s.http, url, Some(R)).await }
    };
    // Within reach: two commits back.
    let mut ok = replay(format!("?cursor={}", cursors[1])).await;
    assert_eq!(ops(&ok.expect("changes").await), ["f2:add", "f3:add"]);
    ok.expect("ready").await;
    drop(ok);
    let unknown = format!("{}-{}", &cursors[0][..16], "ab".repeat(20));
    let created = s.json("/api/buckets/orga/old", R).await["createdAt"]
        .as_str()
        .unwrap()
        .replace(':', "%3A");
    for q in [
        format!("?cursor={}", cursors[0]),
        format!("?cursor={unknown}"),
        format!("?since={created}"),
    ] {
        let mut e = replay(q.clone()).await;
        assert_eq!(
            e.expect("reset").await,
            json!({"reason": "cursor_too_old"}),
            "{q}"
        );
        assert!(e.next().await.is_none(), "the stream ends after reset: {q}");
    }
    // Deleted and created again: a cursor of the old incarnation is no point of the new.
    let del = s
        .http
        .delete(s.url("/api/buckets/orga/old"))
        .bearer_auth(W)
        .send()
        .await
        .unwrap();
    assert_eq!(del.status(), StatusCode::OK);
    assert_eq!(
        s.create("orga/old", json!({}), W).await.status(),
        StatusCode::OK
    );
    let mut e = replay(format!("?cursor={}", cursors[3])).await;
    e.expect("reset").await;
    assert!(e.next().await.is_none());
}

/// A stream pings while idle, ends with `reconnect` and its cursor after the session's
/// length, follows batches made through another server on the store, and ends as soon as
/// its bucket turns private for a reader without a user token.
#[tokio::test]
async fn events_ping_reconnect_and_end_when_the_bucket_turns_private() {
    let s = Setup::start_with(BucketEventsConfig {
        ping_interval: std::time::Duration::from_millis(100),
        max_session: std::time::Duration::from_millis(1500),
        ..quick_events()
    })
    .await;
    assert_eq!(
        s.create("orga/live", json!({}), W).await.status(),
        StatusCode::OK
    );
    let f = fixture_without_sha256(141, &[800]);
    s.upload("orga/live", &f, W).await;
    let lines = [add("x", &f, 1)];
    assert_eq!(s.batch("orga/live", &lines, W).await.0, StatusCode::OK);

    let mut e = Events::open(&s.http, s.url("/api/buckets/orga/live/events"), Some(R)).await;
    let ready = e.expect("ready").await;
    assert!(ready["cursor"].is_string(), "the head's cursor: {ready}");
    let mut pings = 0;
    let reconnect = loop {
        let block = e.block().await.expect("reconnect before the end");
        if block == ": ping" {
            pings += 1;
        } else {
            assert!(block.starts_with("event: reconnect\n"), "{block}");
            break block;
        }
    };
    assert!(pings >= 3, "{pings} pings in 1.5 s at 100 ms");
    assert!(
        reconnect.contains(ready["cursor"].as_str().unwrap()),
        "{reconnect}"
    );
    assert!(e.block().await.is_none(), "the stream ends after reconnect");

    // A reader without a token, on a server without tokens sharing the store.
    let open = TestServer::start_hub(
        ServerConfig {
            bucket_events: quick_events(),
            ..ServerConfig::default()
        },
        s.store.clone(),
        Some(xet_hub::Repos::new(s.store.clone())),
    )
    .await;
    let mut anon = Events::open(&s.http, open.url("/api/buckets/orga/live/events"), None).await;
    anon.expect("ready").await;
    let lines = [json!({"type": "deleteFile", "path": "x"})];
    assert_eq!(s.batch("orga/live", &lines, W).await.0, StatusCode::OK);
    assert_eq!(
        ops(&anon.expect("changes").await),
        ["x:delete"],
        "through the other server"
    );
    let r = s
        .put_settings("orga/live", json!({"private": true}), W)
        .await;
    assert_eq!(r.status(), StatusCode::OK);
    assert!(anon.next().await.is_none(), "private: the stream ends");
    let again = s
        .http
        .get(open.url("/api/buckets/orga/live/events"))
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::NOT_FOUND);
}

/// `PUT /api/{type}s/{id}/settings` for repositories, as huggingface_hub's
/// `update_repo_settings` sends it (`visibility`), and `private` as others send it.
#[tokio::test]
async fn repository_settings_flip_privacy() {
    let s = Setup::start().await;
    let r = s
        .http
        .post(s.url("/api/repos/create"))
        .bearer_auth(W)
        .json(&json!({"name": "m", "organization": "orga", "type": "dataset"}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let put = |body: Value, token: &'static str| {
        let req = s
            .http
            .put(s.url("/api/datasets/orga/m/settings"))
            .bearer_auth(token)
            .json(&body);
        async move { req.send().await.unwrap().status() }
    };
    assert_eq!(
        put(json!({"visibility": "private"}), W).await,
        StatusCode::OK
    );
    assert_eq!(s.json("/api/datasets/orga/m", R).await["private"], true);
    assert_eq!(put(json!({"private": false}), W).await, StatusCode::OK);
    assert_eq!(s.json("/api/datasets/orga/m", R).await["private"], false);
    assert_eq!(
        put(json!({"private": true}), R).await,
        StatusCode::FORBIDDEN
    );
    assert_eq!(
        put(json!({"visibility": "protected"}), W).await,
        StatusCode::BAD_REQUEST
    );
    assert_eq!(
        put(json!({"gated": "auto"}), W).await,
        StatusCode::NOT_IMPLEMENTED
    );
    assert_eq!(put(json!({"gated": false}), W).await, StatusCode::OK);
    assert_eq!(s.json("/api/datasets/orga/m", R).await["private"], false);
}

/// Past `max_streams` open streams a new one is `503` with `Retry-After`; a stream whose
/// client left gives its place back.
#[tokio::test]
async fn event_streams_are_bounded() {
    let s = Setup::start_with(BucketEventsConfig {
        max_streams: 1,
        ..quick_events()
    })
    .await;
    assert_eq!(
        s.create("orga/busy", json!({}), W).await.status(),
        StatusCode::OK
    );
    let url = s.url("/api/buckets/orga/busy/events");
    let mut first = Events::open(&s.http, url.clone(), Some(R)).await;
    first.expect("ready").await;
    let open = || {
        s.http
            .get(&url)
            .bearer_auth(R)
            .header("accept", "text/event-stream")
            .send()
    };
    let busy = open().await.unwrap();
    assert_eq!(busy.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert!(busy.headers().contains_key("retry-after"));
    drop(first);
    let t = std::time::Instant::now();
    loop {
        let r = open().await.unwrap();
        if r.status() == StatusCode::OK {
            break;
        }
        assert!(t.elapsed().as_secs() < 10, "the place never came back");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
}

/// A graceful shutdown does not wait for event streams: they say `reconnect` and end.
#[tokio::test]
async fn a_shutdown_ends_event_streams_with_reconnect() {
    let store = memory_store().await;
    let repos = xet_hub::Repos::new(store.clone());
    let server = TestServer::start_hub(ServerConfig::default(), store, Some(repos)).await;
    let http = client();
    let r = http
        .post(server.url("/api/buckets/orga/stop"))
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    let mut e = Events::open(&http, server.url("/api/buckets/orga/stop/events"), None).await;
    e.expect("ready").await;
    let stopped = tokio::time::timeout(std::time::Duration::from_secs(10), server.stop()).await;
    assert!(stopped.is_ok(), "the shutdown waited for the stream");
    e.expect("reconnect").await;
    assert!(e.next().await.is_none());
}
