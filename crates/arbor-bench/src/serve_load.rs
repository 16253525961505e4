//! `--serve-load RUNS`: `arbor serve` under a bounded load, as a team's network would put it.
//!
//! The `arbor` binary beside this program serves a SQLite store already holding
//! [`SEED_SESSIONS`] sessions of finished trees (so what scales with the store shows), with
//! two tenants and an operator. Against it, on loopback and at once:
//!
//! - [`CLIENTS`] clients start `RUNS` runs (`POST /v1/runs`, each a root that delegates to one
//!   child), each start timed;
//! - [`PROBES`] clients poll `/readyz` and `/metrics` as fast as they answer;
//! - [`SLOW_CLIENTS`] clients send half a request's headers and hold the connection;
//! - [`SSE_CLIENTS`] clients follow started runs' event streams to their end.
//!
//! Then every run must have succeeded, every answer been the expected one, each event stream
//! have ended with `end`, a start's p99 stay under [`MAX_START_P99_MS`] and a probe's under
//! [`MAX_PROBE_P99_MS`], the server's peak
//! memory under [`MAX_RSS_MB`], and a SIGTERM end it within [`MAX_SHUTDOWN_S`]. It reports runs started per second and the p50 and p99
//! of a start and of a probe.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::sync::Mutex;
use tokio_util::sync::CancellationToken;

use crate::big_store;

/// Clients starting runs at once.
pub(crate) const CLIENTS: usize = 32;
/// Clients polling `/readyz` and `/metrics`.
pub(crate) const PROBES: usize = 4;
/// Clients holding half-sent headers.
pub(crate) const SLOW_CLIENTS: usize = 64;
/// Clients following event streams.
pub(crate) const SSE_CLIENTS: usize = 8;
/// Sessions in the store before the load (finished trees of five).
pub(crate) const SEED_SESSIONS: u64 = 10_000;
/// The most the server's resident memory may reach, in MB.
pub(crate) const MAX_RSS_MB: f64 = 256.0;
/// The slowest a run start may be at the 99th percentile while the probes poll, in ms (a
/// debug build on two cores measured 140 ms; a probe that scanned the store made it
/// seconds).
pub(crate) const MAX_START_P99_MS: f64 = 1000.0;
/// The slowest a probe may be at the 99th percentile, in ms (16–52 ms measured; a probe that
/// scanned the store took 3.1 s on a store of 10,000 sessions).
pub(crate) const MAX_PROBE_P99_MS: f64 = 500.0;
/// The longest a SIGTERM may take to end the server, in seconds.
pub(crate) const MAX_SHUTDOWN_S: f64 = 15.0;

const TOKEN_A: &str = "load-token-of-tenant-a-0123456789";
const TOKEN_B: &str = "load-token-of-tenant-b-0123456789";
const TOKEN_OPS: &str = "load-token-of-the-operator-01234";

/// A root that delegates to one child, then answers.
const SPEC: &str = r#"
task = "delegate once"
root = "root"

[agents.root]
children = ["helper"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "helper", name = "helper", input = "help" } }]
[[agents.root.turns]]
text = "done"

[agents.helper]
[[agents.helper.turns]]
text = "helped"
"#;

/// What the load measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Report {
    pub(crate) runs: u64,
    pub(crate) runs_per_s: f64,
    pub(crate) start_p50_ms: f64,
    pub(crate) start_p99_ms: f64,
    pub(crate) probes: u64,
    pub(crate) probe_p99_ms: f64,
    pub(crate) slow_cut: u64,
    pub(crate) streams_ended: u64,
    pub(crate) peak_rss_mb: f64,
    pub(crate) shutdown_s: f64,
    /// What went wrong (empty when nothing did).
    pub(crate) errors: Vec<String>,
}

impl Report {
    /// Whether the load stayed within the bounds.
    pub(crate) fn ok(&self) -> bool {
        self.errors.is_empty()
            && self.start_p99_ms <= MAX_START_P99_MS
            && self.probe_p99_ms <= MAX_PROBE_P99_MS
            && self.peak_rss_mb <= MAX_RSS_MB
            && self.shutdown_s <= MAX_SHUTDOWN_S
    }
}

/// A started `arbor serve`, killed when dropped.
struct Served {
    child: Child,
    base: String,
}

impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn start_server(arbor: &Path, dir: &Path) -> Result<Served, String> {
    let mut child = Command::new(arbor)
        .args(["serve", "--listen", "127.0.0.1:0", "--specs", "specs"])
        .args(["--store", "a.db", "--tokens", "tokens"])
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .env_remove("ARBOR_TOKENS")
        .env("ARBOR_HEADER_TIMEOUT_MS", "1000")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start arbor serve: {e}"))?;
    let stderr = child.stderr.take().ok_or("no stderr")?;
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stderr)
            .lines()
            .map_while(Result::ok)
        {
            let _ = tx.send(line);
        }
    });
    let line = loop {
        let line = rx
            .recv_timeout(Duration::from_secs(60))
            .map_err(|_| "arbor serve never said where it listens".to_owned())?;
        if line.contains("listening on") {
            break line;
        }
    };
    let base = line
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .ok_or_else(|| format!("no address in {line:?}"))?
        .to_owned();
    // Keep reading its stderr, so it never blocks on a full pipe.
    std::thread::spawn(move || while rx.recv().is_ok() {});
    Ok(Served { child, base })
}

/// The peak resident memory of process `pid`, in MB.
fn peak_mb(pid: u32) -> f64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|text| {
            text.lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<f64>().ok())
        })
        .map_or(0.0, |kib| kib / 1024.0)
}

fn percentile_ms(samples: &mut [Duration], p: f64) -> f64 {
    if samples.is_empty() {
        return 0.0;
    }
    samples.sort_unstable();
    let at = ((samples.len() as f64 * p).ceil() as usize).clamp(1, samples.len()) - 1;
    samples[at].as_secs_f64() * 1000.0
}

/// What the clients share.
struct Shared {
    http: reqwest::Client,
    base: String,
    errors: Mutex<Vec<String>>,
    starts: Mutex<Vec<Duration>>,
    probes: Mutex<Vec<Duration>>,
    roots: Mutex<Vec<(String, &'static str)>>,
    next: AtomicU64,
    slow_cut: AtomicU64,
    streams_ended: AtomicU64,
    followed: AtomicUsize,
}

impl Shared {
    async fn error(&self, e: String) {
        let mut errors = self.errors.lock().await;
        if errors.len() < 20 {
            errors.push(e);
        }
    }
}

/// Starts runs until `runs` have started.
async fn starter(s: Arc<Shared>, runs: u64) {
    loop {
        let n = s.next.fetch_add(1, Ordering::Relaxed);
        if n >= runs {
            return;
        }
        let token = if n.is_multiple_of(2) {
            TOKEN_A
        } else {
            TOKEN_B
        };
        let t = Instant::now();
        let sent = s
            .http
            .post(format!("{}/v1/runs", s.base))
            .bearer_auth(token)
            .json(&serde_json::json!({"spec": "delegate"}))
            .send()
            .await;
        let answer = match sent {
            Ok(resp) => {
                let status = resp.status().as_u16();
                resp.json::<serde_json::Value>()
                    .await
                    .map(|v| (status, v))
                    .map_err(|e| e.to_string())
            }
            Err(e) => Err(e.to_string()),
        };
        s.starts.lock().await.push(t.elapsed());
        match answer {
            Ok((201, run)) => {
                let root = run["root_id"].as_str().unwrap_or_default().to_owned();
                s.roots.lock().await.push((root, token));
            }
            Ok((status, body)) => s.error(format!("a start answered {status}: {body}")).await,
            Err(e) => s.error(format!("a start failed: {e}")).await,
        }
    }
}

/// Polls `/readyz` and `/metrics` until `stop`.
async fn prober(s: Arc<Shared>, stop: CancellationToken) {
    let mut i = 0u64;
    while !stop.is_cancelled() {
        i += 1;
        let path = if i.is_multiple_of(2) {
            "/readyz"
        } else {
            "/metrics"
        };
        let t = Instant::now();
        let sent = s
            .http
            .get(format!("{}{path}", s.base))
            .bearer_auth(TOKEN_OPS)
            .send()
            .await;
        match sent {
            Ok(resp) if resp.status().as_u16() == 200 => {
                let _ = resp.bytes().await;
                s.probes.lock().await.push(t.elapsed());
            }
            Ok(resp) => s.error(format!("{path} answered {}", resp.status())).await,
            Err(e) => s.error(format!("{path} failed: {e}")).await,
        }
    }
}

/// Sends half a request's headers and holds the connection, again each time the server
/// cuts it, until `stop`.
async fn slow_client(s: Arc<Shared>, stop: CancellationToken) {
    let addr = s.base.trim_start_matches("http://").to_owned();
    while !stop.is_cancelled() {
        let Ok(mut conn) = tokio::net::TcpStream::connect(&addr).await else {
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        if conn
            .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
            .await
            .is_err()
        {
            continue;
        }
        let mut buf = [0u8; 64];
        tokio::select! {
            read = conn.read(&mut buf) => {
                if matches!(read, Ok(0) | Err(_)) {
                    s.slow_cut.fetch_add(1, Ordering::Relaxed);
                }
            }
            () = stop.cancelled() => return,
        }
    }
}

/// Follows the event streams of started runs to their end, until `stop`.
async fn follower(s: Arc<Shared>, stop: CancellationToken) {
    while !stop.is_cancelled() {
        let n = s.followed.fetch_add(1, Ordering::Relaxed);
        let root = loop {
            if let Some(r) = s.roots.lock().await.get(n * 7).cloned() {
                break Some(r);
            }
            if stop.is_cancelled() {
                break None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        let Some((root, token)) = root else { return };
        let url = format!("{}/v1/sessions/{root}/events", s.base);
        let read = async {
            let resp = s.http.get(&url).bearer_auth(token).send().await?;
            let status = resp.status().as_u16();
            let text = resp.text().await?;
            Ok::<_, reqwest::Error>((status, text))
        };
        match tokio::time::timeout(Duration::from_secs(60), read).await {
            Ok(Ok((200, text))) if text.contains("event: end") => {
                s.streams_ended.fetch_add(1, Ordering::Relaxed);
            }
            Ok(Ok((status, text))) => {
                let tail: String = text
                    .chars()
                    .rev()
                    .take(200)
                    .collect::<Vec<_>>()
                    .into_iter()
                    .rev()
                    .collect();
                s.error(format!("a stream answered {status} without end: {tail}"))
                    .await;
            }
            Ok(Err(e)) => s.error(format!("a stream failed: {e}")).await,
            Err(_) => s.error(format!("the stream of {root} never ended")).await,
        }
    }
}

/// Waits until every started run has succeeded (at most a minute).
async fn all_finished(s: &Shared) {
    let roots = s.roots.lock().await.clone();
    let deadline = Instant::now() + Duration::from_secs(60);
    for (root, token) in roots {
        loop {
            let run: Result<serde_json::Value, _> = match s
                .http
                .get(format!("{}/v1/runs/{root}", s.base))
                .bearer_auth(token)
                .send()
                .await
            {
                Ok(resp) => resp.json().await,
                Err(e) => Err(e),
            };
            match run {
                Ok(run) if run["status"] == "succeeded" => break,
                Ok(run) if run["status"] == "running" && Instant::now() < deadline => {}
                Ok(run) => {
                    s.error(format!("run {root} ended {}", run["status"])).await;
                    break;
                }
                Err(e) => {
                    s.error(format!("reading run {root}: {e}")).await;
                    break;
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
}

/// Seeds the store, starts the server and drives the load.
pub(crate) fn run(runs: u64) -> Result<Report, String> {
    let arbor = big_store::arbor_binary()?;
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    rt.block_on(big_store::seed(&dir.path().join("a.db"), SEED_SESSIONS))?;
    std::fs::create_dir(dir.path().join("specs")).map_err(|e| e.to_string())?;
    std::fs::write(dir.path().join("specs/delegate.toml"), SPEC).map_err(|e| e.to_string())?;
    let tokens = [
        arbor_server::Tenants::file_line("a", TOKEN_A),
        arbor_server::Tenants::file_line("b", TOKEN_B),
        format!(
            "{} operator",
            arbor_server::Tenants::file_line("ops", TOKEN_OPS)
        ),
    ];
    std::fs::write(dir.path().join("tokens"), tokens.join("\n")).map_err(|e| e.to_string())?;
    let mut served = start_server(&arbor, dir.path())?;
    let _ = rustls::crypto::ring::default_provider().install_default();
    let shared = Arc::new(Shared {
        http: reqwest::Client::new(),
        base: served.base.clone(),
        errors: Mutex::default(),
        starts: Mutex::default(),
        probes: Mutex::default(),
        roots: Mutex::default(),
        next: AtomicU64::new(0),
        slow_cut: AtomicU64::new(0),
        streams_ended: AtomicU64::new(0),
        followed: AtomicUsize::new(0),
    });
    let elapsed = rt.block_on(async {
        let stop = CancellationToken::new();
        let mut side = Vec::new();
        for _ in 0..SLOW_CLIENTS {
            side.push(tokio::spawn(slow_client(shared.clone(), stop.clone())));
        }
        for _ in 0..PROBES {
            side.push(tokio::spawn(prober(shared.clone(), stop.clone())));
        }
        let followers: Vec<_> = (0..SSE_CLIENTS)
            .map(|_| tokio::spawn(follower(shared.clone(), stop.clone())))
            .collect();
        let started = Instant::now();
        let starters: Vec<_> = (0..CLIENTS)
            .map(|_| tokio::spawn(starter(shared.clone(), runs)))
            .collect();
        for s in starters {
            let _ = s.await;
        }
        let elapsed = started.elapsed();
        all_finished(&shared).await;
        stop.cancel();
        for s in side {
            let _ = s.await;
        }
        for f in followers {
            let _ = f.await;
        }
        elapsed
    });
    let peak_rss_mb = peak_mb(served.child.id());
    let t = Instant::now();
    let _ = Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status();
    let code = served.child.wait().map_err(|e| e.to_string())?;
    let shutdown_s = t.elapsed().as_secs_f64();
    let mut errors = std::mem::take(&mut *shared.errors.blocking_lock());
    if !code.success() {
        errors.push(format!("arbor serve exited {code} after SIGTERM"));
    }
    let mut starts = std::mem::take(&mut *shared.starts.blocking_lock());
    let mut probes = std::mem::take(&mut *shared.probes.blocking_lock());
    Ok(Report {
        runs,
        runs_per_s: runs as f64 / elapsed.as_secs_f64().max(1e-9),
        start_p50_ms: percentile_ms(&mut starts, 0.50),
        start_p99_ms: percentile_ms(&mut starts, 0.99),
        probes: probes.len() as u64,
        probe_p99_ms: percentile_ms(&mut probes, 0.99),
        slow_cut: shared.slow_cut.load(Ordering::Relaxed),
        streams_ended: shared.streams_ended.load(Ordering::Relaxed),
        peak_rss_mb,
        shutdown_s,
        errors,
    })
}
