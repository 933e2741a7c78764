//! What the pages keep between requests, per server (in `Shared::web`): the list of
//! repositories (reused for a few seconds, one listing at a time however many pages
//! ask), rendered READMEs by content, and the store's figures (bytes of files, bytes
//! stored) from a source the embedding program sets, refreshed in the background.
//! Imports no other module of the server but the state's types it is given.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use futures_util::FutureExt as _;
use futures_util::future::{BoxFuture, Shared};
use xet_hash::MerkleHash;
use xet_hub::{RepoRecord, RepoStore, RepoType};
use xet_web::markdown::Readme;

/// How long the list of repositories is reused before the store is listed again.
const LISTING_TTL: Duration = Duration::from_secs(5);
/// Most rendered READMEs kept.
const README_CACHE: usize = 256;
/// How old the store's figures may be before they are computed again.
const FIGURES_TTL: Duration = Duration::from_secs(60);

/// What the store holds: the bytes of its files (what users would download, each
/// distinct file once) and the bytes stored for them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreFigures {
    pub file_bytes: u64,
    pub stored_bytes: u64,
}

/// Computes the store's figures (`xet serve` sets it to the store's statistics).
pub type FiguresSource =
    Arc<dyn Fn() -> BoxFuture<'static, Result<StoreFigures, String>> + Send + Sync>;

/// The figures last computed, and when.
type Computed = Arc<Mutex<Option<(Instant, Result<StoreFigures, String>)>>>;

type Listing = Shared<BoxFuture<'static, Result<Arc<Vec<RepoRecord>>, String>>>;

/// The pages' caches (module docs).
#[derive(Default)]
pub struct WebCache {
    listing: Mutex<Option<(Instant, Listing)>>,
    readmes: Mutex<HashMap<MerkleHash, Arc<Readme>>>,
    figures_source: OnceLock<FiguresSource>,
    figures: Computed,
    computing: Arc<AtomicBool>,
}

impl WebCache {
    /// Every record, listed at most once per [`LISTING_TTL`] (callers share one
    /// listing; no lock is held while it runs).
    pub(crate) async fn records(
        &self,
        store: &Arc<dyn RepoStore>,
    ) -> Result<Arc<Vec<RepoRecord>>, String> {
        let fut = {
            let mut slot = self.listing.lock().unwrap_or_else(|p| p.into_inner());
            match slot.as_ref() {
                Some((at, f)) if at.elapsed() < LISTING_TTL => f.clone(),
                _ => {
                    let store = Arc::clone(store);
                    let f = async move {
                        let mut all = store.buckets().await?;
                        for kind in [RepoType::Model, RepoType::Dataset, RepoType::Space] {
                            all.extend(store.repos(kind).await?);
                        }
                        Ok(Arc::new(all))
                    }
                    .map(|r: Result<_, xet_cas::CasError>| r.map_err(|e| xet_cas::error_chain(&e)))
                    .boxed()
                    .shared();
                    *slot = Some((Instant::now(), f.clone()));
                    f
                }
            }
        };
        let out = fut.await;
        if out.is_err() {
            // A failed listing is not kept.
            *self.listing.lock().unwrap_or_else(|p| p.into_inner()) = None;
        }
        out
    }

    pub(crate) fn readme(&self, file: &MerkleHash) -> Option<Arc<Readme>> {
        let cache = self.readmes.lock().unwrap_or_else(|p| p.into_inner());
        cache.get(file).cloned()
    }

    pub(crate) fn keep_readme(&self, file: MerkleHash, readme: Readme) -> Arc<Readme> {
        let readme = Arc::new(readme);
        let mut cache = self.readmes.lock().unwrap_or_else(|p| p.into_inner());
        if cache.len() >= README_CACHE {
            cache.clear();
        }
        cache.insert(file, Arc::clone(&readme));
        readme
    }

    /// Set where the front page's figures come from (once; later calls are ignored).
    pub fn set_figures_source(&self, source: FiguresSource) {
        let _ = self.figures_source.set(source);
    }

    /// The last figures computed and their age; starts computing them (in the
    /// background, one computation at a time) when there are none or they are older
    /// than [`FIGURES_TTL`]. `None` without a source.
    fn latest_figures(&self) -> Option<Option<(Duration, Result<StoreFigures, String>)>> {
        let source = self.figures_source.get()?;
        let last = self
            .figures
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .as_ref()
            .map(|(at, f)| (at.elapsed(), f.clone()));
        let stale = last.as_ref().is_none_or(|(age, _)| *age >= FIGURES_TTL);
        if stale && !self.computing.swap(true, Ordering::AcqRel) {
            let source = Arc::clone(source);
            let computing = Arc::clone(&self.computing);
            let work = source();
            let slot = Arc::clone(&self.figures);
            tokio::spawn(async move {
                let f = work.await;
                *slot.lock().unwrap_or_else(|p| p.into_inner()) = Some((Instant::now(), f));
                computing.store(false, Ordering::Release);
            });
        }
        Some(last)
    }
}

/// The front page's figures, in human units, or `None` without a source.
pub(crate) fn figures(web: &WebCache) -> Option<xet_web::Figures> {
    let dash = || "…".to_string();
    Some(match web.latest_figures()? {
        None => xet_web::Figures {
            file_bytes: dash(),
            stored_bytes: dash(),
            ratio: dash(),
            note: "The store's figures are being computed: reload in a moment.".into(),
        },
        Some((_, Err(e))) => xet_web::Figures {
            file_bytes: dash(),
            stored_bytes: dash(),
            ratio: dash(),
            note: format!("The store's figures could not be computed: {e}"),
        },
        Some((age, Ok(f))) => xet_web::Figures {
            file_bytes: xet_web::human_size(f.file_bytes),
            stored_bytes: xet_web::human_size(f.stored_bytes),
            ratio: if f.stored_bytes == 0 {
                "–".into()
            } else {
                format!("{:.2}×", f.file_bytes as f64 / f.stored_bytes as f64)
            },
            note: format!(
                "Distinct files of every repository and bucket, and the bytes stored for them; as of {} s ago.",
                age.as_secs()
            ),
        },
    })
}
