//! The web pages of `xet serve`: what a browser sees at the Hub's own URLs (the front
//! page, repositories, folders, files, commits, buckets, sign-in).
//!
//! Pure: view models in (`pages`), HTML out. No I/O, no async; the server gathers the
//! data and hands big rendering work (a README) to a blocking thread.
//!
//! Safety of untrusted content: every value a template prints is HTML-escaped by
//! askama (names, paths, commit titles, file text); the one exception, a rendered
//! README, goes through [`markdown::render`], whose output `ammonia` has cleaned (no
//! scripts, no event attributes, only `http`, `https` and `mailto` links, relative
//! links kept). Links the server builds are paths of this server, percent-encoded
//! ([`href`]).

pub mod markdown;
pub mod pages;

pub use pages::*;

/// Why a page could not be rendered.
#[derive(Debug, thiserror::Error)]
pub enum WebError {
    #[error("rendering a page template")]
    Render(#[source] askama::Error),
}

/// `bytes` in human units: `512 B`, `1.5 kB`, `12.3 MB`, `4.0 GB` (decimal, as the Hub
/// shows sizes).
pub fn human_size(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["kB", "MB", "GB", "TB", "PB", "EB"];
    if bytes < 1000 {
        return format!("{bytes} B");
    }
    let mut v = bytes as f64 / 1000.0;
    let mut unit = 0;
    while v >= 999.95 && unit + 1 < UNITS.len() {
        v /= 1000.0;
        unit += 1;
    }
    format!("{v:.1} {}", UNITS[unit])
}

/// A path of this server with each segment percent-encoded (everything but
/// `A-Z a-z 0-9 - . _ ~`), joined by `/`: `href(&["datasets", "org", "a b"])` is
/// `/datasets/org/a%20b`. What a template prints in `href` never leaves this server and
/// never names a scheme.
pub fn href<S: AsRef<str>>(segments: &[S]) -> String {
    let mut out = String::new();
    for s in segments {
        out.push('/');
        encode_into(s.as_ref(), &mut out);
    }
    if out.is_empty() {
        out.push('/');
    }
    out
}

/// A repository path (`a/b c.txt`) as URL segments (`a/b%20c.txt`).
pub fn encode_path(path: &str) -> String {
    let mut out = String::new();
    for (i, s) in path.split('/').enumerate() {
        if i > 0 {
            out.push('/');
        }
        encode_into(s, &mut out);
    }
    out
}

/// `s` percent-encoded for a query value or a path segment.
pub fn encode_component(s: &str) -> String {
    let mut out = String::new();
    encode_into(s, &mut out);
    out
}

fn encode_into(s: &str, out: &mut String) {
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(human_size(0), "0 B");
        assert_eq!(human_size(999), "999 B");
        assert_eq!(human_size(1000), "1.0 kB");
        assert_eq!(human_size(1536), "1.5 kB");
        assert_eq!(human_size(12_345_678), "12.3 MB");
        assert_eq!(human_size(999_999_999), "1.0 GB");
        assert_eq!(human_size(u64::MAX), "18.4 EB");
    }

    #[test]
    fn hrefs() {
        assert_eq!(href(&["datasets", "org", "a b"]), "/datasets/org/a%20b");
        assert_eq!(href::<&str>(&[]), "/");
        assert_eq!(encode_path("a/<b>.txt"), "a/%3Cb%3E.txt");
        assert_eq!(encode_component("javascript:x"), "javascript%3Ax");
        // A segment can never turn into a scheme or another host.
        assert!(href(&["javascript:alert(1)"]).starts_with("/javascript%3A"));
        assert_eq!(href(&["//evil"]), "/%2F%2Fevil");
    }
}
