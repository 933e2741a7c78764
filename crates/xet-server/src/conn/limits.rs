//! The connection limits of one server, as the config asks for them and as the
//! process's open-file limit allows.

use crate::config::ServerConfig;
use std::time::Duration;

/// The connection limits of one server (from [`ServerConfig`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnLimits {
    pub header_timeout: Option<Duration>,
    pub keepalive_timeout: Option<Duration>,
    pub send_timeout: Option<Duration>,
    /// Already lowered to what the open-file limit allows ([`connection_cap`]).
    pub max_connections: usize,
}

fn nonzero(d: Duration) -> Option<Duration> {
    (!d.is_zero()).then_some(d)
}

impl ConnLimits {
    /// The limits `config` asks for, `max_connections` lowered to fit the process's
    /// open-file limit.
    pub fn from_config(config: &ServerConfig) -> ConnLimits {
        ConnLimits {
            header_timeout: nonzero(config.header_timeout),
            keepalive_timeout: nonzero(config.keepalive_timeout),
            send_timeout: nonzero(config.send_timeout),
            max_connections: connection_cap(config.max_connections, open_file_limit()),
        }
    }
}

/// The soft `RLIMIT_NOFILE` of this process (`None` where there is no such thing).
pub fn open_file_limit() -> Option<u64> {
    #[cfg(unix)]
    {
        rustix::process::getrlimit(rustix::process::Resource::Nofile).current
    }
    #[cfg(not(unix))]
    {
        None
    }
}

/// `wanted` connections, lowered so they fit in `fd_limit` open files with a quarter of
/// them (at least 64) left for the store, spool files and the runtime; at least 1.
pub fn connection_cap(wanted: usize, fd_limit: Option<u64>) -> usize {
    let wanted = wanted.max(1);
    match fd_limit {
        Some(n) => {
            let room = n.saturating_sub((n / 4).max(64));
            wanted
                .min(usize::try_from(room).unwrap_or(usize::MAX))
                .max(1)
        }
        None => wanted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_connection_cap_leaves_room_for_files() {
        assert_eq!(connection_cap(512, None), 512);
        assert_eq!(connection_cap(512, Some(20_000)), 512);
        // ulimit -n 1024: a quarter kept for files.
        assert_eq!(connection_cap(2000, Some(1024)), 768);
        assert_eq!(connection_cap(512, Some(256)), 192);
        // At least 64 kept, at least one connection.
        assert_eq!(connection_cap(512, Some(100)), 36);
        assert_eq!(connection_cap(512, Some(10)), 1);
        assert_eq!(connection_cap(0, None), 1);
    }

    #[test]
    fn the_open_file_limit_is_known_on_unix() {
        if cfg!(unix) {
            assert!(open_file_limit().is_some_and(|n| n > 0));
        }
    }
}
