//! A README as HTML: YAML front matter split off (shown as metadata, not text), the
//! Markdown rendered by `pulldown-cmark`, the result cleaned by `ammonia`.

use pulldown_cmark::{Options, Parser, html};

/// Most bytes of Markdown rendered; a longer README is cut there.
pub const MAX_MARKDOWN: usize = 512 * 1024;

/// A rendered README.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Readme {
    /// The YAML front matter (between the leading `---` lines), as text: the template
    /// prints it escaped.
    pub metadata: Option<String>,
    /// Sanitized HTML: safe to print unescaped.
    pub html: String,
}

/// Split `text` into its YAML front matter (if it starts with a `---` line and has a
/// closing `---` line) and the rest.
pub fn front_matter(text: &str) -> (Option<&str>, &str) {
    let Some(rest) = text
        .strip_prefix("---\n")
        .or_else(|| text.strip_prefix("---\r\n"))
    else {
        return (None, text);
    };
    let mut at = 0;
    for line in rest.split_inclusive('\n') {
        if line.trim_end() == "---" {
            return (Some(&rest[..at]), &rest[at + line.len()..]);
        }
        at += line.len();
    }
    (None, text)
}

/// Render `text` (a README) as sanitized HTML, its front matter apart.
pub fn render(text: &str) -> Readme {
    let text = match text.char_indices().nth(MAX_MARKDOWN) {
        Some((i, _)) => &text[..i],
        None => text,
    };
    let (meta, body) = front_matter(text);
    let opts = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_TASKLISTS
        | Options::ENABLE_FOOTNOTES;
    let mut raw = String::with_capacity(body.len() * 3 / 2);
    html::push_html(&mut raw, Parser::new_ext(body, opts));
    Readme {
        metadata: meta
            .map(|m| m.trim_end().to_string())
            .filter(|m| !m.is_empty()),
        html: sanitize(&raw),
    }
}

/// `html` with everything that could run removed: `ammonia`'s defaults (an allow list
/// of tags and attributes: no `script`, `style`, `iframe`, no `on*` attributes) and
/// link schemes limited to `http`, `https` and `mailto` (relative links kept), links
/// given `rel="noopener noreferrer"`.
pub fn sanitize(html: &str) -> String {
    ammonia::Builder::default()
        .url_schemes(["http", "https", "mailto"].into())
        .clean(html)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn front_matter_is_metadata() {
        let r = render("---\nlicense: mit\ntags:\n- x\n---\n# Title\n\nText");
        assert_eq!(r.metadata.as_deref(), Some("license: mit\ntags:\n- x"));
        assert!(r.html.contains("<h1>Title</h1>"), "{}", r.html);
        assert!(!r.html.contains("license"));
        // No closing line: all of it is text.
        let r = render("---\nlicense: mit\n");
        assert_eq!(r.metadata, None);
    }

    #[test]
    fn nothing_runs() {
        let r = render(
            "# Hi\n\n<script>document.title='pwned'</script>\n\n\
             <img src=x onerror=\"document.title='pwned'\">\n\n\
             [click](javascript:document.title='pwned')\n\n\
             <a href=\"JaVaScRiPt:alert(1)\">x</a> <a href=\"data:text/html,<script>\">y</a>\n\n\
             <div onclick=\"alert(1)\" style=\"x\">d</div><iframe src=\"/\"></iframe>\n\n\
             [ok](https://example.com/a) [rel](docs/b.md)",
        );
        let h = r.html.to_ascii_lowercase();
        for bad in [
            "<script",
            "onerror",
            "javascript:",
            "onclick",
            "<iframe",
            "data:",
            "style=",
        ] {
            assert!(!h.contains(bad), "{bad} in {h}");
        }
        assert!(h.contains("href=\"https://example.com/a\""), "{h}");
        assert!(h.contains("href=\"docs/b.md\""), "{h}");
        assert!(h.contains("<img src=\"x\""), "{h}");
    }

    #[test]
    fn long_readmes_are_cut() {
        let r = render(&"a".repeat(MAX_MARKDOWN + 10));
        assert!(r.html.len() < MAX_MARKDOWN + 100);
    }
}
