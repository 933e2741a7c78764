//! The CHD_PH hash function of cmph 2.0.2, as swh-shard 2.2.1 configures it (spec §5, §7,
//! §8): evaluation, the `cmph_dump` encoding, and the builder.
//!
//! A function is `(seed, n, nbuckets, displacements)`. A key's three Jenkins words pick its
//! bucket `g = h0 mod nbuckets`, first slot `f = h1 mod n` and step `h = h2 mod (n-1) + 1`;
//! the bucket's displacement `d` gives `p0 = d mod n`, `p1 = d div n`, and the key's slot is
//! `(f + h·p0 + p1) mod n`. The builder does what cmph's `chd_ph_new` does with swh's
//! settings (4 keys per bucket, load factor 0.99, one key per bin, Jenkins hash, the
//! `place_buckets2` heuristic), so for the seed a file records it finds the displacements
//! that file holds, byte for byte.

use crate::error::{BuildError, ReadError};
use crate::jenkins::{jenkins, jenkins32};
use crate::seq;
use crate::{KEY_LEN, hex};

/// The algorithm name cmph writes first (`"chd_ph"` and its NUL).
pub const ALGO_NAME: &[u8; 7] = b"chd_ph\0";
/// The hash name in the hash state (`"jenkins"` and its NUL).
pub const HASH_NAME: &[u8; 8] = b"jenkins\0";
/// Keys per bucket (`cmph_config_set_b(4)`).
pub const KEYS_PER_BUCKET: u32 = 4;
/// The load factor (`cmph_config_set_graphsize(0.99)`).
pub const LOAD_FACTOR: f64 = 0.99;
/// Slots of the function of an empty key set. cmph never returns for zero keys; this is the
/// bin count it uses for one to ten keys (spec §9).
pub const EMPTY_SLOTS: u32 = 11;
/// Displacements probed per bucket-size class before a seed is given up
/// (`max_probes` of `chd_ph_new`: 2^20 for every u32 key count).
pub const MAX_PROBES: u32 = 1 << 20;
/// Seeds tried by one mapping step before the build fails (`chd_ph_mapping`).
const MAPPING_ITERATIONS: u32 = 1000;
/// Searches tried before the build fails (`chd_ph_new`'s `iterations`).
const SEARCH_ITERATIONS: u32 = 100;
/// The fixed part of a dump: name, size, hash state and its length, `cs_len`, n, nbuckets.
pub const DUMP_OVERHEAD: u64 = 7 + 4 + 4 + 12 + 4 + 4 + 4;
/// Most keys a function can hold: its slot count must fit cmph's u32 fields.
pub const MAX_KEYS: u64 = 4_000_000_000;

/// Where the builder takes its seeds from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum SeedPolicy {
    /// What swh-shard 2.2.1 uses in a fresh process: cmph draws every seed as
    /// `rand() % m` and nothing seeds glibc's `rand()`, so the seeds are glibc's `srand(1)`
    /// sequence (1804289383, 846930886, …) modulo the key count. The builder with this
    /// policy writes the file swh-shard writes for the same objects in a fresh process.
    #[default]
    Swh,
    /// These seeds, in order (for instance the seed a file records, to rebuild its
    /// function); the build fails if none of them works.
    List(Vec<u32>),
}

/// glibc's `random()` (TYPE_3: `x[i] = x[i-3] + x[i-31]`, output `>> 1`), which `rand()` is.
#[derive(Debug, Clone)]
pub struct GlibcRand {
    state: [u32; 31],
    f: usize,
    r: usize,
}

impl GlibcRand {
    /// The generator after `srand(seed)` (`srand(0)` means `srand(1)`, as in glibc).
    pub fn new(seed: u32) -> GlibcRand {
        let mut state = [0u32; 31];
        let mut word = i64::from(if seed == 0 { 1 } else { seed });
        state[0] = word as u32;
        for s in state.iter_mut().skip(1) {
            // 16807 · word mod (2^31 - 1), Schrage's way, as glibc's srandom_r.
            let hi = word / 127_773;
            let lo = word % 127_773;
            word = 16_807 * lo - 2_836 * hi;
            if word < 0 {
                word += 2_147_483_647;
            }
            *s = word as u32;
        }
        let mut g = GlibcRand { state, f: 3, r: 0 };
        for _ in 0..310 {
            g.next_u31();
        }
        g
    }

    /// The next `rand()` value (0..2^31).
    pub fn next_u31(&mut self) -> u32 {
        self.state[self.f] = self.state[self.f].wrapping_add(self.state[self.r]);
        let out = self.state[self.f] >> 1;
        self.f = (self.f + 1) % 31;
        self.r = (self.r + 1) % 31;
        out
    }
}

/// cmph's `check_primality`: trial division by 2, 3, 5, 7, then Miller–Rabin with bases 2, 7
/// and 61. It rejects 2, 3, 5, 7 and 61 themselves; `n` must be odd and greater than 1
/// (cmph loops forever on 1).
fn cmph_prime(n: u64) -> bool {
    if [2, 3, 5, 7].into_iter().any(|p| n.is_multiple_of(p)) {
        return false;
    }
    let mut s = 0u64;
    let mut d = n - 1;
    loop {
        s += 1;
        d /= 2;
        if !d.is_multiple_of(2) {
            break;
        }
    }
    let pow = |a: u64| {
        let (mut res, mut base, mut e) = (1u64, a, d);
        while e > 0 {
            if e & 1 == 1 {
                res = res * base % n;
            }
            base = base * base % n;
            e /= 2;
        }
        res
    };
    let witness = |mut x: u64| {
        if x == 1 || x == n - 1 {
            return true;
        }
        for _ in 1..s {
            x = x * x % n;
            if x == n - 1 {
                return true;
            }
        }
        false
    };
    [2u64, 7, 61].into_iter().all(|a| witness(pow(a)))
}

/// The slot count `n` cmph 2.0.2 gives `m` keys with swh's settings: the next number cmph
/// calls prime at or after ⌊m / 0.99⌋ + 1 (computed in double, as cmph does); 11 for no keys.
pub fn slot_count(m: u64) -> Result<u32, BuildError> {
    if m > MAX_KEYS {
        return Err(BuildError::TooManyKeys {
            count: m,
            max: MAX_KEYS,
        });
    }
    if m == 0 {
        return Ok(EMPTY_SLOTS);
    }
    let mut n = (m as f64 / (f64::from(1u32) * LOAD_FACTOR)) as u64 + 1;
    if n.is_multiple_of(2) {
        n += 1;
    }
    while !cmph_prime(n) {
        n += 2;
    }
    u32::try_from(n).map_err(|_| BuildError::TooManyKeys {
        count: m,
        max: MAX_KEYS,
    })
}

/// The bucket count cmph gives `m` keys: ⌊m / 4⌋ + 1.
pub fn bucket_count(m: u64) -> u32 {
    (m / u64::from(KEYS_PER_BUCKET) + 1) as u32
}

/// A CHD_PH function: the seed of its Jenkins hash, its slot count `n` and one
/// displacement per bucket.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChdPh {
    seed: u32,
    n: u32,
    displacements: Vec<u32>,
}

impl ChdPh {
    /// A function from its parts: `n >= 2`, at least one bucket, every displacement below
    /// `u32::MAX` (cmph encodes `d + 1` in a u32).
    pub fn new(seed: u32, n: u32, displacements: Vec<u32>) -> Result<ChdPh, BuildError> {
        let invalid = |detail: String| Err(BuildError::InvalidFunction { detail });
        if n < 2 {
            return invalid(format!("n = {n}; it must be at least 2"));
        }
        if displacements.is_empty() || displacements.len() > u32::MAX as usize {
            return invalid(format!(
                "{} buckets; it must be 1..=u32::MAX",
                displacements.len()
            ));
        }
        if let Some(i) = displacements.iter().position(|&d| d == u32::MAX) {
            return invalid(format!(
                "displacement #{i} is u32::MAX, which cmph cannot encode"
            ));
        }
        Ok(ChdPh {
            seed,
            n,
            displacements,
        })
    }

    /// The seed of the Jenkins hash.
    pub fn seed(&self) -> u32 {
        self.seed
    }
    /// The slot (bin) count: the index has this many entries (`cmph_size`).
    pub fn n(&self) -> u32 {
        self.n
    }
    /// The bucket count.
    pub fn nbuckets(&self) -> u32 {
        self.displacements.len() as u32
    }
    /// One displacement per bucket.
    pub fn displacements(&self) -> &[u32] {
        &self.displacements
    }

    /// The slot of `key` (`chd_ph_search`), in `0..n`. Any key gets one; whether the key is
    /// there is for the index entry to say.
    #[inline]
    pub fn search(&self, key: &[u8]) -> u32 {
        self.slot_of(jenkins(self.seed, key))
    }

    /// [`ChdPh::search`] for a 32-byte key.
    #[inline]
    pub fn search32(&self, key: &[u8; KEY_LEN]) -> u32 {
        self.slot_of(jenkins32(self.seed, key))
    }

    #[inline]
    fn slot_of(&self, [h0, h1, h2]: [u32; 3]) -> u32 {
        let n = u64::from(self.n);
        let g = h0 as usize % self.displacements.len();
        let f = u64::from(h1) % n;
        let h = u64::from(h2) % (n - 1) + 1;
        let d = u64::from(self.displacements[g]);
        ((f + h * (d % n) + d / n) % n) as u32
    }

    /// The function as `cmph_dump` writes it (little-endian u32 fields, spec §5).
    pub fn dump(&self) -> Result<Vec<u8>, BuildError> {
        let mut cs = Vec::new();
        seq::encode(&self.displacements, &mut cs).map_err(|e| BuildError::InvalidFunction {
            detail: format!("the displacements cannot be encoded: {e:?}"),
        })?;
        let mut out = Vec::with_capacity(cs.len() + DUMP_OVERHEAD as usize);
        out.extend_from_slice(ALGO_NAME);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&12u32.to_le_bytes());
        out.extend_from_slice(HASH_NAME);
        out.extend_from_slice(&self.seed.to_le_bytes());
        out.extend_from_slice(&(cs.len() as u32).to_le_bytes());
        out.extend_from_slice(&cs);
        out.extend_from_slice(&self.n.to_le_bytes());
        out.extend_from_slice(&self.nbuckets().to_le_bytes());
        Ok(out)
    }

    /// Parse the dump at the start of `bytes` (found at file offset `at`; trailing bytes
    /// are ignored), within `max_len` bytes for the whole dump and `max_slots` for `n`.
    /// Returns the function and the dump's length.
    ///
    /// Checks every field against the others and that the compressed sequence is exactly
    /// what cmph's encoder makes of the displacements it holds; allocates `4 × nbuckets`
    /// bytes and a copy of the sequence, only after those sizes were checked against the
    /// dump's own length.
    pub fn parse(
        bytes: &[u8],
        at: u64,
        max_len: u64,
        max_slots: u64,
    ) -> Result<(ChdPh, u64), ReadError> {
        let need = |offset: u64, needed: u64| -> Result<(), ReadError> {
            if offset.saturating_add(needed) > bytes.len() as u64 {
                Err(ReadError::Truncated {
                    what: "hash section",
                    offset: at + offset,
                    needed,
                    available: (bytes.len() as u64).saturating_sub(offset),
                })
            } else {
                Ok(())
            }
        };
        let u32_at =
            |i: usize| u32::from_le_bytes([bytes[i], bytes[i + 1], bytes[i + 2], bytes[i + 3]]);
        need(0, 7 + 4 + 4)?;
        if &bytes[..7] != ALGO_NAME {
            return Err(ReadError::UnsupportedHash {
                offset: at,
                found: escape(&bytes[..7]),
                expected: "chd_ph",
            });
        }
        let n = u32_at(7);
        let hs_len = u32_at(11);
        if hs_len == 12u32.swap_bytes() {
            return Err(ReadError::BigEndianDump { offset: at + 11 });
        }
        if hs_len != 12 {
            return Err(ReadError::HashField {
                field: "hash state length",
                offset: at + 11,
                value: u64::from(hs_len),
                expected: "12 (jenkins)".into(),
            });
        }
        need(15, 12 + 4)?;
        if &bytes[15..23] != HASH_NAME {
            return Err(ReadError::UnsupportedHash {
                offset: at + 15,
                found: escape(&bytes[15..23]),
                expected: "jenkins",
            });
        }
        let seed = u32_at(23);
        let cs_len = u64::from(u32_at(27));
        let total = DUMP_OVERHEAD + cs_len;
        if total > max_len {
            return Err(ReadError::BudgetExceeded {
                what: "hash section bytes",
                offset: at + 27,
                value: total,
                limit: max_len,
            });
        }
        need(31, cs_len + 8)?;
        let tail = 31 + cs_len as usize;
        let n2 = u32_at(tail);
        let nbuckets = u32_at(tail + 4);
        if n2 != n {
            return Err(ReadError::HashField {
                field: "n",
                offset: at + tail as u64,
                value: u64::from(n2),
                expected: format!("{n} (the size field at offset {})", at + 7),
            });
        }
        if u64::from(n) > max_slots {
            return Err(ReadError::BudgetExceeded {
                what: "index slots (n)",
                offset: at + 7,
                value: u64::from(n),
                limit: max_slots,
            });
        }
        if n < 2 {
            return Err(ReadError::HashField {
                field: "n",
                offset: at + 7,
                value: u64::from(n),
                expected: "at least 2".into(),
            });
        }
        if nbuckets == 0 || nbuckets > n {
            return Err(ReadError::HashField {
                field: "nbuckets",
                offset: at + tail as u64 + 4,
                value: u64::from(nbuckets),
                expected: format!("1..=n ({n})"),
            });
        }
        let displacements = seq::decode(&bytes[31..tail], nbuckets, at + 31)?;
        Ok((
            ChdPh {
                seed,
                n,
                displacements,
            },
            total,
        ))
    }

    /// Build the function of `keys` as cmph 2.0.2 does with swh-shard's settings, taking
    /// seeds from `seeds`. Keys must be distinct (a repeated key is reported as such).
    ///
    /// For no keys, the function has [`EMPTY_SLOTS`] slots, seed 0 and one bucket with
    /// displacement 0 (cmph itself never returns for zero keys).
    ///
    /// Single-threaded; about 20 bytes of working memory per key. The search visits each
    /// bucket once per probe until it is placed, as cmph does (a few hundred million
    /// visits for ten million keys), each visit costing one bit test in the common case.
    pub fn build(keys: &[[u8; KEY_LEN]], seeds: &SeedPolicy) -> Result<ChdPh, BuildError> {
        let m = keys.len() as u64;
        let n = slot_count(m)?;
        let nbuckets = bucket_count(m);
        if m == 0 {
            return ChdPh::new(0, n, vec![0]);
        }
        let mut rand = GlibcRand::new(1);
        let mut list = match seeds {
            SeedPolicy::Swh => None,
            SeedPolicy::List(v) => Some(v.iter().copied()),
        };
        let mut next_seed = move || match &mut list {
            None => Some(rand.next_u31() % m as u32),
            Some(it) => it.next(),
        };
        let mut b = Builder::new(keys, n, nbuckets);
        let mut tried = 0u64;
        for _search in 0..SEARCH_ITERATIONS {
            // chd_ph_mapping: up to 1000 seeds until no bucket holds two equal (f, h).
            let mut mapped = None;
            for _ in 0..MAPPING_ITERATIONS {
                let Some(seed) = next_seed() else {
                    return Err(BuildError::SeedsExhausted { tried });
                };
                tried += 1;
                if b.map(seed)? {
                    mapped = Some(seed);
                    break;
                }
            }
            let Some(seed) = mapped else {
                return Err(BuildError::SeedsExhausted { tried });
            };
            if let Some(displacements) = b.search() {
                return ChdPh::new(seed, n, displacements);
            }
        }
        Err(BuildError::SeedsExhausted { tried })
    }
}

/// `x mod d` for u32 `x` and a fixed u32 divisor `d > 0`, without a division (Lemire,
/// Kaser and Kurz, "Faster remainder by direct computation", 2019).
#[derive(Debug, Clone, Copy)]
struct FastMod32 {
    d: u64,
    m: u64,
}

impl FastMod32 {
    fn new(d: u32) -> Self {
        FastMod32 {
            d: u64::from(d),
            m: (u64::MAX / u64::from(d)).wrapping_add(1),
        }
    }
    #[inline(always)]
    fn rem(&self, x: u32) -> u32 {
        let low = self.m.wrapping_mul(u64::from(x));
        ((u128::from(low) * u128::from(self.d)) >> 64) as u32
    }
}

/// `x mod n` for u64 `x` and a fixed divisor `n` (2 ≤ n < 2^32), by Barrett reduction.
#[derive(Debug, Clone, Copy)]
struct FastMod64 {
    n: u64,
    m: u64,
}

impl FastMod64 {
    fn new(n: u32) -> Self {
        FastMod64 {
            n: u64::from(n),
            m: u64::MAX / u64::from(n),
        }
    }
    #[inline(always)]
    fn rem(&self, x: u64) -> u64 {
        // q is floor(x / n) or one less, so r < 2n.
        let q = ((u128::from(x) * u128::from(self.m)) >> 64) as u64;
        let r = x - q * self.n;
        if r >= self.n { r - self.n } else { r }
    }
}

/// A key in the mapping step: its bucket `g`, first slot `f`, step `h`, and number.
#[derive(Debug, Clone, Copy, Default)]
struct Item {
    g: u32,
    f: u32,
    h: u32,
    key: u32,
}

/// The working tables of one build.
struct Builder<'k> {
    keys: &'k [[u8; KEY_LEN]],
    n: u32,
    nbuckets: u32,
    /// Bucket b's items are `items[start[b]..start[b + 1]]`, in key order.
    start: Vec<u32>,
    items: Vec<Item>,
    /// Buckets are grouped in this many ranges for sorting (see [`Builder::map`]).
    parts: u64,
}

impl<'k> Builder<'k> {
    fn new(keys: &'k [[u8; KEY_LEN]], n: u32, nbuckets: u32) -> Self {
        Builder {
            keys,
            n,
            nbuckets,
            start: vec![0; nbuckets as usize + 1],
            items: vec![Item::default(); keys.len()],
            parts: (u64::from(nbuckets) / 4096).clamp(1, 1024),
        }
    }

    /// The range of buckets bucket `g` is sorted with; ranges are in bucket order.
    #[inline]
    fn part(&self, g: u32) -> usize {
        (u64::from(g) * self.parts / u64::from(self.nbuckets)) as usize
    }

    /// Hash every key with `seed` and group the keys by bucket. False if a bucket holds two
    /// keys with the same (f, h), which no displacement can separate (then cmph reseeds);
    /// an error if those two keys are equal.
    ///
    /// The keys are sorted by bucket in two stable passes (first into ranges of a few
    /// thousand buckets, then within each range) so that neither pass writes all over a
    /// large table; that is the same order as one counting sort.
    fn map(&mut self, seed: u32) -> Result<bool, BuildError> {
        let by_bucket = FastMod32::new(self.nbuckets);
        let by_n = FastMod32::new(self.n);
        let by_n1 = FastMod32::new(self.n - 1);
        let item = |i: usize, key: &[u8; KEY_LEN]| {
            let [h0, h1, h2] = jenkins32(seed, key);
            Item {
                g: by_bucket.rem(h0),
                f: by_n.rem(h1),
                h: by_n1.rem(h2) + 1,
                key: i as u32,
            }
        };
        let parts = self.parts as usize;
        // Pass 1: count keys per range. Pass 2: hash again and place by range.
        let mut part_start = vec![0usize; parts + 1];
        for (i, key) in self.keys.iter().enumerate() {
            part_start[self.part(item(i, key).g) + 1] += 1;
        }
        for p in 0..parts {
            part_start[p + 1] += part_start[p];
        }
        let mut fill = part_start.clone();
        for (i, key) in self.keys.iter().enumerate() {
            let it = item(i, key);
            let at = &mut fill[self.part(it.g)];
            self.items[*at] = it;
            *at += 1;
        }
        // Pass 3: counting sort by bucket within each range.
        let mut scratch: Vec<Item> = Vec::new();
        let mut b_lo = 0usize;
        for p in 0..parts {
            let region = part_start[p]..part_start[p + 1];
            // The buckets of range p: those g with g * parts / nbuckets == p.
            let b_hi = ((p as u64 + 1) * u64::from(self.nbuckets)).div_ceil(self.parts) as usize;
            let b_hi = b_hi.min(self.nbuckets as usize);
            scratch.clear();
            scratch.extend_from_slice(&self.items[region.clone()]);
            let counts = &mut self.start[b_lo + 1..b_hi + 1];
            counts.iter_mut().for_each(|c| *c = 0);
            for it in &scratch {
                counts[it.g as usize - b_lo] += 1;
            }
            let mut at = region.start as u32;
            self.start[b_lo] = at;
            for b in b_lo..b_hi {
                let c = self.start[b + 1];
                self.start[b + 1] = at;
                at += c;
            }
            // start[b + 1] is now where bucket b's items begin; advance it past them.
            for it in &scratch {
                let slot = &mut self.start[it.g as usize + 1];
                self.items[*slot as usize] = *it;
                *slot += 1;
            }
            b_lo = b_hi;
        }
        let mut ok = true;
        for b in 0..self.nbuckets as usize {
            let items = &self.items[self.start[b] as usize..self.start[b + 1] as usize];
            for (j, x) in items.iter().enumerate() {
                for y in &items[..j] {
                    if x.f == y.f && x.h == y.h {
                        let (a, b) = (y.key.min(x.key) as usize, y.key.max(x.key) as usize);
                        if self.keys[a] == self.keys[b] {
                            return Err(BuildError::DuplicateKey {
                                key: self.keys[a],
                                first: a,
                                second: b,
                            });
                        }
                        ok = false;
                    }
                }
            }
        }
        Ok(ok)
    }

    /// cmph's `place_buckets2`: bucket sizes from the largest down; for each size, probe
    /// numbers 0, 1, 2, … in turn, and at each one every still unplaced bucket of that size
    /// (in bucket order) takes it if all its slots are free. A bucket's displacement is the
    /// probe number that placed it. `None` when a size class needs `MAX_PROBES` probes.
    ///
    /// Probe `p = p0 + p1·n` puts an item at `(f + h·p0 + p1) mod n`. The waiting buckets
    /// of a size are one flat array scanned in order (bucket number, first item's slot at
    /// the current probe, then each item's f and h); the first slot advances by the first
    /// item's h per probe (recomputed when p0 wraps), so a probe whose first slot is taken,
    /// the common case, costs an addition and one bit test.
    fn search(&self) -> Option<Vec<u32>> {
        let n = self.n;
        let n64 = u64::from(n);
        let modn = FastMod64::new(n);
        let nb = self.nbuckets as usize;
        let size = |b: usize| (self.start[b + 1] - self.start[b]) as usize;
        let max_size = (0..nb).map(size).max().unwrap_or(0);
        let mut count = vec![0usize; max_size + 1];
        for b in 0..nb {
            count[size(b)] += 1;
        }
        let mut occupied = vec![0u64; (n as usize).div_ceil(64)];
        let mut disp = vec![0u32; nb];
        let mut taken = Vec::with_capacity(max_size);
        for s in (1..=max_size).rev() {
            // Per waiting bucket: (first item's slot at this probe, its h), read every
            // probe; and (bucket number, then f and h of each item), read when that slot
            // is free.
            let stride = 1 + 2 * s;
            let mut hot: Vec<(u32, u32)> = Vec::with_capacity(count[s]);
            let mut cold: Vec<u32> = Vec::with_capacity(count[s] * stride);
            for b in (0..nb).filter(|&b| size(b) == s) {
                let items = &self.items[self.start[b] as usize..][..s];
                hot.push((items[0].f, items[0].h));
                cold.push(b as u32);
                for it in items {
                    cold.extend_from_slice(&[it.f, it.h]);
                }
            }
            let (mut p0, mut p1, mut probe) = (0u32, 0u32, 0u32);
            // Placed buckets are marked and squeezed out once they are a quarter of the
            // array (order kept), rather than moving the rest after each one.
            let mut live = hot.len();
            while live > 0 {
                let mut placed = 0;
                for (w, rec) in hot.iter_mut().zip(cold.chunks_exact(stride)) {
                    if w.0 == PLACED {
                        continue;
                    }
                    let slot = w.0 as usize;
                    if occupied[slot >> 6] & (1u64 << (slot & 63)) == 0
                        && place(&rec[1..], p0, p1, &modn, &mut occupied, &mut taken)
                    {
                        disp[rec[0] as usize] = probe;
                        w.0 = PLACED;
                        placed += 1;
                        continue;
                    }
                    let next = u64::from(w.0) + u64::from(w.1);
                    w.0 = if next >= n64 { next - n64 } else { next } as u32;
                }
                live -= placed;
                if live > 0 && (hot.len() - live) * 4 >= hot.len() {
                    let mut kept = 0;
                    for r in 0..hot.len() {
                        if hot[r].0 != PLACED {
                            hot[kept] = hot[r];
                            for k in 0..stride {
                                cold[kept * stride + k] = cold[r * stride + k];
                            }
                            kept += 1;
                        }
                    }
                    hot.truncate(kept);
                    cold.truncate(kept * stride);
                }
                p0 += 1;
                if p0 >= n {
                    p0 -= n;
                    p1 += 1;
                    for (w, rec) in hot.iter_mut().zip(cold.chunks_exact(stride)) {
                        if w.0 != PLACED {
                            w.0 = modn.rem(u64::from(rec[1]) + u64::from(p1)) as u32;
                        }
                    }
                }
                probe += 1;
                // As cmph checks it: after every sweep, even the one that placed the last.
                if probe >= MAX_PROBES || p1 >= n {
                    return None;
                }
            }
        }
        Some(disp)
    }
}

/// Marks a placed bucket in [`Builder::search`]'s array (slots are below it).
const PLACED: u32 = u32::MAX;

/// Try the bucket whose items are `fh` (f, h pairs) at probe (p0, p1): mark its slots taken
/// if all are free (and distinct), else leave `occupied` as it was.
#[inline]
fn place(
    fh: &[u32],
    p0: u32,
    p1: u32,
    modn: &FastMod64,
    occupied: &mut [u64],
    taken: &mut Vec<usize>,
) -> bool {
    taken.clear();
    for it in fh.chunks_exact(2) {
        let pos =
            modn.rem(u64::from(it[0]) + u64::from(it[1]) * u64::from(p0) + u64::from(p1)) as usize;
        let (w, bit) = (pos >> 6, 1u64 << (pos & 63));
        if occupied[w] & bit != 0 {
            for &p in taken.iter() {
                occupied[p >> 6] &= !(1u64 << (p & 63));
            }
            return false;
        }
        occupied[w] |= bit;
        taken.push(pos);
    }
    true
}

/// Printable form of a name field for error messages.
fn escape(b: &[u8]) -> String {
    if b.iter().all(|c| c.is_ascii_graphic() || *c == 0) {
        String::from_utf8_lossy(b)
            .trim_end_matches('\0')
            .to_string()
    } else {
        format!("0x{}", hex(b))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fast_remainders_agree_with_division() {
        let mut x = 0x0123_4567_89ab_cdefu64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        for d in [
            1u32,
            2,
            3,
            10,
            11,
            1013,
            65_536,
            10_101_023,
            0x7fff_ffff,
            u32::MAX - 4,
            u32::MAX,
        ] {
            let f32 = FastMod32::new(d);
            for v in [0u32, 1, d - 1, d, d.wrapping_add(1), u32::MAX] {
                assert_eq!(f32.rem(v), v % d, "{v} mod {d}");
            }
            for _ in 0..10_000 {
                let v = next() as u32;
                assert_eq!(f32.rem(v), v % d, "{v} mod {d}");
            }
            if d >= 2 {
                let f64 = FastMod64::new(d);
                let big = (u64::from(d) - 1) * (u64::from(d) - 1) + 2 * (u64::from(d) - 1);
                for v in [0u64, 1, u64::from(d), big, u64::MAX] {
                    assert_eq!(f64.rem(v), v % u64::from(d), "{v} mod {d}");
                }
                for _ in 0..10_000 {
                    let v = next();
                    assert_eq!(f64.rem(v), v % u64::from(d), "{v} mod {d}");
                }
            }
        }
    }

    #[test]
    fn glibc_rand_from_srand_1() {
        let mut r = GlibcRand::new(1);
        let first: Vec<u32> = (0..5).map(|_| r.next_u31()).collect();
        assert_eq!(
            first,
            [1804289383, 846930886, 1681692777, 1714636915, 1957747793]
        );
        // srand(0) is srand(1).
        assert_eq!(GlibcRand::new(0).next_u31(), 1804289383);
    }

    #[test]
    fn primes_as_cmph_sees_them() {
        for (n, p) in [
            (3, false),
            (5, false),
            (7, false),
            (9, false),
            (11, true),
            (13, true),
        ] {
            assert_eq!(cmph_prime(n), p, "{n}");
        }
        assert!(!cmph_prime(61), "61 fails its own witness");
        assert!(cmph_prime(101021));
        assert!(!cmph_prime(1011));
        // Agrees with trial division elsewhere (odd n above 7, n != 61).
        for n in (9..20_000u64).step_by(2) {
            let prime = (2..).take_while(|d| d * d <= n).all(|d| n % d != 0);
            assert_eq!(cmph_prime(n), prime && n != 61, "{n}");
        }
    }

    /// Spec §8's examples of n.
    #[test]
    fn slot_counts() {
        for m in 0..=10 {
            assert_eq!(slot_count(m).unwrap(), 11, "m = {m}");
        }
        assert_eq!(slot_count(11).unwrap(), 13);
        assert_eq!(slot_count(100).unwrap(), 103);
        assert_eq!(slot_count(129).unwrap(), 131);
        assert_eq!(slot_count(1000).unwrap(), 1013);
        assert_eq!(slot_count(100_000).unwrap(), 101_021);
        assert!(slot_count(MAX_KEYS + 1).is_err());
        assert!(slot_count(MAX_KEYS).unwrap() > 4_000_000_000);
        assert_eq!(bucket_count(0), 1);
        assert_eq!(bucket_count(3), 1);
        assert_eq!(bucket_count(1000), 251);
    }

    /// Spec §7's worked example: sha256("hello") in three.shard's function.
    #[test]
    fn worked_lookup() {
        let key: [u8; 32] = [
            0x2c, 0xf2, 0x4d, 0xba, 0x5f, 0xb0, 0xa3, 0x0e, 0x26, 0xe8, 0x3b, 0x2a, 0xc5, 0xb9,
            0xe2, 0x9e, 0x1b, 0x16, 0x1e, 0x5c, 0x1f, 0xa7, 0x42, 0x5e, 0x73, 0x04, 0x33, 0x62,
            0x93, 0x8b, 0x98, 0x24,
        ];
        assert_eq!(jenkins32(1, &key), [0xf4c5a9ae, 0x7e47f7ae, 0x2888b286]);
        let f = ChdPh::new(1, 11, vec![1]).unwrap();
        assert_eq!(f.search32(&key), 4);
        assert_eq!(f.search(&key), 4);
    }

    #[test]
    fn builds_are_perfect_and_deterministic() {
        for m in [1usize, 2, 3, 10, 11, 100, 129, 1000, 5000] {
            let keys: Vec<[u8; 32]> = (0..m)
                .map(|i| {
                    let mut k = [0u8; 32];
                    k[..8].copy_from_slice(
                        &(i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes(),
                    );
                    k[31] = 1;
                    k
                })
                .collect();
            let f = ChdPh::build(&keys, &SeedPolicy::Swh).unwrap();
            assert_eq!(f.n(), slot_count(m as u64).unwrap());
            assert_eq!(f.nbuckets(), bucket_count(m as u64));
            let mut seen = vec![false; f.n() as usize];
            for k in &keys {
                let s = f.search32(k) as usize;
                assert!(!seen[s], "m = {m}: two keys in slot {s}");
                seen[s] = true;
            }
            assert_eq!(ChdPh::build(&keys, &SeedPolicy::Swh).unwrap(), f);
            let again = ChdPh::build(&keys, &SeedPolicy::List(vec![f.seed()])).unwrap();
            assert_eq!(again, f);
            let dump = f.dump().unwrap();
            let (back, len) = ChdPh::parse(&dump, 0, u64::MAX, u64::MAX).unwrap();
            assert_eq!(back, f);
            assert_eq!(len, dump.len() as u64);
        }
    }

    #[test]
    fn duplicates_and_empty_lists() {
        let keys = [[1u8; 32], [2; 32], [1; 32]];
        assert_eq!(
            ChdPh::build(&keys, &SeedPolicy::Swh),
            Err(BuildError::DuplicateKey {
                key: [1; 32],
                first: 0,
                second: 2
            })
        );
        assert_eq!(
            ChdPh::build(&keys[..2], &SeedPolicy::List(vec![])),
            Err(BuildError::SeedsExhausted { tried: 0 })
        );
        let empty = ChdPh::build(&[], &SeedPolicy::Swh).unwrap();
        assert_eq!(
            (empty.seed(), empty.n(), empty.displacements()),
            (0, 11, &[0u32][..])
        );
    }
}
