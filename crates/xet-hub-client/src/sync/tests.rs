//! The comparison rules of `hf buckets sync` (`_compare_files_for_sync`), case by case.

use super::*;

fn f(size: u64, mtime_ms: i64) -> SideFile {
    SideFile {
        size,
        mtime_ms,
        xet_hash: None,
    }
}

fn hashed(size: u64, mtime_ms: i64, h: u8) -> SideFile {
    SideFile {
        xet_hash: Some(MerkleHash::from_bytes([h; 32])),
        ..f(size, mtime_ms)
    }
}

fn one(
    direction: Direction,
    s: Option<SideFile>,
    d: Option<SideFile>,
    rules: Rules,
) -> Option<(Action, String)> {
    let src: Listing = s.into_iter().map(|x| ("p".to_string(), x)).collect();
    let dst: Listing = d.into_iter().map(|x| ("p".to_string(), x)).collect();
    let ops = compare(direction, &src, &dst, &rules);
    assert!(ops.len() <= 1);
    ops.into_iter().next().map(|o| (o.action, o.reason))
}

fn up(s: Option<SideFile>, d: Option<SideFile>, rules: Rules) -> Option<(Action, String)> {
    one(Direction::Upload, s, d, rules)
}

fn is(action: Action, reason: &str) -> Option<(Action, String)> {
    Some((action, reason.to_string()))
}

#[test]
fn default_rules() {
    let r = Rules::default();
    assert_eq!(up(Some(f(1, 0)), None, r), is(Action::Upload, "new file"));
    assert_eq!(up(None, Some(f(1, 0)), r), None, "kept without --delete");
    assert_eq!(
        up(Some(f(1, 5000)), Some(f(2, 0)), r),
        is(Action::Upload, "size differs")
    );
    // The window: newer by exactly 1000 ms is the same time, by 1001 it is newer.
    assert_eq!(
        up(Some(f(1, 1000)), Some(f(1, 0)), r),
        is(Action::Skip, "identical")
    );
    assert_eq!(
        up(Some(f(1, 1001)), Some(f(1, 0)), r),
        is(Action::Upload, "local newer")
    );
    assert_eq!(
        up(Some(f(1, 0)), Some(f(1, 9999)), r),
        is(Action::Skip, "identical"),
        "a newer destination is kept"
    );
    assert_eq!(
        one(Direction::Download, Some(f(1, 1001)), Some(f(1, 0)), r),
        is(Action::Download, "remote newer")
    );
}

#[test]
fn flags() {
    let delete = Rules {
        delete: true,
        ..Rules::default()
    };
    assert_eq!(
        up(None, Some(f(1, 0)), delete),
        is(Action::Delete, "not in source (--delete)")
    );
    let existing = Rules {
        existing: true,
        ..Rules::default()
    };
    assert_eq!(
        up(Some(f(1, 0)), None, existing),
        is(Action::Skip, "new file (--existing)")
    );
    let ignore_existing = Rules {
        ignore_existing: true,
        ..Rules::default()
    };
    assert_eq!(
        up(Some(f(1, 9000)), Some(f(2, 0)), ignore_existing),
        is(Action::Skip, "exists on receiver (--ignore-existing)")
    );
    let sizes = Rules {
        ignore_sizes: true,
        ..Rules::default()
    };
    assert_eq!(
        up(Some(f(1, 0)), Some(f(2, 0)), sizes),
        is(Action::Skip, "same mtime")
    );
    assert_eq!(
        up(Some(f(1, 0)), Some(f(1, 2000)), sizes),
        is(Action::Skip, "remote newer")
    );
    assert_eq!(
        up(Some(f(1, 2000)), Some(f(1, 0)), sizes),
        is(Action::Upload, "local newer")
    );
    let times = Rules {
        ignore_times: true,
        ..Rules::default()
    };
    assert_eq!(
        up(Some(f(1, 9000)), Some(f(1, 0)), times),
        is(Action::Skip, "same size")
    );
    assert_eq!(
        up(Some(f(1, 0)), Some(f(2, 0)), times),
        is(Action::Upload, "size differs")
    );
}

#[test]
fn checksum_looks_at_hashes_not_times() {
    let c = Rules {
        checksum: true,
        ..Rules::default()
    };
    assert_eq!(
        up(Some(hashed(1, 9000, 1)), Some(hashed(1, 0, 1)), c),
        is(Action::Skip, "same checksum")
    );
    assert_eq!(
        up(Some(hashed(1, 0, 1)), Some(hashed(1, 0, 2)), c),
        is(Action::Upload, "checksum differs")
    );
    assert_eq!(
        up(Some(f(1, 0)), Some(f(1, 0)), c),
        is(Action::Upload, "checksum differs"),
        "no hash is no match"
    );
    assert_eq!(
        up(Some(hashed(1, 0, 1)), Some(hashed(2, 0, 1)), c),
        is(Action::Upload, "size differs")
    );
}

#[test]
fn conflicting_flags() {
    assert_eq!(Rules::default().conflict(), None);
    let both = Rules {
        existing: true,
        ignore_existing: true,
        ..Rules::default()
    };
    assert_eq!(both.conflict(), Some("--existing and --ignore-existing"));
    let both = Rules {
        ignore_times: true,
        ignore_sizes: true,
        ..Rules::default()
    };
    assert!(both.conflict().is_some());
}

#[test]
fn plans_are_in_path_order_with_hf_fields() {
    let src: Listing = [("b", f(2, 0)), ("a/x", f(1, 1_795_297_561_042))]
        .into_iter()
        .map(|(p, x)| (p.to_string(), x))
        .collect();
    let dst: Listing = [("c", f(3, 0))]
        .into_iter()
        .map(|(p, x)| (p.to_string(), x))
        .collect();
    let rules = Rules {
        delete: true,
        ..Rules::default()
    };
    let ops = compare(Direction::Upload, &src, &dst, &rules);
    let paths: Vec<&str> = ops.iter().map(|o| o.path.as_str()).collect();
    assert_eq!(paths, ["a/x", "b", "c"]);
    assert_eq!(
        ops[0].local_mtime.as_deref(),
        Some("2026-11-21T21:46:01.042000+00:00")
    );
    assert_eq!(ops[0].remote_mtime, None);
    assert_eq!(
        ops[2].size,
        Some(3),
        "a delete carries the deleted file's size"
    );
    assert_eq!(ops[2].local_mtime, None);
    let plan = Plan {
        source: "s".into(),
        dest: "d".into(),
        timestamp: "t".into(),
        ops,
    };
    let s = plan.summary();
    assert_eq!((s.uploads, s.deletes, s.total_size), (2, 1, 3));
    assert!(!plan.is_noop());
}
