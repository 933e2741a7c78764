//! The `xet` command line. The binary's `main` only calls [`main`].
//!
//! Exit codes are part of the interface (see [`exit`]); `--json` switches every command
//! to one JSON document on stdout; progress goes to stderr and only on a terminal.

mod exit;
mod formats;
mod log;
mod output;
mod progress;
mod remote;
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
        #[arg(required = true)]
        files: Vec<PathBuf>,
        /// Also compute the sha256 of each file.
        #[arg(long)]
        sha256: bool,
    },
    /// Print offset, length and hash of every chunk of a file.
    Chunk { file: PathBuf },
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
    Upload {
        /// Files and directories (recursively).
        paths: Vec<PathBuf>,
        /// Read more paths from FILE (or - for stdin), one per line.
        #[arg(long, value_name = "FILE")]
        files_from: Option<PathBuf>,
        /// Upload nothing; report how many bytes would be new and how many are already stored.
        #[arg(long)]
        dry_run: bool,
        /// Read every file, even those unchanged on disk (size, times, inode) since an
        /// earlier upload to the same CAS, which are otherwise reported without reading;
        /// such a file is chunked and hashed again, and uploaded if its content changed.
        #[arg(long)]
        rehash: bool,
        #[command(flatten)]
        remote: remote::RemoteArgs,
    },
    /// Rebuild files from their xet hashes, verified.
    Download {
        /// File hashes (hash string form).
        hashes: Vec<String>,
        /// Read more hashes from FILE (or - for stdin): "HASH" or "HASH PATH" per line.
        #[arg(long, value_name = "FILE")]
        files_from: Option<PathBuf>,
        /// Output file, directory (one file per hash), or - for stdout.
        #[arg(short, long, value_name = "PATH|DIR|-")]
        output: Option<PathBuf>,
        /// Only bytes START-END (inclusive) or START- of the file.
        #[arg(long, value_name = "START-END")]
        range: Option<String>,
        /// The file's size, when known.
        #[arg(long)]
        size: Option<u64>,
        /// Chunk cache limit for downloads over HTTP: bytes, or with a K, M, G or T
        /// suffix (powers of 1024); 0 turns the cache off. Default 10G.
        #[arg(long, env = "XET_CHUNK_CACHE_SIZE", value_name = "SIZE", value_parser = transfer::parse_size)]
        chunk_cache_size: Option<u64>,
        /// Give the chunk cache its own copy of what is downloaded. By default a whole
        /// file downloaded to the cache's file system is hard-linked into the cache
        /// (no second write or copy on disk); a file later changed in place then no
        /// longer serves as a cache entry (chunks are re-hashed on every cache read).
        #[arg(long, env = "XET_CHUNK_CACHE_COPIES")]
        chunk_cache_copies: bool,
        #[command(flatten)]
        remote: remote::RemoteArgs,
    },
    /// Serve a store over the CAS HTTP API (what hf_xet and `xet --endpoint` talk to).
    Serve {
        /// Store directory (default: the embedded store), or `s3://BUCKET[/PREFIX]` for
        /// S3-compatible object storage (credentials, region and endpoint from the
        /// standard AWS_* environment variables, e.g. AWS_ENDPOINT_URL).
        #[arg(long, env = "XET_STORE")]
        store: Option<PathBuf>,
        /// Address to listen on; port 0 picks a free port.
        #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR:PORT")]
        listen: String,
        /// Accepted bearer token (repeatable); prefix with `read:` for read-only.
        #[arg(long = "token", value_name = "TOKEN")]
        tokens: Vec<String>,
        /// File of tokens, one per line (`read:`/`write:` prefixes, `#` comments).
        #[arg(long, value_name = "FILE")]
        token_file: Option<PathBuf>,
        /// Base URL clients reach this server at (for presigned URLs); default: the Host header.
        #[arg(long)]
        public_url: Option<String>,
        /// Answer xorb-grant routes with 404 (clients fall back to direct xorb upload).
        #[arg(long)]
        no_grants: bool,
        /// Answer /v2 routes with 404 (clients fall back to /v1).
        #[arg(long)]
        no_v2: bool,
        /// Lifetime of presigned URLs, in seconds.
        #[arg(long, default_value_t = 3600)]
        url_ttl: u64,
        /// Endpoint of the S3-compatible server for `--store s3://…` (overrides
        /// AWS_ENDPOINT_URL); plain http is accepted for loopback addresses only, unless
        /// AWS_ALLOW_HTTP=true.
        #[arg(long, value_name = "URL")]
        s3_endpoint: Option<String>,
        /// Conditional writes (If-None-Match: *) for `--store s3://…`: auto (probe the
        /// server), on (require them), off (never; only one process may create a new store).
        #[arg(long, default_value = "auto", value_name = "auto|on|off")]
        s3_conditional_put: xet_store_s3::ConditionalPut,
        /// With `--store s3://…`: seconds between indexing files that other servers on the
        /// same bucket registered (0: only at start).
        #[arg(long, default_value_t = xet_store_s3::REFRESH_INTERVAL.as_secs(), value_name = "SECS")]
        s3_refresh_secs: u64,
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
    Inspect { file: PathBuf },
    /// Check every chunk and the xorb hash; exit non-zero with a reason if invalid.
    Verify {
        file: PathBuf,
        /// Expected xorb hash (required to check a footer-less body against a name).
        #[arg(long)]
        hash: Option<String>,
    },
}

#[derive(Subcommand, Debug)]
enum ShardAction {
    /// Print the shard's files and xorbs.
    Inspect { file: PathBuf },
    /// Check the shard's structure; exit non-zero with a reason if invalid.
    Verify { file: PathBuf },
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

/// Parse arguments, run, print, and map the outcome to an exit code.
pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(c) => c,
        Err(e) => {
            let code = if e.use_stderr() {
                Code::Usage
            } else {
                Code::Ok
            };
            let _ = e.print();
            return code.into();
        }
    };
    let out = output::Out::new(cli.json, cli.quiet);
    if let Err(f) = log::init(matches!(cli.command, Command::Serve { .. }), cli.quiet) {
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
        Command::Serve {
            store,
            listen,
            tokens,
            token_file,
            public_url,
            no_grants,
            no_v2,
            url_ttl,
            s3_endpoint,
            s3_conditional_put,
            s3_refresh_secs,
        } => {
            let args = transfer::ServeArgs {
                store,
                listen,
                tokens,
                token_file,
                public_url,
                no_grants,
                no_v2,
                url_ttl_secs: url_ttl,
                s3_endpoint,
                s3_conditional_put,
                s3_refresh_secs,
            };
            runtime().and_then(|rt| rt.block_on(transfer::serve(args)))
        }
        Command::Upload {
            paths,
            files_from,
            dry_run,
            rehash,
            remote,
        } => {
            let args = transfer::UploadArgs {
                paths,
                files_from,
                dry_run,
                rehash,
                remote,
            };
            runtime().and_then(|rt| rt.block_on(transfer::upload(&out, args)))
        }
        Command::Download {
            hashes,
            files_from,
            output,
            range,
            size,
            chunk_cache_size,
            chunk_cache_copies,
            remote,
        } => {
            let args = transfer::DownloadArgs {
                hashes,
                files_from,
                output,
                range,
                size,
                chunk_cache_size,
                chunk_cache_copies,
                remote,
            };
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
