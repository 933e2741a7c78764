//! Starting `xet serve` (one way for every group: its first line names its URL, and it
//! is killed when dropped) and the clients' commands: `xet`, the reference's scripts and
//! the Hub clients, each with nothing from this environment that would change its run.

use anyhow::{Context, Result, bail};
use std::cell::RefCell;
use std::ffi::OsStr;
use std::io::BufRead as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

/// The reference's upload of the file `argv[1]` to `argv[2]`.
pub const REF_UPLOAD: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.upload_files([sys.argv[1]], sys.argv[2], None, None, None, 'model')";
/// The reference's upload of every path listed in the file `argv[1]`, in one call.
pub const REF_UPLOAD_LIST: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.upload_files([l.rstrip('\\n') for l in open(sys.argv[1])], sys.argv[2], None, None, None, 'model')";
/// The reference's download of hash `argv[1]` (of `argv[4]` bytes) from `argv[2]` to
/// `argv[3]`.
pub const REF_DOWNLOAD: &str = "import sys, warnings, hf_xet; warnings.filterwarnings('ignore'); \
hf_xet.download_files([hf_xet.PyXetDownloadInfo(sys.argv[3], sys.argv[1], int(sys.argv[4]))], sys.argv[2], None, None, None)";

/// The user token of a Hub-mode bench server (write access); every Hub client sends it.
pub const HUB_TOKEN: &str = "hf_bench_write";

/// An `xet serve` to start.
pub struct Serve {
    cmd: Command,
    what: String,
    log: Option<PathBuf>,
}

impl Serve {
    /// `xet serve --store STORE` on a free loopback port.
    pub fn loopback(xet: &Path, store: impl AsRef<OsStr>) -> Serve {
        Serve::with(Command::new(xet), "127.0.0.1:0", store)
    }

    /// `base` (the `xet` binary, or a command that runs it, as in a network namespace)
    /// with `serve --listen LISTEN --store STORE`.
    pub fn with(mut base: Command, listen: &str, store: impl AsRef<OsStr>) -> Serve {
        let store = store.as_ref();
        base.args(["serve", "--listen", listen, "--store"])
            .arg(store)
            .env_remove("XET_TOKEN")
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_STORE");
        Serve {
            cmd: base,
            what: format!("xet serve --store {}", store.to_string_lossy()),
            log: None,
        }
    }

    /// In Hub mode, with the bench's write token.
    pub fn hub(mut self) -> Serve {
        self.cmd.args(["--token", &format!("write:{HUB_TOKEN}")]);
        self
    }

    pub fn env(mut self, k: &str, v: impl AsRef<OsStr>) -> Serve {
        self.cmd.env(k, v);
        self
    }

    pub fn env_remove(mut self, k: &str) -> Serve {
        self.cmd.env_remove(k);
        self
    }

    /// Its request log (stderr) appended to `path`, for reading the runs afterwards;
    /// without one, stderr is dropped.
    pub fn log(mut self, path: PathBuf) -> Serve {
        self.log = Some(path);
        self
    }

    /// Starts it and waits for the first line it prints, which names its URL.
    pub fn start(mut self) -> Result<ServeProcess> {
        let stderr = match &self.log {
            Some(p) => {
                let f = std::fs::OpenOptions::new()
                    .create(true)
                    .append(true)
                    .open(p);
                Stdio::from(f.with_context(|| format!("opening {}", p.display()))?)
            }
            None => Stdio::null(),
        };
        let what = self.what;
        let mut child = self
            .cmd
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(stderr)
            .spawn()
            .with_context(|| format!("starting {what}"))?;
        let mut line = String::new();
        std::io::BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut line)?;
        let Some(url) = line.trim().strip_prefix("listening on ") else {
            let _ = child.kill();
            let _ = child.wait();
            let log = self.log.and_then(|p| std::fs::read_to_string(p).ok());
            bail!(
                "{what} did not start (it printed {line:?}){}",
                log.map_or(String::new(), |l| format!(": {}", l.trim()))
            );
        };
        Ok(ServeProcess {
            url: url.to_string(),
            child,
        })
    }
}

/// A running `xet serve`; killed when dropped.
pub struct ServeProcess {
    child: Child,
    /// What it printed after "listening on ".
    pub url: String,
}

impl ServeProcess {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for ServeProcess {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The server of the runs at hand, for the cases that start a fresh one per run (on a
/// fresh store, else dedup would make the later runs trivial).
#[derive(Default)]
pub struct Slot(RefCell<Option<ServeProcess>>);

impl Slot {
    pub fn set(&self, s: ServeProcess) {
        *self.0.borrow_mut() = Some(s);
    }

    pub fn stop(&self) {
        *self.0.borrow_mut() = None;
    }

    /// Stops the server, empties `store` and starts `start` on it.
    pub fn restart(&self, store: &Path, start: impl FnOnce(&Path) -> Serve) -> Result<()> {
        self.stop();
        super::inputs::fresh(store)?;
        self.set(start(store).start()?);
        Ok(())
    }

    pub fn url(&self) -> String {
        self.0
            .borrow()
            .as_ref()
            .map(|s| s.url.clone())
            .unwrap_or_default()
    }

    pub fn pid(&self) -> Option<u32> {
        self.0.borrow().as_ref().map(ServeProcess::pid)
    }
}

/// `base` (the `xet` binary, or a command that runs it) with `args`, its chunk cache in
/// `cache` (if given) and no endpoint, store or token from the environment.
pub fn xet_client(mut base: Command, args: &[&str], cache: Option<&Path>) -> Command {
    base.args(args)
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_TOKEN");
    if let Some(cache) = cache {
        base.env("XET_CACHE", cache);
    }
    base
}

/// `base` (the reference's python, or a command that runs it) with `-c SCRIPT ARGS`.
pub fn reference(mut base: Command, script: &str, args: &[&str], cache: &Path) -> Command {
    base.args(["-c", script]).args(args);
    reference_env(&mut base, cache);
    base
}

/// The reference's cache in `cache`, without telemetry.
pub fn reference_env(c: &mut Command, cache: &Path) {
    c.env("HF_XET_CACHE", cache)
        .env("HF_XET_TELEMETRY_ENABLED", "false");
}

/// The Hub client environment both `xet` and `hf` read: the Hub at `url`, the bench
/// token, every home and cache under `home`.
pub fn hub_client(c: &mut Command, url: &str, home: &Path) {
    c.env("HF_ENDPOINT", url)
        .env("HF_TOKEN", HUB_TOKEN)
        .env("HF_HOME", home.join("hf-home"))
        .env("HF_HUB_CACHE", home.join("hub-cache"))
        .env("HF_XET_CACHE", home.join("hf-xet-cache"))
        .env("XET_CACHE", home.join("xet-cache"))
        .env_remove("HF_TOKEN_PATH")
        .env_remove("HF_HUB_OFFLINE")
        .env_remove("XET_TOKEN")
        .env_remove("XET_ENDPOINT")
        .env_remove("XET_STORE")
        .env_remove("XET_TOKEN_URL");
}

/// The `hf` CLI without its update check, telemetry or progress bars.
pub fn hf_quiet(c: &mut Command) {
    c.env("HF_HUB_DISABLE_UPDATE_CHECK", "1")
        .env("HF_HUB_DISABLE_TELEMETRY", "1")
        .env("HF_XET_TELEMETRY_ENABLED", "0")
        .env("HF_HUB_DISABLE_PROGRESS_BARS", "1");
}

/// A server's request log (the file [`Serve::log`] names): one line per request, Hub
/// API and CAS alike, written once its answer is sent (before the client that asked can
/// have read all of it). Emptied before a run and counted after it, it gives the
/// requests of that run.
pub struct RequestLog(pub PathBuf);

impl RequestLog {
    /// Empties the log; the server appends, so its next line starts the file again.
    pub fn clear(&self) -> Result<()> {
        std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&self.0)
            .with_context(|| format!("emptying {}", self.0.display()))?;
        Ok(())
    }

    /// The requests logged since the log was emptied. A request's line is written when
    /// the server has sent its answer, which the client may have read a moment before:
    /// the log is read after a short pause.
    pub fn count(&self) -> Result<usize> {
        std::thread::sleep(std::time::Duration::from_millis(50));
        let log = std::fs::read_to_string(&self.0)
            .with_context(|| format!("reading {}", self.0.display()))?;
        Ok(log.lines().filter(|l| l.contains("request_id=")).count())
    }
}
