//! The shared `xet_cas_conformance` suite against `HttpCas` talking to a real
//! `xet_server` on 127.0.0.1 over an in-memory store, in three setups.

mod support;

use support::TestServer;
use xet_cas_conformance::Subject;
use xet_client::{HttpCas, LegacyOptions};

/// Grants and v2 routes on both sides (the default path).
mod grants_v2 {
    use super::*;
    async fn make() -> Subject {
        let server = TestServer::full().await;
        let cas = support::client(&server.url);
        Subject::with_guard(cas, server)
    }
    xet_cas_conformance::cas_conformance_tests!(make);
}

/// A server without grants or v2 routes: the client falls back per request.
mod legacy_server {
    use super::*;
    async fn make() -> Subject {
        let server = TestServer::legacy().await;
        let cas = support::client(&server.url);
        Subject::with_guard(cas, server)
    }
    xet_cas_conformance::cas_conformance_tests!(make);
}

/// A full server, the client forced onto the legacy routes.
mod legacy_client {
    use super::*;
    async fn make() -> Subject {
        let server = TestServer::full().await;
        let legacy = LegacyOptions {
            direct_xorb_upload: true,
            v1_shards: true,
            v1_reconstructions: true,
        };
        let cas = HttpCas::new(support::config(&server.url).with_legacy(legacy)).expect("client");
        Subject::with_guard(cas, server)
    }
    xet_cas_conformance::cas_conformance_tests!(make);
}
