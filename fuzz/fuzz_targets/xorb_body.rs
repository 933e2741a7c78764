//! Footer-less xorb bodies (what clients upload), checked whole by `verify_body` and fed
//! in pieces to a `BodyVerifier`, as the server does while a body arrives.
//!
//! Input: 8 bytes seeding the piece sizes, then the body.
//! Checks: no panic; the verifier reaches the same verdict (same info, or the same first
//! error) as `verify_body`; `verified_len` only grows, stays within what was received and
//! ends on a chunk boundary; an accepted body round-trips through the stored (footered)
//! form to the same hash and chunks.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_xorb::{BodyVerifier, Limits, Xorb, verify, verify_body};

/// Small limits so the fuzzer reaches the limit checks too.
const LIMITS: Limits = Limits {
    max_bytes: 1 << 20,
    max_chunks: 64,
    max_unpacked_bytes: 1 << 20,
};

struct SplitMix(u64);
impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

fuzz_target!(|data: &[u8]| {
    let (seed, body) = match data.split_first_chunk::<8>() {
        Some((s, b)) => (u64::from_le_bytes(*s), b),
        None => (0, data),
    };
    for limits in [LIMITS, Limits::PROTOCOL] {
        let whole = verify_body(body, None, &limits);

        // The same body, in pieces: each `advance` sees a longer prefix.
        let mut rng = SplitMix(seed);
        let pieced = match BodyVerifier::new(body.len() as u64, &limits) {
            Err(e) => Err(e),
            Ok(mut v) => {
                let mut got = 0usize;
                let mut last = 0u64;
                let mut err = None;
                while got < body.len() {
                    // Mostly small pieces, sometimes large ones.
                    let r = rng.next();
                    let step = if r & 3 == 0 {
                        (r >> 8) as usize % 65_536
                    } else {
                        (r >> 8) as usize % 300
                    };
                    got = (got + step + 1).min(body.len());
                    if let Err(e) = v.advance(&body[..got]) {
                        err = Some(e);
                        break;
                    }
                    let vl = v.verified_len();
                    assert!(vl >= last, "verified_len went back: {last} -> {vl}");
                    assert!(vl <= got as u64, "verified {vl} of {got} received bytes");
                    last = vl;
                }
                match err {
                    Some(e) => Err(e),
                    None => v.finish(body, None),
                }
            }
        };
        assert_eq!(whole, pieced, "verify_body and BodyVerifier disagree");

        if let Ok(info) = whole {
            assert_eq!(info.body_len(), body.len() as u64);
            let x = Xorb::from_body(body.to_vec(), Some(&info.hash), &limits)
                .expect("an accepted body is accepted again with its hash");
            let stored = x.to_footered();
            let back = verify(&stored, Some(&info.hash), &Limits::PROTOCOL)
                .expect("the stored form of an accepted body verifies");
            assert_eq!(back.hash, info.hash);
            assert_eq!(back.chunks, info.chunks);
        }
    }
});
