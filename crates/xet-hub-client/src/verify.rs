//! Checking bytes against what the tree listing says of them: git blob ids for plain
//! files, sha256 for LFS and Xet files. Hashing runs on blocking threads, never on the
//! async executor.

use std::io::Write;
use std::path::Path;
use std::sync::{Arc, Mutex};

use sha1::Digest as _;

use xet_hub::id::hex;

/// What the bytes must hash to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Expect {
    /// The git blob id (SHA-1 of `blob <size>\0` + content).
    GitBlob(String),
    /// The sha256, lowercase hex.
    Sha256(String),
}

/// A running hash of one of the two kinds.
enum Running {
    Git(sha1::Sha1),
    Sha(sha2::Sha256),
}

impl Running {
    fn new(expect: &Expect, size: u64) -> Running {
        match expect {
            Expect::GitBlob(_) => {
                let mut h = sha1::Sha1::new();
                h.update(format!("blob {size}\0").as_bytes());
                Running::Git(h)
            }
            Expect::Sha256(_) => Running::Sha(sha2::Sha256::new()),
        }
    }

    fn update(&mut self, b: &[u8]) {
        match self {
            Running::Git(h) => h.update(b),
            Running::Sha(h) => h.update(b),
        }
    }

    fn finish(self) -> String {
        match self {
            Running::Git(h) => hex(&h.finalize()),
            Running::Sha(h) => hex(&h.finalize()),
        }
    }
}

/// Why bytes were refused.
#[derive(Debug, thiserror::Error)]
pub enum Mismatch {
    #[error("{got} bytes arrived, the listing says {want}")]
    Size { got: u64, want: u64 },
    #[error("the content hashes to {got}, the listing says {want}")]
    Hash { got: String, want: String },
    /// The cause is in the message, not in `source()` (printed once either way).
    #[error("writing: {0}")]
    Io(std::io::Error),
    #[error("reading the answer: {0}")]
    Body(String),
}

impl From<std::io::Error> for Mismatch {
    fn from(e: std::io::Error) -> Mismatch {
        Mismatch::Io(e)
    }
}

fn compare(expect: &Expect, got: String) -> Result<(), Mismatch> {
    let want = match expect {
        Expect::GitBlob(w) | Expect::Sha256(w) => w,
    };
    if got.eq_ignore_ascii_case(want) {
        Ok(())
    } else {
        Err(Mismatch::Hash {
            got,
            want: want.clone(),
        })
    }
}

/// Copy an HTTP body of exactly `size` bytes into `sink`, hashing it on a blocking
/// thread, then check the hash. `progress` gets each piece's length. A body longer
/// than `size` is cut off and refused.
pub async fn copy_body(
    mut response: reqwest::Response,
    mut sink: Box<dyn Write + Send>,
    size: u64,
    expect: &Expect,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<(), Mismatch> {
    if let Some(n) = response.content_length().filter(|&n| n != size) {
        return Err(Mismatch::Size { got: n, want: size });
    }
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
    let mut running = Running::new(expect, size);
    let writer = tokio::task::spawn_blocking(move || -> Result<String, Mismatch> {
        while let Some(piece) = rx.blocking_recv() {
            running.update(&piece);
            sink.write_all(&piece)?;
        }
        sink.flush()?;
        Ok(running.finish())
    });
    let mut got = 0u64;
    let fed = async {
        while let Some(piece) = response
            .chunk()
            .await
            .map_err(|e| Mismatch::Body(e.to_string()))?
        {
            got += piece.len() as u64;
            if got > size {
                return Err(Mismatch::Size { got, want: size });
            }
            progress(piece.len() as u64);
            if tx.send(piece).await.is_err() {
                break; // The writer failed; its error is the one to report.
            }
        }
        Ok(())
    }
    .await;
    drop(tx);
    let written = writer
        .await
        .map_err(|e| Mismatch::Io(std::io::Error::other(e.to_string())))?;
    fed?;
    let hash = written?;
    if got != size {
        return Err(Mismatch::Size { got, want: size });
    }
    compare(expect, hash)
}

/// Check the file at `path` (on a blocking thread).
pub async fn check_file(path: &Path, size: u64, expect: &Expect) -> Result<(), Mismatch> {
    let path = path.to_path_buf();
    let expect = expect.clone();
    tokio::task::spawn_blocking(move || {
        let mut running = Running::new(&expect, size);
        let got = read_overlapped(&path, |piece| running.update(piece))?;
        if got != size {
            return Err(Mismatch::Size { got, want: size });
        }
        compare(&expect, running.finish())
    })
    .await
    .map_err(|e| Mismatch::Io(std::io::Error::other(e.to_string())))?
}

/// Bytes read ahead of the hashing, in buffers of this size (two in flight).
const CHECK_BUF: usize = 4 << 20;

/// Reads the file at `path` on a thread of its own while `hash` takes each piece in
/// order, so reading and hashing overlap: a downloaded file was written past the page
/// cache (direct writes), so its check reads it from the disk. Returns the bytes read.
fn read_overlapped(path: &Path, mut hash: impl FnMut(&[u8])) -> std::io::Result<u64> {
    let mut f = std::fs::File::open(path)?;
    let (full_tx, full_rx) = std::sync::mpsc::sync_channel::<std::io::Result<Vec<u8>>>(1);
    let (free_tx, free_rx) = std::sync::mpsc::sync_channel::<Vec<u8>>(2);
    for _ in 0..2 {
        free_tx.send(vec![0u8; CHECK_BUF]).expect("receiver alive");
    }
    let reader = std::thread::spawn(move || {
        for mut buf in free_rx.iter() {
            buf.resize(CHECK_BUF, 0);
            let mut n = 0;
            while n < buf.len() {
                match std::io::Read::read(&mut f, &mut buf[n..]) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        let _ = full_tx.send(Err(e));
                        return;
                    }
                }
            }
            buf.truncate(n);
            if n == 0 || full_tx.send(Ok(buf)).is_err() {
                return;
            }
        }
    });
    let mut got = 0u64;
    let res = (|| {
        for buf in full_rx.iter() {
            let buf = buf?;
            got += buf.len() as u64;
            hash(&buf);
            // The reader may have stopped at the end of the file: nothing to recycle to.
            let _ = free_tx.send(buf);
        }
        Ok(got)
    })();
    drop(free_tx);
    drop(full_rx);
    let _ = reader.join();
    res
}

/// A writer that passes bytes on and keeps their sha256, which [`Sha256Tap::finish`]
/// reads after the writer was handed away (to a download pipeline).
#[derive(Clone)]
pub struct Sha256Tap(Arc<Mutex<Option<sha2::Sha256>>>);

impl Default for Sha256Tap {
    fn default() -> Self {
        Sha256Tap(Arc::new(Mutex::new(Some(sha2::Sha256::new()))))
    }
}

impl Sha256Tap {
    /// `inner` wrapped so that what goes through is hashed.
    pub fn wrap<W: Write + Send + 'static>(&self, inner: W) -> Box<dyn Write + Send> {
        Box::new(Tapped {
            inner,
            tap: self.clone(),
        })
    }

    /// The sha256 of everything written, lowercase hex.
    pub fn finish(&self) -> String {
        let h = self.0.lock().map(|mut g| g.take()).ok().flatten();
        hex(&h.unwrap_or_default().finalize())
    }
}

struct Tapped<W> {
    inner: W,
    tap: Sha256Tap,
}

impl<W: Write> Write for Tapped<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = self.inner.write(buf)?;
        if let Ok(mut g) = self.tap.0.lock()
            && let Some(h) = g.as_mut()
        {
            h.update(&buf[..n]);
        }
        Ok(n)
    }
    fn flush(&mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// Check a finished tap against the listing.
pub fn check_tap(tap: &Sha256Tap, expect: &Expect) -> Result<(), Mismatch> {
    compare(expect, tap.finish())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn files_are_checked_by_git_blob_id_and_sha256() {
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("f");
        std::fs::write(&p, b"hello\n").unwrap();
        // `git hash-object` of "hello\n".
        let git = Expect::GitBlob("ce013625030ba8dba906f756967f9e9ca394464a".into());
        check_file(&p, 6, &git).await.unwrap();
        let sha = Expect::Sha256(
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".into(),
        );
        check_file(&p, 6, &sha).await.unwrap();
        assert!(matches!(
            check_file(&p, 7, &sha).await,
            Err(Mismatch::Size { got: 6, want: 7 })
        ));
        std::fs::write(&p, b"hellO\n").unwrap();
        assert!(matches!(
            check_file(&p, 6, &git).await,
            Err(Mismatch::Hash { .. })
        ));
    }

    /// Files of 0 bytes, of whole read buffers and of a few buffers and a bit are hashed
    /// in order, every byte once.
    #[test]
    fn overlapped_reads_hash_every_byte_in_order() {
        use sha2::Digest;
        let dir = tempfile::tempdir().unwrap();
        for len in [0, 1, CHECK_BUF, 2 * CHECK_BUF, 3 * CHECK_BUF + 12_345] {
            let data: Vec<u8> = (0..len).map(|i| (i % 251) as u8).collect();
            let p = dir.path().join(format!("f{len}"));
            std::fs::write(&p, &data).unwrap();
            let mut sha = sha2::Sha256::new();
            let got = read_overlapped(&p, |piece| sha.update(piece)).unwrap();
            assert_eq!(got, len as u64);
            assert_eq!(sha.finalize()[..], sha2::Sha256::digest(&data)[..], "{len}");
        }
        assert!(read_overlapped(&dir.path().join("missing"), |_| ()).is_err());
    }

    #[test]
    fn the_tap_hashes_what_passes() {
        let tap = Sha256Tap::default();
        let mut w = tap.wrap(Vec::new());
        w.write_all(b"hello\n").unwrap();
        drop(w);
        let sha = Expect::Sha256(
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".into(),
        );
        check_tap(&tap, &sha).unwrap();
    }
}
