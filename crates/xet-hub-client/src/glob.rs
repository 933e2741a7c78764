//! `--include` / `--exclude`: the patterns `huggingface_hub`'s `allow_patterns` and
//! `ignore_patterns` take (`filter_repo_objects`): Python's `fnmatchcase`, so `*`
//! matches `/` too and matching is case-sensitive; a pattern ending in `/` means
//! everything below that folder.

/// Whether `path` passes: it matches some include pattern (or there are none) and no
/// exclude pattern.
pub fn selected(path: &str, include: &[String], exclude: &[String]) -> bool {
    let any = |ps: &[String]| ps.iter().any(|p| fnmatch(&with_dir_wildcard(p), path));
    (include.is_empty() || any(include)) && !any(exclude)
}

fn with_dir_wildcard(p: &str) -> String {
    if p.ends_with('/') {
        format!("{p}*")
    } else {
        p.to_string()
    }
}

/// `fnmatch.fnmatchcase(name, pattern)`: `*`, `?`, `[seq]`, `[!seq]`.
pub fn fnmatch(pattern: &str, name: &str) -> bool {
    let p: Vec<char> = pattern.chars().collect();
    let n: Vec<char> = name.chars().collect();
    // Iterative matching with one backtrack point for the last `*` (linear in practice,
    // never exponential).
    let (mut pi, mut ni) = (0, 0);
    let mut star: Option<(usize, usize)> = None;
    while ni < n.len() {
        if pi < p.len() {
            match p[pi] {
                '*' => {
                    star = Some((pi, ni));
                    pi += 1;
                    continue;
                }
                '?' => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                '[' => {
                    if let Some((matched, next)) = class(&p, pi, n[ni]) {
                        if matched {
                            pi = next;
                            ni += 1;
                            continue;
                        }
                    } else if n[ni] == '[' {
                        // An unclosed `[` is a literal, as in Python.
                        pi += 1;
                        ni += 1;
                        continue;
                    }
                }
                c if c == n[ni] => {
                    pi += 1;
                    ni += 1;
                    continue;
                }
                _ => {}
            }
        }
        match star {
            Some((sp, sn)) => {
                pi = sp + 1;
                ni = sn + 1;
                star = Some((sp, sn + 1));
            }
            None => return false,
        }
    }
    p[pi..].iter().all(|&c| c == '*')
}

/// The class starting at `p[at] == '['`: whether `c` is in it and the index after it;
/// `None` if it is not closed.
fn class(p: &[char], at: usize, c: char) -> Option<(bool, usize)> {
    let mut i = at + 1;
    let negate = matches!(p.get(i), Some('!'));
    if negate {
        i += 1;
    }
    let start = i;
    let mut found = false;
    while i < p.len() && (p[i] != ']' || i == start) {
        if i + 2 < p.len() && p[i + 1] == '-' && p[i + 2] != ']' {
            found |= p[i] <= c && c <= p[i + 2];
            i += 3;
        } else {
            found |= p[i] == c;
            i += 1;
        }
    }
    (i < p.len()).then_some((found != negate, i + 1))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn like_python_fnmatchcase() {
        let yes = [
            ("*.bin", "a/b/c.bin"),
            ("*", "a/b"),
            ("a?c", "abc"),
            ("sub/*", "sub/x/y.txt"),
            ("[ab]*", "b.txt"),
            ("[!ab]*", "c.txt"),
            ("x[0-9].bin", "x7.bin"),
            ("[]]x", "]x"),
            ("a[b", "a[b"),
            ("*.safetensors", "model.safetensors"),
            ("**", ""),
        ];
        for (p, n) in yes {
            assert!(fnmatch(p, n), "{p} should match {n}");
        }
        let no = [
            ("*.bin", "a.BIN"),
            ("a?c", "ac"),
            ("[ab]*", "c"),
            ("[!ab]*", "a"),
            ("x[0-9].bin", "xa.bin"),
            ("sub/*", "other/sub/x"),
            ("abc", "abcd"),
        ];
        for (p, n) in no {
            assert!(!fnmatch(p, n), "{p} should not match {n}");
        }
    }

    #[test]
    fn include_and_exclude() {
        let s = |v: &[&str]| v.iter().map(|x| x.to_string()).collect::<Vec<_>>();
        assert!(selected("a.txt", &[], &[]));
        assert!(selected("sub/a.txt", &s(&["sub/"]), &[]));
        assert!(!selected("other/a.txt", &s(&["sub/"]), &[]));
        assert!(!selected("sub/a.bin", &s(&["sub/"]), &s(&["*.bin"])));
        assert!(selected(".hidden/x", &s(&["*"]), &[]));
        assert!(!selected(".hidden/x", &[], &s(&[".*"])));
    }
}
