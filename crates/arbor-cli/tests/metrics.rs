//! `/metrics` of `arbor serve` as Prometheus scrapes it: the text parses (with the
//! `prometheus-parse` crate) and the runtime counters match the run the server just did —
//! runs by role and status, own and attributed tokens, tool calls, an admission refused by
//! its limit, provider turns and store writes.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::json;

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, serve};

const COUNTED: &str = r#"
task = "count me"
root = "root"

[supervisor]
limits = { max_depth = 1 }

[agents.root]
children = ["worker"]
[[agents.root.turns]]
usage = { input_tokens = 100, output_tokens = 1 }
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "worker", name = "worker", input = "work" } }]
[[agents.root.turns]]
usage = { input_tokens = 300, output_tokens = 3 }
text = "done"

[agents.worker]
children = ["helper"]
[[agents.worker.turns]]
usage = { input_tokens = 10, output_tokens = 1 }
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "helper", name = "helper", input = "help" } }]
[[agents.worker.turns]]
usage = { input_tokens = 20, output_tokens = 2 }
text = "worked alone"

[agents.helper]
[[agents.helper.turns]]
text = "helped"
"#;

/// Every sample, keyed `name{label="value",…}` (labels sorted), as Prometheus reads them.
fn scrape(text: &str) -> BTreeMap<String, f64> {
    let lines = text.lines().map(|l| Ok(l.to_owned()));
    let scrape = prometheus_parse::Scrape::parse(lines).unwrap();
    let mut out = BTreeMap::new();
    for s in scrape.samples {
        let mut labels: Vec<String> = s
            .labels
            .iter()
            .map(|(k, v)| format!("{k}=\"{v}\""))
            .collect();
        labels.sort();
        let value = match s.value {
            prometheus_parse::Value::Counter(v)
            | prometheus_parse::Value::Gauge(v)
            | prometheus_parse::Value::Untyped(v) => v,
            prometheus_parse::Value::Histogram(h) => {
                // Only the count is compared; `_sum` and buckets are checked for shape.
                h.iter().map(|b| b.count).fold(0.0, f64::max)
            }
            prometheus_parse::Value::Summary(_) => continue,
        };
        out.insert(format!("{}{{{}}}", s.metric, labels.join(",")), value);
    }
    out
}

#[tokio::test]
async fn metrics_parse_as_prometheus_text_and_count_the_run() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/counted.toml"), COUNTED).unwrap();
    let served = serve(dir.path(), &[]);
    let http = client();
    let base = &served.base;
    let (status, run) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        Some(json!({"spec": "counted"})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    let started = Instant::now();
    loop {
        let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if run["result"]["status"] == "succeeded" {
            break;
        }
        assert!(started.elapsed() < Duration::from_secs(20), "{run}");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let resp = http.get(format!("{base}/metrics")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(
        resp.headers()["content-type"],
        "text/plain; version=0.0.4; charset=utf-8"
    );
    let text = resp.text().await.unwrap();
    let m = scrape(&text);
    let get = |key: &str| -> f64 { *m.get(key).unwrap_or_else(|| panic!("no {key} in {text}")) };
    // From the store.
    assert_eq!(
        get("arbor_runs{status=\"succeeded\",tenant=\"local\"}"),
        1.0
    );
    assert_eq!(
        get("arbor_delegations{status=\"succeeded\",tenant=\"local\"}"),
        1.0
    );
    assert_eq!(get("arbor_live_children{tenant=\"local\"}"), 0.0);
    assert_eq!(get("arbor_approvals_pending{tenant=\"local\"}"), 0.0);
    // From the runs themselves.
    assert_eq!(
        get("arbor_agent_runs_total{role=\"root\",status=\"succeeded\"}"),
        1.0
    );
    assert_eq!(
        get("arbor_agent_runs_total{role=\"child\",status=\"succeeded\"}"),
        1.0
    );
    assert_eq!(
        get("arbor_tokens_total{kind=\"input\",scope=\"own\"}"),
        430.0
    );
    assert_eq!(
        get("arbor_tokens_total{kind=\"output\",scope=\"own\"}"),
        7.0
    );
    assert_eq!(
        get("arbor_tokens_total{kind=\"input\",scope=\"attributed\"}"),
        30.0
    );
    assert_eq!(get("arbor_tool_calls_total{status=\"ok\"}"), 1.0);
    assert_eq!(
        get("arbor_tool_calls_total{status=\"error\"}"),
        1.0,
        "the refused spawn"
    );
    assert_eq!(
        get("arbor_admission_refusals_total{kind=\"Limit\",limit=\"max_depth\"}"),
        1.0
    );
    assert_eq!(
        get("arbor_provider_request_duration_seconds_count{provider=\"scripted\",status=\"ok\"}"),
        4.0
    );
    assert!(
        get("arbor_store_commit_duration_seconds_count{}") >= 4.0,
        "{text}"
    );
    assert!(text.contains("# TYPE arbor_provider_request_duration_seconds histogram"));
    assert!(text.contains("# TYPE arbor_agent_runs_total counter"));
}
