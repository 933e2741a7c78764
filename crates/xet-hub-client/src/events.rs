//! The events feed of a bucket (`GET /api/buckets/{ns}/{name}/events`, server-sent
//! events): what changed in it, as it changes, replayed from a resume point.
//!
//! [`HubClient::bucket_events`] opens a stream; [`BucketEvents::next`] reads it an event
//! at a time, parsed as it arrives ([`SseParser`]) within [`MAX_EVENT_BYTES`] an event:
//! comments (`: ping`) and events this client does not know are skipped, `\r\n` and
//! `\r` end lines as `\n` does. Every changed path is checked as a listing's are (it may
//! become a file name).
//!
//! Following the feed is the caller's loop: any end of a stream is resumed from the
//! last cursor seen; [`HubError::ends_following`] tells the answers after which the
//! feed is not to be asked again (no such route, no access, not an event stream).

use std::collections::VecDeque;

use reqwest::{Method, Response};
use xet_hub::RepoRef;
use xet_hub::api::buckets::{BucketChange, BucketChanges, EventCursor, EventReset, event};

use crate::client::{HubClient, header_str};
use crate::error::{HubError, RepoTarget, Result};

/// The largest event (its lines together) read; a larger one is an error, not memory.
pub const MAX_EVENT_BYTES: usize = 16 << 20;

/// Where a stream starts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EventsFrom {
    /// Only what changes from now on.
    Live,
    /// Strictly after this cursor (one the feed gave).
    Cursor(String),
    /// What changed at or after this time (RFC 3339, as `updatedAt` is written).
    Since(String),
}

/// One event of the feed.
#[derive(Debug, Clone, PartialEq)]
pub enum BucketEvent {
    /// The replay is done; live changes follow. `cursor`: where this point is (`None`
    /// while the bucket never changed).
    Ready { cursor: Option<String> },
    /// Files that changed; `cursor` resumes after them.
    Changes {
        cursor: String,
        changes: Vec<BucketChange>,
    },
    /// The resume point is out of the server's reach: list the bucket again. The
    /// stream ends.
    Reset { reason: String },
    /// The server ends the stream: resume from `cursor` (the last one seen if `None`).
    Reconnect { cursor: Option<String> },
}

/// An open stream of a bucket's events.
pub struct BucketEvents {
    response: Response,
    parser: SseParser,
    /// Events parsed from the last piece read and not handed out yet (at most one
    /// piece's worth).
    ready: VecDeque<RawEvent>,
    subject: RepoTarget,
    url: String,
    ended: bool,
}

impl HubClient {
    /// `GET /api/buckets/{id}/events` from `from`, `Accept: text/event-stream`. An
    /// answer that is not a `200` event stream is an error ([`HubError::ends_following`]
    /// says whether to ask again later).
    pub async fn bucket_events(&self, bucket: &RepoRef, from: EventsFrom) -> Result<BucketEvents> {
        let url = format!("{}/api/buckets/{}/events", self.endpoint(), bucket.id);
        let subject = RepoTarget::repo(bucket);
        let query: Vec<(&str, &str)> = match &from {
            EventsFrom::Live => Vec::new(),
            EventsFrom::Cursor(c) => vec![("cursor", c)],
            EventsFrom::Since(t) => vec![("since", t)],
        };
        let call = self.call(Method::GET, url.clone(), "following", subject.clone());
        let r = call
            .ok(|rb| {
                rb.query(&query)
                    .header(reqwest::header::ACCEPT, event::MEDIA_TYPE)
            })
            .await?;
        let content_type = header_str(r.headers(), "content-type").unwrap_or_default();
        if !content_type.starts_with(event::MEDIA_TYPE) {
            return Err(HubError::NotEventStream {
                subject,
                url,
                content_type,
            });
        }
        Ok(BucketEvents {
            response: r,
            parser: SseParser::new(MAX_EVENT_BYTES),
            ready: VecDeque::new(),
            subject,
            url,
            ended: false,
        })
    }
}

impl BucketEvents {
    /// The next event; `None` when the stream ended (after `reset`, or the connection
    /// closed: resume from the last cursor).
    pub async fn next(&mut self) -> Result<Option<BucketEvent>> {
        loop {
            while let Some(raw) = self.ready.pop_front() {
                if let Some(e) = self.typed(raw)? {
                    if matches!(e, BucketEvent::Reset { .. }) {
                        self.ended = true;
                    }
                    return Ok(Some(e));
                }
            }
            if self.ended {
                return Ok(None);
            }
            let piece = self
                .response
                .chunk()
                .await
                .map_err(|source| HubError::Network {
                    action: "following",
                    subject: self.subject.clone(),
                    url: self.url.clone(),
                    source,
                })?;
            let Some(piece) = piece else {
                self.ended = true;
                continue;
            };
            self.parser
                .push(&piece, &mut self.ready)
                .map_err(|why| self.bad(why))?;
        }
    }

    /// The event `raw` is, or `None` for one this client does not know.
    fn typed(&self, raw: RawEvent) -> Result<Option<BucketEvent>> {
        let e = match raw.name.as_str() {
            event::READY => BucketEvent::Ready {
                cursor: self.data::<EventCursor>(&raw)?.cursor,
            },
            event::RECONNECT => BucketEvent::Reconnect {
                cursor: self.data::<EventCursor>(&raw)?.cursor,
            },
            event::RESET => BucketEvent::Reset {
                reason: self.data::<EventReset>(&raw)?.reason,
            },
            event::CHANGES => {
                let c: BucketChanges = self.data(&raw)?;
                if let Some(bad) = c
                    .changes
                    .iter()
                    .find_map(|ch| xet_hub::RepoPath::parse(&ch.path).err())
                {
                    return Err(HubError::UnsafePath {
                        subject: self.subject.clone(),
                        url: self.url.clone(),
                        source: bad,
                    });
                }
                BucketEvent::Changes {
                    cursor: c.cursor,
                    changes: c.changes,
                }
            }
            _ => return Ok(None),
        };
        Ok(Some(e))
    }

    fn data<T: serde::de::DeserializeOwned>(&self, raw: &RawEvent) -> Result<T> {
        serde_json::from_str(&raw.data)
            .map_err(|e| self.bad(format!("the data of a {:?} event: {e}", raw.name)))
    }

    fn bad(&self, why: impl Into<String>) -> HubError {
        HubError::BadAnswer {
            action: "following",
            subject: self.subject.clone(),
            url: self.url.clone(),
            why: why.into(),
        }
    }
}

impl HubError {
    /// Whether an error of the events feed means the feed is not to be asked again:
    /// the server has no such route (`404`, `405`, `501`), refuses the request (`400`)
    /// or this caller (`401`, `403`, the bucket not found), or answers something other
    /// than an event stream, or events this client cannot read. A failed connection, a
    /// broken stream or an overloaded server (`429`, `5xx`) is worth resuming.
    pub fn ends_following(&self) -> bool {
        match self {
            HubError::Status { status, .. } => matches!(*status, 400 | 401 | 403 | 404 | 405 | 501),
            HubError::RepoNotFound { .. }
            | HubError::NoToken { .. }
            | HubError::BadToken { .. }
            | HubError::Forbidden { .. }
            | HubError::Gated { .. }
            | HubError::NotEventStream { .. }
            | HubError::BadAnswer { .. }
            | HubError::UnsafePath { .. } => true,
            _ => false,
        }
    }
}

/// One event as it came: its name (`message` when it had none) and its data lines
/// joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RawEvent {
    pub name: String,
    pub data: String,
}

/// The server-sent events format, parsed as its bytes arrive: lines end at `\n`,
/// `\r\n` or `\r`; a blank line ends an event; lines starting with `:` are comments;
/// `field: value` (one space after the colon dropped) sets `event` or adds a `data`
/// line; other fields (`id`, `retry`) are ignored. An event with no data is none.
pub(crate) struct SseParser {
    /// The line not ended yet.
    line: Vec<u8>,
    /// The last byte seen was `\r`: a `\n` right after it ends nothing more.
    after_cr: bool,
    name: String,
    data: String,
    /// Bytes of the current event so far (its lines).
    size: usize,
    limit: usize,
}

impl SseParser {
    pub fn new(limit: usize) -> SseParser {
        SseParser {
            line: Vec::new(),
            after_cr: false,
            name: String::new(),
            data: String::new(),
            size: 0,
            limit,
        }
    }

    /// Parse `bytes`, the events they end added to `out`; an error if an event grows
    /// past the limit.
    pub fn push(&mut self, bytes: &[u8], out: &mut VecDeque<RawEvent>) -> Result<(), String> {
        let mut rest = bytes;
        while !rest.is_empty() {
            if self.after_cr && rest[0] == b'\n' {
                rest = &rest[1..];
            }
            self.after_cr = false;
            let Some(end) = rest.iter().position(|&b| b == b'\n' || b == b'\r') else {
                self.grow(rest)?;
                break;
            };
            self.grow(&rest[..end])?;
            self.after_cr = rest[end] == b'\r';
            rest = &rest[end + 1..];
            let line = std::mem::take(&mut self.line);
            if let Some(e) = self.line_ended(&line) {
                out.push_back(e);
            }
        }
        Ok(())
    }

    fn grow(&mut self, bytes: &[u8]) -> Result<(), String> {
        self.size += bytes.len();
        if self.size > self.limit {
            return Err(format!("an event is larger than {} bytes", self.limit));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Act on a whole line; the event it ends, if any.
    fn line_ended(&mut self, line: &[u8]) -> Option<RawEvent> {
        if line.is_empty() {
            self.size = 0;
            let name = std::mem::take(&mut self.name);
            let data = std::mem::take(&mut self.data);
            if data.is_empty() {
                return None;
            }
            let name = if name.is_empty() {
                "message".to_string()
            } else {
                name
            };
            // Every data line added a `\n`; the last one is not part of the data.
            let data = data.strip_suffix('\n').unwrap_or(&data).to_string();
            return Some(RawEvent { name, data });
        }
        if line[0] == b':' {
            return None;
        }
        let line = String::from_utf8_lossy(line);
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line.as_ref(), ""),
        };
        match field {
            "event" => self.name = value.to_string(),
            "data" => {
                self.data.push_str(value);
                self.data.push('\n');
            }
            _ => {}
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    fn parse_in_pieces(text: &[u8], at: &[usize]) -> Result<Vec<RawEvent>, String> {
        let mut p = SseParser::new(1 << 10);
        let mut out = VecDeque::new();
        let mut from = 0;
        for &cut in at.iter().chain([text.len()].iter()) {
            p.push(&text[from..cut], &mut out)?;
            from = cut;
        }
        Ok(out.into_iter().collect())
    }

    fn raw(name: &str, data: &str) -> RawEvent {
        RawEvent {
            name: name.into(),
            data: data.into(),
        }
    }

    const STREAM: &[u8] = b": ping\r\n\r\nevent: ready\r\ndata: {\"cursor\":\"c0\"}\r\n\r\n\
        : ping\n\nevent: changes\ndata: {\"a\":1}\n\n\
        event: later\rdata:x\rdata: y\rid: 7\rretry: 10\r\r\
        data: no name\n\nevent: only a name\n\n";

    fn expected() -> Vec<RawEvent> {
        vec![
            raw("ready", "{\"cursor\":\"c0\"}"),
            raw("changes", "{\"a\":1}"),
            raw("later", "x\ny"),
            raw("message", "no name"),
        ]
    }

    /// Cut anywhere (in the middle of `\r\n` too), in two and in three, the events are
    /// the same; comments and events without data are none.
    #[test]
    fn events_are_the_same_however_the_bytes_are_cut() {
        assert_eq!(parse_in_pieces(STREAM, &[]).unwrap(), expected());
        for i in 0..=STREAM.len() {
            assert_eq!(
                parse_in_pieces(STREAM, &[i]).unwrap(),
                expected(),
                "cut at {i}"
            );
            for j in i..=STREAM.len() {
                assert_eq!(
                    parse_in_pieces(STREAM, &[i, j]).unwrap(),
                    expected(),
                    "{i},{j}"
                );
            }
        }
        let bytes: Vec<usize> = (1..STREAM.len()).collect();
        assert_eq!(parse_in_pieces(STREAM, &bytes).unwrap(), expected());
    }

    /// An event larger than the limit is an error, whether in one line or many, and
    /// however it arrives; one just within it is not.
    #[test]
    fn an_event_over_the_limit_is_an_error() {
        let big = format!("event: changes\ndata: {}\n\n", "x".repeat(2000));
        assert!(parse_in_pieces(big.as_bytes(), &[]).is_err());
        let cuts: Vec<usize> = (1..big.len()).step_by(7).collect();
        assert!(parse_in_pieces(big.as_bytes(), &cuts).is_err());
        let many = "data: xxxxxxxxxxxxxxx\n".repeat(100);
        assert!(parse_in_pieces(many.as_bytes(), &[]).is_err());
        // Many small events in a row are no large one.
        let small = "event: e\ndata: xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx\n\n".repeat(100);
        assert_eq!(parse_in_pieces(small.as_bytes(), &[]).unwrap().len(), 100);
        let fits = format!("data: {}\n\n", "x".repeat(1000));
        assert_eq!(parse_in_pieces(fits.as_bytes(), &[3]).unwrap().len(), 1);
    }

    /// A server on loopback answering every request with `answer`, its pieces written
    /// apart (as a stream arrives); its URL and the heads of the requests it got.
    async fn server(answer: Vec<&'static [u8]>) -> (String, Arc<Mutex<Vec<String>>>) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let heads = Arc::new(Mutex::new(Vec::new()));
        let seen = Arc::clone(&heads);
        tokio::spawn(async move {
            while let Ok((mut conn, _)) = listener.accept().await {
                let mut head = Vec::new();
                let mut byte = [0u8; 1];
                while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).await.unwrap_or(0) == 1 {
                    head.push(byte[0]);
                }
                seen.lock()
                    .unwrap()
                    .push(String::from_utf8_lossy(&head).into_owned());
                for piece in &answer {
                    let _ = conn.write_all(piece).await;
                    let _ = conn.flush().await;
                    tokio::time::sleep(std::time::Duration::from_millis(5)).await;
                }
            }
        });
        (url, heads)
    }

    fn bucket() -> RepoRef {
        crate::buckets::bucket_ref(xet_hub::RepoId::parse("org/b").unwrap())
    }

    const SSE_HEAD: &[u8] =
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nconnection: close\r\n\r\n";

    /// Over HTTP: the request asks for an event stream from `since` (encoded), and the
    /// events come typed, in order, unknown ones skipped; the stream ends after `reset`.
    #[tokio::test]
    async fn a_stream_of_events_over_http() {
        let (url, heads) = server(vec![
            SSE_HEAD,
            b": ping\n\nevent: ready\ndata: {\"cursor\":\"c0\"}\n\n",
            b"event: changes\ndata: {\"cursor\":\"c1\",\"changes\":[{\"path\":\"a/b.bin\",",
            b"\"op\":\"add\",\"size\":3,\"xetHash\":\"00\"},{\"path\":\"c\",\"op\":\"delete\"}]}\n\n",
            b"event: someday\ndata: {}\n\nevent: reset\ndata: {\"reason\":\"cursor_too_old\"}\n\n",
            b"event: ready\ndata: {}\n\n",
        ])
        .await;
        let hub = HubClient::new(&url, None).unwrap();
        let since = EventsFrom::Since("2026-02-06T17:37:57.123+01:00".into());
        let mut events = hub.bucket_events(&bucket(), since).await.unwrap();
        let mut got = Vec::new();
        while let Some(e) = events.next().await.unwrap() {
            got.push(e);
        }
        let [ready, changes, reset] = &got[..] else {
            panic!("{got:?}")
        };
        assert_eq!(
            *ready,
            BucketEvent::Ready {
                cursor: Some("c0".into())
            }
        );
        let BucketEvent::Changes { cursor, changes } = changes else {
            panic!("{changes:?}")
        };
        assert_eq!(cursor, "c1");
        assert_eq!(changes.len(), 2);
        assert_eq!(
            (changes[0].path.as_str(), changes[0].size),
            ("a/b.bin", Some(3))
        );
        assert_eq!(
            *reset,
            BucketEvent::Reset {
                reason: "cursor_too_old".into()
            }
        );
        let head = heads.lock().unwrap()[0].to_lowercase();
        assert!(
            head.starts_with(
                "get /api/buckets/org/b/events?since=2026-02-06t17%3a37%3a57.123%2b01%3a00 "
            ),
            "{head}"
        );
        assert!(head.contains("accept: text/event-stream"), "{head}");
    }

    /// A server without the feed (no such route, not implemented, a page that is not
    /// an event stream, no access) ends following; a broken stream does not.
    #[tokio::test]
    async fn a_server_without_the_feed_ends_following() {
        let answers: [&'static [u8]; 4] = [
            b"HTTP/1.1 404 Not Found\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            b"HTTP/1.1 501 Not Implemented\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            b"HTTP/1.1 403 Forbidden\r\ncontent-length: 0\r\nconnection: close\r\n\r\n",
            b"HTTP/1.1 200 OK\r\ncontent-type: text/html\r\ncontent-length: 2\r\nconnection: close\r\n\r\nhi",
        ];
        for answer in answers {
            let (url, _) = server(vec![answer]).await;
            let hub = HubClient::new(&url, None).unwrap();
            let e = match hub.bucket_events(&bucket(), EventsFrom::Live).await {
                Ok(_) => panic!("{answer:?} opened a stream"),
                Err(e) => e,
            };
            assert!(e.ends_following(), "{e}");
            assert!(e.to_string().contains("org/b"), "{e}");
        }
        // An event too large, or a path no file may have: the feed is unusable.
        let (url, _) = server(vec![
            SSE_HEAD,
            b"event: changes\ndata: {\"cursor\":\"c\",\"changes\":[{\"path\":\"../x\",\"op\":\"delete\"}]}\n\n",
        ])
        .await;
        let hub = HubClient::new(&url, None).unwrap();
        let mut events = hub
            .bucket_events(&bucket(), EventsFrom::Live)
            .await
            .unwrap();
        let e = events.next().await.unwrap_err();
        assert!(e.ends_following(), "{e}");
        // A stream that just stops is an end, to resume from.
        let (url, _) = server(vec![SSE_HEAD, b"event: ready\ndata: {}\n\nevent: cha"]).await;
        let hub = HubClient::new(&url, None).unwrap();
        let mut events = hub
            .bucket_events(&bucket(), EventsFrom::Live)
            .await
            .unwrap();
        assert_eq!(
            events.next().await.unwrap(),
            Some(BucketEvent::Ready { cursor: None })
        );
        assert_eq!(events.next().await.unwrap(), None);
    }
}
