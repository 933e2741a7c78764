//! The `xet` binary as users run it (child processes, real servers, the reference clients), and the tidy checks of the workspace.
//! One test binary for the crate (one build, one link); a module per former file.

mod common;

mod bundle;
mod chaos;
mod chaos_gc;
mod cli_changing_input;
mod cli_formats;
mod cli_hub;
mod cli_log;
mod cli_resume;
mod cli_transfer;
mod cli_usage;
mod hub_api;
mod hub_buckets;
mod hub_dataframes;
mod hub_serve;
mod hub_sync;
mod interop_cli;
mod mount;
mod s3_serve;
mod serve_limits;
mod store_gc;
mod tidy;
mod web_pages;
