//! Which relative paths a sync looks at (`hf`'s `FilterMatcher`): the rules of a
//! `--filter-from` file in order, first match decides; then any `--exclude` match
//! excludes; then any `--include` match includes; a path no `--include` matched is
//! excluded when there were some. Patterns are Python's `fnmatchcase` (`*` and `?` match
//! `/` too, case-sensitive), `\` read as `/`.

use std::path::Path;

use crate::glob::fnmatch;

/// Include and exclude rules for relative paths.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// From `--filter-from`: `true` includes.
    rules: Vec<(bool, String)>,
    include: Vec<String>,
    exclude: Vec<String>,
}

impl Filter {
    pub fn new(include: &[String], exclude: &[String]) -> Filter {
        Filter {
            rules: Vec::new(),
            include: include.iter().map(|p| slashes(p)).collect(),
            exclude: exclude.iter().map(|p| slashes(p)).collect(),
        }
    }

    /// Adds the rules of a filter file's text: one per line, `+ PAT` includes, `- PAT`
    /// excludes, a bare pattern includes; blank lines and `#` comments skipped.
    pub fn with_rules(mut self, text: &str) -> Filter {
        for line in text.lines().map(str::trim) {
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let rule = match (line.strip_prefix('+'), line.strip_prefix('-')) {
                (Some(p), _) => (true, p.trim()),
                (_, Some(p)) => (false, p.trim()),
                _ => (true, line),
            };
            self.rules.push((rule.0, slashes(rule.1)));
        }
        self
    }

    /// Adds the rules of the filter file at `path`.
    pub fn with_rules_from(self, path: &Path) -> std::io::Result<Filter> {
        Ok(self.with_rules(&std::fs::read_to_string(path)?))
    }

    /// Whether the sync looks at `path` (relative, `/`-separated).
    pub fn matches(&self, path: &str) -> bool {
        if let Some((include, _)) = self.rules.iter().find(|(_, p)| fnmatch(p, path)) {
            return *include;
        }
        if self.exclude.iter().any(|p| fnmatch(p, path)) {
            return false;
        }
        self.include.is_empty() || self.include.iter().any(|p| fnmatch(p, path))
    }
}

fn slashes(p: &str) -> String {
    p.replace('\\', "/")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(v: &[&str]) -> Vec<String> {
        v.iter().map(|x| x.to_string()).collect()
    }

    #[test]
    fn hf_order_of_rules() {
        let none = Filter::default();
        assert!(none.matches("a/b.bin"));
        let f = Filter::new(&s(&["*.bin"]), &s(&["tmp/*"]));
        assert!(f.matches("a/b.bin"), "* crosses /");
        assert!(!f.matches("tmp/x.bin"), "exclude before include");
        assert!(!f.matches("a/b.txt"), "an include given, none matched");
        assert!(!f.matches("A/B.BIN"), "case-sensitive");
        // The file's rules come first; the first match decides.
        let f = Filter::new(&s(&["*.bin"]), &s(&["*.log"]))
            .with_rules("# keep the important log\n\n+ important.log\n- *.tmp\nbare*\n");
        assert!(f.matches("important.log"));
        assert!(!f.matches("other.log"));
        assert!(!f.matches("x.tmp"));
        assert!(!f.matches("bare.tmp"), "in file order");
        assert!(f.matches("bare.txt"), "a rule without sign includes");
        assert!(!f.matches("other.txt"));
        assert!(Filter::new(&s(&["dir\\*"]), &[]).matches("dir/x"));
    }
}
