//! A real S3-compatible server for tests: moto (PyPI `moto[server]`) on 127.0.0.1, run
//! from the reference virtualenv (`target/refvenv`, see [`crate::reference_python`]).
//!
//! Like the reference client, a test that cannot get it prints SKIP and passes, unless
//! `XET_REQUIRE_REFERENCE=1` (as `cargo xtask test` sets), which makes it fail.

use std::io::{BufRead, BufReader, Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// The moto version the S3 backend tests run against.
pub const MOTO_VERSION: &str = "5.2.5";

/// What `pip install` is given for it.
pub fn moto_requirement() -> String {
    format!("moto[server]=={MOTO_VERSION}")
}

fn has_moto(python: &Path) -> bool {
    Command::new(python)
        .args([
            "-c",
            &format!(
                "import sys, importlib.metadata as m; \
                 import moto.moto_server.threaded_moto_server; \
                 sys.exit(m.version('moto') != '{MOTO_VERSION}')"
            ),
        ])
        .output()
        .map(|o| o.status.success())
        .unwrap_or(false)
}

fn run(cmd: &mut Command) -> Result<(), String> {
    let out = cmd.output().map_err(|e| format!("{cmd:?}: {e}"))?;
    if out.status.success() {
        Ok(())
    } else {
        Err(format!(
            "{cmd:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A Python interpreter with `moto[server]` [`MOTO_VERSION`]: `$XET_REF_PYTHON` (which
/// must have it: `cargo xtask ref-venv` installs it), else `target/refvenv/bin/python`,
/// created with `python3 -m venv` and given moto with pip if missing.
pub fn moto_python() -> Result<PathBuf, String> {
    if let Some(p) = std::env::var_os("XET_REF_PYTHON") {
        let p = PathBuf::from(p);
        return if has_moto(&p) {
            Ok(p)
        } else {
            Err(format!(
                "{} has no {} (cargo xtask ref-venv installs it)",
                p.display(),
                moto_requirement()
            ))
        };
    }
    let venv = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/refvenv");
    let python = venv.join("bin/python");
    if has_moto(&python) {
        return Ok(python);
    }
    if !python.exists() {
        run(Command::new("python3").args(["-m", "venv"]).arg(&venv))?;
    }
    run(Command::new(&python).args([
        "-m",
        "pip",
        "install",
        "--quiet",
        "--disable-pip-version-check",
        &moto_requirement(),
    ]))?;
    if has_moto(&python) {
        Ok(python)
    } else {
        Err(format!(
            "{} still lacks {} after pip install",
            python.display(),
            moto_requirement()
        ))
    }
}

/// Serves until its standard input closes, so the server ends with the test process
/// even when that never drops its [`MotoServer`] (a shared one in a static).
///
/// moto checks `If-None-Match: *` and then stores the object in two steps without a
/// lock, while S3 decides racing conditional writes atomically; its PutObject handler is
/// therefore serialized, so racing conditional writes get exactly one winner as on S3.
const SERVER_SCRIPT: &str = r#"
import logging, os, sys, threading
logging.getLogger("werkzeug").setLevel(logging.ERROR)
from moto.s3.responses import S3Response
_put_lock = threading.Lock()
_put_object = S3Response.put_object
def _serialized_put_object(self):
    with _put_lock:
        return _put_object(self)
S3Response.put_object = _serialized_put_object
from moto.moto_server.threaded_moto_server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdout = open(os.devnull, "w")
sys.stdin.read()
"#;

static SEQ: AtomicU64 = AtomicU64::new(0);

/// A moto S3 server on 127.0.0.1 (any credentials are accepted). Ends on drop, or when
/// the test process exits.
pub struct MotoServer {
    child: Child,
    port: u16,
}

impl MotoServer {
    /// Start a server on a free loopback port.
    pub fn start() -> Result<MotoServer, String> {
        let python = moto_python()?;
        let log = std::env::temp_dir().join(format!(
            "xet-moto-{}-{}.log",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let log_file =
            std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        // Read through this handle; the name goes as soon as the server has the file, so
        // nothing is left behind even when the process exits without dropping the server.
        let mut log_reader =
            std::fs::File::open(&log).map_err(|e| format!("{}: {e}", log.display()))?;
        let child = Command::new(&python)
            .args(["-c", SERVER_SCRIPT])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(log_file)
            .spawn()
            .map_err(|e| format!("starting moto with {}: {e}", python.display()));
        let _ = std::fs::remove_file(&log);
        let mut child = child?;
        let mut line = String::new();
        let read = match child.stdout.take() {
            Some(out) => BufReader::new(out).read_line(&mut line),
            None => Ok(0),
        };
        match (read, line.trim().parse::<u16>()) {
            (Ok(_), Ok(port)) => Ok(MotoServer { child, port }),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                let mut msg = String::new();
                let _ = log_reader.read_to_string(&mut msg);
                Err(format!(
                    "moto server did not start (said {line:?}): {}",
                    msg.trim()
                ))
            }
        }
    }

    /// `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Create `bucket` (an unsigned `PUT /bucket`, which moto accepts).
    pub fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", self.port))
            .map_err(|e| format!("connecting to moto: {e}"))?;
        s.set_read_timeout(Some(Duration::from_secs(30)))
            .map_err(|e| e.to_string())?;
        write!(
            s,
            "PUT /{bucket} HTTP/1.1\r\nHost: 127.0.0.1:{}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n",
            self.port
        )
        .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
        let mut answer = String::new();
        s.read_to_string(&mut answer)
            .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
        let status = answer.lines().next().unwrap_or("");
        if status.split_whitespace().nth(1) == Some("200") {
            Ok(())
        } else {
            Err(format!("creating bucket {bucket}: {answer}"))
        }
    }

    /// Create a bucket with a name no other call in this process returns.
    pub fn fresh_bucket(&self) -> Result<String, String> {
        let name = format!(
            "xet-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        self.create_bucket(&name)?;
        Ok(name)
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One moto server shared by the tests of this process, or `None` after printing SKIP
/// when moto cannot be installed or started; panics instead when
/// `XET_REQUIRE_REFERENCE=1`.
pub fn shared_moto() -> Option<&'static MotoServer> {
    static SERVER: OnceLock<Result<MotoServer, String>> = OnceLock::new();
    match SERVER.get_or_init(MotoServer::start) {
        Ok(s) => Some(s),
        Err(e) => {
            if std::env::var("XET_REQUIRE_REFERENCE").is_ok_and(|v| v == "1") {
                panic!("S3 test server ({}) unavailable: {e}", moto_requirement());
            }
            eprintln!(
                "SKIP: S3 test server ({}) unavailable: {e}",
                moto_requirement()
            );
            None
        }
    }
}
