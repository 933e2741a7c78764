//! Downloaded files shared with the cache by hard link (`files/<file hash>`), and the
//! references into them that stand for their terms (formats in the [`super`] module
//! docs).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::Path;
use std::time::{Duration, SystemTime};

use xet_hash::MerkleHash;

use super::entry;
use super::index::{Entry, Index, Linked, Unit};
use super::layout::{FILES, remove_stale_tmp};
use super::store::ChunkCache;

/// One term of a verified, downloaded file, for [`ChunkCache::link_file`].
#[derive(Debug, Clone)]
pub(crate) struct FileTerm {
    pub xorb: MerkleHash,
    /// First chunk index in the xorb.
    pub start: u32,
    /// Where the term's data starts in the file.
    pub offset: u64,
    pub chunks: Vec<(MerkleHash, u32)>,
}

impl FileTerm {
    fn end(&self) -> u32 {
        self.start + self.chunks.len() as u32
    }
}

/// The linked files under `root`, with no references counted yet (stale temporary
/// links are removed).
pub(super) fn scan_linked_files(root: &Path) -> HashMap<MerkleHash, Linked> {
    let mut linked = HashMap::new();
    if let Ok(rd) = fs::read_dir(root.join(FILES)) {
        for f in rd.flatten() {
            let name = f.file_name();
            let name = name.to_string_lossy();
            if name.starts_with(".tmp") {
                remove_stale_tmp(&f);
            } else if let (Ok(h), Ok(m)) = (MerkleHash::from_hex(&name), f.metadata()) {
                linked.insert(
                    h,
                    Linked {
                        len: m.len(),
                        refs: 0,
                    },
                );
            }
        }
    }
    linked
}

/// Once the references are counted: forget linked files nothing refers to any more,
/// and delete those whose inode changed over `orphan_age` ago (a younger one may be
/// having its references written by another process right now).
pub(super) fn drop_unreferenced(root: &Path, index: &mut Index, orphan_age: Duration) {
    index.linked.retain(|h, l| {
        if l.refs == 0 {
            let path = root.join(FILES).join(h.to_string());
            if fs::metadata(&path).is_ok_and(|m| changed_before(&m, orphan_age)) {
                let _ = fs::remove_file(path);
            }
        }
        l.refs > 0
    });
}

/// Whether the inode's status last changed over `age` ago (linking a file changes it;
/// writing to it does too).
fn changed_before(m: &fs::Metadata, age: Duration) -> bool {
    #[cfg(unix)]
    let changed = {
        use std::os::unix::fs::MetadataExt;
        SystemTime::UNIX_EPOCH + Duration::from_secs(m.ctime().max(0) as u64)
    };
    #[cfg(not(unix))]
    let changed = m.modified().unwrap_or(SystemTime::UNIX_EPOCH);
    changed.elapsed().is_ok_and(|a| a >= age)
}

impl ChunkCache {
    /// Share a downloaded file's data instead of copying it: hard-link `src` (already
    /// verified against `file`, `len` bytes) as `files/<file>` and record a reference
    /// for each of `terms` not already cached. `Ok(false)` if there was nothing to
    /// record, the file and its references exceed the bound, or no reference could be
    /// written (the link is then removed again); an error if the link could not be
    /// made (the caller may copy the terms instead). Blocking.
    pub fn link_file(
        &self,
        file: &MerkleHash,
        src: &Path,
        len: u64,
        terms: &[FileTerm],
    ) -> io::Result<bool> {
        let new: Vec<&FileTerm> = terms
            .iter()
            .filter(|t| !t.chunks.is_empty() && !self.contains(&t.xorb, t.start, t.end()))
            .collect();
        // The file and its references must fit the bound together, or the next open
        // would evict them at once.
        let refs_len: u64 = new
            .iter()
            .map(|t| entry::header_len(t.chunks.len(), true))
            .sum();
        if new.is_empty() || len.saturating_add(refs_len) > self.max_bytes() {
            return Ok(false);
        }
        let dir = self.root().join(FILES);
        fs::create_dir_all(&dir)?;
        let tmp = dir.join(self.tmp_name());
        fs::hard_link(src, &tmp)?;
        if let Err(e) = fs::rename(&tmp, self.linked_path(file)) {
            let _ = fs::remove_file(&tmp);
            return Err(e);
        }
        {
            // A link already there was replaced: its references now read the new
            // inode, which holds the same verified bytes.
            let mut idx = self.lock();
            let l = idx
                .linked
                .entry(*file)
                .or_insert(Linked { len: 0, refs: 0 });
            let old_len = std::mem::replace(&mut l.len, len);
            idx.total = idx.total.saturating_sub(old_len) + len;
        }
        for t in new {
            // A term repeated in the file was recorded a moment ago.
            if !self.contains(&t.xorb, t.start, t.end()) {
                self.record_reference(file, t);
            }
        }
        // No reference could be written: the link would only take room.
        let unused = self.lock().unlink_if_unused(file);
        if unused {
            let _ = fs::remove_file(self.linked_path(file));
            return Ok(false);
        }
        self.evict(Some(Unit::Linked(*file)));
        Ok(true)
    }

    /// Write and index the reference for term `t` of linked file `file`. Errors are
    /// logged.
    fn record_reference(&self, file: &MerkleHash, t: &FileTerm) {
        let (start, end) = (t.start, t.end());
        let body = entry::encode_header(t.chunks.iter().copied(), Some(t.offset));
        let res = (|| -> io::Result<()> {
            let d = self.root().join(t.xorb.to_string());
            fs::create_dir_all(&d)?;
            let tmp = d.join(self.tmp_name());
            if let Err(e) = fs::write(&tmp, &body)
                .and_then(|()| fs::rename(&tmp, self.entry_path(&t.xorb, start, end, Some(file))))
            {
                let _ = fs::remove_file(&tmp);
                return Err(e);
            }
            Ok(())
        })();
        match res {
            Ok(()) => self.publish(
                &t.xorb,
                Entry {
                    start,
                    end,
                    file_len: body.len() as u64,
                    last_used: SystemTime::now(),
                    linked: Some(*file),
                },
            ),
            Err(e) => tracing::warn!(
                "could not record chunks {start}..{end} of xorb {} in the chunk cache: {e}",
                t.xorb
            ),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::fs::File;
    use std::path::PathBuf;

    use super::*;
    use crate::cache::layout::SUBDIR;
    use crate::cache::tests::chunks_of;
    use crate::cache::{CacheStats, cache_stats};

    /// A file of two terms (xorbs `x`, `y`) written at `path`, and its terms.
    fn linked_fixture(path: &Path) -> (Vec<u8>, Vec<FileTerm>) {
        let data: Vec<u8> = (0..5000u32).map(|i| (i * 7 % 253) as u8).collect();
        fs::write(path, &data).unwrap();
        let x = xet_hash::chunk_hash(b"x");
        let y = xet_hash::chunk_hash(b"y");
        let terms = vec![
            FileTerm {
                xorb: x,
                start: 3,
                offset: 0,
                chunks: chunks_of(&data[..3000], &[1000, 2000]),
            },
            FileTerm {
                xorb: y,
                start: 0,
                offset: 3000,
                chunks: chunks_of(&data[3000..], &[2000]),
            },
        ];
        (data, terms)
    }

    #[test]
    fn linked_files_serve_their_terms_without_a_copy() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("downloaded");
        let (data, terms) = linked_fixture(&src);
        let old = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000_000);
        File::options()
            .write(true)
            .open(&src)
            .unwrap()
            .set_modified(old)
            .unwrap();
        let fh = xet_hash::chunk_hash(b"file");
        let c = ChunkCache::open(&dir.path().join("cache"), 1 << 20).unwrap();
        assert!(c.link_file(&fh, &src, 5000, &terms).unwrap());
        #[cfg(unix)]
        {
            use std::os::unix::fs::MetadataExt;
            let (a, b) = (
                fs::metadata(&src).unwrap(),
                fs::metadata(c.linked_path(&fh)).unwrap(),
            );
            assert_eq!(
                (a.ino(), a.nlink()),
                (b.ino(), 2),
                "a hard link, not a copy"
            );
        }
        let (x, y) = (terms[0].xorb, terms[1].xorb);
        assert_eq!(c.get(&x, 4, 5).unwrap().data, &data[1000..3000]);
        assert_eq!(c.get(&y, 0, 1).unwrap().data, &data[3000..]);
        assert!(!c.contains(&x, 2, 4));
        assert_eq!(
            fs::metadata(&src).unwrap().modified().unwrap(),
            old,
            "hits never touch the user's file"
        );
        let s = cache_stats(&dir.path().join("cache")).unwrap();
        assert_eq!((s.entries, s.xorbs, s.chunks, s.linked_files), (2, 2, 3, 1));
        assert_eq!(s.linked_bytes, 5000);
        assert_eq!(s.bytes, c.total());
        assert_eq!(s.bytes, 5000 + 2 * 20 + 3 * 36);
        // Nothing new to record: no second link.
        assert!(!c.link_file(&fh, &src, 5000, &terms).unwrap());

        // Reopened, the index comes back from the names alone.
        drop(c);
        let c = ChunkCache::open(&dir.path().join("cache"), 1 << 20).unwrap();
        assert_eq!(c.total(), s.bytes);
        assert_eq!(c.get(&x, 3, 5).unwrap().data, &data[..3000]);

        // The user changes the file in place: that term is a miss and its reference
        // goes; the other still serves, and the link goes with the last reference.
        let mut changed = data.clone();
        changed[4000] ^= 1;
        fs::write(&src, &changed).unwrap();
        assert!(c.get(&y, 0, 1).is_none());
        assert!(!c.contains(&y, 0, 1));
        assert_eq!(c.get(&x, 3, 4).unwrap().data, &data[..1000]);
        c.remove(&x, 3, 5);
        assert!(!c.linked_path(&fh).exists());
        assert_eq!(c.total(), 0);
        assert_eq!(fs::read(&src).unwrap(), changed, "the user's file stays");
    }

    #[test]
    fn terms_copied_from_a_file_are_ordinary_entries() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("downloaded");
        let (data, terms) = linked_fixture(&src);
        let c = ChunkCache::open(&dir.path().join("cache"), 1 << 20).unwrap();
        c.copy_from_file(&File::open(&src).unwrap(), &terms);
        fs::remove_file(&src).unwrap();
        assert_eq!(c.get(&terms[0].xorb, 3, 5).unwrap().data, &data[..3000]);
        assert_eq!(c.get(&terms[1].xorb, 0, 1).unwrap().data, &data[3000..]);
        let s = cache_stats(&dir.path().join("cache")).unwrap();
        assert_eq!((s.entries, s.chunks, s.linked_files), (2, 3, 0));
        assert_eq!(s.bytes, 5000 + 2 * 12 + 3 * 36);
    }

    #[test]
    fn a_linked_file_is_evicted_whole_by_its_most_recent_use() {
        let dir = tempfile::tempdir().unwrap();
        let src = dir.path().join("downloaded");
        let (_, terms) = linked_fixture(&src);
        let fh = xet_hash::chunk_hash(b"file");
        let linked = 5000 + 2 * 20 + 3 * 36;
        let per = 12 + 36 + 1000u64;
        let c = ChunkCache::open(&dir.path().join("cache"), linked + 2 * per).unwrap();
        let one = vec![1u8; 1000];
        let ch = chunks_of(&one, &[1000]);
        let xs: Vec<MerkleHash> = (0..3u8).map(|i| xet_hash::chunk_hash(&[i])).collect();
        c.insert(&xs[0], 0, &ch, &one);
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.link_file(&fh, &src, 5000, &terms).unwrap());
        std::thread::sleep(Duration::from_millis(20));
        c.insert(&xs[1], 0, &ch, &one);
        std::thread::sleep(Duration::from_millis(20));
        // Using one term of the file makes the whole file recent.
        assert!(c.get(&terms[1].xorb, 0, 1).is_some());
        std::thread::sleep(Duration::from_millis(20));
        c.insert(&xs[2], 0, &ch, &one);
        assert!(!c.contains(&xs[0], 0, 1), "the oldest entry goes first");
        assert!(c.contains(&terms[0].xorb, 3, 5) && c.contains(&terms[1].xorb, 0, 1));
        assert!(c.total() <= linked + 2 * per);

        // Another entry: now the file is least recently used, and goes whole.
        std::thread::sleep(Duration::from_millis(20));
        assert!(c.get(&xs[2], 0, 1).is_some());
        assert!(c.get(&xs[1], 0, 1).is_some());
        c.insert(&xs[0], 0, &ch, &one);
        assert!(!c.contains(&terms[0].xorb, 3, 4) && !c.contains(&terms[1].xorb, 0, 1));
        assert!(!c.linked_path(&fh).exists());
        assert!(src.exists());
        assert_eq!(cache_stats(&dir.path().join("cache")).unwrap().entries, 3);

        // A file that fits the bound only without its references is not linked at all.
        let tight = ChunkCache::open(&dir.path().join("tight"), linked - 1).unwrap();
        assert!(!tight.link_file(&fh, &src, 5000, &terms).unwrap());
        assert_eq!(tight.total(), 0);
        let exact = ChunkCache::open(&dir.path().join("exact"), linked).unwrap();
        assert!(exact.link_file(&fh, &src, 5000, &terms).unwrap());
        drop(exact);
        let exact = ChunkCache::open(&dir.path().join("exact"), linked).unwrap();
        assert_eq!(exact.total(), linked, "still there when reopened");
    }

    #[test]
    fn open_drops_references_without_their_file_and_files_without_references() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().join("cache");
        let src = dir.path().join("downloaded");
        let (_, terms) = linked_fixture(&src);
        let (f1, f2) = (xet_hash::chunk_hash(b"f1"), xet_hash::chunk_hash(b"f2"));
        let c = ChunkCache::open(&root, 1 << 20).unwrap();
        assert!(c.link_file(&f1, &src, 5000, &terms[..1]).unwrap());
        assert!(c.link_file(&f2, &src, 5000, &terms[1..]).unwrap());
        let ref2 = c.entry_path(&terms[1].xorb, 0, 1, Some(&f2));
        let link1 = c.linked_path(&f1);
        drop(c);
        // f1 loses its reference file, f2 its linked file.
        fs::remove_file(c_ref(&root, &terms[0], &f1)).unwrap();
        fs::remove_file(root.join(SUBDIR).join(FILES).join(f2.to_string())).unwrap();
        // Just linked: another process may be about to write its references.
        drop(ChunkCache::open(&root, 1 << 20).unwrap());
        assert!(link1.exists(), "a young linked file is left alone");
        let c = ChunkCache::open_with(&root, 1 << 20, Duration::ZERO).unwrap();
        assert!(
            !link1.exists(),
            "a linked file no reference uses is removed"
        );
        assert!(!ref2.exists(), "a reference to a missing file is removed");
        assert_eq!(c.total(), 0);
        assert_eq!(
            cache_stats(&root).unwrap(),
            CacheStats {
                dir: root,
                ..Default::default()
            }
        );
    }

    fn c_ref(root: &Path, t: &FileTerm, f: &MerkleHash) -> PathBuf {
        root.join(SUBDIR)
            .join(t.xorb.to_string())
            .join(entry::entry_name(t.start, t.end(), Some(f)))
    }
}
