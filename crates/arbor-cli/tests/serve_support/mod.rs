//! The harness of the `arbor serve` tests: a server process on an ephemeral loopback port,
//! killed when dropped, and a real HTTP client.

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

pub(crate) mod tenants;

pub(crate) struct Served {
    pub(crate) child: Child,
    pub(crate) base: String,
    pub(crate) stderr: std::sync::mpsc::Receiver<String>,
    /// What it said before it listened.
    pub(crate) early: Vec<String>,
}

/// A failed test never leaves a server running.
impl Drop for Served {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn serve(dir: &Path, extra: &[&str]) -> Served {
    serve_env(dir, extra, &[])
}

pub(crate) fn serve_env(dir: &Path, extra: &[&str], env: &[(&str, &str)]) -> Served {
    // The store is `a.db` here unless the environment names one (ARBOR_STORE_URL).
    let store: &[&str] = if env.iter().any(|(k, _)| *k == "ARBOR_STORE_URL") {
        &[]
    } else {
        &["--store", "a.db"]
    };
    let mut child = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["serve", "--listen", "127.0.0.1:0", "--specs", "specs"])
        .args(store)
        .args(extra)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .env_remove("ARBOR_TOKENS")
        .envs(env.iter().copied())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    let err = child.stderr.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            let _ = tx.send(line);
        }
    });
    let mut early = Vec::new();
    let line = loop {
        let line = rx.recv_timeout(Duration::from_secs(30)).unwrap();
        if line.contains("listening on") {
            break line;
        }
        early.push(line);
    };
    let base = line
        .split("listening on ")
        .nth(1)
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
        .to_owned();
    Served {
        child,
        base,
        stderr: rx,
        early,
    }
}

pub(crate) fn client() -> reqwest::Client {
    let _ = rustls::crypto::ring::default_provider().install_default();
    reqwest::Client::new()
}

pub(crate) async fn call(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    body: Option<Value>,
) -> (u16, Value) {
    send(http.request(method, url), body).await
}

/// [`call`] as the tenant of `token`.
pub(crate) async fn call_as(
    http: &reqwest::Client,
    method: reqwest::Method,
    url: String,
    token: &str,
    body: Option<Value>,
) -> (u16, Value) {
    send(http.request(method, url).bearer_auth(token), body).await
}

async fn send(mut req: reqwest::RequestBuilder, body: Option<Value>) -> (u16, Value) {
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

/// Polls the run of `root` until its status is `want`; the run as read then.
pub(crate) async fn status_becomes(
    http: &reqwest::Client,
    base: &str,
    root: &str,
    want: &str,
) -> Value {
    poll_status(http, base, root, want, None).await
}

/// [`status_becomes`] as the tenant of `token`.
pub(crate) async fn status_becomes_as(
    http: &reqwest::Client,
    base: &str,
    root: &str,
    want: &str,
    token: &str,
) -> Value {
    poll_status(http, base, root, want, Some(token)).await
}

async fn poll_status(
    http: &reqwest::Client,
    base: &str,
    root: &str,
    want: &str,
    token: Option<&str>,
) -> Value {
    let started = Instant::now();
    let mut last = Value::Null;
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never {want}: {last}"
        );
        let mut req = http.get(format!("{base}/v1/runs/{root}"));
        if let Some(token) = token {
            req = req.bearer_auth(token);
        }
        let run: Value = req.send().await.unwrap().json().await.unwrap();
        if run["status"] == want {
            return run;
        }
        last = run;
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Starts a run of `spec`; its root's id.
pub(crate) async fn start_run(http: &reqwest::Client, base: &str, spec: &str) -> String {
    let (status, run) = call(
        http,
        reqwest::Method::POST,
        format!("{base}/v1/runs"),
        Some(json!({"spec": spec})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    run["root_id"].as_str().unwrap().to_owned()
}

/// Waits (at most 10 s) until a resume of `root` finds nothing waiting: the tree was
/// released by whatever held it (a hosted period, a run).
pub(crate) async fn resume_until_released(http: &reqwest::Client, base: &str, root: &str) {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "never released"
        );
        let (_, e) = call(
            http,
            reqwest::Method::POST,
            format!("{base}/v1/runs/{root}/resume"),
            None,
        )
        .await;
        // Released: a resume finds nothing to go on with (no decision waits, no run of the
        // tree was cut off).
        if e["error"]["message"].as_str().is_some_and(|m| {
            m.ends_with("waits for no decision and no run of its tree can go on: nothing to resume")
        }) {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The tool results of `session`'s transcript (what its calls returned).
pub(crate) async fn tool_results(http: &reqwest::Client, base: &str, session: &str) -> Vec<String> {
    let (_, page) = call(
        http,
        reqwest::Method::GET,
        format!("{base}/v1/sessions/{session}/transcript?limit=500"),
        None,
    )
    .await;
    page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect()
}

/// A server over a fresh directory whose `specs/NAME.toml` holds `text`.
pub(crate) fn serving(name: &str, text: &str) -> (tempfile::TempDir, Served) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join(format!("specs/{name}.toml")), text).unwrap();
    let served = serve(dir.path(), &[]);
    (dir, served)
}

/// A spec whose root spawns, in one turn, a message-mode `messenger` (its section given
/// whole: its tools and turns) and a sync `worker` that stops on a gated `echo` at once
/// (`approvals = true`); the root then answers each of `root_texts` in turn.
pub(crate) fn messenger_and_worker(messenger: &str, root_texts: &[&str]) -> String {
    let mut spec = String::from(
        r#"
task = "two runs"
root = "root"

[supervisor]
approvals = true

[agents.root]
children = ["messenger", "worker"]

[[agents.root.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "messenger", name = "messenger", input = "go", mode = "message" } },
  { name = "spawn_agent", arguments = { child_id = "worker", name = "worker", input = "go" } },
]
"#,
    );
    for text in root_texts {
        spec.push_str(&format!("\n[[agents.root.turns]]\ntext = {text:?}\n"));
    }
    spec.push_str("\n[agents.messenger]\n");
    spec.push_str(messenger);
    spec.push_str(
        r#"
[agents.worker]
tools = ["echo"]

[[agents.worker.turns]]
tool_calls = [{ name = "echo", arguments = { text = "worker's" } }]

[[agents.worker.turns]]
text = "worked"
"#,
    );
    spec
}

/// The session named `name` in a run's tree.
pub(crate) fn node<'a>(run: &'a Value, name: &str) -> &'a Value {
    run["tree"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {run}"))
}

/// One SSE event block: its type (`message` when unnamed), its id (0 when none) and its data
/// as JSON; none for a block without data (a keep-alive comment).
pub(crate) fn sse_block(block: &str) -> Option<(String, u64, Value)> {
    let (mut event, mut id, mut data) = ("message".to_owned(), 0, String::new());
    for line in block.lines() {
        if let Some(v) = line.strip_prefix("event:") {
            v.trim().clone_into(&mut event);
        } else if let Some(v) = line.strip_prefix("id:") {
            id = v.trim().parse().unwrap_or(0);
        } else if let Some(v) = line.strip_prefix("data:") {
            data.push_str(v.trim_start());
        }
    }
    (!data.is_empty()).then(|| (event, id, serde_json::from_str(&data).unwrap()))
}
