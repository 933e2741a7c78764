//! An opened bundle: the file's bytes (mapped), its manifest, and where each object lies.

use std::collections::HashMap;
use std::io::Read;
use std::ops::Range;
use std::path::{Path, PathBuf};

use bytes::Bytes;
use xet_hash::MerkleHash;
use xet_swh::{ReadLimits, ShardReader};

use crate::{BundleError, Kind, MANIFEST_KEY, Manifest, ManifestError};

/// The budget of one [`Bundle::open`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpenLimits {
    /// For the SWH read shard: file size, object and slot counts, hash section size.
    pub swh: ReadLimits,
    /// Largest manifest accepted (a few hundred bytes per file and per object).
    pub max_manifest_bytes: u64,
}

impl Default for OpenLimits {
    /// `xet-swh`'s defaults, and a manifest of at most 256 MiB (about a million files).
    fn default() -> Self {
        OpenLimits {
            swh: ReadLimits::default(),
            max_manifest_bytes: 256 << 20,
        }
    }
}

/// Whether `path` is a regular file that starts with the SWH read shard's magic: what
/// `--store PATH` takes for a bundle rather than a store directory.
pub fn is_bundle(path: &Path) -> bool {
    let Ok(mut f) = std::fs::File::open(path) else {
        return false;
    };
    if !f.metadata().is_ok_and(|m| m.is_file()) {
        return false;
    }
    let mut magic = [0u8; xet_swh::MAGIC.len()];
    f.read_exact(&mut magic).is_ok() && &magic == xet_swh::MAGIC
}

/// A bundle whose structure and manifest were checked by [`Bundle::open`]. Objects are
/// slices of the file's bytes (mapped when the file is large), handed out without a copy.
#[derive(Debug)]
pub struct Bundle {
    path: PathBuf,
    data: Bytes,
    manifest: Manifest,
    /// Every listed object: its kind and its bytes within `data`.
    objects: HashMap<MerkleHash, (Kind, Range<usize>)>,
}

impl Bundle {
    /// Map (or, below 1 MiB, read) `path` and check it within `limits`: the SWH header and
    /// hash function, the manifest under [`MANIFEST_KEY`], and every object it lists found
    /// under its key with an in-bounds record. Object contents are not read. Blocking.
    pub fn open(path: &Path, limits: &OpenLimits) -> Result<Bundle, BundleError> {
        let data = load(path, limits.swh.max_bytes).map_err(|source| BundleError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Self::from_bytes(path.to_path_buf(), data, limits)
    }

    /// [`Bundle::open`] over bytes already in memory; `path` names them in messages.
    pub fn from_bytes(
        path: PathBuf,
        data: Bytes,
        limits: &OpenLimits,
    ) -> Result<Bundle, BundleError> {
        let reader = match ShardReader::open(&data, &limits.swh) {
            Ok(r) => r,
            Err(e) => {
                return Err(BundleError::Container {
                    path,
                    source: Box::new(e),
                });
            }
        };
        let manifest = read_manifest(&path, &reader, limits.max_manifest_bytes)?;
        let objects = locate_objects(&path, &reader, &data, &manifest)?;
        Ok(Bundle {
            path,
            data,
            manifest,
            objects,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn manifest(&self) -> &Manifest {
        &self.manifest
    }

    /// The whole file.
    pub fn bytes(&self) -> &Bytes {
        &self.data
    }

    /// The object listed as `kind` `hash` (its stored form), without a copy.
    pub fn object(&self, kind: Kind, hash: &MerkleHash) -> Option<Bytes> {
        self.range(kind, hash).map(|r| self.data.slice(r))
    }

    /// Length of the object listed as `kind` `hash`.
    pub fn object_len(&self, kind: Kind, hash: &MerkleHash) -> Option<u64> {
        self.range(kind, hash).map(|r| r.len() as u64)
    }

    /// Sum of the listed objects' lengths.
    pub fn object_bytes(&self) -> u64 {
        self.objects.values().map(|(_, r)| r.len() as u64).sum()
    }

    fn range(&self, kind: Kind, hash: &MerkleHash) -> Option<Range<usize>> {
        match self.objects.get(hash) {
            Some((k, r)) if *k == kind => Some(r.clone()),
            _ => None,
        }
    }
}

/// The file's bytes: a map of a regular file from 1 MiB on, else read, at most `max + 1`
/// bytes (so a pipe cannot make us read without end; the reader refuses the excess).
fn load(path: &Path, max: u64) -> std::io::Result<Bytes> {
    let file = std::fs::File::open(path)?;
    let fallback = file.try_clone()?;
    if let Some(map) = xet_mmap::MappedFile::map(file)? {
        return Ok(Bytes::from_owner(map));
    }
    let mut out = Vec::new();
    fallback.take(max.saturating_add(1)).read_to_end(&mut out)?;
    Ok(Bytes::from(out))
}

fn read_manifest(
    path: &Path,
    reader: &ShardReader<'_>,
    max_bytes: u64,
) -> Result<Manifest, BundleError> {
    let bytes = match reader.get(&MANIFEST_KEY) {
        Ok(Some(b)) => b,
        Ok(None) => {
            return Err(BundleError::NoManifest {
                path: path.to_path_buf(),
            });
        }
        Err(e) => {
            return Err(BundleError::Container {
                path: path.to_path_buf(),
                source: Box::new(e),
            });
        }
    };
    let bad = |source| BundleError::Manifest {
        path: path.to_path_buf(),
        source,
    };
    let len = bytes.len() as u64;
    if len > max_bytes {
        return Err(bad(ManifestError::TooLarge {
            len,
            max: max_bytes,
        }));
    }
    Manifest::parse(bytes).map_err(bad)
}

/// Each listed object's record, through the SWH index (one lookup per key, here only:
/// serving then goes through the map this returns).
fn locate_objects(
    path: &Path,
    reader: &ShardReader<'_>,
    data: &[u8],
    manifest: &Manifest,
) -> Result<HashMap<MerkleHash, (Kind, Range<usize>)>, BundleError> {
    let base = data.as_ptr() as usize;
    let mut out = HashMap::with_capacity(manifest.xorbs.len() + manifest.shards.len());
    for (kind, hash) in manifest.objects() {
        let value = match reader.get(&hash.0) {
            Ok(Some(v)) => v,
            Ok(None) => {
                return Err(BundleError::MissingObject {
                    path: path.to_path_buf(),
                    kind,
                    hash,
                });
            }
            Err(e) => {
                return Err(BundleError::DamagedEntry {
                    path: path.to_path_buf(),
                    kind,
                    hash,
                    source: Box::new(e),
                });
            }
        };
        // `value` borrows `data`, so its offset is where it starts in the file.
        let start = value.as_ptr() as usize - base;
        out.insert(hash, (kind, start..start + value.len()));
    }
    Ok(out)
}
