//! Stored (footered) xorbs: `parse_footer`, `parse_footer_tail`, `verify`,
//! `extract_chunk_range`.
//!
//! Checks: no panic; `parse_footer_tail` on any suffix holding the footer agrees with
//! `parse_footer` on the whole; a footer that parses is rewritten (`XorbFooter::write`)
//! into bytes that parse back to the same footer; a xorb that `verify` accepts has the
//! chunk region the footer says, its body alone passes `verify_body` with the same hash,
//! and every single chunk extracts.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_xorb::{Limits, extract_chunk_range, parse_footer, parse_footer_tail, verify, verify_body};

const LIMITS: Limits = Limits {
    max_bytes: 1 << 20,
    max_chunks: 64,
    max_unpacked_bytes: 1 << 20,
};

fuzz_target!(|data: &[u8]| {
    let limits = LIMITS;
    let parsed = parse_footer(data, &limits);
    if let Ok((footer, body_len)) = &parsed {
        assert!(*body_len <= data.len());
        assert_eq!(
            footer.body_len(),
            *body_len as u64,
            "footer boundaries vs body length"
        );
        // The footer read from only the tail: the last (len - body_len) bytes, and a few
        // more.
        let total = data.len() as u64;
        for extra in [0usize, 1, 7] {
            let from = body_len.saturating_sub(extra);
            let (f2, b2) =
                parse_footer_tail(&data[from..], total, &limits).expect("footer from the tail");
            assert_eq!(&f2, footer);
            assert_eq!(b2, *body_len as u64);
        }
        // Rewrite and parse again.
        let mut out = Vec::new();
        footer.write(&mut out);
        let (f3, b3) = parse_footer_tail(&out, *body_len as u64 + out.len() as u64, &limits)
            .expect("a rewritten footer parses");
        assert_eq!(&f3, footer);
        assert_eq!(b3, *body_len as u64);
    }
    match verify(data, None, &limits) {
        Ok(info) => {
            let (footer, body_len) = parsed.expect("verify accepted what parse_footer refused");
            assert_eq!(info.hash, footer.xorb_hash);
            assert_eq!(info.body_len(), body_len as u64);
            let body = verify_body(&data[..body_len], Some(&info.hash), &limits)
                .expect("the body of a verified xorb verifies alone");
            assert_eq!(body.chunks, info.chunks);
            for i in 0..info.num_chunks().min(8) {
                extract_chunk_range(data, i..i + 1, &limits).expect("a chunk of a verified xorb");
            }
        }
        Err(_) => {
            // Still exercise range extraction on whatever footer there is.
            if let Ok((footer, _)) = &parsed {
                let n = footer.num_chunks();
                let _ = extract_chunk_range(data, 0..n.min(3), &limits);
                let _ = extract_chunk_range(data, n / 2..n, &limits);
            }
        }
    }
});
