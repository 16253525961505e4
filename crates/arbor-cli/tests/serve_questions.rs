//! A question from any depth over HTTP against a live `arbor serve` (issue 39, item 4): the
//! child of `examples/question.toml` asks; the run suspends with the question listed at the
//! root (`question`, `choices`); an answer outside the choices is refused naming
//! `decisions[0].answer`, a verdict that cannot carry one names `decisions[0].verdict`; one answer is recorded, a
//! second is refused (409) naming the first; the resume delivers it as the call's result.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{call, client, node, serving, start_run, status_becomes, tool_results};

const QUESTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/question.toml");

async fn decide(http: &reqwest::Client, base: &str, session: &str, body: Value) -> (u16, Value) {
    call(
        http,
        Method::POST,
        format!("{base}/v1/sessions/{session}/approvals"),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn a_question_is_listed_answered_once_and_read_by_the_child() {
    let (_dir, served) = serving("question", &std::fs::read_to_string(QUESTION).unwrap());
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "question").await;
    let run = status_becomes(&http, &base, &root, "suspended").await;
    let painter = node(&run, "painter")["id"].as_str().unwrap().to_owned();

    let (status, listed) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/approvals"),
        None,
    )
    .await;
    assert_eq!(status, 200, "{listed}");
    let pending = &listed["suspensions"][0]["pending"];
    assert_eq!(pending.as_array().unwrap().len(), 1, "{listed}");
    let p = &pending[0];
    assert_eq!(p["tool"], "ask_human");
    assert_eq!(
        p["question"],
        json!({"question": "Which colour for the fence?", "choices": ["blue", "green"]})
    );
    let id = p["id"].as_str().unwrap().to_owned();

    for (body, field) in [
        (
            json!({"decisions": [{"id": id, "answer": "red"}]}),
            "decisions[0].answer",
        ),
        (
            json!({"decisions": [{"id": id, "answer": " "}]}),
            "decisions[0].answer",
        ),
        (
            json!({"decisions": [{"id": id, "answer": "blue", "verdict": "allow_for_run"}]}),
            "decisions[0].verdict",
        ),
        (
            json!({"decisions": [{"id": id, "verdict": "allow_once"}]}),
            "decisions[0].answer",
        ),
        (json!({"decisions": [{"id": id}]}), "decisions[0].verdict"),
    ] {
        let (status, e) = decide(&http, &base, &root, body.clone()).await;
        assert_eq!(status, 400, "{body}: {e}");
        assert_eq!(e["error"]["field"], field, "{body}: {e}");
    }
    let (status, left) = decide(
        &http,
        &base,
        &root,
        json!({"decisions": [{"id": id, "answer": "green"}], "by": "carol"}),
    )
    .await;
    assert_eq!((status, &left["pending"]), (200, &json!([])), "{left}");
    let (status, e) = decide(
        &http,
        &base,
        &root,
        json!({"decisions": [{"id": id, "answer": "blue"}]}),
    )
    .await;
    assert_eq!(status, 409, "{e}");
    let message = e["error"]["message"].as_str().unwrap();
    assert!(
        message.starts_with("This call was already decided: allow_once by carol")
            && message.contains("(green)"),
        "{message}"
    );

    let (status, resumed) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 202, "{resumed}");
    status_becomes(&http, &base, &root, "succeeded").await;
    assert_eq!(tool_results(&http, &base, &painter).await, ["green"]);
}

const ASYNC_ASKER: &str = r#"
task = "paint while I plan"
root = "root"

[agents.root]
children = ["painter"]
delegation_tools = ["spawn_agent", "wait_agent"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "painter", name = "painter", input = "Paint the fence.", mode = "async" } }]
[[agents.root.turns]]
delay_ms = 1500
text = "planned"

[agents.painter]
tools = ["ask_human"]
[[agents.painter.turns]]
tool_calls = [{ name = "ask_human", arguments = { question = "Which colour?", choices = ["blue", "green"] } }]
[[agents.painter.turns]]
delay_ms = 2500
text = "Painted."
"#;

/// An async child asks while its root's run goes on: the question is listed at the root,
/// answered, and the resume lets the child go on at once, inside the run still going; the
/// run's end does not cut it off (the tree is held until it is done).
#[tokio::test]
async fn an_async_childs_question_answered_mid_run_goes_on_at_once() {
    let (_dir, served) = serving("asker", ASYNC_ASKER);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "asker").await;
    let started = std::time::Instant::now();
    let mut listed = Value::Null;
    while started.elapsed() < std::time::Duration::from_secs(5) {
        let (_, l) = call(
            &http,
            Method::GET,
            format!("{base}/v1/sessions/{root}/approvals"),
            None,
        )
        .await;
        if l["suspensions"][0]["pending"][0]["question"].is_object() {
            listed = l;
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    let id = listed["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("the question was never listed: {listed}"))
        .to_owned();
    let (status, _) = decide(
        &http,
        &base,
        &root,
        json!({"decisions": [{"id": id, "answer": "blue"}]}),
    )
    .await;
    assert_eq!(status, 200);
    let (_, before) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
    assert_eq!(before["status"], "running", "answered mid-run: {before}");
    let (status, resumed) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 202, "{resumed}");
    // The root's run ends while the painter's slow turn still goes on: it is not cut off.
    let run = status_becomes(&http, &base, &root, "succeeded").await;
    assert_eq!(node(&run, "painter")["status"], "running", "{run}");
    let run = loop {
        let (_, run) = call(&http, Method::GET, format!("{base}/v1/runs/{root}"), None).await;
        if node(&run, "painter")["status"] != "running" {
            break run;
        }
        assert!(
            started.elapsed() < std::time::Duration::from_secs(15),
            "the painter never finished: {run}"
        );
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    assert_eq!(node(&run, "painter")["status"], "succeeded", "{run}");
    let painter = node(&run, "painter")["id"].as_str().unwrap().to_owned();
    assert_eq!(tool_results(&http, &base, &painter).await, ["blue"]);
}
