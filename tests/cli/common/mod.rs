//! Shared by the black-box CLI tests: a real `xet serve` on loopback.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};

/// A running `xet serve` and the URL it announced; killed when dropped.
pub struct Served {
    pub child: Child,
    pub url: String,
}

impl Served {
    /// Spawn `cmd` (`xet serve --listen 127.0.0.1:0 ...`, its stderr set by the caller)
    /// and read the URL from its first line on stdout (`listening on URL`).
    pub fn spawn(cmd: &mut Command) -> Served {
        let mut child = cmd.stdout(Stdio::piped()).spawn().expect("run xet serve");
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("piped"))
            .read_line(&mut line)
            .expect("read xet serve's first line");
        let url = line
            .trim()
            .strip_prefix("listening on ")
            .unwrap_or_else(|| panic!("xet serve said {line:?}"))
            .to_string();
        Served { child, url }
    }
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
