//! The API driven as a real client would: a live server on an ephemeral loopback port, a
//! real HTTP client, a real runtime running the trees (scripted model, in-memory store).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::sync::Arc;

use arbor_core::{Agent, RunOptions};
use arbor_model::{Script, ScriptedProvider, ScriptedTurn};
use arbor_protocol::SessionId;
use arbor_server::{ApiError, ErrorKind, Server, StartRun, Tenants, launcher_fn};
use arbor_store::{MemoryStore, Store};
use serde_json::{Value, json};

const ACME: &str = "acme-token-0123456789";
const GLOBEX: &str = "globex-token-0123456789";

/// Starts a run of a one-agent tree: its root record carries the tenant, the run goes on in
/// the background.
async fn start(store: Arc<dyn Store>, run: StartRun) -> Result<SessionId, ApiError> {
    let turns = vec![ScriptedTurn::text("first").with_usage(10, 5)];
    let agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .build()
        .map_err(ApiError::from)?;
    let mut session = agent
        .session()
        .store(store)
        .name("root")
        .meta(json!({"tenant": run.tenant, "spec": run.spec}))
        .create()
        .await
        .map_err(ApiError::from)?;
    let id = session.id();
    let task = run.task.unwrap_or_else(|| "the spec's task".to_owned());
    tokio::spawn(async move {
        let _ = session.run(task, RunOptions::default()).await;
    });
    Ok(id)
}

struct Live {
    base: String,
    http: reqwest::Client,
    server: Server,
    store: Arc<dyn Store>,
}

impl Live {
    async fn new(tenants: Tenants) -> Self {
        // reqwest is built without a TLS provider of its own; these calls are plain HTTP.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
        let for_launcher = store.clone();
        let launcher = launcher_fn(["hello", "research"], move |run| {
            start(for_launcher.clone(), run)
        });
        let server = Server::builder(store.clone())
            .launcher(launcher)
            .tenants(tenants)
            .build();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let serving = server.clone();
        tokio::spawn(async move {
            serving
                .serve(listener, std::future::pending())
                .await
                .unwrap();
        });
        Self {
            base,
            http: reqwest::Client::new(),
            server,
            store,
        }
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        token: Option<&str>,
        body: Option<Value>,
    ) -> (u16, Value) {
        let mut req = self.http.request(method, format!("{}{path}", self.base));
        if let Some(t) = token {
            req = req.bearer_auth(t);
        }
        if let Some(b) = body {
            req = req.json(&b);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let text = resp.text().await.unwrap();
        let value = serde_json::from_str(&text).unwrap_or(Value::String(text));
        (status, value)
    }

    async fn get(&self, path: &str, token: Option<&str>) -> (u16, Value) {
        self.call(reqwest::Method::GET, path, token, None).await
    }

    async fn post(&self, path: &str, token: Option<&str>, body: Value) -> (u16, Value) {
        self.call(reqwest::Method::POST, path, token, Some(body))
            .await
    }

    /// Waits until the run's root has finished.
    async fn finished(&self, root: &str, token: Option<&str>) -> Value {
        for _ in 0..200 {
            let (status, run) = self.get(&format!("/v1/runs/{root}"), token).await;
            assert_eq!(status, 200, "{run}");
            if run["status"] != "running" && run["status"] != "idle" {
                return run;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("the run did not finish");
    }
}

fn tenants() -> Tenants {
    Tenants::from_env_value(&format!("acme={ACME},globex={GLOBEX}")).unwrap()
}

fn kind(body: &Value) -> &str {
    body["error"]["kind"].as_str().unwrap_or_default()
}

#[tokio::test]
async fn a_run_starts_from_a_named_spec_and_its_tree_transcript_and_children_read_back() {
    let live = Live::new(Tenants::open()).await;
    let (status, specs) = live.get("/v1/specs", None).await;
    assert_eq!(
        (status, &specs),
        (200, &json!({"specs": ["hello", "research"]}))
    );

    let (status, run) = live
        .post("/v1/runs", None, json!({"spec": "hello", "task": "say hi"}))
        .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    assert_eq!(run["tree"]["sessions"][0]["id"], root.as_str());

    let run = live.finished(&root, None).await;
    assert_eq!(run["status"], "succeeded", "{run}");
    let usage = &run["tree"]["sessions"][0]["usage"];
    assert_eq!(usage["own"]["total_tokens"], 15);
    assert_eq!(usage["aggregate"]["total_tokens"], 15);

    let (status, session) = live.get(&format!("/v1/sessions/{root}"), None).await;
    assert_eq!(status, 200);
    assert_eq!(session["name"], "root");
    assert_eq!(session["parent_id"], Value::Null);
    assert_eq!(session["deleted"], false);

    let (status, children) = live
        .get(&format!("/v1/sessions/{root}/children"), None)
        .await;
    assert_eq!((status, &children["children"]), (200, &json!([])));

    // Paged: one entry at a time, each page pointing at the next.
    let (status, first) = live
        .get(&format!("/v1/sessions/{root}/transcript?limit=1"), None)
        .await;
    assert_eq!(status, 200, "{first}");
    assert_eq!(first["entries"].as_array().unwrap().len(), 1);
    assert_eq!(first["entries"][0]["seq"], 1);
    let next = first["next_after"].as_u64().unwrap();
    let (_, rest) = live
        .get(
            &format!("/v1/sessions/{root}/transcript?after={next}&limit=500"),
            None,
        )
        .await;
    let rest = rest["entries"].as_array().unwrap().clone();
    assert!(!rest.is_empty());
    assert_eq!(rest[0]["seq"], next + 1);
    let whole = live
        .store
        .transcript(root.parse().unwrap(), 0, None)
        .await
        .unwrap();
    assert_eq!(rest.len() + 1, whole.len());
    let (_, last) = live
        .get(
            &format!("/v1/sessions/{root}/transcript?after={next}&limit=500"),
            None,
        )
        .await;
    assert_eq!(last["next_after"], Value::Null);
}

#[tokio::test]
async fn bad_requests_name_the_field_in_one_error_shape() {
    let live = Live::new(Tenants::open()).await;
    let cases = [
        (json!({"spec": "hello", "tools": ["rm"]}), "tools"),
        (json!({"task": "x"}), "spec"),
        (json!({"spec": "hello", "task": "  "}), "task"),
        (json!({"spec": "hello", "model": ""}), "model"),
        (json!({"spec": "hello", "task": 3}), "task"),
        (json!({"spec_text": "task = \"x\""}), "spec_text"),
        (
            json!({"spec": "hello", "spec_text": "task = \"x\""}),
            "spec_text",
        ),
    ];
    for (body, field) in cases {
        let (status, e) = live.post("/v1/runs", None, body.clone()).await;
        assert_eq!(status, 400, "{body} -> {e}");
        assert_eq!(kind(&e), "validation", "{e}");
        if !field.is_empty() {
            assert_eq!(e["error"]["field"], field, "{body} -> {e}");
        }
        assert!(e["error"]["message"].as_str().unwrap().len() > 5, "{e}");
    }
    // An unknown spec is a 404, like an unknown id.
    let (status, e) = live.post("/v1/runs", None, json!({"spec": "nope"})).await;
    assert_eq!((status, kind(&e)), (404, "not_found"));
    assert_eq!(e["error"]["message"], "Unknown spec");
    assert_eq!(e["error"]["field"], "spec", "{e}");
    // A body over the cap.
    let big = "x".repeat(arbor_server::MAX_BODY_BYTES + 1);
    let (status, e) = live
        .post("/v1/runs", None, json!({"spec": "hello", "task": big}))
        .await;
    assert_eq!((status, kind(&e)), (413, "too_large"), "{e}");
    // Not JSON.
    let resp = live
        .http
        .post(format!("{}/v1/runs", live.base))
        .body("spec=hello")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 400);
    let e: Value = resp.json().await.unwrap();
    assert_eq!(kind(&e), "validation");
    // Query parameters: out of range, unknown.
    let (_, run) = live.post("/v1/runs", None, json!({"spec": "hello"})).await;
    let root = run["root_id"].as_str().unwrap();
    let (status, e) = live
        .get(&format!("/v1/sessions/{root}/transcript?limit=0"), None)
        .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("limit")),
        "{e}"
    );
    let (status, e) = live
        .get(&format!("/v1/sessions/{root}/transcript?page=2"), None)
        .await;
    assert_eq!((status, &e["error"]["field"]), (400, &json!("page")), "{e}");
    // Unknown routes and methods answer in the same shape.
    let (status, e) = live.get("/v1/nothing", None).await;
    assert_eq!((status, kind(&e)), (404, "not_found"));
    let (status, e) = live
        .call(reqwest::Method::DELETE, "/v1/runs", None, None)
        .await;
    assert_eq!((status, kind(&e)), (405, "method_not_allowed"));
    // A malformed id is just unknown.
    let (status, e) = live.get("/v1/sessions/not-an-id", None).await;
    assert_eq!((status, kind(&e)), (404, "not_found"));
}

#[tokio::test]
async fn another_tenants_ids_answer_exactly_as_unknown_ones() {
    let live = Live::new(tenants()).await;
    let (status, e) = live.get("/v1/specs", None).await;
    assert_eq!((status, kind(&e)), (401, "unauthorized"));
    let (status, e) = live.get("/v1/specs", Some("wrong-token-0123456789")).await;
    assert_eq!((status, kind(&e)), (401, "unauthorized"));

    let (status, run) = live
        .post("/v1/runs", Some(ACME), json!({"spec": "hello"}))
        .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    live.finished(&root, Some(ACME)).await;
    let unknown = SessionId::new().to_string();
    for path in [
        "/v1/runs/{}",
        "/v1/sessions/{}",
        "/v1/sessions/{}/children",
        "/v1/sessions/{}/transcript",
    ] {
        let foreign = live.get(&path.replace("{}", &root), Some(GLOBEX)).await;
        let missing = live.get(&path.replace("{}", &unknown), Some(GLOBEX)).await;
        assert_eq!(foreign.0, 404, "{path}: {:?}", foreign.1);
        assert_eq!(foreign, missing, "{path}");
        let own = live.get(&path.replace("{}", &root), Some(ACME)).await;
        assert_eq!(own.0, 200, "{path}: {:?}", own.1);
    }
    // Every verb that acts: a foreign id gets the unknown id's answer, before anything else
    // is looked at (the body is valid, the tree is not running here).
    use reqwest::Method;
    let acts: [(Method, &str, Option<Value>); 8] = [
        (
            Method::POST,
            "/v1/sessions/{}/children",
            Some(json!({"child_id": "c", "input": "x"})),
        ),
        (
            Method::GET,
            "/v1/sessions/{}/delegations/d-1?wait_ms=0",
            None,
        ),
        (Method::POST, "/v1/sessions/{}/delegations/d-1/cancel", None),
        (
            Method::POST,
            "/v1/sessions/{}/messages",
            Some(json!({"text": "hi"})),
        ),
        (Method::DELETE, "/v1/sessions/{}", None),
        (Method::POST, "/v1/sessions/{}/cancel", None),
        (
            Method::POST,
            "/v1/sessions/{}/approvals",
            Some(json!({"decisions": [{"id": "apr_1", "verdict": "allow_once"}]})),
        ),
        (Method::POST, "/v1/runs/{}/resume", None),
    ];
    for (method, path, body) in acts {
        let foreign = live
            .call(
                method.clone(),
                &path.replace("{}", &root),
                Some(GLOBEX),
                body.clone(),
            )
            .await;
        let missing = live
            .call(
                method.clone(),
                &path.replace("{}", &unknown),
                Some(GLOBEX),
                body.clone(),
            )
            .await;
        assert_eq!(foreign.0, 404, "{method} {path}: {:?}", foreign.1);
        assert_eq!(foreign, missing, "{method} {path}");
        let own = live
            .call(method.clone(), &path.replace("{}", &root), Some(ACME), body)
            .await;
        // The owner gets past the wall (to whatever its request deserves).
        assert_ne!(own, missing, "{method} {path}");
    }
}

#[tokio::test]
async fn health_metrics_openapi_and_draining() {
    let live = Live::new(Tenants::open()).await;
    assert_eq!(live.get("/healthz", None).await, (200, json!("ok")));
    assert_eq!(live.get("/readyz", None).await, (200, json!("ready")));
    let (_, run) = live.post("/v1/runs", None, json!({"spec": "hello"})).await;
    live.finished(run["root_id"].as_str().unwrap(), None).await;
    let (status, text) = live.get("/metrics", None).await;
    assert_eq!(status, 200);
    let text = text.as_str().unwrap();
    assert!(
        text.contains("arbor_runs{tenant=\"local\",status=\"succeeded\"} 1"),
        "{text}"
    );
    assert!(
        text.contains("arbor_live_children{tenant=\"local\"} 0"),
        "{text}"
    );
    assert!(text.contains("arbor_runs_started_total 1"), "{text}");

    let (status, doc) = live.get("/v1/openapi.json", None).await;
    assert_eq!(status, 200);
    assert!(doc["openapi"].as_str().unwrap().starts_with("3."));
    for path in [
        "/v1/runs",
        "/v1/runs/{id}",
        "/v1/sessions/{id}/transcript",
        "/healthz",
    ] {
        assert!(doc["paths"][path].is_object(), "{path} missing");
    }
    assert!(doc["components"]["schemas"]["ApiError"].is_object());
    // gzip when asked; an event stream never (it would be held back).
    let resp = live
        .http
        .get(format!("{}/v1/openapi.json", live.base))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.headers()["content-encoding"], "gzip");
    let root = run["root_id"].as_str().unwrap();
    let resp = live
        .http
        .get(format!("{}/v1/sessions/{root}/events", live.base))
        .header("accept-encoding", "gzip")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert!(resp.headers().get("content-encoding").is_none());

    live.server.drain();
    let (status, e) = live.post("/v1/runs", None, json!({"spec": "hello"})).await;
    assert_eq!((status, kind(&e)), (503, "unavailable"));
    assert_eq!(live.get("/readyz", None).await.0, 503);
    assert_eq!(ErrorKind::Unavailable.status().as_u16(), 503);
}

/// One SSE event: its id (if any), its type and its data.
#[derive(Debug, Clone, PartialEq)]
struct Sse {
    id: Option<String>,
    event: String,
    data: Value,
}

/// Reads events from `resp` until `enough` says stop or the stream ends (or 10 s pass).
async fn read_sse(resp: reqwest::Response, enough: impl Fn(&[Sse]) -> bool) -> Vec<Sse> {
    use futures::StreamExt;
    let mut body = resp.bytes_stream();
    let mut text = String::new();
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while !enough(&out) {
        let Some(chunk) = tokio::time::timeout_at(deadline, body.next())
            .await
            .expect("the stream stalled")
        else {
            return out;
        };
        let chunk = chunk.unwrap();
        text.push_str(std::str::from_utf8(&chunk).unwrap());
        while let Some(end) = text.find("\n\n") {
            let block: String = text.drain(..end + 2).collect();
            let (mut id, mut event, mut data) = (None, String::from("message"), String::new());
            for line in block.lines() {
                if let Some(v) = line.strip_prefix("id:") {
                    id = Some(v.trim().to_owned());
                } else if let Some(v) = line.strip_prefix("event:") {
                    event = v.trim().to_owned();
                } else if let Some(v) = line.strip_prefix("data:") {
                    data.push_str(v.trim_start());
                }
            }
            if !data.is_empty() {
                out.push(Sse {
                    id,
                    event,
                    data: serde_json::from_str(&data).unwrap(),
                });
            }
        }
    }
    out
}

fn entries(events: &[Sse]) -> Vec<u64> {
    events
        .iter()
        .filter_map(|e| e.id.as_deref().map(|i| i.parse().unwrap()))
        .collect()
}

/// A live server whose one spec, `spec`, runs `start`, and a run of it started as ACME: the
/// server's address, a client, the run's root and the store.
async fn served_run<F, Fut>(
    spec: &'static str,
    start: F,
) -> (String, reqwest::Client, String, Arc<dyn Store>)
where
    F: Fn(Arc<dyn Store>, StartRun) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = Result<SessionId, ApiError>> + Send + 'static,
{
    let _ = rustls::crypto::ring::default_provider().install_default();
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    let for_launcher = store.clone();
    let server = Server::builder(store.clone())
        .launcher(launcher_fn([spec], move |run| {
            start(for_launcher.clone(), run)
        }))
        .tenants(tenants())
        .build();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(server.serve(listener, std::future::pending()));
    let http = reqwest::Client::new();
    let run: Value = http
        .post(format!("{base}/v1/runs"))
        .bearer_auth(ACME)
        .json(&json!({"spec": spec}))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let root = run["root_id"].as_str().unwrap().to_owned();
    (base, http, root, store)
}

/// A run slow enough to be watched live: three turns, each 150 ms.
async fn slow_start(store: Arc<dyn Store>, run: StartRun) -> Result<SessionId, ApiError> {
    let slow = |t: &str| ScriptedTurn::text(t).with_delay(std::time::Duration::from_millis(150));
    let agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(vec![slow("one")])))
        .build()
        .map_err(ApiError::from)?;
    let mut session = agent
        .session()
        .store(store)
        .name("root")
        .meta(json!({"tenant": run.tenant}))
        .create()
        .await
        .map_err(ApiError::from)?;
    let id = session.id();
    tokio::spawn(async move {
        for task in ["a", "b", "c"] {
            let _ = session.run(task, RunOptions::default()).await;
        }
    });
    Ok(id)
}

#[tokio::test]
async fn events_stream_live_and_a_reconnect_with_last_event_id_loses_and_repeats_nothing() {
    let (base, http, root, store) = served_run("slow", slow_start).await;
    let url = format!("{base}/v1/sessions/{root}/events");

    // Live: read the first three entries while the run is still going, then drop.
    let resp = http.get(&url).bearer_auth(ACME).send().await.unwrap();
    assert_eq!(resp.status().as_u16(), 200);
    assert_eq!(
        resp.headers()["content-type"].to_str().unwrap(),
        "text/event-stream"
    );
    let first = read_sse(resp, |e| entries(e).len() >= 3).await;
    let seen = entries(&first);
    assert_eq!(seen[..3], [1, 2, 3], "{first:?}");
    assert!(first.iter().any(|e| e.event == "status" && e.id.is_none()));
    let last = seen[seen.len() - 1];

    // Reconnect after `last`; read until the whole transcript (three runs) has come.
    let total = || async {
        loop {
            let rows = store
                .transcript(root.parse().unwrap(), 0, None)
                .await
                .unwrap();
            let record = store.session(root.parse().unwrap()).await.unwrap().unwrap();
            let runs = rows
                .iter()
                .filter(|r| serde_json::to_value(r).unwrap()["kind"] == "run_finished")
                .count();
            if runs == 3 && record.status != arbor_protocol::SessionStatus::Running {
                return rows.len() as u64;
            }
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    };
    // A stream ends after a run: `end` once its last entries are out; reconnecting with
    // the last id goes on with the next run.
    let n = total().await;
    let mut rest = Vec::new();
    let mut after = last;
    while after < n {
        let resp = http
            .get(&url)
            .bearer_auth(ACME)
            .header("Last-Event-ID", after.to_string())
            .send()
            .await
            .unwrap();
        let part = read_sse(resp, |_| false).await;
        let end = part.last().unwrap();
        assert_eq!(end.event, "end", "{part:?}");
        // (The script has one turn: the first run succeeds, the next two fail.)
        assert_eq!(end.data["reason"], "finished", "{part:?}");
        assert!(["succeeded", "failed"].contains(&end.data["status"].as_str().unwrap()));
        after = entries(&part).last().copied().unwrap_or(after);
        rest.extend(part);
    }
    let mut all = seen.clone();
    all.extend(entries(&rest));
    assert_eq!(all, (1..=n).collect::<Vec<_>>(), "no gap, no repeat");
    // Each entry's data is the entry itself.
    let third = first.iter().find(|e| e.id.as_deref() == Some("3")).unwrap();
    assert_eq!(third.data["seq"], 3);
    assert_eq!(third.event, third.data["kind"].as_str().unwrap());

    // `?since=` does the same; a bad Last-Event-ID names the header; another tenant gets 404.
    let resp = http
        .get(format!("{url}?since={}", n - 1))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    let tail = read_sse(resp, |e| !entries(e).is_empty()).await;
    assert_eq!(entries(&tail), [n]);
    let bad = http
        .get(&url)
        .bearer_auth(ACME)
        .header("Last-Event-ID", "x")
        .send()
        .await
        .unwrap();
    assert_eq!(bad.status().as_u16(), 400);
    let e: Value = bad.json().await.unwrap();
    assert_eq!(e["error"]["field"], "Last-Event-ID");
    let foreign = http.get(&url).bearer_auth(GLOBEX).send().await.unwrap();
    assert_eq!(foreign.status().as_u16(), 404);
}

#[tokio::test]
async fn the_tree_stream_sends_a_snapshot_at_once_and_again_only_on_change() {
    let live = Live::new(tenants()).await;
    let (_, run) = live
        .post(
            "/v1/runs",
            Some(ACME),
            json!({"spec": "hello", "task": "say  hi\nplease"}),
        )
        .await;
    let root = run["root_id"].as_str().unwrap().to_owned();
    live.finished(&root, Some(ACME)).await;

    let (status, runs) = live.get("/v1/runs", Some(ACME)).await;
    assert_eq!(status, 200);
    assert_eq!(runs["runs"][0]["id"], root.as_str());
    assert_eq!(runs["runs"][0]["headline"], "say hi please");
    let (_, others) = live.get("/v1/runs", Some(GLOBEX)).await;
    assert_eq!(others["runs"], json!([]));

    let url = format!("{}/v1/runs/{root}/events", live.base);
    let resp = live.http.get(&url).bearer_auth(ACME).send().await.unwrap();
    // The run has ended: its snapshot, then `end`, then the stream closes.
    let first = read_sse(resp, |_| false).await;
    assert_eq!(
        first.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
        ["tree", "end"]
    );
    assert_eq!(
        first[1].data,
        json!({"status": "succeeded", "reason": "finished"})
    );
    let snap = &first[0].data;
    assert_eq!(snap["root_id"], root.as_str());
    assert_eq!(snap["nodes"][0]["status"], "succeeded");
    assert_eq!(snap["nodes"][0]["headline"], "say hi please");
    assert_eq!(snap["nodes"][0]["usage"]["aggregate"]["total_tokens"], 15);
    assert_eq!(snap["approvals"], json!([]));
    let fingerprint = snap["fingerprint"].as_str().unwrap().to_owned();
    // Reconnecting with the fingerprint seen: nothing changed, no snapshot is sent; the
    // tree has ended, so the stream ends.
    let resp = live
        .http
        .get(&url)
        .bearer_auth(ACME)
        .header("Last-Event-ID", &fingerprint)
        .send()
        .await
        .unwrap();
    let quiet = read_sse(resp, |_| false).await;
    assert_eq!(
        quiet.iter().map(|e| e.event.as_str()).collect::<Vec<_>>(),
        ["end"],
        "a snapshot was sent though nothing changed: {quiet:?}"
    );
    // A stale fingerprint gets the current snapshot at once.
    let resp = live
        .http
        .get(&url)
        .bearer_auth(ACME)
        .header("Last-Event-ID", "0.0.0.0")
        .send()
        .await
        .unwrap();
    let again = read_sse(resp, |e| !e.is_empty()).await;
    assert_eq!(again[0].id.as_deref(), Some(fingerprint.as_str()));
    let foreign = live
        .http
        .get(&url)
        .bearer_auth(GLOBEX)
        .send()
        .await
        .unwrap();
    assert_eq!(foreign.status().as_u16(), 404);
}

/// A body that comes too slowly gets 408 in the one error shape (it was an empty body), once
/// the request timeout has passed (paused time: no test waits 30 s).
#[tokio::test(start_paused = true)]
async fn a_body_that_never_finishes_gets_408_in_the_one_error_shape() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let live = Live::new(Tenants::open()).await;
    let addr = live.base.trim_start_matches("http://").to_owned();
    let mut socket = tokio::net::TcpStream::connect(&addr).await.unwrap();
    socket
        .write_all(
            b"POST /v1/runs HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
              Content-Length: 100\r\n\r\n{\"spec\":",
        )
        .await
        .unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 4096];
    // Read until the body's JSON has arrived (the server keeps the connection open).
    loop {
        let n = socket.read(&mut buf).await.unwrap();
        answer.extend_from_slice(&buf[..n]);
        let text = String::from_utf8_lossy(&answer);
        if n == 0 || text.trim_end().ends_with('}') {
            break;
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    let body: Value = serde_json::from_str(text.split("\r\n\r\n").nth(1).unwrap()).unwrap();
    assert_eq!(kind(&body), "timeout", "{body}");
    assert!(
        body["error"]["message"].as_str().unwrap().contains("30 s"),
        "{body}"
    );
}

/// A run whose root sleeps in a tool: the tree's snapshots name the tool while it runs, and
/// no longer once it returned.
async fn sleeping_start(store: Arc<dyn Store>, run: StartRun) -> Result<SessionId, ApiError> {
    let agent = Agent::builder("root")
        .provider(ScriptedProvider::new(Script::new(vec![
            ScriptedTurn::tool_call("sleep", json!({"ms": 700})),
            // The next turn is slow: the tool has returned while the session still runs.
            ScriptedTurn::text("rested").with_delay(std::time::Duration::from_millis(1000)),
        ])))
        .tool(arbor_core::tool::builtin::Sleep)
        .build()
        .map_err(ApiError::from)?;
    let mut session = agent
        .session()
        .store(store)
        .name("root")
        .meta(json!({"tenant": run.tenant}))
        .create()
        .await
        .map_err(ApiError::from)?;
    let id = session.id();
    tokio::spawn(async move {
        let _ = session.run("rest a while", RunOptions::default()).await;
    });
    Ok(id)
}

#[tokio::test]
async fn the_tree_names_the_tool_each_session_runs_now() {
    let (base, http, root, _) = served_run("sleepy", sleeping_start).await;
    let resp = http
        .get(format!("{base}/v1/runs/{root}/events"))
        .bearer_auth(ACME)
        .send()
        .await
        .unwrap();
    let seen = read_sse(resp, |e| e.iter().any(|e| e.event == "end")).await;
    let tools: Vec<Value> = seen
        .iter()
        .filter(|e| e.event == "tree")
        .map(|e| e.data["nodes"][0]["running_tools"].clone())
        .collect();
    let during = tools.iter().position(|t| *t == json!(["sleep"]));
    assert!(during.is_some(), "no snapshot named the tool: {tools:?}");
    // Once it returned, while the next turn is under way, the tool is no longer named (a
    // result changes no record: the tree reads the running sessions' transcripts).
    let trees: Vec<&Sse> = seen.iter().filter(|e| e.event == "tree").collect();
    let after = trees
        .iter()
        .skip(during.unwrap() + 1)
        .find(|e| e.data["nodes"][0]["status"] == "running");
    assert!(
        after.is_some_and(|e| e.data["nodes"][0]["running_tools"].is_null()),
        "no running snapshot after the tool returned: {tools:?}"
    );
    // After it returned, the last snapshot names none (the field is left out).
    assert_eq!(tools.last(), Some(&Value::Null), "{tools:?}");
    let last = seen.iter().rev().find(|e| e.event == "tree").unwrap();
    assert_eq!(last.data["nodes"][0]["status"], "succeeded");
}
