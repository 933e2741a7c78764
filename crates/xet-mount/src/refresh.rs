//! The listing, and keeping the tree the server's while others write
//! ([`crate::MountOptions::refresh`]).
//!
//! - A repository: every `refresh`, the commit its revision names; a new one is listed
//!   again.
//! - A bucket: its events feed ([`xet_hub_client::events`]), from the `updatedAt` read
//!   before the mount's listing: the feed replays what changed at or after it, so
//!   nothing made between the listing and the stream is missed (what the listing had
//!   already is applied again, which changes nothing). A change is applied to the tree
//!   as it comes, without a listing; a `reset`, or a change that lacks what a file needs,
//!   is a new listing. A stream that ends (`reconnect`, a broken connection) is resumed
//!   from its last cursor after a wait: 1 s, doubling up to `refresh` while streams fail
//!   before their replay is done (so a server that ends every stream at once is not
//!   asked more than once a second).
//!   A server without the feed ([`xet_hub_client::HubError::ends_following`]) is polled
//!   instead, as a repository is, for its `updatedAt`: one warning says so.
//! - Files being written here are left as they are, by a listing as by an event; a
//!   listing asked for before a change made here is not merged (it would undo it).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, SystemTime};

use xet_hash::MerkleHash;
use xet_hub::RepoRef;
use xet_hub::api::buckets::{BucketChange, BucketEntry, ChangeOp};
use xet_hub_client::{BucketEvent, EventsFrom, HubError};

use crate::ctx::{Ctx, Source};
use crate::fs::State;
use crate::read::error_chain;
use crate::tree::{Content, FileFacts, Kind, Listed, Tree};

/// The first wait before a stream is resumed; it doubles up to the refresh interval.
const FIRST_WAIT: Duration = Duration::from_secs(1);

/// The files below the mount's root, and what tells a later listing apart (the
/// commit, or the bucket's `updatedAt`, read before the listing).
pub(crate) async fn list(ctx: &Ctx) -> Result<(Vec<Listed>, String), HubError> {
    match &ctx.source {
        Source::Repo { repo, path, .. } => {
            let commit = ctx.commit();
            let entries = ctx
                .client
                .list_tree(repo, &commit, path.as_ref(), true)
                .await?;
            let now = SystemTime::now();
            let mut out = Vec::new();
            for e in &entries {
                let Ok(Some(f)) = xet_hub_client::RemoteFile::from_entry(e) else {
                    continue;
                };
                let Some(rel) = ctx.source.local(f.path.as_str()) else {
                    continue;
                };
                let content = match f.xet_hash() {
                    Some(h) => Content::Xet(h),
                    None => Content::Resolve,
                };
                out.push(Listed {
                    path: rel.to_string(),
                    facts: FileFacts {
                        size: f.size,
                        content,
                    },
                    mtime: now,
                });
            }
            Ok((out, commit))
        }
        Source::Bucket { bucket, prefix } => {
            let info = ctx.client.bucket_info(bucket).await?;
            let entries = ctx
                .client
                .list_bucket_tree(bucket, prefix.as_ref(), true)
                .await?;
            let out = entries
                .into_iter()
                .filter_map(|e| bucket_file(&ctx.source, bucket, e))
                .collect();
            Ok((out, info.updated_at))
        }
    }
}

/// A file of a bucket's listing, if it is one below the mount's root.
fn bucket_file(source: &Source, bucket: &RepoRef, e: BucketEntry) -> Option<Listed> {
    let BucketEntry::File {
        path,
        size,
        xet_hash,
        mtime,
        uploaded_at,
        ..
    } = e
    else {
        return None;
    };
    let rel = source.local(&path)?;
    let Ok(hash) = MerkleHash::from_hex(&xet_hash) else {
        tracing::warn!("{path} in {bucket}: xetHash {xet_hash:?} is not a Xet hash; left out");
        return None;
    };
    let ms = mtime
        .or(uploaded_at)
        .and_then(|t| xet_hub::time::parse_rfc3339_ms(&t));
    Some(Listed {
        path: rel.to_string(),
        facts: FileFacts {
            size,
            content: Content::Xet(hash),
        },
        mtime: ms.map_or(SystemTime::UNIX_EPOCH, system_time),
    })
}

/// The time `ms` milliseconds from the Unix epoch (before it if negative).
fn system_time(ms: i64) -> SystemTime {
    let d = Duration::from_millis(ms.unsigned_abs());
    if ms >= 0 {
        SystemTime::UNIX_EPOCH + d
    } else {
        SystemTime::UNIX_EPOCH - d
    }
}

/// Keep the tree the server's, `marker` being what the mount's listing was read at:
/// a bucket's feed followed, else the source polled every `every`.
pub(crate) async fn run(state: Arc<State>, every: Duration, marker: String) {
    if let Source::Bucket { bucket, .. } = &state.ctx.source {
        let mut f = Follower {
            state: &state,
            bucket: bucket.clone(),
            from: EventsFrom::Since(marker.clone()),
            relist: false,
            live: false,
        };
        let e = f.follow(every).await;
        tracing::warn!(
            "{}: its events feed cannot be followed ({}); polling its updatedAt every {every:?} instead",
            state.ctx.source,
            error_chain(&e)
        );
    }
    poll(&state, every, marker).await
}

/// Every `every`: has the source changed (a bucket's `updatedAt`, the revision's
/// commit) since `marker`? Then list it again and merge the listing.
async fn poll(state: &State, every: Duration, marker: String) {
    let ctx = &state.ctx;
    let mut seen = marker;
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let marker = match &ctx.source {
            Source::Repo { repo, revision, .. } => ctx
                .client
                .repo_info(repo, revision)
                .await
                .map(|(c, _)| c.to_string()),
            Source::Bucket { bucket, .. } => {
                ctx.client.bucket_info(bucket).await.map(|i| i.updated_at)
            }
        };
        let marker = match marker {
            Ok(m) => m,
            Err(e) => {
                tracing::warn!("refreshing {}: {}", ctx.source, error_chain(&e));
                continue;
            }
        };
        if seen == marker {
            continue;
        }
        if matches!(ctx.source, Source::Repo { .. }) {
            *ctx.commit.lock().expect("commit lock") = marker.clone();
        }
        match relist(state).await {
            Ok(Some(_)) => seen = marker,
            // Changed here meanwhile: list again at the next tick.
            Ok(None) => {}
            Err(e) => tracing::warn!("refreshing {}: {}", ctx.source, error_chain(&e)),
        }
    }
}

/// List the source again and merge the listing; what it was read at, or `None` if a
/// change was made here meanwhile (the listing may lack it: not merged).
async fn relist(state: &State) -> Result<Option<String>, HubError> {
    let generation = state.generation.load(Ordering::SeqCst);
    let (listed, marker) = list(&state.ctx).await?;
    if state.generation.load(Ordering::SeqCst) != generation {
        return Ok(None);
    }
    let keep = being_written(state);
    state.tree.lock().expect("tree lock").merge(listed, &keep);
    Ok(Some(marker))
}

/// The inodes of files being written here.
fn being_written(state: &State) -> Vec<u64> {
    let staged = state.staged.lock().expect("staged lock");
    staged.keys().copied().collect()
}

/// How a stream ended.
enum End {
    /// `reconnect`, or the connection ended: resume from the last cursor.
    Resume,
    /// A listing is needed first (`reset`, or a change the tree cannot take).
    Relist,
}

/// The state of following a bucket's feed.
struct Follower<'s> {
    state: &'s State,
    bucket: RepoRef,
    /// Where the next stream starts: the last cursor, or a listing's `updatedAt`.
    from: EventsFrom,
    /// List again before the next stream.
    relist: bool,
    /// The current stream has replayed what was missed (`ready`).
    live: bool,
}

impl Follower<'_> {
    /// Follow the feed until it proves unusable: the error that says so.
    async fn follow(&mut self, every: Duration) -> HubError {
        let most = every.max(FIRST_WAIT);
        let mut wait = FIRST_WAIT;
        loop {
            if self.relist {
                match relist(self.state).await {
                    Ok(Some(updated_at)) => {
                        self.from = EventsFrom::Since(updated_at);
                        self.relist = false;
                    }
                    Ok(None) => {}
                    Err(e) => self.warn(&e),
                }
            }
            if !self.relist {
                let end = self.session().await;
                if self.live {
                    wait = FIRST_WAIT;
                }
                match end {
                    Ok(End::Resume) => {}
                    Ok(End::Relist) => self.relist = true,
                    Err(e) if e.ends_following() => return e,
                    Err(e) => self.warn(&e),
                }
            }
            tokio::time::sleep(wait).await;
            wait = (wait * 2).min(most);
        }
    }

    /// One stream, read to its end.
    async fn session(&mut self) -> Result<End, HubError> {
        self.live = false;
        let client = &self.state.ctx.client;
        let mut events = client
            .bucket_events(&self.bucket, self.from.clone())
            .await?;
        while let Some(e) = events.next().await? {
            match e {
                BucketEvent::Ready { cursor } => {
                    self.live = true;
                    self.resume_at(cursor);
                }
                BucketEvent::Changes { cursor, changes } => {
                    if !self.apply(&changes) {
                        return Ok(End::Relist);
                    }
                    self.from = EventsFrom::Cursor(cursor);
                }
                BucketEvent::Reset { reason } => {
                    tracing::info!(
                        "{}: the events feed reset ({reason}): listing again",
                        self.bucket
                    );
                    return Ok(End::Relist);
                }
                BucketEvent::Reconnect { cursor } => {
                    self.resume_at(cursor);
                    return Ok(End::Resume);
                }
            }
        }
        Ok(End::Resume)
    }

    fn resume_at(&mut self, cursor: Option<String>) {
        if let Some(c) = cursor {
            self.from = EventsFrom::Cursor(c);
        }
    }

    /// Apply `changes` to the tree; `false` if a listing is needed.
    fn apply(&self, changes: &[BucketChange]) -> bool {
        let keep = being_written(self.state);
        let mut tree = self.state.tree.lock().expect("tree lock");
        apply_changes(&mut tree, &self.state.ctx.source, changes, &keep)
    }

    fn warn(&self, e: &HubError) {
        tracing::warn!("following {}: {}", self.state.ctx.source, error_chain(e));
    }
}

/// Apply a bucket's `changes` (full bucket paths) to `tree` mounted from `source`,
/// leaving the files of `keep` (being written here) as they are. `false` if a change
/// lacks what the tree needs (an unknown op, an `add` without its hash): only a
/// listing can say it.
pub(crate) fn apply_changes(
    tree: &mut Tree,
    source: &Source,
    changes: &[BucketChange],
    keep: &[u64],
) -> bool {
    for c in changes {
        let Some(rel) = source.local(&c.path) else {
            continue;
        };
        let at = tree.find(rel);
        if at.is_some_and(|i| keep.contains(&i)) {
            continue;
        }
        match c.op {
            ChangeOp::Delete => {
                if let Some(i) = at {
                    tree.remove_file(i);
                }
            }
            ChangeOp::Add | ChangeOp::Update => {
                let Some((facts, mtime)) = file_of(tree, at, c) else {
                    return false;
                };
                tree.put_file(rel, facts, mtime);
            }
            ChangeOp::Other => return false,
        }
    }
    true
}

/// The facts and time of the file `c` adds or updates: what it says and, for an
/// update, what the file at `at` has for what it leaves out (unchanged); `None` if that
/// is not enough.
fn file_of(tree: &Tree, at: Option<u64>, c: &BucketChange) -> Option<(FileFacts, SystemTime)> {
    let before = at
        .filter(|_| c.op == ChangeOp::Update)
        .and_then(|i| tree.get(i))
        .and_then(|n| match &n.kind {
            Kind::File(f) => Some((f, n.mtime)),
            Kind::Dir(_) => None,
        });
    let hash = match (&c.xet_hash, before) {
        (Some(h), _) => MerkleHash::from_hex(h).ok()?,
        (None, Some((f, _))) => match f.content {
            Content::Xet(h) => h,
            Content::Resolve | Content::Local => return None,
        },
        (None, None) => return None,
    };
    let size = c.size.or(before.map(|(f, _)| f.size))?;
    let mtime = c
        .time_ms()
        .map(system_time)
        .or(before.map(|(_, t)| t))
        .unwrap_or(SystemTime::UNIX_EPOCH);
    let facts = FileFacts {
        size,
        content: Content::Xet(hash),
    };
    Some((facts, mtime))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::tree::ROOT;
    use xet_hub::api::buckets::EventTime;

    fn change(path: &str, op: ChangeOp, hash: Option<u8>, size: Option<u64>) -> BucketChange {
        BucketChange {
            path: path.into(),
            op,
            size,
            xet_hash: hash.map(|b| MerkleHash::from_bytes([b; 32]).hex()),
            uploaded_at: Some("2026-02-06T17:37:57.000Z".into()),
            mtime: None,
            mtime_nanos: None,
        }
    }

    fn source(prefix: Option<&str>) -> Source {
        Source::Bucket {
            bucket: xet_hub_client::buckets::bucket_ref(xet_hub::RepoId::parse("o/b").unwrap()),
            prefix: prefix.map(|p| xet_hub::RepoPath::parse(p).unwrap()),
        }
    }

    fn facts_at(t: &Tree, path: &str) -> Option<FileFacts> {
        match &t.get(t.find(path)?)?.kind {
            Kind::File(f) => Some(f.clone()),
            Kind::Dir(_) => None,
        }
    }

    /// Adds make files (and their folders), updates change what they say and keep what
    /// they leave out, deletes remove the file and the folders left empty; paths
    /// outside the mounted prefix are ignored; a file being written is left alone.
    #[test]
    fn changes_apply_to_the_tree_below_the_prefix() {
        let src = source(Some("data"));
        let mut t = Tree::new(SystemTime::UNIX_EPOCH);
        let add = [
            change("data/a/b.bin", ChangeOp::Add, Some(1), Some(3)),
            change("data/c.txt", ChangeOp::Add, Some(2), Some(4)),
            change("data/w.txt", ChangeOp::Add, Some(3), Some(5)),
            change("elsewhere/x", ChangeOp::Add, Some(4), Some(6)),
            change("database", ChangeOp::Add, Some(4), Some(6)),
        ];
        assert!(apply_changes(&mut t, &src, &add, &[]));
        assert_eq!(t.totals(), (3, 12));
        let b = facts_at(&t, "a/b.bin").unwrap();
        assert_eq!(b.content, Content::Xet(MerkleHash::from_bytes([1; 32])));
        let mtime = t.get(t.find("a/b.bin").unwrap()).unwrap().mtime;
        assert_eq!(mtime, system_time(1_770_399_477_000));

        // Only the time and the size: the hash is unchanged.
        let mut u = change("data/a/b.bin", ChangeOp::Update, None, Some(9));
        u.mtime = Some(EventTime::Millis(5));
        let w = t.find("w.txt").unwrap();
        let writing = [
            u,
            change("data/c.txt", ChangeOp::Delete, None, None),
            change("data/w.txt", ChangeOp::Delete, None, None),
            change("data/gone", ChangeOp::Delete, None, None),
        ];
        assert!(apply_changes(&mut t, &src, &writing, &[w]));
        let b = facts_at(&t, "a/b.bin").unwrap();
        assert_eq!(
            (b.size, b.content),
            (9, Content::Xet(MerkleHash::from_bytes([1; 32])))
        );
        assert_eq!(
            t.get(t.find("a/b.bin").unwrap()).unwrap().mtime,
            system_time(5)
        );
        assert_eq!(t.find("c.txt"), None);
        assert_eq!(t.find("w.txt"), Some(w), "being written: kept");

        // The last file of a folder deleted: the folder goes too, the root stays.
        let del = [change("data/a/b.bin", ChangeOp::Delete, None, None)];
        assert!(apply_changes(&mut t, &src, &del, &[]));
        assert_eq!(t.find("a"), None);
        assert_eq!(t.children(ROOT).unwrap().len(), 1);
        // Applying the same changes again changes nothing.
        assert!(apply_changes(&mut t, &src, &del, &[]));
        assert_eq!(t.totals(), (1, 5));
    }

    /// What the tree cannot take asks for a listing: an add without its hash or size,
    /// an update of a file not known without them, an op not known, a bad hash.
    #[test]
    fn changes_lacking_facts_ask_for_a_listing() {
        let src = source(None);
        let mut t = Tree::new(SystemTime::UNIX_EPOCH);
        assert!(apply_changes(
            &mut t,
            &src,
            &[change("f", ChangeOp::Add, Some(1), Some(1))],
            &[]
        ));
        let mut bad_hash = change("g", ChangeOp::Add, Some(1), Some(1));
        bad_hash.xet_hash = Some("nope".into());
        for c in [
            change("g", ChangeOp::Add, None, Some(1)),
            change("g", ChangeOp::Add, Some(1), None),
            change("g", ChangeOp::Update, None, Some(1)),
            change("f", ChangeOp::Other, None, None),
            bad_hash,
        ] {
            assert!(
                !apply_changes(&mut t, &src, std::slice::from_ref(&c), &[]),
                "{c:?}"
            );
        }
        // An add over a known file still needs its own hash.
        assert!(!apply_changes(
            &mut t,
            &src,
            &[change("f", ChangeOp::Add, None, Some(2))],
            &[]
        ));
    }

    /// A Hub on loopback with one bucket `o/b`: its info (`updatedAt`) and listing are
    /// what `files` holds; each request of its events feed gets the next of `streams`
    /// (a body of server-sent events, the connection closed after it), then `404`.
    struct FakeHub {
        url: String,
        files: Arc<std::sync::Mutex<(String, Vec<String>)>>,
        streams: Arc<std::sync::Mutex<Vec<&'static str>>>,
        /// The paths (and queries) it was asked for.
        asked: Arc<std::sync::Mutex<Vec<String>>>,
    }

    impl FakeHub {
        async fn start(updated_at: &str, files: &[&str], streams: &[&'static str]) -> FakeHub {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            let hub = FakeHub {
                url: format!("http://{}", listener.local_addr().unwrap()),
                files: Arc::new(std::sync::Mutex::new((
                    updated_at.to_string(),
                    files.iter().map(|f| f.to_string()).collect(),
                ))),
                streams: Arc::new(std::sync::Mutex::new(
                    streams.iter().rev().copied().collect(),
                )),
                asked: Arc::default(),
            };
            let (files, streams, asked) = (
                Arc::clone(&hub.files),
                Arc::clone(&hub.streams),
                Arc::clone(&hub.asked),
            );
            tokio::spawn(async move {
                while let Ok((conn, _)) = listener.accept().await {
                    serve_one(conn, &files, &streams, &asked).await;
                }
            });
            hub
        }

        /// A mount's state on this hub, listed.
        async fn mounted(&self) -> (Arc<State>, String) {
            let client = xet_hub_client::HubClient::new(&self.url, None).unwrap();
            let source = source(None);
            let token_url = client.bucket_token_url(source.repo(), xet_hub_client::TokenKind::Read);
            let subject = xet_hub_client::RepoTarget::repo(source.repo());
            let cas = client.xet_cas(&subject, &token_url, None).unwrap();
            let ctx = Arc::new(Ctx {
                client,
                source,
                commit: Default::default(),
                cas: Arc::new(cas),
                memory: Arc::new(tokio::sync::Semaphore::new(1024)),
                chunk_hashes: Arc::default(),
                opts: Default::default(),
                uid: 0,
                gid: 0,
            });
            let (listed, marker) = list(&ctx).await.unwrap();
            let mut tree = Tree::new(SystemTime::UNIX_EPOCH);
            tree.merge(listed, &[]);
            (Arc::new(State::new(ctx, tree)), marker)
        }

        fn asked(&self) -> Vec<String> {
            self.asked.lock().unwrap().clone()
        }
    }

    async fn serve_one(
        mut conn: tokio::net::TcpStream,
        files: &std::sync::Mutex<(String, Vec<String>)>,
        streams: &std::sync::Mutex<Vec<&'static str>>,
        asked: &std::sync::Mutex<Vec<String>>,
    ) {
        use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
        let mut head = Vec::new();
        let mut byte = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") && conn.read(&mut byte).await.unwrap_or(0) == 1 {
            head.push(byte[0]);
        }
        let head = String::from_utf8_lossy(&head).into_owned();
        let path = head.split(' ').nth(1).unwrap_or_default().to_string();
        asked.lock().unwrap().push(path.clone());
        let (status, kind, body) = if path.starts_with("/api/buckets/o/b/events") {
            match streams.lock().unwrap().pop() {
                Some(sse) => ("200 OK", "text/event-stream", sse.to_string()),
                None => ("404 Not Found", "application/json", "{}".to_string()),
            }
        } else {
            let (status, body) = answer(&path, &files.lock().unwrap());
            (status, "application/json", body)
        };
        let reply = format!(
            "HTTP/1.1 {status}\r\ncontent-type: {kind}\r\ncontent-length: {}\r\n\
             connection: close\r\n\r\n{body}",
            body.len()
        );
        let _ = conn.write_all(reply.as_bytes()).await;
    }

    /// The answer to a GET of `path`, given the bucket's `updatedAt` and files.
    fn answer(path: &str, (updated_at, files): &(String, Vec<String>)) -> (&'static str, String) {
        let hash = MerkleHash::from_bytes([7; 32]).hex();
        if path == "/api/buckets/o/b" {
            let n = files.len();
            let info = format!(
                r#"{{"_id":"1","id":"o/b","author":"o","private":false,"repoType":"bucket",
                "createdAt":"{updated_at}","updatedAt":"{updated_at}","size":{n},"totalFiles":{n}}}"#
            );
            ("200 OK", info)
        } else if path.starts_with("/api/buckets/o/b/tree") {
            let entries: Vec<String> = files
                .iter()
                .map(|f| format!(r#"{{"type":"file","path":"{f}","size":1,"xetHash":"{hash}"}}"#))
                .collect();
            ("200 OK", format!("[{}]", entries.join(",")))
        } else {
            ("404 Not Found", "{}".to_string())
        }
    }

    /// Until `done` holds of the tree (within 20 s).
    async fn until(state: &State, what: &str, done: impl Fn(&Tree) -> bool) {
        let started = std::time::Instant::now();
        while !done(&state.tree.lock().unwrap()) {
            assert!(started.elapsed() < Duration::from_secs(20), "{what}: never");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// A server without the events feed: the mount asks for it once, then polls the
    /// bucket's `updatedAt` and lists it again when it changed.
    #[tokio::test]
    async fn without_an_events_feed_the_bucket_is_polled() {
        let hub = FakeHub::start("2026-01-01T00:00:00.000Z", &["a.txt"], &[]).await;
        let (state, marker) = hub.mounted().await;
        let task = tokio::spawn(run(Arc::clone(&state), Duration::from_millis(100), marker));
        *hub.files.lock().unwrap() = ("2026-01-01T00:00:01.000Z".into(), vec!["b/c.txt".into()]);
        until(&state, "the listing merged", |t| {
            t.find("b/c.txt").is_some() && t.find("a.txt").is_none()
        })
        .await;
        task.abort();
        let asked = hub.asked();
        let feeds = asked.iter().filter(|p| p.contains("/events")).count();
        assert_eq!(feeds, 1, "{asked:?}");
        let infos = asked.iter().filter(|p| *p == "/api/buckets/o/b").count();
        assert!(infos >= 2, "{asked:?}");
    }

    const HASH7: &str = "0707070707070707070707070707070707070707070707070707070707070707";

    /// The feed followed: it starts at the listing's `updatedAt`; a change is applied
    /// without a listing; a stream that ends is resumed from the last cursor; `reset`
    /// lists again and starts from that listing's `updatedAt`. (Then the feed is gone:
    /// polling.)
    #[tokio::test]
    async fn the_feed_is_followed_resumed_by_cursor_and_reset_lists_again() {
        assert_eq!(MerkleHash::from_bytes([7; 32]).hex(), HASH7);
        let streams = [
            concat!(
                "event: ready\ndata: {\"cursor\":\"c0\"}\n\n: ping\n\n",
                "event: changes\ndata: {\"cursor\":\"c1\",\"changes\":[{\"path\":\"b.txt\",",
                "\"op\":\"add\",\"size\":1,\"xetHash\":\"0707070707070707070707070707070707070707070707070707070707070707\"}]}\n\n"
            ),
            "event: reset\ndata: {\"reason\":\"cursor_too_old\"}\n\n",
            concat!(
                "event: ready\ndata: {}\n\n",
                "event: changes\ndata: {\"cursor\":\"c9\",\"changes\":[{\"path\":\"a.txt\",\"op\":\"delete\"}]}\n\n",
            ),
        ];
        let hub = FakeHub::start("2026-01-01T00:00:00.000Z", &["a.txt"], &streams).await;
        let (state, marker) = hub.mounted().await;
        // What the reset's listing will show.
        *hub.files.lock().unwrap() = (
            "2026-01-01T00:00:05.000Z".into(),
            vec!["a.txt".into(), "b.txt".into(), "c.txt".into()],
        );
        let task = tokio::spawn(run(Arc::clone(&state), Duration::from_secs(60), marker));
        until(&state, "b.txt added by the feed", |t| {
            t.find("b.txt").is_some()
        })
        .await;
        until(&state, "c.txt listed after the reset, a.txt deleted", |t| {
            t.find("c.txt").is_some() && t.find("a.txt").is_none()
        })
        .await;
        task.abort();
        let feeds: Vec<String> = hub
            .asked()
            .into_iter()
            .filter(|p| p.contains("/events"))
            .collect();
        assert_eq!(
            feeds[..3],
            [
                "/api/buckets/o/b/events?since=2026-01-01T00%3A00%3A00.000Z",
                "/api/buckets/o/b/events?cursor=c1",
                "/api/buckets/o/b/events?since=2026-01-01T00%3A00%3A05.000Z",
            ]
        );
        assert_eq!(state.tree.lock().unwrap().totals(), (2, 2));
    }
}
