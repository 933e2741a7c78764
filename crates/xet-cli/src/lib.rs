//! The `xet` command line. The binary's `main` only calls [`main`].
//!
//! Exit codes are part of the interface (see [`Code`]); `--json` switches every command
//! to one JSON document on stdout; progress goes to stderr and only on a terminal.

mod buckets;
mod bundle;
mod dest;
mod exit;
mod formats;
mod hub;
mod hub_client;
mod log;
mod mount;
mod output;
mod progress;
mod remote;
mod run;
mod store_cmd;
mod sync;
mod transfer;

use clap::{Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

pub use exit::{Code, Failure};

#[derive(Parser, Debug)]
#[command(
    name = "xet",
    version,
    about = "XET content-addressable storage: upload, download, serve, inspect"
)]
struct Cli {
    /// Print one JSON document on stdout instead of text.
    #[arg(long, global = true)]
    json: bool,
    /// Print less: only hashes, or only errors.
    #[arg(short, long, global = true)]
    quiet: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print each file's xet hash and size without storing anything.
    Hash {
        /// Files to hash.
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also compute the sha256 of each file.
        #[arg(long)]
        sha256: bool,
    },
    /// Print offset, length and hash of every chunk of a file.
    Chunk {
        /// File to split into chunks.
        file: PathBuf,
    },
    /// Inspect or verify a xorb (footered, or a footer-less upload body).
    Xorb {
        #[command(subcommand)]
        action: XorbAction,
    },
    /// Inspect or verify a shard (upload form or stored form).
    Shard {
        #[command(subcommand)]
        action: ShardAction,
    },
    /// Chunk, dedupe and upload files and directories; print each file's xet hash.
    Upload(transfer::UploadArgs),
    /// Rebuild files from their xet hashes, verified; or download hf://NS/NAME[@REV][/PATH]
    /// from the Hugging Face Hub (into its cache, or -o DIR).
    Download(transfer::DownloadArgs),
    /// List a Hub repository or bucket: hf://[datasets/|spaces/]NS/NAME[@REV][/PATH],
    /// hf://buckets/NS/NAME[/PATH].
    Ls(hub::LsArgs),
    /// Copy one file into, out of or between storage buckets (hf://buckets/NS/NAME/PATH;
    /// `-` for standard input or output).
    Cp(buckets::CpArgs),
    /// Remove files from a storage bucket (-r: everything below a folder).
    Rm(buckets::RmArgs),
    /// Make a bucket folder like a local folder, or a local folder like a bucket folder
    /// (the rules and plan files of `hf sync`; downloads keep the bucket's times).
    Sync(sync::SyncArgs),
    /// A Hub repository (read-only) or bucket (read-write) as a local folder over FUSE,
    /// fetched lazily; runs until SIGINT, SIGTERM or `umount DIR`.
    Mount(mount::MountArgs),
    /// Serve a store over the CAS HTTP API (what hf_xet and `xet --endpoint` talk to).
    Serve(transfer::ServeArgs),
    /// A store's lifecycle: gc (reclaim what nothing references), check, stats.
    Store {
        #[command(subcommand)]
        action: store_cmd::StoreAction,
    },
    /// Bundles: a store's objects in one file (create, import, ls, verify); `--store
    /// BUNDLE` serves one read-only.
    Bundle {
        #[command(subcommand)]
        action: bundle::BundleAction,
    },
    /// Inspect or empty the chunk cache that downloads use.
    Cache {
        #[command(subcommand)]
        action: CacheAction,
        /// Cache directory.
        #[arg(long, env = "XET_CACHE", global = true)]
        cache_dir: Option<PathBuf>,
    },
}

#[derive(Subcommand, Debug)]
enum CacheAction {
    /// Entries, chunks and bytes in the chunk cache.
    Stats,
    /// Remove every cached chunk.
    Clear,
}

#[derive(Subcommand, Debug)]
enum XorbAction {
    /// Print the xorb's hash and its chunks.
    Inspect {
        /// Xorb file (footered, or a footer-less upload body).
        file: PathBuf,
    },
    /// Check every chunk and the xorb hash; exit non-zero with a reason if invalid.
    Verify {
        /// Xorb file (footered, or a footer-less upload body).
        file: PathBuf,
        /// Expected xorb hash (required to check a footer-less body against a name).
        #[arg(long)]
        hash: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ShardAction {
    /// Print the shard's files and xorbs.
    Inspect {
        /// Shard file (upload form or stored form).
        file: PathBuf,
    },
    /// Check the shard's structure; exit non-zero with a reason if invalid.
    Verify {
        /// Shard file (upload form or stored form).
        file: PathBuf,
    },
}

fn runtime() -> Result<tokio::runtime::Runtime, Failure> {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| {
            Failure::new(
                Code::Failure,
                anyhow::Error::new(e).context("starting the async runtime"),
            )
        })
}

/// Whether `--json` is on the command line (before any `--`): what a parse error
/// honours, the parse having failed.
fn json_requested() -> bool {
    std::env::args_os()
        .skip(1)
        .take_while(|a| a != "--")
        .any(|a| a == "--json")
}

/// A clap error's explanation on one line, without its "error:" prefix and the usage
/// and pointer to `--help` that follow.
fn clap_message(e: &clap::Error) -> String {
    let text = e.render().to_string();
    let lines: Vec<&str> = text
        .lines()
        .take_while(|l| !l.starts_with("Usage:") && !l.starts_with("For more information"))
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    let joined = lines.join(" ");
    joined
        .strip_prefix("error: ")
        .unwrap_or(&joined)
        .to_string()
}

/// Parse arguments, run, print, and map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        // --help and --version.
        Err(e) if !e.use_stderr() => {
            let _ = e.print();
            return Code::Ok.into();
        }
        Err(e) => {
            if json_requested() {
                let f = Failure::new(Code::Usage, anyhow::anyhow!(clap_message(&e)));
                output::Out::new(true, false).error_doc(&f);
            }
            // Clap's own text, with the usage, for whoever reads stderr.
            let _ = e.print();
            return Code::Usage.into();
        }
    };
    let out = output::Out::new(cli.json, cli.quiet);
    if let Err(f) = log::init(matches!(cli.command, Command::Serve(_)), cli.quiet) {
        out.error(&f);
        return f.code.into();
    }
    let result = match cli.command {
        Command::Hash { files, sha256 } => formats::hash(&out, &files, sha256),
        Command::Chunk { file } => formats::chunk(&out, &file),
        Command::Xorb {
            action: XorbAction::Inspect { file },
        } => formats::xorb_inspect(&out, &file),
        Command::Xorb {
            action: XorbAction::Verify { file, hash },
        } => formats::xorb_verify(&out, &file, hash.as_deref()),
        Command::Shard {
            action: ShardAction::Inspect { file },
        } => formats::shard_inspect(&out, &file),
        Command::Shard {
            action: ShardAction::Verify { file },
        } => formats::shard_verify(&out, &file),
        Command::Cache { action, cache_dir } => {
            transfer::cache(&out, matches!(action, CacheAction::Clear), &cache_dir)
        }
        Command::Serve(args) => runtime().and_then(|rt| rt.block_on(transfer::serve(&out, args))),
        Command::Upload(args) => runtime().and_then(|rt| rt.block_on(transfer::upload(&out, args))),
        Command::Ls(args) => runtime().and_then(|rt| rt.block_on(hub::ls(&out, args))),
        Command::Cp(args) => runtime().and_then(|rt| rt.block_on(buckets::cp(&out, args))),
        Command::Rm(args) => runtime().and_then(|rt| rt.block_on(buckets::rm(&out, args))),
        Command::Sync(args) => runtime().and_then(|rt| rt.block_on(sync::sync(&out, args))),
        Command::Mount(args) => runtime().and_then(|rt| rt.block_on(mount::mount(&out, args))),
        Command::Store { action } => {
            runtime().and_then(|rt| rt.block_on(store_cmd::run(&out, action)))
        }
        Command::Bundle { action } => {
            runtime().and_then(|rt| rt.block_on(bundle::run(&out, action)))
        }
        Command::Download(args) => {
            runtime().and_then(|rt| rt.block_on(transfer::download(&out, args)))
        }
    };
    match result {
        Ok(()) => Code::Ok.into(),
        Err(f) => {
            out.error(&f);
            f.code.into()
        }
    }
}
