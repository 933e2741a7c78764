//! cmph 2.0.2's compressed sequence (`compressed_seq.c` with `select.c`): how CHD_PH stores
//! its displacements in the dump (spec §5).
//!
//! Each value `v` costs `len(v)` bits (`0` for 0, else ⌊log2(v+1)⌋) holding `v - (2^len - 1)`
//! in the `store`; the running sums of those lengths are split into `rem_r` low bits
//! (`length_rems`) and high parts kept unary in a select structure (a bit vector with a 1 at
//! `H_i + i`, plus a sample of the position of every 128th 1-bit). All fields are LSB-first
//! bit streams over little-endian u32 words.

use crate::error::ReadError;

/// One 1-bit of the select bit vector is sampled every this many.
const SELECT_STEP: u64 = 128;

/// The sizes of a compressed sequence's parts, which its three parameters fix.
#[derive(Debug, Clone, Copy)]
struct Layout {
    /// `total_length >> rem_r`: the high parts' range, `sel.m`.
    sel_m: u64,
    bitvec_words: u64,
    sample_words: u64,
    rems_words: u64,
    store_words: u64,
}

impl Layout {
    fn new(n: u64, rem_r: u64, total_length: u64) -> Layout {
        let sel_m = total_length >> rem_r;
        Layout {
            sel_m,
            bitvec_words: (n + sel_m).div_ceil(32),
            sample_words: (n >> 7) + 1,
            rems_words: (n * rem_r).div_ceil(32),
            store_words: total_length.div_ceil(32),
        }
    }
    /// `sel_len`: the select block after its length field.
    fn sel_len(&self) -> u64 {
        8 + 4 * (self.bitvec_words + self.sample_words)
    }
    /// `cs_len`: the whole sequence.
    fn cs_len(&self) -> u64 {
        16 + self.sel_len() + 4 * (self.rems_words + self.store_words)
    }
}

/// Why a sequence cannot be encoded in cmph's u32 fields.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum EncodeError {
    /// A value of `u32::MAX` (cmph computes `v + 1` in u32).
    ValueTooLarge { index: usize },
    /// A count or length does not fit in u32.
    TooLong { what: &'static str, value: u64 },
}

/// cmph's `i_log2`: halvings until `x <= 1`.
fn ilog2(mut x: u64) -> u64 {
    let mut r = 0;
    while x > 1 {
        x >>= 1;
        r += 1;
    }
    r
}

fn value_len(v: u32) -> u32 {
    if v == 0 {
        0
    } else {
        31 - (v + 1).leading_zeros()
    }
}

/// Set `nbits` (≤ 32) bits of the stream at bit `pos` to `value` (fresh, zeroed words).
fn set_bits(words: &mut [u32], pos: u64, value: u32, nbits: u32) {
    if nbits == 0 {
        return;
    }
    let w = (pos >> 5) as usize;
    let v = u64::from(value) << (pos & 31);
    words[w] |= v as u32;
    if (pos & 31) + u64::from(nbits) > 32 {
        words[w + 1] |= (v >> 32) as u32;
    }
}

/// `nbits` (≤ 32) bits of the LSB-first stream in `bytes` at bit `pos`; missing bytes read
/// as zero (callers have checked the lengths).
fn get_bits(bytes: &[u8], pos: u64, nbits: u32) -> u32 {
    if nbits == 0 {
        return 0;
    }
    let first = (pos >> 3) as usize;
    let mut acc: u64 = 0;
    for k in 0..5 {
        if let Some(&b) = bytes.get(first.wrapping_add(k)) {
            acc |= u64::from(b) << (8 * k);
        }
    }
    ((acc >> (pos & 7)) & ((1u64 << nbits) - 1)) as u32
}

fn push_u32(out: &mut Vec<u8>, v: u32) {
    out.extend_from_slice(&v.to_le_bytes());
}

fn to_u32(what: &'static str, value: u64) -> Result<u32, EncodeError> {
    u32::try_from(value).map_err(|_| EncodeError::TooLong { what, value })
}

/// The dump of `values` (`compressed_seq_dump`: `cs_len` bytes, without the `cs_len` field),
/// appended to `out`.
pub(crate) fn encode(values: &[u32], out: &mut Vec<u8>) -> Result<(), EncodeError> {
    let n = values.len() as u64;
    let n32 = to_u32("number of values", n)?;
    let mut total: u64 = 0;
    for (index, &v) in values.iter().enumerate() {
        if v == u32::MAX {
            return Err(EncodeError::ValueTooLarge { index });
        }
        total += u64::from(value_len(v));
    }
    let total32 = to_u32("total_length", total)?;
    let rem_r = total.checked_div(n).map_or(1, |q| ilog2(q).max(1));
    let lay = Layout::new(n, rem_r, total);
    to_u32("select bit count", n + lay.sel_m)?;
    to_u32("length_rems bit count", n * rem_r)?;
    to_u32("cs_len", lay.cs_len())?;

    let mut store = vec![0u32; lay.store_words as usize];
    let mut rems = vec![0u32; lay.rems_words as usize];
    let mut bitvec = vec![0u32; lay.bitvec_words as usize];
    let mut samples = vec![0u32; lay.sample_words as usize];
    let mask = (1u64 << rem_r) - 1;
    let mut cum: u64 = 0;
    for (i, &v) in values.iter().enumerate() {
        let len = value_len(v);
        if len > 0 {
            set_bits(&mut store, cum, v - ((1u32 << len) - 1), len);
        }
        cum += u64::from(len);
        let i = i as u64;
        set_bits(&mut rems, i * rem_r, (cum & mask) as u32, rem_r as u32);
        let pos = (cum >> rem_r) + i;
        bitvec[(pos >> 5) as usize] |= 1 << (pos & 31);
        if i.is_multiple_of(SELECT_STEP) {
            samples[(i / SELECT_STEP) as usize] = pos as u32;
        }
    }

    out.reserve(lay.cs_len() as usize);
    push_u32(out, n32);
    push_u32(out, rem_r as u32);
    push_u32(out, total32);
    push_u32(out, lay.sel_len() as u32);
    push_u32(out, n32);
    push_u32(out, lay.sel_m as u32);
    for w in bitvec.iter().chain(&samples).chain(&rems).chain(&store) {
        push_u32(out, *w);
    }
    Ok(())
}

fn u32_at(b: &[u8], i: usize) -> u32 {
    u32::from_le_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]])
}

/// Decode the `nbuckets` values of the sequence `cs` (exactly `cs_len` bytes, found at file
/// offset `at`), checking every field against the others and, last, that `cs` is exactly
/// what cmph's encoder makes of the values, so the select samples cmph's own reader uses
/// agree with the bit vector this decoder reads.
pub(crate) fn decode(cs: &[u8], nbuckets: u32, at: u64) -> Result<Vec<u32>, ReadError> {
    let field = |name: &'static str, rel: u64, value: u64, expected: String| ReadError::HashField {
        field: name,
        offset: at + rel,
        value,
        expected,
    };
    if cs.len() < 24 {
        return Err(ReadError::Truncated {
            what: "compressed sequence",
            offset: at,
            needed: 24,
            available: cs.len() as u64,
        });
    }
    let n = u64::from(u32_at(cs, 0));
    let rem_r = u64::from(u32_at(cs, 4));
    let total = u64::from(u32_at(cs, 8));
    let sel_len = u64::from(u32_at(cs, 12));
    let sel_n = u64::from(u32_at(cs, 16));
    let sel_m = u64::from(u32_at(cs, 20));
    if n != u64::from(nbuckets) {
        return Err(field("cs.n", 0, n, format!("nbuckets = {nbuckets}")));
    }
    if !(1..=31).contains(&rem_r) {
        return Err(field("rem_r", 4, rem_r, "1..=31".into()));
    }
    let lay = Layout::new(n, rem_r, total);
    if sel_len != lay.sel_len() {
        return Err(field(
            "sel_len",
            12,
            sel_len,
            format!(
                "{} (for cs.n = {n}, rem_r = {rem_r}, total_length = {total})",
                lay.sel_len()
            ),
        ));
    }
    if sel_n != n {
        return Err(field("sel.n", 16, sel_n, format!("cs.n = {n}")));
    }
    if sel_m != lay.sel_m {
        return Err(field(
            "sel.m",
            20,
            sel_m,
            format!("total_length >> rem_r = {}", lay.sel_m),
        ));
    }
    if cs.len() as u64 != lay.cs_len() {
        return Err(ReadError::HashField {
            field: "cs_len",
            offset: at.saturating_sub(4),
            value: cs.len() as u64,
            expected: format!(
                "{} (for cs.n = {n}, rem_r = {rem_r}, total_length = {total})",
                lay.cs_len()
            ),
        });
    }
    let bitvec_start = 24usize;
    let rems_start = bitvec_start + 4 * (lay.bitvec_words + lay.sample_words) as usize;
    let store_start = rems_start + 4 * lay.rems_words as usize;
    let bitvec = &cs[bitvec_start..bitvec_start + 4 * lay.bitvec_words as usize];
    let rems = &cs[rems_start..store_start];
    let store = &cs[store_start..];

    let bad = |rel: usize, detail: String| ReadError::BadSequence {
        offset: at + rel as u64,
        detail,
    };
    let mut values = Vec::with_capacity(n as usize);
    let mut word = 0usize;
    let mut cur: u32 = if bitvec.is_empty() {
        0
    } else {
        u32_at(bitvec, 0)
    };
    let mut prev: u64 = 0;
    for i in 0..n {
        while cur == 0 {
            word += 1;
            if word >= lay.bitvec_words as usize {
                return Err(bad(
                    bitvec_start,
                    format!("the select bit vector has {i} one-bits, cs.n = {n} are needed"),
                ));
            }
            cur = u32_at(bitvec, 4 * word);
        }
        let pos = 32 * word as u64 + u64::from(cur.trailing_zeros());
        cur &= cur - 1;
        let high = pos - i; // the i-th one-bit is at position >= i
        if high > lay.sel_m {
            return Err(bad(
                bitvec_start + 4 * word,
                format!("value #{i}: high part {high} exceeds sel.m = {}", lay.sel_m),
            ));
        }
        let low = u64::from(get_bits(rems, i * rem_r, rem_r as u32));
        let cum = (high << rem_r) | low;
        if cum < prev || cum > total || cum - prev > 31 {
            return Err(bad(
                rems_start + (i * rem_r / 8) as usize,
                format!(
                    "value #{i}: cumulative length {cum} after {prev} (total_length {total}) \
                     gives no valid value length (0..=31)"
                ),
            ));
        }
        let len = (cum - prev) as u32;
        let v = if len == 0 {
            0
        } else {
            get_bits(store, prev, len) + ((1u32 << len) - 1)
        };
        values.push(v);
        prev = cum;
    }
    if prev != total {
        return Err(bad(
            8,
            format!("the value lengths add up to {prev}, total_length says {total}"),
        ));
    }
    let mut again = Vec::with_capacity(cs.len());
    encode(&values, &mut again).map_err(|e| bad(0, format!("cannot be re-encoded: {e:?}")))?;
    if let Some(i) = again.iter().zip(cs).position(|(a, b)| a != b) {
        return Err(bad(
            i,
            "differs from cmph's encoding of the values it holds (unused bits, select \
             samples or rem_r are not what cmph writes)"
                .into(),
        ));
    }
    Ok(values)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(values: &[u32]) -> Vec<u8> {
        let mut out = Vec::new();
        encode(values, &mut out).unwrap();
        let back = decode(&out, values.len() as u32, 1000).unwrap();
        assert_eq!(back, values);
        out
    }

    /// `three.shard`'s sequence (spec §5 worked example): one displacement, 1.
    #[test]
    fn spec_worked_example() {
        let out = roundtrip(&[1]);
        let words: Vec<u32> = out.chunks(4).map(|c| u32_at(c, 0)).collect();
        assert_eq!(words, [1, 1, 1, 16, 1, 0, 1, 0, 1, 0]);
        let out = roundtrip(&[0]);
        let words: Vec<u32> = out.chunks(4).map(|c| u32_at(c, 0)).collect();
        assert_eq!(words, [1, 1, 0, 16, 1, 0, 1, 0, 0]);
    }

    #[test]
    fn lengths_and_edges() {
        assert_eq!(value_len(0), 0);
        assert_eq!(value_len(1), 1);
        assert_eq!(value_len(2), 1);
        assert_eq!(value_len(3), 2);
        assert_eq!(value_len(u32::MAX - 1), 31);
        roundtrip(&[u32::MAX - 1, 0, 1, 2, 3, 4, 1 << 20]);
        let big: Vec<u32> = (0..1000u32)
            .map(|i| i.wrapping_mul(2_654_435_761) % 9000)
            .collect();
        roundtrip(&big);
        let zeros = vec![0u32; 513];
        roundtrip(&zeros);
        assert_eq!(
            encode(&[u32::MAX], &mut Vec::new()),
            Err(EncodeError::ValueTooLarge { index: 0 })
        );
    }

    #[test]
    fn any_change_is_refused_or_decodes_differently() {
        let values: Vec<u32> = (0..300u32).map(|i| (i * 37) % 200).collect();
        let good = roundtrip(&values);
        for i in 0..good.len() {
            for bit in [0u8, 3, 7] {
                let mut bad = good.clone();
                bad[i] ^= 1 << bit;
                match decode(&bad, 300, 0) {
                    Err(_) => {}
                    Ok(v) => assert_ne!(v, values, "byte {i} bit {bit}"),
                }
            }
        }
    }
}
