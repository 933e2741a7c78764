//! Xorb uploads through grants: issue, signed upload, commit.

use crate::common::*;
use crate::support::*;
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;
use xet_cas::Cas;
use xet_server::ServerConfig;
use xet_server::grants::{amz_checksum_header, crc64_nvme};

#[tokio::test]
async fn grant_flow() {
    let (s, store) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(6, SIZES);
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    assert_eq!(g.method, "PUT");
    assert!(
        g.url
            .starts_with(&format!("{}/_grant-upload/{}?X-Xet-Expires=", s.url, g.id)),
        "{}",
        g.url
    );
    assert_eq!(g.headers["Content-Length"], f.xorb_body.len().to_string());
    assert_eq!(
        g.headers["x-amz-checksum-crc64nvme"],
        amz_checksum_header(crc64_nvme(&f.xorb_body))
    );

    let resp = put_grant(&c, &g, f.xorb_body.clone()).send().await.unwrap();
    assert_eq!(resp.status(), 200, "{}", resp.text().await.unwrap());
    // Not stored before the commit.
    assert_eq!(store.xorb_size(&f.xorb).await.unwrap(), None);
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        f.xorb, g.id
    ));
    let r: Value = c.post(&commit).send().await.unwrap().json().await.unwrap();
    assert_eq!(r, serde_json::json!({"was_inserted": true}));
    assert_eq!(
        store.xorb_size(&f.xorb).await.unwrap(),
        Some(f.xorb_body.len() as u64)
    );
    // The grant is used up.
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 404);
    // Existing xorb: 200 instead of a grant.
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", f.xorb)))
        .json(&grant_request(&f.xorb_body))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.json::<Value>().await.unwrap(),
        serde_json::json!({"was_inserted": false})
    );
}

#[tokio::test]
async fn grant_upload_checks() {
    let (s, store) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(7, SIZES);
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    let commit = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        f.xorb, g.id
    ));

    // Commit before any upload: 404 (hf_xet then asks for a new grant).
    let (st, code, reason) = json_error(c.post(&commit).send().await.unwrap()).await;
    assert_eq!((st, code.as_str()), (StatusCode::NOT_FOUND, "not_found"));
    assert!(reason.contains("no data arrived"), "{reason}");

    // CRC mismatch: same length, one byte flipped.
    let mut bad = f.xorb_body.clone();
    bad[100] ^= 1;
    let (st, code, _) = json_error(put_grant(&c, &g, bad).send().await.unwrap()).await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "checksum_mismatch")
    );
    // Length mismatch (short and long).
    let (st, code, _) = json_error(
        put_grant(&c, &g, f.xorb_body[1..].to_vec())
            .send()
            .await
            .unwrap(),
    )
    .await;
    assert_eq!(
        (st, code.as_str()),
        (StatusCode::BAD_REQUEST, "length_mismatch")
    );
    let mut long = f.xorb_body.clone();
    long.push(0);
    let (_, code, _) = json_error(put_grant(&c, &g, long).send().await.unwrap()).await;
    assert_eq!(code, "length_mismatch");
    // Wrong checksum header.
    let resp = put_grant(&c, &g, f.xorb_body.clone())
        .header("x-amz-checksum-crc64nvme", "AAAAAAAAAAA=")
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "checksum_mismatch");
    // Failed uploads leave nothing to commit.
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 404);

    // Tampered signature / id / missing query: 403.
    let forged = g.url.replace("X-Xet-Signature=", "X-Xet-Signature=00");
    let resp = c
        .put(&forged)
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(
        json_error(resp).await,
        (
            StatusCode::FORBIDDEN,
            "bad_signature".into(),
            "the grant upload URL signature is not valid".into()
        )
    );
    let unsigned = g.url.split('?').next().unwrap().to_string();
    assert_eq!(
        c.put(&unsigned)
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    let other_id = g.url.replace(&g.id, "00000000000000000000000000000000");
    assert_eq!(
        c.put(&other_id)
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );
    let later = {
        let (base, q) = g.url.split_once('?').unwrap();
        let exp: u64 = q
            .split('&')
            .next()
            .unwrap()
            .trim_start_matches("X-Xet-Expires=")
            .parse()
            .unwrap();
        format!(
            "{base}?{}",
            q.replace(
                &format!("X-Xet-Expires={exp}"),
                &format!("X-Xet-Expires={}", exp + 1000)
            )
        )
    };
    assert_eq!(
        c.put(&later)
            .body(f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        403
    );

    // The grant still works after all that; committing under another xorb's hash does not.
    assert_eq!(
        put_grant(&c, &g, f.xorb_body.clone())
            .send()
            .await
            .unwrap()
            .status(),
        200
    );
    let other = fixture(8, SIZES);
    let wrong = s.url(&format!(
        "/v1/xorb-commits/default/{}/grant/{}",
        other.xorb, g.id
    ));
    assert_eq!(c.post(&wrong).send().await.unwrap().status(), 404);
    assert_eq!(c.post(&commit).send().await.unwrap().status(), 200);
    assert_eq!(
        store.xorb_size(&f.xorb).await.unwrap(),
        Some(f.xorb_body.len() as u64)
    );
    assert_eq!(store.xorb_size(&other.xorb).await.unwrap(), None);
}

#[tokio::test]
async fn grant_with_invalid_xorb_is_rejected_at_commit() {
    let (s, store) = start(ServerConfig::default()).await;
    let before = objects(&store);
    let c = client();
    let f = fixture(9, SIZES);
    let garbage = vec![1u8; 500];
    let g = get_grant(&c, &s, &f.xorb, &garbage).await;
    assert_eq!(
        put_grant(&c, &g, garbage).send().await.unwrap().status(),
        200
    );
    let resp = c
        .post(s.url(&format!(
            "/v1/xorb-commits/default/{}/grant/{}",
            f.xorb, g.id
        )))
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.1, "invalid_xorb");
    assert_eq!(objects(&store), before);
}

#[tokio::test]
async fn grant_requests_are_validated() {
    let (s, _) = start(ServerConfig::default()).await;
    let c = client();
    let f = fixture(10, SIZES);
    let url = s.url(&format!("/v1/xorb-grants/default/{}", f.xorb));
    for body in [
        "not json".to_string(),
        r#"{"length": 10}"#.to_string(),
        r#"{"length": 10, "checksum": {"algo": "sha256", "value": "1"}}"#.to_string(),
        r#"{"length": 10, "checksum": {"algo": "crc64nvme", "value": "0x12"}}"#.to_string(),
        r#"{"length": 0, "checksum": {"algo": "crc64nvme", "value": "0"}}"#.to_string(),
    ] {
        let resp = c
            .post(&url)
            .header("content-type", "application/json")
            .body(body.clone())
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 400, "{body}");
        let _ = json_error(resp).await;
    }
}

#[tokio::test]
async fn expired_grant_is_forbidden() {
    let (s, store) = start(ServerConfig {
        url_ttl: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let before = objects(&store);
    let c = client();
    let f = fixture(11, SIZES);
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let (st, code, _) =
        json_error(put_grant(&c, &g, f.xorb_body.clone()).send().await.unwrap()).await;
    assert_eq!((st, code.as_str()), (StatusCode::FORBIDDEN, "url_expired"));
    assert_eq!(
        c.post(s.url(&format!(
            "/v1/xorb-commits/default/{}/grant/{}",
            f.xorb, g.id
        )))
        .send()
        .await
        .unwrap()
        .status(),
        404
    );
    assert_eq!(objects(&store), before);
}

#[tokio::test]
async fn grants_disabled() {
    let (s, _) = start(ServerConfig {
        allow_grants: false,
        ..Default::default()
    })
    .await;
    let c = client();
    let f = fixture(12, SIZES);
    let resp = c
        .post(s.url(&format!("/v1/xorb-grants/default/{}", f.xorb)))
        .json(&grant_request(&f.xorb_body))
        .send()
        .await
        .unwrap();
    assert_eq!(json_error(resp).await.0, StatusCode::NOT_FOUND);
    let resp = c
        .post(s.url(&format!("/v1/xorb-commits/default/{}/grant/abc", f.xorb)))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    // Direct upload still works.
    let resp = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
}
