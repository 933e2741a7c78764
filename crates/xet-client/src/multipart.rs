//! `multipart/byteranges` (RFC 9110 §14.6) answers to multi-range GETs.

use bytes::Bytes;

/// One part: bytes `start..=end` of the object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Part {
    pub start: u64,
    /// Inclusive, as in `Content-Range`.
    pub end: u64,
    pub total: Option<u64>,
    pub data: Bytes,
}

/// The boundary of a `multipart/byteranges` content type, `None` for anything else.
pub fn byteranges_boundary(content_type: &str) -> Option<String> {
    let mut params = content_type.split(';');
    let mime = params.next()?.trim();
    if !mime.eq_ignore_ascii_case("multipart/byteranges") {
        return None;
    }
    for p in params {
        let (k, v) = match p.split_once('=') {
            Some(kv) => kv,
            None => continue,
        };
        if k.trim().eq_ignore_ascii_case("boundary") {
            let v = v.trim();
            let v = v
                .strip_prefix('"')
                .and_then(|v| v.strip_suffix('"'))
                .unwrap_or(v);
            if !v.is_empty() {
                return Some(v.to_string());
            }
        }
    }
    None
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    if needle.is_empty() || from > hay.len() {
        return None;
    }
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|p| p + from)
}

/// Skips an optional run of spaces/tabs, then one line ending (CRLF or LF).
fn skip_line_end(b: &[u8], mut i: usize) -> Result<usize, String> {
    while i < b.len() && (b[i] == b' ' || b[i] == b'\t') {
        i += 1;
    }
    if b[i..].starts_with(b"\r\n") {
        Ok(i + 2)
    } else if b[i..].starts_with(b"\n") {
        Ok(i + 1)
    } else {
        Err(format!("expected a line break at byte {i}"))
    }
}

/// Splits a `multipart/byteranges` body into its parts. Each part must carry a
/// `Content-Range`; its length decides where the part's data ends, so binary data
/// that happens to contain the boundary is read correctly.
pub fn parse_byteranges(body: &Bytes, boundary: &str) -> Result<Vec<Part>, String> {
    let b = &body[..];
    let delim = format!("--{boundary}");
    let delim = delim.as_bytes();
    let mut i = find(b, delim, 0).ok_or("no boundary in the multipart body")?;
    let mut parts = Vec::new();
    loop {
        i += delim.len();
        if b[i..].starts_with(b"--") {
            return if parts.is_empty() {
                Err("multipart body has no parts".into())
            } else {
                Ok(parts)
            };
        }
        i = skip_line_end(b, i)?;
        // Part headers up to an empty line.
        let mut range = None;
        loop {
            let eol = find(b, b"\n", i).ok_or("part headers are not terminated")?;
            let line = &b[i..eol];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            i = eol + 1;
            if line.is_empty() {
                break;
            }
            let line = std::str::from_utf8(line).map_err(|_| "part header is not text")?;
            if let Some((k, v)) = line.split_once(':') {
                if k.trim().eq_ignore_ascii_case("content-range") {
                    range = Some(
                        crate::util::parse_content_range(v)
                            .ok_or_else(|| format!("bad Content-Range {v:?}"))?,
                    );
                }
            }
        }
        let (start, end, total) = range.ok_or("a part has no Content-Range")?;
        if end < start {
            return Err(format!("part range {start}-{end} is reversed"));
        }
        let len = usize::try_from(end - start + 1).map_err(|_| "part too large")?;
        if b.len() - i < len {
            return Err(format!(
                "part {start}-{end} is truncated ({} bytes left)",
                b.len() - i
            ));
        }
        parts.push(Part {
            start,
            end,
            total,
            data: body.slice(i..i + len),
        });
        i += len;
        // CRLF, then the next delimiter.
        i = skip_line_end(b, i)
            .map_err(|_| format!("part {start}-{end} is longer than its Content-Range"))?;
        if !b[i..].starts_with(delim) {
            return Err(format!("expected the boundary after part {start}-{end}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn build(boundary: &str, parts: &[(u64, &[u8])], crlf: bool) -> Bytes {
        let nl = if crlf { "\r\n" } else { "\n" };
        let mut out = Vec::new();
        out.extend_from_slice(b"preamble ignored");
        out.extend_from_slice(nl.as_bytes());
        for (start, data) in parts {
            out.extend_from_slice(format!("--{boundary}{nl}").as_bytes());
            out.extend_from_slice(format!("Content-Type: application/octet-stream{nl}").as_bytes());
            out.extend_from_slice(
                format!(
                    "Content-Range: bytes {}-{}/9999{nl}{nl}",
                    start,
                    start + data.len() as u64 - 1
                )
                .as_bytes(),
            );
            out.extend_from_slice(data);
            out.extend_from_slice(nl.as_bytes());
        }
        out.extend_from_slice(format!("--{boundary}--{nl}").as_bytes());
        Bytes::from(out)
    }

    #[test]
    fn boundary_parsing() {
        assert_eq!(
            byteranges_boundary("multipart/byteranges; boundary=abc").unwrap(),
            "abc"
        );
        assert_eq!(
            byteranges_boundary("Multipart/ByteRanges;boundary=\"a b\"").unwrap(),
            "a b"
        );
        assert!(byteranges_boundary("application/octet-stream").is_none());
        assert!(byteranges_boundary("multipart/byteranges").is_none());
    }

    #[test]
    fn parts_are_split_by_content_range() {
        // The second part contains the boundary text itself.
        let p2: &[u8] = b"xx\r\n--BND\r\nyy";
        let body = build("BND", &[(0, b"hello"), (100, p2), (7, b"\x00\x01")], true);
        let parts = parse_byteranges(&body, "BND").unwrap();
        assert_eq!(parts.len(), 3);
        assert_eq!(
            (parts[0].start, parts[0].end, &parts[0].data[..]),
            (0, 4, &b"hello"[..])
        );
        assert_eq!(&parts[1].data[..], p2);
        assert_eq!(parts[1].total, Some(9999));
        assert_eq!(&parts[2].data[..], b"\x00\x01");
    }

    #[test]
    fn lf_only_is_accepted() {
        let body = build("q", &[(3, b"abc")], false);
        let parts = parse_byteranges(&body, "q").unwrap();
        assert_eq!(&parts[0].data[..], b"abc");
    }

    #[test]
    fn malformed_bodies_are_errors() {
        let good = build("B", &[(0, b"hello"), (10, b"world")], true);
        assert!(parse_byteranges(&good, "other").is_err());
        // Truncated in the middle of the second part.
        assert!(parse_byteranges(&good.slice(..good.len() - 12), "B").is_err());
        // No Content-Range.
        let body = Bytes::from_static(b"--B\r\nContent-Type: x\r\n\r\nabc\r\n--B--\r\n");
        assert!(
            parse_byteranges(&body, "B")
                .unwrap_err()
                .contains("Content-Range")
        );
        // Part longer than announced.
        let body = Bytes::from_static(b"--B\r\nContent-Range: bytes 0-1/9\r\n\r\nabc\r\n--B--\r\n");
        assert!(parse_byteranges(&body, "B").is_err());
        // No parts.
        assert!(parse_byteranges(&Bytes::from_static(b"--B--\r\n"), "B").is_err());
    }
}
