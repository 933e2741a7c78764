//! A commit body read as it arrives, in bounded memory: lines are parsed one at a time
//! on a blocking thread fed through a small channel, and the content of a `file` line
//! too long to hold ([`IN_MEMORY_LINE`]) is streamed to a temporary file in the spool
//! directory, its JSON string unescaped (and base64 decoded) on the way, so a commit of
//! 512 MiB holds a few MiB, not the body.

use std::io::{BufRead, Read, Write};
use std::path::{Path, PathBuf};

use axum::body::Body;
use axum::http::{HeaderMap, StatusCode};
use bytes::Bytes;
use http_body_util::BodyExt as _;
use tempfile::NamedTempFile;
use xet_hub::RepoPath;
use xet_hub::commit_body::{Builder, CommitRequest};

use super::reply::{HubReply, HubResult};
use crate::state::body::content_length;

/// Lines up to this long are parsed in memory; a longer one must be a `file` line, whose
/// content is spooled to disk.
pub(super) const IN_MEMORY_LINE: usize = 1 << 20;
/// Longest string other than a file's content in a spooled line (its path, encoding).
const SMALL_STRING: usize = 64 << 10;
/// Body frames queued for the parser.
const QUEUED_FRAMES: usize = 4;

/// An inline file's content.
pub(super) enum Inline {
    Memory(Bytes),
    /// Spooled to this temporary file (removed when dropped).
    Spooled(NamedTempFile),
}

/// A parsed commit body: the request (its `inline` empty) and the inline files, in order.
pub(super) struct Received {
    pub req: CommitRequest,
    pub inline: Vec<(RepoPath, Inline)>,
}

/// Read and parse a commit body of at most `limit` bytes, spooling long file lines into
/// `spool`.
pub(super) async fn receive(
    headers: &HeaderMap,
    body: Body,
    limit: u64,
    spool: PathBuf,
) -> HubResult<Received> {
    let too_large = || {
        HubReply::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("the commit body is over {limit} bytes: commit fewer or smaller inline files"),
        )
    };
    if content_length(headers).is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(QUEUED_FRAMES);
    let parser = tokio::task::spawn_blocking(move || {
        let reader = std::io::BufReader::with_capacity(
            64 << 10,
            Frames {
                rx,
                cur: Bytes::new(),
            },
        );
        parse(reader, &spool)
    });
    let mut body = body;
    let mut total = 0u64;
    let mut fed = Ok(());
    while let Some(frame) = body.frame().await {
        let data = match frame {
            Ok(f) => match f.into_data() {
                Ok(d) => d,
                Err(_) => continue,
            },
            Err(e) => {
                fed = Err(HubReply::bad_request(format!(
                    "the commit body failed: {e}"
                )));
                break;
            }
        };
        total += data.len() as u64;
        if total > limit {
            fed = Err(too_large());
            break;
        }
        // The parser stopped (it refused a line): its answer is the one to give.
        if tx.send(data).await.is_err() {
            break;
        }
    }
    drop(tx);
    let parsed = parser.await.map_err(|e| {
        HubReply::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("the commit parser failed: {e}"),
        )
    })?;
    // A body cut short or too large is that, whatever the parser made of its part.
    fed?;
    parsed
}

/// The body's frames as a reader, on a blocking thread.
struct Frames {
    rx: tokio::sync::mpsc::Receiver<Bytes>,
    cur: Bytes,
}

impl Read for Frames {
    fn read(&mut self, out: &mut [u8]) -> std::io::Result<usize> {
        while self.cur.is_empty() {
            match self.rx.blocking_recv() {
                Some(b) => self.cur = b,
                None => return Ok(0),
            }
        }
        let n = out.len().min(self.cur.len());
        out[..n].copy_from_slice(&self.cur[..n]);
        self.cur = self.cur.slice(n..);
        Ok(n)
    }
}

fn bad(n: usize, why: impl std::fmt::Display) -> HubReply {
    HubReply::bad_request(format!("commit line {n}: {why}"))
}

fn io_failed(e: std::io::Error) -> HubReply {
    HubReply::new(
        StatusCode::INTERNAL_SERVER_ERROR,
        format!("spooling a commit's inline file: {e}"),
    )
}

/// Parse the lines of `r`: short ones by [`Builder::line`], long ones as `file` lines
/// streamed into `spool`.
fn parse(mut r: impl BufRead, spool: &Path) -> HubResult<Received> {
    let mut b = Builder::default();
    let mut inline = Vec::new();
    let mut line = Vec::new();
    for n in 1.. {
        line.clear();
        match read_line_capped(&mut r, &mut line, IN_MEMORY_LINE).map_err(|e| bad(n, e))? {
            Ended::Eof if line.is_empty() => break,
            Ended::Newline | Ended::Eof => {
                let text = std::str::from_utf8(&line)
                    .map_err(|_| HubReply::bad_request("the commit body is not UTF-8"))?;
                b.line(n, text)
                    .map_err(|e| HubReply::bad_request(xet_cas::error_chain(&e)))?;
                inline.extend(
                    b.take_inline()
                        .into_iter()
                        .map(|(p, c)| (p, Inline::Memory(c))),
                );
            }
            Ended::TooLong => {
                let mut rest = std::io::Cursor::new(std::mem::take(&mut line)).chain(&mut r);
                let (path, file) = long_file_line(&mut rest, n, spool)?;
                b.inline_elsewhere();
                inline.push((path, Inline::Spooled(file)));
            }
        }
    }
    let req = b
        .finish()
        .map_err(|e| HubReply::bad_request(xet_cas::error_chain(&e)))?;
    Ok(Received { req, inline })
}

enum Ended {
    Newline,
    Eof,
    /// `cap` bytes read and no newline yet.
    TooLong,
}

/// Read into `line` up to and without the next newline, or `cap` bytes.
fn read_line_capped(
    r: &mut impl BufRead,
    line: &mut Vec<u8>,
    cap: usize,
) -> std::io::Result<Ended> {
    loop {
        let buf = r.fill_buf()?;
        if buf.is_empty() {
            return Ok(Ended::Eof);
        }
        let room = cap - line.len();
        match buf.iter().take(room).position(|&b| b == b'\n') {
            Some(i) => {
                line.extend_from_slice(&buf[..i]);
                r.consume(i + 1);
                return Ok(Ended::Newline);
            }
            None => {
                let n = buf.len().min(room);
                line.extend_from_slice(&buf[..n]);
                r.consume(n);
                if line.len() == cap {
                    return Ok(Ended::TooLong);
                }
            }
        }
    }
}

/// A `file` line too long to hold, from its first byte to its newline (consumed): its
/// path and its content in a temporary file of `spool`.
fn long_file_line(
    r: &mut impl BufRead,
    n: usize,
    spool: &Path,
) -> HubResult<(RepoPath, NamedTempFile)> {
    let mut j = Json { r, n };
    std::fs::create_dir_all(spool).map_err(io_failed)?;
    let raw = tempfile::Builder::new()
        .prefix("inline-")
        .tempfile_in(spool)
        .map_err(io_failed)?;
    let (mut key, mut path, mut encoding) = (None, None, None);
    let mut content = false;
    {
        let mut out = std::io::BufWriter::new(raw.as_file());
        j.object(|j, field| {
            match field {
                "key" => key = Some(j.small_string()?),
                "value" => j.object(|j, field| {
                    match field {
                        "path" => path = Some(j.small_string()?),
                        "encoding" => encoding = Some(j.small_string()?),
                        "content" if content => {
                            return Err(j.err("the content is given twice"));
                        }
                        "content" => {
                            j.string_into(&mut out)?;
                            content = true;
                        }
                        _ => j.skip_value(0)?,
                    }
                    Ok(())
                })?,
                _ => j.skip_value(0)?,
            }
            Ok(())
        })?;
        out.flush().map_err(io_failed)?;
    }
    j.end_of_line()?;
    if key.as_deref() != Some("file") {
        return Err(bad(
            n,
            format!("only file lines may be over {IN_MEMORY_LINE} bytes"),
        ));
    }
    let (Some(path), true) = (path, content) else {
        return Err(bad(n, "a file line needs a path and a content"));
    };
    let path = RepoPath::parse(&path).map_err(|e| bad(n, e))?;
    let file = match encoding.as_deref().unwrap_or("utf-8") {
        "utf-8" | "utf8" => raw,
        "base64" => decode_base64(raw, spool).map_err(|e| match e.kind() {
            std::io::ErrorKind::InvalidData => {
                bad(n, format!("the content of {path} is not base64: {e}"))
            }
            _ => io_failed(e),
        })?,
        other => return Err(bad(n, format!("unknown encoding {other:?} for {path}"))),
    };
    Ok((path, file))
}

/// The base64 in `raw`, decoded into a new temporary file.
fn decode_base64(raw: NamedTempFile, spool: &Path) -> std::io::Result<NamedTempFile> {
    let decoded = tempfile::Builder::new()
        .prefix("inline-")
        .tempfile_in(spool)?;
    let input = std::io::BufReader::new(std::fs::File::open(raw.path())?);
    let mut dec =
        base64::read::DecoderReader::new(input, &base64::engine::general_purpose::STANDARD);
    let mut out = std::io::BufWriter::new(decoded.as_file());
    std::io::copy(&mut dec, &mut out)?;
    out.flush()?;
    drop(out);
    Ok(decoded)
}

/// Just enough of a JSON reader for one line: objects, strings (one streamed), and
/// skipping whatever else a client adds.
struct Json<'a, R> {
    r: &'a mut R,
    n: usize,
}

/// Deepest nesting skipped.
const MAX_DEPTH: usize = 64;

impl<R: BufRead> Json<'_, R> {
    fn err(&self, why: impl std::fmt::Display) -> HubReply {
        bad(self.n, why)
    }

    fn peek(&mut self) -> HubResult<Option<u8>> {
        let n = self.n;
        let buf = self.r.fill_buf().map_err(|e| bad(n, e))?;
        Ok(buf.first().copied())
    }

    fn next(&mut self) -> HubResult<u8> {
        let b = self
            .peek()?
            .ok_or_else(|| self.err("the line ends early"))?;
        self.r.consume(1);
        Ok(b)
    }

    /// The next byte that is not JSON whitespace.
    fn token(&mut self) -> HubResult<u8> {
        loop {
            let b = self.next()?;
            if !matches!(b, b' ' | b'\t' | b'\r') {
                return Ok(b);
            }
        }
    }

    fn expect(&mut self, want: u8) -> HubResult<()> {
        let got = self.token()?;
        if got == want {
            Ok(())
        } else {
            Err(self.err(format!(
                "expected {:?}, found {:?}",
                want as char, got as char
            )))
        }
    }

    /// An object, `field` called with each key (the reader at its value).
    fn object(&mut self, mut field: impl FnMut(&mut Self, &str) -> HubResult<()>) -> HubResult<()> {
        self.expect(b'{')?;
        if self.peek_token()? == b'}' {
            self.next()?;
            return Ok(());
        }
        loop {
            self.expect(b'"')?;
            let key = self.small_string_body()?;
            self.expect(b':')?;
            field(self, &key)?;
            match self.token()? {
                b',' => {}
                b'}' => return Ok(()),
                _ => return Err(self.err("expected ',' or '}'")),
            }
        }
    }

    /// A string value of at most [`SMALL_STRING`] bytes.
    fn small_string(&mut self) -> HubResult<String> {
        self.expect(b'"')?;
        self.small_string_body()
    }

    /// The rest of a string whose opening quote was read.
    fn small_string_body(&mut self) -> HubResult<String> {
        let mut v = Vec::new();
        self.string_body(&mut v, SMALL_STRING as u64)?;
        String::from_utf8(v).map_err(|_| self.err("a string is not UTF-8"))
    }

    /// A string value, unescaped into `out`.
    fn string_into(&mut self, out: &mut impl Write) -> HubResult<()> {
        self.expect(b'"')?;
        self.string_body(out, u64::MAX)
    }

    /// The rest of a string, unescaped into `out`, at most `max` bytes of it.
    fn string_body(&mut self, out: &mut impl Write, max: u64) -> HubResult<()> {
        let n = self.n;
        let mut written = 0u64;
        loop {
            let (run, special) = {
                let buf = self.r.fill_buf().map_err(|e| bad(n, e))?;
                if buf.is_empty() {
                    return Err(bad(n, "a string is not closed"));
                }
                let run = buf
                    .iter()
                    .position(|&b| b == b'"' || b == b'\\' || b < 0x20)
                    .unwrap_or(buf.len());
                written += run as u64;
                if written > max {
                    return Err(bad(n, format!("a string is over {max} bytes")));
                }
                out.write_all(&buf[..run]).map_err(io_failed)?;
                (run, run < buf.len())
            };
            self.r.consume(run);
            if !special {
                continue;
            }
            match self.next()? {
                b'"' => return Ok(()),
                b'\\' => {
                    let mut tmp = [0u8; 4];
                    let bytes = self.escape(&mut tmp)?;
                    written += bytes.len() as u64;
                    out.write_all(bytes).map_err(io_failed)?;
                }
                _ => return Err(self.err("a control character in a string")),
            }
        }
    }

    /// The character of an escape whose backslash was read, as UTF-8 in `tmp`.
    fn escape<'t>(&mut self, tmp: &'t mut [u8; 4]) -> HubResult<&'t [u8]> {
        let c = match self.next()? {
            b'"' => '"',
            b'\\' => '\\',
            b'/' => '/',
            b'b' => '\u{8}',
            b'f' => '\u{c}',
            b'n' => '\n',
            b'r' => '\r',
            b't' => '\t',
            b'u' => {
                let hi = self.hex4()?;
                let code = if (0xD800..0xDC00).contains(&hi) {
                    if self.next()? != b'\\' || self.next()? != b'u' {
                        return Err(self.err("a lone surrogate in a string"));
                    }
                    let lo = self.hex4()?;
                    if !(0xDC00..0xE000).contains(&lo) {
                        return Err(self.err("a lone surrogate in a string"));
                    }
                    0x10000 + ((hi - 0xD800) << 10) + (lo - 0xDC00)
                } else {
                    hi
                };
                char::from_u32(code).ok_or_else(|| self.err("a lone surrogate in a string"))?
            }
            _ => return Err(self.err("an unknown escape in a string")),
        };
        Ok(c.encode_utf8(tmp).as_bytes())
    }

    fn hex4(&mut self) -> HubResult<u32> {
        let mut v = 0;
        for _ in 0..4 {
            let d = (self.next()? as char)
                .to_digit(16)
                .ok_or_else(|| self.err("a bad \\u escape"))?;
            v = v * 16 + d;
        }
        Ok(v)
    }

    /// Skip one value of any kind.
    fn skip_value(&mut self, depth: usize) -> HubResult<()> {
        if depth > MAX_DEPTH {
            return Err(self.err("nested too deep"));
        }
        match self.token()? {
            b'"' => self.string_body(&mut std::io::sink(), SMALL_STRING as u64),
            b'{' | b'[' => {
                let close = |b| b == b'}' || b == b']';
                loop {
                    match self.peek_token()? {
                        b if close(b) => {
                            self.next()?;
                            return Ok(());
                        }
                        b',' | b':' => {
                            self.next()?;
                        }
                        _ => self.skip_value(depth + 1)?,
                    }
                }
            }
            b'-' | b'0'..=b'9' | b't' | b'f' | b'n' => {
                while self
                    .peek()?
                    .is_some_and(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'+' | b'-'))
                {
                    self.next()?;
                }
                Ok(())
            }
            b => Err(self.err(format!("unexpected {:?}", b as char))),
        }
    }

    /// The next byte that is not whitespace, not consumed.
    fn peek_token(&mut self) -> HubResult<u8> {
        loop {
            match self.peek()? {
                Some(b' ' | b'\t' | b'\r') => self.r.consume(1),
                Some(b) => return Ok(b),
                None => return Err(self.err("the line ends early")),
            }
        }
    }

    /// Only whitespace up to the newline (consumed) or the end of the body.
    fn end_of_line(&mut self) -> HubResult<()> {
        loop {
            match self.peek()? {
                None => return Ok(()),
                Some(b'\n') => {
                    self.r.consume(1);
                    return Ok(());
                }
                Some(b' ' | b'\t' | b'\r') => self.r.consume(1),
                Some(b) => {
                    return Err(self.err(format!(
                        "unexpected {:?} after the line's object",
                        b as char
                    )));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn header() -> String {
        json!({"key": "header", "value": {"summary": "s"}}).to_string()
    }

    fn parsed(body: &[u8]) -> (tempfile::TempDir, HubResult<Received>) {
        let dir = tempfile::tempdir().unwrap();
        // Small reads, so lines and strings cross buffer edges.
        let r = std::io::BufReader::with_capacity(7, body);
        let got = parse(r, dir.path());
        (dir, got)
    }

    fn content(i: &Inline) -> Vec<u8> {
        match i {
            Inline::Memory(b) => b.to_vec(),
            Inline::Spooled(f) => std::fs::read(f.path()).unwrap(),
        }
    }

    #[test]
    fn long_file_lines_are_spooled_whatever_their_key_order() {
        let big: Vec<u8> = (0..3 * IN_MEMORY_LINE as u32)
            .map(|i| (i * 7 % 251) as u8)
            .collect();
        let b64 = base64::Engine::encode(&base64::engine::general_purpose::STANDARD, &big);
        // `content` before `encoding`, `/` escaped as JSON allows, unknown members.
        let escaped = b64.replace('/', "\\/");
        let reordered = format!(
            r#"{{"value": {{"content": "{escaped}", "extra": [1, {{"a": null}}, "x"], "encoding": "base64", "path": "big/one.bin"}}, "key": "file"}}"#
        );
        let text: String = "é\u{1F600}\"\\\n".repeat(IN_MEMORY_LINE / 4);
        let utf8 = json!({"key": "file", "value": {"path": "t.txt", "content": text, "encoding": "utf-8"}});
        let body = format!(
            "{}\n{}\n{}\n{reordered}\n{}\n{utf8}",
            header(),
            json!({"key": "deletedFile", "value": {"path": "gone"}}),
            json!({"key": "file", "value": {"path": "small.txt", "content": "aGk=", "encoding": "base64"}}),
            json!({"key": "lfsFile", "value": {"path": "w.bin", "algo": "sha256", "oid": "ab".repeat(32), "size": 3}}),
        );
        let (_dir, got) = parsed(body.as_bytes());
        let got = got.unwrap_or_else(|e| panic!("{}", e.message));
        let paths: Vec<&str> = got.inline.iter().map(|(p, _)| p.as_str()).collect();
        assert_eq!(paths, ["small.txt", "big/one.bin", "t.txt"]);
        assert_eq!(content(&got.inline[0].1), b"hi");
        assert!(matches!(got.inline[1].1, Inline::Spooled(_)));
        assert!(content(&got.inline[1].1) == big);
        assert_eq!(content(&got.inline[2].1), text.as_bytes());
        use xet_hub::commit_body::LineKind as K;
        assert_eq!(
            got.req.order,
            [K::Deletion, K::Inline, K::Inline, K::Lfs, K::Inline]
        );
        assert_eq!(got.req.lfs.len(), 1);
    }

    #[test]
    fn what_cannot_be_a_long_file_line_is_refused() {
        let long = "A".repeat(IN_MEMORY_LINE + 10);
        let cases = [
            // A long line of another kind.
            json!({"key": "deletedFile", "value": {"path": long}}).to_string(),
            // Not base64, cut short, no path, trailing garbage, a bad escape.
            json!({"key": "file", "value": {"path": "a", "content": format!("{long}!!"), "encoding": "base64"}}).to_string(),
            format!(r#"{{"key": "file", "value": {{"path": "a", "content": "{long}"#),
            json!({"key": "file", "value": {"content": long}}).to_string(),
            format!("{} x", json!({"key": "file", "value": {"path": "a", "content": long}})),
            format!(r#"{{"key": "file", "value": {{"path": "a", "content": "\q{long}"}}}}"#),
            format!(r#"{{"key": "file", "value": {{"path": "../a", "content": "{long}"}}}}"#),
        ];
        for (i, line) in cases.iter().enumerate() {
            let body = format!("{}\n{line}\n", header());
            let (dir, got) = parsed(body.as_bytes());
            let Err(e) = got else {
                panic!("case {i} was accepted")
            };
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "case {i}: {}", e.message);
            assert!(e.message.contains("line 2"), "case {i}: {}", e.message);
            // Nothing of a refused commit stays in the spool.
            assert_eq!(
                std::fs::read_dir(dir.path()).unwrap().count(),
                0,
                "case {i}"
            );
        }
    }
}
