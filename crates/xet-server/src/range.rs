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

/// Parse a `Range` header value. Only the `bytes` unit is understood.
pub fn parse_range_header(value: &str) -> Result<Vec<RangeSpec>, String> {
    let value = value.trim();
    let Some((unit, set)) = value.split_once('=') else {
        return Err(format!("range {value:?} is not of the form bytes=S-E"));
    };
    if !unit.trim().eq_ignore_ascii_case("bytes") {
        return Err(format!(
            "range unit {:?} is not supported (only bytes)",
            unit.trim()
        ));
    }
    let mut out = Vec::new();
    for part in set.split(',') {
        let part = part.trim();
        if part.is_empty() {
            continue;
        }
        let Some((s, e)) = part.split_once('-') else {
            return Err(format!("range {part:?} has no '-'"));
        };
        let (s, e) = (s.trim(), e.trim());
        let num = |x: &str| {
            if x.is_empty() || !x.bytes().all(|b| b.is_ascii_digit()) {
                return Err(format!("range {part:?} has a bad number {x:?}"));
            }
            x.parse::<u64>()
                .map_err(|_| format!("range {part:?}: number {x:?} is too large"))
        };
        let spec = match (s.is_empty(), e.is_empty()) {
            (true, true) => return Err(format!("range {part:?} has neither start nor end")),
            (true, false) => RangeSpec::Suffix(num(e)?),
            (false, true) => RangeSpec::From(num(s)?),
            (false, false) => {
                let (s, e) = (num(s)?, num(e)?);
                if e < s {
                    return Err(format!("range {part:?} ends before it starts"));
                }
                RangeSpec::FromTo(s, e)
            }
        };
        out.push(spec);
    }
    if out.is_empty() {
        return Err(format!("range {value:?} names no byte range"));
    }
    Ok(out)
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
