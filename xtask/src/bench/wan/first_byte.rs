//! The first-xorb-byte row of `bench --wan`: from the delay proxy's events during each
//! download run, when the answer to the client's first `GET /_xorb...` began to arrive,
//! and what the client asked before it.

use super::proxy::Event;
use crate::bench::measure::Run;

/// Time to the first byte of the first xorb GET's answer (`GET /_xorb...`), as the
/// proxy delivered it to the client; the least over the runs.
#[derive(Default)]
pub struct FirstByte {
    /// From the client's start (process spawn).
    pub from_start_ms: Option<f64>,
    /// From the client's first connection reaching the proxy.
    from_connect_ms: Option<f64>,
    /// Requests the client sent before that GET, in the best run by `from_start_ms`.
    requests_before: usize,
    /// Connections it had opened by then.
    conns: usize,
    /// Those requests, method and route (the path up to its third `/`).
    routes: Vec<String>,
}

impl FirstByte {
    pub fn cell(&self) -> String {
        match (self.from_start_ms, self.from_connect_ms) {
            (Some(s), Some(c)) => format!(
                "{s:.0} ms ({c:.0} ms from connect; {} connections, {} requests before: {})",
                self.conns,
                self.requests_before,
                self.routes.join(", ")
            ),
            _ => "not seen".into(),
        }
    }
}

/// The best of the runs: each run's events are those between its start and its end.
pub fn first_byte(events: &[Event], runs: &[Run]) -> FirstByte {
    let mut best = FirstByte::default();
    for r in runs {
        let ev: Vec<&Event> = events
            .iter()
            .filter(|e| (r.start_ns..=r.end_ns).contains(&e.at_ns()))
            .collect();
        let Some((i, conn)) = ev.iter().enumerate().find_map(|(i, e)| match e {
            Event::Request { conn, line, .. } if line.starts_with("GET /_xorb") => Some((i, *conn)),
            _ => None,
        }) else {
            continue;
        };
        let Some(at) = ev[i..].iter().find_map(|e| match e {
            Event::FirstByte { conn: c, at_ns } if *c == conn => Some(*at_ns),
            _ => None,
        }) else {
            continue;
        };
        let first_conn = ev.iter().find_map(|e| match e {
            Event::Conn { at_ns, .. } => Some(*at_ns),
            _ => None,
        });
        let ms = |from: u64| at.saturating_sub(from) as f64 / 1e6;
        let from_start = ms(r.start_ns);
        if best.from_start_ms.is_none_or(|b| from_start < b) {
            best = FirstByte {
                from_start_ms: Some(from_start),
                from_connect_ms: first_conn.map(ms),
                requests_before: ev[..i]
                    .iter()
                    .filter(|e| matches!(e, Event::Request { .. }))
                    .count(),
                conns: ev[..i]
                    .iter()
                    .filter(|e| matches!(e, Event::Conn { .. }))
                    .count(),
                routes: ev[..i]
                    .iter()
                    .filter_map(|e| match e {
                        Event::Request { line, .. } => Some(route(line)),
                        _ => None,
                    })
                    .collect(),
            };
        }
    }
    best
}

/// `GET /v1/reconstructions/<hash> HTTP/1.1` → `GET /v1/reconstructions`.
fn route(request_line: &str) -> String {
    let mut f = request_line.split(' ');
    let method = f.next().unwrap_or("");
    let path = f.next().unwrap_or("");
    let end = path
        .match_indices('/')
        .nth(2)
        .map_or(path.len(), |(i, _)| i);
    let end = path.find('?').map_or(end, |q| q.min(end));
    format!("{method} {}", &path[..end])
}

#[cfg(test)]
mod tests {
    use super::route;

    #[test]
    fn routes_keep_method_and_two_path_segments() {
        assert_eq!(
            route("GET /v1/reconstructions/0123abcd HTTP/1.1"),
            "GET /v1/reconstructions"
        );
        assert_eq!(route("HEAD /v1/files/ff HTTP/1.1"), "HEAD /v1/files");
        assert_eq!(route("GET /health HTTP/1.1"), "GET /health");
        assert_eq!(route("GET /api/models?x=1 HTTP/1.1"), "GET /api/models");
    }
}
