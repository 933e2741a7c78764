//! The `xet` command line. The binary's `main` only calls [`main`].
//!
//! Exit codes are part of the interface (see [`exit`]); `--json` switches every command
//! to one JSON document on stdout; progress goes to stderr and only on a terminal.

mod exit;
mod formats;
mod output;
mod scan;

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
    };
    match result {
        Ok(()) => Code::Ok.into(),
        Err(f) => {
            out.error(&f);
            f.code.into()
        }
    }
}
