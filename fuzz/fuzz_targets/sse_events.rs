//! The events feed's server-sent events: `xet_hub::sse::SseParser`, what a bucket
//! mount and `xet` read from a server as it streams.
//!
//! Input: the first byte picks where the rest is cut into pieces (as the bytes of a
//! stream arrive); the rest is the stream.
//! Checks: no panic; the events, or the error, are the same whether the stream comes in
//! one piece or in many; no event's data is larger than the limit; an event's name is
//! never empty.
#![no_main]

use std::collections::VecDeque;

use libfuzzer_sys::fuzz_target;
use xet_hub::sse::{EventTooLarge, RawEvent, SseParser};

/// Small, so the fuzzer reaches it.
const LIMIT: usize = 256;

fn parse(pieces: &[&[u8]]) -> Result<Vec<RawEvent>, EventTooLarge> {
    let mut p = SseParser::new(LIMIT);
    let mut out = VecDeque::new();
    for piece in pieces {
        p.push(piece, &mut out)?;
    }
    Ok(out.into_iter().collect())
}

fuzz_target!(|data: &[u8]| {
    let Some((&step, stream)) = data.split_first() else {
        return;
    };
    let whole = parse(&[stream]);
    let step = usize::from(step % 16) + 1;
    let pieces: Vec<&[u8]> = stream.chunks(step).collect();
    assert_eq!(parse(&pieces), whole, "cut every {step} bytes");
    if let Ok(events) = whole {
        for e in &events {
            assert!(e.data.len() <= LIMIT, "{} bytes of data", e.data.len());
            assert!(!e.name.is_empty());
        }
    }
});
