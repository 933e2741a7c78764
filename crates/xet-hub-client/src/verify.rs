//! Checking bytes against what the tree listing says of them: git blob ids for plain
//! files, sha256 for LFS files (a Xet file's sha256 is checked by the download pipeline,
//! `DownloadRequest::with_sha256`). Hashing runs on blocking threads, never on the
//! async executor.

use std::io::Write;

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

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(body: &'static [u8]) -> reqwest::Response {
        reqwest::Response::from(http::Response::new(body))
    }

    async fn check(body: &'static [u8], size: u64, expect: &Expect) -> Result<(), Mismatch> {
        let sink: Box<dyn Write + Send> = Box::new(std::io::sink());
        copy_body(answer(body), sink, size, expect, &|_| ()).await
    }

    #[tokio::test]
    async fn bodies_are_checked_by_git_blob_id_sha256_and_size() {
        // `git hash-object` of "hello\n".
        let git = Expect::GitBlob("ce013625030ba8dba906f756967f9e9ca394464a".into());
        check(b"hello\n", 6, &git).await.unwrap();
        let sha = Expect::Sha256(
            "5891b5b522d5df086d0ff0b110fbd9d21bb4fc7163af34d08286a2e846f6be03".into(),
        );
        check(b"hello\n", 6, &sha).await.unwrap();
        assert!(matches!(
            check(b"hello\n", 7, &sha).await,
            Err(Mismatch::Size { got: 6, want: 7 })
        ));
        assert!(matches!(
            check(b"hellO\n", 6, &git).await,
            Err(Mismatch::Hash { .. })
        ));
    }
}
