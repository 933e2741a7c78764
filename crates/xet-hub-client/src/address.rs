//! `hf://[models/|datasets/|spaces/]NS/NAME[@REV][/PATH]` and
//! `hf://buckets/NS/NAME[/PATH]` (buckets have no revisions), read the way
//! `huggingface_hub`'s `parse_hf_uri` (and so `HfFileSystem`) reads it:
//!
//! - the type prefix is plural and optional (`model` when absent); a singular one
//!   (`dataset/`) is refused, as `huggingface_hub` refuses it, rather than taken as a
//!   namespace;
//! - `@` starts a revision only right after `NS/NAME`; an `@` further on is part of the
//!   path (`file@1.txt`);
//! - `refs/pr/N` and `refs/convert/X` are taken whole even unquoted; any other revision
//!   ends at the first `/`, so a branch with a `/` must be written URL-encoded
//!   (`feature%2Fx`); the revision is percent-decoded.

use std::fmt;

use xet_hub::api::{quote_revision, unquote};
use xet_hub::{NameError, RepoId, RepoPath, RepoRef, RepoType, Revision};

/// Why a string is not an `hf://` address.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AddressError {
    #[error("{addr:?} is not an hf:// address: {why}")]
    Syntax { addr: String, why: String },
    #[error("{addr:?}: {cause}")]
    Name { addr: String, cause: NameError },
}

/// A repository, a revision of it, and a file or folder in it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HfAddress {
    pub repo: RepoRef,
    /// Decoded; `None` for the default branch.
    pub revision: Option<String>,
    /// `None` for the whole repository.
    pub path: Option<RepoPath>,
}

/// The revision when none is given.
pub const DEFAULT_REVISION: &str = "main";

const SCHEME: &str = "hf://";

impl HfAddress {
    /// Whether `s` is meant as an `hf://` address (and not a hash or a local path).
    pub fn is_hf(s: &str) -> bool {
        s.starts_with(SCHEME)
    }

    pub fn parse(s: &str) -> Result<HfAddress, AddressError> {
        let syntax = |why: &str| AddressError::Syntax {
            addr: s.to_string(),
            why: why.to_string(),
        };
        let name = |cause| AddressError::Name {
            addr: s.to_string(),
            cause,
        };
        let body = s
            .strip_prefix(SCHEME)
            .ok_or_else(|| syntax("it does not start with hf://"))?;
        let (kind, location) = split_type(body).map_err(syntax)?;
        let location = location.trim_matches('/');
        let (repo_id, revision, path) = split_location(location).map_err(syntax)?;
        let id = RepoId::parse(repo_id).map_err(name)?;
        let revision = match revision {
            Some(_) if kind == RepoType::Bucket => {
                return Err(syntax("buckets have no revisions ('@')"));
            }
            None => None,
            Some(raw) => {
                let rev = unquote(raw).ok_or_else(|| syntax("the revision is not UTF-8"))?;
                Revision::parse(&rev).map_err(name)?;
                Some(rev)
            }
        };
        let path = match path {
            "" => None,
            p => Some(RepoPath::parse_folder(p).map_err(name)?),
        };
        Ok(HfAddress {
            repo: RepoRef::new(kind, id),
            revision,
            path,
        })
    }

    /// The revision to ask for: the given one, or `main`.
    pub fn revision_or_default(&self) -> &str {
        self.revision.as_deref().unwrap_or(DEFAULT_REVISION)
    }
}

/// The type prefix and the rest.
fn split_type(body: &str) -> Result<(RepoType, &str), &'static str> {
    let (first, rest) = body.split_once('/').unwrap_or((body, ""));
    if let Some(kind) = RepoType::from_plural(first) {
        if rest.trim_matches('/').is_empty() {
            return Err("nothing follows the type prefix; expected NAMESPACE/NAME");
        }
        return Ok((kind, rest));
    }
    match first {
        "model" | "dataset" | "space" => {
            Err("the type prefix is plural: models/, datasets/ or spaces/")
        }
        "buckets" => {
            if rest.trim_matches('/').is_empty() {
                return Err("nothing follows buckets/; expected NAMESPACE/NAME");
            }
            Ok((RepoType::Bucket, rest))
        }
        "kernels" => Err("only repositories and buckets are supported"),
        _ => Ok((RepoType::Model, body)),
    }
}

/// `NS/NAME[@REV][/PATH]` → (`NS/NAME`, raw revision, path).
fn split_location(location: &str) -> Result<(&str, Option<&str>, &str), &'static str> {
    if location.is_empty() {
        return Err("the repository id is missing");
    }
    let at = location
        .find('@')
        .filter(|&i| location[..i].matches('/').count() <= 1);
    let Some(at) = at else {
        let mut parts = location.splitn(3, '/');
        let ns = parts.next().unwrap_or("");
        let name = parts.next().ok_or("expected NAMESPACE/NAME")?;
        let path = parts.next().unwrap_or("");
        return Ok((&location[..ns.len() + 1 + name.len()], None, path));
    };
    let repo_id = &location[..at];
    if repo_id.matches('/').count() != 1 {
        return Err("expected NAMESPACE/NAME before '@'");
    }
    let rest = &location[at + 1..];
    let rev_len = special_ref_len(rest).unwrap_or_else(|| rest.find('/').unwrap_or(rest.len()));
    let (rev, path) = rest.split_at(rev_len);
    if rev.is_empty() {
        return Err("the revision after '@' is empty");
    }
    Ok((repo_id, Some(rev), path.strip_prefix('/').unwrap_or(path)))
}

/// Length of a leading `refs/pr/<digits>` or `refs/convert/<[\w.-]+>`.
fn special_ref_len(s: &str) -> Option<usize> {
    let word = |c: char| c.is_alphanumeric() || c == '_';
    let tail = |prefix: &str, ok: &dyn Fn(char) -> bool| {
        let rest = s.strip_prefix(prefix)?;
        let n = rest.find(|c: char| !ok(c)).unwrap_or(rest.len());
        (n > 0).then_some(prefix.len() + n)
    };
    tail("refs/pr/", &|c| c.is_ascii_digit())
        .or_else(|| tail("refs/convert/", &|c| word(c) || c == '.' || c == '-'))
}

impl fmt::Display for HfAddress {
    /// The canonical form, revision quoted so that it reads back the same.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let prefix = match self.repo.kind {
            RepoType::Model => "",
            k => k.url_prefix(),
        };
        write!(f, "{SCHEME}{prefix}{}", self.repo.id)?;
        if let Some(rev) = &self.revision {
            write!(f, "@{}", quote_revision(rev))?;
        }
        if let Some(p) = &self.path {
            // Paths are not percent-decoded when parsed, so they are written as they are.
            write!(f, "/{p}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(s: &str) -> (RepoType, String, Option<String>, Option<String>) {
        let a = HfAddress::parse(s).unwrap_or_else(|e| panic!("{s}: {e}"));
        (
            a.repo.kind,
            a.repo.id.to_string(),
            a.revision,
            a.path.map(|p| p.to_string()),
        )
    }

    fn some(s: &str) -> Option<String> {
        Some(s.to_string())
    }

    #[test]
    fn forms_huggingface_hub_writes() {
        use RepoType::*;
        assert_eq!(
            parse("hf://org/model"),
            (Model, "org/model".into(), None, None)
        );
        assert_eq!(
            parse("hf://models/org/m/"),
            (Model, "org/m".into(), None, None)
        );
        assert_eq!(
            parse("hf://datasets/org/d@dev/train/a.csv"),
            (Dataset, "org/d".into(), some("dev"), some("train/a.csv"))
        );
        assert_eq!(
            parse("hf://spaces/org/s/app.py"),
            (Space, "org/s".into(), None, some("app.py"))
        );
        assert_eq!(
            parse("hf://org/m@refs%2Fpr%2F1/x.bin"),
            (Model, "org/m".into(), some("refs/pr/1"), some("x.bin"))
        );
        assert_eq!(
            parse("hf://org/m@refs/pr/12/x.bin"),
            (Model, "org/m".into(), some("refs/pr/12"), some("x.bin"))
        );
        assert_eq!(
            parse("hf://datasets/org/d@refs/convert/parquet"),
            (Dataset, "org/d".into(), some("refs/convert/parquet"), None)
        );
        assert_eq!(
            parse("hf://org/m@feature%2Fx/dir/"),
            (Model, "org/m".into(), some("feature/x"), some("dir"))
        );
        // An '@' inside the path is the path's.
        assert_eq!(
            parse("hf://org/m/dir/file@1.txt"),
            (Model, "org/m".into(), None, some("dir/file@1.txt"))
        );
        let c = "0123456789abcdef0123456789abcdef01234567";
        assert_eq!(parse(&format!("hf://org/m@{c}")).2, some(c));
    }

    #[test]
    fn malformed_addresses_are_refused_with_a_reason() {
        for bad in [
            "org/m",
            "hf://",
            "hf://org",
            "hf://datasets/",
            "hf://dataset/org/d",
            "hf://buckets/",
            "hf://buckets/org/b@main",
            "hf://buckets/org/b@main/x",
            "hf://buckets/org/b/../x",
            "hf://kernels/org/k",
            "hf://org/m@",
            "hf://org/m@/x",
            "hf://org/m/../x",
            "hf://org/m@a..b",
            "hf://o--x/m",
        ] {
            let e = HfAddress::parse(bad);
            assert!(e.is_err(), "{bad} parsed as {e:?}");
            assert!(e.unwrap_err().to_string().contains(bad), "{bad}");
        }
        // '@' past NS/NAME is a path character.
        assert_eq!(parse("hf://a/b/c@main").3, some("c@main"));
    }

    #[test]
    fn bucket_addresses() {
        let a = HfAddress::parse("hf://buckets/org/ckpt/step-10/model@1.bin").unwrap();
        assert_eq!(a.repo.kind, RepoType::Bucket);
        assert_eq!(a.repo.id.to_string(), "org/ckpt");
        assert_eq!(a.revision, None);
        assert_eq!(a.path.as_ref().unwrap().as_str(), "step-10/model@1.bin");
        assert_eq!(a.to_string(), "hf://buckets/org/ckpt/step-10/model@1.bin");
        let root = HfAddress::parse("hf://buckets/org/ckpt/").unwrap();
        assert_eq!(root.to_string(), "hf://buckets/org/ckpt");
        assert_eq!(root.path, None);
    }

    #[test]
    fn display_reads_back() {
        for s in [
            "hf://org/m",
            "hf://datasets/org/d@refs%2Fpr%2F3/a/b.bin",
            "hf://spaces/org/s@dev",
        ] {
            let a = HfAddress::parse(s).unwrap();
            assert_eq!(a.to_string(), s);
            assert_eq!(HfAddress::parse(&a.to_string()).unwrap(), a);
        }
        assert!(HfAddress::is_hf("hf://x/y"));
        assert!(!HfAddress::is_hf("./hf://x"));
    }
}
