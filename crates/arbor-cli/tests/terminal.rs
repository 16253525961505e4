//! What `arbor run` does on a terminal, through a pseudo-terminal: it asks about calls
//! waiting for approval and goes on in the same process; `--no-input` keeps exit 4.
#![cfg(unix)]
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod pty_support;

use std::path::Path;
use std::process::Command;

use pty_support::OnTerminal;
use serde_json::Value;

const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

fn arbor(dir: &Path, args: &[&str]) -> String {
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// The tool results in the transcript of the child `name` of the latest root.
fn tool_results(dir: &Path, name: &str) -> Vec<Value> {
    let log = arbor(dir, &["log", name_of(dir, name).as_str(), "--json"]);
    log.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["message"]["role"] == "tool")
        .collect()
}

fn name_of(dir: &Path, name: &str) -> String {
    let kids: Value = serde_json::from_str(&arbor(dir, &["ls", "@latest", "--json"])).unwrap();
    kids["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == name)
        .unwrap()["session_id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn a_run_asks_on_the_terminal_and_goes_on_once_approved() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", APPROVALS], 100, &[]);
    term.wait_for(
        "[1/1] publisher: echo {\"text\":\"published v1.2 release notes\"}",
        1,
    );
    term.wait_for("> ", 1);
    term.type_line("o");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}\n{out}");
    // One report, the final one: the tree went on in the same process.
    assert_eq!(out.matches("session").count(), 1, "{out}");
    assert!(out.contains("publisher"), "{out}");
    assert!(!out.contains("arbor approve"), "{out}");
    // The approved call ran exactly once.
    let results = tool_results(dir.path(), "publisher");
    assert_eq!(results.len(), 1, "{results:?}");
    assert!(
        results[0]["message"]["content"]
            .as_str()
            .unwrap()
            .contains("published v1.2 release notes"),
        "{results:?}"
    );
}

#[test]
fn a_rejection_with_its_reason_reaches_the_model() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", APPROVALS], 100, &[]);
    term.wait_for("> ", 1);
    term.type_line("maybe");
    term.wait_for("answer o, r, j or s", 1);
    term.type_line("j");
    term.wait_for("why (the model reads it", 1);
    term.type_line("not before the tag is pushed");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}\n{out}");
    let results = tool_results(dir.path(), "publisher");
    assert_eq!(results.len(), 1, "{results:?}");
    let text = results[0]["message"]["content"].as_str().unwrap();
    assert!(text.contains("not before the tag is pushed"), "{text}");
    assert!(
        !text.contains("published v1.2"),
        "the call never ran: {text}"
    );
}

#[test]
fn a_skipped_call_keeps_exit_4_and_the_commands() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", APPROVALS], 100, &[]);
    term.wait_for("> ", 1);
    term.type_line("s");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(4), "{screen}\n{out}");
    assert!(out.contains("decide with: arbor approve"), "{out}");
    // Still waiting, durably: another process decides and resumes it.
    let waiting: Value =
        serde_json::from_str(&arbor(dir.path(), &["approvals", "--json"])).unwrap();
    assert_eq!(
        waiting["suspensions"][0]["pending"]
            .as_array()
            .unwrap()
            .len(),
        1
    );
}

#[test]
fn no_input_never_asks() {
    let dir = tempfile::tempdir().unwrap();
    let term = OnTerminal::start(dir.path(), &["run", APPROVALS, "--no-input"], 100, &[]);
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(4), "{screen}\n{out}");
    assert!(!screen.contains("[1/1]"), "{screen}");
    assert!(out.contains("decide with: arbor approve"), "{out}");
}
