//! Interop with the real swh-shard 2.2.1 (PyPI; its C core links cmph 2.0.2), installed into
//! the reference virtualenv by `xet_testdata::swh::swh_python` (`XET_REF_PYTHON` overrides).
//! Without it these tests fail: they are the evidence that the two sides agree.
//!
//! * swh-shard reads shards our writer made: every object byte-identical by key, absent
//!   and deleted keys refused, iteration giving exactly the keys, and `swh-shard check`
//!   passing.
//! * Our reader reads shards swh-shard made (each in a fresh process), before and after
//!   deletions through its API and its CLI; and, since a fresh process draws the seeds our
//!   default policy uses, our writer writes the same bytes for the same objects, and our
//!   `delete` does what swh-shard's does.

use std::io::Cursor;
use std::path::{Path, PathBuf};
use std::process::Command;

use xet_swh::*;
use xet_testdata::Rng;
use xet_testdata::swh::{SWH_SHARD_VERSION, swh_python};

fn python() -> PathBuf {
    swh_python().unwrap_or_else(|e| {
        panic!(
            "these tests need the real swh-shard {SWH_SHARD_VERSION} (pip install \
             swh-shard=={SWH_SHARD_VERSION}, or XET_REF_PYTHON naming a python that has it), \
             and it could not be had: {e}"
        )
    })
}

/// Run `script` with `args` in a fresh Python process; its stdout on success.
fn py(python: &Path, script: &str, args: &[&Path]) -> String {
    let out = Command::new(python)
        .arg("-c")
        .arg(script)
        .args(args)
        .output()
        .expect("run python");
    assert!(
        out.status.success(),
        "python failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// `swh-shard ARGS...` (the package's CLI).
fn cli(python: &Path, args: &[&str]) -> std::process::Output {
    Command::new(python)
        .args(["-m", "swh.shard.cli"])
        .args(args)
        .output()
        .expect("run swh-shard")
}

/// Deterministic entries: distinct random keys, values of 0..max bytes (some empty).
fn entries(count: usize, max: usize, seed: u64) -> Vec<([u8; 32], Vec<u8>)> {
    let mut rng = Rng::new(seed);
    let mut seen = std::collections::HashSet::new();
    let mut out = Vec::with_capacity(count);
    while out.len() < count {
        let mut k = [0u8; 32];
        rng.fill(&mut k);
        if !seen.insert(k) {
            continue;
        }
        let len = match rng.below(10) {
            0 => 0,
            1 => rng.below(max as u64 + 1) as usize,
            _ => rng.below(64) as usize,
        };
        let mut v = vec![0u8; len];
        rng.fill(&mut v);
        out.push((k, v));
    }
    out
}

fn ours(entries: &[([u8; 32], Vec<u8>)]) -> Vec<u8> {
    let mut w = ShardWriter::new(Cursor::new(Vec::new())).unwrap();
    for (k, v) in entries {
        w.add(k, v).unwrap();
    }
    w.finish().unwrap().0.into_inner()
}

/// Records `key(32) | size(u64 BE) | value`, the exchange format with the scripts.
fn records(entries: &[([u8; 32], Vec<u8>)]) -> Vec<u8> {
    let mut out = Vec::new();
    for (k, v) in entries {
        out.extend_from_slice(k);
        out.extend_from_slice(&(v.len() as u64).to_be_bytes());
        out.extend_from_slice(v);
    }
    out
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// Reads the shard with swh-shard: writes every value asked for (as records, in the order
/// of the keys file) and fails on any disagreement it can see itself.
const READ: &str = r#"
import sys, hashlib
from swh.shard import Shard
shard, keys_path, absent_path, out_path = sys.argv[1:5]
raw = open(keys_path, "rb").read()
keys = [raw[i:i + 32] for i in range(0, len(raw), 32)]
raw = open(absent_path, "rb").read()
absent = [raw[i:i + 32] for i in range(0, len(raw), 32)]
with Shard(shard) as s, open(out_path, "wb") as out:
    listed = sorted(s)
    assert listed == sorted(keys), f"iteration gives {len(listed)} keys, expected {len(keys)}"
    assert s.header.objects_count >= len(keys)
    for k in keys:
        v = s[k]
        assert s.getsize(k) == len(v)
        out.write(k + len(v).to_bytes(8, "big") + v)
    for k in absent:
        try:
            s[k]
        except KeyError:
            pass
        else:
            raise SystemExit(f"absent key {k.hex()} found")
"#;

/// Writes a shard with swh-shard from records.
const WRITE: &str = r#"
import sys
from swh.shard import ShardCreator
shard, records_path = sys.argv[1:3]
raw = open(records_path, "rb").read()
entries, i = [], 0
while i < len(raw):
    k = raw[i:i + 32]
    n = int.from_bytes(raw[i + 32:i + 40], "big")
    entries.append((k, raw[i + 40:i + 40 + n]))
    i += 40 + n
with ShardCreator(shard, len(entries)) as c:
    for k, v in entries:
        c.write(k, v)
"#;

/// Deletes one key with the API; prints what `Shard.delete` returned.
const DELETE: &str = r#"
import sys
from swh.shard import Shard
print(Shard.delete(sys.argv[1], bytes.fromhex(sys.argv[2])))
"#;

/// swh-shard reads what swh-shard should: `keys` present with `entries`' values (compared
/// here, byte for byte), `absent` refused.
fn swh_reads(
    python: &Path,
    dir: &Path,
    shard: &Path,
    present: &[([u8; 32], Vec<u8>)],
    absent: &[[u8; 32]],
) {
    let keys_path = dir.join("keys");
    let absent_path = dir.join("absent");
    let out_path = dir.join("out");
    let keys: Vec<u8> = present.iter().flat_map(|e| e.0).collect();
    std::fs::write(&keys_path, keys).unwrap();
    std::fs::write(&absent_path, absent.concat()).unwrap();
    py(python, READ, &[shard, &keys_path, &absent_path, &out_path]);
    let got = std::fs::read(&out_path).unwrap();
    if got != records(present) {
        panic!(
            "{}: swh-shard read other values than were written",
            shard.display()
        );
    }
}

#[test]
fn swh_shard_reads_our_shards() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    for (count, max, seed) in [
        (1usize, 10usize, 1u64),
        (2, 10, 2),
        (3, 100, 3),
        (100, 1000, 4),
        (1000, 5000, 5),
        (20_000, 300, 6),
    ] {
        let es = entries(count, max, seed);
        let bytes = ours(&es);
        let path = dir.path().join(format!("ours-{count}.shard"));
        std::fs::write(&path, &bytes).unwrap();
        let absent: Vec<[u8; 32]> = entries(200, 0, seed + 1000)
            .into_iter()
            .map(|e| e.0)
            .collect();
        swh_reads(&python, dir.path(), &path, &es, &absent);

        let check = cli(&python, &["check", path.to_str().unwrap()]);
        assert!(
            check.status.success(),
            "swh-shard check {count}: {}{}",
            String::from_utf8_lossy(&check.stdout),
            String::from_utf8_lossy(&check.stderr)
        );

        // Delete a few with our delete: swh-shard no longer finds them.
        let mut deleted = bytes.clone();
        let gone: Vec<[u8; 32]> = es.iter().step_by(3).map(|e| e.0).collect();
        for k in &gone {
            assert!(delete(&mut deleted, k, &ReadLimits::default()).unwrap());
        }
        let path = dir.path().join(format!("ours-{count}-deleted.shard"));
        std::fs::write(&path, &deleted).unwrap();
        let kept: Vec<_> = es
            .iter()
            .filter(|e| !gone.contains(&e.0))
            .cloned()
            .collect();
        swh_reads(&python, dir.path(), &path, &kept, &gone);
    }

    // The empty shard (which swh-shard cannot make itself) opens and holds nothing.
    let path = dir.path().join("empty.shard");
    std::fs::write(&path, ours(&[])).unwrap();
    let absent: Vec<[u8; 32]> = entries(20, 0, 99).into_iter().map(|e| e.0).collect();
    swh_reads(&python, dir.path(), &path, &[], &absent);
}

/// 100 keys for which the first seed fails (two keys of one bucket share (f, h)), so cmph
/// draws a second seed; the same keys as in `tests/writer.rs`.
fn remapped() -> Vec<([u8; 32], Vec<u8>)> {
    (0..100u64)
        .map(|i| {
            let mut k = [0u8; 32];
            k[..8].copy_from_slice(&i.wrapping_mul(0x9E37_79B9_7F4A_7C15).to_le_bytes());
            k[8..16].copy_from_slice(&i.to_be_bytes());
            k[31] = 0x5a;
            (k, vec![i as u8; i as usize])
        })
        .collect()
}

#[test]
fn a_second_seed_is_drawn_as_cmph_draws_it() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    let es = remapped();
    let records_path = dir.path().join("records");
    std::fs::write(&records_path, records(&es)).unwrap();
    let path = dir.path().join("swh-remapped.shard");
    py(&python, WRITE, &[&path, &records_path]);
    let theirs = std::fs::read(&path).unwrap();
    let r = ShardReader::open(&theirs, &ReadLimits::default()).unwrap();
    let mut rand = GlibcRand::new(1);
    let (first, second) = (rand.next_u31() % 100, rand.next_u31() % 100);
    assert_ne!(first, second);
    assert_eq!(r.hash_function().seed(), second);
    assert!(ours(&es) == theirs, "our writer differs from swh-shard");
}

#[test]
fn we_read_swh_shards_and_write_the_same_bytes() {
    let python = python();
    let dir = tempfile::tempdir().unwrap();
    for (count, max, seed) in [
        (1usize, 10usize, 11u64),
        (3, 100, 12),
        (10, 100, 13),
        (100, 1000, 14),
        (513, 100, 15),
        (5000, 200, 16),
    ] {
        let es = entries(count, max, seed);
        let records_path = dir.path().join("records");
        std::fs::write(&records_path, records(&es)).unwrap();
        let path = dir.path().join(format!("swh-{count}.shard"));
        py(&python, WRITE, &[&path, &records_path]);
        let theirs = std::fs::read(&path).unwrap();

        let r = ShardReader::open(&theirs, &ReadLimits::default()).unwrap();
        for (k, v) in &es {
            assert_eq!(r.get(k).unwrap(), Some(&v[..]), "swh-{count}");
        }
        assert_eq!(r.iter().count(), count);
        let report = r.verify().unwrap();
        assert_eq!((report.live, report.deleted), (count as u64, 0));
        assert_eq!(r.hash_function().dump().unwrap(), r.hash_section());

        let mine = ours(&es);
        if mine != theirs {
            let at = mine.iter().zip(&theirs).position(|(a, b)| a != b);
            panic!(
                "swh-{count}: our writer differs from swh-shard in a fresh process (seeds {} vs \
                 {}), first at {at:?}",
                ShardReader::open(&mine, &ReadLimits::default())
                    .unwrap()
                    .hash_function()
                    .seed(),
                r.hash_function().seed()
            );
        }

        if count < 3 {
            continue;
        }
        // Delete one object with the API and one with the CLI.
        let (api_key, cli_key) = (es[0].0, es[count / 2].0);
        let ret = py(&python, DELETE, &[&path, Path::new(&hex(&api_key))]);
        assert_eq!(ret.trim(), "0", "Shard.delete's return");
        let del = cli(
            &python,
            &[
                "delete",
                "--no-confirm",
                path.to_str().unwrap(),
                &hex(&cli_key),
            ],
        );
        assert!(
            del.status.success(),
            "{}",
            String::from_utf8_lossy(&del.stderr)
        );
        let theirs = std::fs::read(&path).unwrap();
        let r = ShardReader::open(&theirs, &ReadLimits::default()).unwrap();
        for (k, v) in &es {
            let want = (*k != api_key && *k != cli_key).then_some(&v[..]);
            assert_eq!(r.get(k).unwrap(), want, "swh-{count} after delete");
        }
        assert_eq!(r.iter().count(), count - 2);
        let report = r.verify().unwrap();
        assert_eq!((report.live, report.deleted), (count as u64 - 2, 2));
        assert_eq!(r.header().objects_count, count as u64);

        let mut mine = mine;
        for k in [api_key, cli_key] {
            assert!(delete(&mut mine, &k, &ReadLimits::default()).unwrap());
        }
        assert!(
            mine == theirs,
            "swh-{count}: our delete differs from swh-shard's"
        );
    }
}
