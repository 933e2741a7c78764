//! The local cache directory of one CAS endpoint: the shard cache and the resume journal.
//!
//! ```text
//! <cache_dir>/shard-cache/<shard hash>.mdb   stored-form shards: the ones this client
//!                                            uploaded (full lookup tables, creation time,
//!                                            expiry 21 days later, as hf_xet writes them)
//!                                            and global dedup answers, as received
//! <cache_dir>/xorb-journal                   one line per xorb stored by put_xorb:
//!                                            "<xorb hash string> <body length>\n"
//! ```
//!
//! All writes are atomic (temp file + rename) except journal appends, which are single
//! short `write` calls on an `O_APPEND` file; a torn last line is ignored when read.

use std::collections::{HashMap, HashSet};
use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use xet_hash::MerkleHash;
use xet_shard::{ParsedShard, Shard};

use crate::error::{Result, UploadError};

const SHARD_DIR: &str = "shard-cache";
const JOURNAL: &str = "xorb-journal";
/// Journal lines kept at most; older lines are dropped when it is rewritten.
const JOURNAL_MAX_LINES: usize = 100_000;

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// An opened cache directory.
#[derive(Debug)]
pub(crate) struct LocalCache {
    shard_dir: PathBuf,
    journal_path: PathBuf,
    journal: Mutex<Option<File>>,
}

/// What was found in the cache when it was opened.
#[derive(Debug, Default)]
pub(crate) struct CacheContents {
    /// Unexpired cached shards, newest first.
    pub shards: Vec<Shard>,
    /// Resume journal: xorb hash → body length.
    pub journal: HashMap<MerkleHash, u64>,
}

/// Remove every cached shard under the cache directory `dir`, and the resume journal:
/// they name xorbs that the CAS turned out not to hold (a store emptied, made anew, or
/// whose garbage collection reclaimed them). Returns how many shards were removed.
/// Blocking.
pub(crate) fn drop_shards(dir: &Path) -> Result<usize> {
    let journal = dir.join(JOURNAL);
    match fs::remove_file(&journal) {
        Ok(()) => {}
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(UploadError::cache(&journal, e)),
    }
    let shard_dir = dir.join(SHARD_DIR);
    let entries = match fs::read_dir(&shard_dir) {
        Ok(e) => e,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(0),
        Err(e) => return Err(UploadError::cache(&shard_dir, e)),
    };
    let mut n = 0;
    for e in entries {
        let path = e.map_err(|err| UploadError::cache(&shard_dir, err))?.path();
        if path.extension().is_some_and(|x| x == "mdb") {
            fs::remove_file(&path).map_err(|err| UploadError::cache(&path, err))?;
            n += 1;
        }
    }
    Ok(n)
}

impl LocalCache {
    /// Open (creating if needed unless `read_only`) `dir`, load its shards and journal,
    /// drop expired and unreadable shards and evict the oldest beyond `max_bytes`
    /// (deletions are skipped when `read_only`, but such shards are not loaded either).
    pub fn open(
        dir: &Path,
        max_bytes: u64,
        read_only: bool,
    ) -> Result<(LocalCache, CacheContents)> {
        let shard_dir = dir.join(SHARD_DIR);
        let journal_path = dir.join(JOURNAL);
        if !read_only {
            fs::create_dir_all(&shard_dir).map_err(|e| UploadError::cache(&shard_dir, e))?;
        }
        let cache = LocalCache {
            shard_dir,
            journal_path,
            journal: Mutex::new(None),
        };
        let shards = cache.load_shards(max_bytes, read_only)?;
        let journal = cache.read_journal()?;
        Ok((cache, CacheContents { shards, journal }))
    }

    fn load_shards(&self, max_bytes: u64, read_only: bool) -> Result<Vec<Shard>> {
        let dir = &self.shard_dir;
        let entries = match fs::read_dir(dir) {
            Ok(e) => e,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(UploadError::cache(dir, e)),
        };
        let mut found: Vec<(PathBuf, u64, SystemTime)> = Vec::new();
        for e in entries {
            let e = e.map_err(|err| UploadError::cache(dir, err))?;
            let path = e.path();
            if path.extension().is_none_or(|x| x != "mdb") {
                continue;
            }
            let meta = e.metadata().map_err(|err| UploadError::cache(&path, err))?;
            found.push((path, meta.len(), meta.modified().unwrap_or(UNIX_EPOCH)));
        }
        // Newest first; keep while within the cap.
        found.sort_by(|a, b| b.2.cmp(&a.2).then_with(|| a.0.cmp(&b.0)));
        let now = now_secs();
        let mut total = 0u64;
        let mut out = Vec::new();
        for (path, len, _) in found {
            let remove = |why: &str| {
                tracing::debug!(path = %path.display(), "shard cache: dropping ({why})");
                if !read_only && let Err(e) = fs::remove_file(&path) {
                    tracing::warn!(path = %path.display(), "shard cache: cannot remove: {e}");
                }
            };
            if total + len > max_bytes {
                remove("over the size cap");
                continue;
            }
            let bytes = match fs::read(&path) {
                Ok(b) => b,
                Err(e) => {
                    tracing::warn!(path = %path.display(), "shard cache: unreadable: {e}");
                    continue;
                }
            };
            let parsed = match ParsedShard::parse(&bytes, &xet_shard::Limits::default()) {
                Ok(p) => p,
                Err(e) => {
                    remove(&format!("invalid: {e}"));
                    continue;
                }
            };
            let expiry = parsed.shard.footer.map_or(0, |f| f.key_expiry);
            if expiry != 0 && expiry < now {
                remove("expired");
                continue;
            }
            total += len;
            out.push(parsed.shard);
        }
        Ok(out)
    }

    /// Write a stored-form shard into the cache as `<shard hash>.mdb`.
    pub fn save_shard(&self, stored: &[u8]) -> Result<PathBuf> {
        let name = format!("{}.mdb", xet_shard::shard_hash(stored));
        let path = self.shard_dir.join(name);
        if path.exists() {
            return Ok(path);
        }
        xet_mmap::durable::write_replace(&path, stored)
            .map_err(|e| UploadError::cache(&path, e))?;
        Ok(path)
    }

    fn read_journal(&self) -> Result<HashMap<MerkleHash, u64>> {
        let text = match fs::read_to_string(&self.journal_path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashMap::new()),
            Err(e) => return Err(UploadError::cache(&self.journal_path, e)),
        };
        Ok(parse_journal(&text).into_iter().collect())
    }

    /// Record that xorb `hash` (body of `len` bytes) is stored.
    pub fn journal_append(&self, hash: &MerkleHash, len: u64) -> Result<()> {
        let path = &self.journal_path;
        let mut guard = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        if guard.is_none() {
            let f = OpenOptions::new()
                .create(true)
                .append(true)
                .open(path)
                .map_err(|e| UploadError::cache(path, e))?;
            *guard = Some(f);
        }
        let f = guard.as_mut().expect("opened above");
        f.write_all(format!("{hash} {len}\n").as_bytes())
            .map_err(|e| UploadError::cache(path, e))
    }

    /// Drop the journal lines of `done` (xorbs now referenced by a registered shard, so
    /// the shard cache dedups them), and old lines beyond the cap.
    pub fn journal_forget(&self, done: &HashSet<MerkleHash>) -> Result<()> {
        let path = &self.journal_path;
        let mut guard = self.journal.lock().unwrap_or_else(|p| p.into_inner());
        *guard = None;
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(UploadError::cache(path, e)),
        };
        let mut keep: Vec<(MerkleHash, u64)> = parse_journal(&text)
            .into_iter()
            .filter(|(h, _)| !done.contains(h))
            .collect();
        if keep.len() > JOURNAL_MAX_LINES {
            keep.drain(..keep.len() - JOURNAL_MAX_LINES);
        }
        if keep.is_empty() {
            return match fs::remove_file(path) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => Err(UploadError::cache(path, e)),
                _ => Ok(()),
            };
        }
        let out: String = keep.iter().map(|(h, l)| format!("{h} {l}\n")).collect();
        xet_mmap::durable::write_replace(path, out.as_bytes())
            .map_err(|e| UploadError::cache(path, e))
    }
}

/// Journal lines, in order; malformed lines (a torn last write) are skipped.
fn parse_journal(text: &str) -> Vec<(MerkleHash, u64)> {
    text.lines()
        .filter_map(|l| {
            let (h, n) = l.split_once(' ')?;
            Some((MerkleHash::from_hex(h).ok()?, n.trim().parse().ok()?))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_shard::{CasInfo, StoredOptions};

    fn shard(seed: u8, expiry: u64) -> Vec<u8> {
        let h = xet_hash::chunk_hash(&[seed]);
        let cas = CasInfo::from_chunks(MerkleHash::from_bytes([seed; 32]), &[(h, 100)], 0).unwrap();
        let s = Shard::new(vec![], vec![cas]);
        let opts = StoredOptions {
            lookup_tables: true,
            hmac_key: None,
            creation_timestamp: 1,
            key_expiry: expiry,
        };
        let s = s.into_stored(opts).unwrap();
        s.to_bytes().unwrap()
    }

    #[test]
    fn expired_and_invalid_shards_are_dropped() {
        let d = tempfile::tempdir().unwrap();
        let (c, contents) = LocalCache::open(d.path(), 1 << 20, false).unwrap();
        assert!(contents.shards.is_empty());
        let keep = c.save_shard(&shard(1, now_secs() + 1000)).unwrap();
        let forever = c.save_shard(&shard(2, 0)).unwrap();
        let expired = c.save_shard(&shard(3, now_secs() - 10)).unwrap();
        let bad = d.path().join(SHARD_DIR).join("junk.mdb");
        fs::write(&bad, b"not a shard").unwrap();
        let (_, contents) = LocalCache::open(d.path(), 1 << 20, false).unwrap();
        assert_eq!(contents.shards.len(), 2);
        assert!(keep.exists() && forever.exists());
        assert!(!expired.exists() && !bad.exists());
    }

    #[test]
    fn oldest_evicted_beyond_the_cap() {
        let d = tempfile::tempdir().unwrap();
        let (c, _) = LocalCache::open(d.path(), 1 << 20, false).unwrap();
        let mut paths = Vec::new();
        for i in 0..4u8 {
            let p = c.save_shard(&shard(10 + i, 0)).unwrap();
            let t = SystemTime::now() - std::time::Duration::from_secs(100 - i as u64 * 10);
            File::options()
                .write(true)
                .open(&p)
                .unwrap()
                .set_modified(t)
                .unwrap();
            paths.push(p);
        }
        let one = fs::metadata(&paths[0]).unwrap().len();
        let (_, contents) = LocalCache::open(d.path(), 2 * one + one / 2, false).unwrap();
        assert_eq!(contents.shards.len(), 2);
        assert!(!paths[0].exists() && !paths[1].exists());
        assert!(paths[2].exists() && paths[3].exists());
    }

    #[test]
    fn journal_roundtrip_tolerates_torn_line() {
        let d = tempfile::tempdir().unwrap();
        let (c, _) = LocalCache::open(d.path(), 1 << 20, false).unwrap();
        let a = MerkleHash::from_bytes([1; 32]);
        let b = MerkleHash::from_bytes([2; 32]);
        c.journal_append(&a, 10).unwrap();
        c.journal_append(&b, 20).unwrap();
        let mut f = OpenOptions::new()
            .append(true)
            .open(d.path().join(JOURNAL))
            .unwrap();
        f.write_all(b"0123abc").unwrap();
        let (c, contents) = LocalCache::open(d.path(), 1 << 20, false).unwrap();
        assert_eq!(contents.journal.len(), 2);
        assert_eq!(contents.journal[&b], 20);
        c.journal_forget(&[a].into_iter().collect()).unwrap();
        let (c, contents) = LocalCache::open(d.path(), 1 << 20, false).unwrap();
        assert_eq!(contents.journal.keys().collect::<Vec<_>>(), [&b]);
        c.journal_forget(&[b].into_iter().collect()).unwrap();
        assert!(!d.path().join(JOURNAL).exists());
    }
}
