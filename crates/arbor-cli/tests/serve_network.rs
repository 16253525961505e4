//! `arbor serve` bound for a network (issue 36), driven as a process by a real client: MCP
//! sessions are their tenant's, streams end, and clients that did nothing wrong never get a
//! 500.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::tenants::{QUICK, TOKEN_A, TOKEN_B, TOKEN_OPS, start, two_tenants};
use serve_support::{call_as, client, serve_env};

/// One MCP request with `token` (and the session, if any); the status, the session id the
/// answer carries, and the body.
async fn mcp(
    http: &reqwest::Client,
    base: &str,
    method: Method,
    token: &str,
    session: Option<&str>,
    body: Option<Value>,
) -> (u16, Option<String>, String) {
    let mut req = http
        .request(method, format!("{base}/mcp/quick"))
        .bearer_auth(token)
        .header("accept", "application/json, text/event-stream")
        .header("mcp-protocol-version", "2025-11-25");
    if let Some(s) = session {
        req = req.header("mcp-session-id", s);
    }
    if let Some(b) = body {
        req = req.json(&b);
    }
    let resp = req.send().await.unwrap();
    let status = resp.status().as_u16();
    let id = resp
        .headers()
        .get("mcp-session-id")
        .map(|v| v.to_str().unwrap().to_owned());
    (status, id, resp.text().await.unwrap())
}

/// Opens an MCP session for `token`: its id.
async fn mcp_session(http: &reqwest::Client, base: &str, token: &str) -> String {
    let init = json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-11-25", "capabilities": {},
        "clientInfo": {"name": "probe", "version": "1"}}});
    let (status, id, body) = mcp(http, base, Method::POST, token, None, Some(init)).await;
    assert_eq!(status, 200, "{body}");
    let id = id.expect("an MCP session id");
    let done = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
    let (status, _, body) = mcp(http, base, Method::POST, token, Some(&id), Some(done)).await;
    assert_eq!(status, 202, "{body}");
    id
}

/// Tenant B holding tenant A's `Mcp-Session-Id` gets exactly the answer an unknown id gets,
/// on every MCP request (it got 204 for a DELETE and ended A's session), and A's session
/// goes on.
#[tokio::test]
async fn another_tenants_mcp_session_answers_as_an_unknown_one() {
    let (_dir, served) = two_tenants(&[]);
    let (http, base) = (client(), served.base.clone());
    let a = mcp_session(&http, &base, TOKEN_A).await;
    let list = json!({"jsonrpc": "2.0", "id": 2, "method": "tools/list"});
    let unknown = "0f0e0d0c-0b0a-4908-8706-050403020100";
    for (method, body) in [
        (Method::POST, Some(list.clone())),
        (Method::GET, None),
        (Method::DELETE, None),
    ] {
        let foreign = mcp(
            &http,
            &base,
            method.clone(),
            TOKEN_B,
            Some(&a),
            body.clone(),
        )
        .await;
        let strange = mcp(&http, &base, method.clone(), TOKEN_B, Some(unknown), body).await;
        assert_eq!(
            (foreign.0, &foreign.2),
            (strange.0, &strange.2),
            "{method}: a foreign session is answered as an unknown one"
        );
        assert!(foreign.0 >= 400, "{method}: {foreign:?}");
    }
    // A's session is intact: it lists its tools, then ends it itself.
    let (status, _, body) = mcp(&http, &base, Method::POST, TOKEN_A, Some(&a), Some(list)).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("spawn_agent"), "{body}");
    let (status, _, body) = mcp(&http, &base, Method::DELETE, TOKEN_A, Some(&a), None).await;
    assert_eq!(status, 204, "{body}");
}

/// The events of an SSE body, read to its end (at most `within`): `(event, data)` pairs.
async fn sse_to_end(resp: reqwest::Response, within: Duration) -> Vec<(String, Value)> {
    let text = tokio::time::timeout(within, resp.text())
        .await
        .expect("the stream never ended")
        .unwrap();
    text.split("\n\n")
        .filter_map(serve_support::sse_block)
        .map(|(event, _, data)| (event, data))
        .collect()
}

/// A finished session's stream and a finished tree's stream send `end` and close (they
/// stayed open forever); a shutdown lets a live stream see its run end `aborted`, then
/// `end`, and the server exits within its grace (it closed the stream without the status).
#[tokio::test]
async fn streams_end_after_the_run_ends_and_at_shutdown_with_the_last_status() {
    let (_dir, mut served) = two_tenants(&[]);
    let (http, base) = (client(), served.base.clone());
    let root = start(&http, &base, "quick").await;
    serve_support::status_becomes_as(&http, &base, &root, "succeeded", TOKEN_A).await;
    for url in [
        format!("{base}/v1/sessions/{root}/events"),
        format!("{base}/v1/runs/{root}/events"),
    ] {
        let resp = http.get(&url).bearer_auth(TOKEN_A).send().await.unwrap();
        let events = sse_to_end(resp, Duration::from_secs(10)).await;
        let (last, data) = events.last().unwrap();
        assert_eq!(last, "end", "{url}: {events:?}");
        assert_eq!(data, &json!({"status": "succeeded", "reason": "finished"}));
    }

    // A run that takes a minute, watched live, then SIGTERM.
    let slow = start(&http, &base, "slow").await;
    let resp = http
        .get(format!("{base}/v1/sessions/{slow}/events"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let started = Instant::now();
    let events = sse_to_end(resp, Duration::from_secs(10)).await;
    let statuses: Vec<&Value> = events
        .iter()
        .filter(|(e, _)| e == "status")
        .map(|(_, d)| &d["status"])
        .collect();
    assert!(
        statuses.ends_with(&[&json!("running"), &json!("aborted")]),
        "{events:?}"
    );
    assert_eq!(
        events.last().unwrap(),
        &(
            "end".to_owned(),
            json!({"status": "aborted", "reason": "finished"})
        )
    );
    let code = served.child.wait().unwrap();
    assert_eq!(code.code(), Some(0));
    assert!(
        started.elapsed() < Duration::from_secs(8),
        "{:?}",
        started.elapsed()
    );
}

/// A root that holds its tree open, and a child whose runs take a minute.
const HOLDING: &str = r#"
task = "hold the tree open"
root = "root"

[agents.root]
children = ["slow"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 60000
text = "done"

[agents.slow]
repeat_last = true
[[agents.slow.turns]]
delay_ms = 60000
text = "late"
"#;

/// An inline spec whose MCP server cannot start.
const BROKEN_MCP: &str = r#"
task = "use a tool"
root = "root"

[mcp_servers.files]
command = "/nonexistent/mcp-server"

[agents.root]
tools = ["mcp:files/*"]
[[agents.root.turns]]
text = "hello"
"#;

/// Where the client did nothing wrong the server answered 500: a wait on a child deleted
/// meanwhile (expected 200 with the cancelled state), a long poll cut by SIGTERM (503), an
/// inline spec whose MCP server cannot start (400 naming the server).
#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn no_500_where_the_client_did_nothing_wrong() {
    let (dir, mut served) = two_tenants(&["--allow-inline-specs"]);
    std::fs::write(dir.path().join("specs/holding.toml"), HOLDING).unwrap();
    drop(served);
    let tokens = format!("a={TOKEN_A},b={TOKEN_B}");
    served = serve_env(
        dir.path(),
        &["--allow-inline-specs"],
        &[("ARBOR_TOKENS", &tokens)],
    );
    let (http, base) = (client(), served.base.clone());

    // An inline spec whose MCP server cannot start: 400 naming the server.
    let (status, e) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        TOKEN_A,
        Some(json!({"spec_text": BROKEN_MCP})),
    )
    .await;
    assert_eq!(status, 400, "{e}");
    assert_eq!(e["error"]["kind"], "validation", "{e}");
    assert_eq!(e["error"]["field"], "spec_text", "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("MCP server files: cannot start"),
        "{e}"
    );

    // A wait on a child deleted meanwhile: the cancelled state.
    let root = start(&http, &base, "holding").await;
    serve_support::status_becomes_as(&http, &base, &root, "running", TOKEN_A).await;
    let (status, h) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/children"),
        TOKEN_A,
        Some(json!({"child_id": "slow", "input": "take your time", "name": "s1", "mode": "async"})),
    )
    .await;
    assert_eq!(status, 201, "{h}");
    let (delegation, child) = (
        h["delegation_id"].as_str().unwrap().to_owned(),
        h["session_id"].as_str().unwrap().to_owned(),
    );
    let waiting = {
        let (http, url) = (
            http.clone(),
            format!("{base}/v1/sessions/{root}/delegations/{delegation}?wait_ms=20000"),
        );
        tokio::spawn(async move { call_as(&http, Method::GET, url, TOKEN_A, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let (status, e) = call_as(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{child}"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 200, "{e}");
    let (status, w) = waiting.await.unwrap();
    assert_eq!(
        (status, &w["status"]),
        (200, &json!("cancelled")),
        "a wait cut by a delete: {w} {:?}",
        served.stderr.try_iter().collect::<Vec<_>>()
    );
    // And asked again afterwards: the same answer, or unknown (the handle is released).
    let (status, w) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/delegations/{delegation}?wait_ms=0"),
        TOKEN_A,
        None,
    )
    .await;
    assert!(
        (status, &w["status"]) == (200, &json!("cancelled")) || status == 404,
        "{status} {w}"
    );

    // A long poll cut by SIGTERM: 503.
    let (status, h) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/children"),
        TOKEN_A,
        Some(json!({"child_id": "slow", "input": "take your time", "name": "s2", "mode": "async"})),
    )
    .await;
    assert_eq!(status, 201, "{h}");
    let delegation = h["delegation_id"].as_str().unwrap().to_owned();
    let waiting = {
        let (http, url) = (
            http.clone(),
            format!("{base}/v1/sessions/{root}/delegations/{delegation}?wait_ms=20000"),
        );
        tokio::spawn(async move { call_as(&http, Method::GET, url, TOKEN_A, None).await })
    };
    tokio::time::sleep(Duration::from_millis(300)).await;
    let term = std::process::Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(term.success());
    let (status, e) = waiting.await.unwrap();
    assert_eq!(
        (status, &e["error"]["kind"]),
        (503, &json!("unavailable")),
        "{e}"
    );
    assert_eq!(served.child.wait().unwrap().code(), Some(0));
}

/// `/metrics` with tokens configured: no token gets 401; a tenant's token sees its own
/// series only (it saw every tenant's runs, approvals and tokens); an operator's sees every
/// tenant's and the process's own; `--metrics-listen` serves them all without a token.
/// `/healthz` and `/readyz` stay open and name no tenant.
#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn metrics_show_a_tenant_its_own_series_and_an_operator_all() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/quick.toml"), QUICK).unwrap();
    let tokens = [
        arbor_server::Tenants::file_line("a", TOKEN_A),
        arbor_server::Tenants::file_line("b", TOKEN_B),
        format!(
            "{} operator",
            arbor_server::Tenants::file_line("ops", TOKEN_OPS)
        ),
    ]
    .join("\n");
    std::fs::write(dir.path().join("tokens"), tokens).unwrap();
    let served = serve_env(
        dir.path(),
        &["--tokens", "tokens", "--metrics-listen", "127.0.0.1:0"],
        &[],
    );
    let metrics_at = served
        .early
        .iter()
        .find_map(|l| l.split("metrics on ").nth(1))
        .and_then(|r| r.split(' ').next())
        .unwrap_or_else(|| panic!("no metrics address in {:?}", served.early))
        .to_owned();
    let (http, base) = (client(), served.base.clone());
    let root = start(&http, &base, "quick").await;
    serve_support::status_becomes_as(&http, &base, &root, "succeeded", TOKEN_A).await;

    let scrape = |token: Option<&'static str>, url: String| {
        let http = http.clone();
        async move {
            let mut req = http.get(url);
            if let Some(t) = token {
                req = req.bearer_auth(t);
            }
            let resp = req.send().await.unwrap();
            (resp.status().as_u16(), resp.text().await.unwrap())
        }
    };
    let (status, body) = scrape(None, format!("{base}/metrics")).await;
    assert_eq!(status, 401, "{body}");
    assert!(body.contains("\"unauthorized\""), "{body}");

    let (status, b) = scrape(Some(TOKEN_B), format!("{base}/metrics")).await;
    assert_eq!(status, 200);
    assert!(b.contains("arbor_live_children{tenant=\"b\"} 0"), "{b}");
    assert!(b.contains("arbor_approvals_pending{tenant=\"b\"} 0"), "{b}");
    for hidden in [
        "tenant=\"a\"",
        "arbor_http_requests_total",
        "arbor_tokens_total",
        "arbor_agent_runs_total",
    ] {
        assert!(!b.contains(hidden), "tenant b sees {hidden}: {b}");
    }
    let (_, a) = scrape(Some(TOKEN_A), format!("{base}/metrics")).await;
    assert!(
        a.contains("arbor_runs{tenant=\"a\",status=\"succeeded\"} 1"),
        "{a}"
    );
    assert!(
        !a.contains("tenant=\"b\"") && !a.contains("arbor_http_requests_total"),
        "{a}"
    );

    let (_, all) = scrape(Some(TOKEN_OPS), format!("{base}/metrics")).await;
    assert!(
        all.contains("arbor_runs{tenant=\"a\",status=\"succeeded\"} 1"),
        "{all}"
    );
    assert!(all.contains("arbor_http_requests_total"), "{all}");
    assert!(all.contains("arbor_tokens_total"), "{all}");
    let (status, open) = scrape(None, metrics_at.clone()).await;
    assert_eq!(status, 200);
    assert!(
        open.contains("arbor_runs{tenant=\"a\",status=\"succeeded\"} 1"),
        "{open}"
    );
    assert!(open.contains("arbor_http_requests_total"), "{open}");
    // The metrics address serves nothing else.
    let (status, _) = scrape(None, metrics_at.replace("/metrics", "/v1/runs")).await;
    assert_eq!(status, 404);

    for (path, said) in [("/healthz", "ok"), ("/readyz", "ready")] {
        let (status, body) = scrape(None, format!("{base}{path}")).await;
        assert_eq!((status, body.as_str()), (200, said));
    }
}
