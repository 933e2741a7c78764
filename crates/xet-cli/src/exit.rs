//! Exit codes: stable, documented in the README, the same for every command.

use std::process::ExitCode;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Code {
    /// Success.
    Ok = 0,
    /// Something failed that has no more specific code.
    Failure = 1,
    /// Bad flags or arguments.
    Usage = 2,
    /// An input file could not be read or is invalid (includes `verify` failures).
    Input = 3,
    /// The token was missing, wrong, or lacks permission.
    Auth = 4,
    /// The server rejected a request (4xx other than auth), or an object was not found.
    Rejected = 5,
    /// The network or server failed after every retry.
    Network = 6,
    /// Downloaded data failed verification.
    Corrupt = 7,
    /// A write to a store that takes none: a bundle (`--store BUNDLE`), or a server
    /// answering 405 (one serving a bundle).
    ReadOnly = 8,
    /// Interrupted (Ctrl-C / SIGTERM); rerunning resumes.
    Interrupted = 130,
}

impl Code {
    /// The code a child `xet` exited with (any other value: [`Code::Failure`]).
    pub fn from_exit(code: Option<i32>) -> Code {
        [
            Code::Ok,
            Code::Failure,
            Code::Usage,
            Code::Input,
            Code::Auth,
            Code::Rejected,
            Code::Network,
            Code::Corrupt,
            Code::ReadOnly,
            Code::Interrupted,
        ]
        .into_iter()
        .find(|c| Some(*c as i32) == code)
        .unwrap_or(Code::Failure)
    }

    pub fn name(self) -> &'static str {
        match self {
            Code::Ok => "ok",
            Code::Failure => "failure",
            Code::Usage => "usage",
            Code::Input => "input",
            Code::Auth => "auth",
            Code::Rejected => "rejected",
            Code::Network => "network",
            Code::Corrupt => "corrupt",
            Code::ReadOnly => "read_only",
            Code::Interrupted => "interrupted",
        }
    }
}

impl From<Code> for ExitCode {
    fn from(c: Code) -> ExitCode {
        ExitCode::from(c as u8)
    }
}

/// A failed command: what to print and which code to exit with.
#[derive(Debug)]
pub struct Failure {
    pub code: Code,
    pub error: anyhow::Error,
}

impl Failure {
    pub fn new(code: Code, error: impl Into<anyhow::Error>) -> Self {
        Failure {
            code,
            error: error.into(),
        }
    }
    pub fn input(error: impl Into<anyhow::Error>) -> Self {
        Failure::new(Code::Input, error)
    }
}

pub type CliResult<T = ()> = Result<T, Failure>;
