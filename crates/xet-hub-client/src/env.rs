//! Where the Hub is, who we are to it, and where its cache lives: the environment
//! variables `huggingface_hub` reads (`constants.py`, `utils/_auth.py`), read from a
//! map handed in, so that every rule is testable without touching the process's
//! environment.

use std::collections::BTreeMap;
use std::path::PathBuf;

use xet_client::Secret;

/// The Hub when `HF_ENDPOINT` is not set.
pub const DEFAULT_ENDPOINT: &str = "https://huggingface.co";

/// The variables that matter, and the home directory.
#[derive(Debug, Clone, Default)]
pub struct HubEnv {
    vars: BTreeMap<String, String>,
    home: Option<PathBuf>,
}

/// Where a token came from, for messages ("the token from HF_TOKEN was refused").
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TokenOrigin {
    /// Given by the program, which names how (a command-line flag, a setting).
    Given(&'static str),
    /// An environment variable (its name).
    Env(&'static str),
    /// The token file `huggingface_hub` stores (`hf auth login`).
    File(PathBuf),
}

impl std::fmt::Display for TokenOrigin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            TokenOrigin::Given(how) => f.write_str(how),
            TokenOrigin::Env(v) => f.write_str(v),
            TokenOrigin::File(p) => write!(f, "the token file {}", p.display()),
        }
    }
}

/// A Hub token and its origin. Sent to the Hub only, never to the CAS.
#[derive(Debug, Clone)]
pub struct HubToken {
    pub secret: Secret,
    pub origin: TokenOrigin,
}

const TOKEN_VARS: [&str; 2] = ["HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"];

impl HubEnv {
    /// From variables and a home directory.
    pub fn new(vars: impl IntoIterator<Item = (String, String)>, home: Option<PathBuf>) -> HubEnv {
        HubEnv {
            vars: vars.into_iter().collect(),
            home,
        }
    }

    /// From this process.
    pub fn from_process() -> HubEnv {
        let vars = std::env::vars_os()
            .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)));
        HubEnv::new(vars, std::env::home_dir())
    }

    /// A variable, unset when empty (as `os.getenv(...) or default` reads it).
    fn var(&self, name: &str) -> Option<&str> {
        self.vars
            .get(name)
            .map(String::as_str)
            .filter(|v| !v.is_empty())
    }

    /// `~` and `~/...` expanded, as `os.path.expanduser` does.
    fn expand(&self, p: &str) -> PathBuf {
        match (p.strip_prefix('~'), &self.home) {
            (Some(""), Some(h)) => h.clone(),
            (Some(rest), Some(h)) if rest.starts_with('/') => h.join(&rest[1..]),
            _ => PathBuf::from(p),
        }
    }

    /// `HF_ENDPOINT` without trailing `/`, or [`DEFAULT_ENDPOINT`].
    pub fn endpoint(&self) -> String {
        self.var("HF_ENDPOINT")
            .unwrap_or(DEFAULT_ENDPOINT)
            .trim_end_matches('/')
            .to_string()
    }

    /// `HF_HOME`, else `$XDG_CACHE_HOME/huggingface`, else `~/.cache/huggingface`.
    pub fn hf_home(&self) -> PathBuf {
        if let Some(h) = self.var("HF_HOME") {
            return self.expand(h);
        }
        let cache = match self.var("XDG_CACHE_HOME") {
            Some(x) => self.expand(x),
            None => self.expand("~/.cache"),
        };
        cache.join("huggingface")
    }

    /// `HF_HUB_CACHE`, else the legacy `HUGGINGFACE_HUB_CACHE`, else `<HF_HOME>/hub`.
    pub fn hub_cache(&self) -> PathBuf {
        match self
            .var("HF_HUB_CACHE")
            .or(self.var("HUGGINGFACE_HUB_CACHE"))
        {
            Some(p) => self.expand(p),
            None => self.hf_home().join("hub"),
        }
    }

    /// `HF_TOKEN_PATH`, else `<HF_HOME>/token`.
    pub fn token_path(&self) -> PathBuf {
        match self.var("HF_TOKEN_PATH") {
            Some(p) => self.expand(p),
            None => self.hf_home().join("token"),
        }
    }

    /// The token: `given` (the token, and how the program got it: `--token` for the CLI),
    /// else `HF_TOKEN` (or the legacy
    /// `HUGGING_FACE_HUB_TOKEN`), else the token file. Whitespace and line breaks are
    /// removed and an empty token is no token, as `huggingface_hub` cleans them. A token
    /// file that exists but cannot be read is an error, not silently no token.
    pub fn token(&self, given: Option<(&str, &'static str)>) -> std::io::Result<Option<HubToken>> {
        let found = |s: &str, origin| {
            clean(s).map(|t| HubToken {
                secret: Secret::new(t),
                origin,
            })
        };
        if let Some(t) = given.and_then(|(t, how)| found(t, TokenOrigin::Given(how))) {
            return Ok(Some(t));
        }
        for v in TOKEN_VARS {
            if let Some(t) = self.var(v).and_then(|s| found(s, TokenOrigin::Env(v))) {
                return Ok(Some(t));
            }
        }
        let path = self.token_path();
        match std::fs::read_to_string(&path) {
            Ok(text) => Ok(found(&text, TokenOrigin::File(path))),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(std::io::Error::new(
                e.kind(),
                format!("cannot read the token file {}: {e}", path.display()),
            )),
        }
    }
}

fn clean(token: &str) -> Option<String> {
    let t = token.replace(['\r', '\n'], "");
    let t = t.trim();
    (!t.is_empty()).then(|| t.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::Path;

    fn env(vars: &[(&str, &str)]) -> HubEnv {
        HubEnv::new(
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())),
            Some("/home/u".into()),
        )
    }

    #[test]
    fn endpoint_and_cache_locations() {
        let e = env(&[]);
        assert_eq!(e.endpoint(), "https://huggingface.co");
        assert_eq!(e.hub_cache(), Path::new("/home/u/.cache/huggingface/hub"));
        assert_eq!(
            e.token_path(),
            Path::new("/home/u/.cache/huggingface/token")
        );
        let e = env(&[
            ("HF_ENDPOINT", "http://127.0.0.1:9/"),
            ("XDG_CACHE_HOME", "/x"),
        ]);
        assert_eq!(e.endpoint(), "http://127.0.0.1:9");
        assert_eq!(e.hub_cache(), Path::new("/x/huggingface/hub"));
        let e = env(&[("HF_HOME", "~/hf"), ("HF_TOKEN_PATH", "/t/tok")]);
        assert_eq!(e.hub_cache(), Path::new("/home/u/hf/hub"));
        assert_eq!(e.token_path(), Path::new("/t/tok"));
        let e = env(&[("HF_HOME", "/h"), ("HUGGINGFACE_HUB_CACHE", "/legacy")]);
        assert_eq!(e.hub_cache(), Path::new("/legacy"));
        let e = env(&[
            ("HF_HUB_CACHE", "/new"),
            ("HUGGINGFACE_HUB_CACHE", "/legacy"),
        ]);
        assert_eq!(e.hub_cache(), Path::new("/new"));
        // Empty means unset.
        assert_eq!(env(&[("HF_ENDPOINT", "")]).endpoint(), DEFAULT_ENDPOINT);
    }

    #[test]
    fn token_precedence_and_cleaning() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("token");
        std::fs::write(&file, " hf_file\r\n").unwrap();
        let path = file.to_str().unwrap();
        let tok = |e: &HubEnv, flag: Option<&str>| {
            e.token(flag.map(|f| (f, "--token")))
                .unwrap()
                .map(|t| (t.secret.expose().to_string(), t.origin))
        };
        let e = env(&[("HF_TOKEN_PATH", path)]);
        assert_eq!(
            tok(&e, None),
            Some(("hf_file".into(), TokenOrigin::File(file.clone())))
        );
        let e = env(&[
            ("HF_TOKEN_PATH", path),
            ("HUGGING_FACE_HUB_TOKEN", "legacy"),
        ]);
        assert_eq!(
            tok(&e, None),
            Some(("legacy".into(), TokenOrigin::Env("HUGGING_FACE_HUB_TOKEN")))
        );
        let e = env(&[("HF_TOKEN_PATH", path), ("HF_TOKEN", " env\n")]);
        assert_eq!(
            tok(&e, None),
            Some(("env".into(), TokenOrigin::Env("HF_TOKEN")))
        );
        assert_eq!(
            tok(&e, Some("flag")),
            Some(("flag".into(), TokenOrigin::Given("--token")))
        );
        // An empty flag is no flag.
        assert_eq!(tok(&e, Some("  ")).unwrap().1, TokenOrigin::Env("HF_TOKEN"));
        let missing = dir.path().join("none");
        let e = env(&[("HF_TOKEN_PATH", missing.to_str().unwrap())]);
        assert_eq!(tok(&e, None), None);
        std::fs::write(&file, "\n").unwrap();
        assert_eq!(tok(&env(&[("HF_TOKEN_PATH", path)]), None), None);
        // A directory where the file should be is an error, not "no token".
        let e = env(&[("HF_TOKEN_PATH", dir.path().to_str().unwrap())]);
        assert!(e.token(None).is_err());
    }

    #[test]
    fn tokens_do_not_show_in_debug_output() {
        let e = env(&[("HF_TOKEN", "hf_secret")]);
        let t = e.token(None).unwrap().unwrap();
        assert!(!format!("{t:?}").contains("hf_secret"));
    }
}
