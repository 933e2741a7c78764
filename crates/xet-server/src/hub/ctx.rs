//! What every Hub handler gets ([`Ctx`]: the state, the base URL, the request's headers,
//! query and path) and the request parsing they share (path segments, form pairs).

use axum::http::{HeaderMap, StatusCode};
use xet_hub::api::{error_code, unquote};
use xet_hub::{RepoError, RepoRecord, RepoRef, Repos};

use super::reply::{HubReply, HubResult};
use crate::auth::{Caller, UserGrant, bearer};
use crate::config::Access;
use crate::state::{AppState, Hub};

/// What every Hub handler gets: the shared state, the Hub, the base URL clients reach
/// this server at, the request's headers, and its path split into decoded segments.
pub(crate) struct Ctx {
    pub state: AppState,
    pub base: String,
    pub headers: HeaderMap,
    pub query: Option<String>,
    pub path: String,
}

impl Ctx {
    pub(crate) fn hub(&self) -> &Hub {
        self.state
            .hub
            .as_deref()
            .expect("hub routes exist only with a hub")
    }

    pub(crate) fn repos(&self) -> &Repos {
        &self.hub().repos
    }

    /// The caller, who must hold `need`. Only user tokens count (minted CAS tokens are
    /// for the CAS). The 401s follow the Hub: clients show "repository not found" for a
    /// 401 on a repository URL unless the message says the credentials are invalid.
    pub(crate) fn caller(&self, need: Access) -> HubResult<Caller> {
        let auth = &self.state.auth;
        if !auth.enabled() {
            return Ok(Caller::open(None));
        }
        let Some(presented) = bearer(&self.headers) else {
            return Err(HubReply::coded(
                StatusCode::UNAUTHORIZED,
                error_code::REPO_NOT_FOUND,
                "authentication required: this server needs a token (set HF_TOKEN or pass --token)",
            ));
        };
        match auth.user_grant(presented, need) {
            UserGrant::Unknown => Err(HubReply::new(
                StatusCode::UNAUTHORIZED,
                "Invalid credentials in Authorization header",
            )),
            UserGrant::TooWeak => Err(HubReply::new(
                StatusCode::FORBIDDEN,
                "this token is read-only: writing to a repository needs a write token",
            )),
            UserGrant::Granted { access, scope } => Ok(Caller {
                token: Some(presented.to_string()),
                access,
                user: true,
                expires: None,
                scope,
            }),
        }
    }

    /// The record of `repo`, if `caller` may see it. To anyone without a user token a
    /// private repository and a missing one both answer 401 `RepoNotFound`, as the Hub
    /// does.
    pub(crate) async fn open_repo(&self, repo: &RepoRef, caller: &Caller) -> HubResult<RepoRecord> {
        // A scoped token sees nothing outside its scope, existence included: such a
        // repository answers as one that does not exist.
        if !caller.scope.reaches(repo) {
            return Err(RepoError::RepoNotFound(repo.clone()).into());
        }
        // Without a user token, a private repository and one that does not exist answer
        // alike (as the Hub does), so that nobody learns which private ones exist.
        let hidden = || {
            HubReply::coded(
                StatusCode::UNAUTHORIZED,
                error_code::REPO_NOT_FOUND,
                format!("repository {repo} not found (or private: pass a token)"),
            )
        };
        match self.repos().record(repo).await {
            Ok(record) if record.private && !caller.user => Err(hidden()),
            Ok(record) => Ok(record),
            Err(RepoError::RepoNotFound(_)) if !caller.user => Err(hidden()),
            Err(e) => Err(e.into()),
        }
    }

    /// [`open_repo`](Ctx::open_repo), with where the repository keeps its objects and
    /// refs (its name, or the storage it was created with or moved from).
    pub(crate) async fn open(&self, repo: &RepoRef, caller: &Caller) -> HubResult<Opened> {
        let record = self.open_repo(repo, caller).await?;
        Ok(Opened {
            at: record.storage(),
            name: repo.clone(),
            record,
        })
    }

    /// The value of query parameter `key` (first occurrence, decoded).
    pub(crate) fn query_param(&self, key: &str) -> Option<String> {
        form_pairs(self.query.as_deref()?)
            .into_iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v)
    }
}

/// `k=v&k2=v2` pairs, `+` as space, percent-decoded (forms and query strings).
pub(crate) fn form_pairs(s: &str) -> Vec<(String, String)> {
    let decode = |t: &str| unquote(&t.replace('+', " ")).unwrap_or_default();
    s.split('&')
        .filter(|p| !p.is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (decode(k), decode(v)),
            None => (decode(p), String::new()),
        })
        .collect()
}

/// Split a raw URL path into percent-decoded segments (so `refs%2Fpr%2F1` stays one).
pub(crate) fn segments(path: &str) -> HubResult<Vec<String>> {
    path.trim_start_matches('/')
        .split('/')
        .map(|s| {
            unquote(s)
                .ok_or_else(|| HubReply::bad_request(format!("path segment {s:?} is not UTF-8")))
        })
        .collect()
}

/// A repository the caller may see: its record, its name, and its storage (`at`), which
/// every object, ref and file reference of it is read from and written to.
pub(crate) struct Opened {
    pub record: RepoRecord,
    pub name: RepoRef,
    pub at: RepoRef,
}

impl Opened {
    /// `e` as the caller should read it: naming the repository, not its storage.
    pub(crate) fn named(&self, e: RepoError) -> RepoError {
        e.renamed(&self.at, &self.name)
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn forms() {
        assert_eq!(
            super::form_pairs("paths=a+b&paths=c%2Fd&expand=true"),
            [
                ("paths".to_string(), "a b".to_string()),
                ("paths".into(), "c/d".into()),
                ("expand".into(), "true".into())
            ]
        );
    }
}
