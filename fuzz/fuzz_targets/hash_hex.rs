//! Hash strings: `MerkleHash::from_hex` (the hash string form of draft §6.5, as in URLs
//! and JSON), `from_raw_hex` and `FromStr`.
//!
//! Checks: no panic; an accepted string is 64 hex digits and formats back to itself in
//! lower case (`hex`/`Display`); `FromStr` agrees with `from_hex`; the raw form
//! round-trips through `raw_hex`; a string of the formatted hash always parses.
#![no_main]

use libfuzzer_sys::fuzz_target;
use xet_hash::MerkleHash;

fuzz_target!(|data: &[u8]| {
    let Ok(s) = std::str::from_utf8(data) else {
        // Bytes that are not UTF-8 are still worth a parse as Latin-1-ish text.
        let s: String = data.iter().map(|&b| b as char).collect();
        let _ = MerkleHash::from_hex(&s);
        return;
    };
    let h = MerkleHash::from_hex(s);
    assert_eq!(
        h.as_ref().ok(),
        s.parse::<MerkleHash>().as_ref().ok(),
        "FromStr vs from_hex"
    );
    if let Ok(h) = h {
        assert_eq!(s.len(), 64);
        assert!(s.bytes().all(|b| b.is_ascii_hexdigit()));
        assert_eq!(h.hex(), s.to_ascii_lowercase(), "hash string round trip");
        assert_eq!(h.to_string(), h.hex());
        assert_eq!(MerkleHash::from_hex(&h.hex()), Ok(h));
    }
    if let Ok(r) = MerkleHash::from_raw_hex(s) {
        assert_eq!(r.raw_hex(), s.to_ascii_lowercase(), "raw hex round trip");
    }
    // Any 32 bytes make a hash whose string parses back.
    if let Some(b) = data.first_chunk::<32>() {
        let h = MerkleHash(*b);
        assert_eq!(MerkleHash::from_hex(&h.hex()), Ok(h));
        assert_eq!(MerkleHash::from_raw_hex(&h.raw_hex()), Ok(h));
    }
});
