//! Text or JSON on stdout; errors on stderr (and in the JSON document with `--json`).

use crate::exit::Failure;
use std::io::Write;

pub struct Out {
    pub json: bool,
    pub quiet: bool,
}

impl Out {
    pub fn new(json: bool, quiet: bool) -> Self {
        Out { json, quiet }
    }

    /// A line of text output (not in JSON mode).
    pub fn line(&self, s: impl AsRef<str>) {
        if !self.json {
            let mut o = std::io::stdout().lock();
            let _ = writeln!(o, "{}", s.as_ref());
        }
    }

    /// The JSON document (JSON mode only).
    pub fn doc(&self, v: &serde_json::Value) {
        if self.json {
            // Buffered: stdout flushes at every newline, and the document has a line per
            // field of every file.
            let mut o = std::io::BufWriter::with_capacity(1 << 16, std::io::stdout().lock());
            let _ = serde_json::to_writer_pretty(&mut o, v);
            let _ = writeln!(o);
            let _ = o.flush();
        }
    }

    /// The failure on stderr, and as the JSON document in JSON mode.
    pub fn error(&self, f: &Failure) {
        self.error_doc(f);
        eprintln!("xet: error: {}", one_line(&f.error));
    }

    /// The failure as the JSON document (JSON mode only), the same shape for every
    /// failure.
    pub fn error_doc(&self, f: &Failure) {
        self.doc(&serde_json::json!({ "ok": false, "error": { "kind": f.code.name(), "code": f.code as u8, "message": one_line(&f.error) } }));
    }
}

/// The error and its causes on one line, most specific last. Library errors show each
/// cause once, in their message or through `source()` (a tidy test checks it), so the
/// chain is printed as it is.
fn one_line(e: &anyhow::Error) -> String {
    e.chain()
        .map(|c| c.to_string())
        .collect::<Vec<_>>()
        .join(": ")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Like the library crates' errors with a source: the message names what failed,
    /// `source()` says why.
    #[derive(Debug)]
    struct Named {
        path: String,
        source: std::io::Error,
    }

    impl std::fmt::Display for Named {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            write!(f, "{}", self.path)
        }
    }

    impl std::error::Error for Named {
        fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
            Some(&self.source)
        }
    }

    #[test]
    fn the_chain_is_joined_in_order() {
        let io = std::io::Error::new(std::io::ErrorKind::NotFound, "gone");
        let e = anyhow::Error::new(Named {
            path: "d/f".into(),
            source: io,
        });
        assert_eq!(one_line(&e), "d/f: gone");
        let e = e.context("upload failed");
        assert_eq!(one_line(&e), "upload failed: d/f: gone");
        let plain = anyhow::anyhow!("outer").context("top");
        assert_eq!(one_line(&plain), "top: outer");
    }
}
