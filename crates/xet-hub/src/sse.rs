//! The server-sent events format (the events feed of a bucket, `buckets-api.md` §1.8),
//! parsed as its bytes arrive, within a bound on each event's size: a pure parser of
//! untrusted bytes (fuzzed: `fuzz/fuzz_targets/sse_events.rs`), used by the Hub client.

use std::collections::VecDeque;

/// An event grew past the parser's limit (a server sending one without end, or a
/// change list far larger than any the feed sends).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("an event is larger than {limit} bytes")]
pub struct EventTooLarge {
    pub limit: usize,
}

/// One event as it came: its name (`message` when it had none) and its data lines
/// joined by `\n`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawEvent {
    pub name: String,
    pub data: String,
}

/// The server-sent events format, parsed as its bytes arrive: lines end at `\n`,
/// `\r\n` or `\r`; a blank line ends an event; lines starting with `:` are comments;
/// `field: value` (one space after the colon dropped) sets `event` or adds a `data`
/// line; other fields (`id`, `retry`) are ignored. An event with no data is none.
pub struct SseParser {
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
    pub fn push(
        &mut self,
        bytes: &[u8],
        out: &mut VecDeque<RawEvent>,
    ) -> Result<(), EventTooLarge> {
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
            if let Some(e) = self.line_ended(&line)? {
                out.push_back(e);
            }
        }
        Ok(())
    }

    fn grow(&mut self, bytes: &[u8]) -> Result<(), EventTooLarge> {
        self.size += bytes.len();
        if self.size > self.limit {
            return Err(EventTooLarge { limit: self.limit });
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// Act on a whole line; the event it ends, if any.
    fn line_ended(&mut self, line: &[u8]) -> Result<Option<RawEvent>, EventTooLarge> {
        if line.is_empty() {
            self.size = 0;
            let name = std::mem::take(&mut self.name);
            let data = std::mem::take(&mut self.data);
            if data.is_empty() {
                return Ok(None);
            }
            let name = if name.is_empty() {
                "message".to_string()
            } else {
                name
            };
            // Every data line added a `\n`; the last one is not part of the data.
            let data = data.strip_suffix('\n').unwrap_or(&data).to_string();
            return Ok(Some(RawEvent { name, data }));
        }
        if line[0] == b':' {
            return Ok(None);
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
        // The lossy decoding of bytes that are not UTF-8 can triple them: the limit is
        // on what is held, too.
        if self.name.len() + self.data.len() > self.limit {
            return Err(EventTooLarge { limit: self.limit });
        }
        Ok(None)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse_in_pieces(text: &[u8], at: &[usize]) -> Result<Vec<RawEvent>, EventTooLarge> {
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
        // Bytes that are not UTF-8 become U+FFFD, three bytes each: held, they count.
        let lossy = [b"data: ".as_slice(), &[0xff; 600], b"\n\n"].concat();
        assert!(parse_in_pieces(&lossy, &[]).is_err());
        let fits = format!("data: {}\n\n", "x".repeat(1000));
        assert_eq!(parse_in_pieces(fits.as_bytes(), &[3]).unwrap().len(), 1);
    }
}
