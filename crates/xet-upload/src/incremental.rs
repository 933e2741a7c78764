//! The entry point, [`upload`]: files recorded as unchanged since an earlier upload to
//! this CAS (the records of [`crate::unchanged`]) are reported from their records, the
//! rest go through the pipeline ([`crate::pipeline::upload_files`]).
//!
//! In order: look the inputs up in the records, have the CAS confirm each record, with
//! `rehash` check the recorded files' content, upload the rest, merge both in input
//! order, and save the records of what was uploaded.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures_util::StreamExt;
use xet_cas::{Cas, CasError};

use crate::error::{Result, UploadError};
use crate::input::Input;
use crate::options::UploadOptions;
use crate::pipeline::{blocking, upload_files};
use crate::progress::Progress;
use crate::report::{FileReport, Totals, UploadReport};
use crate::unchanged::{self, Entry, Identity, Unchanged};

/// `file_size` requests confirming records at once.
const CONFIRMS_IN_FLIGHT: usize = 16;

/// One input as the records see it.
struct Looked {
    /// Its identity on disk; `None` if it is not a non-empty regular file (or the
    /// platform has no identity), which is then never recorded.
    id: Option<Identity>,
    /// The trusted record of an earlier upload of the file with that identity.
    entry: Option<Entry>,
    /// The record holds: the file is reported from it instead of being uploaded.
    unchanged: bool,
}

impl Looked {
    /// The record the file is reported from, if it holds.
    fn holding(&self) -> Option<&Entry> {
        self.entry.as_ref().filter(|_| self.unchanged)
    }
}

/// See the crate documentation.
pub async fn upload(
    cas: Arc<dyn Cas>,
    inputs: &[PathBuf],
    options: &UploadOptions,
    progress: Arc<dyn Progress>,
) -> Result<UploadReport> {
    let Some(dir) = options.cache_dir.clone() else {
        return upload_files(cas, &as_files(inputs), options, progress).await;
    };
    let started = Instant::now();
    // Taken before anything is read: a file modified after this is not trusted next time.
    let recorded_ns = unchanged::now_ns();
    let (mut known, mut looked) = look_up(&dir, inputs).await?;
    confirm_with_cas(&cas, &mut looked).await;
    let progress_for_rest: Arc<dyn Progress> = if options.rehash {
        // The check and the upload of the files that failed it form one progress.
        let counted = Arc::new(CountedProgress::new(progress.clone()));
        rehash_recorded(inputs, &mut looked, options, counted.clone()).await?;
        counted
    } else {
        progress.clone()
    };
    let rest: Vec<PathBuf> = inputs
        .iter()
        .zip(&looked)
        .filter(|(_, l)| l.holding().is_none())
        .map(|(p, _)| p.clone())
        .collect();
    let uploaded = upload_rest(cas, &rest, &dir, options, progress_for_rest).await?;
    let (files, mut totals) = merge(inputs, &looked, uploaded, !options.rehash, &*progress)?;
    if !options.dry_run {
        record_uploaded(&mut known, inputs, &looked, &files, recorded_ns);
        save_records(known).await;
    }
    totals.elapsed = started.elapsed();
    Ok(UploadReport {
        dry_run: options.dry_run,
        files,
        totals,
    })
}

fn as_files(paths: &[PathBuf]) -> Vec<Input> {
    paths.iter().cloned().map(Input::File).collect()
}

/// Upload `inputs`, files or bytes, reading every one: no records of earlier uploads are
/// looked up or kept (bytes have no identity on disk to record). The report names each
/// by [`Input::name`].
pub async fn upload_inputs(
    cas: Arc<dyn Cas>,
    inputs: &[Input],
    options: &UploadOptions,
    progress: Arc<dyn Progress>,
) -> Result<UploadReport> {
    upload_files(cas, inputs, options, progress).await
}

/// Load the records of `dir` and look up each input: files whose on-disk identity
/// matches an earlier upload to this CAS.
async fn look_up(dir: &Path, inputs: &[PathBuf]) -> Result<(Unchanged, Vec<Looked>)> {
    let (dir, inputs) = (dir.to_path_buf(), inputs.to_vec());
    blocking(move || {
        let known = Unchanged::load(&dir);
        let looked = inputs
            .iter()
            .map(|p| {
                let id = std::fs::metadata(p)
                    .ok()
                    .filter(|m| m.is_file() && m.len() > 0)
                    .and_then(|m| Identity::of(&m));
                let entry = id.as_ref().and_then(|id| known.lookup(p, id).cloned());
                Looked {
                    id,
                    entry,
                    unchanged: false,
                }
            })
            .collect();
        Ok((known, looked))
    })
    .await
}

/// A record holds only if the CAS still has the file at the recorded size.
async fn confirm_with_cas(cas: &Arc<dyn Cas>, looked: &mut [Looked]) {
    // Collected first: a stream over a borrowing iterator makes the future's `Send`
    // proof too general for the compiler when the upload runs inside an axum handler.
    let entries: Vec<_> = looked.iter().map(|l| l.entry.clone()).collect();
    let confirmed: Vec<bool> = futures_util::stream::iter(entries)
        .map(|e| {
            let cas = cas.clone();
            async move {
                match e {
                    Some(e) => {
                        matches!(cas.file_size(&e.hash).await, Ok(Some(n)) if n == e.identity.size)
                    }
                    None => false,
                }
            }
        })
        .buffered(CONFIRMS_IN_FLIGHT)
        .collect()
        .await;
    for (l, ok) in looked.iter_mut().zip(confirmed) {
        l.unchanged = ok;
    }
}

/// With `rehash`, a recorded file counts as unchanged only if it still has the recorded
/// content: its file hash is computed again (chunking and chunk hashes only, which is
/// what makes this cheaper than an upload) and must equal the recorded one. Equal file
/// hashes mean equal bytes, so the recorded sha256 and terms still hold; a file that
/// differs goes through the full upload.
async fn rehash_recorded(
    inputs: &[PathBuf],
    looked: &mut [Looked],
    options: &UploadOptions,
    progress: Arc<CountedProgress>,
) -> Result<()> {
    let check: Vec<(PathBuf, Entry)> = inputs
        .iter()
        .zip(looked.iter())
        .filter_map(|(p, l)| l.holding().map(|e| (p.clone(), e.clone())))
        .collect();
    if check.is_empty() {
        return Ok(());
    }
    progress.start(
        check.len(),
        check.iter().map(|(_, e)| e.identity.size).sum(),
    );
    let cancel = options.cancel.clone().unwrap_or_default();
    let same: Vec<bool> = blocking(move || {
        let mut same = Vec::with_capacity(check.len());
        for (path, e) in &check {
            let mut observe = |n: u64| {
                progress.processed(n);
                !cancel.is_cancelled()
            };
            match crate::scan::scan_file_observed(path, false, &mut observe) {
                Ok(s) => same.push(s.size == e.identity.size && s.file_hash() == e.hash),
                Err(_) if cancel.is_cancelled() => return Err(UploadError::Interrupted),
                // Unreadable now: the upload reports it.
                Err(_) => same.push(false),
            }
        }
        Ok(same)
    })
    .await?;
    let checked = looked.iter_mut().filter(|l| l.holding().is_some());
    for (l, same) in checked.zip(same) {
        l.unchanged = same;
    }
    Ok(())
}

/// Upload the files not taken as unchanged (an empty report if there are none).
async fn upload_rest(
    cas: Arc<dyn Cas>,
    rest: &[PathBuf],
    cache_dir: &Path,
    options: &UploadOptions,
    progress: Arc<dyn Progress>,
) -> Result<UploadReport> {
    if rest.is_empty() {
        return Ok(UploadReport {
            dry_run: options.dry_run,
            files: Vec::new(),
            totals: Totals::default(),
        });
    }
    let rest = as_files(rest);
    match upload_files(cas.clone(), &rest, options, progress.clone()).await {
        // The shard named a xorb that dedup against the local shard cache (or the resume
        // journal) took as stored, and the CAS lacks it (a store deleted and made anew at
        // the same place, emptied by its operator, or garbage-collected): the cache
        // describes another store. Drop it and upload again, once.
        Err(UploadError::Cas(CasError::MissingXorb { hash })) => {
            let dir = cache_dir.to_path_buf();
            let dropped = blocking(move || crate::cache::drop_shards(&dir)).await?;
            tracing::warn!(
                "the CAS does not hold xorb {hash}, which the local shard cache refers to; \
                 dropped {dropped} cached shards and the resume journal, uploading again"
            );
            // The second attempt's `start` adds to the first's.
            let progress = Arc::new(CountedProgress::new(progress));
            upload_files(cas, &rest, options, progress).await
        }
        r => r,
    }
}

/// The recorded and the uploaded files in input order, with totals covering both.
/// `trusted`: the records were taken as they are (not checked by `rehash`).
fn merge(
    inputs: &[PathBuf],
    looked: &[Looked],
    uploaded: UploadReport,
    trusted: bool,
    progress: &dyn Progress,
) -> Result<(Vec<FileReport>, Totals)> {
    let mut uploaded_files = uploaded.files.into_iter();
    let mut totals = uploaded.totals;
    let mut files = Vec::with_capacity(inputs.len());
    for (path, l) in inputs.iter().zip(looked) {
        match l.holding() {
            Some(e) => {
                let f = recorded_report(path, e);
                progress.file_done(&f);
                totals.files += 1;
                if trusted {
                    totals.files_unchanged += 1;
                } else {
                    totals.files_verified += 1;
                }
                totals.bytes += f.size;
                totals.deduped_bytes += f.size;
                files.push(f);
            }
            None => files.push(uploaded_files.next().ok_or_else(|| {
                UploadError::Internal("upload reported fewer files than it was given".into())
            })?),
        }
    }
    Ok((files, totals))
}

/// A file reported from its record: all of it already stored.
fn recorded_report(path: &Path, e: &Entry) -> FileReport {
    FileReport {
        path: path.to_path_buf(),
        hash: e.hash,
        size: e.identity.size,
        sha256: e.sha256.clone(),
        new_bytes: 0,
        deduped_bytes: e.identity.size,
        terms: e.terms,
    }
}

/// Record the uploaded files of `files` (all inputs, in input order) for next time,
/// each under the identity it had before it was read; forget those without one or whose
/// size changed meanwhile.
fn record_uploaded(
    known: &mut Unchanged,
    inputs: &[PathBuf],
    looked: &[Looked],
    files: &[FileReport],
    recorded_ns: i128,
) {
    for ((path, l), f) in inputs.iter().zip(looked).zip(files) {
        if l.holding().is_some() {
            continue;
        }
        match l.id {
            Some(id) if id.size == f.size => known.record(
                path,
                Entry {
                    identity: id,
                    hash: f.hash,
                    sha256: f.sha256.clone(),
                    terms: f.terms,
                    recorded_ns,
                },
            ),
            _ => known.forget(path),
        }
    }
}

/// Save the records; a failure only costs reading the files again next time.
async fn save_records(known: Unchanged) {
    if let Err(e) = blocking(move || known.save()).await {
        tracing::warn!("cannot record the uploaded files' identities: {e}");
    }
}

/// Passes events on, adding the files and bytes of every `start` to those before: the
/// `rehash` check of recorded files and the upload of the rest form one progress.
struct CountedProgress {
    inner: Arc<dyn Progress>,
    started: Mutex<(usize, u64)>,
}

impl CountedProgress {
    fn new(inner: Arc<dyn Progress>) -> Self {
        CountedProgress {
            inner,
            started: Mutex::new((0, 0)),
        }
    }
}

impl Progress for CountedProgress {
    fn start(&self, files: usize, total_bytes: u64) {
        let (f, b) = {
            let mut s = self.started.lock().unwrap_or_else(|e| e.into_inner());
            s.0 += files;
            s.1 += total_bytes;
            *s
        };
        self.inner.start(f, b);
    }
    fn processed(&self, bytes: u64) {
        self.inner.processed(bytes);
    }
    fn uploaded(&self, bytes: u64) {
        self.inner.uploaded(bytes);
    }
    fn file_done(&self, file: &FileReport) {
        self.inner.file_done(file);
    }
}

#[cfg(all(test, unix))]
mod tests {
    use super::*;
    use xet_hash::MerkleHash;

    #[derive(Default)]
    struct Log(Mutex<Vec<(usize, u64)>>, Mutex<Vec<PathBuf>>);

    impl Progress for Log {
        fn start(&self, files: usize, total_bytes: u64) {
            self.0.lock().unwrap().push((files, total_bytes));
        }
        fn file_done(&self, file: &FileReport) {
            self.1.lock().unwrap().push(file.path.clone());
        }
    }

    #[test]
    fn counted_progress_adds_up_its_starts() {
        let log = Arc::new(Log::default());
        let counted = CountedProgress::new(log.clone());
        counted.start(2, 100);
        counted.start(3, 50);
        assert_eq!(*log.0.lock().unwrap(), vec![(2, 100), (5, 150)]);
    }

    fn uploaded(path: &str, size: u64) -> FileReport {
        FileReport {
            path: path.into(),
            hash: MerkleHash::from_bytes([size as u8; 32]),
            size,
            sha256: String::new(),
            new_bytes: size,
            deduped_bytes: 0,
            terms: 1,
        }
    }

    #[test]
    fn merge_keeps_input_order_and_counts_recorded_files() {
        let dir = tempfile::tempdir().unwrap();
        let b = dir.path().join("b");
        std::fs::write(&b, b"recorded").unwrap();
        let id = Identity::of(&std::fs::metadata(&b).unwrap()).unwrap();
        let entry = Entry {
            identity: id,
            hash: MerkleHash::from_bytes([7; 32]),
            sha256: "ab".into(),
            terms: 2,
            recorded_ns: 0,
        };
        let inputs: Vec<PathBuf> = vec!["a".into(), b.clone(), "c".into()];
        let looked = vec![
            Looked {
                id: None,
                entry: None,
                unchanged: false,
            },
            Looked {
                id: Some(id),
                entry: Some(entry.clone()),
                unchanged: true,
            },
            // A record the CAS did not confirm: uploaded.
            Looked {
                id: None,
                entry: Some(entry),
                unchanged: false,
            },
        ];
        let report = |files: Vec<FileReport>| UploadReport {
            dry_run: false,
            totals: Totals {
                files: files.len(),
                bytes: files.iter().map(|f| f.size).sum(),
                ..Totals::default()
            },
            files,
        };
        let log = Log::default();
        let rest = report(vec![uploaded("a", 10), uploaded("c", 20)]);
        let (files, totals) = merge(&inputs, &looked, rest, true, &log).unwrap();
        let paths: Vec<&Path> = files.iter().map(|f| f.path.as_path()).collect();
        assert_eq!(paths, [Path::new("a"), &b, Path::new("c")]);
        assert_eq!((files[1].new_bytes, files[1].deduped_bytes), (0, id.size));
        assert_eq!(
            *log.1.lock().unwrap(),
            vec![b.clone()],
            "recorded files are done"
        );
        assert_eq!((totals.files, totals.files_unchanged), (3, 1));
        assert_eq!(totals.bytes, 30 + id.size);
        assert_eq!(totals.deduped_bytes, id.size);

        // Checked by `rehash` rather than trusted.
        let rest = report(vec![uploaded("a", 10), uploaded("c", 20)]);
        let (_, totals) = merge(&inputs, &looked, rest, false, &log).unwrap();
        assert_eq!((totals.files_unchanged, totals.files_verified), (0, 1));

        // An upload reporting fewer files than it was given is a bug, not a short report.
        let short = merge(
            &inputs,
            &looked,
            report(vec![uploaded("a", 10)]),
            true,
            &log,
        );
        assert!(matches!(short, Err(UploadError::Internal(_))));
    }
}
