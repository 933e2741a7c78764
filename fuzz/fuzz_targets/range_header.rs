//! `Range` request headers: `xet_server::range::parse_range_header` and
//! `RangeSpec::resolve`.
//!
//! Input: the header value (bytes that are not UTF-8 are rejected by the HTTP layer
//! before this parser, as `HeaderValue::to_str` fails on them).
//! Checks: no panic; an accepted header has at least one spec, `S-E` has `S <= E`;
//! printing the specs back (`bytes=...`) parses to the same specs; each spec resolved
//! against a few sizes gives a non-empty range inside the object, or `None` exactly when
//! it selects nothing; `content_range` of a resolved range names it with an inclusive end.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_server::range::{RangeSpec, content_range, parse_range_header};

fn print(spec: &RangeSpec) -> String {
    match *spec {
        RangeSpec::FromTo(s, e) => format!("{s}-{e}"),
        RangeSpec::From(s) => format!("{s}-"),
        RangeSpec::Suffix(n) => format!("-{n}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(value) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(specs) = parse_range_header(value) else {
        return;
    };
    assert!(!specs.is_empty());
    let printed = format!(
        "bytes={}",
        specs.iter().map(print).collect::<Vec<_>>().join(", ")
    );
    assert_eq!(
        parse_range_header(&printed).as_ref(),
        Ok(&specs),
        "{printed:?}"
    );
    for spec in &specs {
        if let RangeSpec::FromTo(s, e) = *spec {
            assert!(s <= e);
        }
        for size in [0u64, 1, 100, 1 << 20, u64::MAX] {
            match spec.resolve(size) {
                Some(r) => {
                    assert!(
                        r.start < r.end && r.end <= size,
                        "{spec:?} of {size}: {r:?}"
                    );
                    match *spec {
                        RangeSpec::FromTo(s, e) => {
                            assert_eq!(r.start, s);
                            assert_eq!(r.end, e.saturating_add(1).min(size));
                        }
                        RangeSpec::From(s) => assert_eq!((r.start, r.end), (s, size)),
                        RangeSpec::Suffix(n) => {
                            assert_eq!((r.start, r.end), (size - n.min(size), size))
                        }
                    }
                    let cr = content_range(&r, size);
                    assert_eq!(cr, format!("bytes {}-{}/{size}", r.start, r.end - 1));
                }
                None => match *spec {
                    RangeSpec::FromTo(s, _) | RangeSpec::From(s) => assert!(s >= size),
                    RangeSpec::Suffix(n) => assert!(n == 0 || size == 0),
                },
            }
        }
    }
});
