//! What the transferring commands share, below all of them: `--files-from` lists, and
//! stopping cleanly on a signal.

use std::path::Path;

use anyhow::Context;

use crate::exit::{CliResult, Failure};

/// Read `--files-from`: one entry per line, blank lines and `#` comments skipped; each
/// with its line number (from 1).
pub fn read_list(src: &Path) -> CliResult<Vec<(usize, String)>> {
    let text = if src == Path::new("-") {
        let mut s = String::new();
        std::io::Read::read_to_string(&mut std::io::stdin(), &mut s)
            .context("reading the list from stdin")
            .map_err(Failure::input)?;
        s
    } else {
        std::fs::read_to_string(src)
            .with_context(|| format!("cannot read the list {}", src.display()))
            .map_err(Failure::input)?
    };
    Ok(text
        .lines()
        .map(str::trim)
        .enumerate()
        .filter(|(_, l)| !l.is_empty() && !l.starts_with('#'))
        .map(|(i, l)| (i + 1, l.to_string()))
        .collect())
}

/// Cancel `token` on Ctrl-C or SIGTERM, so pipelines stop cleanly and keep resume records.
pub fn cancel_on_signal(token: tokio_util::sync::CancellationToken) {
    tokio::spawn(async move {
        #[cfg(unix)]
        {
            let mut term =
                tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
                    .expect("SIGTERM handler");
            tokio::select! { _ = tokio::signal::ctrl_c() => {}, _ = term.recv() => {} }
        }
        #[cfg(not(unix))]
        let _ = tokio::signal::ctrl_c().await;
        token.cancel();
    });
}
