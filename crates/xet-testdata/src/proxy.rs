//! A fault-injecting HTTP/1.1 proxy on 127.0.0.1 in front of a real server, for tests.
//!
//! It forwards bytes as they come (one request per connection, every answer marked
//! `connection: close`), logs every request (method, path, query, headers, the status
//! answered, body bytes each way) and, by rule, answers instead of the server or cuts a
//! transfer short: canned statuses and bodies, a request or answer that stops mid-body
//! and goes silent with the connection open or is cut, no answer at all, a rewritten
//! `Range`, an answer with one byte string replaced by another. Plain threads and
//! blocking sockets, so async and blocking tests alike can use it (and this crate stays
//! free of tokio).
//!
//! The `Host` header is passed through untouched, so the server builds presigned and
//! grant URLs that point back at the proxy. Connections held silent end when the client
//! closes them, on [`Proxy::clear`], or when the proxy is dropped: a stall never keeps a
//! test alive.

use std::io::{BufRead, BufReader, BufWriter, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// Which requests a rule applies to.
#[derive(Clone, Debug)]
pub struct Match {
    /// `None`: any method.
    method: Option<String>,
    /// The path (without the query) starts with this.
    prefix: String,
    /// `Some`: the path also holds this, anywhere.
    contains: Option<String>,
}

impl Match {
    /// Any method, path starting with `prefix`.
    pub fn prefix(prefix: &str) -> Match {
        Match {
            method: None,
            prefix: prefix.to_string(),
            contains: None,
        }
    }

    /// This method (any case) and a path starting with `prefix`.
    pub fn method(method: &str, prefix: &str) -> Match {
        Match {
            method: Some(method.to_string()),
            prefix: prefix.to_string(),
            contains: None,
        }
    }

    /// The same, and the path must also hold `part` anywhere:
    /// `Match::method("POST", "/api/").containing("/commit/")` is a Hub commit.
    pub fn containing(self, part: &str) -> Match {
        Match {
            contains: Some(part.to_string()),
            ..self
        }
    }

    fn hits(&self, method: &str, path: &str) -> bool {
        self.method
            .as_deref()
            .is_none_or(|m| m.eq_ignore_ascii_case(method))
            && path.starts_with(self.prefix.as_str())
            && self.contains.as_deref().is_none_or(|c| path.contains(c))
    }
}

/// Where an answer's body stops.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Cut {
    /// After this many payload bytes (streamed as they arrive).
    After(u64),
    /// After half the payload (the answer is read whole first and sent with its
    /// `content-length`, whatever framing the server used).
    Half,
}

/// What to do with a matching request instead of plain forwarding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Fault {
    /// Answer with this status and a JSON error body; nothing is forwarded.
    Status(u16),
    /// Answer with this status and `Retry-After` (its value verbatim); nothing is forwarded.
    StatusRetryAfter(u16, String),
    /// Answer with a canned response; nothing is forwarded.
    Respond {
        status: u16,
        content_type: String,
        body: String,
    },
    /// Never answer; whatever the client sends is read and dropped.
    StallHeaders,
    /// Forward the request head and the first `after` bytes of its body, then go silent:
    /// no more bytes upstream, no answer. The connection stays open.
    StallRequest { after: u64 },
    /// Forward, send the answer's head and its body up to the cut, then go silent with
    /// the connection open.
    StallResponse(Cut),
    /// Forward, send the answer's head and its body up to the cut, then close the
    /// connection.
    DropResponse(Cut),
    /// Forward with the `Range` header replaced (`None`: removed).
    RewriteRange(Option<String>),
    /// Forward, and answer with every `from` replaced by `to` in the answer's header
    /// values and body (a lying server). The body is read whole first and sent with its
    /// `content-length`, whatever framing the server used. `from` and `to` must be of
    /// the same length (checked when the rule is added), so the body's length, and the
    /// `content-length` of an answer to `HEAD`, stay what the server said.
    Rewrite { from: Vec<u8>, to: Vec<u8> },
}

impl Fault {
    /// How the log names it ([`Seen::fault`]): its `Debug` form, with a rewrite's
    /// strings as text.
    fn describe(&self) -> String {
        match self {
            Fault::Rewrite { from, to } => format!(
                "Rewrite {{ from: {:?}, to: {:?} }}",
                String::from_utf8_lossy(from),
                String::from_utf8_lossy(to)
            ),
            f => format!("{f:?}"),
        }
    }
}

struct Rule {
    on: Match,
    /// `None`: forward normally (lets the first matching requests through).
    fault: Option<Fault>,
    remaining: usize,
}

/// One request the proxy saw.
#[derive(Clone, Debug, Default)]
pub struct Seen {
    pub method: String,
    /// Without the query.
    pub path: String,
    pub query: Option<String>,
    /// The request's headers as the client sent them.
    pub headers: Vec<(String, String)>,
    /// The fault applied (its `Debug` form, a rewrite's strings as text), if any.
    pub fault: Option<String>,
    /// The status answered (0 if no answer head was sent).
    pub status: u16,
    /// Body bytes taken from the client (payload, without chunked framing).
    pub request_bytes: u64,
    /// Body bytes sent to the client (payload, without chunked framing).
    pub response_bytes: u64,
}

impl Seen {
    /// The value of a request header (name in any case).
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The request's `Range` header.
    pub fn range(&self) -> Option<&str> {
        self.header("range")
    }
}

struct State {
    upstream: SocketAddr,
    rules: Mutex<Vec<Rule>>,
    log: Mutex<Vec<Seen>>,
    /// Bumped by `clear`: held connections close.
    generation: AtomicU64,
    stop: AtomicBool,
    held: AtomicU64,
    /// Connections accepted and not yet done with.
    open: AtomicU64,
}

/// The proxy; it stops (and releases every held connection) when dropped.
pub struct Proxy {
    /// `http://127.0.0.1:PORT`
    pub url: String,
    addr: SocketAddr,
    st: Arc<State>,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.st.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(self.addr); // wake the accept loop
    }
}

impl Proxy {
    /// A proxy in front of `upstream` (`http://HOST:PORT`).
    pub fn start(upstream: &str) -> Proxy {
        let upstream = upstream
            .trim_start_matches("http://")
            .trim_end_matches('/')
            .to_socket_addrs()
            .ok()
            .and_then(|mut a| a.next())
            .unwrap_or_else(|| panic!("upstream {upstream} is not http://HOST:PORT"));
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let st = Arc::new(State {
            upstream,
            rules: Mutex::new(Vec::new()),
            log: Mutex::new(Vec::new()),
            generation: AtomicU64::new(0),
            stop: AtomicBool::new(false),
            held: AtomicU64::new(0),
            open: AtomicU64::new(0),
        });
        let accept = st.clone();
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if accept.stop.load(Ordering::SeqCst) {
                    break;
                }
                let Ok(conn) = conn else { continue };
                accept.open.fetch_add(1, Ordering::SeqCst);
                let st = accept.clone();
                std::thread::spawn(move || {
                    let _ = serve_connection(&st, conn);
                    st.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Proxy {
            url: format!("http://{addr}"),
            addr,
            st,
        }
    }

    /// Apply `fault` to the next `times` requests matching `on`. Rules are checked in
    /// the order they were added; the first with uses left applies.
    pub fn inject(&self, on: Match, fault: Fault, times: usize) {
        self.push(on, Some(fault), times);
    }

    /// Forward the next `times` requests matching `on` unchanged (so that a rule added
    /// after this one applies to the request after them).
    pub fn pass(&self, on: Match, times: usize) {
        self.push(on, None, times);
    }

    fn push(&self, on: Match, fault: Option<Fault>, remaining: usize) {
        if let Some(Fault::Rewrite { from, to }) = &fault {
            assert!(!from.is_empty(), "a rewrite of nothing");
            assert_eq!(
                from.len(),
                to.len(),
                "a rewrite must keep the length: {:?} -> {:?}",
                String::from_utf8_lossy(from),
                String::from_utf8_lossy(to)
            );
        }
        self.st.rules.lock().unwrap().push(Rule {
            on,
            fault,
            remaining,
        });
    }

    /// Drop every rule and close every held connection.
    pub fn clear(&self) {
        self.st.rules.lock().unwrap().clear();
        self.st.generation.fetch_add(1, Ordering::SeqCst);
    }

    /// Uses left in the rules (0 when every rule was used up).
    pub fn pending(&self) -> usize {
        self.st
            .rules
            .lock()
            .unwrap()
            .iter()
            .fold(0, |n, r| n.saturating_add(r.remaining))
    }

    pub fn log(&self) -> Vec<Seen> {
        self.st.log.lock().unwrap().clone()
    }

    pub fn clear_log(&self) {
        self.st.log.lock().unwrap().clear();
    }

    /// Connections currently held silent by a stall.
    pub fn held(&self) -> u64 {
        self.st.held.load(Ordering::SeqCst)
    }

    /// Connections accepted and not yet done with, held ones included. A request's log
    /// entry is complete once its connection is done: when this is 0 after the client
    /// went away, [`Proxy::log`] holds everything it sent, in full.
    pub fn open(&self) -> u64 {
        self.st.open.load(Ordering::SeqCst)
    }

    /// Requests with this method (any case) whose path starts with `prefix`.
    pub fn count(&self, method: &str, prefix: &str) -> usize {
        self.matching(method, prefix).len()
    }

    /// The requests `count` counts, in the order they came.
    pub fn matching(&self, method: &str, prefix: &str) -> Vec<Seen> {
        let on = Match::method(method, prefix);
        self.log()
            .into_iter()
            .filter(|s| on.hits(&s.method, &s.path))
            .collect()
    }

    /// Requests of the log sent more than once (same method, path and query), each named
    /// once, as `METHOD PATH[?QUERY]`: a retry shows here.
    pub fn repeated(&self) -> Vec<String> {
        let mut seen = std::collections::BTreeMap::<String, usize>::new();
        for s in self.log() {
            let query = s.query.map(|q| format!("?{q}")).unwrap_or_default();
            *seen
                .entry(format!("{} {}{query}", s.method, s.path))
                .or_default() += 1;
        }
        seen.into_iter()
            .filter(|(_, n)| *n > 1)
            .map(|(r, _)| r)
            .collect()
    }
}

// ---------------------------------------------------------------------------------------
// HTTP/1.1 framing

enum Framing {
    None,
    Length(u64),
    Chunked,
    UntilEof,
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

fn body_framing(headers: &[(String, String)], request: bool) -> std::io::Result<Framing> {
    if header(headers, "transfer-encoding").is_some_and(|v| v.contains("chunked")) {
        Ok(Framing::Chunked)
    } else if let Some(n) = header(headers, "content-length") {
        n.trim()
            .parse()
            .map(Framing::Length)
            .map_err(|_| std::io::Error::other(format!("bad content-length {n:?}")))
    } else if request {
        Ok(Framing::None)
    } else {
        Ok(Framing::UntilEof)
    }
}

/// A start line and its headers.
type Head = (String, Vec<(String, String)>);

/// The start line and headers of a message; `None` at a clean end of stream.
fn read_head(r: &mut impl BufRead) -> std::io::Result<Option<Head>> {
    let mut first = String::new();
    if r.read_line(&mut first)? == 0 {
        return Ok(None);
    }
    let mut headers = Vec::new();
    loop {
        let mut l = String::new();
        if r.read_line(&mut l)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        let l = l.trim_end();
        if l.is_empty() {
            break;
        }
        let (k, v) = l
            .split_once(':')
            .ok_or_else(|| std::io::Error::other(format!("bad header line {l:?}")))?;
        headers.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(Some((first.trim_end().to_string(), headers)))
}

/// The head with `connection: close` instead of any connection header.
fn write_head(
    w: &mut impl Write,
    first: &str,
    headers: &[(String, String)],
) -> std::io::Result<()> {
    let mut s = format!("{first}\r\n");
    for (k, v) in headers {
        let lk = k.to_ascii_lowercase();
        if lk == "connection" || lk == "keep-alive" || lk == "proxy-connection" {
            continue;
        }
        s.push_str(&format!("{k}: {v}\r\n"));
    }
    s.push_str("connection: close\r\n\r\n");
    w.write_all(s.as_bytes())
}

/// Copies payload bytes, stopping at `limit` in total.
struct Relay {
    buf: Vec<u8>,
    done: u64,
    limit: u64,
}

impl Relay {
    /// Copy `n` bytes (`None`: until EOF); false if the limit stopped it first.
    fn copy(
        &mut self,
        src: &mut impl Read,
        dst: &mut impl Write,
        n: Option<u64>,
    ) -> std::io::Result<bool> {
        let mut left = n.unwrap_or(u64::MAX);
        while left > 0 {
            if self.done >= self.limit {
                dst.flush()?;
                return Ok(false);
            }
            let want = left.min(self.limit - self.done).min(self.buf.len() as u64) as usize;
            let got = src.read(&mut self.buf[..want])?;
            if got == 0 {
                if n.is_none() {
                    break;
                }
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            dst.write_all(&self.buf[..got])?;
            self.done += got as u64;
            left -= got as u64;
        }
        dst.flush()?;
        Ok(true)
    }
}

/// How `relay_body` writes chunked bodies.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Chunks {
    /// As they came (size lines, trailers).
    Keep,
    /// Payload only.
    Strip,
}

/// Copy a body until its end or `limit` payload bytes. Returns the payload bytes copied
/// and whether the limit stopped it.
fn relay_body(
    src: &mut impl BufRead,
    dst: &mut impl Write,
    framing: Framing,
    limit: Option<u64>,
    chunks: Chunks,
) -> std::io::Result<(u64, bool)> {
    let mut r = Relay {
        buf: vec![0u8; 64 << 10],
        done: 0,
        limit: limit.unwrap_or(u64::MAX),
    };
    let keep = chunks == Chunks::Keep;
    match framing {
        Framing::None => Ok((0, false)),
        Framing::Length(n) => {
            let complete = r.copy(src, dst, Some(n))?;
            Ok((r.done, !complete))
        }
        Framing::UntilEof => {
            let complete = r.copy(src, dst, None)?;
            Ok((r.done, !complete))
        }
        Framing::Chunked => loop {
            let mut line = String::new();
            if src.read_line(&mut line)? == 0 {
                return Err(std::io::ErrorKind::UnexpectedEof.into());
            }
            if keep {
                dst.write_all(line.as_bytes())?;
            }
            let size = line.trim().split(';').next().unwrap_or("").trim();
            let size = u64::from_str_radix(size, 16)
                .map_err(|_| std::io::Error::other(format!("bad chunk size {size:?}")))?;
            if size == 0 {
                // Trailers, then the empty line.
                loop {
                    let mut t = String::new();
                    src.read_line(&mut t)?;
                    if keep {
                        dst.write_all(t.as_bytes())?;
                    }
                    if t.trim().is_empty() {
                        break;
                    }
                }
                dst.flush()?;
                return Ok((r.done, false));
            }
            if !r.copy(src, dst, Some(size))? {
                return Ok((r.done, true));
            }
            let mut crlf = [0u8; 2];
            src.read_exact(&mut crlf)?;
            if keep {
                dst.write_all(&crlf)?;
            }
        },
    }
}

// ---------------------------------------------------------------------------------------
// One connection

/// Go silent until the client closes the connection, `clear` is called or the proxy is
/// dropped. Whatever the client still sends is read and dropped.
fn hold(st: &State, client: &mut BufReader<TcpStream>) {
    let generation = st.generation.load(Ordering::SeqCst);
    st.held.fetch_add(1, Ordering::SeqCst);
    // Wake up now and then to see whether the proxy was cleared or dropped.
    let _ = client
        .get_ref()
        .set_read_timeout(Some(Duration::from_millis(50)));
    let mut buf = [0u8; 64 << 10];
    while !st.stop.load(Ordering::SeqCst) && st.generation.load(Ordering::SeqCst) == generation {
        match client.read(&mut buf) {
            Ok(0) => break,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    st.held.fetch_sub(1, Ordering::SeqCst);
}

/// The fault of the first rule with uses left that matches, using one of its uses.
fn take_fault(st: &State, method: &str, path: &str) -> Option<Fault> {
    let mut rules = st.rules.lock().unwrap();
    rules
        .iter_mut()
        .find(|r| r.remaining > 0 && r.on.hits(method, path))
        .and_then(|r| {
            r.remaining -= 1;
            r.fault.clone()
        })
}

/// The log entry of one request, updated as the exchange goes on.
struct Entry<'a> {
    st: &'a State,
    idx: usize,
}

impl Entry<'_> {
    fn note(&self, f: impl FnOnce(&mut Seen)) {
        if let Some(s) = self.st.log.lock().unwrap().get_mut(self.idx) {
            f(s)
        }
    }
}

/// One request per client connection (every answer says `connection: close`).
fn serve_connection(st: &State, conn: TcpStream) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let mut client = BufReader::new(conn);
    let Some((first, mut headers)) = read_head(&mut client)? else {
        return Ok(());
    };
    let mut parts = first.split(' ');
    let method = parts.next().unwrap_or("").to_string();
    let target = parts.next().unwrap_or("");
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), Some(q.to_string())),
        None => (target.to_string(), None),
    };
    let fault = take_fault(st, &method, &path);
    let entry = {
        let mut log = st.log.lock().unwrap();
        log.push(Seen {
            method: method.clone(),
            path,
            query,
            headers: headers.clone(),
            fault: fault.as_ref().map(Fault::describe),
            ..Default::default()
        });
        Entry {
            st,
            idx: log.len() - 1,
        }
    };

    let canned = match &fault {
        Some(Fault::Status(code)) => Some(error_answer(*code, None)),
        Some(Fault::StatusRetryAfter(code, after)) => Some(error_answer(*code, Some(after))),
        Some(Fault::Respond {
            status,
            content_type,
            body,
        }) => Some((*status, content_type.clone(), Vec::new(), body.clone())),
        Some(Fault::StallHeaders) => {
            hold(st, &mut client);
            return Ok(());
        }
        Some(Fault::RewriteRange(range)) => {
            headers.retain(|(k, _)| !k.eq_ignore_ascii_case("range"));
            if let Some(r) = range {
                headers.push(("range".to_string(), r.clone()));
            }
            None
        }
        _ => None,
    };
    if let Some((status, content_type, extra, body)) = canned {
        let framing = body_framing(&headers, true)?;
        let (n, _) = relay_body(
            &mut client,
            &mut std::io::sink(),
            framing,
            None,
            Chunks::Keep,
        )?;
        entry.note(|s| s.request_bytes = n);
        let mut head = vec![
            ("content-type".to_string(), content_type),
            ("content-length".to_string(), body.len().to_string()),
        ];
        head.extend(extra);
        // Noted first, as a forwarded answer's is: a client that has the answer finds it
        // in the log.
        entry.note(|s| s.status = status);
        write_head(&mut out, &format!("HTTP/1.1 {status} Injected"), &head)?;
        out.write_all(body.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    forward(st, &entry, fault, client, out, &first, &headers)
}

/// A canned answer: status, content type, extra headers, body.
type Canned = (u16, String, Vec<(String, String)>, String);

fn error_answer(code: u16, retry_after: Option<&String>) -> Canned {
    let body = format!(r#"{{"error":"injected","reason":"injected fault {code}"}}"#);
    let extra = retry_after
        .map(|a| vec![("retry-after".to_string(), a.clone())])
        .unwrap_or_default();
    (code, "application/json".to_string(), extra, body)
}

/// Send the request upstream and its answer back, applying a stall, cut or rewrite fault.
fn forward(
    st: &State,
    entry: &Entry,
    fault: Option<Fault>,
    mut client: BufReader<TcpStream>,
    mut out: TcpStream,
    first: &str,
    headers: &[(String, String)],
) -> std::io::Result<()> {
    let mut up = TcpStream::connect(st.upstream)?;
    write_head(&mut up, first, headers)?;
    let limit = match &fault {
        Some(Fault::StallRequest { after }) => Some(*after),
        _ => None,
    };
    let mut upw = BufWriter::with_capacity(64 << 10, up.try_clone()?);
    let framing = body_framing(headers, true)?;
    let (n, stalled) = relay_body(&mut client, &mut upw, framing, limit, Chunks::Keep)?;
    upw.flush()?;
    drop(upw);
    entry.note(|s| s.request_bytes = n);
    if stalled {
        hold(st, &mut client);
        let _ = up.shutdown(Shutdown::Both);
        return Ok(());
    }

    let mut upr = BufReader::new(up);
    let Some((status_line, rheaders)) = read_head(&mut upr)? else {
        return Ok(());
    };
    let status: u16 = status_line
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    entry.note(|s| s.status = status);
    let framing = if first.starts_with("HEAD ") || status == 204 || status == 304 {
        Framing::None
    } else {
        body_framing(&rheaders, false)?
    };
    let (cut, stall) = match fault {
        Some(Fault::StallResponse(c)) => (Some(c), true),
        Some(Fault::DropResponse(c)) => (Some(c), false),
        _ => (None, false),
    };
    let (n, cut_short) = match (&fault, cut) {
        (Some(Fault::Rewrite { from, to }), _) => (
            send_rewritten(
                &mut upr,
                &mut out,
                &status_line,
                rheaders,
                framing,
                from,
                to,
            )?,
            false,
        ),
        (_, Some(Cut::Half)) => (
            send_half(&mut upr, &mut out, &status_line, rheaders, framing)?,
            true,
        ),
        _ => {
            let limit = match cut {
                Some(Cut::After(n)) => Some(n),
                _ => None,
            };
            write_head(&mut out, &status_line, &rheaders)?;
            relay_body(&mut upr, &mut out, framing, limit, Chunks::Keep)?
        }
    };
    entry.note(|s| s.response_bytes = n);
    if cut_short && stall {
        hold(st, &mut client);
    }
    let _ = out.shutdown(Shutdown::Both);
    Ok(())
}

/// The whole payload of an answer; its headers now frame it with its `content-length`.
fn read_whole(
    upr: &mut impl BufRead,
    rheaders: &mut Vec<(String, String)>,
    framing: Framing,
) -> std::io::Result<Vec<u8>> {
    let mut whole = Vec::new();
    relay_body(upr, &mut whole, framing, None, Chunks::Strip)?;
    rheaders.retain(|(k, _)| {
        !k.eq_ignore_ascii_case("content-length") && !k.eq_ignore_ascii_case("transfer-encoding")
    });
    rheaders.push(("content-length".to_string(), whole.len().to_string()));
    Ok(whole)
}

/// Read the whole payload to know its half, then send the head with the payload's length
/// and the first half. Returns the bytes sent.
fn send_half(
    upr: &mut impl BufRead,
    out: &mut impl Write,
    status_line: &str,
    mut rheaders: Vec<(String, String)>,
    framing: Framing,
) -> std::io::Result<u64> {
    let whole = read_whole(upr, &mut rheaders, framing)?;
    write_head(out, status_line, &rheaders)?;
    let half = &whole[..whole.len() / 2];
    out.write_all(half)?;
    out.flush()?;
    Ok(half.len() as u64)
}

/// Send the answer with every `from` replaced by `to` in its header values and its
/// payload (read whole first). Returns the payload bytes sent.
fn send_rewritten(
    upr: &mut impl BufRead,
    out: &mut impl Write,
    status_line: &str,
    mut rheaders: Vec<(String, String)>,
    framing: Framing,
    from: &[u8],
    to: &[u8],
) -> std::io::Result<u64> {
    for (_, v) in rheaders.iter_mut() {
        let mut b = std::mem::take(v).into_bytes();
        replace_all(&mut b, from, to);
        *v = String::from_utf8_lossy(&b).into_owned();
    }
    if matches!(framing, Framing::None) {
        write_head(out, status_line, &rheaders)?;
        out.flush()?;
        return Ok(0);
    }
    let mut whole = read_whole(upr, &mut rheaders, framing)?;
    replace_all(&mut whole, from, to);
    write_head(out, status_line, &rheaders)?;
    out.write_all(&whole)?;
    out.flush()?;
    Ok(whole.len() as u64)
}

/// Replace every `from` in `data` with `to`, of the same length, left to right.
fn replace_all(data: &mut [u8], from: &[u8], to: &[u8]) {
    debug_assert_eq!(from.len(), to.len());
    let mut at = 0;
    while let Some(i) = data[at..].windows(from.len()).position(|w| w == from) {
        data[at + i..at + i + from.len()].copy_from_slice(to);
        at += i + from.len();
    }
}

/// A loopback port that accepts every connection and closes it at once, counting them: a
/// server that cannot be reached, whose connection attempts a test counts (how often a
/// client tries before it gives up, where a timed bound would only say how long).
pub struct ClosingPort {
    port: u16,
    accepted: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
}

impl ClosingPort {
    pub fn start() -> ClosingPort {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind a loopback port");
        let port = listener.local_addr().expect("bound address").port();
        let accepted = Arc::new(AtomicU64::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (accepted.clone(), stop.clone());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                if s.load(Ordering::SeqCst) {
                    return;
                }
                if let Ok(conn) = conn {
                    a.fetch_add(1, Ordering::SeqCst);
                    let _ = conn.shutdown(Shutdown::Both);
                }
            }
        });
        ClosingPort {
            port,
            accepted,
            stop,
        }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Connections accepted (and closed) so far.
    pub fn accepted(&self) -> u64 {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for ClosingPort {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        // Wake the accepting thread so it sees the flag.
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Instant;

    /// A server that answers every request `200` with a body naming it (method, target,
    /// the `Host` it got, the request body's length) and the target in `x-echo`; a target
    /// ending in `/chunked` is answered chunked, two bytes a chunk.
    fn upstream() -> String {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        std::thread::spawn(move || {
            for conn in listener.incoming() {
                let Ok(conn) = conn else { continue };
                std::thread::spawn(move || {
                    let _ = answer(conn);
                });
            }
        });
        url
    }

    fn answer(conn: TcpStream) -> std::io::Result<()> {
        let mut out = conn.try_clone()?;
        let mut r = BufReader::new(conn);
        let Some((first, headers)) = read_head(&mut r)? else {
            return Ok(());
        };
        let framing = body_framing(&headers, true)?;
        let (n, _) = relay_body(&mut r, &mut std::io::sink(), framing, None, Chunks::Strip)?;
        let mut words = first.split(' ');
        let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
        let host = header(&headers, "host").unwrap_or("");
        let body = format!("{method} {target} host={host} body={n}");
        if target.ends_with("/chunked") {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nx-echo: {target}\r\ntransfer-encoding: chunked\r\n\r\n"
            )?;
            for part in body.as_bytes().chunks(2) {
                write!(out, "{:x}\r\n", part.len())?;
                out.write_all(part)?;
                out.write_all(b"\r\n")?;
            }
            out.write_all(b"0\r\n\r\n")?;
        } else {
            write!(
                out,
                "HTTP/1.1 200 OK\r\nx-echo: {target}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            )?;
        }
        out.flush()
    }

    /// One request to `url` (`Host` its address): the answer's status, headers and body.
    fn request(
        url: &str,
        method: &str,
        target: &str,
        body: &str,
    ) -> (u16, Vec<(String, String)>, String) {
        let addr = url.trim_start_matches("http://");
        let conn = TcpStream::connect(addr).unwrap();
        let mut w = conn.try_clone().unwrap();
        write!(
            w,
            "{method} {target} HTTP/1.1\r\nhost: {addr}\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut r = BufReader::new(conn);
        let (first, headers) = read_head(&mut r).unwrap().expect("an answer");
        let mut rest = String::new();
        r.read_to_string(&mut rest).unwrap();
        let status = first.split(' ').nth(1).unwrap().parse().unwrap();
        (status, headers, rest)
    }

    fn wait_for(what: &str, f: impl Fn() -> bool) {
        let start = Instant::now();
        while !f() {
            assert!(start.elapsed() < Duration::from_secs(10), "{what}");
            std::thread::sleep(Duration::from_millis(5));
        }
    }

    #[test]
    fn a_match_can_also_require_a_part_of_the_path() {
        let proxy = Proxy::start(&upstream());
        let commit = Match::method("POST", "/api/").containing("/commit/");
        proxy.inject(commit, Fault::StatusRetryAfter(503, "0".into()), usize::MAX);
        let (status, headers, _) = request(&proxy.url, "POST", "/api/models/o/r/commit/main", "{}");
        assert_eq!(status, 503);
        assert_eq!(header(&headers, "retry-after"), Some("0"));
        for (method, target) in [
            ("POST", "/api/models/o/r/preupload/main"),
            ("GET", "/api/models/o/r/commit/main"),
            ("POST", "/v1/commit/x"),
        ] {
            let (status, _, body) = request(&proxy.url, method, target, "{}");
            assert_eq!(status, 200, "{method} {target}");
            assert!(body.starts_with(&format!("{method} {target} ")), "{body}");
        }
        // Every use left: a second commit is refused too.
        let (status, _, _) = request(&proxy.url, "POST", "/api/datasets/o/r/commit/b", "");
        assert_eq!(status, 503);
        let statuses: Vec<u16> = proxy.log().iter().map(|s| s.status).collect();
        assert_eq!(statuses, [503, 200, 200, 200, 503]);
        assert_eq!(proxy.log()[0].request_bytes, 2);
        assert!(
            Match::prefix("/")
                .containing("git")
                .hits("PUT", "/a/.git/x")
        );
        assert!(
            !Match::prefix("/b")
                .containing("git")
                .hits("PUT", "/a/.git/x")
        );
    }

    #[test]
    fn a_rewrite_replaces_a_string_in_the_answers_headers_and_body() {
        let proxy = Proxy::start(&upstream());
        let (from, to) = (b"abc".to_vec(), b"xyz".to_vec());
        proxy.inject(Match::prefix("/"), Fault::Rewrite { from, to }, usize::MAX);
        let host = proxy.url.trim_start_matches("http://").to_string();
        // The second answer comes in chunks of two bytes: every `abc` is split.
        for target in ["/abc/abcabc", "/abc/abcabc/chunked"] {
            let (status, headers, body) = request(&proxy.url, "GET", target, "");
            assert_eq!(status, 200);
            let want = format!("GET {target} host={host} body=0").replace("abc", "xyz");
            assert_eq!(body, want);
            assert_eq!(
                header(&headers, "x-echo"),
                Some(&*target.replace("abc", "xyz"))
            );
            assert_eq!(
                header(&headers, "content-length"),
                Some(&*want.len().to_string())
            );
            assert_eq!(header(&headers, "transfer-encoding"), None);
            let seen = proxy.log().pop().unwrap();
            // The request went up as sent.
            assert_eq!(seen.path, target);
            assert_eq!(seen.response_bytes, want.len() as u64);
            assert_eq!(
                seen.fault.as_deref(),
                Some(r#"Rewrite { from: "abc", to: "xyz" }"#)
            );
        }
    }

    #[test]
    #[should_panic(expected = "a rewrite must keep the length")]
    fn a_rewrite_must_keep_the_length() {
        let proxy = Proxy::start("http://127.0.0.1:9");
        let (from, to) = (b"ab".to_vec(), b"abc".to_vec());
        proxy.inject(Match::prefix("/"), Fault::Rewrite { from, to }, 1);
    }

    /// The server sees the `Host` the client sent (the proxy's address), so the URLs it
    /// builds from it lead back through the proxy.
    #[test]
    fn the_host_header_reaches_the_server_untouched() {
        let up = upstream();
        let proxy = Proxy::start(&up);
        let (_, _, body) = request(&proxy.url, "GET", "/x", "");
        let host = proxy.url.trim_start_matches("http://");
        assert!(body.ends_with(&format!("host={host} body=0")), "{body}");
        assert!(!body.contains(up.trim_start_matches("http://")), "{body}");
    }

    #[test]
    fn open_counts_connections_until_they_are_done() {
        let proxy = Proxy::start(&upstream());
        proxy.inject(Match::prefix("/stall"), Fault::StallHeaders, 1);
        let mut held = TcpStream::connect(proxy.url.trim_start_matches("http://")).unwrap();
        held.write_all(b"GET /stall HTTP/1.1\r\nhost: x\r\n\r\n")
            .unwrap();
        wait_for("the stall holds", || proxy.held() == 1);
        assert_eq!(proxy.open(), 1);
        let (status, _, _) = request(&proxy.url, "GET", "/plain", "");
        assert_eq!(status, 200);
        wait_for("the plain request is done", || proxy.open() == 1);
        proxy.clear();
        wait_for("the held connection is done", || proxy.open() == 0);
        assert_eq!(proxy.held(), 0);
    }
}
