//! The Hub client the `hf://` commands share (endpoint and token from the environment
//! `huggingface_hub` reads, `--token` first) and how its errors become exit codes.
//! Imports no other command module.

use anyhow::anyhow;
use xet_hub_client::{ErrorKind, HubClient, HubEnv, HubError};

use crate::exit::{CliResult, Code, Failure};

pub(crate) fn usage(msg: impl Into<String>) -> Failure {
    Failure::new(Code::Usage, anyhow!(msg.into()))
}

pub(crate) fn failure(e: HubError) -> Failure {
    let code = match e.kind() {
        ErrorKind::Auth => Code::Auth,
        ErrorKind::NotFound | ErrorKind::Rejected => Code::Rejected,
        ErrorKind::Network => Code::Network,
        ErrorKind::Corrupt => Code::Corrupt,
        ErrorKind::Local => Code::Input,
        ErrorKind::Usage => Code::Usage,
        ErrorKind::Interrupted => Code::Interrupted,
        ErrorKind::Other => Code::Failure,
    };
    // The library names the environment and `hf auth login`; the flag is the CLI's.
    if matches!(e, HubError::NoToken { .. }) {
        return Failure::new(code, anyhow!("{e}; or pass --token"));
    }
    Failure::new(code, anyhow::Error::new(e))
}

/// The Hub client: endpoint from `HF_ENDPOINT`, token from `flag` / `HF_TOKEN` / the
/// token file.
pub(crate) fn client(env: &HubEnv, flag: Option<&str>) -> CliResult<HubClient> {
    let token = env
        .token(flag.map(|t| (t, "--token")))
        .map_err(Failure::input)?;
    HubClient::new(&env.endpoint(), token).map_err(failure)
}

#[cfg(test)]
mod tests {
    use super::*;
    use xet_hub::RepoType;

    #[test]
    fn hub_errors_map_to_the_exit_code_table() {
        let subject = xet_hub_client::RepoTarget::repo(&xet_hub::RepoRef::new(
            RepoType::Model,
            xet_hub::RepoId::parse("o/m").unwrap(),
        ));
        let f = failure(HubError::EntryNotFound {
            subject: subject.clone(),
        });
        assert_eq!(f.code, Code::Rejected);
        let f = failure(HubError::NoToken {
            action: "reading",
            subject,
            message: String::new(),
        });
        assert_eq!(f.code, Code::Auth);
        // The CLI adds its flag to the library's advice.
        let text = f.error.to_string();
        assert!(
            text.contains("HF_TOKEN") && text.ends_with("or pass --token"),
            "{text}"
        );
    }
}
