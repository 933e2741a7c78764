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

use xet_hub::sse::{RawEvent, SseParser};

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
                .map_err(|too_large| self.bad(too_large.to_string()))?;
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

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

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
