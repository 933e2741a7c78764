//! Which files a caller may read through the CAS routes (reconstructions, file lookups)
//! and claim in a commit, by its [`Scope`]: a repository's CAS token reads the files
//! that repository references, a scoped user token those of the repositories it
//! reaches, an open server those of public repositories and files no repository
//! references; an unscoped user token, or a server without the Hub, everything.

use crate::auth::{Caller, Scope};
use crate::state::Shared;
use xet_cas::CasError;
use xet_hash::MerkleHash;

/// Whether `caller` may read `file`.
pub(crate) async fn can_read_file(
    s: &Shared,
    caller: &Caller,
    file: &MerkleHash,
) -> Result<bool, CasError> {
    let Some(hub) = &s.hub else {
        return Ok(true);
    };
    // The empty file is every repository's and no secret.
    if file.is_zero() {
        return Ok(true);
    }
    let store = hub.repos.store();
    match &caller.scope {
        Scope::All => Ok(true),
        Scope::Repo(repo) => store.references_file(repo, file).await,
        Scope::Open => {
            let holders = store.repos_referencing(file).await?;
            Ok(holders.is_empty() || holders.iter().any(|r| !r.private))
        }
        Scope::Patterns(_) => {
            let holders = store.repos_referencing(file).await?;
            Ok(holders.iter().any(|r| caller.scope.reaches(&record_ref(r))))
        }
    }
}

/// The repository a record describes.
fn record_ref(r: &xet_hub::RepoRecord) -> xet_hub::RepoRef {
    xet_hub::RepoRef::new(r.kind, r.id.clone())
}
