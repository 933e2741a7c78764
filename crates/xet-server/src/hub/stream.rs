//! A stored file's bytes, rebuilt from the CAS term by term and handed out in order as a
//! bounded stream: the body of `GET .../resolve/...` and the input of sha256 checks.
//!
//! The chunks were validated when their xorb was stored; decoding checks every chunk
//! header and length again, and a term that does not decode to its stated length ends
//! the stream with an error (the client sees a body shorter than its `Content-Length`).

use std::sync::Arc;

use bytes::Bytes;
use sha2::Digest as _;
use tokio::sync::mpsc;
use xet_cas::{ByteRange, Cas, CasError, Reconstruction, XorbFetch};
use xet_hash::MerkleHash;
use xet_xorb::{DecodedChunks, Expected, Limits, decode_chunks};

/// Pieces in flight between the task rebuilding a file and its consumer.
const PIECES_IN_FLIGHT: usize = 4;

/// The bytes of `file` (or `range` of it), in order. Errors end the stream.
pub(crate) fn file_stream(
    cas: Arc<dyn Cas>,
    file: MerkleHash,
    range: Option<ByteRange>,
) -> mpsc::Receiver<Result<Bytes, CasError>> {
    let (tx, rx) = mpsc::channel(PIECES_IN_FLIGHT);
    tokio::spawn(async move {
        if let Err(e) = pump(cas.as_ref(), &file, range, &tx).await {
            // The receiver may be gone (client left): nothing to tell then.
            let _ = tx.send(Err(e)).await;
        }
    });
    rx
}

async fn pump(
    cas: &dyn Cas,
    file: &MerkleHash,
    range: Option<ByteRange>,
    tx: &mpsc::Sender<Result<Bytes, CasError>>,
) -> Result<(), CasError> {
    if *file == MerkleHash::default() {
        return Ok(());
    }
    let rec = cas.reconstruction(file, range).await?;
    let mut skip = rec.offset_into_first_range;
    let mut remaining = range.map_or(u64::MAX, |r| r.len());
    let mut decoded: Option<(XorbFetch, Arc<DecodedChunks>)> = None;
    for term in &rec.terms {
        if remaining == 0 {
            break;
        }
        let fetch = fetch_of(&rec, term, file)?;
        let chunks = match &decoded {
            Some((f, d)) if f == fetch => d.clone(),
            _ => {
                let d = Arc::new(decode(cas, fetch).await?);
                decoded = Some((fetch.clone(), d.clone()));
                d
            }
        };
        let first = (term.chunks.start - fetch.chunks.start) as usize;
        let last = (term.chunks.end - fetch.chunks.start) as usize;
        let start = if first == 0 {
            0
        } else {
            chunks.chunk_ends[first - 1] as usize
        };
        let end = chunks.chunk_ends[last - 1] as usize;
        if (end - start) as u64 != term.unpacked_length {
            return Err(corrupt(
                file,
                format!(
                    "a term of xorb {} decodes to {} bytes, not {}",
                    term.xorb,
                    end - start,
                    term.unpacked_length
                ),
            ));
        }
        let data = Bytes::copy_from_slice(&chunks.data[start..end]);
        let from = skip.min(data.len() as u64) as usize;
        skip -= from as u64;
        let take = (data.len() - from).min(remaining.min(usize::MAX as u64) as usize);
        remaining -= take as u64;
        if take > 0 && tx.send(Ok(data.slice(from..from + take))).await.is_err() {
            return Ok(());
        }
    }
    Ok(())
}

fn fetch_of<'a>(
    rec: &'a Reconstruction,
    term: &xet_cas::Term,
    file: &MerkleHash,
) -> Result<&'a XorbFetch, CasError> {
    rec.fetch_for(term)
        .filter(|f| !term.chunks.is_empty() && term.chunks.end <= f.chunks.end)
        .ok_or_else(|| {
            corrupt(
                file,
                format!(
                    "the reconstruction has no fetch for a term of xorb {}",
                    term.xorb
                ),
            )
        })
}

async fn decode(cas: &dyn Cas, fetch: &XorbFetch) -> Result<DecodedChunks, CasError> {
    let bytes = cas.fetch_xorb_range(fetch).await?;
    let expected = Expected {
        num_chunks: Some(fetch.chunks.len() as usize),
        unpacked_len: None,
    };
    let xorb = fetch.xorb;
    tokio::task::spawn_blocking(move || decode_chunks(&bytes, expected, &Limits::PROTOCOL))
        .await
        .map_err(|e| CasError::storage_with(format!("decoding xorb {xorb}"), e))?
        .map_err(|e| {
            CasError::corrupt_with(format!("stored xorb {xorb}"), "its chunks do not decode", e)
        })
}

fn corrupt(file: &MerkleHash, message: String) -> CasError {
    CasError::corrupt(format!("stored file {file}"), message)
}

/// The sha256 and size of a stored file, read through once (hashed on a blocking
/// thread, not the executor).
pub(crate) async fn sha256_of(
    cas: Arc<dyn Cas>,
    file: MerkleHash,
) -> Result<([u8; 32], u64), CasError> {
    let mut rx = file_stream(cas, file, None);
    tokio::task::spawn_blocking(move || {
        let mut h = sha2::Sha256::new();
        let mut n = 0u64;
        while let Some(piece) = rx.blocking_recv() {
            let piece = piece?;
            n += piece.len() as u64;
            h.update(&piece);
        }
        Ok((h.finalize().into(), n))
    })
    .await
    .map_err(|e| CasError::storage_with(format!("hashing file {file}"), e))?
}
