//! Model controls over `/v1`: a run's `controls` on its root and a host spawn's on its child
//! reach the provider's wire over the spec's; one out of range, unknown, or not carried by
//! the provider is refused with a 400 naming it, before anything starts.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbor_model::testing::{Canned, ReplayServer};
use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve_env, status_becomes};

const TEXT: &[u8] = include_bytes!("../../arbor-model/tests/fixtures/openai/text.sse");

fn spec(base: &str) -> String {
    format!(
        r#"task = "write"
[providers.fake]
kind = "openai"
base_url = "{base}/v1"
api_key_env = "FAKE_KEY"
[agents.root]
provider = "fake"
model = "m"
children = ["writer"]
[agents.root.controls]
temperature = 0.9
[agents.writer]
provider = "fake"
model = "m"
[agents.writer.controls]
top_p = 0.5
"#
    )
}

fn body(r: &arbor_model::testing::Recorded) -> Value {
    serde_json::from_str(&r.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn request_controls_reach_the_wire_and_bad_ones_are_refused_by_name() {
    let model = || Canned::json(200, r#"{"id":"m","object":"model"}"#);
    // The server checks its specs when it starts (one preflight), then each run's root; a
    // host's spawn after the run rebuilds the tree (one more).
    let server = ReplayServer::start(vec![
        model(),
        model(),
        Canned::sse(TEXT),
        model(),
        Canned::sse(TEXT),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/s.toml"), spec(&server.url)).unwrap();
    let served = serve_env(dir.path(), &[], &[("FAKE_KEY", "k")]);
    let (base, http) = (served.base.clone(), client());
    let start = |body: Value| {
        let (http, base) = (http.clone(), base.clone());
        async move { call(&http, Method::POST, format!("{base}/v1/runs"), Some(body)).await }
    };

    // Refused by name, before anything starts.
    for (controls, field, said) in [
        (
            json!({"temperature": 3}),
            "controls.temperature",
            "temperature 3 is not 0 to 2",
        ),
        (
            json!({"stop": ["", "x"]}),
            "controls.stop",
            "a stop sequence is empty",
        ),
        (
            json!({"extra": {"model": "x"}}),
            "controls.extra",
            "extra may not set \"model\"",
        ),
    ] {
        let (status, e) = start(json!({"spec": "s", "controls": controls})).await;
        assert_eq!(
            (status, e["error"]["field"].as_str()),
            (400, Some(field)),
            "{e}"
        );
        assert!(
            e["error"]["message"].as_str().unwrap().contains(said),
            "{e}"
        );
    }
    let (status, e) = start(json!({"spec": "s", "controls": {"tempo": 1}})).await;
    assert_eq!(status, 400, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("tempo"),
        "{e}"
    );
    let (status, e) =
        start(json!({"spec": "s", "provider": "anthropic", "controls": {"seed": 1}})).await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (400, Some("controls")),
        "{e}"
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("controls.seed: provider \"anthropic\" cannot carry seed"),
        "{e}"
    );
    let reached: Vec<String> = server.requests().iter().map(|r| r.path.clone()).collect();
    assert_eq!(reached, ["/v1/models/m"], "only the check at start");

    // The request's controls over the spec's, on the root's call.
    let (status, run) = start(json!({"spec": "s", "controls": {"seed": 7, "stop": ["END"]}})).await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    status_becomes(&http, &base, &root, "succeeded").await;
    let b = body(&server.requests()[2]);
    assert_eq!(
        (&b["temperature"], &b["seed"], &b["stop"]),
        (&json!(0.9), &json!(7), &json!(["END"])),
        "{b}"
    );

    // A host's spawn: refused by name, then its controls over the child's own.
    let spawn = |body: Value| {
        let (http, base, root) = (http.clone(), base.clone(), root.clone());
        async move {
            call(
                &http,
                Method::POST,
                format!("{base}/v1/sessions/{root}/children"),
                Some(body),
            )
            .await
        }
    };
    let (status, e) =
        spawn(json!({"child_id": "writer", "input": "w", "controls": {"top_p": 0}})).await;
    assert_eq!(
        (status, e["error"]["field"].as_str()),
        (400, Some("controls.top_p")),
        "{e}"
    );
    let (status, h) = spawn(json!({
        "child_id": "writer", "input": "w", "mode": "sync", "wait_ms": 10000,
        "controls": {"temperature": 0.1, "max_output_tokens": 64}
    }))
    .await;
    assert_eq!(status, 200, "{h}");
    let b = body(&server.requests()[4]);
    assert_eq!(
        (&b["temperature"], &b["top_p"], &b["max_tokens"]),
        (&json!(0.1), &json!(0.5), &json!(64)),
        "{b}"
    );
}
