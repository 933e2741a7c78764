//! View models, one per page, and their templates (`templates/`, compiled and checked
//! by askama at build time; every value escaped unless a template says `|safe`, which
//! only the sanitized README HTML does).

use askama::Template;

use crate::WebError;

/// What every page shows around its content.
#[derive(Debug, Clone, Default)]
pub struct Chrome {
    /// The `<title>`.
    pub title: String,
    /// Whoever reads the page signed in (the sign-out button is shown).
    pub signed_in: bool,
    /// The server has tokens, so signing in means something (the sign-in link is shown).
    pub can_sign_in: bool,
}

/// A link.
#[derive(Debug, Clone, Default)]
pub struct Link {
    pub text: String,
    pub href: String,
}

/// One repository or bucket on the front page.
#[derive(Debug, Clone, Default)]
pub struct RepoRow {
    /// `model`, `dataset`, `space`, `bucket`.
    pub kind: String,
    pub name: String,
    pub href: String,
    pub private: bool,
    /// When it was created, `2026-12-06`.
    pub created: String,
}

/// What the store holds, for the front page.
#[derive(Debug, Clone, Default)]
pub struct Figures {
    /// Bytes of the files (what users would download), in human units.
    pub file_bytes: String,
    /// Bytes stored for them (after dedup and compression), in human units.
    pub stored_bytes: String,
    /// `file bytes / stored bytes`, `3.2×`.
    pub ratio: String,
    /// How old the figures are, or what they cover.
    pub note: String,
}

#[derive(Template)]
#[template(path = "front.html")]
pub struct FrontPage {
    pub chrome: Chrome,
    pub query: String,
    pub repos: Vec<RepoRow>,
    pub buckets: Vec<RepoRow>,
    /// Rows not shown (more matched than a page holds).
    pub more: usize,
    pub figures: Option<Figures>,
}

/// The top of every repository page: its name, visibility, the revision shown and the
/// others to switch to, the tabs.
#[derive(Debug, Clone, Default)]
pub struct RepoHeader {
    /// `model`, `dataset`, `space`.
    pub kind: String,
    pub name: String,
    pub home: String,
    pub private: bool,
    /// The revision shown, as named in the URL.
    pub rev: String,
    /// Branches (and, once the server has them, tags) with the URL of this same view at
    /// each.
    pub refs: Vec<Link>,
    pub files_href: String,
    pub commits_href: String,
}

/// A folder's entry.
#[derive(Debug, Clone, Default)]
pub struct Entry {
    pub name: String,
    pub href: String,
    pub folder: bool,
    /// Human size, empty for folders.
    pub size: String,
}

/// One commit.
#[derive(Debug, Clone, Default)]
pub struct CommitRow {
    pub id: String,
    pub short: String,
    pub title: String,
    pub author: String,
    pub date: String,
    /// The files at this commit.
    pub href: String,
}

#[derive(Template)]
#[template(path = "tree.html")]
pub struct TreePage {
    pub chrome: Chrome,
    pub header: RepoHeader,
    /// The path from the root, each component linked.
    pub crumbs: Vec<Link>,
    pub entries: Vec<Entry>,
    /// The commit of the revision shown.
    pub commit: Option<CommitRow>,
    /// Sanitized README HTML (printed unescaped).
    pub readme_html: Option<String>,
    /// The README's front matter, printed escaped.
    pub readme_meta: Option<String>,
    /// The next page of a long folder.
    pub next: Option<String>,
}

#[derive(Template)]
#[template(path = "blob.html")]
pub struct BlobPage {
    pub chrome: Chrome,
    pub header: RepoHeader,
    pub crumbs: Vec<Link>,
    pub name: String,
    pub size: String,
    pub size_bytes: u64,
    pub xet_hash: String,
    pub sha256: String,
    pub git_oid: String,
    pub commit: Option<CommitRow>,
    pub download: String,
    /// The content, when small and text (printed escaped).
    pub text: Option<String>,
    /// Why the content is not shown inline.
    pub no_text: String,
}

#[derive(Template)]
#[template(path = "commits.html")]
pub struct CommitsPage {
    pub chrome: Chrome,
    pub header: RepoHeader,
    pub commits: Vec<CommitRow>,
    pub next: Option<String>,
}

#[derive(Template)]
#[template(path = "bucket.html")]
pub struct BucketPage {
    pub chrome: Chrome,
    pub name: String,
    pub home: String,
    pub private: bool,
    pub crumbs: Vec<Link>,
    pub entries: Vec<Entry>,
    pub next: Option<String>,
}

#[derive(Template)]
#[template(path = "signin.html")]
pub struct SignInPage {
    pub chrome: Chrome,
    pub error: Option<String>,
}

#[derive(Template)]
#[template(path = "error.html")]
pub struct ErrorPage {
    pub chrome: Chrome,
    pub status: u16,
    pub message: String,
}

/// Render any page.
pub fn render(page: &impl Template) -> Result<String, WebError> {
    page.render().map_err(WebError::Render)
}

/// The one stylesheet.
pub const STYLESHEET: &str = include_str!("../templates/style.css");

#[cfg(test)]
mod tests {
    use super::*;

    fn chrome() -> Chrome {
        Chrome {
            title: "<t>".into(),
            ..Chrome::default()
        }
    }

    #[test]
    fn names_are_escaped() {
        let page = TreePage {
            chrome: chrome(),
            header: RepoHeader {
                kind: "model".into(),
                name: "o/<script>alert(1)</script>".into(),
                rev: "main".into(),
                ..RepoHeader::default()
            },
            crumbs: vec![],
            entries: vec![Entry {
                name: "<img src=x onerror=alert(1)>".into(),
                href: "/o/x/blob/main/%3Cimg".into(),
                folder: false,
                size: "1 B".into(),
            }],
            commit: Some(CommitRow {
                title: "\"><script>x</script>".into(),
                ..CommitRow::default()
            }),
            readme_html: Some("<p>ok</p>".into()),
            readme_meta: Some("a: <b>".into()),
            next: None,
        };
        let h = render(&page).unwrap();
        assert!(!h.contains("<script>"), "{h}");
        assert!(!h.contains("<img src=x"), "{h}");
        assert!(h.contains("&#60;script&#62;"), "{h}");
        assert!(h.contains("<p>ok</p>"), "{h}");
        assert!(h.contains("a: &#60;b&#62;"), "{h}");
        assert!(h.contains("<title>&#60;t&#62;"), "{h}");
    }
}
