//! File reconstructions (v1, v2, batch) and their ranges.

use crate::common::*;
use crate::support::*;
use reqwest::StatusCode;
use serde_json::Value;
use xet_cas::wire::ReconstructionV2;
use xet_cas::{ByteRange, Reconstruction};
use xet_hash::MerkleHash;
use xet_server::ServerConfig;

#[tokio::test]
async fn reconstruction_ranges() {
    let f = fixture(14, SIZES);
    let (s, _) = start_with(ServerConfig::default(), &f).await;
    let c = client();
    let n = f.data.len() as u64;
    // Inclusive end; trims to chunk granularity with offset_into_first_range.
    for (start, end) in [
        (0, n),
        (0, 1),
        (5, 6),
        (9000, 9001),
        (8999, 29001),
        (n - 1, n),
        (12345, 40000),
    ] {
        let got = download(&c, &s.url, None, &f.file, Some(ByteRange::new(start, end))).await;
        assert_eq!(got, f.data[start as usize..end as usize], "{start}..{end}");
    }
    // The ranged answer only has the overlapping terms' chunks.
    let w: ReconstructionV2 = v2(&c, &s, &f.file, Some("bytes=30000-30009"))
        .await
        .json()
        .await
        .unwrap();
    let rec = Reconstruction::from_v2(&w).unwrap();
    assert_eq!(rec.terms.len(), 1);
    assert_eq!(rec.offset_into_first_range, 30000 - 29000);
    // End past the file is clamped.
    let w: ReconstructionV2 = v2(&c, &s, &f.file, Some(&format!("bytes=50000-{}", n + 1000)))
        .await
        .json()
        .await
        .unwrap();
    let rec = Reconstruction::from_v2(&w).unwrap();
    assert_eq!(rec.offset_into_first_range, 50000 - 48000);
    assert_eq!(rec.terms.last().unwrap().chunks.end, SIZES.len() as u32);
    // `S-` and `-N`.
    let a: ReconstructionV2 = v2(&c, &s, &f.file, Some("bytes=50000-"))
        .await
        .json()
        .await
        .unwrap();
    let b: ReconstructionV2 = v2(&c, &s, &f.file, Some(&format!("bytes=-{}", n - 50000)))
        .await
        .json()
        .await
        .unwrap();
    assert_eq!(a.terms, b.terms);
    assert_eq!(a.offset_into_first_range, b.offset_into_first_range);
    // Start at or past the end: 416 with Content-Range, JSON reason.
    for r in [format!("bytes={n}-"), format!("bytes={}-{}", n + 5, n + 10)] {
        let resp = v2(&c, &s, &f.file, Some(&r)).await;
        assert_eq!(
            resp.headers()["content-range"],
            format!("bytes */{n}").as_str()
        );
        let (st, code, _) = json_error(resp).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::RANGE_NOT_SATISFIABLE, "range_not_satisfiable")
        );
    }
    // v1 honours the same ranges.
    let resp = c
        .get(s.url(&format!("/v1/reconstructions/{}", f.file)))
        .header("range", format!("bytes={n}-"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 416);
    // Malformed or multi-range: 400.
    for r in ["bytes=5-1", "bytes=x-", "items=0-5", "bytes=0-1,5-6"] {
        let (st, code, _) = json_error(v2(&c, &s, &f.file, Some(r)).await).await;
        assert_eq!(
            (st, code.as_str()),
            (StatusCode::BAD_REQUEST, "bad_range"),
            "{r}"
        );
    }
}

#[tokio::test]
async fn reconstruction_of_unknown_and_empty_files() {
    let (s, _) = start(ServerConfig::default()).await;
    let c = client();
    let unknown = fixture(15, &[100]).file;
    let (st, code, reason) = json_error(v2(&c, &s, &unknown, None).await).await;
    assert_eq!((st, code.as_str()), (StatusCode::NOT_FOUND, "not_found"));
    assert!(reason.contains(&unknown.to_string()));
    assert_eq!(
        c.get(s.url(&format!("/v1/reconstructions/{unknown}")))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    assert_eq!(
        c.head(s.url(&format!("/v1/files/{unknown}")))
            .send()
            .await
            .unwrap()
            .status(),
        404
    );
    // The empty file needs no registration.
    let w: ReconstructionV2 = v2(&c, &s, &MerkleHash::ZERO, None)
        .await
        .json()
        .await
        .unwrap();
    assert!(w.terms.is_empty());
    let h = c
        .head(s.url(&format!("/v1/files/{}", MerkleHash::ZERO)))
        .send()
        .await
        .unwrap();
    assert_eq!(
        (
            h.status().as_u16(),
            h.headers()["content-length"].to_str().unwrap()
        ),
        (200, "0")
    );
}

#[tokio::test]
async fn batch_reconstruction() {
    let a = fixture(16, SIZES);
    let b = fixture(17, &[3000, 5000]);
    let (s, store) = start_with(ServerConfig::default(), &a).await;
    put_fixture(&*store, &b).await;
    let c = client();
    let unknown = fixture(18, &[100]).file;
    let url = s.url(&format!(
        "/v1/reconstructions?file_id={}&file_id={}&file_id={unknown}",
        a.file, b.file
    ));
    let v: Value = c.get(&url).send().await.unwrap().json().await.unwrap();
    let files = v["files"].as_object().unwrap();
    assert_eq!(files.len(), 2);
    assert_eq!(files[&a.file.to_string()].as_array().unwrap().len(), 1);
    let fi = v["fetch_info"].as_object().unwrap();
    assert!(fi.contains_key(&a.xorb.to_string()) && fi.contains_key(&b.xorb.to_string()));
    assert_eq!(
        c.get(s.url("/v1/reconstructions"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
    assert_eq!(
        c.get(s.url("/v1/reconstructions?file_id=zz"))
            .send()
            .await
            .unwrap()
            .status(),
        400
    );
}
