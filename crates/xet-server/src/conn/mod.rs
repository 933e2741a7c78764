//! Connections: the accept loop of [`Server::serve`](crate::Server::serve) and the limits
//! that keep idle, slow or stalled clients from holding the server's sockets and memory.
//!
//! | limit | default | what happens |
//! |---|---|---|
//! | `header_timeout` | 30 s | a connection that has not sent a whole request head this long after it opened (or after the head's first byte) is closed; a half-sent head gets `408` + `Connection: close` first |
//! | `keepalive_timeout` | 60 s | a kept-alive connection with no new request this long after its last answer is closed |
//! | `body_timeout` | 30 s | a request body that delivers nothing this long (while its handler waits for it) is abandoned: `408 request_timeout` + `Connection: close` |
//! | `send_timeout` | 60 s | an answer the client does not read for this long (the socket accepts nothing) is dropped and the connection closed |
//! | `max_connections` | 512 | open connections; never more than the open-file limit allows (a quarter of it, at least 64, is left for files) |
//!
//! A zero timeout turns that timeout off. At `max_connections`, a new connection first
//! makes room by closing the connection that has been idle (between requests, or never
//! sent a byte) the longest, else one stuck for over a second in a half-sent head (that
//! one gets `503`); when every connection is busy with a request, the new one is answered
//! `503 busy` with `Retry-After: 1` and closed. Failed `accept`s (`EMFILE` when the
//! process is out of file descriptors) close the longest-idle connection, back off 100 ms
//! and are logged at most once a second.
//!
//! hyper's own `header_read_timeout` is not used: it starts whenever hyper waits for a
//! head, so it is also the keep-alive timeout (one number for both) and it closes without
//! an answer.
//!
//! The pieces: the accept loop (`accept`: [`serve`]), the open connections and which to
//! close for room (`registry`), the socket's timeouts (`io`), the request-body deadline
//! (`body`), and the limits themselves (`limits`).

mod accept;
mod body;
mod io;
mod limits;
mod registry;

pub use accept::serve;
pub(crate) use accept::set_nodelay;
pub(crate) use body::body_deadline;
pub use body::{BodyTimedOut, REQUEST_TIMEOUT};
pub use limits::{ConnLimits, connection_cap, open_file_limit};

// The defaults live with the config they fill in (which must not depend on this module);
// they are named here too, where `xet serve`'s flags look for them.
pub use crate::config::{
    DEFAULT_BODY_TIMEOUT, DEFAULT_HEADER_TIMEOUT, DEFAULT_KEEPALIVE_TIMEOUT,
    DEFAULT_MAX_CONNECTIONS, DEFAULT_SEND_TIMEOUT,
};
