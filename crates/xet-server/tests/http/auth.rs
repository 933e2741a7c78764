//! Bearer tokens on every route, and token refresh.

use crate::common::*;
use crate::support::*;
use std::time::Duration;
use xet_cas::Cas;
use xet_cas::wire::{Grant, ReconstructionV2, TokenRefresh};
use xet_server::{ServerConfig, Token};

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Need {
    Read,
    Write,
}

#[tokio::test]
async fn auth_matrix() {
    let f = fixture(24, SIZES);
    let config = ServerConfig {
        tokens: vec![Token::read("reader"), Token::write("writer")],
        ..Default::default()
    };
    let (s, store) = start_with(config, &f).await;
    let c = client();
    let x = f.xorb;
    let other = fixture(25, SIZES);
    let routes: Vec<(reqwest::Method, String, Need, Option<Vec<u8>>)> = vec![
        (
            reqwest::Method::GET,
            format!("/v2/reconstructions/{}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/reconstructions/{}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/reconstructions?file_id={}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::HEAD,
            format!("/v1/files/{}", f.file),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::HEAD,
            format!("/v1/xorbs/default/{x}"),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::GET,
            format!("/v1/chunks/default/{}", f.chunk_hashes[0]),
            Need::Read,
            None,
        ),
        (
            reqwest::Method::POST,
            "/v1/telemetry".into(),
            Need::Read,
            Some(b"{}".to_vec()),
        ),
        (reqwest::Method::GET, "/v1/token".into(), Need::Read, None),
        (
            reqwest::Method::POST,
            format!("/v1/xorbs/default/{x}"),
            Need::Write,
            Some(f.xorb_body.clone()),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/xorb-grants/default/{}", other.xorb),
            Need::Write,
            Some(serde_json::to_vec(&grant_request(&other.xorb_body)).unwrap()),
        ),
        (
            reqwest::Method::POST,
            format!("/v1/xorb-commits/default/{x}/grant/abc"),
            Need::Write,
            Some(vec![]),
        ),
        (
            reqwest::Method::POST,
            "/v1/shards".into(),
            Need::Write,
            Some(f.shard.clone()),
        ),
        (
            reqwest::Method::POST,
            "/v2/shards".into(),
            Need::Write,
            Some(f.shard.clone()),
        ),
    ];
    for (method, path, need, body) in &routes {
        for token in [None, Some("wrong"), Some("reader"), Some("writer")] {
            let mut req = c.request(method.clone(), s.url(path));
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            if let Some(b) = body {
                req = req.body(b.clone());
            }
            let resp = req.send().await.unwrap();
            let st = resp.status().as_u16();
            let want_denied = match (token, need) {
                (None | Some("wrong"), _) => Some(401),
                (Some("reader"), Need::Write) => Some(403),
                _ => None,
            };
            match want_denied {
                Some(code) => {
                    assert_eq!(st, code, "{method} {path} token={token:?}");
                    if code == 401 {
                        assert_eq!(resp.headers()["www-authenticate"], "Bearer");
                    }
                    if *method != reqwest::Method::HEAD {
                        let (_, err, _) = json_error(resp).await;
                        assert_eq!(
                            err,
                            if code == 401 {
                                "unauthorized"
                            } else {
                                "forbidden"
                            }
                        );
                    }
                }
                None => assert!(
                    st != 401 && st != 403,
                    "{method} {path} token={token:?}: {st}"
                ),
            }
        }
    }
    // Malformed Authorization headers.
    for h in ["writer", "Basic writer", "Bearer", "Bearer  "] {
        let resp = c
            .get(s.url("/v1/token"))
            .header("authorization", h)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 401, "{h:?}");
    }
    // Health and presigned URLs need no token.
    assert_eq!(c.get(s.url("/health")).send().await.unwrap().status(), 200);
    let w: ReconstructionV2 = c
        .get(s.url(&format!("/v2/reconstructions/{}", f.file)))
        .bearer_auth("reader")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let url = &w.xorbs[&x.to_string()][0].url;
    assert_eq!(c.get(url).send().await.unwrap().status(), 200);
    // Grant upload URLs too.
    let g: Grant = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", other.xorb)))
        .bearer_auth("writer")
        .json(&grant_request(&other.xorb_body))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        put_grant(&c, &g, other.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        other.xorb, g.id
    ));
    assert_eq!(
        c.post(&commit)
            .bearer_auth("reader")
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    assert_eq!(
        c.post(&commit)
            .bearer_auth("writer")
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    assert!(store.xorb_size(&other.xorb).await.unwrap().is_some());
}

#[tokio::test]
async fn token_refresh_route() {
    let (s, _) = start(ServerConfig {
        tokens: vec![Token::read("r"), Token::write("w")],
        token_ttl: Duration::from_secs(600),
        ..Default::default()
    })
    .await;
    let c = client();
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let t: TokenRefresh = c
        .get(s.url("/v1/token"))
        .bearer_auth("r")
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.access_token, "r");
    assert!(t.exp >= now + 599 && t.exp <= now + 602, "{}", t.exp);
    assert_eq!(t.cas_url, s.url);
    assert_eq!(
        c.get(s.url("/v1/token")).send().await.unwrap().status(),
        401
    );
    // Without auth it still answers (hf_xet needs some token string).
    let (open, _) = start(ServerConfig::default()).await;
    let t: TokenRefresh = c
        .get(open.url("/v1/token"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(t.cas_url, open.url);
}
