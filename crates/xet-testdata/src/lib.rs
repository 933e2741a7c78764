//! Deterministic test corpora and the golden vectors generated from them with the
//! reference client (`cargo xtask vectors`). Inputs are regenerated from a seeded PRNG,
//! so only the small expected-output files are committed.

use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::sync::OnceLock;

pub mod browser;
pub mod hub;
pub mod proxy;
mod s3;
pub mod swh;
mod venv;
pub use s3::{
    S3_REGION, S3Server, SEAWEEDFS_VERSION, private_s3, seaweedfs_requirement, shared_s3,
    weed_binary,
};

/// What a corpus file contains.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// All zero bytes: forces max-size chunks and repeated identical chunks.
    Zeros,
    /// Pseudo-random bytes: incompressible, many content-defined boundaries.
    Random,
    /// ASCII words: LZ4 compresses it.
    Text,
    /// Little-endian float32 values of a smooth signal: ByteGrouping4LZ4 wins.
    Float32,
    /// `Random` with `INSERT_LEN` other bytes inserted at the middle (seeded like `Random`).
    RandomWithInsertion,
}

pub const INSERT_LEN: usize = 1000;

/// One input of the golden corpus.
#[derive(Debug, Clone, Copy)]
pub struct CorpusFile {
    pub name: &'static str,
    pub kind: Kind,
    /// Length before any insertion.
    pub size: usize,
    pub seed: u64,
}

impl CorpusFile {
    pub fn bytes(&self) -> Vec<u8> {
        generate(self.kind, self.size, self.seed)
    }
}

const KIB: usize = 1024;
const MIB: usize = 1024 * 1024;

/// The golden corpus: sizes on every boundary of the chunker (min 8 KiB, max 128 KiB),
/// each compression scheme, and two files that differ by one insertion.
pub fn corpus() -> Vec<CorpusFile> {
    use Kind::*;
    let f = |name, kind, size, seed| CorpusFile {
        name,
        kind,
        size,
        seed,
    };
    vec![
        f("empty", Random, 0, 1),
        f("one_byte", Random, 1, 2),
        f("random_8191", Random, 8 * KIB - 1, 3),
        f("random_8192", Random, 8 * KIB, 4),
        f("random_8193", Random, 8 * KIB + 1, 5),
        f("random_131071", Random, 128 * KIB - 1, 6),
        f("random_131072", Random, 128 * KIB, 7),
        f("random_131073", Random, 128 * KIB + 1, 8),
        f("zeros_8191", Zeros, 8 * KIB - 1, 0),
        f("zeros_131073", Zeros, 128 * KIB + 1, 0),
        f("zeros_1m", Zeros, MIB, 0),
        f("text_300k", Text, 300 * KIB + 7, 9),
        f("float32_1m", Float32, MIB, 10),
        f("random_5m", Random, 5 * MIB + 3, 11),
        f("insert_base_3m", Random, 3 * MIB, 12),
        f("insert_edited_3m", RandomWithInsertion, 3 * MIB, 12),
    ]
}

/// The small subset whose reference xorbs and shards are committed as artifacts
/// (one xorb exercising all three compression schemes, plus an empty file).
pub fn artifact_corpus() -> Vec<CorpusFile> {
    use Kind::*;
    let f = |name, kind, size, seed| CorpusFile {
        name,
        kind,
        size,
        seed,
    };
    vec![
        f("art_empty", Random, 0, 100),
        f("art_random_20k", Random, 20 * KIB, 101),
        f("art_text_200k", Text, 200 * KIB, 102),
        f("art_float32_256k", Float32, 256 * KIB, 103),
    ]
}

/// SplitMix64: tiny, fast, and easy to reproduce anywhere.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    pub fn fill(&mut self, out: &mut [u8]) {
        let mut it = out.chunks_exact_mut(8);
        for c in &mut it {
            c.copy_from_slice(&self.next_u64().to_le_bytes());
        }
        let rem = it.into_remainder();
        if !rem.is_empty() {
            let v = self.next_u64().to_le_bytes();
            let n = rem.len();
            rem.copy_from_slice(&v[..n]);
        }
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

const WORDS: &[&str] = &[
    "chunk",
    "xorb",
    "shard",
    "term",
    "hash",
    "merkle",
    "file",
    "content",
    "defined",
    "storage",
    "the",
    "a",
    "of",
    "and",
    "to",
    "in",
    "model",
    "dataset",
    "tensor",
    "weights",
    "layer",
    "attention",
    "upload",
    "download",
    "reconstruction",
    "dedup",
    "server",
    "client",
    "byte",
];

/// Generate `size` bytes of `kind` from `seed` (for `RandomWithInsertion`, `size + INSERT_LEN`).
pub fn generate(kind: Kind, size: usize, seed: u64) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    match kind {
        Kind::Zeros => vec![0u8; size],
        Kind::Random => {
            let mut v = vec![0u8; size];
            rng.fill(&mut v);
            v
        }
        Kind::RandomWithInsertion => {
            let base = generate(Kind::Random, size, seed);
            let mut ins = vec![0u8; INSERT_LEN];
            Rng::new(seed ^ 0xA5A5_A5A5).fill(&mut ins);
            let mid = size / 2;
            let mut v = Vec::with_capacity(size + INSERT_LEN);
            v.extend_from_slice(&base[..mid]);
            v.extend_from_slice(&ins);
            v.extend_from_slice(&base[mid..]);
            v
        }
        Kind::Text => {
            let mut v = Vec::with_capacity(size + 32);
            let mut col = 0;
            while v.len() < size {
                let w = WORDS[rng.below(WORDS.len() as u64) as usize];
                v.extend_from_slice(w.as_bytes());
                col += w.len() + 1;
                if col > 72 {
                    v.push(b'\n');
                    col = 0;
                } else {
                    v.push(b' ');
                }
            }
            v.truncate(size);
            v
        }
        Kind::Float32 => {
            // A slowly varying signal plus small noise: high bytes repeat, low bytes vary.
            let mut v = Vec::with_capacity(size + 4);
            let mut i = 0u64;
            while v.len() < size {
                let noise = (rng.below(1000) as f32) * 1e-6;
                let x = ((i as f32) * 0.001).sin() * 0.5 + noise;
                v.extend_from_slice(&x.to_le_bytes());
                i += 1;
            }
            v.truncate(size);
            v
        }
    }
}

/// `tests/vectors` at the workspace root.
pub fn vectors_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../tests/vectors")
}

/// One chunk as the reference cut and hashed it.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GoldenChunk {
    pub offset: u64,
    pub len: u64,
    /// Hash string form.
    pub hash: String,
}

/// What the reference computed for one corpus file.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct GoldenFile {
    pub name: String,
    pub size: u64,
    /// File hash, hash string form.
    pub hash: String,
    /// Plain sha256 hex.
    pub sha256: String,
    pub chunks: Vec<GoldenChunk>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct GoldenSet {
    pub reference: String,
    pub files: Vec<GoldenFile>,
}

/// Load `tests/vectors/files.json` and pair each entry with its corpus input.
pub fn golden_files() -> Vec<(CorpusFile, GoldenFile)> {
    let path = vectors_dir().join("files.json");
    let text = std::fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!(
            "reading {}: {e} (regenerate with `cargo xtask vectors`)",
            path.display()
        )
    });
    let set: GoldenSet = serde_json::from_str(&text).expect("files.json parses");
    let all: Vec<CorpusFile> = corpus().into_iter().chain(artifact_corpus()).collect();
    set.files
        .into_iter()
        .map(|g| {
            let c = *all
                .iter()
                .find(|c| c.name == g.name)
                .unwrap_or_else(|| panic!("{} not in corpus", g.name));
            (c, g)
        })
        .collect()
}

/// Reference-written artifacts: `tests/vectors/ref/{xorbs,shards,shard-cache}/…`.
pub fn reference_artifacts(sub: &str) -> Vec<PathBuf> {
    let dir = vectors_dir().join("ref").join(sub);
    let mut v: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap_or_else(|e| panic!("reading {}: {e}", dir.display()))
        .map(|e| e.expect("dir entry").path())
        .filter(|p| !p.to_string_lossy().ends_with(".tagset"))
        .collect();
    v.sort();
    v
}

/// The reference client version the interop tests and vectors use.
pub const HF_XET_VERSION: &str = "1.8.0";

/// A Python interpreter with the reference client `hf-xet` [`HF_XET_VERSION`]:
/// `$XET_REF_PYTHON` if it has it, else `target/refvenv/bin/python`, the test virtualenv,
/// created with `python3 -m venv` and given the package with pip if missing (also when
/// `$XET_REF_PYTHON` names that interpreter, as `cargo xtask test` sets it; any other
/// `$XET_REF_PYTHON` without the package is an error, nothing is installed into it). Every
/// Python peer of the tests ([`hub::hub_python`], [`swh::swh_python`], [`weed_binary`])
/// comes from the same virtualenv the same way. Found (or installed) once per process; an
/// install holds `target/refvenv.lock`, so test processes running at once do not run pip
/// together.
pub fn reference_python() -> Result<PathBuf, String> {
    static PYTHON: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    PYTHON
        .get_or_init(|| {
            venv::python_with(&venv::Pins {
                packages: &[("hf-xet", HF_XET_VERSION)],
                imports: &[],
            })
            .map(|found| found.python)
        })
        .clone()
}

/// An `io::Write` into memory that tests can clone, hand out (as a download's writer,
/// a log's output) and read back.
#[derive(Clone, Default)]
pub struct SharedBuf(std::sync::Arc<std::sync::Mutex<Vec<u8>>>);

impl SharedBuf {
    /// Everything written so far.
    pub fn contents(&self) -> Vec<u8> {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

impl std::io::Write for SharedBuf {
    fn write(&mut self, b: &[u8]) -> std::io::Result<usize> {
        self.0
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .extend_from_slice(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generators_are_deterministic_and_sized() {
        for c in corpus().into_iter().chain(artifact_corpus()) {
            let a = c.bytes();
            let extra = if c.kind == Kind::RandomWithInsertion {
                INSERT_LEN
            } else {
                0
            };
            assert_eq!(a.len(), c.size + extra, "{}", c.name);
            if c.size <= 200_000 {
                assert_eq!(a, c.bytes());
            }
        }
    }

    #[test]
    fn insertion_shares_prefix_and_suffix() {
        let base = generate(Kind::Random, 10_000, 7);
        let ed = generate(Kind::RandomWithInsertion, 10_000, 7);
        assert_eq!(&base[..5000], &ed[..5000]);
        assert_eq!(&base[5000..], &ed[5000 + INSERT_LEN..]);
    }
}
