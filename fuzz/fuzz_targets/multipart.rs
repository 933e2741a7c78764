//! `multipart/byteranges` bodies written by `xet_server::multipart::ByteRangesWriter`
//! for fuzzed ranges of a fuzzed object. There is no parser of these in the workspace
//! (the client never asks for several ranges at once), so this target parses the body
//! with a strict reader of RFC 9110 §14.6 / RFC 2046 and checks the writer's output is
//! well formed.
//!
//! Input: a `Range` header line, a NUL, then the object's bytes. The header is parsed
//! with `parse_range_header` (so this fuzzes it too) and each spec is resolved against
//! the object, as the server does.
//! Checks: the body starts with the first delimiter, ends with the close delimiter,
//! holds exactly one part per range, in order, each with a `Content-Range` naming its
//! range and the object size and carrying exactly those bytes; the `Content-Type` names
//! the boundary.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_cas::ByteRange;
use xet_server::multipart::ByteRangesWriter;
use xet_server::range::parse_range_header;

fn find(hay: &[u8], needle: &[u8]) -> Option<usize> {
    hay.windows(needle.len()).position(|w| w == needle)
}

/// Parse a multipart/byteranges body into (content-range, data) parts.
fn parse(body: &[u8], boundary: &str) -> Vec<(String, Vec<u8>)> {
    let delim = format!("--{boundary}");
    let close = format!("--{boundary}--\r\n");
    assert!(
        body.ends_with(close.as_bytes()),
        "no close delimiter at the end"
    );
    let mut rest = &body[..body.len() - close.len()];
    let mut parts = Vec::new();
    while !rest.is_empty() {
        rest = rest
            .strip_prefix(delim.as_bytes())
            .and_then(|r| r.strip_prefix(b"\r\n"))
            .expect("part does not start with a delimiter line");
        let head_end = find(rest, b"\r\n\r\n").expect("part headers end");
        let head = std::str::from_utf8(&rest[..head_end]).expect("ASCII headers");
        let mut content_range = None;
        for line in head.split("\r\n") {
            let (k, v) = line.split_once(": ").expect("header line is name: value");
            assert!(!k.is_empty() && k.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-'));
            if k.eq_ignore_ascii_case("content-range") {
                assert!(content_range.is_none(), "two Content-Range headers");
                content_range = Some(v.to_string());
            }
        }
        let after = &rest[head_end + 4..];
        // The data runs to the CRLF before the next delimiter (which the data cannot
        // contain: the boundary is checked not to occur in it).
        let next =
            find(after, format!("\r\n{delim}").as_bytes()).unwrap_or(after.len().saturating_sub(2));
        let data = after[..next].to_vec();
        assert_eq!(
            &after[next..next + 2],
            b"\r\n",
            "part data not followed by CRLF"
        );
        parts.push((content_range.expect("part without Content-Range"), data));
        rest = &after[next + 2..];
    }
    parts
}

fuzz_target!(|data: &[u8]| {
    let Some(nul) = data.iter().position(|&b| b == 0) else {
        return;
    };
    let Ok(header) = std::str::from_utf8(&data[..nul]) else {
        return;
    };
    let object = &data[nul + 1..];
    let size = object.len() as u64;
    let Ok(specs) = parse_range_header(header) else {
        return;
    };
    let ranges: Vec<ByteRange> = specs
        .iter()
        .filter_map(|s| s.resolve(size))
        .take(64)
        .collect();
    let boundary = "3d6b6a416f9b2c1e7a0f5d42";
    if find(object, boundary.as_bytes()).is_some() {
        return; // the writer's contract: the boundary is not in the data
    }
    let mut w = ByteRangesWriter::with_boundary(boundary.to_string(), size);
    assert_eq!(
        w.content_type(),
        format!("multipart/byteranges; boundary={boundary}")
    );
    for r in &ranges {
        w.part(r, &object[r.start as usize..r.end as usize]);
    }
    let body = w.finish();
    let parts = parse(&body, boundary);
    assert_eq!(parts.len(), ranges.len(), "one part per range");
    for ((cr, got), r) in parts.iter().zip(&ranges) {
        assert_eq!(cr, &format!("bytes {}-{}/{size}", r.start, r.end - 1));
        assert_eq!(got.as_slice(), &object[r.start as usize..r.end as usize]);
    }
});
