//! Listing at scale on `arbor serve` (issue 36): runs a page at a time, newest first, with
//! filters (status, spec, labels, creation time) and labels set at start; children a page at
//! a time; a cursor stable while new runs start.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::tenants::{TOKEN_A, TOKEN_B, two_tenants};
use serve_support::{call_as, client, status_becomes_as};

async fn start_labelled(http: &reqwest::Client, base: &str, token: &str, labels: Value) -> String {
    let (status, run) = call_as(
        http,
        Method::POST,
        format!("{base}/v1/runs"),
        token,
        Some(json!({"spec": "quick", "labels": labels})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    status_becomes_as(http, base, &root, "succeeded", token).await;
    root
}

fn ids(page: &Value) -> Vec<String> {
    page["runs"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect()
}

/// Runs page newest first with a cursor that no run started meanwhile disturbs; each shows
/// its spec, labels and start; filters by label, status, spec and time; bad parameters are
/// refused naming them; another tenant's runs never show; bad labels are refused at start.
#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn runs_page_newest_first_with_filters_and_labels() {
    let (_dir, served) = two_tenants(&[]);
    let (http, base) = (client(), served.base.clone());
    let mut started = Vec::new();
    for (user, thread) in [
        ("ann", "1"),
        ("bob", "2"),
        ("ann", "3"),
        ("bob", "4"),
        ("ann", "5"),
    ] {
        started.push(
            start_labelled(
                &http,
                &base,
                TOKEN_A,
                json!({"user": user, "thread": thread}),
            )
            .await,
        );
    }
    let b_root = start_labelled(&http, &base, TOKEN_B, json!({"user": "ann"})).await;

    // Two at a time, a new run started between pages: the five, newest first, once each.
    let mut seen = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let url = match &cursor {
            Some(c) => format!("{base}/v1/runs?limit=2&cursor={c}"),
            None => format!("{base}/v1/runs?limit=2"),
        };
        let (status, page) = call_as(&http, Method::GET, url, TOKEN_A, None).await;
        assert_eq!(status, 200, "{page}");
        if seen.is_empty() {
            let first = &page["runs"][0];
            assert_eq!(first["spec"], "quick", "{first}");
            assert_eq!(first["labels"], json!({"user": "ann", "thread": "5"}));
            assert!(first["created_at"].as_u64().unwrap() > 0);
            assert_eq!(first["headline"], "say hello");
            start_labelled(&http, &base, TOKEN_A, json!({"user": "late"})).await;
        }
        seen.extend(ids(&page));
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => break,
        }
    }
    let mut want = started.clone();
    want.reverse();
    assert_eq!(seen, want, "newest first, no repeat, no gap, no late run");
    assert!(!seen.contains(&b_root));

    // Filters.
    let get = |query: &str| {
        let (http, url) = (http.clone(), format!("{base}/v1/runs?{query}"));
        async move { call_as(&http, Method::GET, url, TOKEN_A, None).await }
    };
    let (_, anns) = get("label=user:ann").await;
    assert_eq!(
        ids(&anns),
        [started[4].clone(), started[2].clone(), started[0].clone()]
    );
    let (_, one) = get("label=user:ann,thread:3").await;
    assert_eq!(ids(&one), [started[2].clone()]);
    let (_, done) = get("status=succeeded&spec=quick&limit=200").await;
    assert_eq!(ids(&done).len(), 6, "{done}");
    let (_, none) = get("spec=slow").await;
    assert_eq!(ids(&none).len(), 0);
    let (_, first) = get("label=user:ann").await;
    let t = first["runs"][1]["created_at"].as_u64().unwrap();
    let (_, window) = get(&format!(
        "label=user:ann&created_after={t}&created_before={}",
        t + 1
    ))
    .await;
    assert_eq!(ids(&window), [started[2].clone()]);
    for (query, field) in [
        ("limit=0", "limit"),
        ("limit=201", "limit"),
        ("cursor=zzz", "cursor"),
        ("status=finished", "status"),
        ("label=nocolon", "label"),
        ("sort=asc", "sort"),
    ] {
        let (status, e) = get(query).await;
        assert_eq!(
            (status, &e["error"]["field"]),
            (400, &json!(field)),
            "{query}: {e}"
        );
    }
    // B sees its own run only.
    let (_, b) = call_as(&http, Method::GET, format!("{base}/v1/runs"), TOKEN_B, None).await;
    assert_eq!(ids(&b), [b_root]);

    // Labels are checked at start, naming the field.
    let many: serde_json::Map<String, Value> =
        (0..17).map(|i| (format!("k{i}"), json!("v"))).collect();
    for labels in [json!(many), json!({"a b": "x"}), json!({"k": ""})] {
        let (status, e) = call_as(
            &http,
            Method::POST,
            format!("{base}/v1/runs"),
            TOKEN_A,
            Some(json!({"spec": "quick", "labels": labels})),
        )
        .await;
        assert_eq!(
            (status, &e["error"]["field"]),
            (400, &json!("labels")),
            "{e}"
        );
    }
}

/// A root that spawns three children, then answers.
const FAN: &str = r#"
task = "fan out"
root = "root"

[agents.root]
children = ["leaf"]
[[agents.root.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "leaf", name = "l1", input = "a" } },
  { name = "spawn_agent", arguments = { child_id = "leaf", name = "l2", input = "b" } },
  { name = "spawn_agent", arguments = { child_id = "leaf", name = "l3", input = "c" } },
]
[[agents.root.turns]]
text = "done"

[agents.leaf]
repeat_last = true
[[agents.leaf.turns]]
text = "leaf"
"#;

/// Children page oldest first by cursor, and filter by status.
#[tokio::test]
async fn children_page_oldest_first() {
    let (dir, served) = two_tenants(&[]);
    std::fs::write(dir.path().join("specs/fan.toml"), FAN).unwrap();
    drop(served);
    let tokens = format!("a={TOKEN_A},b={TOKEN_B}");
    let served = serve_support::serve_env(dir.path(), &[], &[("ARBOR_TOKENS", &tokens)]);
    let (http, base) = (client(), served.base.clone());
    let (status, run) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        TOKEN_A,
        Some(json!({"spec": "fan"})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    status_becomes_as(&http, &base, &root, "succeeded", TOKEN_A).await;
    let url = format!("{base}/v1/sessions/{root}/children");
    let (_, first) = call_as(&http, Method::GET, format!("{url}?limit=2"), TOKEN_A, None).await;
    let names = |p: &Value| -> Vec<String> {
        p["children"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].as_str().unwrap().to_owned())
            .collect()
    };
    assert_eq!(names(&first), ["l1", "l2"], "{first}");
    let cursor = first["next_cursor"].as_str().unwrap();
    let (_, rest) = call_as(
        &http,
        Method::GET,
        format!("{url}?limit=2&cursor={cursor}"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(names(&rest), ["l3"]);
    assert!(rest["next_cursor"].is_null());
    let (_, failed) = call_as(
        &http,
        Method::GET,
        format!("{url}?status=failed"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(names(&failed).len(), 0);
}
