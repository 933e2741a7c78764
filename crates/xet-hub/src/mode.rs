//! Which files of an upload go to Xet (`lfs`) and which inline (`regular`): the rule
//! `preupload` answers with. The Hub's own rule is not published; this one gives the
//! answers observed on the real Hub (small text inline, binaries and large files to Xet)
//! and is the same for every client.
//!
//! A file is `lfs` when any of these holds, else `regular`:
//! 1. it is larger than [`REGULAR_MAX_SIZE`] (10 MiB);
//! 2. its first 512 bytes (the `sample`) contain a NUL byte (git's test for binary);
//! 3. its name matches a pattern of the Hub's default `.gitattributes`
//!    ([`LFS_SUFFIXES`], `*tfevents*`, anything under `saved_model/`).
//!
//! An empty file is always `regular` (clients force that too).

use crate::api::UploadMode;

/// Files above this size always go to Xet.
pub const REGULAR_MAX_SIZE: u64 = 10 * 1024 * 1024;

/// Name endings the Hub's default `.gitattributes` tracks with LFS.
pub const LFS_SUFFIXES: &[&str] = &[
    ".7z",
    ".arrow",
    ".bin",
    ".bz2",
    ".ckpt",
    ".ftz",
    ".gz",
    ".h5",
    ".joblib",
    ".mlmodel",
    ".model",
    ".msgpack",
    ".npy",
    ".npz",
    ".onnx",
    ".ot",
    ".parquet",
    ".pb",
    ".pickle",
    ".pkl",
    ".pt",
    ".pth",
    ".rar",
    ".safetensors",
    ".tar",
    ".tflite",
    ".tgz",
    ".wasm",
    ".xz",
    ".zip",
    ".zst",
    ".gguf",
];

/// The mode for a file at `path` of `size` bytes whose first bytes are `sample`.
pub fn upload_mode(path: &str, size: u64, sample: &[u8]) -> UploadMode {
    if size == 0 {
        return UploadMode::Regular;
    }
    let name = path.rsplit('/').next().unwrap_or(path).to_ascii_lowercase();
    let by_name = LFS_SUFFIXES.iter().any(|s| name.ends_with(s))
        || name.contains(".tar.")
        || name.contains(".lfs.")
        || name.contains("tfevents")
        || path.starts_with("saved_model/")
        || path.contains("/saved_model/");
    // Only the sample's first 512 bytes count, whatever a client sends.
    let binary = sample.iter().take(512).any(|&b| b == 0);
    if size > REGULAR_MAX_SIZE || binary || by_name {
        UploadMode::Lfs
    } else {
        UploadMode::Regular
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rule() {
        assert_eq!(upload_mode("README.md", 186, b"# hi"), UploadMode::Regular);
        assert_eq!(upload_mode("config.json", 2000, b"{}"), UploadMode::Regular);
        assert_eq!(
            upload_mode("a/model.safetensors", 10, b"x"),
            UploadMode::Lfs
        );
        assert_eq!(upload_mode("w.BIN", 10, b"x"), UploadMode::Lfs);
        assert_eq!(upload_mode("data.txt", 100, b"a\0b"), UploadMode::Lfs);
        assert_eq!(
            upload_mode("big.txt", REGULAR_MAX_SIZE + 1, b"a"),
            UploadMode::Lfs
        );
        assert_eq!(
            upload_mode("big.txt", REGULAR_MAX_SIZE, b"a"),
            UploadMode::Regular
        );
        assert_eq!(upload_mode("empty.bin", 0, b""), UploadMode::Regular);
        assert_eq!(upload_mode("x.tar.gz", 5, b"a"), UploadMode::Lfs);
        let mut long = vec![b'a'; 600];
        long[550] = 0;
        assert_eq!(upload_mode("t.txt", 600, &long), UploadMode::Regular);
    }
}
