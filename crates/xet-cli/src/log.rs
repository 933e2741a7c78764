//! Diagnostics on stderr through `tracing`: the libraries' warnings (retries, cache
//! trouble) and, for `xet serve`, the access and error log.
//!
//! `XET_LOG` takes a `tracing` filter (`debug`, `xet_client=trace,warn`, ...) and
//! replaces the default: warnings for the client commands (errors only with `-q`), and
//! requests for `xet serve`. Secrets stay out: the libraries never log tokens, and
//! presigned URLs are logged without their query.

use std::io::IsTerminal;

use crate::exit::{Code, Failure};

/// The environment variable holding a filter.
pub const ENV: &str = "XET_LOG";

/// Install the stderr subscriber. `serve` selects the server's default (one line per
/// request, with timestamps); `quiet` lowers the client default to errors.
pub fn init(serve: bool, quiet: bool) -> Result<(), Failure> {
    let default = match (serve, quiet) {
        (true, false) => "info",
        (true, true) | (false, true) => "error",
        (false, false) => "warn",
    };
    // A filter asked for explicitly is for diagnosis: client lines then carry the time
    // since the start.
    let (spec, asked) = match std::env::var(ENV) {
        Ok(s) if !s.trim().is_empty() => (s, true),
        Ok(_) | Err(std::env::VarError::NotPresent) => (default.to_string(), false),
        Err(std::env::VarError::NotUnicode(_)) => {
            return Err(usage(format!("{ENV} is not valid UTF-8")));
        }
    };
    let filter = tracing_subscriber::EnvFilter::builder()
        .parse(&spec)
        .map_err(|e| {
            usage(format!(
                "{ENV}={spec:?} is not a valid filter ({e}); try {ENV}=debug"
            ))
        })?;
    let ansi = std::io::stderr().is_terminal()
        && std::env::var_os("NO_COLOR").is_none_or(|v| v.is_empty());
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(ansi);
    // A client run is short: the time of day adds nothing; a server's log needs it.
    // (`try_init` only fails if a subscriber is already installed: never, from `main`.)
    let _ = if serve {
        builder.try_init()
    } else if asked {
        builder
            .with_timer(tracing_subscriber::fmt::time::uptime())
            .with_target(false)
            .try_init()
    } else {
        builder.without_time().with_target(false).try_init()
    };
    Ok(())
}

fn usage(message: String) -> Failure {
    Failure::new(Code::Usage, anyhow::anyhow!(message))
}
