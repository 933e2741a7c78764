//! CRC-64/NVME, the checksum of grant uploads: one-shot, streaming, and the combination
//! of two CRCs without their bytes (so per-chunk CRCs join into a body's).

/// CRC-64/NVME of `data`: the grant request's `checksum.value` (decimal on the wire).
/// SIMD (carry-less multiply) where the CPU has it; a table fallback elsewhere.
pub fn crc64_nvme(data: &[u8]) -> u64 {
    crc_fast::crc64_nvme(data)
}

/// CRC-64/NVME of `a ++ b` from `crc64_nvme(a)`, `crc64_nvme(b)` and `b.len()`, without
/// reading either: the CRC of `a` moved past `len_b` zero bytes (a multiplication by
/// x^(8·len_b) modulo the polynomial), plus the CRC of `b`. (Init and final XOR are both
/// all ones, so their contributions cancel.) About a microsecond, so per-chunk CRCs taken
/// while each chunk is in cache can be joined into a body's.
pub fn crc64_nvme_combine(crc_a: u64, crc_b: u64, len_b: u64) -> u64 {
    // x^(8·len_b) = product of x^(2^k) over the set bits k of 8·len_b, i.e. bits k-3 of len_b.
    let mut shift = ONE;
    let mut n = len_b;
    let mut k = 3;
    while n != 0 {
        if n & 1 != 0 {
            shift = gf2_mul_mod(X_POW_2_POW[k], shift);
        }
        n >>= 1;
        k += 1;
    }
    gf2_mul_mod(shift, crc_a) ^ crc_b
}

/// CRC-64/NVME's polynomial, bit-reflected (x^0 in the top bit, as the CRC register holds it).
const POLY_REFLECTED: u64 = 0x9a6c_9329_ac4b_c9b5;
/// The polynomial 1 in that representation.
const ONE: u64 = 1 << 63;

/// `a · b mod P` over GF(2), both reflected.
const fn gf2_mul_mod(a: u64, mut b: u64) -> u64 {
    let mut p = 0;
    let mut m = ONE;
    while m != 0 {
        if a & m != 0 {
            p ^= b;
        }
        // b · x: one step towards x^63, reduced when it passes it.
        b = if b & 1 != 0 {
            (b >> 1) ^ POLY_REFLECTED
        } else {
            b >> 1
        };
        m >>= 1;
    }
    p
}

/// `X_POW_2_POW[k]` = x^(2^k) mod P, for every bit of a `u64` length times 8.
const X_POW_2_POW: [u64; 67] = {
    let mut t = [0u64; 67];
    t[0] = ONE >> 1; // x
    let mut k = 1;
    while k < t.len() {
        t[k] = gf2_mul_mod(t[k - 1], t[k - 1]);
        k += 1;
    }
    t
};

/// Streaming CRC-64/NVME, for bodies that arrive in pieces.
pub struct Crc64Nvme(crc_fast::Digest);

impl Default for Crc64Nvme {
    fn default() -> Self {
        Crc64Nvme(crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc64Nvme))
    }
}

impl Crc64Nvme {
    pub fn update(&mut self, data: &[u8]) {
        self.0.update(data)
    }
    pub fn finalize(&self) -> u64 {
        self.0.finalize()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn crc64_nvme_check_value_and_streaming() {
        assert_eq!(crc64_nvme(b"123456789"), 0xae8b14860a799888);
        assert_eq!(crc64_nvme(b""), 0);
        // Long enough for the SIMD path; every split must agree with one shot.
        let data: Vec<u8> = (0..10_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 13) as u8)
            .collect();
        let whole = crc64_nvme(&data);
        for split in [0, 1, 15, 16, 17, 255, 4096, 9_999, 10_000] {
            let mut d = Crc64Nvme::default();
            d.update(&data[..split]);
            d.update(&data[split..]);
            assert_eq!(d.finalize(), whole, "split at {split}");
        }
    }

    #[test]
    fn crc64_nvme_combine_equals_one_shot() {
        let data: Vec<u8> = (0..300_000u32)
            .map(|i| (i.wrapping_mul(2654435761) >> 11) as u8)
            .collect();
        for (a, b) in [
            (0, 0),
            (0, 1),
            (1, 0),
            (1, 1),
            (8, 65_536),
            (7, 131_073),
            (100_000, 0),
            (65_536, 8),
            (3, 299_997),
            (299_999, 1),
        ] {
            let (x, y) = (&data[..a], &data[a..a + b]);
            let want = crc64_nvme(&data[..a + b]);
            let got = crc64_nvme_combine(crc64_nvme(x), crc64_nvme(y), b as u64);
            assert_eq!(got, want, "{a} + {b} bytes");
        }
        // A chain of combines, as a xorb body's headers and payloads are joined.
        let mut crc = 0;
        let mut pos = 0;
        for len in [8usize, 8192, 8, 0, 1, 131_072, 8, 77_777] {
            crc = crc64_nvme_combine(crc, crc64_nvme(&data[pos..pos + len]), len as u64);
            pos += len;
        }
        assert_eq!(crc, crc64_nvme(&data[..pos]));
    }
}
