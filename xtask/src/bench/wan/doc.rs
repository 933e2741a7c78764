//! The hand-kept part of `docs/BENCHMARKS.md`'s wide-area section: how the link is
//! emulated and what the rows measure, written once, with the first `--wan` table.

use super::link::{Profile, WINDOW};

/// The section's hand-kept part, written once with the first table.
pub fn method() -> String {
    let mut tbf = String::new();
    for p in Profile::ALL {
        tbf.push_str(&format!(
            "| {} | {} ms | {}mbit | {} bytes | {} ms | {} bytes | {} KiB ({:.0} Mbit/s per connection) |\n",
            p.label(),
            p.rtt_ms / 2,
            p.rate_mbit,
            p.tbf_burst(),
            Profile::TBF_LATENCY_MS,
            p.line_bytes(),
            WINDOW >> 10,
            p.window_mbit(WINDOW)
        ));
    }
    format!(
        "## Wide-area link (emulated)\n\n\
`cargo xtask bench --wan` builds the link itself (as root) and measures `xet` and the reference client `hf_xet` over it in the same run.\n\n\
- **Namespaces.** Two network namespaces joined by a veth pair: the clients run in one (10.77.0.1), `xet serve` \
(release build, directory store, on 127.0.0.1:8080) and the delay proxy in the other (10.77.0.2). Nothing on the host's \
network changes, and deleting the namespaces removes the link.\n\
- **Bandwidth.** `tc qdisc add dev vethN root tbf` on each end's egress, so upload and download are each limited to the \
profile's rate. The bucket is 64 KiB or one millisecond of the rate, whichever is more (a veth GSO packet is up to 64 KiB); \
the queue holds {} ms. tbf counts whole Ethernet frames, so TCP payload tops out near 95% of the rate.\n\
- **Delay.** `sch_netem` is not available, so a delay proxy written for this (`xtask/src/bench/wan/proxy.rs`, tokio) relays each \
connection to the server and holds every piece it reads for half the RTT before writing it on, both directions, so a \
request and its answer take one RTT (tokio's timer fires on the next whole millisecond, so 0.9 ms is taken off each \
direction's hold; the link check shows what is left). It is a delay line: it keeps reading while earlier pieces wait, within twice the one-way \
bandwidth-delay product plus 256 KiB per connection and direction; half-closes are passed on after the same delay. \
The client's connect completes against the proxy at once, so the proxy holds a new connection's first bytes until one \
RTT after the accept, the cost of the handshake.\n\
- **Window.** The clients' TCP sees the veth's round trip, so without more one connection would carry the whole link at \
any RTT. The proxy caps each connection's bytes in flight per direction as a TCP window does: a byte it reads counts until \
its acknowledgement would be back (one RTT after it was read, or half an RTT after it was written on if that was later) and \
the proxy stops reading from that side while 4 MiB are in flight, so one connection carries at most 4 MiB per RTT \
(168 Mbit/s at 200 ms) and a client fills a long fat link only with parallel requests. 4 MiB is the machine's Linux \
default send buffer maximum (`net.ipv4.tcp_wmem` = 4096 16384 4194304), which holds a sender's unacknowledged bytes; \
the receive side allows more (`tcp_rmem` max 32 MiB, half advertised), so the sender's buffer is the bound, for the \
client's uploads and the server's answers alike (`--window-kib` changes it). Not emulated: slow start and loss recovery \
run at LAN speed (the window is reached at once).\n\
- **Link check.** Before each profile's rows, a probe client times a one-byte echo through a second proxy with the same \
delay and window (min and median of 20, and a new connection's first echo, which should be two RTTs), a bulk TCP transfer \
each way over twice as many connections as it takes for their windows to cover the bandwidth-delay product (two seconds \
of the rate, timed from the first byte to the last), and one connection's download of eight windows, timed once its \
first window is in (its ceiling is the window per RTT).\n\
- **Rows.** Big-file upload and download (`--size-mib`, default 256, and 1 GiB on 200 ms / 1 Gbit, the issue's target; \
MB/s and the fraction of the link rate), fresh store, server and caches for every upload run; except on 200 ms / 1 Gbit, \
an upload of 2,000 files of 1-64 KiB (pseudo-random sizes and bytes, fixed seed; \
`xet upload DIR`, the reference's `upload_files` with the list), next to the time their bytes alone need at the link rate; \
on the 80 ms profile, `xet download hf://` next to `hf download` of a repository of 1,000 of those files (the server in \
Hub mode with a token, the repository uploaded from inside the server namespace), fresh HF homes each run; \
also on 80 ms, `xet sync` next to `hf sync` of the 2,000 files up into an empty bucket (a fresh store, server and bucket each run, the bucket created \
inside the server namespace) and down into an empty folder (the bucket filled once inside the server namespace; each run checked to have written every file), \
with each tool's requests per run (the lines of the server's request log); \
the first xorb byte of the download: from the client's start, and from its first connection, to the first byte of the answer \
to its first `GET /_xorb...` as the proxy delivered it, with the requests and connections before it. CPU seconds per GiB: \
the client's user + system time (`/proc/<pid>/stat` once it has exited, before it is reaped; for the reference that \
includes starting Python) and `xet serve`'s over the same run. The reference's download is not followed by `sync`. Proxy \
and server share the machine's two cores with the client.\n\n\
| profile | delay per direction | tbf rate | tbf burst | tbf latency | proxy buffer per connection and direction | window per connection and direction |\n\
|---|---:|---:|---:|---:|---:|---:|\n{tbf}",
        Profile::TBF_LATENCY_MS
    )
}
