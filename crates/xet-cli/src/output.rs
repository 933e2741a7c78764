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

    pub fn error(&self, f: &Failure) {
        // One line: the error and its causes, most specific last.
        let msg = format!("{:#}", f.error);
        if self.json {
            self.doc(&serde_json::json!({ "ok": false, "error": { "kind": f.code.name(), "code": f.code as u8, "message": msg } }));
        }
        eprintln!("xet: error: {msg}");
    }
}
