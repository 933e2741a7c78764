//! `xet mount --daemon`: this program started again without `--daemon`, in a process
//! group of its own (a Ctrl-C in this terminal does not reach it), its stdin empty and
//! its log (stderr) in a file; this process waits for its first line (it prints one
//! once the folder answers, and nothing after it), shows it with the pid and the log,
//! and returns. If the mount ends before that line, its log says why and its exit code
//! is this command's.

use std::ffi::OsString;
use std::io::{BufRead as _, BufReader, Read as _};
use std::os::unix::process::CommandExt as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use anyhow::Context as _;
use serde_json::Value;

use crate::exit::{CliResult, Code, Failure};
use crate::output::Out;

/// The most of a failed mount's log shown.
const LOG_SHOWN: u64 = 4096;

/// Start the mount on `dir` in the background, its log in `log`, and show its line.
pub(super) async fn start(out: &Out, dir: &Path, log: PathBuf) -> CliResult {
    let (json, dir) = (out.json, dir.to_path_buf());
    tokio::task::spawn_blocking(move || run(json, &dir, &log))
        .await
        .map_err(|e| Failure::new(Code::Failure, anyhow::anyhow!("the mount's starter: {e}")))?
        .map(|shown| {
            for line in shown {
                println!("{line}");
            }
        })
}

/// `CACHE_DIR/mounts/SECS-PID.log`.
pub(super) fn default_log(cache_dir: &Option<PathBuf>) -> PathBuf {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    crate::remote::cache_dir(cache_dir)
        .join("mounts")
        .join(format!("{secs}-{}.log", std::process::id()))
}

/// Start the mount and wait for its line: what to print.
fn run(json: bool, dir: &Path, log: &Path) -> Result<Vec<String>, Failure> {
    let failed = |e: anyhow::Error| Failure::new(Code::Failure, e);
    if let Some(parent) = log.parent() {
        std::fs::create_dir_all(parent)
            .with_context(|| format!("creating {} for the mount's log", parent.display()))
            .map_err(failed)?;
    }
    let log_file = std::fs::File::create(log)
        .with_context(|| format!("creating the mount's log {}", log.display()))
        .map_err(failed)?;
    let exe = std::env::current_exe()
        .context("finding this program to start the mount")
        .map_err(failed)?;
    let args = foreground_args(std::env::args_os().skip(1));
    let mut child = Command::new(exe)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(log_file)
        .process_group(0)
        .spawn()
        .context("starting the mount in the background")
        .map_err(failed)?;
    let pid = child.id();
    let mut line = String::new();
    let stdout = child.stdout.take().expect("piped stdout");
    // Read up to the newline only: the mount writes nothing after it.
    let mut stdout = BufReader::new(stdout);
    let read = stdout.read_line(&mut line);
    if read.is_err() || !is_ready(json, &line) {
        // An error document (`--json`) or nothing: the rest, then the exit.
        let _ = stdout.read_to_end(&mut Vec::new());
        let status = child.wait().ok();
        let why = tail(log);
        return Err(Failure::new(
            Code::from_exit(status.and_then(|s| s.code())),
            anyhow::anyhow!(
                "the mount on {} ended before it was ready; its log ({}): {why}",
                dir.display(),
                log.display()
            ),
        ));
    }
    // Left running: it is reaped by init once this process is gone.
    drop(child);
    Ok(shown(json, line.trim_end(), pid, log, dir))
}

/// This command's arguments without `--daemon` and `--log-file` (the mount itself runs
/// in the foreground; its log is its stderr).
fn foreground_args(args: impl Iterator<Item = OsString>) -> Vec<OsString> {
    let mut out = Vec::new();
    let mut skip_value = false;
    for a in args {
        if std::mem::take(&mut skip_value) {
            continue;
        }
        if a == "--daemon" || a.to_str().is_some_and(|s| s.starts_with("--log-file=")) {
            continue;
        }
        if a == "--log-file" {
            skip_value = true;
            continue;
        }
        out.push(a);
    }
    out
}

/// Whether `line` is the one a mount prints once ready (`mounted ...`, or a JSON
/// document with `"ok": true` on one line).
fn is_ready(json: bool, line: &str) -> bool {
    if !json {
        return line.starts_with("mounted ");
    }
    serde_json::from_str::<Value>(line.trim_end()).is_ok_and(|d| d["ok"] == true)
}

/// The mount's line, with its pid and log.
fn shown(json: bool, line: &str, pid: u32, log: &Path, dir: &Path) -> Vec<String> {
    if json {
        let mut doc: Value = serde_json::from_str(line).unwrap_or(Value::Null);
        if let Some(o) = doc.as_object_mut() {
            o.insert("pid".into(), pid.into());
            o.insert("log".into(), log.display().to_string().into());
            return vec![doc.to_string()];
        }
        return vec![line.to_string()];
    }
    vec![
        line.to_string(),
        format!(
            "in the background: pid {pid}, log {}; `umount {}` stops it",
            log.display(),
            dir.display()
        ),
    ]
}

/// The end of the log, on one line.
fn tail(log: &Path) -> String {
    let Ok(mut f) = std::fs::File::open(log) else {
        return "(no log)".into();
    };
    let len = f.metadata().map_or(0, |m| m.len());
    let mut buf = Vec::new();
    let _ = std::io::Seek::seek(
        &mut f,
        std::io::SeekFrom::Start(len.saturating_sub(LOG_SHOWN)),
    );
    let _ = f.take(LOG_SHOWN).read_to_end(&mut buf);
    let text = String::from_utf8_lossy(&buf);
    let text = text.trim();
    if text.is_empty() {
        "(empty)".into()
    } else {
        text.split('\n').collect::<Vec<_>>().join(" / ")
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn the_foreground_mount_gets_every_argument_but_daemon_and_log_file() {
        let args = |v: &[&str]| v.iter().map(std::ffi::OsString::from).collect::<Vec<_>>();
        let kept = super::foreground_args(
            args(&[
                "--json",
                "mount",
                "--daemon",
                "--log-file",
                "/l",
                "hf://o/m",
                "/mnt",
                "--log-file=/x",
                "--refresh",
                "5",
            ])
            .into_iter(),
        );
        assert_eq!(
            kept,
            args(&["--json", "mount", "hf://o/m", "/mnt", "--refresh", "5"])
        );
    }
}
