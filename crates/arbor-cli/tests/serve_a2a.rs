//! `arbor serve` as an A2A server, at its edges, with a plain HTTP client (issue 43, item 2;
//! the official SDK's client drives the whole flow in `tests/interop/a2a_server_test.py`):
//! every refusal is a JSON-RPC error with HTTP 200 and the code A2A names; another tenant's
//! task is the one `TaskNotFoundError`; a spec the tenant may not start has no card; a
//! reply to a task that does not ask is refused and starts nothing.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::client;
use serve_support::tenants::{TOKEN_A, TOKEN_B, two_tenants};

async fn rpc(http: &reqwest::Client, url: &str, token: &str, body: &str) -> (u16, Value) {
    let resp = http
        .post(url)
        .bearer_auth(token)
        .header("A2A-Version", "1.0")
        .header("content-type", "application/json")
        .body(body.to_owned())
        .send()
        .await
        .unwrap();
    let status = resp.status().as_u16();
    (status, resp.json().await.unwrap_or(Value::Null))
}

fn call(method: &str, params: Value) -> String {
    json!({"jsonrpc": "2.0", "id": "r1", "method": method, "params": params}).to_string()
}

fn code(v: &Value) -> i64 {
    v["error"]["code"].as_i64().unwrap_or(0)
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn every_refusal_is_the_json_rpc_error_a2a_names() {
    let (_dir, served) = two_tenants(&[]);
    let (base, http) = (served.base.clone(), client());
    let url = format!("{base}/a2a/slow");

    // A card per spec; none without a token, none for a spec not offered.
    let card = http
        .get(format!("{url}/.well-known/agent-card.json"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    assert_eq!(card.status().as_u16(), 200);
    let card: Value = card.json().await.unwrap();
    assert_eq!(card["supportedInterfaces"][0]["url"], url);
    assert_eq!(card["capabilities"]["streaming"], true);
    let anonymous = http
        .get(format!("{url}/.well-known/agent-card.json"))
        .send()
        .await
        .unwrap();
    assert_eq!(anonymous.status().as_u16(), 401);
    let (status, _) = rpc(
        &http,
        &format!("{base}/a2a/nope"),
        TOKEN_A,
        &call("GetTask", json!({"id": "x"})),
    )
    .await;
    assert_eq!(status, 404);

    // The envelope and the version.
    let (status, v) = rpc(&http, &url, TOKEN_A, "{not json").await;
    assert_eq!((status, code(&v)), (200, -32700));
    assert_eq!(v["id"], Value::Null);
    let (_, v) = rpc(&http, &url, TOKEN_A, r#"{"id": 7, "method": "GetTask"}"#).await;
    assert_eq!((code(&v), v["id"].clone()), (-32600, json!(7)));
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("message/send", json!({}))).await;
    assert_eq!(code(&v), -32601);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("message/send"),
        "{v}"
    );
    let old = http
        .post(&url)
        .bearer_auth(TOKEN_A)
        .header("A2A-Version", "0.3")
        .header("content-type", "application/json")
        .body(call("GetTask", json!({"id": "x"})))
        .send()
        .await
        .unwrap();
    let old: Value = old.json().await.unwrap();
    assert_eq!(code(&old), -32009);
    assert_eq!(old["error"]["data"][0]["reason"], "VERSION_NOT_SUPPORTED");

    // A body that is not JSON by its type is refused before anything runs: a web page
    // cannot send one without a preflight.
    let plain = http
        .post(&url)
        .bearer_auth(TOKEN_A)
        .header("content-type", "text/plain")
        .body(call(
            "SendMessage",
            json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "go"}]}}),
        ))
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 400);
    let plain: Value = plain.json().await.unwrap();
    assert_eq!(plain["error"]["field"], "Content-Type", "{plain}");
    let runs: Value = http
        .get(format!("{base}/v1/runs"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(runs["runs"].as_array().map(Vec::len), Some(0), "{runs}");

    // Params, named.
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("GetTask", json!({"id": 5}))).await;
    assert_eq!(code(&v), -32602);
    assert!(
        v["error"]["message"].as_str().unwrap().contains("GetTask"),
        "{v}"
    );
    let agent_says =
        json!({"message": {"messageId": "m", "role": "ROLE_AGENT", "parts": [{"text": "x"}]}});
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("SendMessage", agent_says)).await;
    assert_eq!(code(&v), -32602);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("message.role"),
        "{v}"
    );
    let empty = json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": []}});
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("SendMessage", empty)).await;
    assert_eq!(code(&v), -32602);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("message.parts"),
        "{v}"
    );

    // A task that runs: tenant B cannot see it, a reply is refused, a cancel ends it.
    let start = json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "go"}]},
                       "configuration": {"returnImmediately": true}});
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("SendMessage", start)).await;
    let task = v["result"]["task"]["id"].as_str().unwrap().to_owned();
    assert_eq!(v["result"]["task"]["metadata"]["arbor"]["spec"], "slow");
    for (token, id) in [
        (TOKEN_B, task.as_str()),
        (TOKEN_A, "0190b4a4-0000-7000-8000-000000000000"),
    ] {
        let (_, v) = rpc(&http, &url, token, &call("GetTask", json!({"id": id}))).await;
        assert_eq!(code(&v), -32001, "{v}");
        assert_eq!(v["error"]["message"], "Task not found");
        let (_, v) = rpc(&http, &url, token, &call("CancelTask", json!({"id": id}))).await;
        assert_eq!(code(&v), -32001, "{v}");
    }
    let reply = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": task, "parts": [{"text": "approve"}]}});
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("SendMessage", reply.clone())).await;
    assert_eq!(code(&v), -32004, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("TASK_STATE_WORKING"),
        "{v}"
    );
    let (_, v) = rpc(
        &http,
        &url,
        TOKEN_A,
        &call("CancelTask", json!({"id": task})),
    )
    .await;
    assert_eq!(v["result"]["status"]["state"], "TASK_STATE_CANCELED", "{v}");
    let (_, v) = rpc(
        &http,
        &url,
        TOKEN_A,
        &call("CancelTask", json!({"id": task})),
    )
    .await;
    assert_eq!(code(&v), -32002, "{v}");
    let (_, v) = rpc(&http, &url, TOKEN_A, &call("SendMessage", reply)).await;
    assert_eq!(code(&v), -32004, "{v}");
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("terminal state"),
        "{v}"
    );
    let (_, v) = rpc(
        &http,
        &url,
        TOKEN_A,
        &call("SubscribeToTask", json!({"id": task})),
    )
    .await;
    assert_eq!(code(&v), -32004, "{v}");
    // The run is the tenant's, as /v1 shows it.
    let run: Value = http
        .get(format!("{base}/v1/runs/{task}"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(run["status"], "aborted", "{run}");
}

/// A message-mode child that stops on a gated call of its own: with the worker's, two runs
/// wait.
const MESSENGER_ASKS: &str = r#"tools = ["echo"]

[[agents.messenger.turns]]
tool_calls = [{ name = "echo", arguments = { text = "messenger's" } }]

[[agents.messenger.turns]]
text = "sent"
"#;

#[tokio::test]
async fn one_reply_decides_the_calls_of_every_run_that_waits() {
    let (_dir, served) = serve_support::serving(
        "tworuns",
        &serve_support::messenger_and_worker(MESSENGER_ASKS, &["done"]),
    );
    let (base, http) = (served.base.clone(), client());
    let url = format!("{base}/a2a/tworuns");
    let start =
        json!({"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "go"}]}});
    let (_, v) = rpc(&http, &url, "unused", &call("SendMessage", start)).await;
    let id = v["result"]["task"]["id"].as_str().unwrap().to_owned();
    // The worker's call stops the root's run; the messenger's stops its own (nobody awaits
    // it), before or after: the tree is not ended under a run still going, and the task asks
    // until both are listed.
    let mut v = v;
    for _ in 0..100 {
        let pending = v["result"]["status"]["message"]["parts"][1]["data"]["pending"]
            .as_array()
            .or_else(|| {
                v["result"]["task"]["status"]["message"]["parts"][1]["data"]["pending"].as_array()
            })
            .map_or(0, Vec::len);
        if pending == 2 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        v = rpc(&http, &url, "unused", &call("GetTask", json!({"id": id})))
            .await
            .1;
    }
    let task = v["result"].get("task").unwrap_or(&v["result"]);
    assert_eq!(task["status"]["state"], "TASK_STATE_INPUT_REQUIRED", "{v}");
    let runs = task["status"]["message"]["parts"][1]["data"]["pending"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(runs, 2, "two runs wait: {v}");
    let reply = json!({"message": {"messageId": "m2", "role": "ROLE_USER", "taskId": id, "parts": [{"text": "approve"}]}});
    let (_, v) = rpc(&http, &url, "unused", &call("SendMessage", reply)).await;
    let task = &v["result"]["task"];
    assert_eq!(task["status"]["state"], "TASK_STATE_COMPLETED", "{v}");
    // Completed only with its answer kept.
    assert_eq!(task["artifacts"][0]["parts"][0]["text"], "done", "{v}");
    let run: Value = http
        .get(format!("{base}/v1/runs/{id}"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    let statuses: Vec<&str> = run["tree"]["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["succeeded"; 3], "{run}");
}

#[tokio::test]
async fn the_http_json_binding_answers_errors_as_a_google_rpc_status() {
    let (_dir, served) = two_tenants(&[]);
    let (base, http) = (served.base.clone(), client());
    let rest = format!("{base}/a2a/quick/rest");
    let unknown = http
        .get(format!("{rest}/tasks/0190b4a4-0000-7000-8000-000000000000"))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    assert_eq!(unknown.status().as_u16(), 404);
    let body: Value = unknown.json().await.unwrap();
    assert_eq!(body["error"]["status"], "NOT_FOUND", "{body}");
    assert_eq!(
        body["error"]["details"][0]["reason"], "TASK_NOT_FOUND",
        "{body}"
    );
    // A cancel changes something: JSON only, refused in the same shape otherwise.
    let plain = http
        .post(format!(
            "{rest}/tasks/0190b4a4-0000-7000-8000-000000000000:cancel"
        ))
        .bearer_auth(TOKEN_A)
        .send()
        .await
        .unwrap();
    assert_eq!(plain.status().as_u16(), 400);
    let body: Value = plain.json().await.unwrap();
    assert_eq!(body["error"]["status"], "INVALID_ARGUMENT", "{body}");
    assert!(
        body["error"]["message"]
            .as_str()
            .unwrap()
            .contains("Content-Type"),
        "{body}"
    );
    // A task started over REST answers bare, as application/a2a+json.
    let sent = http
        .post(format!("{rest}/message:send"))
        .bearer_auth(TOKEN_A)
        .json(
            &json!({"message": {"messageId": "m", "role": "ROLE_USER", "parts": [{"text": "hi"}]}}),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(sent.status().as_u16(), 200);
    assert_eq!(
        sent.headers()["content-type"].to_str().unwrap(),
        "application/a2a+json"
    );
    let body: Value = sent.json().await.unwrap();
    assert_eq!(
        body["task"]["status"]["state"], "TASK_STATE_COMPLETED",
        "{body}"
    );
    assert_eq!(
        body["task"]["artifacts"][0]["parts"][0]["text"], "hello",
        "{body}"
    );
}
