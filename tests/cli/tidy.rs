//! Tidy checks over the workspace's own files: rules of docs/ARCHITECTURE.md that the
//! compiler does not enforce by itself.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn crates() -> Vec<(String, PathBuf)> {
    let mut out: Vec<(String, PathBuf)> = std::fs::read_dir(root().join("crates"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("Cargo.toml").exists())
        .map(|p| (p.file_name().unwrap().to_string_lossy().into_owned(), p))
        .collect();
    out.sort();
    out
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The one crate allowed to hold `unsafe` (memory maps), with its lints denied locally.
const UNSAFE_CRATE: &str = "xet-mmap";

#[test]
fn every_crate_forbids_unsafe_except_the_mmap_crate() {
    for (name, dir) in crates() {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        if name == UNSAFE_CRATE {
            assert!(
                manifest.contains("unsafe_code = \"deny\""),
                "{name} must deny unsafe code except where allowed explicitly"
            );
            continue;
        }
        assert!(
            manifest.contains("[lints]\nworkspace = true"),
            "{name}/Cargo.toml must inherit the workspace lints (which forbid unsafe)"
        );
        let mut files = Vec::new();
        rust_files(&dir, &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            assert!(
                !text.contains("allow(unsafe_code)"),
                "{} allows unsafe code; only {UNSAFE_CRATE} may",
                f.display()
            );
        }
    }
    let root_manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    assert!(root_manifest.contains("unsafe_code = \"forbid\""));
}

#[test]
fn unsafe_in_the_mmap_crate_is_explained() {
    let src = std::fs::read_to_string(root().join("crates").join(UNSAFE_CRATE).join("src/lib.rs"))
        .unwrap();
    let blocks = src.matches("unsafe {").count();
    assert!(blocks > 0);
    assert_eq!(
        src.matches("// SAFETY:").count(),
        blocks,
        "every unsafe block in {UNSAFE_CRATE} carries a SAFETY comment"
    );
    assert_eq!(
        src.matches("#[allow(unsafe_code)]").count(),
        blocks,
        "each unsafe block sits in its own explicitly allowed function"
    );
}

#[test]
fn architecture_doc_describes_every_crate() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    for (name, _) in crates() {
        assert!(
            doc.contains(&format!("**{name}**")),
            "docs/ARCHITECTURE.md has no code-map paragraph for {name}"
        );
    }
}

#[test]
fn ci_runs_the_readme_test_command() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(readme.contains("cargo xtask test"));
    assert!(
        ci.lines()
            .any(|l| l.trim() == "cargo xtask test" || l.trim() == "exec cargo xtask test"),
        ".ci/run must call exactly the README's test command:\n{ci}"
    );
}

/// `cargo metadata` of the workspace (the lock file already resolves it).
fn metadata() -> serde_json::Value {
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1"])
        .current_dir(root())
        .output()
        .expect("run cargo metadata");
    assert!(
        out.status.success(),
        "cargo metadata: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// Each package's name and its normal (not dev, not build) dependencies, by package id.
fn normal_graph(
    meta: &serde_json::Value,
) -> std::collections::BTreeMap<String, (String, Vec<String>)> {
    let names: std::collections::HashMap<&str, &str> = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["id"].as_str().unwrap(), p["name"].as_str().unwrap()))
        .collect();
    meta["resolve"]["nodes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|n| {
            let deps = n["deps"]
                .as_array()
                .unwrap()
                .iter()
                .filter(|d| {
                    d["dep_kinds"]
                        .as_array()
                        .unwrap()
                        .iter()
                        .any(|k| k["kind"].is_null())
                })
                .map(|d| d["pkg"].as_str().unwrap().to_string())
                .collect();
            let id = n["id"].as_str().unwrap();
            (id.to_string(), (names[id].to_string(), deps))
        })
        .collect()
}

/// The "must never depend on" table of docs/ARCHITECTURE.md: crate -> patterns (a name,
/// or a prefix ending in `*`).
fn dependency_rules(doc: &str) -> Vec<(String, Vec<String>)> {
    let section = doc
        .split("\n## Dependency rules\n")
        .nth(1)
        .expect("docs/ARCHITECTURE.md has a `## Dependency rules` section");
    section
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .skip(2) // header and separator
        .map(|l| {
            let cells: Vec<&str> = l.trim_matches('|').split('|').map(str::trim).collect();
            let name = cells[0].trim_matches('`').to_string();
            let banned = if cells[1].starts_with("nothing") {
                Vec::new()
            } else {
                cells[1]
                    .split(',')
                    .map(|s| s.trim().trim_matches('`').to_string())
                    .collect()
            };
            (name, banned)
        })
        .collect()
}

fn matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

/// Every crate's row of "must never depend on" holds for its normal dependencies,
/// direct or not (a format crate that gains tokio through anything fails here).
#[test]
fn architecture_dependency_rules_hold() {
    let doc = std::fs::read_to_string(root().join("docs/ARCHITECTURE.md")).unwrap();
    let rules = dependency_rules(&doc);
    let crate_names: Vec<String> = crates().into_iter().map(|c| c.0).collect();
    for name in &crate_names {
        assert!(
            rules.iter().any(|r| &r.0 == name),
            "docs/ARCHITECTURE.md's dependency rules have no row for {name}"
        );
    }
    let graph = normal_graph(&metadata());
    let mut broken = Vec::new();
    for (krate, banned) in &rules {
        let start = graph
            .iter()
            .find(|(_, (n, _))| n == krate)
            .unwrap_or_else(|| panic!("ARCHITECTURE.md names {krate}, not in the workspace"))
            .0
            .clone();
        // Everything reachable, with the path it was reached by (for the message).
        let mut seen = std::collections::HashMap::from([(start.clone(), vec![krate.clone()])]);
        let mut stack = vec![start];
        while let Some(id) = stack.pop() {
            let path = seen[&id].clone();
            for dep in &graph[&id].1 {
                if !seen.contains_key(dep) {
                    let mut p = path.clone();
                    p.push(graph[dep].0.clone());
                    seen.insert(dep.clone(), p);
                    stack.push(dep.clone());
                }
            }
        }
        for path in seen.values() {
            let dep = path.last().unwrap();
            if dep != krate && banned.iter().any(|b| matches(b, dep)) {
                broken.push(format!(
                    "{krate} must never depend on {dep}: {}",
                    path.join(" -> ")
                ));
            }
        }
    }
    broken.sort();
    assert!(
        broken.is_empty(),
        "dependency rules broken:\n{}",
        broken.join("\n")
    );
}

/// The workspace's `rust-version` is at least every locked dependency's, so the README's
/// stated toolchain builds it.
/// The names of `package`'s integration-test binaries (cargo's `test` targets).
fn test_binaries(package: &serde_json::Value) -> Vec<String> {
    package["targets"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|t| t["kind"].as_array().unwrap().iter().any(|k| k == "test"))
        .map(|t| t["name"].as_str().unwrap().to_string())
        .collect()
}

/// Each test binary is a build and a link of its own, minutes on two cores: a crate's
/// integration tests are modules of one binary (`tests/<name>/main.rs`).
#[test]
fn each_crate_has_at_most_one_test_binary() {
    let meta = metadata();
    let members: Vec<&str> = meta["workspace_members"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m.as_str().unwrap())
        .collect();
    let mut seen = 0;
    for package in meta["packages"].as_array().unwrap() {
        if !members.contains(&package["id"].as_str().unwrap()) {
            continue;
        }
        seen += 1;
        let tests = test_binaries(package);
        assert!(
            tests.len() <= 1,
            "{} has {} integration-test binaries ({}): make them modules of one \
             (tests/<name>/main.rs with a `mod` per file)",
            package["name"],
            tests.len(),
            tests.join(", ")
        );
    }
    assert!(
        seen > 10,
        "only {seen} workspace packages in cargo metadata"
    );
}

#[test]
fn rust_version_covers_every_dependency() {
    let manifest = std::fs::read_to_string(root().join("Cargo.toml")).unwrap();
    let ours = manifest
        .lines()
        .find_map(|l| l.strip_prefix("rust-version = "))
        .expect("workspace rust-version")
        .trim_matches('"')
        .to_string();
    let version = |v: &str| -> Vec<u32> { v.split('.').map(|x| x.parse().unwrap()).collect() };
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    assert!(
        readme.contains(&format!("Rust {ours}")),
        "README.md must state the toolchain as `Rust {ours}`"
    );
    let meta = metadata();
    let mut newer = Vec::new();
    for p in meta["packages"].as_array().unwrap() {
        if let Some(rv) = p["rust_version"].as_str()
            && version(rv) > version(&ours)
        {
            newer.push(format!("{} {} needs {rv}", p["name"], p["version"]));
        }
    }
    assert!(
        newer.is_empty(),
        "the workspace claims rust-version {ours}, but: {}",
        newer.join(", ")
    );
}

/// Names declared in one `[...dependencies]` table of a manifest.
fn declared(manifest: &str, table: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut inside = false;
    for line in manifest.lines() {
        let l = line.trim();
        if l.starts_with('[') {
            inside = l == format!("[{table}]")
                || (l.starts_with("[target.") && l.ends_with(&format!(".{table}]")));
            continue;
        }
        if inside && !l.is_empty() && !l.starts_with('#') {
            // `name = ...` or `name.workspace = true`.
            if let Some((key, _)) = l.split_once('=') {
                let name = key.split('.').next().unwrap_or(key);
                out.push(name.trim().trim_matches('"').to_string());
            }
        }
    }
    out
}

fn mentions(files: &[PathBuf], ident: &str) -> bool {
    files.iter().any(|f| {
        let text = std::fs::read_to_string(f).unwrap();
        text.match_indices(ident).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + ident.len()..].chars().next();
            let word = |c: Option<char>| c.is_some_and(|c| c.is_alphanumeric() || c == '_');
            !word(before) && !word(after)
        })
    })
}

/// Every declared dependency is named in the code that can use it (normal ones in
/// `src/`, dev ones in `src/`, `tests/` or `benches/`): what cargo-machete checks.
#[test]
fn no_unused_dependencies() {
    let mut members: Vec<(String, PathBuf)> = crates();
    members.push(("xtask".into(), root().join("xtask")));
    members.push(("xet".into(), root()));
    let mut unused = Vec::new();
    for (name, dir) in members {
        let manifest = std::fs::read_to_string(dir.join("Cargo.toml")).unwrap();
        let mut src = Vec::new();
        rust_files(&dir.join("src"), &mut src);
        if dir.join("build.rs").exists() {
            src.push(dir.join("build.rs"));
        }
        let mut all = src.clone();
        for sub in ["tests", "benches", "examples"] {
            if dir.join(sub).is_dir() {
                rust_files(&dir.join(sub), &mut all);
            }
        }
        for (table, files) in [("dependencies", &src), ("dev-dependencies", &all)] {
            for dep in declared(&manifest, table) {
                if !mentions(files, &dep.replace('-', "_")) {
                    unused.push(format!("{name}: [{table}] {dep}"));
                }
            }
        }
    }
    assert!(
        unused.is_empty(),
        "declared but never used:\n{}",
        unused.join("\n")
    );
}

/// The fields of the item that follows `at` (a `{...}` or `(...)` group; empty for a
/// unit variant), as written.
fn item_fields(text: &str) -> &str {
    let start = text.find(['{', '(', ',', ';', '}']);
    let Some(start) = start else { return "" };
    let open = text.as_bytes()[start];
    let close = match open {
        b'{' => b'}',
        b'(' => b')',
        _ => return "",
    };
    let mut depth = 0;
    for (i, b) in text.bytes().enumerate().skip(start) {
        if b == open {
            depth += 1;
        } else if b == close {
            depth -= 1;
            if depth == 0 {
                return &text[start + 1..i];
            }
        }
    }
    ""
}

/// Names of the fields thiserror returns from `source()`: a field named `source`, or one
/// marked `#[source]` / `#[from]` (tuple fields by index).
fn source_fields(fields: &str, tuple: bool) -> Vec<String> {
    let mut out = Vec::new();
    let mut depth = 0;
    let mut part = String::new();
    let mut parts = Vec::new();
    for c in fields.chars() {
        match c {
            '<' | '(' | '[' | '{' => depth += 1,
            '>' | ')' | ']' | '}' => depth -= 1,
            ',' if depth == 0 => {
                parts.push(std::mem::take(&mut part));
                continue;
            }
            _ => {}
        }
        part.push(c);
    }
    parts.push(part);
    for (i, p) in parts.iter().filter(|p| !p.trim().is_empty()).enumerate() {
        let marked = p.contains("#[source]") || p.contains("#[from]");
        let name = if tuple {
            i.to_string()
        } else {
            let decl = p.rsplit(']').next().unwrap_or(p);
            decl.split(':')
                .next()
                .unwrap_or("")
                .trim()
                .trim_start_matches("pub ")
                .trim()
                .to_string()
        };
        if marked || (!tuple && name == "source") {
            out.push(name);
        }
    }
    out
}

/// Typed errors show their cause once: in the message or through `source()`, never
/// both (a chain printer would repeat it). Checks every `#[error("...")]` in the
/// workspace's libraries.
#[test]
fn errors_print_each_cause_once() {
    let mut bad = Vec::new();
    for (name, dir) in crates() {
        let mut files = Vec::new();
        rust_files(&dir.join("src"), &mut files);
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap();
            for (at, _) in text.match_indices("#[error(\"") {
                let rest = &text[at + "#[error(\"".len()..];
                let fmt_end = rest.find("\"").unwrap_or(0);
                let fmt = &rest[..fmt_end];
                let after = &rest[rest.find(")]").map_or(0, |i| i + 2)..];
                let fields = item_fields(after);
                let tuple = after
                    .find(['{', '(', ',', ';', '}'])
                    .is_some_and(|i| after.as_bytes()[i] == b'(');
                for s in source_fields(fields, tuple) {
                    if fmt.contains(&format!("{{{s}}}")) || fmt.contains(&format!("{{{s}:")) {
                        bad.push(format!("{name}: {}: #[error(\"{fmt}\")] prints `{s}`, which source() also returns", f.display()));
                    }
                }
            }
        }
    }
    assert!(bad.is_empty(), "causes printed twice:\n{}", bad.join("\n"));
}

#[test]
fn the_cause_check_sees_struct_and_tuple_fields() {
    let tuple = ")]\n    Io(#[from] std::io::Error),\n";
    assert_eq!(source_fields(item_fields(tuple), true), ["0"]);
    let named = ")]\n    Bind {\n        listen: String,\n        source: std::io::Error,\n    },";
    assert_eq!(source_fields(item_fields(named), false), ["source"]);
    let marked = ")]\n    Name { addr: String, #[source] cause: Box<dyn Error> },";
    assert_eq!(source_fields(item_fields(marked), false), ["cause"]);
    let plain = ")]\n    Name { addr: String, cause: NameError },";
    assert!(source_fields(item_fields(plain), false).is_empty());
    assert!(source_fields(item_fields(")]\n    Interrupted,\n"), false).is_empty());
}

/// Modules of a crate by file, as paths from the root: `src/a/b.rs` and `src/a/b/mod.rs`
/// are `a::b`; `lib.rs` and `main.rs` are the root (`[]`).
fn module_files(src: &Path) -> std::collections::BTreeMap<Vec<String>, PathBuf> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    files
        .into_iter()
        .map(|f| {
            let rel = f.strip_prefix(src).unwrap().with_extension("");
            let mut m: Vec<String> = rel
                .components()
                .map(|c| c.as_os_str().to_string_lossy().into_owned())
                .collect();
            if matches!(m.last().map(String::as_str), Some("mod" | "lib" | "main")) {
                m.pop();
            }
            (m, f)
        })
        .collect()
}

/// The code of a file that counts for module arrows: before its test module (tests may
/// reach anywhere), without `//` comments (doc links are not imports).
fn arrow_code(text: &str) -> String {
    let tests = text
        .match_indices("#[cfg(test)]")
        .find(|(i, m)| text[i + m.len()..].trim_start().starts_with("mod "));
    let text = &text[..tests.map_or(text.len(), |(i, _)| i)];
    text.lines()
        .map(|l| l.split("//").next().unwrap_or_default())
        .collect::<Vec<_>>()
        .join("\n")
}

/// Every path a `crate::` or `super::` prefix names in `code`, with `use` groups
/// (`crate::{a::b, c}`) expanded: each as its head (`crate` or `super`) and segments.
fn module_paths(code: &str) -> Vec<Vec<String>> {
    fn ident(s: &[u8], i: &mut usize) -> Option<String> {
        let start = *i;
        while *i < s.len() && (s[*i].is_ascii_alphanumeric() || s[*i] == b'_') {
            *i += 1;
        }
        (*i > start).then(|| String::from_utf8_lossy(&s[start..*i]).into_owned())
    }
    /// A path from `i` on (after a `::`): segments, then maybe a `{...}` group.
    fn tree(s: &[u8], i: &mut usize, prefix: Vec<String>, out: &mut Vec<Vec<String>>) {
        let mut path = prefix;
        loop {
            if s.get(*i) == Some(&b'{') {
                *i += 1;
                loop {
                    while s
                        .get(*i)
                        .is_some_and(|c| c.is_ascii_whitespace() || *c == b',')
                    {
                        *i += 1;
                    }
                    match s.get(*i) {
                        None => return,
                        Some(b'}') => {
                            *i += 1;
                            return;
                        }
                        _ => {}
                    }
                    let before = *i;
                    tree(s, i, path.clone(), out);
                    // ` as name` and anything else up to the next item of the group.
                    while s.get(*i).is_some_and(|c| !matches!(c, b',' | b'}')) {
                        *i += 1;
                    }
                    if *i == before {
                        *i += 1;
                    }
                }
            }
            match ident(s, i) {
                Some(seg) => path.push(seg),
                None => break,
            }
            if s[*i..].starts_with(b"::") {
                *i += 2;
            } else {
                break;
            }
        }
        out.push(path);
    }
    let s = code.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < s.len() {
        let at_word = i == 0 || !(s[i - 1].is_ascii_alphanumeric() || s[i - 1] == b'_');
        let head = ["crate::", "super::"]
            .into_iter()
            .find(|h| at_word && s[i..].starts_with(h.as_bytes()));
        match head {
            Some(h) => {
                i += h.len();
                tree(s, &mut i, vec![h[..h.len() - 2].to_string()], &mut out);
            }
            None => i += 1,
        }
    }
    out
}

/// The module of `file` (module `m`) each of its `crate::`/`super::` paths reaches: the
/// longest prefix that is a module file. The root is left out: `lib.rs` is the facade
/// that declares and re-exports every module.
fn module_arrows(
    modules: &std::collections::BTreeMap<Vec<String>, PathBuf>,
    m: &[String],
    file: &Path,
) -> std::collections::BTreeSet<Vec<String>> {
    let code = arrow_code(&std::fs::read_to_string(file).unwrap());
    let mut out = std::collections::BTreeSet::new();
    for path in module_paths(&code) {
        let (head, rest) = path.split_first().unwrap();
        // `super` of `a::b` is `a`, whether `b` is `a/b.rs` or `a/b/mod.rs`.
        let mut target: Vec<String> = if head == "crate" {
            Vec::new()
        } else {
            m[..m.len().saturating_sub(1)].to_vec()
        };
        let mut rest = rest;
        while let Some(("super", more)) = rest.split_first().map(|(h, t)| (h.as_str(), t)) {
            target.pop();
            rest = more;
        }
        target.extend(rest.iter().cloned());
        while !target.is_empty() && !modules.contains_key(&target) {
            target.pop();
        }
        if !target.is_empty() && target != m {
            out.insert(target);
        }
    }
    // A module reaches its own children by relative paths too (`files::route`).
    for child in modules
        .keys()
        .filter(|c| c.len() == m.len() + 1 && c.starts_with(m))
    {
        let name = child.last().unwrap();
        let relative = code.match_indices(&format!("{name}::")).any(|(i, _)| {
            let before = code[..i].chars().next_back();
            !before.is_some_and(|c| c.is_alphanumeric() || c == '_' || c == ':')
        });
        if relative || code.contains(&format!("self::{name}")) {
            out.insert(child.clone());
        }
    }
    out
}

#[test]
fn the_module_paths_of_use_groups_and_supers() {
    let code = "use crate::a::{b::{C, d}, e as f};\nlet x = super::super::g::h(crate::i);";
    let got: Vec<String> = module_paths(code).iter().map(|p| p.join("::")).collect();
    assert_eq!(
        got,
        [
            "crate::a::b::C",
            "crate::a::b::d",
            "crate::a::e",
            "super::super::g::h",
            "crate::i"
        ]
    );
    // `notcrate::` is no head; comments are `arrow_code`'s to drop.
    assert_eq!(module_paths("notcrate::x crate::y").len(), 1);
    assert!(arrow_code("use crate::x; // crate::y").contains("crate::x"));
    let late =
        "#[cfg(test)]\nfn t() {}\nfn f() { crate::a::g() }\n#[cfg(test)]\nmod tests { crate::b }";
    assert!(arrow_code(late).contains("crate::a") && !arrow_code(late).contains("crate::b"));
    assert!(!arrow_code("use crate::x; // crate::y").contains("crate::y"));
}

/// No module of a product crate imports a module that imports it back, directly or
/// around a loop (docs/ARCHITECTURE.md, "Inside a crate"): shared context sits in a leaf
/// module that the modules using it import, so every arrow between files runs one way.
#[test]
fn no_module_imports_a_module_that_imports_it_back() {
    let mut loops = Vec::new();
    for (name, dir) in crates() {
        let modules = module_files(&dir.join("src"));
        let arrows: std::collections::BTreeMap<&Vec<String>, _> = modules
            .iter()
            .map(|(m, f)| (m, module_arrows(&modules, m, f)))
            .collect();
        // Whether `from` reaches `to` along the arrows.
        let reaches = |from: &Vec<String>, to: &Vec<String>| {
            let mut seen = std::collections::BTreeSet::new();
            let mut stack = vec![from.clone()];
            while let Some(v) = stack.pop() {
                if &v == to {
                    return true;
                }
                if seen.insert(v.clone()) {
                    stack.extend(arrows.get(&v).into_iter().flatten().cloned());
                }
            }
            false
        };
        for (m, out) in &arrows {
            for target in out.iter().filter(|t| reaches(t, m)) {
                loops.push(format!(
                    "{name}: {} -> {} (and back)",
                    if m.is_empty() {
                        "<root>".into()
                    } else {
                        m.join("::")
                    },
                    target.join("::")
                ));
            }
        }
    }
    assert!(
        loops.is_empty(),
        "modules that import each other, directly or around a loop:\n{}",
        loops.join("\n")
    );
}

/// The span of the block or argument list opening at `open` (`{` or `(`), brackets
/// matched; `None` if it never closes.
fn matched(text: &str, open: usize) -> Option<std::ops::Range<usize>> {
    let (o, c) = match text.as_bytes()[open] {
        b'{' => (b'{', b'}'),
        _ => (b'(', b')'),
    };
    let mut depth = 0usize;
    for (i, &b) in text.as_bytes()[open..].iter().enumerate() {
        if b == o {
            depth += 1;
        } else if b == c {
            depth -= 1;
            if depth == 0 {
                return Some(open..open + i + 1);
            }
        }
    }
    None
}

/// The code the async fns of `text` run on the executor: their bodies, less what they
/// hand to `off_executor(...)`.
fn on_executor(text: &str) -> String {
    let mut out = String::new();
    for (at, _) in text.match_indices("async fn ") {
        let Some(body) = text[at..].find('{').and_then(|b| matched(text, at + b)) else {
            continue;
        };
        let mut code = &text[body];
        let mut kept = String::new();
        while let Some(i) = code.find("off_executor(") {
            kept.push_str(&code[..i]);
            let open = i + "off_executor".len();
            let end = matched(code, open).map_or(code.len(), |r| r.end);
            code = &code[end..];
        }
        kept.push_str(code);
        out.push_str(&kept);
    }
    out
}

#[test]
fn the_on_executor_reader_leaves_out_what_is_handed_off() {
    let text = "fn parse(b: &[u8]) {}\nasync fn a() { let r = off_executor(move || parse(&b)).await; x(); }\nasync fn b() { FileEntry::regular(h, &c) }";
    let code = on_executor(text);
    assert!(!code.contains("parse("), "{code}");
    assert!(
        code.contains("x()") && code.contains("FileEntry::regular("),
        "{code}"
    );
}

/// The Hub commit's CPU work (a body of up to 512 MiB: UTF-8, JSON and base64; SHA-256
/// and SHA-1 of inline files) runs on blocking threads (docs/ARCHITECTURE.md, "CPU work
/// never on the executor"): no async fn of the commit route calls it but through
/// `off_executor`.
#[test]
fn the_hub_commit_does_its_cpu_work_off_the_executor() {
    let file = root().join("crates/xet-server/src/hub/commit.rs");
    let text = std::fs::read_to_string(&file).unwrap();
    let text = arrow_code(&text);
    let code = on_executor(&text);
    for heavy in [
        "parse(&",
        "base64::",
        "FileEntry::regular(",
        "git_blob_oid(",
        "Sha256",
        "from_utf8(",
        "serde_json::from_",
    ] {
        assert!(
            !code.contains(heavy),
            "{}: an async fn calls {heavy} on the executor; hand it to off_executor",
            file.display()
        );
    }
}

/// Type names the review of main fc285a3 found on two different types (a store under
/// test and an error's subject; a running server and the CLI's serve sources): each is
/// defined at most once in the workspace now.
#[test]
fn names_found_on_two_types_are_on_one() {
    let mut files = Vec::new();
    for dir in ["crates", "src", "tests", "xtask"] {
        rust_files(&root().join(dir), &mut files);
    }
    let this = root().join(file!());
    for name in ["Subject", "Served"] {
        let defined: Vec<String> = files
            .iter()
            .filter(|f| **f != this)
            .filter(|f| {
                let text = std::fs::read_to_string(f).unwrap();
                ["struct", "enum", "type", "trait"].iter().any(|k| {
                    text.contains(&format!("{k} {name} "))
                        || text.contains(&format!("{k} {name}("))
                        || text.contains(&format!("{k} {name}<"))
                })
            })
            .map(|f| f.display().to_string())
            .collect();
        assert!(defined.len() <= 1, "{name} is defined in {defined:?}");
    }
}

/// The "one of each" sentences of docs/ARCHITECTURE.md that code can check: each of these
/// is defined in exactly one file of the workspace (crates, the binary, tests), the one
/// named. A second copy is what the review of main fc285a3 kept finding.
#[test]
fn the_one_of_each_is_one() {
    let ones: &[(&str, &str)] = &[
        // The retry policy of both clients and the pipelines.
        ("fn parse_retry_after(", "crates/xet-cas/src/backoff.rs"),
        ("fn retryable_status(", "crates/xet-cas/src/backoff.rs"),
        ("pub fn delay(", "crates/xet-cas/src/backoff.rs"),
        // The CRC of grant uploads.
        ("pub fn crc64_nvme(data", "crates/xet-cas/src/crc.rs"),
        ("pub fn crc64_nvme_combine(", "crates/xet-cas/src/crc.rs"),
        // Durable writes: the atomic replace.
        ("pub fn replace_with(", "crates/xet-mmap/src/durable.rs"),
        // TCP_NODELAY on accepted connections.
        ("fn set_nodelay(", "crates/xet-server/src/conn/accept.rs"),
        // A stored file as a stream of its bytes (the server's file bodies): decoded by
        // the download's decoder, not by a copy of it.
        ("fn file_stream(", "crates/xet-download/src/stream.rs"),
        // The fault-injecting test proxy.
        ("pub struct Proxy ", "crates/xet-testdata/src/proxy.rs"),
        ("fn serve_connection(", "crates/xet-testdata/src/proxy.rs"),
        ("fn replace_all(", "crates/xet-testdata/src/proxy.rs"),
    ];
    let mut files = Vec::new();
    for dir in ["crates", "src", "tests", "xtask"] {
        rust_files(&root().join(dir), &mut files);
    }
    let this = root().join(file!());
    let texts: Vec<(PathBuf, String)> = files
        .into_iter()
        .filter(|f| *f != this)
        .map(|f| {
            let text = std::fs::read_to_string(&f).unwrap();
            (f, text)
        })
        .collect();
    for (item, home) in ones {
        let found: Vec<String> = texts
            .iter()
            .filter(|(_, t)| t.contains(item))
            .map(|(f, _)| {
                f.strip_prefix(root())
                    .unwrap()
                    .to_string_lossy()
                    .into_owned()
            })
            .collect();
        assert_eq!(found, [*home], "`{item}` must be defined once, in {home}");
    }
}
