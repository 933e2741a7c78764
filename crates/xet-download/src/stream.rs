//! A stored file's bytes (or a byte range of them), rebuilt from the CAS term by term and
//! handed out in order through a bounded channel: what a server streams as a response
//! body, and the input of a sha256 check ([`file_sha256`]).
//!
//! Unlike [`crate::download`] this writes nothing and checks no file hash (a range
//! cannot be checked against it, and the bytes are handed out before the last chunk is
//! in). What it checks is what a range download checks: each fetched range is decoded
//! by the pipeline's decoder on a blocking thread (every chunk header, the chunk count
//! the reconstruction lists, the declared sizes, decompression bounded by them), and
//! every term must decode to its stated `unpacked_length`; [`file_stream_checked`] also
//! hashes every chunk and compares it with its xorb's ([`ChunkHashes`]) before any of its
//! fetch is handed out. An answer that breaks any of
//! these, or whose terms name chunks no fetch covers, ends the stream with
//! [`CasError::Corrupt`] naming the file and the xorb; nothing in a hostile
//! reconstruction can make it panic or read past what was fetched.

use std::sync::Arc;

use bytes::Bytes;
use sha2::Digest as _;
use tokio::sync::mpsc;
use xet_cas::{ByteRange, Cas, CasError, Reconstruction, Term, XorbFetch};
use xet_hash::MerkleHash;

use crate::chunk_hashes::{ChunkHashes, Lookup};
use crate::decode::{EachError, Piece, RangeDecoder};

/// Pieces (chunks, or parts of them) in flight between the task rebuilding a file and
/// its consumer.
const PIECES_IN_FLIGHT: usize = 4;
/// Chunks are joined into pieces of about this many bytes: a consumer woken once per
/// 64 KiB chunk spent more time switching threads than hashing (a 512 MiB commit's
/// sha256 check took 900 ms instead of 566).
const PIECE_BYTES: usize = 1 << 20;

/// Slices of chunks waiting to go out as one piece.
#[derive(Default)]
struct Joined {
    parts: Vec<Bytes>,
    len: usize,
}

impl Joined {
    fn push(&mut self, b: Bytes) {
        self.len += b.len();
        self.parts.push(b);
    }

    /// The waiting bytes as one piece (no copy for a single slice).
    fn take(&mut self) -> Bytes {
        self.len = 0;
        if self.parts.len() == 1 {
            return self.parts.pop().expect("one part");
        }
        let mut out = bytes::BytesMut::with_capacity(self.parts.iter().map(Bytes::len).sum());
        for p in self.parts.drain(..) {
            out.extend_from_slice(&p);
        }
        out.freeze()
    }
}

/// Decoded bytes handed from the decoder to the stream at once (and decoded in
/// parallel on rayon, above 1 MiB).
const DECODE_BATCH: u64 = 8 << 20;

/// The bytes of `file`, or of `range` of it, in order, as a bounded stream of pieces (at
/// most a few in flight). The first error ends the stream: the CAS's own (the file or a
/// xorb not found, a range not satisfiable, ...) as it was, or [`CasError::Corrupt`]
/// for data or a reconstruction that does not hold together. A range reaching past the
/// end of the file yields what the CAS's reconstruction covers (a store clamps it).
/// The empty file (`MerkleHash::default()`) yields nothing, without a request.
///
/// The work runs on a task of its own (call within a tokio runtime); dropping the
/// receiver stops it at the next piece, quietly. Consecutive terms served by one fetch
/// are decoded once, and the next fetch is read and decoded while the current one is
/// handed out, so a stream holds at most two decoded fetches (64 MiB each at most) and
/// four pieces of about 1 MiB.
pub fn file_stream(
    cas: Arc<dyn Cas>,
    file: MerkleHash,
    range: Option<ByteRange>,
) -> mpsc::Receiver<Result<Bytes, CasError>> {
    file_stream_checked(cas, file, range, None)
}

/// [`file_stream`], with every chunk also checked against its xorb's chunk hashes
/// where `chunk_hashes` is given (see [`crate::DownloadOptions::chunk_hashes`]): each
/// xorb's are looked up while its range is fetched, and a chunk whose hash differs
/// ends the stream with [`CasError::Corrupt`] before any of its fetch is handed out.
pub fn file_stream_checked(
    cas: Arc<dyn Cas>,
    file: MerkleHash,
    range: Option<ByteRange>,
    chunk_hashes: Option<Arc<ChunkHashes>>,
) -> mpsc::Receiver<Result<Bytes, CasError>> {
    let (tx, rx) = mpsc::channel(PIECES_IN_FLIGHT);
    tokio::spawn(async move {
        let source = Source { cas, chunk_hashes };
        if let Err(e) = pump(source, &file, range, &tx).await {
            // The receiver may be gone: nothing to tell then.
            let _ = tx.send(Err(e)).await;
        }
    });
    rx
}

/// The sha256 and size of a stored file, read through [`file_stream`] once and hashed
/// on a blocking thread (not the executor).
pub async fn file_sha256(cas: Arc<dyn Cas>, file: MerkleHash) -> Result<([u8; 32], u64), CasError> {
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

/// A fetched range decoded: each chunk's bytes, in order.
type Chunks = Vec<Bytes>;

/// A fetch being decoded on a task of its own.
type Decoding = tokio::task::JoinHandle<Result<Chunks, CasError>>;

/// Where a stream's chunks come from, and what they are checked against.
#[derive(Clone)]
struct Source {
    cas: Arc<dyn Cas>,
    chunk_hashes: Option<Arc<ChunkHashes>>,
}

fn start_decode(source: &Source, file: &MerkleHash, fetch: &XorbFetch) -> Decoding {
    let (source, file, fetch) = (source.clone(), *file, fetch.clone());
    tokio::spawn(async move { decode(&source, &file, &fetch).await })
}

async fn finish_decode(d: Decoding, file: &MerkleHash) -> Result<Chunks, CasError> {
    d.await
        .map_err(|e| CasError::storage_with(format!("decoding a xorb of file {file}"), e))?
}

/// The fetches the terms use, each once, in the order first used: what is decoded.
fn fetch_order<'a>(
    rec: &'a Reconstruction,
    file: &MerkleHash,
) -> Result<Vec<&'a XorbFetch>, CasError> {
    let mut out: Vec<&XorbFetch> = Vec::new();
    for term in &rec.terms {
        let f = fetch_of(rec, term, file)?;
        if out.last() != Some(&f) {
            out.push(f);
        }
    }
    Ok(out)
}

async fn pump(
    source: Source,
    file: &MerkleHash,
    range: Option<ByteRange>,
    tx: &mpsc::Sender<Result<Bytes, CasError>>,
) -> Result<(), CasError> {
    if *file == MerkleHash::default() {
        return Ok(());
    }
    let rec = source.cas.reconstruction(file, range).await?;
    let order = fetch_order(&rec, file)?;
    let mut skip = rec.offset_into_first_range;
    let mut remaining = range.map_or(u64::MAX, |r| r.len());
    // The fetch decoded for the current terms, and the next one decoding meanwhile, so
    // that a consumer never waits for a whole xorb to be read and decoded (one fetch
    // ahead: at most two decoded fetches are held).
    let mut decoded: Option<(&XorbFetch, Chunks)> = None;
    let mut upcoming = order.iter().skip(1);
    let mut ahead: Option<(&XorbFetch, Decoding)> = None;
    let mut joined = Joined::default();
    let result = async {
        for term in &rec.terms {
            if remaining == 0 || tx.is_closed() {
                break;
            }
            let fetch = fetch_of(&rec, term, file)?;
            let chunks = match decoded.take() {
                Some((f, c)) if f == fetch => c,
                _ => {
                    let d = match ahead.take() {
                        Some((f, d)) if f == fetch => d,
                        other => {
                            if let Some((_, d)) = other {
                                d.abort();
                            }
                            start_decode(&source, file, fetch)
                        }
                    };
                    // Each new fetch is the next of `order`: start the one after it.
                    ahead = upcoming
                        .next()
                        .map(|f| (*f, start_decode(&source, file, f)));
                    finish_decode(d, file).await?
                }
            };
            for chunk in term_chunks(&chunks, fetch, term, file)? {
                if remaining == 0 {
                    break;
                }
                let len = chunk.len() as u64;
                if skip >= len {
                    skip -= len;
                    continue;
                }
                // `skip < len` and `take <= len - skip`: both fit the chunk's usize length.
                let from = skip as usize;
                let take = (len - skip).min(remaining);
                skip = 0;
                remaining -= take;
                joined.push(chunk.slice(from..from + take as usize));
                if joined.len >= PIECE_BYTES && tx.send(Ok(joined.take())).await.is_err() {
                    return Ok(());
                }
            }
            decoded = Some((fetch, chunks));
        }
        if joined.len > 0 {
            // A closed receiver means nobody wants the rest.
            let _ = tx.send(Ok(joined.take())).await;
        }
        Ok(())
    }
    .await;
    // Stopped early (done with a range, the receiver gone, an error): the decode ahead
    // is not needed.
    if let Some((_, d)) = ahead {
        d.abort();
    }
    result
}

/// The fetch that covers `term`: it names the same xorb and contains the term's
/// chunks, which are at least one.
fn fetch_of<'a>(
    rec: &'a Reconstruction,
    term: &Term,
    file: &MerkleHash,
) -> Result<&'a XorbFetch, CasError> {
    if term.chunks.is_empty() {
        return Err(corrupt(
            file,
            format!(
                "the reconstruction has an empty term of xorb {} (chunks {}..{})",
                term.xorb, term.chunks.start, term.chunks.end
            ),
        ));
    }
    rec.fetch_for(term).ok_or_else(|| {
        corrupt(
            file,
            format!(
                "the reconstruction has no fetch for a term of xorb {} (chunks {}..{})",
                term.xorb, term.chunks.start, term.chunks.end
            ),
        )
    })
}

/// `term`'s chunks among those of its fetch, which must add up to its
/// `unpacked_length`. Every index is checked: the fetch decoded to exactly the chunks
/// it lists, and contains the term's, but nothing here relies on either.
fn term_chunks<'a>(
    chunks: &'a [Bytes],
    fetch: &XorbFetch,
    term: &Term,
    file: &MerkleHash,
) -> Result<&'a [Bytes], CasError> {
    let mine = term
        .chunks
        .start
        .checked_sub(fetch.chunks.start)
        .zip(term.chunks.end.checked_sub(fetch.chunks.start))
        .and_then(|(a, b)| chunks.get(a as usize..b as usize))
        .ok_or_else(|| {
            corrupt(
                file,
                format!(
                    "a term of xorb {} names chunks {}..{}, outside the {} chunks fetched from {}",
                    term.xorb,
                    term.chunks.start,
                    term.chunks.end,
                    chunks.len(),
                    fetch.chunks.start
                ),
            )
        })?;
    let len: u64 = mine.iter().map(|c| c.len() as u64).sum();
    if len != term.unpacked_length {
        return Err(corrupt(
            file,
            format!(
                "a term of xorb {} (chunks {}..{}) decodes to {len} bytes, not {}",
                term.xorb, term.chunks.start, term.chunks.end, term.unpacked_length
            ),
        ));
    }
    Ok(mine)
}

/// Fetch `fetch`'s range and decode it on a blocking thread: exactly the chunks it
/// lists, in exactly its bytes, and with chunk hashes to check against, each chunk's
/// hash equal to its xorb's.
async fn decode(source: &Source, file: &MerkleHash, fetch: &XorbFetch) -> Result<Chunks, CasError> {
    // Worded as the pipeline words it (`write::range_error`): the decoder's message
    // counts chunks from the start of the range.
    let bad = |chunk: Option<usize>, message: &str| {
        let chunk = chunk.map_or(String::new(), |c| {
            format!("chunk {} of ", u64::from(fetch.chunks.start) + c as u64)
        });
        corrupt(
            file,
            format!(
                "{chunk}xorb {} (fetched bytes {}..{} for chunks {}..{}): {message}",
                fetch.xorb,
                fetch.bytes.start,
                fetch.bytes.end,
                fetch.chunks.start,
                fetch.chunks.end
            ),
        )
    };
    // Checked before anything is fetched: a range no xorb can hold is refused at once.
    let decoder = RangeDecoder::new(fetch.bytes.len(), fetch.chunks.len() as usize, DECODE_BATCH)
        .map_err(|e| bad(e.chunk, &e.message))?;
    let cas = source.cas.as_ref();
    let (bytes, found) = match &source.chunk_hashes {
        None => (cas.fetch_xorb_range(fetch).await?, None),
        Some(kept) => {
            // Looked up while the range is fetched: no round trip of its own.
            let (bytes, found) =
                tokio::join!(cas.fetch_xorb_range(fetch), kept.for_fetch(cas, fetch));
            (bytes?, Some(found?))
        }
    };
    let decoder = match &found {
        Some(Lookup::Found(_)) => decoder,
        _ => decoder.without_hashes(),
    };
    let xorb = fetch.xorb;
    let (chunks, hashes) = tokio::task::spawn_blocking(move || decode_range(decoder, bytes))
        .await
        .map_err(|e| CasError::storage_with(format!("decoding xorb {xorb}"), e))?
        .map_err(|e| bad(e.chunk, &e.message))?;
    if let Some(Lookup::Found(x)) = found
        && let Some((at, want)) = x.mismatch(fetch.chunks.start, &hashes)
    {
        let got = hashes[(at - fetch.chunks.start) as usize];
        let rel = Some((at - fetch.chunks.start) as usize);
        return Err(bad(
            rel,
            &format!("its hash is {got}, the xorb's footer says {want}"),
        ));
    }
    Ok(chunks)
}

/// Feed `bytes` to `decoder` as the whole range and collect the chunks and their hashes
/// (blocking).
fn decode_range(
    mut decoder: RangeDecoder,
    bytes: Bytes,
) -> Result<(Chunks, Vec<MerkleHash>), crate::decode::DecodeError> {
    let mut chunks = Vec::new();
    let mut sink = |_first: usize, pieces: &[Piece], _ends: &[u64]| {
        chunks.extend(pieces.iter().map(|p| match p {
            Piece::Stored(b) => b.clone(),
            Piece::Decoded(v) => Bytes::copy_from_slice(v),
        }));
        Ok::<_, std::convert::Infallible>(())
    };
    let only_decode = |e: EachError<std::convert::Infallible>| match e {
        EachError::Decode(d) => d,
        EachError::Sink(never) => match never {},
    };
    decoder.feed(bytes, &mut sink).map_err(only_decode)?;
    let (hashes, _ends) = decoder.finish(&mut sink).map_err(only_decode)?;
    Ok((chunks, hashes))
}

fn corrupt(file: &MerkleHash, message: String) -> CasError {
    CasError::corrupt(format!("stored file {file}"), message)
}
