//! The S3 backend against a real S3-compatible server on loopback: moto (`moto[server]`,
//! pinned in `xet_testdata::MOTO_VERSION`, installed into `target/refvenv`), started by
//! the tests themselves, a fresh bucket per test. Without moto the tests print SKIP and
//! pass, unless `XET_REQUIRE_REFERENCE=1` (`cargo xtask test`), which makes them fail.
//!
//! Servers without conditional writes are reproduced with a loopback proxy in front of
//! moto that drops the `If-None-Match` header (as some S3-compatible servers ignore it).

use std::time::{Duration, Instant};

use bytes::Bytes;
use xet_cas::Cas;
use xet_cas_conformance::{self as conformance, Subject};
use xet_store::{DedupKeys, ObjectBackend, ObjectKey, StoreConfig};
use xet_store_s3::{ConditionalPut, S3Backend, S3Config, S3Credentials, open_store};
use xet_testdata::{MotoServer, shared_moto};

fn config(endpoint: &str, bucket: &str, prefix: &str, mode: ConditionalPut) -> S3Config {
    let mut c = S3Config::new(bucket, prefix).expect("valid bucket and prefix");
    c.endpoint = Some(endpoint.to_string());
    c.region = Some("us-east-1".into());
    c.credentials = Some(S3Credentials {
        access_key_id: "testing".into(),
        secret_access_key: "testing".into(),
        session_token: None,
    });
    c.conditional_put = mode;
    c
}

fn fresh(moto: &MotoServer, prefix: &str, mode: ConditionalPut) -> S3Config {
    let bucket = moto.fresh_bucket().expect("create bucket");
    config(&moto.endpoint(), &bucket, prefix, mode)
}

async fn backend(moto: &MotoServer, prefix: &str, mode: ConditionalPut) -> S3Backend {
    S3Backend::open(fresh(moto, prefix, mode))
        .await
        .expect("open backend")
}

/// Keys of every object in `bucket`, straight from the server (ListObjectsV2).
async fn raw_keys(moto: &MotoServer, bucket: &str) -> Vec<String> {
    let body = reqwest::get(format!("{}/{bucket}?list-type=2", moto.endpoint()))
        .await
        .expect("list")
        .text()
        .await
        .expect("list body");
    let mut keys: Vec<String> = body
        .split("<Key>")
        .skip(1)
        .filter_map(|s| s.split("</Key>").next())
        .map(str::to_string)
        .collect();
    keys.sort();
    keys
}

async fn raw_put(moto: &MotoServer, bucket: &str, key: &str, body: &'static [u8]) {
    let r = reqwest::Client::new()
        .put(format!("{}/{bucket}/{key}", moto.endpoint()))
        .body(body)
        .send()
        .await
        .expect("put");
    assert!(r.status().is_success(), "raw put {key}: {}", r.status());
}

// ---------------------------------------------------------------------------------------
// The backend conformance suite, one case per test, a fresh bucket each.

macro_rules! backend_cases {
    ($prefix:expr, $mode:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(moto) = shared_moto() else { return };
                let b = super::backend(moto, $prefix, $mode).await;
                assert_eq!(b.conditional_puts(), $mode != ConditionalPut::Disabled);
                xet_cas_conformance::backend::$case(&b).await;
            }
        )*
    };
}

mod backend_conformance {
    use super::*;
    backend_cases!("", ConditionalPut::Auto;
        put_if_absent, put_parts, ranged_reads, listing, deletion, racing_writers, no_partial_objects);
}

mod backend_conformance_prefixed {
    use super::*;
    backend_cases!("stores/one", ConditionalPut::Required;
        put_if_absent, put_parts, ranged_reads, listing, deletion, racing_writers, no_partial_objects);
}

/// Without conditional writes (explicitly off): everything but "exactly one racing
/// writer wins", which only a conditional write can give.
mod backend_conformance_unconditional {
    use super::*;
    backend_cases!("p", ConditionalPut::Disabled;
        put_if_absent, put_parts, ranged_reads, listing, deletion, no_partial_objects);
}

// ---------------------------------------------------------------------------------------
// The Cas conformance suite on StoreCas<S3Backend>, a fresh bucket per case.

async fn subject(moto: &MotoServer, prefix: &str, store: StoreConfig) -> Subject {
    let cfg = fresh(moto, prefix, ConditionalPut::Auto);
    let s = xet_store_s3::open_store_with(cfg, store)
        .await
        .expect("open store");
    Subject::new(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_conformance() {
    let Some(moto) = shared_moto() else { return };
    conformance::run_all(|| subject(moto, "cas", StoreConfig::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_conformance_unkeyed_no_prefix() {
    let Some(moto) = shared_moto() else { return };
    let config = StoreConfig {
        dedup_keys: DedupKeys::Unkeyed,
        ..StoreConfig::default()
    };
    conformance::run_all(|| subject(moto, "", config.clone())).await;
}

// ---------------------------------------------------------------------------------------
// The repository-store suite: two stores on one bucket and prefix (two servers), a fresh
// bucket per case.

async fn twins(moto: &MotoServer) -> conformance::repos::Twins {
    let cfg = fresh(moto, "hub/store", ConditionalPut::Auto);
    let a = open_store(cfg.clone()).await.expect("open a");
    let b = open_store(cfg).await.expect("open b");
    conformance::repos::Twins::new(a, b)
}

macro_rules! repo_cases {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(moto) = shared_moto() else { return };
                xet_cas_conformance::repos::$case(&super::twins(moto).await).await;
            }
        )*
    };
}

mod repo_store_conformance {
    use super::*;
    repo_cases!(
        records,
        commits,
        branches,
        concurrent_commits,
        visible_across_instances,
        stale_parent,
        sha256_claims,
        verified_sha256
    );
}

/// Hub objects are `PREFIX/hub/…` keys nested several levels deep; listing finds them
/// under any prefix of theirs and ignores foreign keys among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hub_keys_nest_under_the_prefix() {
    let Some(moto) = shared_moto() else { return };
    let cfg = fresh(moto, "team/xet", ConditionalPut::Auto);
    let bucket = cfg.bucket.clone();
    let b = S3Backend::open(cfg).await.unwrap();
    let (rk, bk) = ([0xab; 16], [0x01; 16]);
    let keys = [
        ObjectKey::hub_record(&rk),
        ObjectKey::hub_commit(&rk, &[0xcd; 20]),
        ObjectKey::hub_branch_version(&rk, &bk, 1),
        ObjectKey::hub_branch_version(&rk, &bk, 2),
        ObjectKey::hub_sha256(&[0xef; 32]),
    ];
    for k in &keys {
        assert_eq!(
            b.put_if_absent(k, Bytes::from_static(b"{}")).await,
            Ok(true),
            "{k}"
        );
        assert_eq!(
            b.put_if_absent(k, Bytes::from_static(b"[]")).await,
            Ok(false),
            "{k}"
        );
    }
    let branch = ObjectKey::hub_branch_prefix(&rk, &bk);
    raw_put(moto, &bucket, &format!("team/xet/{branch}README"), b"x").await;
    raw_put(moto, &bucket, "team/xet/hub/repos/x/record", b"x").await;
    assert_eq!(b.list(&branch).await.unwrap(), keys[2..4].to_vec());
    assert_eq!(
        b.list(&ObjectKey::hub_branches_prefix(&rk)).await.unwrap(),
        keys[2..4].to_vec()
    );
    let mut all = keys.to_vec();
    all.sort();
    assert_eq!(b.list("hub/").await.unwrap(), all);
    assert_eq!(b.list("").await.unwrap(), all);
    assert!(
        raw_keys(moto, &bucket)
            .await
            .contains(&format!("team/xet/{}", keys[2]))
    );
}

// ---------------------------------------------------------------------------------------
// Conditional writes.

/// moto honours `If-None-Match: *` on PutObject: the second conditional write of a key
/// is refused with 412 Precondition Failed, which object_store reports as AlreadyExists
/// and the backend as `Ok(false)`, leaving the first content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_put_refuses_an_existing_key() {
    use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
    let Some(moto) = shared_moto() else { return };
    let bucket = moto.fresh_bucket().unwrap();
    // Straight through object_store (signed requests, as the backend makes them).
    let raw = object_store::aws::AmazonS3Builder::new()
        .with_endpoint(moto.endpoint())
        .with_allow_http(true)
        .with_bucket_name(&bucket)
        .with_region("us-east-1")
        .with_access_key_id("testing")
        .with_secret_access_key("testing")
        .build()
        .unwrap();
    let path = object_store::path::Path::from("k");
    let create = |body: &'static [u8]| {
        raw.put_opts(
            &path,
            PutPayload::from_static(body),
            PutOptions::from(PutMode::Create),
        )
    };
    create(b"first").await.expect("first conditional write");
    match create(b"second").await {
        Err(object_store::Error::AlreadyExists { source, .. }) => {
            let m = source.to_string();
            assert!(m.contains("412") || m.contains("Precondition"), "{m}");
        }
        other => panic!("second conditional write: {other:?}"),
    }
    // Through the backend, for a metadata object (the dedup secret's kind).
    let b = S3Backend::open(config(
        &moto.endpoint(),
        &bucket,
        "",
        ConditionalPut::Required,
    ))
    .await
    .expect("moto honours conditional writes");
    assert!(b.conditional_puts());
    let key = ObjectKey::meta("dedup-secret");
    let first = Bytes::from_static(&[1; 32]);
    assert_eq!(b.put_if_absent(&key, first.clone()).await, Ok(true));
    assert_eq!(
        b.put_if_absent(&key, Bytes::from_static(&[2; 32])).await,
        Ok(false)
    );
    assert_eq!(b.get(&key).await, Ok(Some(first)));
    // The probe object of open() is gone and listing never shows foreign keys.
    assert_eq!(
        raw_keys(moto, &bucket).await,
        vec!["k".to_string(), "meta/dedup-secret".to_string()]
    );
    assert_eq!(b.list("").await.unwrap(), vec![key]);
}

/// A loopback proxy to moto that drops `If-None-Match`: a server that ignores
/// conditional writes and overwrites. Returns its endpoint.
async fn ignoring_proxy(upstream: String) -> String {
    use axum::body::Body;
    use axum::extract::Request;
    use axum::response::Response;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = reqwest::Client::new();
    let app = axum::Router::new().fallback(move |req: Request| {
        let client = client.clone();
        let upstream = upstream.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let mut out = client.request(parts.method, format!("{upstream}{pq}"));
            for (name, value) in &parts.headers {
                if name != "if-none-match" && name != "host" && name != "content-length" {
                    out = out.header(name, value);
                }
            }
            let r = out.body(body).send().await.unwrap();
            let mut resp = Response::builder().status(r.status());
            for (name, value) in r.headers() {
                if name != "content-length" && name != "transfer-encoding" {
                    resp = resp.header(name, value);
                }
            }
            resp.body(Body::from(r.bytes().await.unwrap())).unwrap()
        }
    });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    format!("http://{addr}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_ignoring_conditional_writes_is_detected() {
    let Some(moto) = shared_moto() else { return };
    let proxy = ignoring_proxy(moto.endpoint()).await;
    let bucket = moto.fresh_bucket().unwrap();
    let cfg = |mode| config(&proxy, &bucket, "s", mode);

    // Required: refused at open.
    let e = S3Backend::open(cfg(ConditionalPut::Required))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("does not honour conditional writes") && e.contains(&bucket),
        "{e}"
    );
    // Auto: detected; content-addressed objects fall back to HEAD + PUT.
    let b = S3Backend::open(cfg(ConditionalPut::Auto)).await.unwrap();
    assert!(!b.conditional_puts());
    let xorb = ObjectKey::xorb(&xet_hash::chunk_hash(b"x"));
    assert_eq!(
        b.put_if_absent(&xorb, Bytes::from_static(b"a")).await,
        Ok(true)
    );
    assert_eq!(
        b.put_if_absent(&xorb, Bytes::from_static(b"b")).await,
        Ok(false)
    );
    assert_eq!(b.get(&xorb).await, Ok(Some(Bytes::from_static(b"a"))));
    // ... but a metadata object is not created: a new store cannot be opened.
    let secret = ObjectKey::meta("dedup-secret");
    let e = b
        .put_if_absent(&secret, Bytes::from_static(&[7; 32]))
        .await
        .unwrap_err()
        .to_string();
    assert!(
        e.contains("conditional writes") && e.contains("s3-conditional-put off"),
        "{e}"
    );
    assert_eq!(b.get(&secret).await, Ok(None));
    let e = open_store(cfg(ConditionalPut::Auto)).await.unwrap_err();
    assert!(e.to_string().contains("meta/dedup-secret"), "{e}");
    // Likewise repository records and branch versions (a branch would lose commits);
    // commits and verified sha256s are content-addressed and written.
    let (rk, bk) = ([1; 16], [2; 16]);
    for key in [
        ObjectKey::hub_record(&rk),
        ObjectKey::hub_branch_version(&rk, &bk, 1),
    ] {
        let e = b
            .put_if_absent(&key, Bytes::from_static(b"{}"))
            .await
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("conditional writes") && e.contains("s3-conditional-put off"),
            "{e}"
        );
        assert_eq!(b.get(&key).await, Ok(None));
    }
    for key in [
        ObjectKey::hub_commit(&rk, &[3; 20]),
        ObjectKey::hub_sha256(&[4; 32]),
    ] {
        assert_eq!(
            b.put_if_absent(&key, Bytes::from_static(b"c")).await,
            Ok(true),
            "{key}"
        );
        assert_eq!(
            b.put_if_absent(&key, Bytes::from_static(b"c")).await,
            Ok(false),
            "{key}"
        );
    }

    // Off: the operator creates it (one process); then Auto opens it and never replaces it.
    let store = open_store(cfg(ConditionalPut::Disabled)).await.unwrap();
    let created = store.backend().get(&secret).await.unwrap().unwrap();
    assert_eq!(created.len(), 32);
    drop(store);
    let b = S3Backend::open(cfg(ConditionalPut::Auto)).await.unwrap();
    assert_eq!(
        b.put_if_absent(&secret, Bytes::from_static(&[9; 32])).await,
        Ok(false)
    );
    assert_eq!(b.get(&secret).await, Ok(Some(created.clone())));
    let store = xet_store_s3::open_store(cfg(ConditionalPut::Auto))
        .await
        .unwrap();
    conformance::populate(&store).await;
    conformance::check_populated(&store).await;
    assert_eq!(store.backend().get(&secret).await, Ok(Some(created)));
}

/// Without conditional writes, racing writers of one content-addressed key may each
/// report `true`, but every reader sees one complete object.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unconditional_racing_writers_leave_one_whole_object() {
    let Some(moto) = shared_moto() else { return };
    let b = backend(moto, "", ConditionalPut::Disabled).await;
    let key = ObjectKey::xorb(&xet_hash::chunk_hash(b"race"));
    let data = Bytes::from(vec![5u8; 300_000]);
    let put = || b.put_if_absent(&key, data.clone());
    let (r0, r1, r2, r3) = tokio::join!(put(), put(), put(), put());
    let wins = [r0, r1, r2, r3].map(|r| r.expect("put"));
    assert!(wins.iter().any(|w| *w), "{wins:?}");
    assert_eq!(b.get(&key).await, Ok(Some(data)));
}

// ---------------------------------------------------------------------------------------
// Opening, persistence, layout.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_and_missing_bucket_are_clear_errors() {
    let Some(moto) = shared_moto() else { return };
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let t = Instant::now();
    let e = S3Backend::open(config(
        &format!("http://127.0.0.1:{port}"),
        "some-bucket",
        "",
        ConditionalPut::Auto,
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("cannot reach bucket \"some-bucket\"") && e.contains(&port.to_string()),
        "{e}"
    );
    assert!(t.elapsed() < Duration::from_secs(30), "{:?}", t.elapsed());
    let e = S3Backend::open(config(
        &moto.endpoint(),
        "no-such-bucket",
        "x",
        ConditionalPut::Auto,
    ))
    .await
    .unwrap_err()
    .to_string();
    assert!(
        e.contains("bucket \"no-such-bucket\" does not exist"),
        "{e}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_everything_and_instances_share_a_prefix() {
    let Some(moto) = shared_moto() else { return };
    let cfg = fresh(moto, "shared/store", ConditionalPut::Auto);
    let a = open_store(cfg.clone()).await.unwrap();
    let b = open_store(cfg.clone()).await.unwrap();
    conformance::populate(&a).await;
    let stats = a.stats();
    // b sees the files after a refresh, with the same dedup secret.
    assert_eq!(b.refresh().await.unwrap(), 2);
    conformance::check_populated(&b).await;
    let chunk = conformance::dedup_probe();
    let (da, db) = (
        a.dedup_shard(&chunk).await.unwrap().unwrap(),
        b.dedup_shard(&chunk).await.unwrap().unwrap(),
    );
    assert_eq!(
        conformance::dedup_answer_key(&da),
        conformance::dedup_answer_key(&db)
    );
    drop((a, b));
    let c = open_store(cfg.clone()).await.unwrap();
    let again = c.stats();
    assert_eq!(
        (again.files, again.shards, again.dedup_chunks),
        (stats.files, stats.shards, stats.dedup_chunks)
    );
    conformance::check_populated(&c).await;

    // Another prefix of the same bucket is another, empty store.
    let mut other = cfg.clone();
    other.prefix = "shared/store2".into();
    let d = open_store(other).await.unwrap();
    assert_eq!(d.stats().shards, 0);
    conformance::empty_store(&d).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn layout_is_prefix_slash_key_and_foreign_objects_are_ignored() {
    let Some(moto) = shared_moto() else { return };
    let cfg = fresh(moto, "team/xet", ConditionalPut::Auto);
    let bucket = cfg.bucket.clone();
    let store = open_store(cfg.clone()).await.unwrap();
    conformance::populate(&store).await;
    let keys = raw_keys(moto, &bucket).await;
    let xorbs: Vec<_> = keys
        .iter()
        .filter_map(|k| k.strip_prefix("team/xet/xorbs/"))
        .collect();
    let shards: Vec<_> = keys
        .iter()
        .filter_map(|k| k.strip_prefix("team/xet/shards/"))
        .collect();
    assert_eq!((xorbs.len(), shards.len()), (3, 2), "{keys:?}");
    assert!(keys.contains(&"team/xet/meta/dedup-secret".to_string()));
    assert_eq!(
        keys.len(),
        6,
        "nothing else (no probe object left): {keys:?}"
    );
    for x in &xorbs {
        let h = xet_hash::MerkleHash::from_hex(x).expect("xorbs are named by hash");
        assert!(store.xorb_size(&h).await.unwrap().is_some());
    }
    for s in &shards {
        assert!(s.ends_with(".mdb"), "{s}");
    }
    drop(store);
    // Objects that are not store objects, in and next to the prefix.
    raw_put(moto, &bucket, "team/xet/xorbs/README", b"not a xorb").await;
    raw_put(
        moto,
        &bucket,
        "team/xet/shards/ABCD.mdb",
        b"not a shard name",
    )
    .await;
    raw_put(moto, &bucket, "team/xet/tmp/leftover", b"x").await;
    raw_put(moto, &bucket, "team/xet-other/shards/x.mdb", b"x").await;
    raw_put(moto, &bucket, "team/xetmeta/dedup-secret", b"x").await;
    let store = open_store(cfg).await.unwrap();
    let listed = store.backend().list("").await.unwrap();
    assert_eq!(listed.len(), 6, "{listed:?}");
    assert_eq!(store.backend().list("shards/").await.unwrap().len(), 2);
    conformance::check_populated(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_refresh_picks_up_another_servers_files() {
    let Some(moto) = shared_moto() else { return };
    let cfg = fresh(moto, "r", ConditionalPut::Auto);
    let a = open_store(cfg.clone()).await.unwrap();
    let b = std::sync::Arc::new(open_store(cfg).await.unwrap());
    let task = b.spawn_refresh(Duration::from_millis(100));
    conformance::populate(&a).await;
    let t = Instant::now();
    while b.stats().shards < 2 {
        assert!(t.elapsed() < Duration::from_secs(20), "not refreshed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    conformance::check_populated(&*b).await;
    drop(b);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the refresh task ends with its store")
        .unwrap();
}
