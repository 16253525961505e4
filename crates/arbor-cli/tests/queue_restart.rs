//! A queue survives a SIGKILL (issue 39, item 5): `arbor run` spawns two children at once
//! under one slot, the second queued; the process is killed while the first runs. `arbor
//! resume` continues the root, whose two calls rejoin their children in the order they came:
//! the first goes on from its transcript, the second, which never started, starts on the
//! task it was queued with. Both answers reach the root; nothing is lost or run twice.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use serde_json::Value;

#[allow(dead_code)]
mod kill_support;
use kill_support::{arbor, named, run_until, sessions};

const SPEC: &str = r#"
task = "two at once"

[supervisor]
limits = { max_active_children = 1 }
max_queued = 4

[agents.root]
children = ["helper"]
tool_concurrency = 2
[[agents.root.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "helper", name = "first", input = "the first task", on_full = "queue" } },
  { name = "spawn_agent", arguments = { child_id = "helper", name = "second", input = "the second task", on_full = "queue" } },
]
[[agents.root.turns]]
text = "both answered"

[agents.helper]
[[agents.helper.turns]]
delay_ms = 1500
text = "the helper's answer"
"#;

fn status_of(rows: &[Value], name: &str) -> Option<String> {
    named(rows, name)
        .and_then(|s| s["status"].as_str())
        .map(str::to_owned)
}

/// The tool results of `session`'s transcript.
fn results(dir: &Path, session: &str) -> Vec<String> {
    let log = arbor(dir, &["log", session, "--json"]);
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_queued_child_cut_off_by_a_sigkill_starts_on_its_task_after_arbor_resume() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SPEC).unwrap();
    // Killed while the first runs and the second waits in the queue.
    let (mut run, root) = run_until(
        dir.path(),
        "the first child never ran with the second queued",
        |rows| {
            status_of(rows, "first").as_deref() == Some("running")
                && status_of(rows, "second").as_deref() == Some("queued")
        },
    );
    run.kill().unwrap();
    run.wait().unwrap();

    let out = arbor(dir.path(), &["resume", &root]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rows = sessions(dir.path(), &root);
    for name in ["first", "second", "root"] {
        assert_eq!(
            status_of(&rows, name).as_deref(),
            Some("succeeded"),
            "{name}: {rows:?}"
        );
    }
    // The root read both answers, not interruptions.
    let answers = results(dir.path(), &root);
    assert_eq!(answers.len(), 2, "{answers:?}");
    assert!(
        answers.iter().all(|a| a.contains("the helper's answer")),
        "{answers:?}"
    );
    // The second ran once, on the task it was queued with.
    let second = rows.iter().find(|s| s["name"] == "second").unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = arbor(dir.path(), &["log", &second, "--json"]);
    let entries: Vec<Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .collect();
    let tasks: Vec<&Value> = entries
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "user")
        .collect();
    assert_eq!(tasks.len(), 1, "{entries:?}");
    assert_eq!(tasks[0]["message"]["content"], "the second task");
    assert_eq!(
        entries
            .iter()
            .filter(|e| e["kind"] == "run_started")
            .count(),
        1,
        "it ran once"
    );
}
