//! The pipeline against a real `xet_server` over loopback through the HTTP client:
//! which requests a download makes before its first xorb byte, on how many connections,
//! how the reconstructions of many files overlap with the fetches of earlier ones, and
//! how a large range is fetched in parts.

use crate::common::*;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};
use xet_cas::{ByteRange, Cas, RangeStream, Reconstruction, XorbBody, XorbFetch};
use xet_client::{ClientConfig, HttpCas};
use xet_download::*;
use xet_hash::MerkleHash;
use xet_server::{Server, ServerConfig};
use xet_store::MemoryStore;

/// A real server over an in-memory store holding `corpus`; stops when dropped.
struct TestServer {
    url: String,
    _stop: oneshot::Sender<()>,
}

async fn serve(corpus: &Corpus) -> TestServer {
    let store = MemoryStore::in_memory().await.unwrap();
    put(&store as &dyn Cas, corpus).await;
    let server = Server::bind(ServerConfig::loopback(), Arc::new(store))
        .await
        .unwrap();
    let url = server.url();
    let (tx, rx) = oneshot::channel::<()>();
    tokio::spawn(async move {
        let _ = server
            .serve(async move {
                let _ = rx.await;
            })
            .await;
    });
    TestServer { url, _stop: tx }
}

fn http(url: &str) -> Arc<dyn Cas> {
    Arc::new(HttpCas::new(ClientConfig::new(url)).unwrap())
}

/// A TCP relay in front of the server that passes every byte through unchanged and
/// notes each connection it accepts and each request on it: its connection and request
/// line, and its `Range` header (the download sends no request bodies, so every request
/// head ends at a blank line).
struct Relay {
    url: String,
    connections: Arc<AtomicUsize>,
    requests: Arc<Mutex<Vec<Request>>>,
}

#[derive(Debug, Clone)]
struct Request {
    conn: usize,
    line: String,
    /// The `Range` header's value, if any.
    range: Option<String>,
}

impl Relay {
    async fn start(upstream: &str) -> Relay {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let requests = Arc::new(Mutex::new(Vec::new()));
        let (conns, reqs) = (connections.clone(), requests.clone());
        tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let id = conns.fetch_add(1, Ordering::SeqCst);
                let server = TcpStream::connect(&upstream).await.unwrap();
                tokio::spawn(relay(id, client, server, reqs.clone()));
            }
        });
        Relay {
            url,
            connections,
            requests,
        }
    }

    fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }
}

async fn relay(id: usize, client: TcpStream, server: TcpStream, log: Arc<Mutex<Vec<Request>>>) {
    let (mut cr, mut cw) = client.into_split();
    let (mut sr, mut sw) = server.into_split();
    let up = async move {
        let (mut buf, mut head) = (vec![0u8; 64 << 10], Vec::new());
        loop {
            let n = match cr.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => n,
            };
            head.extend_from_slice(&buf[..n]);
            while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                let text = String::from_utf8_lossy(&head[..end]).into_owned();
                let line = text.lines().next().unwrap_or_default().to_string();
                let range = text.lines().find_map(|l| {
                    let (name, value) = l.split_once(':')?;
                    name.eq_ignore_ascii_case("range")
                        .then(|| value.trim().to_string())
                });
                log.lock().unwrap().push(Request {
                    conn: id,
                    line,
                    range,
                });
                head.drain(..end + 4);
            }
            if sw.write_all(&buf[..n]).await.is_err() {
                break;
            }
        }
        let _ = sw.shutdown().await;
    };
    let down = async move {
        let _ = tokio::io::copy(&mut sr, &mut cw).await;
        let _ = cw.shutdown().await;
    };
    tokio::join!(up, down);
}

/// Round trips from the start of a download to its first xorb byte, on a client that
/// has no connection yet: connecting, the reconstruction query, the xorb range request,
/// all on that one connection (no size query, no second connection).
#[tokio::test]
async fn the_first_xorb_byte_takes_three_round_trips_on_one_connection() {
    let c = build(&[random(300_000, 5)], 1 << 26);
    let server = serve(&c).await;
    let relay = Relay::start(&server.url).await;
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("f");
    let r = download(
        http(&relay.url),
        vec![DownloadRequest::to_path(c.files[0].hash, &p)],
        DownloadOptions::default(),
        None,
    )
    .await
    .unwrap();
    assert_eq!(r.totals.fetches, 1);
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    let seen = relay.requests();
    let lines: Vec<&str> = seen.iter().map(|r| r.line.as_str()).collect();
    assert_eq!(lines.len(), 2, "{lines:?}");
    assert!(
        lines[0].starts_with(&format!("GET /v2/reconstructions/{} ", c.files[0].hash)),
        "{lines:?}"
    );
    assert!(
        lines[1].starts_with("GET ") && lines[1].contains(&c.xorbs[0].hash().to_string()),
        "{lines:?}"
    );
    assert_eq!(
        relay.connections.load(Ordering::SeqCst),
        1,
        "the range request reuses the query's connection: {seen:?}"
    );
}

/// The real client with every xorb range held until `release` is notified (or, if that
/// never comes, a fallback long after, noted in `fell_back`), and the files whose
/// reconstruction was asked for, in order.
struct Held {
    inner: Arc<dyn Cas>,
    release: Arc<Notify>,
    released: Mutex<bool>,
    fell_back: Mutex<bool>,
    /// Reconstruction queries, and the range fetches that completed, in order.
    events: Mutex<Vec<Event>>,
    /// Release the ranges once this many distinct files were queried.
    release_after: usize,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Event {
    Queried(MerkleHash),
    Fetched,
}

impl Held {
    async fn wait_for_release(&self) {
        // Registered before the flag is read, so a release in between is not missed.
        let notified = self.release.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if *self.released.lock().unwrap() {
            return;
        }
        tokio::select! {
            _ = notified => {}
            _ = tokio::time::sleep(Duration::from_secs(20)) => {
                *self.fell_back.lock().unwrap() = true;
            }
        }
        *self.released.lock().unwrap() = true;
        self.release.notify_waiters();
    }
}

#[async_trait::async_trait]
impl Cas for Held {
    async fn put_xorb(&self, hash: &MerkleHash, body: XorbBody) -> xet_cas::Result<bool> {
        self.inner.put_xorb(hash, body).await
    }
    async fn xorb_size(&self, hash: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.xorb_size(hash).await
    }
    fn retries_requests(&self) -> bool {
        self.inner.retries_requests()
    }
    async fn put_shard(&self, shard: Bytes) -> xet_cas::Result<bool> {
        self.inner.put_shard(shard).await
    }
    async fn file_size(&self, file: &MerkleHash) -> xet_cas::Result<Option<u64>> {
        self.inner.file_size(file).await
    }
    async fn reconstruction(
        &self,
        file: &MerkleHash,
        range: Option<ByteRange>,
    ) -> xet_cas::Result<Reconstruction> {
        let r = self.inner.reconstruction(file, range).await;
        let queried = {
            let mut ev = self.events.lock().unwrap();
            ev.push(Event::Queried(*file));
            ev.iter().filter(|e| matches!(e, Event::Queried(_))).count()
        };
        if queried >= self.release_after {
            *self.released.lock().unwrap() = true;
            self.release.notify_waiters();
        }
        r
    }
    async fn fetch_xorb_range(&self, fetch: &XorbFetch) -> xet_cas::Result<Bytes> {
        self.wait_for_release().await;
        let r = self.inner.fetch_xorb_range(fetch).await;
        self.events.lock().unwrap().push(Event::Fetched);
        r
    }
    async fn stream_xorb_range(&self, fetch: &XorbFetch) -> xet_cas::Result<Box<dyn RangeStream>> {
        let data = self.fetch_xorb_range(fetch).await?;
        Ok(Box::new(Once(Some(data))))
    }
    async fn dedup_shard(&self, chunk: &MerkleHash) -> xet_cas::Result<Option<Bytes>> {
        self.inner.dedup_shard(chunk).await
    }
}

struct Once(Option<Bytes>);

#[async_trait::async_trait]
impl RangeStream for Once {
    async fn next(&mut self) -> xet_cas::Result<Option<Bytes>> {
        Ok(self.0.take())
    }
}

/// Many files, one downloaded at a time: while the first file's range is held, the
/// reconstructions of the next files (as many as the lookahead allows) are asked for.
/// Downloading file by file, the second query would wait for the first file's range.
/// Sizes unknown (`xet download HASH...`) or given (the Hub's listing has them).
#[tokio::test]
async fn reconstructions_of_later_files_overlap_an_earlier_files_fetch() {
    overlapping_reconstructions(false).await;
    overlapping_reconstructions(true).await;
}

async fn overlapping_reconstructions(with_sizes: bool) {
    let files: Vec<Vec<u8>> = (0..8)
        .map(|i| random(40_000 + i * 1_000, 60 + i as u64))
        .collect();
    let c = build(&files, 1 << 26);
    let server = serve(&c).await;
    let ahead = 4;
    let held = Arc::new(Held {
        inner: http(&server.url),
        release: Arc::new(Notify::new()),
        released: Mutex::new(false),
        fell_back: Mutex::new(false),
        events: Mutex::new(Vec::new()),
        release_after: ahead,
    });
    let dir = tempfile::tempdir().unwrap();
    let reqs = c
        .files
        .iter()
        .enumerate()
        .map(|(i, f)| {
            let r = DownloadRequest::to_path(f.hash, dir.path().join(format!("{i}")));
            if with_sizes {
                r.with_size(f.data.len() as u64)
            } else {
                r
            }
        })
        .collect();
    let o = DownloadOptions {
        max_concurrent_files: 1,
        reconstructions_ahead: ahead,
        ..DownloadOptions::default()
    };
    let r = download(held.clone(), reqs, o, None).await.unwrap();
    for (i, f) in c.files.iter().enumerate() {
        assert_eq!(r.files[i].hash, f.hash);
        assert_eq!(
            std::fs::read(dir.path().join(format!("{i}"))).unwrap(),
            f.data
        );
    }
    let events = held.events.lock().unwrap().clone();
    assert!(
        !*held.fell_back.lock().unwrap(),
        "the first file's range was held and no later reconstruction was asked for: {events:?}"
    );
    let first_fetch = events.iter().position(|e| *e == Event::Fetched).unwrap();
    let before: Vec<&Event> = events[..first_fetch].iter().collect();
    for f in &c.files[..ahead] {
        assert!(
            before.contains(&&Event::Queried(f.hash)),
            "{} not queried before the first range arrived: {events:?}",
            f.hash
        );
    }
    // Bounded: no more than the lookahead, plus the file running and the one handed over.
    let queried_before = before.len();
    assert!(queried_before <= ahead + 2, "{events:?}");
}

/// An adaptive limit never lets more fetches run than its maximum; a fixed one is exact.
#[tokio::test]
async fn fetches_in_flight_stay_within_the_adaptive_maximum() {
    let c = build(&[random(3_000_000, 72)], 150_000);
    let (store, _) = store(&c).await;
    let w = Wrapper::new(store);
    *w.delay.lock().unwrap() = Some(Duration::from_millis(20));
    let dir = tempfile::tempdir().unwrap();
    let o = DownloadOptions {
        fetch_concurrency: FetchConcurrency::Adaptive {
            start: 2,
            min: 1,
            max: 3,
        },
        ..DownloadOptions::default()
    };
    let p = dir.path().join("a");
    download(
        w.clone(),
        vec![DownloadRequest::to_path(c.files[0].hash, &p)],
        o,
        None,
    )
    .await
    .unwrap();
    assert_eq!(std::fs::read(&p).unwrap(), c.files[0].data);
    let m = w.max_in_flight.load(Ordering::SeqCst);
    assert!((2..=3).contains(&m), "max in flight {m}");
}

/// `bytes=S-E` (inclusive end) as the end-exclusive `(S, E + 1)`.
fn parse_range(v: &str) -> (u64, u64) {
    let (s, e) = v.trim_start_matches("bytes=").split_once('-').unwrap();
    (s.parse().unwrap(), e.parse::<u64>().unwrap() + 1)
}

/// A range of more than two parts (8 MiB each) is fetched as several sub-range
/// requests whose byte ranges tile it, on more than one connection, and the file is
/// byte for byte the original. The HTTP client says it streams, so this holds for the
/// first range of a download too (it used to be asked for whole, until some range had
/// been seen to arrive in pieces).
#[tokio::test]
async fn a_large_range_is_fetched_as_several_sub_range_requests() {
    let file = random(30_000_000, 26);
    let c = build(std::slice::from_ref(&file), 64 << 20);
    assert_eq!(c.xorbs.len(), 1);
    let server = serve(&c).await;
    let relay = Relay::start(&server.url).await;
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("large");
    let reqs = vec![DownloadRequest::to_path(c.files[0].hash, &out)];
    let r = download(http(&relay.url), reqs, DownloadOptions::default(), None)
        .await
        .unwrap();
    assert!(std::fs::read(&out).unwrap() == file, "the file differs");
    let body = c.xorbs[0].info().body_len();
    assert_eq!(r.totals.bytes_fetched, body);
    let seen = relay.requests();
    let hash = c.xorbs[0].hash().to_string();
    let gets: Vec<&Request> = seen
        .iter()
        .filter(|r| r.line.starts_with("GET ") && r.line.contains(&hash))
        .collect();
    let mut ranges: Vec<(u64, u64)> = gets
        .iter()
        .map(|r| parse_range(r.range.as_deref().expect("a xorb GET has a Range")))
        .collect();
    ranges.sort();
    assert_eq!(ranges.len() as u64, body.div_ceil(8 << 20), "{ranges:?}");
    assert!(ranges.iter().all(|r| r.1 - r.0 <= 8 << 20), "{ranges:?}");
    assert_eq!(ranges[0].0, 0, "{ranges:?}");
    assert_eq!(ranges.last().unwrap().1, body, "{ranges:?}");
    assert!(
        ranges.windows(2).all(|w| w[0].1 == w[1].0),
        "the requests do not tile the xorb: {ranges:?}"
    );
    // Parts fetched ahead of their turn go on connections of their own.
    let conns: std::collections::HashSet<usize> = gets.iter().map(|r| r.conn).collect();
    assert!(
        conns.len() > 1,
        "the parts were fetched one after another: {gets:?}"
    );
}
