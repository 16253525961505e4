//! Durable approvals across processes: `arbor run` suspends and exits, then `arbor
//! approvals`, `arbor approve` and `arbor resume`, each in a new process, finish the tree with
//! the approved call executed exactly once.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)))
}

fn echo_results(dir: &Path, session: &str) -> Vec<String> {
    let out = arbor(dir, &["log", session, "--json"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect()
}

#[test]
fn a_suspended_tree_is_approved_and_resumed_by_later_processes() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", APPROVALS, "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4), "suspended");
    let report = json(&run);
    assert_eq!(report["status"], "suspended");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let pending = &report["suspension"]["pending"];
    assert_eq!(pending.as_array().unwrap().len(), 1);
    assert_eq!(pending[0]["tool"], "echo");
    assert_eq!(pending[0]["path"], serde_json::json!(["publisher"]));
    let id = pending[0]["id"].as_str().unwrap().to_owned();
    let publisher = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "publisher")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(
        echo_results(dir.path(), &publisher).is_empty(),
        "nothing ran"
    );

    let listed = json(&arbor(dir.path(), &["approvals", &root, "--json"]));
    assert_eq!(listed["suspensions"][0]["pending"][0]["id"], id.as_str());

    // A forged id: one error, nothing changed.
    let forged = arbor(dir.path(), &["approve", &root, "sub_0000"]);
    assert_eq!(forged.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&forged.stderr).contains("Unknown approval"));

    let decided = arbor(dir.path(), &["approve", &root, &id, "--json"]);
    assert!(decided.status.success());
    assert_eq!(json(&decided)["pending"], serde_json::json!([]));
    assert!(
        echo_results(dir.path(), &publisher).is_empty(),
        "deciding runs nothing"
    );

    let resumed = arbor(dir.path(), &["resume", &root, "--json"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let report = json(&resumed);
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["result"]["text"], "The release notes are out.");
    assert_eq!(report["reconciliation"]["consistent"], true);
    assert_eq!(
        echo_results(dir.path(), &publisher),
        ["published v1.2 release notes"],
        "the approved call ran exactly once"
    );

    // Over: a second resume has nothing to do and runs nothing again.
    let again = arbor(dir.path(), &["resume", &root]);
    assert_eq!(again.status.code(), Some(2));
    assert_eq!(echo_results(dir.path(), &publisher).len(), 1);
}

#[test]
fn a_rejected_call_never_runs_and_the_model_reads_why() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", APPROVALS, "--json", "-q"]);
    let report = json(&run);
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let id = report["suspension"]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = arbor(dir.path(), &["reject", &root, &id, "--reason", "not today"]);
    assert!(out.status.success());
    let resumed = arbor(dir.path(), &["resume", &root, "--json"]);
    assert!(resumed.status.success());
    let report = json(&resumed);
    let publisher = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "publisher")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        echo_results(dir.path(), &publisher),
        ["rejected by a reviewer: not today"]
    );
}

const TWICE: &str = r#"
task = "Publish twice."
[supervisor]
approvals = true
[agents.root]
children = ["publisher"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "publisher", name = "publisher", input = "go" } }]
[[agents.root.turns]]
text = "done"
[agents.publisher]
tools = ["echo"]
[[agents.publisher.turns]]
tool_calls = [{ name = "echo", arguments = { text = "first" } }]
[[agents.publisher.turns]]
tool_calls = [{ name = "echo", arguments = { text = "second" } }]
[[agents.publisher.turns]]
text = "published"
"#;

#[test]
fn the_listing_names_path_tool_and_arguments_and_for_run_holds_for_the_next_call() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("twice.toml"), TWICE).unwrap();
    let run = arbor(dir.path(), &["run", "twice.toml", "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4));
    let root = json(&run)["root_session_id"].as_str().unwrap().to_owned();

    // The text listing: one line per pending call with its id, path, tool and arguments.
    let listed = arbor(dir.path(), &["approvals", &root]);
    assert!(listed.status.success());
    let text = String::from_utf8_lossy(&listed.stdout);
    let json_list = json(&arbor(dir.path(), &["approvals", &root, "--json"]));
    let waiting = &json_list["suspensions"][0];
    let id = waiting["pending"][0]["id"].as_str().unwrap().to_owned();
    assert!(
        text.contains(&format!("{id}  publisher: echo {{\"text\":\"first\"}}")),
        "{text}"
    );
    assert!(
        text.contains(&format!("arbor approve {root} ID...")),
        "{text}"
    );
    let version = waiting["version"].clone();

    // A forged id is refused without being echoed, and changes nothing.
    let forged = arbor(dir.path(), &["approve", &root, "sub_deadbeef"]);
    assert_eq!(forged.status.code(), Some(2));
    let err = String::from_utf8_lossy(&forged.stderr);
    assert_eq!(err.trim(), "error: Unknown approval");
    let again = json(&arbor(dir.path(), &["approvals", &root, "--json"]));
    assert_eq!(again["suspensions"][0]["version"], version);

    // Allowed for the run: the second echo on the same path runs without asking.
    let decided = arbor(dir.path(), &["approve", &root, &id, "--for-run"]);
    assert!(decided.status.success());
    let resumed = arbor(dir.path(), &["resume", &root, "--json"]);
    assert!(
        resumed.status.success(),
        "{}",
        String::from_utf8_lossy(&resumed.stderr)
    );
    let report = json(&resumed);
    assert_eq!(report["status"], "succeeded");
    let publisher = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "publisher")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(echo_results(dir.path(), &publisher), ["first", "second"]);
}

/// The root's turn spawns `publisher` (sync; its `echo` waits for approval) next to a long
/// `sleep`, so the root is still running while its child is suspended.
const STRANDED: &str = r#"
task = "t"
root = "root"
[supervisor]
approvals = true
[agents.root]
children = ["publisher"]
tools = ["sleep"]
[[agents.root.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "publisher", name = "publisher", input = "publish" } },
  { name = "sleep", arguments = { ms = 600000 } },
]
[[agents.root.turns]]
text = "done"
[agents.publisher]
tools = ["echo"]
[[agents.publisher.turns]]
tool_calls = [{ name = "echo", arguments = { text = "published" } }]
[[agents.publisher.turns]]
text = "published"
"#;

#[cfg(unix)]
#[test]
fn a_crash_while_a_child_waits_for_approval_closes_its_suspension_when_the_tree_goes_on() {
    use std::process::Stdio;
    use std::time::{Duration, Instant};

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("stranded.toml"), STRANDED).unwrap();
    let mut process = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["run", "stranded.toml", "-q"])
        .current_dir(dir.path())
        .env_remove("ARBOR_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Wait (from other processes) until the child's call waits for approval, then kill.
    let started = Instant::now();
    let (root, publisher) = loop {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "never suspended"
        );
        std::thread::sleep(Duration::from_millis(20));
        let ls = arbor(dir.path(), &["ls", "--json"]);
        let Ok(roots) = serde_json::from_slice::<Value>(&ls.stdout) else {
            continue;
        };
        let Some(root) = roots["roots"][0]["id"].as_str() else {
            continue;
        };
        let kids = json(&arbor(dir.path(), &["ls", root, "--json"]));
        let Some(publisher) = kids["children"][0]["id"].as_str() else {
            continue;
        };
        let waiting = json(&arbor(dir.path(), &["approvals", publisher, "--json"]));
        if kids["children"][0]["status"] == "suspended"
            && !waiting["suspensions"].as_array().unwrap().is_empty()
        {
            break (root.to_owned(), publisher.to_owned());
        }
    };
    process.kill().unwrap();
    process.wait().unwrap();

    // The tree goes on: the root's call to the child is reported interrupted, so nothing
    // will resume the child: its suspension is closed, and said so.
    let resumed = arbor(dir.path(), &["resume", &root, "--json"]);
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(resumed.status.success(), "{stderr}");
    assert!(
        stderr.contains(&format!(
            "closed the suspension of publisher ({publisher}): 1 call(s) waiting for approval \
             never run; its caller's call is reported interrupted"
        )),
        "{stderr}"
    );
    assert_eq!(json(&resumed)["status"], "succeeded");
    let waiting = json(&arbor(dir.path(), &["approvals", &publisher, "--json"]));
    assert_eq!(
        waiting["suspensions"],
        serde_json::json!([]),
        "no approval is left that nothing resumes"
    );
    let tree = json(&arbor(dir.path(), &["tree", &root, "--json"]));
    let statuses: Vec<&str> = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| s["status"].as_str().unwrap())
        .collect();
    assert_eq!(statuses, ["succeeded", "aborted"], "{tree}");
    assert_eq!(tree["reconciliation"]["consistent"], true);
    assert!(
        echo_results(dir.path(), &publisher).is_empty(),
        "the call never ran"
    );
    let again = arbor(dir.path(), &["resume", &root]);
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("nothing to resume"));
}

/// One decision per call from the CLI: the child's call is approved through the child's own
/// id (`arbor approvals CHILD` lists it), a rejection through the root's id is then refused
/// naming that decision, the resume runs the call once, and `arbor log` shows who decided.
#[test]
fn approving_through_the_childs_id_is_the_one_decision_and_the_log_shows_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", APPROVALS, "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4));
    let report = json(&run);
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let at_root = report["suspension"]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let publisher = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "publisher")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let listed = json(&arbor(dir.path(), &["approvals", &publisher, "--json"]));
    let at_child = listed["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert!(at_child.starts_with("apr_"), "{listed}");
    let ok = arbor(
        dir.path(),
        &["approve", &publisher, &at_child, "--reason", "checked"],
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // Nothing waits at the root now, under either id.
    let at_top = json(&arbor(dir.path(), &["approvals", &root, "--json"]));
    assert_eq!(at_top["suspensions"][0]["pending"], serde_json::json!([]));
    let refused = arbor(dir.path(), &["reject", &root, &at_root]);
    assert_eq!(refused.status.code(), Some(2));
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(
        said.starts_with("error: This call was already decided: allow_once by ")
            && said.contains("(tenant local)")
            && said.contains("(checked)"),
        "{said}"
    );
    assert!(arbor(dir.path(), &["resume", &root]).status.success());
    assert_eq!(
        echo_results(dir.path(), &publisher),
        ["published v1.2 release notes"]
    );
    let log = arbor(dir.path(), &["log", &publisher]);
    let text = String::from_utf8_lossy(&log.stdout);
    let line = text
        .lines()
        .find(|l| l.contains("decision"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(
        line.contains("allow_once echo by ") && line.ends_with("(tenant local): checked"),
        "{line}"
    );
}
