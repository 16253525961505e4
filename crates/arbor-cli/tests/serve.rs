//! `arbor serve` as a process: started on an ephemeral loopback port with a directory of
//! specs, driven over HTTP by a real client, stopped by SIGTERM (exit 0), its runs durable
//! in the store for the other commands.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;
use std::time::{Duration, Instant};

use serde_json::{Value, json};

#[allow(dead_code)]
mod serve_support;
use serve_support::{
    call, client, node, resume_until_released, serve, serve_env, serving, start_run,
    status_becomes, tool_results,
};

const REVIEW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml");

#[tokio::test]
async fn a_spec_runs_over_http_and_sigterm_stops_the_server_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::copy(REVIEW, dir.path().join("specs/review.toml")).unwrap();
    let mut served = serve(dir.path(), &[]);
    let http = client();

    let specs: Value = http
        .get(format!("{}/v1/specs", served.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(specs, json!({"specs": ["review"]}));
    let resp = http
        .post(format!("{}/v1/runs", served.base))
        .json(&json!({"spec": "review"}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let run: Value = resp.json().await.unwrap();
    let root = run["root_id"].as_str().unwrap().to_owned();

    let started = Instant::now();
    let run = loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "never finished"
        );
        let run: Value = http
            .get(format!("{}/v1/runs/{root}", served.base))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        if run["status"] == "succeeded" {
            break run;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let sessions = run["tree"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 5, "{run}");
    // The two totals of the example: the root's own 40,000; the tree's 740,000.
    assert_eq!(sessions[0]["usage"]["own"]["total_tokens"], 40_000);
    assert_eq!(sessions[0]["usage"]["aggregate"]["total_tokens"], 740_000);
    let children: Value = http
        .get(format!("{}/v1/sessions/{root}/children", served.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(children["children"].as_array().unwrap().len(), 3);

    let kill = Command::new("kill")
        .args(["-TERM", &served.child.id().to_string()])
        .status()
        .unwrap();
    assert!(kill.success());
    let status = served.child.wait().unwrap();
    assert_eq!(status.code(), Some(0));
    let said: Vec<String> = served.stderr.try_iter().collect();
    assert!(
        said.iter().any(|l| l.contains("arbor serve: stopped")),
        "{said:?}"
    );

    // The run is in the store, for every other command.
    let ls = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["ls", "--json", "--store", "a.db"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let roots: Value = serde_json::from_slice(&ls.stdout).unwrap();
    assert_eq!(roots["roots"][0]["id"], root.as_str());
}

#[test]
fn without_tokens_only_loopback_is_served() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["serve", "--listen", "0.0.0.0:0", "--memory"])
        .current_dir(dir.path())
        .env_remove("ARBOR_TOKENS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "without tokens (--tokens FILE or ARBOR_TOKENS) the server listens on loopback only"
        ),
        "{err}"
    );
}

/// A tokens file that names no token is refused, naming the file (it served every request
/// unauthenticated, as if no tokens were configured).
#[test]
fn a_tokens_file_without_a_token_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("tokens"), "# nobody yet\n").unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args([
            "serve",
            "--listen",
            "127.0.0.1:0",
            "--memory",
            "--tokens",
            "tokens",
        ])
        .current_dir(dir.path())
        .env_remove("ARBOR_TOKENS")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("tokens: no token in it") && err.contains("unauthenticated"),
        "{err}"
    );
}

#[tokio::test]
async fn a_spec_that_does_not_pass_its_checks_is_not_offered_and_the_server_says_why() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::copy(REVIEW, dir.path().join("specs/review.toml")).unwrap();
    std::fs::write(dir.path().join("specs/broken.toml"), "task = 3\n").unwrap();
    let mut served = serve(dir.path(), &[]);
    let specs: Value = client()
        .get(format!("{}/v1/specs", served.base))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    served.child.kill().unwrap();
    let _ = served.child.wait();
    assert_eq!(specs, json!({"specs": ["review"]}));
    assert!(
        served
            .early
            .iter()
            .any(|l| l.contains("not offering") && l.contains("broken.toml")),
        "{:?}",
        served.early
    );
}

const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

/// How the run of `root` ended, once its launcher kept a result with status `want`.
async fn result_of(http: &reqwest::Client, base: &str, root: &str, want: &str) -> Value {
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no result kept"
        );
        let (_, run) = call(
            http,
            reqwest::Method::GET,
            format!("{base}/v1/runs/{root}"),
            None,
        )
        .await;
        if run["result"]["status"] == want {
            return run["result"].clone();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_child_waiting_for_approval_is_decided_and_resumed_over_http_running_its_call_once() {
    use reqwest::Method;
    let (_dir, served) = serving("approvals", &std::fs::read_to_string(APPROVALS).unwrap());
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "approvals").await;
    let run = status_becomes(&http, &base, &root, "suspended").await;
    let publisher = node(&run, "publisher")["id"].as_str().unwrap().to_owned();

    let (status, waiting) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/approvals"),
        None,
    )
    .await;
    assert_eq!(status, 200);
    let pending = &waiting["suspensions"][0]["pending"];
    assert_eq!(pending.as_array().unwrap().len(), 1, "{waiting}");
    assert_eq!(pending[0]["tool"], "echo");
    assert_eq!(pending[0]["path"], json!(["publisher"]));
    assert_eq!(
        pending[0]["arguments"],
        json!({"text": "published v1.2 release notes"})
    );
    let id = pending[0]["id"].as_str().unwrap().to_owned();

    // Undecided: the resume is refused, nothing runs.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(
        (status, e["error"]["kind"].as_str()),
        (409, Some("conflict")),
        "{e}"
    );
    // A forged id: the one unknown-approval answer.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/approvals"),
        Some(json!({"decisions": [{"id": "sub_0000", "verdict": "allow_once"}]})),
    )
    .await;
    assert_eq!(
        (status, e["error"]["message"].as_str()),
        (404, Some("Unknown approval"))
    );
    // A verdict that does not exist names its field.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/approvals"),
        Some(json!({"decisions": [{"id": id, "verdict": "maybe"}]})),
    )
    .await;
    assert_eq!(status, 400, "{e}");

    let (status, left) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/approvals"),
        Some(
            json!({"decisions": [{"id": id, "verdict": "allow_once", "reason": "ok to publish"}]}),
        ),
    )
    .await;
    assert_eq!((status, &left["pending"]), (200, &json!([])), "{left}");
    assert!(
        tool_results(&http, &base, &publisher).await.is_empty(),
        "deciding runs nothing"
    );
    // Decided already: refused (409), naming the decision taken.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/approvals"),
        Some(json!({"decisions": [{"id": id, "verdict": "allow_once"}]})),
    )
    .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .starts_with("This call was already decided: allow_once by tenant "),
        "{e}"
    );

    let (status, resumed) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(
        (status, &resumed["status"]),
        (202, &json!("resuming")),
        "{resumed}"
    );
    status_becomes(&http, &base, &root, "succeeded").await;
    let result = result_of(&http, &base, &root, "succeeded").await;
    assert_eq!(
        (&result["status"], &result["text"]),
        (&json!("succeeded"), &json!("The release notes are out.")),
        "{result}"
    );
    assert_eq!(
        tool_results(&http, &base, &publisher).await,
        ["published v1.2 release notes"],
        "the approved call ran exactly once"
    );
    // Over: nothing waits, a second resume runs nothing.
    let (status, _) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409);
    assert_eq!(tool_results(&http, &base, &publisher).await.len(), 1);
}

/// A root that delegates to a child whose one turn takes a minute.
const SLOW: &str = r#"
task = "wait for the slow child"
root = "root"

[agents.root]
children = ["slow"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "slow", name = "slow", input = "take your time" } }]
[[agents.root.turns]]
text = "done"

[agents.slow]
[[agents.slow.turns]]
delay_ms = 60000
text = "finally"
"#;

#[tokio::test]
async fn a_running_child_is_cancelled_over_http_and_its_tree_goes_on() {
    use reqwest::Method;
    let (_dir, served) = serving("slow", SLOW);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "slow").await;
    // Wait until the child runs.
    let started = Instant::now();
    let child = loop {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "the child never ran"
        );
        let (_, kids) = call(
            &http,
            Method::GET,
            format!("{base}/v1/sessions/{root}/children"),
            None,
        )
        .await;
        if kids["children"][0]["status"] == "running" {
            break kids["children"][0]["id"].as_str().unwrap().to_owned();
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let (status, c) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{child}/cancel"),
        None,
    )
    .await;
    assert_eq!((status, &c["status"]), (202, &json!("cancelling")), "{c}");
    // The child ends aborted; its parent reads the failed call and answers.
    let run = status_becomes(&http, &base, &root, "succeeded").await;
    assert_eq!(node(&run, "slow")["status"], "aborted", "{run}");
    // Nothing runs now: a cancel is a conflict.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{child}/cancel"),
        None,
    )
    .await;
    assert_eq!(
        (status, e["error"]["kind"].as_str()),
        (409, Some("conflict")),
        "{e}"
    );
}

const INLINE: &str = r#"
task = "say hello"
root = "root"
[agents.root]
[[agents.root.turns]]
text = "hello from an inline spec"
"#;

#[tokio::test]
async fn inline_specs_run_only_on_a_server_that_allows_them() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    let refusing = serve(dir.path(), &[]);
    let http = client();
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{}/v1/runs", refusing.base),
        Some(json!({"spec_text": INLINE})),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("spec_text")),
        "{e}"
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("--allow-inline-specs"),
        "{e}"
    );
    drop(refusing);

    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    let served = serve(dir.path(), &["--allow-inline-specs"]);
    let base = served.base.clone();
    let (status, run) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        Some(json!({"spec_text": INLINE})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    status_becomes(&http, &base, &root, "succeeded").await;
    // A broken inline spec is refused naming the field, with the parser's reason.
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        Some(json!({"spec_text": "task = 3"})),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("spec_text")),
        "{e}"
    );
    assert!(
        e["error"]["message"]
            .as_str()
            .unwrap()
            .contains("inline spec"),
        "{e}"
    );
}

/// A root whose one turn holds the tree open for a while, and a child that answers at once.
const HOSTED: &str = r#"
task = "hold the tree open"
root = "root"

[agents.root]
children = ["helper"]
# Its run on the host's message answers the same.
repeat_last = true
[[agents.root.turns]]
delay_ms = 4000
text = "done"

[agents.helper]
description = "Helps"
repeat_last = true
[[agents.helper.turns]]
text = "helped"
"#;

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_host_spawns_waits_messages_and_deletes_as_a_parent_over_http() {
    use reqwest::Method;
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/hosted.toml"), HOSTED).unwrap();
    let served = serve_env(dir.path(), &[], &[("ARBOR_HOST_IDLE_MS", "300")]);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "hosted").await;
    status_becomes(&http, &base, &root, "running").await;
    let children = format!("{base}/v1/sessions/{root}/children");

    // sync: the answer in the response.
    let (status, a) = call(
        &http,
        Method::POST,
        children.clone(),
        Some(json!({"child_id": "helper", "input": "help now", "name": "first", "mode": "sync", "wait_ms": 5000})),
    )
    .await;
    assert_eq!(status, 200, "{a}");
    assert_eq!(
        (a["status"].as_str(), a["text"].as_str()),
        (Some("succeeded"), Some("helped"))
    );
    assert_eq!(a["name"], "first");

    // join: a handle, then a wait.
    let (status, h) = call(
        &http,
        Method::POST,
        children.clone(),
        Some(json!({"child_id": "helper", "input": "help later", "name": "second"})),
    )
    .await;
    assert_eq!((status, &h["status"]), (201, &json!("running")), "{h}");
    let did = h["delegation_id"].as_str().unwrap();
    let (status, done) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/delegations/{did}?wait_ms=5000"),
        None,
    )
    .await;
    assert_eq!((status, &done["text"]), (200, &json!("helped")), "{done}");
    // Its handle, once ended: a cancel says it was over.
    let (status, c) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/delegations/{did}/cancel"),
        None,
    )
    .await;
    assert_eq!((status, &c["status"]), (200, &json!("terminal")), "{c}");

    // Bad requests name their field; an unknown handle is just unknown.
    let (status, e) = call(
        &http,
        Method::POST,
        children.clone(),
        Some(json!({"child_id": "ghost", "input": "x"})),
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("child_id")),
        "{e}"
    );
    let (status, e) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/delegations/{did}?wait_ms=99999"),
        None,
    )
    .await;
    assert_eq!(
        (status, &e["error"]["field"]),
        (400, &json!("wait_ms")),
        "{e}"
    );
    let (status, _) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/delegations/supervisor-forged?wait_ms=0"),
        None,
    )
    .await;
    assert_eq!(status, 404);

    // A message to the root while its run goes on: queued for its next turn.
    let (status, r) = call(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/messages"),
        Some(json!({"text": "a note from the host"})),
    )
    .await;
    assert_eq!(status, 202, "{r}");
    assert_eq!(r["to"], root.as_str());

    // Delete the first child: its tombstone; a second delete changes nothing.
    let first = a["session_id"].as_str().unwrap();
    let (status, d) = call(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{first}?reason=done+with+it"),
        None,
    )
    .await;
    assert_eq!((status, &d["already_deleted"]), (200, &json!(false)), "{d}");
    assert_eq!(d["tombstone"]["reason"], "done with it");
    let (status, d) = call(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{first}"),
        None,
    )
    .await;
    assert_eq!((status, &d["already_deleted"]), (200, &json!(true)), "{d}");
    // A root is not deleted this way.
    let (status, _) = call(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{root}"),
        None,
    )
    .await;
    assert_eq!(status, 409);

    // Once the run is over, the tree is hosted for the host's calls: a spawn still works.
    let run = status_becomes(&http, &base, &root, "succeeded").await;
    let (status, a) = call(
        &http,
        Method::POST,
        children,
        Some(json!({"child_id": "helper", "input": "after the run", "mode": "sync", "wait_ms": 5000})),
    )
    .await;
    assert_eq!((status, &a["text"]), (200, &json!("helped")), "{a}");
    // While hosted, a resume says so; once idle, the tree is released (and a resume finds
    // nothing waiting).
    let (status, e) = call(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        None,
    )
    .await;
    assert_eq!(status, 409, "{e}");
    assert!(
        e["error"]["message"].as_str().unwrap().contains("hosted"),
        "{e}"
    );
    resume_until_released(&http, &base, &root).await;
    let second = node(&run, "second")["id"].as_str().unwrap().to_owned();
    let (status, d) = call(
        &http,
        Method::DELETE,
        format!("{base}/v1/sessions/{second}"),
        None,
    )
    .await;
    assert_eq!((status, &d["already_deleted"]), (200, &json!(false)), "{d}");
    let (_, kids) = call(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/children"),
        None,
    )
    .await;
    let deleted: Vec<&str> = kids["children"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|k| !k["tombstone"].is_null())
        .map(|k| k["name"].as_str().unwrap())
        .collect();
    assert_eq!(deleted, ["first", "second"], "{kids}");
}

/// One slot for children, and a child that takes its time.
const ONE_SLOT: &str = r#"
task = "hold the tree open"
root = "root"

[supervisor]
limits = { max_active_children = 1 }

[agents.root]
children = ["helper"]
[[agents.root.turns]]
delay_ms = 3000
text = "done"

[agents.helper]
repeat_last = true
[[agents.helper.turns]]
delay_ms = 2000
text = "helped"
"#;

#[tokio::test]
async fn a_spawn_over_a_limit_is_a_429_that_names_the_limit() {
    use reqwest::Method;
    let (_dir, served) = serving("one_slot", ONE_SLOT);
    let (base, http) = (served.base.clone(), client());
    let root = start_run(&http, &base, "one_slot").await;
    status_becomes(&http, &base, &root, "running").await;
    let children = format!("{base}/v1/sessions/{root}/children");
    let (status, h) = call(
        &http,
        Method::POST,
        children.clone(),
        Some(json!({"child_id": "helper", "input": "one"})),
    )
    .await;
    assert_eq!(status, 201, "{h}");
    let (status, e) = call(
        &http,
        Method::POST,
        children,
        Some(json!({"child_id": "helper", "input": "two"})),
    )
    .await;
    assert_eq!(
        (status, e["error"]["kind"].as_str()),
        (429, Some("limit")),
        "{e}"
    );
    assert_eq!(
        e["error"]["limit"],
        json!({"name": "max_active_children", "maximum": 1, "observed": 2})
    );
}
