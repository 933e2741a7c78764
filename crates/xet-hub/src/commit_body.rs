//! The body of `POST .../commit/{rev}`: NDJSON lines (`header`, `file`, `lfsFile`,
//! `deletedFile`, `deletedFolder`) parsed in one validating pass into a
//! [`CommitRequest`]: every path a [`RepoPath`], every sha256 and parent id checked,
//! inline contents decoded. Pure CPU work on bytes the caller already holds (a server
//! runs it off its executor); what the request means for a tree is [`crate::commit`]'s.

use base64::Engine as _;
use bytes::Bytes;

use crate::api::CommitLine;
use crate::commit::Operation;
use crate::id::{CommitId, NameError, RepoPath, Sha256};

/// A parsed commit request.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CommitRequest {
    pub summary: String,
    pub description: String,
    pub parent: Option<CommitId>,
    /// `file` lines: the path and the decoded content.
    pub inline: Vec<(RepoPath, Bytes)>,
    /// `lfsFile` lines: the path, the sha256 and the size if given.
    pub lfs: Vec<(RepoPath, Sha256, Option<u64>)>,
    /// `deletedFile` and `deletedFolder` lines, in order.
    pub deletions: Vec<Operation>,
    /// Which kind each operation line was, in the body's order: the commit applies its
    /// operations in that order ([`CommitRequest::in_order`]).
    pub order: Vec<LineKind>,
}

/// The kind of an operation line.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    Inline,
    Lfs,
    Deletion,
}

impl CommitRequest {
    /// The operations of the `file`, `lfsFile` and deletion lines (each list in its
    /// lines' order, as resolved by the caller) merged back into the body's order.
    pub fn in_order(
        order: &[LineKind],
        inline: Vec<Operation>,
        lfs: Vec<Operation>,
        deletions: Vec<Operation>,
    ) -> Vec<Operation> {
        let (mut i, mut l, mut d) = (inline.into_iter(), lfs.into_iter(), deletions.into_iter());
        order
            .iter()
            .filter_map(|k| match k {
                LineKind::Inline => i.next(),
                LineKind::Lfs => l.next(),
                LineKind::Deletion => d.next(),
            })
            .collect()
    }
}

/// Why a commit body was refused; each names its line (from 1).
#[derive(Debug, thiserror::Error)]
pub enum CommitBodyError {
    #[error("the commit body is not UTF-8")]
    NotUtf8(#[source] std::str::Utf8Error),
    #[error("commit line {line}: {why}")]
    Line { line: usize, why: String },
    #[error("commit line {line}")]
    Name {
        line: usize,
        #[source]
        source: NameError,
    },
    #[error("the commit has no header line")]
    NoHeader,
}

/// Parse a whole commit body (blank lines skipped; exactly one header).
pub fn parse(body: &[u8]) -> Result<CommitRequest, CommitBodyError> {
    let text = std::str::from_utf8(body).map_err(CommitBodyError::NotUtf8)?;
    let mut b = Builder::default();
    for (i, line) in text.lines().enumerate() {
        b.line(i + 1, line)?;
    }
    b.finish()
}

/// A commit request built a line at a time, for callers that read the body as it
/// arrives ([`parse`] is this over a whole body).
#[derive(Debug, Default)]
pub struct Builder {
    req: CommitRequest,
    header: bool,
}

impl Builder {
    /// Take line `n` (from 1; blank lines are skipped).
    pub fn line(&mut self, n: usize, line: &str) -> Result<(), CommitBodyError> {
        if line.trim().is_empty() {
            return Ok(());
        }
        let req = &mut self.req;
        let bad = |why: String| CommitBodyError::Line { line: n, why };
        let name = |source| CommitBodyError::Name { line: n, source };
        match serde_json::from_str(line).map_err(|e| bad(e.to_string()))? {
            CommitLine::Header(h) => {
                if std::mem::replace(&mut self.header, true) {
                    return Err(bad("a second header".into()));
                }
                req.summary = h.summary;
                req.description = h.description;
                req.parent = h
                    .parent_commit
                    .map(|p| {
                        CommitId::parse(&p).ok_or_else(|| {
                            bad(format!("parentCommit {p:?} is not a 40-hex commit id"))
                        })
                    })
                    .transpose()?;
            }
            CommitLine::File(f) => {
                let content = match f.encoding.as_str() {
                    "base64" => base64::engine::general_purpose::STANDARD
                        .decode(f.content.as_bytes())
                        .map_err(|e| {
                            bad(format!("the content of {} is not base64: {e}", f.path))
                        })?,
                    "utf-8" | "utf8" => f.content.into_bytes(),
                    other => return Err(bad(format!("unknown encoding {other:?} for {}", f.path))),
                };
                let path = RepoPath::parse(&f.path).map_err(name)?;
                req.inline.push((path, Bytes::from(content)));
                req.order.push(LineKind::Inline);
            }
            CommitLine::LfsFile(f) => {
                if f.algo != "sha256" {
                    return Err(bad(format!("{}: algo {:?} is not sha256", f.path, f.algo)));
                }
                let sha = Sha256::parse(&f.oid).ok_or_else(|| {
                    bad(format!(
                        "{}: oid {:?} is not a sha256 (64 hex)",
                        f.path, f.oid
                    ))
                })?;
                req.lfs
                    .push((RepoPath::parse(&f.path).map_err(name)?, sha, f.size));
                req.order.push(LineKind::Lfs);
            }
            CommitLine::DeletedFile(d) => {
                req.deletions.push(Operation::DeleteFile {
                    path: RepoPath::parse(&d.path).map_err(name)?,
                });
                req.order.push(LineKind::Deletion);
            }
            CommitLine::DeletedFolder(d) => {
                req.deletions.push(Operation::DeleteFolder {
                    path: RepoPath::parse_folder(&d.path).map_err(name)?,
                });
                req.order.push(LineKind::Deletion);
            }
        }
        Ok(())
    }

    /// Note a `file` line the caller read itself (one too long to hold, whose content it
    /// kept elsewhere): it takes its place in the operations' order, after the inline
    /// files taken so far.
    pub fn inline_elsewhere(&mut self) {
        self.req.order.push(LineKind::Inline);
    }

    /// The inline files taken so far, handed over (the caller keeps them in order with
    /// the ones it read itself).
    pub fn take_inline(&mut self) -> Vec<(RepoPath, Bytes)> {
        std::mem::take(&mut self.req.inline)
    }

    /// The request, once every line was taken.
    pub fn finish(self) -> Result<CommitRequest, CommitBodyError> {
        if !self.header {
            return Err(CommitBodyError::NoHeader);
        }
        Ok(self.req)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_of_every_kind_and_what_is_refused() {
        let sha = "ab".repeat(32);
        let body = format!(
            "{}\n\n{}\n{}\n{}\n{}\n",
            r#"{"key":"header","value":{"summary":"s","parentCommit":"0123456789abcdef0123456789abcdef01234567"}}"#,
            r#"{"key":"file","value":{"path":"a.txt","content":"aGk=","encoding":"base64"}}"#,
            format_args!(
                r#"{{"key":"lfsFile","value":{{"path":"w.bin","algo":"sha256","oid":"{sha}","size":3}}}}"#
            ),
            r#"{"key":"deletedFile","value":{"path":"old.txt"}}"#,
            r#"{"key":"deletedFolder","value":{"path":"logs/"}}"#,
        );
        let r = parse(body.as_bytes()).unwrap();
        assert_eq!(r.summary, "s");
        assert!(r.parent.is_some());
        assert_eq!(r.inline[0].1.as_ref(), b"hi");
        assert_eq!(r.lfs[0].1, Sha256::from_bytes([0xab; 32]));
        assert_eq!(r.deletions.len(), 2);
        let header = r#"{"key":"header","value":{"summary":"s"}}"#;
        for (bad, line) in [
            ("", None),
            ("{not json", Some(1)),
            (&format!("{header}\n{header}"), Some(2)),
            (
                &format!(
                    "{header}\n{}",
                    r#"{"key":"file","value":{"path":"a","content":"!!","encoding":"base64"}}"#
                ),
                Some(2),
            ),
            (
                &format!(
                    "{header}\n{}",
                    r#"{"key":"lfsFile","value":{"path":"a","oid":"xyz"}}"#
                ),
                Some(2),
            ),
        ] {
            match (parse(bad.as_bytes()), line) {
                (Err(CommitBodyError::NoHeader), None) => {}
                (Err(CommitBodyError::Line { line: l, .. }), Some(n)) => assert_eq!(l, n, "{bad}"),
                (other, _) => panic!("{bad}: {other:?}"),
            }
        }
        let planted = format!(
            "{header}\n{}",
            r#"{"key":"deletedFile","value":{"path":"sub/.git/config"}}"#
        );
        assert!(matches!(
            parse(planted.as_bytes()),
            Err(CommitBodyError::Name {
                line: 2,
                source: NameError::GitPath { .. }
            })
        ));
        assert!(matches!(
            parse(&[0xff, b'\n']),
            Err(CommitBodyError::NotUtf8(_))
        ));
    }
}
