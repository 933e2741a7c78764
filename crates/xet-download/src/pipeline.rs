//! One file from request to report: [`prepare_file`] resolves the destination and asks
//! for the size and first segment ahead of the file's turn; [`download_file`] opens the
//! part ([`crate::file`]) and runs segments → groups (one fetch each,
//! [`crate::segments`]) → decode + verify → positional writes into `<dest>.part` →
//! journal ([`crate::write`]) → final check and rename, or copy to the writer
//! ([`crate::verify`]).

use std::sync::{Arc, Mutex};
use std::time::Instant;

use tokio_util::sync::CancellationToken;
use xet_cas::Reconstruction;
use xet_hash::MerkleHash;

use crate::ctx::{FileCtx, FileStats, Shared};
use crate::digest::InOrderSha256;
use crate::error::{DownloadError, Result};
use crate::fetch;
use crate::file::{
    check_empty_range, check_empty_sha256, clean_up_after_failure, download_empty,
    first_segment_and_size, links_into_cache, open_part_and_journal, report, resolve_destination,
    wanted_bytes,
};
use crate::fsio;
use crate::journal::JournalHeader;
use crate::part::Output;
use crate::plan;
use crate::segments::run_segments;
use crate::types::{DownloadRequest, FileRange, FileReport, ProgressEvent};
use crate::verify;

/// A request whose destination is resolved and whose size and first segment are known:
/// what can be asked for ahead of the file's turn ([`prepare_file`]).
pub(crate) struct Prepared {
    pub index: usize,
    file: MerkleHash,
    range: Option<FileRange>,
    output: Output,
    shown: String,
    /// `None` for the empty file.
    size: Option<u64>,
    first: Option<Reconstruction>,
    sha256: Option<[u8; 32]>,
    started: Instant,
}

impl Prepared {
    /// Bytes the download writes (the range's, for a range; 0 for the empty file).
    pub fn output_len(&self) -> u64 {
        let size = self.size.unwrap_or(0);
        match self.range {
            Some(r) => r
                .end
                .map_or(size, |e| e.saturating_add(1).min(size))
                .saturating_sub(r.start),
            None => size,
        }
    }
}

/// The first steps of one request (`index`: its position, for progress events): the
/// destination, and the size and first reconstruction segment. Nothing is written.
pub(crate) async fn prepare_file(
    shared: Arc<Shared>,
    index: usize,
    req: DownloadRequest,
) -> Result<Prepared> {
    let started = Instant::now();
    let DownloadRequest {
        file,
        dest,
        range,
        size,
        sha256,
    } = req;
    let shown = dest.display();
    let output = resolve_destination(&shared.opts, dest).await?;
    let (size, first) = if file.is_zero() {
        check_empty_range(file, range)?;
        (None, None)
    } else {
        let cancel = shared.cancel.clone();
        let known = async {
            let (size, first) = match size {
                Some(s) => (s, None),
                None if range.is_none() => first_segment_and_size(&shared, file).await?,
                None => (fetch::query_file_size(&shared, file).await?, None),
            };
            if let Some(first) = first {
                return Ok((size, Some(first)));
            }
            // The first segment, asked for as `walk_segments` would ask for it.
            let out = wanted_bytes(file, range, size)?;
            let first_len = plan::segment_len(0, shared.opts.segment_bytes);
            let query = plan::segment_query(out.start, out.end, first_len);
            let first = fetch::query_reconstruction(&shared, file, query).await?;
            Ok::<_, DownloadError>((size, Some(first)))
        };
        let (s, f) = tokio::select! {
            r = known => r?,
            _ = cancel.cancelled() => {
                return Err(DownloadError::Interrupted { file, resumable: output.writer.is_none() });
            }
        };
        (Some(s), f)
    };
    Ok(Prepared {
        index,
        file,
        range,
        output,
        shown,
        size,
        first,
        sha256,
        started,
    })
}

/// Download a prepared request.
pub(crate) async fn download_file(shared: Arc<Shared>, prepared: Prepared) -> Result<FileReport> {
    let Prepared {
        index,
        file,
        range,
        output,
        shown,
        size,
        first,
        sha256,
        started,
    } = prepared;
    let Some(size) = size else {
        check_empty_sha256(file, sha256)?;
        return download_empty(&shared, index, file, output, shown, started).await;
    };
    // `_staging` keeps a writer's temporary directory until the file is done.
    let Output {
        path: final_path,
        writer,
        staging: _staging,
    } = output;
    let resumable = writer.is_none();
    let out = wanted_bytes(file, range, size)?;
    let whole = out.start == 0 && out.end == size;
    if sha256.is_some() && !whole {
        return Err(DownloadError::InvalidRequest {
            file,
            reason: "a sha256 can only be checked for the whole file, not a range".into(),
        });
    }
    let header = JournalHeader::new(&file, size, out.start, out.end);
    let resume = resumable && shared.opts.resume;
    let opened = open_part_and_journal(&final_path, header, out.len(), resume, resumable).await?;
    let resumed: u64 = opened.done.values().map(|t| t.len).sum();
    let link_cache = links_into_cache(&shared, whole && resumable, size, &opened.part_path).await?;
    let sha256 = sha256.map(|want| {
        let resumed = opened.done.iter().map(|(&offset, t)| (offset, t.len));
        InOrderSha256::new(want, size, resumed, shared.sha256_held.clone())
    });
    shared.emit(ProgressEvent::FileStarted {
        index,
        file,
        dest: shown.clone(),
        total: out.len(),
        resumed,
    });

    let ctx = Arc::new(FileCtx {
        shared: shared.clone(),
        index,
        file,
        out,
        whole,
        link_cache,
        part: opened.part,
        part_path: opened.part_path,
        renamed: resumable,
        journal: opened.journal,
        stats: FileStats::default(),
        cache_touched: Mutex::new(Vec::new()),
        candidates: Mutex::new(Vec::new()),
        written: opened.direct.as_ref().map(fsio::DirectWriter::waiter),
        write_turn: Mutex::new(opened.direct),
        sha256,
        stop: CancellationToken::new(),
    });
    let cancel = shared.cancel.clone();
    let res = tokio::select! {
        r = run_segments(ctx.clone(), opened.done, first) => r,
        _ = cancel.cancelled() => Err(DownloadError::Interrupted { file, resumable }),
    };
    let res = match res {
        Ok(assembled) => {
            verify::verify_and_finish(&ctx, assembled, size, &final_path, writer, &shown).await
        }
        Err(e) => Err(e),
    };
    if let Err(e) = &res {
        clean_up_after_failure(&ctx, e, resumable, &opened.journal_path);
    }
    res?;
    shared.emit(ProgressEvent::FileFinished { index });
    Ok(report(&ctx, shown, resumed, started))
}
