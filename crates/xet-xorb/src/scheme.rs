//! Chunk compression schemes (draft §7.4): None, LZ4 frame, and ByteGrouping4 + LZ4 frame.
//!
//! Compression writes LZ4 frames laid out as `lz4_flex`'s frame encoder with default
//! settings writes them (the reference uses that encoder), so our payloads are
//! byte-identical to the reference's for the same chunk and scheme. Decompression uses
//! our own small LZ4 frame reader on top of the block decoder so that the output buffer
//! is exactly the header's declared size: a lying payload can never make us produce (or
//! allocate) more than that.

use std::fmt;

use twox_hash::XxHash32;

use crate::error::PayloadProblem;

/// Compression scheme byte of a chunk header (draft §7.3.3).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
#[repr(u8)]
pub enum CompressionScheme {
    #[default]
    None = 0,
    Lz4 = 1,
    ByteGrouping4Lz4 = 2,
}

impl CompressionScheme {
    pub const ALL: [CompressionScheme; 3] = [
        CompressionScheme::None,
        CompressionScheme::Lz4,
        CompressionScheme::ByteGrouping4Lz4,
    ];

    pub fn from_u8(v: u8) -> Option<Self> {
        match v {
            0 => Some(CompressionScheme::None),
            1 => Some(CompressionScheme::Lz4),
            2 => Some(CompressionScheme::ByteGrouping4Lz4),
            _ => None,
        }
    }

    pub fn as_u8(self) -> u8 {
        self as u8
    }

    /// Short name, as the reference prints it.
    pub fn name(self) -> &'static str {
        match self {
            CompressionScheme::None => "none",
            CompressionScheme::Lz4 => "lz4",
            CompressionScheme::ByteGrouping4Lz4 => "bg4-lz4",
        }
    }
}

impl fmt::Display for CompressionScheme {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

// ---------------------------------------------------------------------------------------
// Byte grouping (draft §7.4.3)

/// Byte-group `data` by position mod 4 into `out` (replacing its contents):
/// all bytes 0 mod 4, then 1 mod 4, ... When the length is not a multiple of 4 the
/// first `len % 4` groups hold one extra byte.
pub fn byte_group4_into(data: &[u8], out: &mut Vec<u8>) {
    let n = data.len();
    out.clear();
    out.resize(n, 0);
    let sizes = group_sizes(n);
    let (g0, rest) = out.split_at_mut(sizes[0]);
    let (g1, rest) = rest.split_at_mut(sizes[1]);
    let (g2, g3) = rest.split_at_mut(sizes[2]);
    let mut quads = data.chunks_exact(4);
    for (i, q) in (&mut quads).enumerate() {
        g0[i] = q[0];
        g1[i] = q[1];
        g2[i] = q[2];
        g3[i] = q[3];
    }
    // At most 3 leftover bytes: one more for each of the first groups.
    let full = n / 4;
    for (&b, g) in quads.remainder().iter().zip([g0, g1, g2]) {
        g[full] = b;
    }
}

/// Byte-group `data` (see [`byte_group4_into`]).
pub fn byte_group4(data: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    byte_group4_into(data, &mut out);
    out
}

/// Undo [`byte_group4`]: `out` must have the same length as `grouped`.
pub fn byte_ungroup4_into(grouped: &[u8], out: &mut [u8]) {
    assert_eq!(
        grouped.len(),
        out.len(),
        "byte_ungroup4_into: length mismatch"
    );
    let n = grouped.len();
    let sizes = group_sizes(n);
    let (g0, rest) = grouped.split_at(sizes[0]);
    let (g1, rest) = rest.split_at(sizes[1]);
    let (g2, g3) = rest.split_at(sizes[2]);
    let full = n / 4;
    let mut quads = out.chunks_exact_mut(4);
    for (i, q) in (&mut quads).enumerate() {
        q[0] = g0[i];
        q[1] = g1[i];
        q[2] = g2[i];
        q[3] = g3[i];
    }
    for (b, g) in quads.into_remainder().iter_mut().zip([g0, g1, g2]) {
        *b = g[full];
    }
}

/// Undo [`byte_group4`].
pub fn byte_ungroup4(grouped: &[u8]) -> Vec<u8> {
    let mut out = vec![0; grouped.len()];
    byte_ungroup4_into(grouped, &mut out);
    out
}

fn group_sizes(n: usize) -> [usize; 4] {
    let (base, rem) = (n / 4, n % 4);
    [0, 1, 2, 3].map(|i| base + usize::from(i < rem))
}

// ---------------------------------------------------------------------------------------
// Scheme choice

/// Bytes of a chunk the byte-grouping predictor looks at. A sample is enough: the
/// per-position byte statistics of tensor data are stable across a chunk.
const PREDICTOR_SAMPLE: usize = 16 * 1024;

/// Bits set in each byte value. Baseline x86-64 has no `popcnt` instruction, and the
/// portable bit-twiddling `count_ones` compiles to is slower than this lookup.
const POPCOUNT: [u8; 256] = {
    let mut t = [0u8; 256];
    let mut i = 0;
    while i < 256 {
        t[i] = (i as u8).count_ones() as u8;
        i += 1;
    }
    t
};

/// For each byte position `p` of the 4-byte words of `sample`, how many of its bytes
/// have each popcount 0..=8 (a trailing partial word counts from position 0).
///
/// Written so the compiler vectorises it (even for baseline x86-64): popcounts are
/// computed 16 bytes at a time with bit arithmetic and counted per value with compares
/// into byte-wide counters that stay in registers, added up before they can overflow.
/// The plain way ([`popcount_histograms_scalar`], a lookup and an increment per byte)
/// is 2-2.5x slower, and took a twentieth of an upload's CPU time on incompressible
/// data (`cargo test -p xet-xorb --release --test xorb throughput -- --ignored`).
pub fn popcount_histograms(sample: &[u8]) -> [[u32; 9]; 4] {
    const BLOCK: usize = 64;
    const LANES: usize = 16;
    // Byte-wide counters take at most 255 blocks.
    const ROUND: usize = 255;
    let mut hist = [[0u32; 9]; 4];
    let whole = sample.len() / BLOCK * BLOCK;
    for round in sample[..whole].chunks(ROUND * BLOCK) {
        // One 16-byte group of each block at a time: its nine counters fit in
        // registers.
        for g in 0..BLOCK / LANES {
            let mut acc = [[0u8; LANES]; 9];
            for block in round.chunks_exact(BLOCK) {
                let lanes: &[u8; LANES] = block[g * LANES..(g + 1) * LANES]
                    .try_into()
                    .expect("16 bytes");
                let mut pc = [0u8; LANES];
                for (p, &b) in pc.iter_mut().zip(lanes) {
                    let x = b - ((b >> 1) & 0x55);
                    let x = (x & 0x33) + ((x >> 2) & 0x33);
                    *p = (x + (x >> 4)) & 0x0f;
                }
                for (v, a) in acc.iter_mut().enumerate() {
                    for (c, &p) in a.iter_mut().zip(&pc) {
                        *c += u8::from(p == v as u8);
                    }
                }
            }
            for (v, a) in acc.iter().enumerate() {
                for (i, &c) in a.iter().enumerate() {
                    hist[i % 4][v] += u32::from(c);
                }
            }
        }
    }
    // Blocks and groups are multiples of 4 bytes, so the tail's positions start at 0.
    for (j, &b) in sample[whole..].iter().enumerate() {
        hist[j % 4][usize::from(POPCOUNT[usize::from(b)])] += 1;
    }
    hist
}

/// [`popcount_histograms`] the plain way (a lookup and an increment per byte), to test
/// and time the fast one against.
#[doc(hidden)]
pub fn popcount_histograms_scalar(sample: &[u8]) -> [[u32; 9]; 4] {
    let mut hist = [[0u32; 9]; 4];
    for (j, &b) in sample.iter().enumerate() {
        hist[j % 4][usize::from(POPCOUNT[usize::from(b)])] += 1;
    }
    hist
}

/// Pick LZ4 or ByteGrouping4LZ4 for a chunk (never `None`: whether compression pays off
/// is decided by [`compress_chunk_into`]).
///
/// The reference decides once per block of 32 chunks of a file; we decide per chunk,
/// which is cheap enough (see below) and makes each chunk's encoding independent of its
/// neighbours, so chunks can be compressed in any order on any thread. The choice only
/// affects size: the xorb hash depends on the uncompressed chunks alone.
///
/// Byte grouping helps when the four byte positions of each 4-byte word have different
/// statistics (float32 tensors: the exponent byte repeats, the low mantissa bytes do
/// not). We measure that as the largest KL divergence between the popcount histogram of
/// one byte position and the pooled histogram; above 0.02 byte grouping wins. This is
/// cheap (one pass over at most 16 KiB), unlike trial-compressing both ways.
pub fn choose_scheme(sample: &[u8]) -> CompressionScheme {
    let sample = &sample[..sample.len().min(PREDICTOR_SAMPLE)];
    let hist = popcount_histograms(sample);
    // Pooled histogram with add-one smoothing so no bin has probability zero.
    let mut pooled = [1u32; 9];
    let mut totals = [0u32; 4];
    for (h, t) in hist.iter().zip(totals.iter_mut()) {
        for (p, &c) in pooled.iter_mut().zip(h) {
            *p += c;
        }
        *t = h.iter().sum();
    }
    let pooled_total: u32 = pooled.iter().sum();
    let mut max_kl = 0f64;
    for (h, &t) in hist.iter().zip(&totals) {
        if t == 0 {
            continue;
        }
        let mut kl = 0f64;
        for (&c, &q) in h.iter().zip(&pooled) {
            if c == 0 {
                continue;
            }
            let p = c as f64 / t as f64;
            let q = q as f64 / pooled_total as f64;
            kl += p * (p / q).ln();
        }
        max_kl = max_kl.max(kl);
    }
    if max_kl > 0.02 {
        CompressionScheme::ByteGrouping4Lz4
    } else {
        CompressionScheme::Lz4
    }
}

// ---------------------------------------------------------------------------------------
// Compression

/// Append `data` compressed with `scheme` to `out` (payload only, no chunk header).
/// `scratch` is reused for byte grouping. Returns the payload length.
pub fn compress_into(
    scheme: CompressionScheme,
    data: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> usize {
    let start = out.len();
    match lz4_input(scheme, data, scratch) {
        None => out.extend_from_slice(data),
        Some(input) => lz4_frame_compress(input, out),
    }
    out.len() - start
}

/// What the LZ4 frame of `scheme` holds: `data` itself, or its byte-grouped copy made in
/// `scratch`; `None` for a stored chunk.
fn lz4_input<'a>(
    scheme: CompressionScheme,
    data: &'a [u8],
    scratch: &'a mut Vec<u8>,
) -> Option<&'a [u8]> {
    match scheme {
        CompressionScheme::None => None,
        CompressionScheme::Lz4 => Some(data),
        CompressionScheme::ByteGrouping4Lz4 => {
            byte_group4_into(data, scratch);
            Some(scratch)
        }
    }
}

/// `data` compressed with `scheme` (payload only).
pub fn compress(scheme: CompressionScheme, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(data.len() + 32);
    compress_into(scheme, data, &mut out, &mut Vec::new());
    out
}

/// Append the best payload for `data` to `out`, trying `scheme` and falling back to
/// [`CompressionScheme::None`] when compression does not make the chunk strictly
/// smaller (as the reference does). Returns the scheme actually used.
pub fn compress_chunk_into(
    scheme: CompressionScheme,
    data: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> CompressionScheme {
    let used = try_compress_into(scheme, data, out, scratch);
    if used == CompressionScheme::None {
        out.extend_from_slice(data);
    }
    used
}

/// [`compress_chunk_into`] without the fallback copy: appends the payload and returns
/// `scheme` when compression makes the chunk strictly smaller; otherwise leaves `out`
/// as it was and returns [`CompressionScheme::None`], and the payload is `data` itself.
pub fn try_compress_into(
    scheme: CompressionScheme,
    data: &[u8],
    out: &mut Vec<u8>,
    scratch: &mut Vec<u8>,
) -> CompressionScheme {
    let start = out.len();
    let Some(input) = lz4_input(scheme, data, scratch) else {
        return CompressionScheme::None;
    };
    // Gives up as soon as the frame cannot come out smaller than the chunk: an
    // incompressible block is then never copied into the frame only to be dropped.
    if lz4_frame_compress_below(input, out, data.len()) {
        return scheme;
    }
    out.truncate(start);
    CompressionScheme::None
}

/// Append one LZ4 frame holding `data` to `out`, laid out exactly as `lz4_flex`'s
/// default frame encoder (what the reference uses) lays it out: independent blocks, no
/// checksums, no content size, block size from the input length (64 KiB up to 64 KiB,
/// 256 KiB up to 256 KiB, else 4 MiB), a block stored raw when compressing does not
/// shrink it. The payloads are therefore byte-identical to the reference's.
///
/// Each block is compressed straight into `out` with the block compressor; the frame
/// encoder would copy the input into its own buffer and the output out of another.
fn lz4_frame_compress(data: &[u8], out: &mut Vec<u8>) {
    lz4_frame_compress_below(data, out, usize::MAX);
}

/// [`lz4_frame_compress`], stopping early (returning `false`, `out` holding a partial
/// frame) once the frame cannot be shorter than `limit` bytes; `true` when it is.
fn lz4_frame_compress_below(data: &[u8], out: &mut Vec<u8>, limit: usize) -> bool {
    let start = out.len();
    // The frame still needs this much after the current position: the end mark.
    let end_mark = 4;
    let (block_max, bd) = match data.len() {
        n if n <= 64 << 10 => (64 << 10, 4u8 << 4),
        n if n <= 256 << 10 => (256 << 10, 5u8 << 4),
        _ => (4 << 20, 7u8 << 4),
    };
    let flg = 0x40 | FLG_INDEPENDENT;
    out.extend_from_slice(&LZ4_MAGIC.to_le_bytes());
    out.extend_from_slice(&[flg, bd, (XxHash32::oneshot(0, &[flg, bd]) >> 8) as u8]);
    for block in data.chunks(block_max) {
        let at = out.len();
        let compressed = BLOCK_OUT.with(|b| {
            let mut b = b.borrow_mut();
            let worst = lz4_flex::block::get_maximum_output_size(block.len());
            if b.len() < worst {
                b.resize(worst, 0);
            }
            // Room for the worst case, so the block compressor cannot run out of it.
            let n = TABLE
                .with(|t| {
                    lz4_flex::block::compress_into_with_table(
                        block,
                        &mut b[..],
                        &mut t.borrow_mut(),
                    )
                })
                .expect("LZ4 output sized by get_maximum_output_size");
            if n < block.len() {
                out.extend_from_slice(&(n as u32).to_le_bytes());
                out.extend_from_slice(&b[..n]);
                true
            } else {
                false
            }
        });
        if !compressed {
            if at - start + 4 + block.len() + end_mark >= limit {
                return false;
            }
            out.extend_from_slice(&(block.len() as u32 | BLOCK_UNCOMPRESSED).to_le_bytes());
            out.extend_from_slice(block);
        }
        if out.len() - start + end_mark >= limit {
            return false;
        }
    }
    out.extend_from_slice(&0u32.to_le_bytes());
    out.len() - start < limit
}

thread_local! {
    /// Where each block is compressed before what came out is appended to the frame
    /// (only if it is smaller): a buffer that is only ever grown, so its worst-case room
    /// is zeroed once per thread, not for every block (most blocks of incompressible
    /// data are then never copied at all).
    static BLOCK_OUT: std::cell::RefCell<Vec<u8>> = const { std::cell::RefCell::new(Vec::new()) };

    /// The frame encoder's hash table kind (32-bit entries, 5-byte hash) at every input
    /// size: the block compressor's default switches to a 16-bit, 4-byte-hash table below
    /// 64 KiB, which finds different matches and so writes different (valid) bytes.
    static TABLE: std::cell::RefCell<lz4_flex::block::CompressTable> =
        std::cell::RefCell::new(lz4_flex::block::CompressTable::large());
}

// ---------------------------------------------------------------------------------------
// Decompression

/// Decompress `payload` (written with `scheme`) into `out`, whose length is the chunk
/// header's declared uncompressed size. Fails unless the payload decodes to exactly
/// `out.len()` bytes; decoding never writes past `out`. `scratch` is reused for byte
/// grouping.
pub fn decompress_into(
    scheme: CompressionScheme,
    payload: &[u8],
    out: &mut [u8],
    scratch: &mut Vec<u8>,
) -> Result<(), PayloadProblem> {
    match scheme {
        CompressionScheme::None => {
            if payload.len() > out.len() {
                return Err(PayloadProblem::Overflow {
                    declared: declared(out.len()),
                });
            }
            if payload.len() < out.len() {
                return Err(PayloadProblem::Short {
                    declared: declared(out.len()),
                    got: payload.len() as u64,
                });
            }
            out.copy_from_slice(payload);
            Ok(())
        }
        CompressionScheme::Lz4 => lz4_frame_decompress(payload, out),
        CompressionScheme::ByteGrouping4Lz4 => {
            scratch.clear();
            scratch.resize(out.len(), 0);
            lz4_frame_decompress(payload, scratch)?;
            byte_ungroup4_into(scratch, out);
            Ok(())
        }
    }
}

/// Decompress `payload` to exactly `uncompressed_len` bytes. Callers must bound
/// `uncompressed_len` (chunk headers are checked against the maximum chunk size before
/// this is reached).
pub fn decompress(
    scheme: CompressionScheme,
    payload: &[u8],
    uncompressed_len: usize,
) -> Result<Vec<u8>, PayloadProblem> {
    let mut out = vec![0u8; uncompressed_len];
    decompress_into(scheme, payload, &mut out, &mut Vec::new())?;
    Ok(out)
}

fn declared(n: usize) -> u32 {
    u32::try_from(n).unwrap_or(u32::MAX)
}

const LZ4_MAGIC: u32 = 0x184D_2204;
const FLG_INDEPENDENT: u8 = 0x20;
const FLG_BLOCK_CHECKSUM: u8 = 0x10;
const FLG_CONTENT_SIZE: u8 = 0x08;
const FLG_CONTENT_CHECKSUM: u8 = 0x04;
const FLG_RESERVED: u8 = 0x02;
const FLG_DICT_ID: u8 = 0x01;
/// High bit of a block size: the block is stored uncompressed.
const BLOCK_UNCOMPRESSED: u32 = 0x8000_0000;
/// Linked blocks may refer this far back into earlier blocks of the frame.
const LZ4_WINDOW: usize = 64 * 1024;

struct Input<'a> {
    rest: &'a [u8],
}

impl<'a> Input<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], PayloadProblem> {
        if self.rest.len() < n {
            return Err(PayloadProblem::Truncated { what });
        }
        let (head, tail) = self.rest.split_at(n);
        self.rest = tail;
        Ok(head)
    }
    fn u32(&mut self, what: &'static str) -> Result<u32, PayloadProblem> {
        let b = self.take(4, what)?;
        Ok(u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }
}

/// Decode one or more concatenated LZ4 frames (the reference's decoder accepts
/// concatenation) into exactly `out`.
fn lz4_frame_decompress(payload: &[u8], out: &mut [u8]) -> Result<(), PayloadProblem> {
    let mut input = Input { rest: payload };
    let mut pos = 0usize;
    if payload.is_empty() {
        return Err(PayloadProblem::Truncated {
            what: "frame header",
        });
    }
    while !input.rest.is_empty() {
        let descriptor_start = input.rest;
        let magic = input.u32("frame header")?;
        if magic != LZ4_MAGIC {
            return Err(PayloadProblem::BadMagic { got: magic });
        }
        let fb = input.take(2, "frame header")?;
        let (flg, bd) = (fb[0], fb[1]);
        if flg >> 6 != 0b01 {
            return Err(PayloadProblem::BadDescriptor {
                what: "version is not 01",
            });
        }
        if flg & FLG_RESERVED != 0 || bd & 0x8F != 0 {
            return Err(PayloadProblem::BadDescriptor {
                what: "reserved bit set",
            });
        }
        let block_max: usize = match (bd >> 4) & 0x7 {
            4 => 64 << 10,
            5 => 256 << 10,
            6 => 1 << 20,
            7 => 4 << 20,
            _ => {
                return Err(PayloadProblem::BadDescriptor {
                    what: "block size code",
                });
            }
        };
        let content_size = if flg & FLG_CONTENT_SIZE != 0 {
            Some(input.take(8, "frame header")?)
        } else {
            None
        }
        .map(|b| u64::from_le_bytes(b.try_into().expect("8 bytes")));
        if flg & FLG_DICT_ID != 0 {
            return Err(PayloadProblem::DictionaryNotSupported);
        }
        let descriptor_len = descriptor_start.len() - input.rest.len();
        let hc = input.take(1, "frame header")?[0];
        let expected_hc = (XxHash32::oneshot(0, &descriptor_start[4..descriptor_len]) >> 8) as u8;
        if hc != expected_hc {
            return Err(PayloadProblem::HeaderChecksum {
                expected: expected_hc,
                got: hc,
            });
        }

        let frame_start = pos;
        loop {
            let bsize = input.u32("block size")?;
            if bsize == 0 {
                break;
            }
            let stored = bsize & BLOCK_UNCOMPRESSED != 0;
            let len = (bsize & 0x7FFF_FFFF) as usize;
            if len > block_max {
                return Err(PayloadProblem::BlockTooLarge {
                    size: len as u32,
                    max: block_max as u32,
                });
            }
            let data = input.take(len, "block data")?;
            if flg & FLG_BLOCK_CHECKSUM != 0 {
                let sum = input.u32("block checksum")?;
                if XxHash32::oneshot(0, data) != sum {
                    return Err(PayloadProblem::BlockChecksum);
                }
            }
            let room = out.len() - pos;
            if stored {
                if len > room {
                    return Err(PayloadProblem::Overflow {
                        declared: declared(out.len()),
                    });
                }
                out[pos..pos + len].copy_from_slice(data);
                pos += len;
                continue;
            }
            // The block may legitimately fill up to block_max; capping the output slice at
            // the remaining declared size is what bounds a decompression bomb.
            let cap = room.min(block_max);
            let (before, after) = out.split_at_mut(pos);
            let dst = &mut after[..cap];
            let linked = flg & FLG_INDEPENDENT == 0 && pos > frame_start;
            let res = if linked {
                let dict = &before[frame_start.max(pos.saturating_sub(LZ4_WINDOW))..];
                lz4_flex::block::decompress_into_with_dict(data, dst, dict)
            } else {
                lz4_flex::block::decompress_into(data, dst)
            };
            match res {
                Ok(n) => pos += n,
                Err(lz4_flex::block::DecompressError::OutputTooSmall { .. }) if cap == room => {
                    return Err(PayloadProblem::Overflow {
                        declared: declared(out.len()),
                    });
                }
                Err(e) => {
                    return Err(PayloadProblem::Block {
                        detail: e.to_string(),
                    });
                }
            }
        }
        if let Some(cs) = content_size {
            let got = (pos - frame_start) as u64;
            if cs != got {
                return Err(PayloadProblem::ContentSize { declared: cs, got });
            }
        }
        if flg & FLG_CONTENT_CHECKSUM != 0 {
            let sum = input.u32("content checksum")?;
            if XxHash32::oneshot(0, &out[frame_start..pos]) != sum {
                return Err(PayloadProblem::ContentChecksum);
            }
        }
    }
    if pos != out.len() {
        return Err(PayloadProblem::Short {
            declared: declared(out.len()),
            got: pos as u64,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fresh_frame(data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let mut enc = lz4_flex::frame::FrameEncoder::new(Vec::new());
        enc.write_all(data).unwrap();
        enc.finish().unwrap()
    }

    /// Our frames are exactly what `lz4_flex`'s default frame encoder writes.
    #[test]
    fn frames_match_the_lz4_flex_encoder() {
        let mut seed = 1u64;
        let mut next = || {
            seed = seed
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            seed >> 33
        };
        let sizes = [
            0, 1, 5, 1000, 65535, 65536, 65537, 131072, 200_000, 262_144, 262_145, 70_000, 3,
            65536, 9_000_000,
        ];
        for (i, &n) in sizes.iter().enumerate() {
            // Mix compressible and random bytes.
            let data: Vec<u8> = (0..n)
                .map(|j| {
                    if (j / 1000 + i) % 2 == 0 {
                        (j % 7) as u8
                    } else {
                        next() as u8
                    }
                })
                .collect();
            let mut out = vec![9u8; 3];
            lz4_frame_compress(&data, &mut out);
            assert_eq!(&out[..3], &[9, 9, 9]);
            assert_eq!(&out[3..], fresh_frame(&data), "size {n}");
        }
    }

    /// Text and float tensors, smallest inputs first (each test runs on a fresh thread, so
    /// with a fresh per-thread table): inputs where the kind of hash table changes matches.
    #[test]
    fn frames_match_the_lz4_flex_encoder_on_real_data() {
        for (i, &n) in [100, 20_000, 65_535, 65_536, 65_537, 131_072, 300_000]
            .iter()
            .enumerate()
        {
            for kind in [xet_testdata::Kind::Text, xet_testdata::Kind::Float32] {
                let data = xet_testdata::generate(kind, n, i as u64);
                let mut out = Vec::new();
                lz4_frame_compress(&data, &mut out);
                assert_eq!(out, fresh_frame(&data), "{kind:?} size {n}");
                let mut back = vec![0u8; n];
                lz4_frame_decompress(&out, &mut back).unwrap();
                assert_eq!(back, data);
            }
        }
    }

    #[test]
    fn group_sizes_put_remainder_first() {
        assert_eq!(group_sizes(10), [3, 3, 2, 2]);
        assert_eq!(group_sizes(8), [2, 2, 2, 2]);
        assert_eq!(group_sizes(3), [1, 1, 1, 0]);
        assert_eq!(
            byte_group4(&[0, 1, 2, 3, 4, 5, 6, 7, 8, 9]),
            vec![0, 4, 8, 1, 5, 9, 2, 6, 3, 7]
        );
    }
}
