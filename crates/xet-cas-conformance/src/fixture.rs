//! Deterministic test data: files, the xorbs holding their chunks and the shards
//! registering them, built the way an uploading client does.

use std::collections::HashMap;
use std::sync::OnceLock;

use sha2::Digest;
use xet_hash::MerkleHash;

use xet_cas::ChunkRange;
use xet_store::format::{ShardChunk, ShardContent, ShardFile, ShardTerm, ShardXorb};

use crate::format::{self, BuiltXorb};

pub(crate) struct FixtureFile {
    pub name: &'static str,
    pub data: Vec<u8>,
    pub hash: MerkleHash,
    /// `(offset, len, hash)` of each chunk, in file order.
    pub chunks: Vec<(u64, u64, MerkleHash)>,
    pub shard: ShardFile,
}

pub(crate) struct Fixture {
    pub files: Vec<FixtureFile>,
    pub xorbs: Vec<BuiltXorb>,
    /// Valid shards, in upload order: the first registers `random`, the second the rest
    /// (and references the first shard's xorb without listing it, like hf_xet after a
    /// dedup hit).
    pub shards: Vec<ShardContent>,
}

impl Fixture {
    pub fn file(&self, name: &str) -> &FixtureFile {
        self.files
            .iter()
            .find(|f| f.name == name)
            .unwrap_or_else(|| panic!("no fixture file {name}"))
    }

    pub fn xorb_index(&self, h: &MerkleHash) -> Option<usize> {
        self.xorbs.iter().position(|x| x.hash == *h)
    }

    pub fn shard_bytes(&self, i: usize) -> Vec<u8> {
        format::upload_shard_bytes(&self.shards[i]).expect("fixture shard serializes")
    }
}

/// xorshift64* PRNG: the fixtures must not depend on any external generator.
struct Rng(u64);

impl Rng {
    fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
}

pub(crate) fn random_bytes(len: usize, seed: u64) -> Vec<u8> {
    let mut r = Rng::new(seed);
    let mut v = Vec::with_capacity(len + 8);
    while v.len() < len {
        v.extend_from_slice(&r.next().to_le_bytes());
    }
    v.truncate(len);
    v
}

fn text_bytes(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "chunk", "xorb", "shard", "term", "hash", "merkle", "file", "the", "of", "and", "model",
        "byte",
    ];
    let mut r = Rng::new(seed);
    let mut v = Vec::with_capacity(len + 16);
    while v.len() < len {
        v.extend_from_slice(WORDS[(r.next() % WORDS.len() as u64) as usize].as_bytes());
        v.push(if r.next().is_multiple_of(12) {
            b'\n'
        } else {
            b' '
        });
    }
    v.truncate(len);
    v
}

/// A file being built: name, data, `(offset, len, hash)` of each chunk, and where each
/// chunk was placed (`(xorb index, chunk index)`).
type PendingFile = (
    &'static str,
    Vec<u8>,
    Vec<(u64, u64, MerkleHash)>,
    Vec<(usize, u32)>,
);

/// Builds xorbs and file terms like an uploader: chunks already placed are reused
/// (session dedup), new chunks go to the open xorb.
struct Builder {
    xorbs: Vec<BuiltXorb>,
    open: Vec<Vec<u8>>,
    placed: HashMap<MerkleHash, (usize, u32)>,
    files: Vec<PendingFile>,
}

impl Builder {
    fn close(&mut self) {
        if self.open.is_empty() {
            return;
        }
        let chunks: Vec<&[u8]> = self.open.iter().map(|c| c.as_slice()).collect();
        self.xorbs
            .push(format::build_xorb(&chunks).expect("fixture xorb builds"));
        self.open.clear();
    }

    /// Add a file; with `close_after = Some(n)` the open xorb is closed after the file's
    /// `n`-th new chunk, so the file spans two xorbs.
    fn add(&mut self, name: &'static str, data: Vec<u8>, close_after: Option<usize>) {
        let mut chunks = Vec::new();
        let mut placement = Vec::new();
        let mut new_chunks = 0;
        for (off, len) in format::chunk_spans(&data) {
            let bytes = &data[off..off + len];
            let h = xet_hash::chunk_hash(bytes);
            chunks.push((off as u64, len as u64, h));
            let at = match self.placed.get(&h) {
                Some(&p) => p,
                None => {
                    let p = (self.xorbs.len(), self.open.len() as u32);
                    self.open.push(bytes.to_vec());
                    self.placed.insert(h, p);
                    new_chunks += 1;
                    if close_after == Some(new_chunks) {
                        self.close();
                    }
                    p
                }
            };
            placement.push(at);
        }
        self.files.push((name, data, chunks, placement));
    }

    fn finish(self) -> Fixture {
        let Fixture { files, xorbs, .. } = self.finish_all();
        let first = shard_of(&files[..1], &xorbs[..1]);
        let second = shard_of(&files[1..], &xorbs[1..]);
        Fixture {
            files,
            xorbs,
            shards: vec![first, second],
        }
    }

    /// The files and xorbs, no shards yet.
    fn finish_all(mut self) -> Fixture {
        self.close();
        let xorbs = self.xorbs;
        let mut files = Vec::new();
        for (name, data, chunks, placement) in self.files {
            let mut terms: Vec<ShardTerm> = Vec::new();
            for (&(_, len, _), &(xi, ci)) in chunks.iter().zip(&placement) {
                let xh = xorbs[xi].hash;
                match terms.last_mut() {
                    Some(t) if t.xorb == xh && t.chunks.end == ci => {
                        t.chunks.end += 1;
                        t.unpacked += len;
                    }
                    _ => terms.push(ShardTerm {
                        xorb: xh,
                        chunks: ChunkRange::new(ci, ci + 1),
                        unpacked: len,
                    }),
                }
            }
            let verification = terms
                .iter()
                .map(|t| {
                    let x = &xorbs[xorbs
                        .iter()
                        .position(|x| x.hash == t.xorb)
                        .expect("term xorb")];
                    let hashes: Vec<MerkleHash> = x.chunks
                        [t.chunks.start as usize..t.chunks.end as usize]
                        .iter()
                        .map(|c| c.0)
                        .collect();
                    xet_hash::verification_hash(&hashes)
                })
                .collect();
            let list: Vec<(MerkleHash, u64)> = chunks.iter().map(|c| (c.2, c.1)).collect();
            let hash = xet_hash::file_hash(&list);
            let sha256: [u8; 32] = if data.is_empty() {
                [0; 32]
            } else {
                sha2::Sha256::digest(&data).into()
            };
            let shard = ShardFile {
                hash,
                terms,
                verification: Some(verification),
                sha256: Some(sha256),
            };
            files.push(FixtureFile {
                name,
                data,
                hash,
                chunks,
                shard,
            });
        }
        Fixture {
            files,
            xorbs,
            shards: Vec::new(),
        }
    }
}

/// A shard registering `files` and listing `xorbs`, in the order a shard keeps them.
fn shard_of(files: &[FixtureFile], xorbs: &[BuiltXorb]) -> ShardContent {
    let cas = |x: &BuiltXorb| {
        let mut pos = 0;
        let chunks = x
            .chunks
            .iter()
            .map(|&(hash, len)| {
                let c = ShardChunk {
                    hash,
                    byte_range_start: pos,
                    unpacked: len,
                };
                pos += len;
                c
            })
            .collect();
        ShardXorb {
            hash: x.hash,
            num_bytes_in_cas: pos,
            num_bytes_on_disk: 0,
            chunks,
        }
    };
    let order = |h: &MerkleHash| [h.word(0), h.word(1), h.word(2), h.word(3)];
    let mut s = ShardContent {
        files: files.iter().map(|f| f.shard.clone()).collect(),
        xorbs: xorbs.iter().map(cas).collect(),
    };
    s.files.sort_by_key(|f| order(&f.hash));
    s.xorbs.sort_by_key(|x| order(&x.hash));
    s
}

/// What a client uploads for some files: their xorbs and one shard registering them.
pub struct Upload {
    pub xorbs: Vec<BuiltXorb>,
    /// The shard, as uploaded.
    pub shard: Vec<u8>,
    /// Each file's hash, in the order given.
    pub files: Vec<MerkleHash>,
}

/// The upload of `files`: each file's new chunks in xorbs of its own (a chunk an
/// earlier file of the list has is reused), one shard for all.
pub fn upload_of(files: &[Vec<u8>]) -> Upload {
    let mut b = Builder {
        xorbs: Vec::new(),
        open: Vec::new(),
        placed: HashMap::new(),
        files: Vec::new(),
    };
    for data in files {
        b.add("file", data.clone(), None);
        b.close();
    }
    let f = b.finish_all();
    let content = shard_of(&f.files, &f.xorbs);
    Upload {
        shard: format::upload_shard_bytes(&content).expect("an upload's shard serializes"),
        files: f.files.iter().map(|x| x.hash).collect(),
        xorbs: f.xorbs,
    }
}

fn build() -> Fixture {
    let mut b = Builder {
        xorbs: Vec::new(),
        open: Vec::new(),
        placed: HashMap::new(),
        files: Vec::new(),
    };
    let random = random_bytes(300_000, 1);
    b.add("random", random.clone(), None);
    b.close(); // xorb 0: `random`
    let mut shared = random[..180_000].to_vec();
    shared.extend(random_bytes(150_000, 2));
    b.add("shares_random", shared, None); // reuses xorb 0's leading chunks, new ones in xorb 1
    b.add("text_two_xorbs", text_bytes(420_000, 3), Some(3)); // xorb 1, then xorb 2
    b.add("zeros", vec![0; 300_000], None); // one 128 KiB zero chunk repeated: overlapping terms
    b.add("small", random_bytes(5_000, 4), None);
    b.add("one_byte", vec![0x42], None);
    b.add("empty", Vec::new(), None);
    let f = b.finish();
    debug_assert_eq!(f.xorbs.len(), 3);
    f
}

pub(crate) fn fixture() -> &'static Fixture {
    static F: OnceLock<Fixture> = OnceLock::new();
    F.get_or_init(build)
}
