//! A sync child continues after a crash in one process too (issue 39, item 7): SIGKILL
//! `arbor run` while the root waits for its sync child, then `arbor resume`: the root's
//! continued run rejoins the child, which goes on here from its transcript, and reads its
//! answer, where before the call was reported interrupted.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::time::Duration;

use serde_json::Value;

#[allow(dead_code)]
mod kill_support;
use kill_support::{arbor, named, run_until, sessions};

const SPEC: &str = r#"
task = "ask the helper"

[agents.root]
children = ["helper"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "helper", name = "helper", input = "take your time" } }]
[[agents.root.turns]]
text = "done"

[agents.helper]
[[agents.helper.turns]]
delay_ms = 1500
text = "the helper's answer"
"#;

fn json(dir: &Path, args: &[&str]) -> Value {
    let out = arbor(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// The session named `name` in `arbor tree ROOT --json`, once it is there.
fn session(dir: &Path, root: &str, name: &str) -> Option<Value> {
    named(&sessions(dir, root), name).cloned()
}

#[test]
fn a_resumed_root_rejoins_its_sync_child_cut_off_by_a_sigkill() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SPEC).unwrap();
    // Killed while the helper's turn is under way.
    let (mut run, root) = run_until(dir.path(), "the helper never ran", |rows| {
        named(rows, "helper").is_some_and(|h| h["status"] == "running")
    });
    std::thread::sleep(Duration::from_millis(300));
    run.kill().unwrap();
    run.wait().unwrap();
    let helper = session(dir.path(), &root, "helper").unwrap();
    // Cut off mid-run (a reader that finds its owner dead says so).
    assert!(
        helper["status"] == "running" || helper["status"] == "interrupted",
        "{helper}"
    );

    let out = arbor(dir.path(), &["resume", &root]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The helper went on here and answered; the root read its answer, not an interruption.
    let helper = session(dir.path(), &root, "helper").unwrap();
    assert_eq!(helper["status"], "succeeded", "{helper}");
    let log = arbor(dir.path(), &["log", &root, "--json"]);
    let results: Vec<String> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("the helper's answer"), "{results:?}");
    let root_row = session(dir.path(), &root, "root").unwrap();
    assert_eq!(root_row["status"], "succeeded", "{root_row}");
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
}

const ASKING: &str = r#"
task = "ask the helper"

[agents.root]
children = ["helper"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "helper", name = "helper", input = "take your time" } }]
[[agents.root.turns]]
text = "done"

[agents.helper]
tools = ["ask_human"]
[[agents.helper.turns]]
delay_ms = 1500
tool_calls = [{ name = "ask_human", arguments = { question = "Ship it?", choices = ["yes", "no"] } }]
[[agents.helper.turns]]
text = "shipped"
"#;

/// The rejoined child asks after the crash: `arbor resume` leaves the root waiting with it
/// (exit 4, the question listed at the root), and once answered, the next `arbor resume`
/// delivers the answer to the child and the child's answer to the root's call.
#[test]
fn a_rejoined_child_that_asks_after_a_sigkill_answers_its_caller_once_answered() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), ASKING).unwrap();
    let (mut run, root) = run_until(dir.path(), "the helper never ran", |rows| {
        named(rows, "helper").is_some_and(|h| h["status"] == "running")
    });
    std::thread::sleep(Duration::from_millis(300));
    run.kill().unwrap();
    run.wait().unwrap();

    let out = arbor(dir.path(), &["resume", &root]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let root_row = session(dir.path(), &root, "root").unwrap();
    assert_eq!(root_row["status"], "suspended", "{root_row}");
    let listed = json(dir.path(), &["approvals", &root, "--json"]);
    let pending: Vec<&Value> = listed["suspensions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["pending"].as_array().unwrap())
        .collect();
    assert_eq!(pending.len(), 1, "listed once, at the root: {listed}");
    assert_eq!(pending[0]["tool"], "ask_human");
    let id = pending[0]["id"].as_str().unwrap();
    let answer = arbor(dir.path(), &["answer", &root, id, "yes"]);
    assert!(
        answer.status.success(),
        "{}",
        String::from_utf8_lossy(&answer.stderr)
    );

    let out = arbor(dir.path(), &["resume", &root]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let log = arbor(dir.path(), &["log", &root, "--json"]);
    let results: Vec<String> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(results[0].contains("shipped"), "{results:?}");
    for name in ["root", "helper"] {
        let row = session(dir.path(), &root, name).unwrap();
        assert_eq!(row["status"], "succeeded", "{row}");
    }
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
}
