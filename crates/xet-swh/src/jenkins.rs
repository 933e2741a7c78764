//! Bob Jenkins' 1996 hash ("lookup2") with its three 32-bit words of output, as cmph 2.0.2
//! uses it for CHD_PH (`jenkins_hash.c`): the words seed the bucket (`h0`), the first
//! slot (`h1`) and the step (`h2`) of every key.

/// The nine subtract-and-shift rounds of lookup2's `mix`, on wrapping u32 arithmetic.
#[inline(always)]
fn mix(a: &mut u32, b: &mut u32, c: &mut u32) {
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 13);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 8);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 13);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 12);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 16);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 5);
    *a = a.wrapping_sub(*b).wrapping_sub(*c) ^ (*c >> 3);
    *b = b.wrapping_sub(*c).wrapping_sub(*a) ^ (*a << 10);
    *c = c.wrapping_sub(*a).wrapping_sub(*b) ^ (*b >> 15);
}

#[inline(always)]
fn le32(b: &[u8]) -> u32 {
    u32::from(b[0]) | u32::from(b[1]) << 8 | u32::from(b[2]) << 16 | u32::from(b[3]) << 24
}

/// `(h0, h1, h2)` of `key` under `seed`: the three words cmph's `hash_vector` returns.
///
/// Bytes are unsigned; the key length is added to `c` as a u32 (cmph's `keylen` is a u32).
pub fn jenkins(seed: u32, key: &[u8]) -> [u32; 3] {
    let mut a: u32 = 0x9e37_79b9;
    let mut b: u32 = 0x9e37_79b9;
    let mut c: u32 = seed;
    let mut blocks = key.chunks_exact(12);
    for k in &mut blocks {
        a = a.wrapping_add(le32(&k[0..4]));
        b = b.wrapping_add(le32(&k[4..8]));
        c = c.wrapping_add(le32(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    let rest = blocks.remainder();
    c = c.wrapping_add(key.len() as u32);
    for (i, &byte) in rest.iter().enumerate() {
        let v = u32::from(byte);
        match i {
            0..=3 => a = a.wrapping_add(v << (8 * i)),
            4..=7 => b = b.wrapping_add(v << (8 * (i - 4))),
            // The low byte of `c` is taken by the length.
            _ => c = c.wrapping_add(v << (8 * (i - 7))),
        }
    }
    mix(&mut a, &mut b, &mut c);
    [a, b, c]
}

/// [`jenkins`] for the format's 32-byte keys: two full blocks, then bytes 24..32.
#[inline]
pub fn jenkins32(seed: u32, key: &[u8; 32]) -> [u32; 3] {
    let mut a: u32 = 0x9e37_79b9;
    let mut b: u32 = 0x9e37_79b9;
    let mut c: u32 = seed;
    for k in [&key[0..12], &key[12..24]] {
        a = a.wrapping_add(le32(&k[0..4]));
        b = b.wrapping_add(le32(&k[4..8]));
        c = c.wrapping_add(le32(&k[8..12]));
        mix(&mut a, &mut b, &mut c);
    }
    c = c.wrapping_add(32);
    a = a.wrapping_add(le32(&key[24..28]));
    b = b.wrapping_add(le32(&key[28..32]));
    mix(&mut a, &mut b, &mut c);
    [a, b, c]
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seq() -> [u8; 32] {
        std::array::from_fn(|i| i as u8)
    }

    /// The spec's vectors (§6), checked there against libcmph's `jenkins_hash_vector_packed`.
    #[test]
    fn spec_vectors() {
        let cases: [([u8; 32], u32, [u32; 3]); 9] = [
            (seq(), 0, [0x0e4bce92, 0x8d123560, 0x9e867842]),
            ([0; 32], 0, [0x207e73f1, 0x096f2e6b, 0xd5b02d8c]),
            ([0xff; 32], 0, [0xe6a2a1c8, 0xe54d18fe, 0x9f8625c2]),
            (seq(), 1, [0xa8e0cb31, 0xa81cf0e4, 0x159cf1f0]),
            ([0; 32], 1, [0x297c8435, 0x0dfaf4a7, 0x7496a938]),
            ([0xff; 32], 1, [0x66054bad, 0x2b158ac0, 0xb3f00556]),
            (seq(), 0xdeadbeef, [0xb283ad53, 0x96c0687d, 0xfa28f3fb]),
            ([0; 32], 0xdeadbeef, [0xe0235d72, 0x910fd75c, 0x9a851671]),
            ([0xff; 32], 0xdeadbeef, [0x389824f1, 0x59c7ec18, 0x476d039a]),
        ];
        for (key, seed, want) in cases {
            assert_eq!(jenkins(seed, &key), want, "seed {seed:#x} key {key:02x?}");
            assert_eq!(jenkins32(seed, &key), want, "seed {seed:#x} key {key:02x?}");
        }
    }

    #[test]
    fn the_32_byte_form_agrees_with_the_general_one() {
        let mut x = 0x1234_5678_9abc_def0u64;
        for seed in [0, 1, 7, u32::MAX] {
            for _ in 0..200 {
                let key: [u8; 32] = std::array::from_fn(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    x as u8
                });
                assert_eq!(jenkins(seed, &key), jenkins32(seed, &key));
            }
        }
    }

    /// Tail handling for other lengths: the byte-position rules of §6, written out.
    #[test]
    fn tail_bytes_land_where_lookup2_puts_them() {
        // A key of 11 bytes: 0..4 -> a, 4..8 -> b, 8..11 -> c shifted up one byte.
        let key: Vec<u8> = (0x80..0x8b).collect();
        let mut a: u32 = 0x9e37_79b9u32.wrapping_add(u32::from_le_bytes([0x80, 0x81, 0x82, 0x83]));
        let mut b: u32 = 0x9e37_79b9u32.wrapping_add(u32::from_le_bytes([0x84, 0x85, 0x86, 0x87]));
        let mut c: u32 = 5u32
            .wrapping_add(11)
            .wrapping_add(u32::from_le_bytes([0, 0x88, 0x89, 0x8a]));
        mix(&mut a, &mut b, &mut c);
        assert_eq!(jenkins(5, &key), [a, b, c]);
        // Empty key: only the length (0) and the final mix.
        let (mut a, mut b, mut c) = (0x9e37_79b9, 0x9e37_79b9, 9u32);
        mix(&mut a, &mut b, &mut c);
        assert_eq!(jenkins(9, &[]), [a, b, c]);
    }
}
