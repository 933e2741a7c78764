//! The Hugging Face Hub client of `xet`: `hf://` addresses, the Hub API over HTTP, the
//! Hugging Face cache layout, and whole downloads and uploads by repository, with the
//! Xet parts going through `xet-download` and `xet-upload` over an [`xet_client::HttpCas`]
//! whose short-lived CAS token comes from the Hub's token routes.
//!
//! - [`address`][]: `hf://[models/|datasets/|spaces/]NS/NAME[@REV][/PATH]`;
//! - [`env`](mod@env): endpoint, token and cache location from the environment `huggingface_hub`
//!   reads;
//! - [`client`][]: [`HubClient`], the Hub API with typed errors ([`HubError`]);
//! - [`tree`][]: the files of a listing, checked;
//! - [`cache`][]: the HF cache layout (`blobs/`, `snapshots/`, `refs/`);
//! - [`download`][] and [`upload`][]: the transfers the CLI runs;
//! - [`buckets`][]: storage buckets (`hf://buckets/NS/NAME/...`), and [`events`][]: the
//!   events feed of one, what changes in it as it changes;
//! - [`sync`](mod@sync): a local folder and a bucket folder made alike (`xet sync`).

pub mod address;
pub mod bucket_transfer;
pub mod buckets;
pub mod cache;
pub mod client;
pub mod download;
pub mod env;
pub mod error;
pub mod events;
pub mod glob;
pub mod sync;
pub mod tree;
pub mod upload;
pub mod verify;

pub use address::{DEFAULT_REVISION, HfAddress};
pub use client::{HubClient, TokenKind};
pub use env::{HubEnv, HubToken, TokenOrigin};
pub use error::{ErrorKind, HubError, RepoTarget, Result};
pub use events::{BucketEvent, BucketEvents, EventsFrom};
pub use tree::{Content, EntryError, RemoteFile};
