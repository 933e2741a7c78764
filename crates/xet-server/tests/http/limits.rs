//! Connection limits: header, keep-alive, body and send timeouts, and the connection cap
//! (see `xet_server::conn`). Raw TCP where the client must misbehave; short configured
//! timeouts, and generous bounds on how long anything may take.

use crate::common::*;
use crate::support::*;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use xet_server::ServerConfig;

/// How long anything the server should do by itself may take at most (the timeouts under
/// test are 1-3 s).
const BOUND: Duration = Duration::from_secs(20);

async fn connect(s: &TestServer) -> TcpStream {
    TcpStream::connect(s.addr).await.unwrap()
}

/// One answer: status, head (lower-cased) and body.
struct Answer {
    status: u16,
    head: String,
    body: Vec<u8>,
}

/// Read one answer (with a `Content-Length`) from `conn`; `buf` keeps what was read past
/// it. `None` if the connection closes first.
async fn read_answer(conn: &mut TcpStream, buf: &mut Vec<u8>) -> Option<Answer> {
    let fut = async {
        loop {
            if let Some(end) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                let head = String::from_utf8_lossy(&buf[..end]).to_ascii_lowercase();
                let len: usize = head
                    .lines()
                    .find_map(|l| l.strip_prefix("content-length:"))
                    .map(|v| v.trim().parse().unwrap())
                    .unwrap_or(0);
                while buf.len() < end + 4 + len {
                    let mut chunk = [0u8; 8192];
                    match conn.read(&mut chunk).await {
                        Ok(0) | Err(_) => return None,
                        Ok(n) => buf.extend_from_slice(&chunk[..n]),
                    }
                }
                let body = buf[end + 4..end + 4 + len].to_vec();
                buf.drain(..end + 4 + len);
                let status = head[9..12].parse().unwrap();
                return Some(Answer { status, head, body });
            }
            let mut chunk = [0u8; 8192];
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return None,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
    };
    tokio::time::timeout(BOUND, fut)
        .await
        .expect("no answer and no close in time")
}

/// Read until the server closes `conn` (end of stream or reset); the bytes read.
async fn until_closed(conn: &mut TcpStream) -> usize {
    let fut = async {
        let mut total = 0;
        let mut chunk = vec![0u8; 64 * 1024];
        loop {
            match conn.read(&mut chunk).await {
                Ok(0) | Err(_) => return total,
                Ok(n) => total += n,
            }
        }
    };
    tokio::time::timeout(BOUND, fut)
        .await
        .expect("the server kept the connection open")
}

fn get(path: &str) -> Vec<u8> {
    format!("GET {path} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n").into_bytes()
}

#[tokio::test]
async fn a_connection_that_sends_nothing_is_closed_after_the_header_timeout() {
    let (s, _) = start(ServerConfig {
        header_timeout: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let start = Instant::now();
    let mut idle = connect(&s).await;
    assert_eq!(until_closed(&mut idle).await, 0, "closed without an answer");
    assert!(start.elapsed() >= Duration::from_millis(900));
    // Meanwhile and afterwards the server answers.
    let r = client().get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn a_half_sent_head_gets_408_and_the_connection_is_closed() {
    let (s, _) = start(ServerConfig {
        header_timeout: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let mut slow = connect(&s).await;
    slow.write_all(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: ")
        .await
        .unwrap();
    let mut buf = Vec::new();
    let a = read_answer(&mut slow, &mut buf).await.expect("an answer");
    assert_eq!(a.status, 408, "{}", a.head);
    assert!(a.head.contains("connection: close"), "{}", a.head);
    let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(body["error"], "request_timeout");
    until_closed(&mut slow).await;
}

#[tokio::test]
async fn a_kept_alive_connection_is_closed_once_idle_for_the_keepalive_timeout() {
    let (s, _) = start(ServerConfig {
        header_timeout: Duration::from_secs(1),
        keepalive_timeout: Duration::from_secs(4),
        ..Default::default()
    })
    .await;
    let mut conn = connect(&s).await;
    let mut buf = Vec::new();
    conn.write_all(&get("/health")).await.unwrap();
    assert_eq!(read_answer(&mut conn, &mut buf).await.unwrap().status, 200);
    // Past the header timeout, within the keep-alive one: still open, and it serves.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    conn.write_all(&get("/health")).await.unwrap();
    let a = read_answer(&mut conn, &mut buf)
        .await
        .expect("kept alive past the header timeout");
    assert_eq!(a.status, 200);
    let served = Instant::now();
    // Then idle: closed, without an answer.
    assert_eq!(until_closed(&mut conn).await, 0);
    assert!(
        served.elapsed() >= Duration::from_secs(3),
        "{:?}",
        served.elapsed()
    );
}

#[tokio::test]
async fn a_stalled_body_gets_408_while_other_connections_are_served() {
    let (s, _) = start(ServerConfig {
        body_timeout: Duration::from_secs(1),
        ..Default::default()
    })
    .await;
    let c = client();
    let f = fixture(41, SIZES);

    // A direct xorb upload that declares its length, sends a little and stalls.
    let mut stalled = connect(&s).await;
    let head = format!(
        "POST /v1/xorbs/default/{} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        f.xorb,
        f.xorb_body.len()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&f.xorb_body[..100]).await.unwrap();
    // Another connection is served meanwhile.
    let r = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let mut buf = Vec::new();
    let a = read_answer(&mut stalled, &mut buf)
        .await
        .expect("an answer");
    assert_eq!(a.status, 408, "{}", a.head);
    assert!(a.head.contains("connection: close"), "{}", a.head);
    let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(body["error"], "request_timeout", "{body}");
    until_closed(&mut stalled).await;

    // The same for a grant upload (its own body reading).
    let g = get_grant(&c, &s, &f.xorb, &f.xorb_body).await;
    let path = g.url.strip_prefix(&s.url).unwrap();
    let mut stalled = connect(&s).await;
    let head = format!(
        "PUT {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: {}\r\n\r\n",
        f.xorb_body.len()
    );
    stalled.write_all(head.as_bytes()).await.unwrap();
    stalled.write_all(&f.xorb_body[..100]).await.unwrap();
    let mut buf = Vec::new();
    let a = read_answer(&mut stalled, &mut buf)
        .await
        .expect("an answer");
    assert_eq!(a.status, 408, "{}", a.head);
    until_closed(&mut stalled).await;

    // A whole upload still works.
    let r = c
        .post(s.url(&format!("/v1/xorbs/default/{}", f.xorb)))
        .body(f.xorb_body.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(r.status(), 200);
}

#[tokio::test]
async fn an_answer_the_client_does_not_read_is_dropped_after_the_send_timeout() {
    // About 13 MB of incompressible chunks: more than the socket buffers hold.
    let f = fixture(43, &[65536; 400]);
    let (s, _) = start_with(
        ServerConfig {
            send_timeout: Duration::from_secs(1),
            ..Default::default()
        },
        &f,
    )
    .await;
    let c = client();
    let w: xet_cas::wire::ReconstructionV2 = v2(&c, &s, &f.file, None).await.json().await.unwrap();
    let url = &w.xorbs[&f.xorb.to_string()][0].url;
    let path = url.strip_prefix(&s.url).unwrap();

    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    let mut reader = socket.connect(s.addr).await.unwrap();
    reader.write_all(&get(path)).await.unwrap();
    // Read nothing for a while: the server gives up on the answer.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let got = until_closed(&mut reader).await;
    assert!(
        got < f.xorb_body.len(),
        "the whole answer ({got} bytes) waited for a client that did not read"
    );
    // Readers that read get all of it: the chunk region, then the footer.
    let all = c.get(url).send().await.unwrap().bytes().await.unwrap();
    let (_, region) = xet_xorb::parse_footer(&all, &xet_xorb::Limits::PROTOCOL).unwrap();
    assert_eq!(all[..region], f.xorb_body[..]);
}

#[tokio::test]
async fn at_the_connection_cap_idle_connections_make_room_and_busy_ones_get_503() {
    let (s, _) = start(ServerConfig {
        max_connections: 4,
        ..Default::default()
    })
    .await;

    // Four idle connections fill the server.
    let (closed_tx, mut closed_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..4 {
        let mut idle = connect(&s).await;
        let tx = closed_tx.clone();
        tokio::spawn(async move {
            let mut b = [0u8; 64];
            if let Ok(Ok(0) | Err(_)) = tokio::time::timeout(BOUND, idle.read(&mut b)).await {
                let _ = tx.send(i);
            }
        });
    }
    // A new client is served, and an idle connection was closed for it.
    let c = client();
    let r = c.get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
    let shed = tokio::time::timeout(BOUND, closed_rx.recv())
        .await
        .expect("no idle connection was closed");
    assert!(shed.is_some());
    drop(c);

    // Four connections busy with requests (bodies still coming): a new one is told to
    // come back, not left waiting.
    let mut busy = Vec::new();
    for _ in 0..4 {
        let mut b = connect(&s).await;
        b.write_all(
            b"POST /v1/telemetry HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100\r\n\
              Expect: 100-continue\r\n\r\n",
        )
        .await
        .unwrap();
        // `100 Continue`: the handler is reading the body.
        let mut buf = Vec::new();
        assert_eq!(read_answer(&mut b, &mut buf).await.unwrap().status, 100);
        b.write_all(b"{").await.unwrap();
        busy.push(b);
    }
    let mut extra = connect(&s).await;
    extra.write_all(&get("/health")).await.unwrap();
    let mut buf = Vec::new();
    let a = read_answer(&mut extra, &mut buf).await.expect("an answer");
    assert_eq!(a.status, 503, "{}", a.head);
    assert!(a.head.contains("retry-after: 1"), "{}", a.head);
    let body: serde_json::Value = serde_json::from_slice(&a.body).unwrap();
    assert_eq!(body["error"], "busy");

    // One of them finishes: room again.
    let mut done = busy.pop().unwrap();
    let rest = vec![b'}'; 99];
    done.write_all(&rest).await.unwrap();
    let mut buf = Vec::new();
    assert_eq!(read_answer(&mut done, &mut buf).await.unwrap().status, 200);
    let r = client().get(s.url("/health")).send().await.unwrap();
    assert_eq!(r.status(), 200);
}
