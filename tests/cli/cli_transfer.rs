//! Black-box upload/download through the real binary on the embedded store (and, for
//! `--token-url`, through `xet serve`).

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

struct Env {
    dir: tempfile::TempDir,
}

impl Env {
    fn new() -> Self {
        Env {
            dir: tempfile::tempdir().unwrap(),
        }
    }
    fn path(&self, p: &str) -> std::path::PathBuf {
        self.dir.path().join(p)
    }
    fn command(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_xet"));
        c.args(args)
            .env("XET_STORE", self.path("store"))
            .env("XET_CACHE", self.path("cache"))
            .env_remove("XET_ENDPOINT")
            .env_remove("XET_TOKEN")
            .env_remove("XET_TOKEN_URL");
        c
    }
    fn xet(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run xet")
    }
    /// `xet` run from `cwd`, where a download without `-o` writes.
    fn xet_in(&self, cwd: &Path, args: &[&str]) -> Output {
        std::fs::create_dir_all(cwd).unwrap();
        self.command(args)
            .current_dir(cwd)
            .output()
            .expect("run xet")
    }
    /// Upload `contents` as files named after their index; their hashes, in order.
    fn upload(&self, contents: &[&[u8]]) -> Vec<String> {
        let dir = self.path("src");
        std::fs::create_dir_all(&dir).unwrap();
        let paths: Vec<String> = contents
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let p = dir.join(i.to_string());
                std::fs::write(&p, c).unwrap();
                p.to_str().unwrap().to_string()
            })
            .collect();
        let mut args = vec!["upload"];
        args.extend(paths.iter().map(String::as_str));
        self.json(&args);
        contents
            .iter()
            .map(|c| xet_chunk::file_hash(c).to_string())
            .collect()
    }
    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut a = vec!["--json"];
        a.extend_from_slice(args);
        let o = self.xet(&a);
        assert!(
            o.status.success(),
            "xet {args:?}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        serde_json::from_slice(&o.stdout).unwrap()
    }
}

fn write_corpus(dir: &Path) -> Vec<(String, xet_testdata::GoldenFile)> {
    std::fs::create_dir_all(dir).unwrap();
    xet_testdata::golden_files()
        .into_iter()
        .map(|(c, g)| {
            std::fs::write(dir.join(&g.name), c.bytes()).unwrap();
            (g.name.clone(), g)
        })
        .collect()
}

#[test]
fn corpus_round_trip_on_the_embedded_store() {
    let env = Env::new();
    let corpus = env.path("corpus");
    let golden = write_corpus(&corpus);

    // Dry run first: nothing stored yet, so every byte is new; then the real upload agrees.
    let dry = env.json(&["upload", "--dry-run", corpus.to_str().unwrap()]);
    assert_eq!(dry["dry_run"], true);
    let up = env.json(&["upload", corpus.to_str().unwrap()]);
    assert_eq!(up["totals"]["new_bytes"], dry["totals"]["new_bytes"]);
    assert_eq!(
        up["totals"]["deduped_bytes"],
        dry["totals"]["deduped_bytes"]
    );
    assert!(up["totals"]["xorbs_sent"].as_u64().unwrap() >= 1);

    let files = up["files"].as_array().unwrap();
    assert_eq!(files.len(), golden.len());
    for f in files {
        let name = Path::new(f["path"].as_str().unwrap())
            .file_name()
            .unwrap()
            .to_str()
            .unwrap()
            .to_string();
        let g = &golden.iter().find(|(n, _)| *n == name).unwrap().1;
        assert_eq!(
            f["hash"], g.hash,
            "{name}: upload hash equals the reference's"
        );
        let dest = env.path(&format!("out-{name}"));
        let d = env.json(&["download", &g.hash, "-o", dest.to_str().unwrap()]);
        assert_eq!(d["files"][0]["size"], g.size);
        // Upload and download reports name the same things alike.
        for key in ["hash", "path", "size"] {
            assert!(
                f.get(key).is_some() && d["files"][0].get(key).is_some(),
                "{key}"
            );
        }
        for key in ["files", "bytes", "elapsed"] {
            assert!(
                up["totals"].get(key).is_some() && d["totals"].get(key).is_some(),
                "{key}"
            );
        }
        assert_eq!(d["files"][0]["hash"], f["hash"]);
        assert_eq!(
            std::fs::read(&dest).unwrap(),
            std::fs::read(corpus.join(&name)).unwrap(),
            "{name}"
        );
    }

    // A second upload of the same tree sends no xorb, and a dry run now finds everything present.
    let again = env.json(&["upload", corpus.to_str().unwrap()]);
    assert_eq!(again["totals"]["xorbs_sent"], 0);
    assert_eq!(again["totals"]["new_bytes"], 0);
    let dry = env.json(&["upload", "--dry-run", corpus.to_str().unwrap()]);
    assert_eq!(dry["totals"]["new_bytes"], 0);
}

#[test]
fn ranges_equal_slices_of_the_original() {
    let env = Env::new();
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 3 << 20, 77);
    let src = env.path("f.bin");
    std::fs::write(&src, &data).unwrap();
    let up = env.json(&["upload", src.to_str().unwrap()]);
    let h = up["files"][0]["hash"].as_str().unwrap().to_string();
    let chunks: Vec<usize> = xet_chunk::chunk_boundaries(&data);
    let c0 = chunks[0];
    for (s, e) in [
        (0, 0),
        (0, c0 - 1),
        (c0 - 1, c0),
        (c0, c0 + 10),
        (12345, 2_000_000),
        (data.len() - 1, data.len() - 1),
    ] {
        let dest = env.path("r.bin");
        let _ = std::fs::remove_file(&dest);
        let o = env.xet(&[
            "download",
            &h,
            "--range",
            &format!("{s}-{e}"),
            "-o",
            dest.to_str().unwrap(),
        ]);
        assert!(
            o.status.success(),
            "{s}-{e}: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert_eq!(std::fs::read(&dest).unwrap(), &data[s..=e], "range {s}-{e}");
    }
    // A range is checked chunk by chunk against its xorbs' hashes, and says so.
    let dest = env.path("checked.bin");
    let rep = env.json(&[
        "download",
        &h,
        "--range",
        "12345-2000000",
        "-o",
        dest.to_str().unwrap(),
    ]);
    assert_eq!(rep["files"][0]["verification"], "chunk_hashes", "{rep}");
    assert_eq!(std::fs::read(&dest).unwrap(), &data[12345..=2_000_000]);
    // Open-ended range and stdout.
    let o = env.xet(&["download", &h, "--range", "3000000-", "-o", "-"]);
    assert!(o.status.success());
    assert_eq!(o.stdout, &data[3_000_000..]);
    // Start past the end is a usage-level error, not a crash.
    let o = env.xet(&[
        "download",
        &h,
        "--range",
        &format!("{}-", data.len() + 5),
        "-o",
        env.path("x").to_str().unwrap(),
    ]);
    assert!(!o.status.success());
    assert!(!env.path("x").exists());
}

#[test]
fn corrupted_store_fails_download_and_leaves_no_file() {
    let env = Env::new();
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 1 << 20, 5);
    let src = env.path("f.bin");
    std::fs::write(&src, &data).unwrap();
    let up = env.json(&["upload", src.to_str().unwrap()]);
    let h = up["files"][0]["hash"].as_str().unwrap().to_string();
    // Flip one byte inside the stored xorb's chunk data.
    let xorbs: Vec<_> = std::fs::read_dir(env.path("store/xorbs"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    assert_eq!(xorbs.len(), 1);
    let mut bytes = std::fs::read(&xorbs[0]).unwrap();
    bytes[100_000] ^= 0x01;
    let mut perms = std::fs::metadata(&xorbs[0]).unwrap().permissions();
    #[allow(clippy::permissions_set_readonly_false)]
    perms.set_readonly(false);
    std::fs::set_permissions(&xorbs[0], perms).unwrap();
    std::fs::write(&xorbs[0], &bytes).unwrap();

    let dest = env.path("out.bin");
    let o = env.xet(&["download", &h, "-o", dest.to_str().unwrap()]);
    assert_eq!(
        o.status.code(),
        Some(7),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        String::from_utf8_lossy(&o.stderr).contains("chunk"),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(!dest.exists(), "no file at the destination");
}

#[test]
fn bad_inputs_are_clear_errors() {
    let env = Env::new();
    let o = env.xet(&["upload", env.path("missing").to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(3));
    let err = String::from_utf8_lossy(&o.stderr);
    assert!(err.contains("missing"), "{err}");
    // The cause once, not again after the message that already includes it.
    assert_eq!(err.matches("os error 2").count(), 1, "{err}");
    #[cfg(unix)]
    {
        // A broken link in a tree is named as one; nothing is uploaded.
        let tree = env.path("tree");
        std::fs::create_dir(&tree).unwrap();
        std::fs::write(tree.join("a"), b"a").unwrap();
        std::os::unix::fs::symlink(env.path("gone"), tree.join("b")).unwrap();
        let o = env.xet(&["upload", tree.to_str().unwrap()]);
        assert_eq!(o.status.code(), Some(3));
        let err = String::from_utf8_lossy(&o.stderr);
        assert!(
            err.contains("symbolic link to") && err.contains("gone"),
            "{err}"
        );
        assert!(o.stdout.is_empty());
    }
    assert_eq!(env.xet(&["download", "not-a-hash"]).status.code(), Some(2));
    assert_eq!(
        env.xet(&["download", &"0".repeat(64), "--range", "9-3"])
            .status
            .code(),
        Some(2)
    );
    assert_eq!(
        env.xet(&[
            "download",
            &"ab".repeat(32),
            "-o",
            env.path("o").to_str().unwrap()
        ])
        .status
        .code(),
        Some(5)
    );
    assert!(!env.path("o").exists());
    assert_eq!(env.xet(&["upload"]).status.code(), Some(2));
}

#[test]
fn files_from_stdin_and_quiet_output() {
    let env = Env::new();
    let a = env.path("a.txt");
    let b = env.path("b.txt");
    std::fs::write(&a, b"alpha").unwrap();
    std::fs::write(&b, b"beta").unwrap();
    let mut child = Command::new(env!("CARGO_BIN_EXE_xet"))
        .args(["upload", "-q", "--files-from", "-"])
        .env("XET_STORE", env.path("store"))
        .env("XET_CACHE", env.path("cache"))
        .env_remove("XET_ENDPOINT")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    use std::io::Write;
    writeln!(
        child.stdin.take().unwrap(),
        "{}\n\n# comment\n{}",
        a.display(),
        b.display()
    )
    .unwrap();
    let o = child.wait_with_output().unwrap();
    assert!(o.status.success());
    let hashes: Vec<String> = String::from_utf8(o.stdout)
        .unwrap()
        .lines()
        .map(String::from)
        .collect();
    assert_eq!(hashes.len(), 2);
    assert_eq!(hashes[0], xet_chunk::file_hash(b"alpha").to_string());
    assert_eq!(hashes[1], xet_chunk::file_hash(b"beta").to_string());
}

#[test]
fn unchanged_files_are_reported_without_reading_and_rehash_reads_them() {
    let env = Env::new();
    let a = env.path("a.bin");
    let b = env.path("b.bin");
    let data_a = xet_testdata::generate(xet_testdata::Kind::Random, 300_000, 1);
    std::fs::write(&a, &data_a).unwrap();
    std::fs::write(&b, b"small text file\n").unwrap();
    // Files modified within the racy window of an upload are never trusted later.
    std::thread::sleep(std::time::Duration::from_millis(2100));
    let (pa, pb) = (a.to_str().unwrap(), b.to_str().unwrap());
    let unchanged = |v: &serde_json::Value| v["totals"]["files_unchanged"].as_u64().unwrap();
    let hashes = |v: &serde_json::Value| {
        v["files"]
            .as_array()
            .unwrap()
            .iter()
            .map(|f| (f["hash"].clone(), f["sha256"].clone(), f["size"].clone()))
            .collect::<Vec<_>>()
    };

    let first = env.json(&["upload", pa, pb]);
    assert_eq!(unchanged(&first), 0);
    let second = env.json(&["upload", pa, pb]);
    assert_eq!(unchanged(&second), 2);
    assert_eq!(second["totals"]["chunks"], 0, "nothing read or chunked");
    assert_eq!(hashes(&first), hashes(&second));
    // --rehash reads both and finds them unchanged; a plain run after it still skips them.
    let third = env.json(&["upload", "--rehash", pa, pb]);
    assert_eq!(unchanged(&third), 0);
    assert_eq!(third["totals"]["files_verified"], 2);
    assert_eq!(hashes(&first), hashes(&third));
    assert_eq!(unchanged(&env.json(&["upload", pa, pb])), 2);

    // A rewritten file is read again and its new hash reported.
    std::fs::write(&b, b"small text file, edited\n").unwrap();
    let fifth = env.json(&["upload", pa, pb]);
    assert_eq!(unchanged(&fifth), 1);
    assert_eq!(
        fifth["files"][1]["hash"],
        xet_chunk::file_hash(b"small text file, edited\n").to_string()
    );
    // The text summary says what was skipped.
    let o = env.xet(&["upload", pa]);
    assert!(
        String::from_utf8_lossy(&o.stdout).contains("1 files unchanged since their last upload")
    );
}

/// The store deleted (to free space, say) while the cache directory stays: uploading
/// the same files again stores them again instead of failing on xorbs the old store
/// held, and they download.
#[test]
fn a_deleted_store_is_filled_again_with_the_same_cache() {
    let env = Env::new();
    let corpus = env.path("corpus");
    let golden = write_corpus(&corpus);
    let first = env.json(&["upload", corpus.to_str().unwrap()]);
    std::fs::remove_dir_all(env.path("store")).unwrap();
    let again = env.json(&["upload", corpus.to_str().unwrap()]);
    assert_eq!(again["totals"]["new_bytes"], first["totals"]["new_bytes"]);
    let files = again["files"].as_array().unwrap();
    assert_eq!(files.len(), golden.len());
    for f in files {
        let hash = f["hash"].as_str().unwrap();
        let name = Path::new(f["path"].as_str().unwrap()).file_name().unwrap();
        let out = env.path("out").join(name);
        if f["size"] == 0 {
            continue;
        }
        env.json(&["download", hash, "-o", out.to_str().unwrap()]);
        assert!(std::fs::read(&out).unwrap() == std::fs::read(corpus.join(name)).unwrap());
    }
}

/// `-o` naming a device node, a FIFO or a symbolic link writes into it (through the
/// link) and never replaces it; only a regular file is replaced. Device nodes are made
/// with `mknod` (copies of /dev/null and /dev/full) so a regression cannot touch the
/// machine's own; that part needs root, as CI runs.
#[cfg(unix)]
#[test]
fn download_writes_into_devices_fifos_and_links_without_replacing_them() {
    use std::os::unix::fs::FileTypeExt;
    let env = Env::new();
    let input = env.path("in.bin");
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 300_000, 7);
    std::fs::write(&input, &data).unwrap();
    let up = env.json(&["upload", input.to_str().unwrap()]);
    let hash = up["files"][0]["hash"].as_str().unwrap().to_string();
    let download = |out: &Path| env.xet(&["download", &hash, "-o", out.to_str().unwrap()]);
    let is_char = |p: &Path| {
        std::fs::symlink_metadata(p)
            .unwrap()
            .file_type()
            .is_char_device()
    };

    // A FIFO: the reader gets every byte; the FIFO is still a FIFO.
    let fifo = env.path("fifo");
    assert!(
        Command::new("mkfifo")
            .arg(&fifo)
            .status()
            .unwrap()
            .success()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    {
        let fifo = fifo.clone();
        std::thread::spawn(move || tx.send(std::fs::read(fifo).unwrap()));
    }
    let o = download(&fifo);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::symlink_metadata(&fifo)
            .unwrap()
            .file_type()
            .is_fifo()
    );
    // (A FIFO replaced by the download would leave the reader waiting for ever.)
    let got = rx.recv_timeout(std::time::Duration::from_secs(120));
    assert_eq!(got.expect("the FIFO's reader got nothing"), data);

    // A symbolic link to a regular file: the target gets the file, the link stays.
    let target = env.path("target.bin");
    std::fs::write(&target, b"old contents").unwrap();
    let link = env.path("link.bin");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let o = download(&link);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(
        std::fs::symlink_metadata(&link)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert_eq!(std::fs::read(&target).unwrap(), data);

    // A dangling link is refused (exit 3) and left as it is.
    let dangling = env.path("dangling");
    std::os::unix::fs::symlink(env.path("nowhere"), &dangling).unwrap();
    let o = download(&dangling);
    assert_eq!(
        o.status.code(),
        Some(3),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(
        std::fs::symlink_metadata(&dangling)
            .unwrap()
            .file_type()
            .is_symlink()
    );
    assert!(!env.path("nowhere").exists());

    let null = env.path("null");
    if !Command::new("mknod")
        .arg(&null)
        .args(["c", "1", "3"])
        .status()
        .unwrap()
        .success()
    {
        eprintln!("SKIP device nodes: mknod needs root");
        return;
    }
    // A copy of /dev/null, directly and through a link: written into, left a device.
    let o = download(&null);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(is_char(&null));
    let null_link = env.path("null-link");
    std::os::unix::fs::symlink(&null, &null_link).unwrap();
    let o = download(&null_link);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    assert!(is_char(&null));
    assert!(
        std::fs::symlink_metadata(&null_link)
            .unwrap()
            .file_type()
            .is_symlink()
    );

    // A copy of /dev/full: the write fails (exit 3, an output error), the device stays.
    let full = env.path("full");
    assert!(
        Command::new("mknod")
            .arg(&full)
            .args(["c", "1", "7"])
            .status()
            .unwrap()
            .success()
    );
    let o = download(&full);
    let err = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(3), "{err}");
    assert!(err.contains("No space left"), "{err}");
    assert!(is_char(&full));
    // Nothing was left beside any of them.
    let mut names: Vec<String> = std::fs::read_dir(env.dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".part"))
        .collect();
    names.sort();
    assert!(names.is_empty(), "left behind: {names:?}");
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Several files go to a directory only when `-o` names one: an existing directory or a
/// path written with a trailing `/`. `-o FILE` with several hashes is a usage error
/// instead of FILE silently becoming a directory.
#[test]
fn several_files_need_an_output_directory() {
    let env = Env::new();
    let h = env.upload(&[b"first file", b"second file"]);
    let (h0, h1) = (h[0].as_str(), h[1].as_str());

    let file = env.path("out");
    let o = env.xet(&["download", h0, h1, "-o", file.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains("-o DIR"), "{}", stderr(&o));
    assert!(!file.exists());
    // The same through --files-from: two entries in all.
    let list = env.path("list");
    std::fs::write(&list, format!("{h1}\n")).unwrap();
    let o = env.xet(&[
        "download",
        h0,
        "--files-from",
        list.to_str().unwrap(),
        "-o",
        file.to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(!file.exists());

    // A trailing slash names a directory to create.
    let new_dir = format!("{}/", env.path("new").display());
    env.json(&["download", h0, h1, "-o", &new_dir]);
    assert_eq!(
        std::fs::read(env.path("new").join(h0)).unwrap(),
        b"first file"
    );
    assert_eq!(
        std::fs::read(env.path("new").join(h1)).unwrap(),
        b"second file"
    );
    // An existing directory, without the slash.
    std::fs::create_dir(env.path("existing")).unwrap();
    env.json(&[
        "download",
        h0,
        h1,
        "-o",
        env.path("existing").to_str().unwrap(),
    ]);
    assert_eq!(
        std::fs::read(env.path("existing").join(h1)).unwrap(),
        b"second file"
    );
}

#[test]
fn size_and_range_apply_to_one_file_only() {
    let env = Env::new();
    let h = env.upload(&[b"first file", b"second file"]);
    let dir = format!("{}/", env.path("out").display());
    let list = env.path("list");
    std::fs::write(&list, format!("{}\n", h[1])).unwrap();
    for extra in [&["--size", "10"][..], &["--range", "0-3"]] {
        for hashes in [
            vec![h[0].as_str(), h[1].as_str()],
            vec![h[0].as_str(), "--files-from", list.to_str().unwrap()],
        ] {
            let mut args = vec!["download", "-o", &dir];
            args.extend(extra);
            args.extend(&hashes);
            let o = env.xet(&args);
            assert_eq!(o.status.code(), Some(2), "{args:?}: {}", stderr(&o));
            assert!(stderr(&o).contains(extra[0]), "{}", stderr(&o));
            assert!(!env.path("out").exists());
        }
    }
    // With one file they still apply.
    env.json(&["download", &h[1], "--range", "0-5", "-o", &dir]);
    assert_eq!(
        std::fs::read(env.path("out").join(&h[1])).unwrap(),
        b"second"
    );
}

/// `--files-from` lines `HASH PATH`: PATH is under `-o DIR` (or the current directory
/// without `-o`); absolute paths, `..` and links leading out of DIR are refused before
/// anything is written.
#[test]
fn files_from_paths_stay_under_the_output_directory() {
    let env = Env::new();
    let h = env.upload(&[b"first file", b"second file"]);
    let (h0, h1) = (h[0].as_str(), h[1].as_str());
    let cwd = env.path("cwd");
    let list = env.path("list");
    let out = env.path("out");
    let download = |lines: &str, with_o: bool| {
        std::fs::write(&list, lines).unwrap();
        let mut args = vec!["download", "--files-from", list.to_str().unwrap()];
        if with_o {
            args.extend(["-o", out.to_str().unwrap()]);
        }
        env.xet_in(&cwd, &args)
    };

    // Relative to -o DIR, not to the current directory.
    std::fs::create_dir(&out).unwrap();
    let o = download(&format!("{h0} sub/a.bin\n{h1}\n"), true);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(out.join("sub/a.bin")).unwrap(), b"first file");
    assert_eq!(std::fs::read(out.join(h1)).unwrap(), b"second file");
    assert!(!cwd.join("sub").exists());
    // Without -o: relative to the current directory, as before.
    let o = download(&format!("{h0} sub/a.bin\n"), false);
    assert!(o.status.success(), "{}", stderr(&o));
    assert_eq!(std::fs::read(cwd.join("sub/a.bin")).unwrap(), b"first file");

    // Refused, naming the line (comments and blank lines count), with or without -o.
    let outside = env.path("outside");
    let refused = [
        format!("{}/abs.bin", outside.display()),
        "../escape.bin".to_string(),
        "sub/../../escape.bin".to_string(),
    ];
    for bad in &refused {
        for with_o in [true, false] {
            let o = download(&format!("# list\n{h1} ok.bin\n\n{h0} {bad}\n"), with_o);
            assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
            assert!(stderr(&o).contains("line 4"), "{bad}: {}", stderr(&o));
            assert!(!out.join("ok.bin").exists() && !cwd.join("ok.bin").exists());
        }
    }
    assert!(!outside.exists() && !env.path("escape.bin").exists());

    #[cfg(unix)]
    {
        // A directory link inside DIR that leads out of it, and one that stays inside.
        std::fs::create_dir(&outside).unwrap();
        std::os::unix::fs::symlink(&outside, out.join("away")).unwrap();
        std::fs::create_dir(out.join("real")).unwrap();
        std::os::unix::fs::symlink(out.join("real"), out.join("inside")).unwrap();
        for bad in ["away/x.bin", "away/new/x.bin", "away"] {
            let o = download(&format!("{h0} {bad}\n"), true);
            assert_eq!(o.status.code(), Some(2), "{bad}: {}", stderr(&o));
            assert!(stderr(&o).contains("line 1"), "{}", stderr(&o));
            assert!(stderr(&o).contains("symbolic link"), "{}", stderr(&o));
        }
        assert_eq!(std::fs::read_dir(&outside).unwrap().count(), 0);
        let o = download(&format!("{h0} inside/x.bin\n"), true);
        assert!(o.status.success(), "{}", stderr(&o));
        assert_eq!(
            std::fs::read(out.join("real/x.bin")).unwrap(),
            b"first file"
        );
    }

    // A line's own PATH conflicts with -o FILE and -o -.
    std::fs::write(&list, format!("{h0} a.bin\n")).unwrap();
    for o_arg in [env.path("file").to_str().unwrap(), "-"] {
        let o = env.xet_in(
            &cwd,
            &[
                "download",
                "--files-from",
                list.to_str().unwrap(),
                "-o",
                o_arg,
            ],
        );
        assert_eq!(o.status.code(), Some(2), "{o_arg}: {}", stderr(&o));
        assert!(o.stdout.is_empty());
    }
}

/// `-o` naming the file that is already stdout (`/dev/stdout`, `/proc/self/fd/1`) is
/// `-o -`: the data alone on stdout, no report lines mixed into it.
#[cfg(unix)]
#[test]
fn output_naming_stdout_is_stdout() {
    let env = Env::new();
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 200_000, 3);
    let h = env.upload(&[&data]);
    for json in [false, true] {
        let mut args = vec!["download", &h[0], "-o", "/dev/stdout"];
        if json {
            args.insert(0, "--json");
        }
        let o = env.xet(&args);
        assert!(o.status.success(), "{}", stderr(&o));
        assert!(
            o.stdout == data,
            "stdout holds exactly the file (json: {json})"
        );
    }
    // Stdout redirected to a file that -o also names.
    let file = env.path("same.bin");
    let o = env
        .command(&["download", &h[0], "-o", file.to_str().unwrap()])
        .stdout(std::fs::File::create(&file).unwrap())
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&file).unwrap() == data);
    // Several hashes cannot share stdout.
    let o = env.xet(&["download", &h[0], &h[0], "-o", "/dev/stdout"]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(o.stdout.is_empty());
}

/// A token endpoint on loopback: `/token` hands out `token` for `cas_url`; any other
/// path answers 401.
fn token_server(cas_url: String, token: &'static str) -> String {
    use std::io::{Read, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut s) = stream else { continue };
            let mut req = Vec::new();
            let mut buf = [0u8; 1024];
            while !req.windows(4).any(|w| w == b"\r\n\r\n") {
                match s.read(&mut buf) {
                    Ok(0) | Err(_) => break,
                    Ok(n) => req.extend_from_slice(&buf[..n]),
                }
            }
            let exp = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_secs()
                + 3600;
            let (status, body) = if req.starts_with(b"GET /token ") {
                (
                    "200 OK",
                    format!(r#"{{"accessToken":"{token}","exp":{exp},"casUrl":"{cas_url}"}}"#),
                )
            } else {
                ("401 Unauthorized", r#"{"error":"denied"}"#.to_string())
            };
            let _ = write!(
                s,
                "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
                body.len()
            );
        }
    });
    format!("http://{addr}")
}

/// `--token-url` without `--endpoint` talks HTTP: messages name the token URL, not the
/// embedded store, and the upload's caches are not the embedded store's (else what the
/// store holds would be taken as already on the server).
#[test]
fn token_url_without_endpoint_is_http_throughout() {
    const TOKEN: &str = "t0ken-for-the-cas";
    let env = Env::new();
    let server = common::Served::spawn(
        Command::new(env!("CARGO_BIN_EXE_xet"))
            .args([
                "serve",
                "--listen",
                "127.0.0.1:0",
                "--token",
                TOKEN,
                "--store",
            ])
            .arg(env.path("served"))
            .env_remove("XET_LOG")
            .stderr(std::process::Stdio::null()),
    );
    let tokens = token_server(server.url.clone(), TOKEN);
    let data = xet_testdata::generate(xet_testdata::Kind::Random, 400_000, 9);
    let src = env.path("f.bin");
    std::fs::write(&src, &data).unwrap();
    let src = src.to_str().unwrap();

    // The embedded store gets it first, with the same store and cache settings.
    env.json(&["upload", src]);
    let good = format!("{tokens}/token");
    let up = env.json(&["upload", "--token-url", &good, src]);
    assert_eq!(up["totals"]["new_bytes"], data.len(), "{up}");
    let hash = up["files"][0]["hash"].as_str().unwrap();
    let out = env.path("out.bin");
    let o = env.xet(&[
        "download",
        "--endpoint",
        &server.url,
        "--token",
        TOKEN,
        hash,
        "-o",
        out.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(std::fs::read(&out).unwrap() == data);
    // And downloads through the token URL too.
    let o = env.xet(&["download", "--token-url", &good, hash, "-o", "-"]);
    assert!(o.status.success(), "{}", stderr(&o));
    assert!(o.stdout == data);

    // The summary and the errors name the token URL.
    let o = env.xet(&["upload", "--token-url", &good, src]);
    let text = String::from_utf8_lossy(&o.stdout);
    assert!(o.status.success() && text.contains(&good), "{text}");
    assert!(!text.contains("embedded store"), "{text}");
    let denied = format!("{tokens}/denied");
    for args in [
        vec!["upload", "--token-url", &denied, src],
        vec!["download", "--token-url", &denied, hash, "-o", "-"],
    ] {
        let o = env.xet(&args);
        assert_eq!(o.status.code(), Some(4), "{args:?}: {}", stderr(&o));
        assert!(stderr(&o).contains(&denied), "{}", stderr(&o));
        assert!(!stderr(&o).contains("embedded store"), "{}", stderr(&o));
    }
}
