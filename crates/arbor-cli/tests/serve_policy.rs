//! Per-tenant policy on `arbor serve --tenant-policy FILE` (issue 36): which specs a tenant
//! may start, whether it may send inline specs, which overrides it may ask for, and its
//! quotas (runs in flight, per minute, tokens per day), each refusal in the one error shape.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::Duration;

use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::client;
use serve_support::tenants::{TOKEN_A, TOKEN_B, two_tenants_env};

const POLICY: &str = r#"
[default]
specs = ["quick"]

[tenants.a]
specs = ["quick", "slow"]
inline_specs = true
models = ["*"]
max_runs_in_flight = 3

[tenants.b]
max_tokens_per_day = 1
max_runs_per_minute = 50
"#;

const INLINE: &str = r#"
task = "inline"
[agents.root]
[[agents.root.turns]]
text = "hello from an inline spec"
"#;

/// POSTs a run as the tenant of `token`: status and body.
async fn start_as(http: &reqwest::Client, base: &str, token: &str, body: Value) -> (u16, Value) {
    let url = format!("{base}/v1/runs");
    serve_support::call_as(http, reqwest::Method::POST, url, token, Some(body)).await
}

/// Opens an MCP session as `token` on `/mcp/quick` and calls `spawn_agent`: the answer's
/// body.
async fn mcp_spawn(http: &reqwest::Client, base: &str, token: &str) -> String {
    let post = |session: Option<String>, body: Value| {
        let mut req = http
            .post(format!("{base}/mcp/quick"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .header("mcp-protocol-version", "2025-11-25");
        if let Some(s) = session {
            req = req.header("mcp-session-id", s);
        }
        req.json(&body).send()
    };
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    let resp = post(None, init).await.unwrap();
    let session = resp.headers()["mcp-session-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    post(Some(session.clone()), done).await.unwrap();
    let call = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {
        "name": "spawn_agent", "arguments": {"child_id": "helper", "input": "help"}}});
    post(Some(session), call)
        .await
        .unwrap()
        .text()
        .await
        .unwrap()
}

/// Each tenant gets what its policy says: B sees and starts only `quick`, may not choose a
/// model or send an inline spec (A may, though the server was not started with
/// --allow-inline-specs); eight parallel starts of A's with three in flight at most start
/// exactly three (429 naming `max_runs_in_flight` for the rest); B past its tokens of the
/// day is refused naming `max_tokens_per_day`. Before, any tenant could start any spec and
/// override any model.
#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn each_tenant_gets_what_its_policy_allows() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("policy.toml"), POLICY).unwrap();
    let policy = dir.path().join("policy.toml");
    let (_d, served) = two_tenants_env(&["--tenant-policy", policy.to_str().unwrap()], &[]);
    let (http, base) = (client(), served.base.clone());

    // B: the specs it may start, and nothing else.
    let specs: Value = http
        .get(format!("{base}/v1/specs"))
        .bearer_auth(TOKEN_B)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(specs, json!({"specs": ["quick"]}));
    let (status, e) = start_as(&http, &base, TOKEN_B, json!({"spec": "slow"})).await;
    assert_eq!(
        (status, &e["error"]["message"]),
        (404, &json!("Unknown spec")),
        "{e}"
    );
    let (status, e) = start_as(
        &http,
        &base,
        TOKEN_B,
        json!({"spec": "quick", "model": "other"}),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("model")),
        "{e}"
    );
    let (status, e) = start_as(&http, &base, TOKEN_B, json!({"spec_text": INLINE})).await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("spec_text")),
        "{e}"
    );
    // Over MCP too: a spec B may not start is not there for it.
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    for (token, want) in [(TOKEN_B, 404), (TOKEN_A, 200)] {
        let resp = http
            .post(format!("{base}/mcp/slow"))
            .bearer_auth(token)
            .header("accept", "application/json, text/event-stream")
            .json(&init)
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status().as_u16(), want);
    }
    // A may send an inline spec.
    let (status, run) = start_as(&http, &base, TOKEN_A, json!({"spec_text": INLINE})).await;
    assert_eq!(status, 201, "{run}");
    let inline = run["root_id"].as_str().unwrap().to_owned();
    serve_support::status_becomes_as(&http, &base, &inline, "succeeded", TOKEN_A).await;

    // Eight starts of A's at once, three in flight at most: exactly three start.
    let starts: Vec<_> = (0..8)
        .map(|_| {
            let (http, base) = (http.clone(), base.clone());
            tokio::spawn(
                async move { start_as(&http, &base, TOKEN_A, json!({"spec": "slow"})).await },
            )
        })
        .collect();
    let mut started = 0;
    for s in starts {
        let (status, body) = s.await.unwrap();
        match status {
            201 => started += 1,
            429 => {
                assert_eq!(body["error"]["kind"], "limit", "{body}");
                assert_eq!(
                    body["error"]["limit"],
                    json!({"name": "max_runs_in_flight", "maximum": 3, "observed": 3}),
                    "{body}"
                );
            }
            _ => panic!("{status} {body}"),
        }
    }
    assert_eq!(started, 3);
    // An MCP client's root is a run too: A has three in flight, so none opens.
    let body = mcp_spawn(&http, &base, TOKEN_A).await;
    assert!(body.contains("max_runs_in_flight"), "{body}");

    // B's day: one run, then its tokens are past the quota.
    let (status, run) = start_as(&http, &base, TOKEN_B, json!({"spec": "quick"})).await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    serve_support::status_becomes_as(&http, &base, &root, "succeeded", TOKEN_B).await;
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let e = loop {
        let (status, e) = start_as(&http, &base, TOKEN_B, json!({"spec": "quick"})).await;
        if status == 429 {
            break e;
        }
        assert_eq!(status, 201, "{e}");
        assert!(std::time::Instant::now() < deadline, "never refused");
        let root = e["root_id"].as_str().unwrap().to_owned();
        serve_support::status_becomes_as(&http, &base, &root, "succeeded", TOKEN_B).await;
    };
    assert_eq!(e["error"]["limit"]["name"], "max_tokens_per_day", "{e}");
    assert_eq!(e["error"]["limit"]["maximum"], 1, "{e}");
    assert!(e["error"]["limit"]["observed"].as_u64().unwrap() > 1, "{e}");
}

/// `arbor serve --tenant-policy policy.toml` with `policy` in a fresh directory (no tokens,
/// `ARBOR_TEST_HOOK_SECRET` unset): it must exit 2; the directory and what it said.
fn refused_to_start(policy: &str) -> (tempfile::TempDir, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("policy.toml"), policy).unwrap();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--specs",
            "specs",
            "--memory",
        ])
        .args(["--tenant-policy", "policy.toml"])
        .current_dir(dir.path())
        .env_remove("ARBOR_TOKENS")
        .env_remove("ARBOR_TEST_HOOK_SECRET")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    (dir, err)
}

/// A policy file that does not parse is refused at start, naming the file and the field.
#[test]
fn a_bad_policy_is_refused_naming_the_field() {
    let (_dir, err) = refused_to_start("[default]\nmax_runs_in_flite = 3\n");
    assert!(
        err.contains("policy.toml") && err.contains("max_runs_in_flite"),
        "{err}"
    );
}

/// The deployment example (docs/DEPLOYING.md) starts: its policy and tokens files are read,
/// and the policy's default applies to a tenant of the tokens file.
#[test]
fn the_deployment_examples_files_start_a_server() {
    let examples = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::copy(
        format!("{examples}/review.toml"),
        dir.path().join("specs/review.toml"),
    )
    .unwrap();
    let served = serve_support::serve(
        dir.path(),
        &[
            "--tokens",
            &format!("{examples}/deploy/tokens.example"),
            "--tenant-policy",
            &format!("{examples}/deploy/policy.toml"),
        ],
    );
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let status = rt.block_on(async {
        client()
            .get(format!("{}/v1/specs", served.base))
            .send()
            .await
            .unwrap()
            .status()
            .as_u16()
    });
    // No token: 401 (the tokens file was read; the server is not open).
    assert_eq!(status, 401);
}

/// A webhook's secret comes from the variable the policy names: unset, the server refuses
/// to start naming it; set, it starts.
#[test]
fn a_webhooks_secret_comes_from_its_variable() {
    let (dir, err) = refused_to_start(
        "[webhooks.local]\nurl = \"http://127.0.0.1:9/hook\"\nsecret_env = \"ARBOR_TEST_HOOK_SECRET\"\n",
    );
    assert!(
        err.contains("webhooks.local") && err.contains("ARBOR_TEST_HOOK_SECRET"),
        "{err}"
    );
    let served = serve_support::serve_env(
        dir.path(),
        &["--tenant-policy", "policy.toml"],
        &[("ARBOR_TEST_HOOK_SECRET", "sixteen-bytes-or-more")],
    );
    assert!(served.base.starts_with("http://127.0.0.1:"));
}
