//! `GET /api/buckets/{ns}/{name}/events` (`buckets-api.md` §1.8): the bucket's file
//! changes as server-sent events, replayed from a resume point, then live.
//!
//! - A cursor is `<incarnation>-<commit>` (16 and 40 hex digits): the bucket's commit
//!   after which the client is, all zeros before the first one. Every batch is one
//!   commit whose parent is the one before, so resuming walks back from the head to
//!   that commit, at most `max_replay` commits ([`crate::config::BucketEventsConfig`]);
//!   farther, or of another incarnation (the bucket was deleted and created again), is
//!   `reset`. `since=<ISO 8601>` replays the commits made at or after that time, with the
//!   same bound. Neither: live only.
//! - What changed between two commits is the difference of their trees
//!   ([`xet_hub::Repos::tree_changes`]): `add`, `update` (the path held a file before),
//!   `delete`, with the facts the tree route shows. Several commits seen at once are
//!   one difference, one `changes` event (split every [`CHANGES_PER_EVENT`], the pieces
//!   before the last carrying the cursor before them, so a resume replays them whole).
//! - Live: the shared poller of the bucket ([`crate::state::follow`]) reads the store
//!   every `poll_interval`; each stream diffs from where it was to what it last saw. A
//!   bucket that disappears or turns private for a reader without a user token ends the
//!   stream (the client's reconnection then gets the `404`).
//! - `: ping` every `ping_interval`; `reconnect` with the cursor after `max_session` or
//!   when the server shuts down. Events go through a queue of [`QUEUE`] pieces, so a
//!   client that stops reading holds its stream still (and the connection is dropped
//!   after the send timeout), never memory.

use std::convert::Infallible;

use axum::body::Body;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::Response;
use bytes::Bytes;
use tokio::sync::mpsc;
use xet_hub::api::buckets::{
    BucketChange, BucketChanges, BucketEntry, ChangeOp as WireOp, EventCursor, EventReset,
    EventTime, event,
};
use xet_hub::{BucketState, Change, ChangeOp, CommitId, RepoRef, Repos, Since};

use super::super::ctx::Ctx;
use super::super::reply::{HubReply, HubResult};
use super::access::open;
use super::read::file_entry;
use crate::config::{Access, BucketEventsConfig};
use crate::state::follow::Seen;

/// Changes in one `changes` event at most.
pub(crate) const CHANGES_PER_EVENT: usize = 1000;
/// Events waiting for the client, at most.
const QUEUE: usize = 4;
/// What a client should wait before trying again when all streams are taken.
const BUSY_RETRY_SECS: u32 = 30;

/// Where a stream starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    Live,
    Cursor {
        incarnation: u64,
        commit: Option<CommitId>,
    },
    Time(u64),
}

/// `GET /api/buckets/{ns}/{name}/events`.
pub(super) async fn events(ctx: &Ctx, bucket: &RepoRef) -> HubResult<Response> {
    let caller = ctx.caller(Access::Read)?;
    let wants_events = ctx
        .headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.contains("text/event-stream"));
    if !wants_events {
        return Err(HubReply::bad_request(
            "the events of a bucket are a text/event-stream: send Accept: text/event-stream",
        ));
    }
    let state = open(ctx, bucket, &caller).await?;
    let start = start_of(ctx)?;
    let hub = ctx.hub();
    let Some(permit) = hub.followers.stream_permit() else {
        return Err(HubReply::new(
            StatusCode::SERVICE_UNAVAILABLE,
            "too many event streams are open on this server; try again later",
        )
        .with_header(header::RETRY_AFTER, HeaderValue::from(BUSY_RETRY_SECS)));
    };
    let (tx, rx) = mpsc::channel(QUEUE);
    let feed = Feed {
        repos: ctx.repos().clone(),
        config: ctx.state.config.bucket_events.clone(),
        incarnation: state.record.incarnation.unwrap_or(0),
        reader_is_user: caller.user,
        last: state.head,
        tx,
    };
    let mut seen = hub.followers.subscribe(bucket);
    // What the poller saw before this stream subscribed may be newer than `state`: look
    // at it first.
    seen.mark_changed();
    let closing = hub.followers.closing();
    let name = bucket.clone();
    tokio::spawn(async move {
        let _permit = permit;
        match feed.run(state, start, seen, closing).await {
            Ok(()) => {}
            Err(Ended::Gone) => tracing::debug!(bucket = %name.id, "event stream ended"),
            Err(Ended::Failed(e)) => {
                tracing::warn!(bucket = %name.id, "event stream failed: {e}");
            }
        }
    });
    let body = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    let mut r = Response::new(Body::from_stream(body));
    let h = r.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("text/event-stream"),
    );
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert("x-accel-buffering", HeaderValue::from_static("no"));
    Ok(r)
}

/// The start the query asks for: `cursor`, else `since`, else live.
fn start_of(ctx: &Ctx) -> HubResult<Start> {
    if let Some(c) = ctx.query_param("cursor") {
        return parse_cursor(&c).ok_or_else(|| {
            HubReply::bad_request(format!("cursor {c:?} is not one this server gave"))
        });
    }
    if let Some(t) = ctx.query_param("since").filter(|t| !t.is_empty()) {
        return since_ms(&t).map(Start::Time).ok_or_else(|| {
            HubReply::bad_request(format!(
                "since {t:?} is not an ISO 8601 time (2026-02-06T17:37:57.123Z)"
            ))
        });
    }
    Ok(Start::Live)
}

/// The cursor of the point after `commit` (`None`: before the first) of `incarnation`.
fn cursor(incarnation: u64, commit: Option<CommitId>) -> String {
    match commit {
        Some(c) => format!("{incarnation:016x}-{c}"),
        None => format!("{incarnation:016x}-{}", "0".repeat(40)),
    }
}

fn parse_cursor(s: &str) -> Option<Start> {
    let (inc, commit) = s.split_once('-')?;
    if inc.len() != 16 || commit.len() != 40 {
        return None;
    }
    let incarnation = u64::from_str_radix(inc, 16).ok()?;
    let commit = if commit.bytes().all(|b| b == b'0') {
        None
    } else {
        Some(CommitId::parse(commit)?)
    };
    Some(Start::Cursor {
        incarnation,
        commit,
    })
}

/// Milliseconds since the Unix epoch of a `since` time (RFC 3339, `Z` or an offset).
fn since_ms(s: &str) -> Option<u64> {
    u64::try_from(xet_hub::time::parse_rfc3339_ms(s)?).ok()
}

/// Why a stream ended before its time.
enum Ended {
    /// The client left, or the bucket is gone or no longer the reader's to see.
    Gone,
    Failed(xet_hub::RepoError),
}

impl From<xet_hub::RepoError> for Ended {
    fn from(e: xet_hub::RepoError) -> Ended {
        Ended::Failed(e)
    }
}

/// One stream: where its client is (`last`) and where its events go.
struct Feed {
    repos: Repos,
    config: BucketEventsConfig,
    incarnation: u64,
    reader_is_user: bool,
    last: Option<CommitId>,
    tx: mpsc::Sender<Bytes>,
}

impl Feed {
    /// Replay from `start`, then follow what the poller sees until the session's end.
    async fn run(
        mut self,
        state: BucketState,
        start: Start,
        mut seen: tokio::sync::watch::Receiver<Seen>,
        mut closing: tokio::sync::watch::Receiver<bool>,
    ) -> Result<(), Ended> {
        if !self.replay(&state, start).await? {
            return Ok(());
        }
        let end = tokio::time::sleep(self.config.max_session);
        tokio::pin!(end);
        let every = self
            .config
            .ping_interval
            .max(std::time::Duration::from_millis(10));
        let mut ping = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        loop {
            tokio::select! {
                () = &mut end => return self.reconnect().await,
                () = shutting_down(&mut closing) => return self.reconnect().await,
                _ = ping.tick() => self.send(Bytes::from_static(b": ping\n\n")).await?,
                () = self.tx.closed() => return Err(Ended::Gone),
                changed = seen.changed() => {
                    changed.map_err(|_| Ended::Gone)?;
                    let now = seen.borrow_and_update().clone();
                    if !self.follow(&state.storage, now).await? {
                        return Ok(());
                    }
                }
            }
        }
    }

    /// Send what changed from `start` to `state`, then `ready`; `false` if the stream
    /// ended instead (`reset`).
    async fn replay(&mut self, state: &BucketState, start: Start) -> Result<bool, Ended> {
        let since = match start {
            Start::Live => {
                self.event(event::READY, &self.ready()).await?;
                return Ok(true);
            }
            Start::Cursor { incarnation, .. } if incarnation != self.incarnation => {
                self.reset().await?;
                return Ok(false);
            }
            Start::Cursor { commit, .. } => Since::Commit(commit),
            Start::Time(t) => Since::Time(t),
        };
        let base = self
            .repos
            .replay_base(&state.storage, state.head, since, self.config.max_replay)
            .await?;
        let Some(base) = base else {
            self.reset().await?;
            return Ok(false);
        };
        let changes = self
            .repos
            .tree_changes(&state.storage, base.tree, state.tree)
            .await?;
        if state.head != base.commit {
            self.send_changes(changes, base.commit, state.head).await?;
        }
        self.last = state.head;
        self.event(event::READY, &self.ready()).await?;
        Ok(true)
    }

    /// Act on what the poller saw; `false` if the stream is over.
    async fn follow(&mut self, storage: &RepoRef, now: Seen) -> Result<bool, Ended> {
        let state = match now {
            Seen::Pending => return Ok(true),
            Seen::Gone => return Err(Ended::Gone),
            Seen::Bucket(s) => s,
        };
        if state.record.private && !self.reader_is_user {
            return Err(Ended::Gone);
        }
        if state.record.incarnation.unwrap_or(0) != self.incarnation {
            self.reset().await?;
            return Ok(false);
        }
        if state.head == self.last {
            return Ok(true);
        }
        let since = Since::Commit(self.last);
        let base = self
            .repos
            .replay_base(storage, state.head, since, self.config.max_replay)
            .await?;
        let Some(base) = base else {
            self.reset().await?;
            return Ok(false);
        };
        let changes = self
            .repos
            .tree_changes(storage, base.tree, state.tree)
            .await?;
        self.send_changes(changes, self.last, state.head).await?;
        self.last = state.head;
        Ok(true)
    }

    fn ready(&self) -> EventCursor {
        EventCursor {
            // Nothing was ever written: no point to resume from yet.
            cursor: self.last.map(|c| cursor(self.incarnation, Some(c))),
        }
    }

    /// `changes` events from `from` to `to`, at most [`CHANGES_PER_EVENT`] each.
    async fn send_changes(
        &self,
        changes: Vec<Change>,
        from: Option<CommitId>,
        to: Option<CommitId>,
    ) -> Result<(), Ended> {
        let pieces: Vec<&[Change]> = if changes.is_empty() {
            vec![&[]]
        } else {
            changes.chunks(CHANGES_PER_EVENT).collect()
        };
        let last = pieces.len() - 1;
        for (i, piece) in pieces.into_iter().enumerate() {
            let at = if i == last { to } else { from };
            let data = BucketChanges {
                cursor: cursor(self.incarnation, at),
                changes: piece.iter().map(change_wire).collect(),
            };
            self.event(event::CHANGES, &data).await?;
        }
        Ok(())
    }

    async fn reset(&self) -> Result<(), Ended> {
        let reason = "cursor_too_old".to_string();
        self.event(event::RESET, &EventReset { reason }).await
    }

    async fn reconnect(&self) -> Result<(), Ended> {
        self.event(event::RECONNECT, &self.ready()).await
    }

    async fn event(&self, name: &str, data: &impl serde::Serialize) -> Result<(), Ended> {
        // Compact JSON holds no newline, so one `data:` line carries it.
        let data = serde_json::to_string(data).expect("an event serializes");
        self.send(Bytes::from(format!("event: {name}\ndata: {data}\n\n")))
            .await
    }

    async fn send(&self, b: Bytes) -> Result<(), Ended> {
        self.tx.send(b).await.map_err(|_| Ended::Gone)
    }
}

/// Resolves once `closing` turns `true` (never if its sender is gone).
async fn shutting_down(closing: &mut tokio::sync::watch::Receiver<bool>) {
    loop {
        let closed = *closing.borrow_and_update();
        if closed {
            return;
        }
        if closing.changed().await.is_err() {
            std::future::pending::<()>().await;
        }
    }
}

/// A change as the feed writes it: the facts as the tree route writes them.
fn change_wire(c: &Change) -> BucketChange {
    let op = match c.op {
        ChangeOp::Add => WireOp::Add,
        ChangeOp::Update => WireOp::Update,
        ChangeOp::Delete => WireOp::Delete,
    };
    let mut out = BucketChange {
        path: c.path.clone(),
        op,
        size: None,
        xet_hash: None,
        uploaded_at: None,
        mtime: None,
        mtime_nanos: None,
    };
    if let Some(e) = &c.entry
        && let BucketEntry::File {
            size,
            xet_hash,
            mtime,
            uploaded_at,
            ..
        } = file_entry(&c.path, e)
    {
        out.size = Some(size);
        out.xet_hash = Some(xet_hash);
        out.uploaded_at = uploaded_at;
        out.mtime = mtime.map(EventTime::Text);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_round_trip_and_reject_others() {
        let c = CommitId::from_bytes([0xab; 20]);
        for (inc, commit) in [(7, Some(c)), (u64::MAX, None)] {
            assert_eq!(
                parse_cursor(&cursor(inc, commit)),
                Some(Start::Cursor {
                    incarnation: inc,
                    commit
                })
            );
        }
        for bad in [
            "",
            "x",
            "0000000000000007",
            &format!("7-{c}"),
            &format!("{}-ab", "0".repeat(16)),
        ] {
            assert_eq!(parse_cursor(bad), None, "{bad}");
        }
    }
}
