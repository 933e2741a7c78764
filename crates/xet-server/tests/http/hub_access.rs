//! Repository-bound access (issue 36, item 4): a CAS token minted for one repository
//! reads only the files that repository references; an open server on the same store
//! serves the files of public repositories (and files no repository references) only; a
//! commit claims a sha256 only with the bytes uploaded under that repository's token or
//! readable by the committer; a scoped user token sees nothing outside its scope, not
//! even whether it exists.

use std::sync::Arc;

use bytes::Bytes;
use reqwest::StatusCode;
use serde_json::{Value, json};
use xet_cas::Cas as _;
use xet_server::{RepoPattern, ServerConfig, Token};

use crate::common::{Fixture, TestServer, client, fixture, memory_store};

const W: &str = "acc-w";
const R: &str = "acc-r";
/// Reads and writes `orga/*` only.
const S: &str = "acc-scoped";

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
                Token::write(S).scoped(RepoPattern::parse("orga/*").unwrap()),
            ],
            cas_token_key: Some([5; 32]),
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
        self.http
            .get(self.url(path))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    async fn create(&self, id: &str, private: bool, token: &str) -> StatusCode {
        let (org, name) = id.split_once('/').unwrap();
        self.http
            .post(self.url("/api/repos/create"))
            .bearer_auth(token)
            .json(&json!({"name": name, "organization": org, "private": private}))
            .send()
            .await
            .unwrap()
            .status()
    }

    /// Commit `f` as `path` (an `lfsFile` line) to `repo` with `token`.
    async fn commit_lfs(&self, repo: &str, path: &str, f: &Fixture, token: &str) -> StatusCode {
        let sha = xet_hash::hex::encode(&<sha2::Sha256 as sha2::Digest>::digest(&f.data));
        let body = format!(
            "{}\n{}\n",
            json!({"key": "header", "value": {"summary": "s"}}),
            json!({"key": "lfsFile", "value": {"path": path, "algo": "sha256", "oid": sha, "size": f.data.len()}})
        );
        self.http
            .post(self.url(&format!("/api/models/{repo}/commit/main")))
            .bearer_auth(token)
            .header("content-type", "application/x-ndjson")
            .body(body)
            .send()
            .await
            .unwrap()
            .status()
    }

    /// A CAS token minted for `repo` through its token route.
    async fn cas_token(&self, repo: &str, kind: &str, token: &str) -> String {
        let r = self
            .get(&format!("/api/models/{repo}/xet-{kind}-token/main"), token)
            .await;
        assert_eq!(r.status(), StatusCode::OK, "{kind} token of {repo}");
        r.json::<Value>().await.unwrap()["accessToken"]
            .as_str()
            .unwrap()
            .to_string()
    }

    async fn reconstruct(
        &self,
        server: &TestServer,
        f: &Fixture,
        token: Option<&str>,
    ) -> StatusCode {
        let mut r = self
            .http
            .get(server.url(&format!("/v1/reconstructions/{}", f.file)));
        if let Some(t) = token {
            r = r.bearer_auth(t);
        }
        r.send().await.unwrap().status()
    }
}

/// The xorb of `f` in the store (as any uploader's would be), its shard not yet.
async fn put_xorb(store: &xet_store::MemoryStore, f: &Fixture) {
    store
        .put_xorb(&f.xorb, Bytes::from(f.xorb_body.clone()).into())
        .await
        .unwrap();
}

async fn put_all(store: &xet_store::MemoryStore, f: &Fixture) {
    put_xorb(store, f).await;
    store.put_shard(Bytes::from(f.shard.clone())).await.unwrap();
}

#[tokio::test]
async fn cas_tokens_and_open_servers_read_only_what_they_may() {
    let s = Setup::start().await;
    assert_eq!(s.create("orga/pub", false, W).await, StatusCode::OK);
    assert_eq!(s.create("orgb/secret", true, W).await, StatusCode::OK);
    let (public, secret, plain) = (
        fixture(31, &[3000, 5000]),
        fixture(32, &[4000, 2000]),
        fixture(33, &[1000]),
    );
    for f in [&public, &secret, &plain] {
        put_all(&s.store, f).await;
    }
    assert_eq!(
        s.commit_lfs("orga/pub", "p.bin", &public, W).await,
        StatusCode::OK
    );
    assert_eq!(
        s.commit_lfs("orgb/secret", "s.bin", &secret, W).await,
        StatusCode::OK
    );

    // A read token minted for the public repository: its file, nothing else, and the
    // others answer as missing ones do.
    let read = s.cas_token("orga/pub", "read", R).await;
    assert_eq!(
        s.reconstruct(&s.server, &public, Some(&read)).await,
        StatusCode::OK
    );
    for f in [&secret, &plain] {
        assert_eq!(
            s.reconstruct(&s.server, f, Some(&read)).await,
            StatusCode::NOT_FOUND
        );
        let head = s
            .http
            .head(s.url(&format!("/v1/files/{}", f.file)))
            .bearer_auth(&read)
            .send()
            .await
            .unwrap();
        assert_eq!(head.status(), StatusCode::NOT_FOUND);
    }
    let batch = s
        .http
        .get(s.url(&format!(
            "/v1/reconstructions?file_id={}&file_id={}",
            public.file, secret.file
        )))
        .bearer_auth(&read)
        .send()
        .await
        .unwrap();
    let files = batch.json::<Value>().await.unwrap()["files"].clone();
    let names: Vec<&String> = files.as_object().unwrap().keys().collect();
    assert_eq!(names, [&public.file.to_string()]);
    // The repository's own token reads it; a user token reads everything.
    let secret_read = s.cas_token("orgb/secret", "read", R).await;
    assert_eq!(
        s.reconstruct(&s.server, &secret, Some(&secret_read)).await,
        StatusCode::OK
    );
    assert_eq!(
        s.reconstruct(&s.server, &secret, Some(R)).await,
        StatusCode::OK
    );

    // An open server on the same store: public repositories' files and files no
    // repository references, never a private repository's.
    let open = TestServer::start_hub(
        ServerConfig {
            cas_token_key: Some([5; 32]),
            ..Default::default()
        },
        s.store.clone(),
        Some(xet_hub::Repos::new(s.store.clone())),
    )
    .await;
    assert_eq!(s.reconstruct(&open, &public, None).await, StatusCode::OK);
    assert_eq!(s.reconstruct(&open, &plain, None).await, StatusCode::OK);
    assert_eq!(
        s.reconstruct(&open, &secret, None).await,
        StatusCode::NOT_FOUND
    );
    // Nor can a writer there commit the private file into a public repository to
    // read it through that one.
    let open_setup = Setup {
        server: open,
        store: s.store.clone(),
        http: client(),
    };
    assert_eq!(
        open_setup
            .commit_lfs("orga/pub", "stolen.bin", &secret, "x")
            .await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
}

#[tokio::test]
async fn claims_need_the_bytes_and_scoped_tokens_see_only_their_scope() {
    let s = Setup::start().await;
    assert_eq!(s.create("orga/a", false, S).await, StatusCode::OK);
    assert_eq!(s.create("orgb/b", true, W).await, StatusCode::OK);
    assert_eq!(s.create("orgb/open", false, W).await, StatusCode::OK);
    // Outside its scope a scoped token creates nothing and sees nothing: a public
    // repository and a missing one answer alike.
    assert_eq!(s.create("orgb/mine", false, S).await, StatusCode::FORBIDDEN);
    for path in [
        "/api/models/orgb/open",
        "/api/models/orgb/b",
        "/api/models/orgb/missing",
        "/api/models/orgb/open/tree/main",
        "/api/models/orgb/open/xet-read-token/main",
    ] {
        let r = s.get(path, S).await;
        assert_eq!(r.status(), StatusCode::NOT_FOUND, "{path}");
        let body = r.text().await.unwrap();
        assert!(!body.contains("private"), "{path}: {body}");
    }
    assert_eq!(
        s.get("/api/models/orga/a", S).await.status(),
        StatusCode::OK
    );

    // B's file, committed by an unscoped writer.
    let theirs = fixture(41, &[6000, 1000]);
    put_all(&s.store, &theirs).await;
    assert_eq!(
        s.commit_lfs("orgb/b", "t.bin", &theirs, W).await,
        StatusCode::OK
    );
    // The scoped writer cannot claim it into its repository: it has not the bytes.
    let before = s
        .get("/api/models/orga/a/revision/main", S)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(
        s.commit_lfs("orga/a", "t.bin", &theirs, S).await,
        StatusCode::UNPROCESSABLE_ENTITY
    );
    let after = s
        .get("/api/models/orga/a/revision/main", S)
        .await
        .text()
        .await
        .unwrap();
    assert_eq!(before, after, "the refused commit changed nothing");
    // Uploading the same bytes under orga/a's write token gives it them: then the
    // claim is good, and orga/a's read token reads the file.
    let write = s.cas_token("orga/a", "write", S).await;
    put_xorb(&s.store, &theirs).await;
    let r = s
        .http
        .post(s.url("/v1/shards"))
        .bearer_auth(&write)
        .body(theirs.shard.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), StatusCode::OK);
    assert_eq!(
        s.commit_lfs("orga/a", "t.bin", &theirs, S).await,
        StatusCode::OK
    );
    let read = s.cas_token("orga/a", "read", S).await;
    assert_eq!(
        s.reconstruct(&s.server, &theirs, Some(&read)).await,
        StatusCode::OK
    );
    // An unscoped writer may claim what it can read anywhere.
    let other = fixture(42, &[2500]);
    put_all(&s.store, &other).await;
    assert_eq!(
        s.commit_lfs("orgb/b", "o.bin", &other, W).await,
        StatusCode::OK
    );
    assert_eq!(
        s.commit_lfs("orgb/open", "o.bin", &other, W).await,
        StatusCode::OK
    );
    // The scoped token on the CAS routes: files of its repositories only.
    assert_eq!(
        s.reconstruct(&s.server, &theirs, Some(S)).await,
        StatusCode::OK
    );
    assert_eq!(
        s.reconstruct(&s.server, &other, Some(S)).await,
        StatusCode::NOT_FOUND
    );
}
