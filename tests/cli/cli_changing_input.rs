//! `xet upload` of a file that is truncated or rewritten in place while it is read:
//! exit 3 naming the file ("changed during upload"), never a bus error (a truncated
//! memory-mapped input used to kill the client with SIGBUS, exit 135) nor a misleading
//! rejection by the server (a rewritten one used to end in a xorb whose bytes no longer
//! matched its checksum), and nothing registered on the server.
//!
//! The change is made at a moment the test controls: the client talks to `xet serve`
//! through a relay that holds its first global dedup query (made for the file's first
//! chunk, once the file is open and its first block read) until the file has been
//! changed. The client's reader runs at most a few blocks ahead of the dedup stage, which
//! waits for that answer, so the change always lands in the middle of the read.

use crate::common;

use std::io::{Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, Sender, channel};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

/// Well beyond what the client reads ahead (a few 8 MiB blocks).
const FILE_LEN: usize = 256 << 20;

/// A TCP relay to `upstream` that holds the first request starting a global dedup query
/// (`GET /v1/chunks/`) until [`HoldingRelay::release`]; everything else passes through.
struct HoldingRelay {
    url: String,
    reached: Receiver<()>,
    release: Sender<()>,
}

impl HoldingRelay {
    fn start(upstream: &str) -> HoldingRelay {
        let upstream = upstream.trim_start_matches("http://").to_string();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let (reached_tx, reached) = channel();
        let (release, release_rx) = channel();
        let hold = Arc::new(Hold {
            taken: AtomicBool::new(false),
            reached: Mutex::new(reached_tx),
            release: Mutex::new(release_rx),
        });
        std::thread::spawn(move || {
            for client in listener.incoming().flatten() {
                let server = TcpStream::connect(&upstream).unwrap();
                let (c2, s2) = (client.try_clone().unwrap(), server.try_clone().unwrap());
                let hold = hold.clone();
                std::thread::spawn(move || pump(client, server, Some(&hold)));
                std::thread::spawn(move || pump(s2, c2, None));
            }
        });
        HoldingRelay {
            url,
            reached,
            release,
        }
    }

    /// Wait until the client sent its first dedup query.
    fn wait_reached(&self) {
        self.reached
            .recv_timeout(Duration::from_secs(120))
            .expect("the client never asked for a global dedup answer");
    }

    fn release(&self) {
        let _ = self.release.send(());
    }
}

struct Hold {
    taken: AtomicBool,
    reached: Mutex<Sender<()>>,
    release: Mutex<Receiver<()>>,
}

/// Copy `from` to `to` until either side closes; with `hold`, the first read carrying a
/// dedup query waits for the release before it is passed on.
fn pump(mut from: TcpStream, mut to: TcpStream, hold: Option<&Hold>) {
    let mut buf = vec![0u8; 256 << 10];
    loop {
        let n = match from.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => n,
        };
        if let Some(h) = hold
            && buf[..n].windows(15).any(|w| w == b"GET /v1/chunks/")
            && !h.taken.swap(true, Ordering::SeqCst)
        {
            let _ = h.reached.lock().unwrap().send(());
            let _ = h
                .release
                .lock()
                .unwrap()
                .recv_timeout(Duration::from_secs(120));
        }
        if to.write_all(&buf[..n]).is_err() {
            break;
        }
    }
    let _ = to.shutdown(Shutdown::Write);
}

/// A random file whose modification time is an hour ago, so that any write to it
/// during the test gives it a different one, whatever the timestamp granularity.
fn write_input(path: &Path) {
    let data = xet_testdata::generate(xet_testdata::Kind::Random, FILE_LEN, 135);
    std::fs::write(path, &data).unwrap();
    let f = std::fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - Duration::from_secs(3600))
        .unwrap();
}

/// Upload a fresh input through `xet serve` while `change` is applied to it mid-read;
/// returns the client's stderr after checking the exit code and the server's store.
fn upload_while(change: fn(&Path)) -> String {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("input.bin");
    write_input(&input);
    let store = dir.path().join("served");
    let server = common::Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args(["serve", "--listen", "127.0.0.1:0", "--store"])
            .arg(&store)
            .stderr(Stdio::null()),
    );
    let relay = HoldingRelay::start(&server.url);
    let client = Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(["upload", "--endpoint", &relay.url, "--cache-dir"])
        .arg(dir.path().join("cache"))
        .arg(&input)
        .env_remove("XET_TOKEN")
        .env_remove("XET_TOKEN_URL")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run xet upload");

    relay.wait_reached();
    change(&input);
    relay.release();
    let out = client.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();

    assert_eq!(
        out.status.code(),
        Some(3),
        "exit status {:?}: {stderr}",
        out.status
    );
    assert!(
        stderr.contains("input.bin"),
        "the file is not named: {stderr}"
    );
    assert!(stderr.contains("changed during upload"), "{stderr}");
    // No shard reached the server: nothing registers the file.
    drop(server);
    let shards: Vec<_> = std::fs::read_dir(store.join("shards"))
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert!(shards.is_empty(), "shards stored: {shards:?}");
    stderr
}

#[test]
fn a_file_truncated_while_it_is_uploaded_exits_3() {
    let stderr = upload_while(|p| {
        std::fs::File::options()
            .write(true)
            .open(p)
            .unwrap()
            .set_len(1 << 20)
            .unwrap()
    });
    assert!(
        stderr.contains(&format!("from {FILE_LEN} to {} bytes", 1 << 20)),
        "{stderr}"
    );
}

#[test]
fn a_file_rewritten_in_place_while_it_is_uploaded_exits_3() {
    let stderr = upload_while(|p| {
        // The first 64 MiB, some of them already read and hashed, get other bytes.
        let other = xet_testdata::generate(xet_testdata::Kind::Random, 64 << 20, 136);
        let mut f = std::fs::File::options().write(true).open(p).unwrap();
        f.write_all(&other).unwrap();
    });
    assert!(stderr.contains("written to while it was read"), "{stderr}");
}
