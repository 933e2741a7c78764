//! `Range: bytes=...` headers (RFC 9110 §14.1.2). Ends on the wire are inclusive;
//! resolved ranges are [`ByteRange`]s (end-exclusive).

use xet_cas::ByteRange;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RangeSpec {
    /// `S-E`, both inclusive.
    FromTo(u64, u64),
    /// `S-`.
    From(u64),
    /// `-N`: the last N bytes.
    Suffix(u64),
}

/// Why a `Range` header value was refused. Each variant carries the offending text, so
/// the 400 it becomes names what to fix.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RangeError {
    #[error("range {0:?} is not of the form bytes=S-E")]
    NotBytesForm(String),
    #[error("range unit {0:?} is not supported (only bytes)")]
    Unit(String),
    #[error("range {0:?} has no '-'")]
    NoDash(String),
    #[error("range {part:?} has a bad number {number:?}")]
    BadNumber { part: String, number: String },
    #[error("range {part:?}: number {number:?} is too large")]
    NumberTooLarge { part: String, number: String },
    #[error("range {0:?} has neither start nor end")]
    NoBounds(String),
    #[error("range {0:?} ends before it starts")]
    EndBeforeStart(String),
    #[error("range {0:?} names no byte range")]
    NoRanges(String),
}

/// Parse a `Range` header value. Only the `bytes` unit is understood.
pub fn parse_range_header(value: &str) -> Result<Vec<RangeSpec>, RangeError> {
    let value = value.trim();
    let Some((unit, set)) = value.split_once('=') else {
        return Err(RangeError::NotBytesForm(value.to_string()));
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Err(RangeError::Unit(unit.trim().to_string()));
    }
    let mut out = Vec::new();
    for part in set.split(',').map(str::trim).filter(|p| !p.is_empty()) {
        out.push(parse_spec(part)?);
    }
    if out.is_empty() {
        return Err(RangeError::NoRanges(value.to_string()));
    }
    Ok(out)
}

/// One `S-E`, `S-` or `-N` of a range set.
fn parse_spec(part: &str) -> Result<RangeSpec, RangeError> {
    let Some((s, e)) = part.split_once('-') else {
        return Err(RangeError::NoDash(part.to_string()));
    };
    let (s, e) = (s.trim(), e.trim());
    let num = |x: &str| {
        if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
            return Err(RangeError::BadNumber {
                part: part.to_string(),
                number: x.to_string(),
            });
        }
        x.parse::<u64>().map_err(|_| RangeError::NumberTooLarge {
            part: part.to_string(),
            number: x.to_string(),
        })
    };
    Ok(match (s.is_empty(), e.is_empty()) {
        (true, true) => return Err(RangeError::NoBounds(part.to_string())),
        (true, false) => RangeSpec::Suffix(num(e)?),
        (false, true) => RangeSpec::From(num(s)?),
        (false, false) => {
            let (s, e) = (num(s)?, num(e)?);
            if e < s {
                return Err(RangeError::EndBeforeStart(part.to_string()));
            }
            RangeSpec::FromTo(s, e)
        }
    })
}

/// The `Content-Range` value of a satisfied `r` of a `size`-byte object.
pub fn content_range(r: &ByteRange, size: u64) -> String {
    format!("bytes {}-{}/{size}", r.start, r.end - 1)
}

impl RangeSpec {
    /// The bytes of a `size`-byte object this spec selects, clamped to the end; `None` if
    /// it selects nothing (start at or past the end, or a zero-length suffix).
    pub fn resolve(self, size: u64) -> Option<ByteRange> {
        let r = match self {
            RangeSpec::FromTo(s, e) => ByteRange::new(s, e.saturating_add(1).min(size)),
            RangeSpec::From(s) => ByteRange::new(s, size),
            RangeSpec::Suffix(n) => ByteRange::new(size.saturating_sub(n), size),
        };
        if r.start >= size || r.is_empty() {
            None
        } else {
            Some(r)
        }
    }

    /// First byte asked for (for error messages).
    pub fn start(self) -> u64 {
        match self {
            RangeSpec::FromTo(s, _) | RangeSpec::From(s) => s,
            RangeSpec::Suffix(_) => 0,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parse_forms() {
        assert_eq!(
            parse_range_header("bytes=0-99").unwrap(),
            vec![RangeSpec::FromTo(0, 99)]
        );
        assert_eq!(
            parse_range_header("bytes=5-").unwrap(),
            vec![RangeSpec::From(5)]
        );
        assert_eq!(
            parse_range_header("bytes=-7").unwrap(),
            vec![RangeSpec::Suffix(7)]
        );
        assert_eq!(
            parse_range_header("Bytes=0-1460045, 1660778-3146111").unwrap(),
            vec![
                RangeSpec::FromTo(0, 1460045),
                RangeSpec::FromTo(1660778, 3146111)
            ]
        );
        for bad in [
            "0-5",
            "items=0-5",
            "bytes=5-4",
            "bytes=-",
            "bytes=a-b",
            "bytes=",
            "bytes=1+2-3",
            "bytes=0",
        ] {
            assert!(parse_range_header(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn errors_say_what_was_wrong() {
        let err = |v: &str| parse_range_header(v).unwrap_err();
        let cases = [
            ("0-5", "range \"0-5\" is not of the form bytes=S-E"),
            (
                "items=0-5",
                "range unit \"items\" is not supported (only bytes)",
            ),
            ("bytes=5", "range \"5\" has no '-'"),
            ("bytes=a-b", "range \"a-b\" has a bad number \"a\""),
            (
                "bytes=0-99999999999999999999",
                "range \"0-99999999999999999999\": number \"99999999999999999999\" is too large",
            ),
            ("bytes= - ", "range \"-\" has neither start nor end"),
            ("bytes=5-4", "range \"5-4\" ends before it starts"),
            ("bytes= , ", "range \"bytes= ,\" names no byte range"),
        ];
        for (value, message) in cases {
            assert_eq!(err(value).to_string(), message, "{value}");
        }
        assert_eq!(err("bytes=5-4"), RangeError::EndBeforeStart("5-4".into()));
    }

    #[test]
    fn content_range_ends_are_inclusive() {
        assert_eq!(content_range(&ByteRange::new(0, 10), 10), "bytes 0-9/10");
        assert_eq!(content_range(&ByteRange::new(7, 8), 100), "bytes 7-7/100");
    }

    #[test]
    fn resolve_clamps() {
        assert_eq!(
            RangeSpec::FromTo(0, 9).resolve(10),
            Some(ByteRange::new(0, 10))
        );
        assert_eq!(
            RangeSpec::FromTo(2, 100).resolve(10),
            Some(ByteRange::new(2, 10))
        );
        assert_eq!(RangeSpec::FromTo(10, 100).resolve(10), None);
        assert_eq!(RangeSpec::From(9).resolve(10), Some(ByteRange::new(9, 10)));
        assert_eq!(RangeSpec::From(10).resolve(10), None);
        assert_eq!(
            RangeSpec::Suffix(3).resolve(10),
            Some(ByteRange::new(7, 10))
        );
        assert_eq!(
            RangeSpec::Suffix(30).resolve(10),
            Some(ByteRange::new(0, 10))
        );
        assert_eq!(RangeSpec::Suffix(0).resolve(10), None);
        assert_eq!(
            RangeSpec::FromTo(0, u64::MAX).resolve(10),
            Some(ByteRange::new(0, 10))
        );
    }
}
