//! A question from any depth through the CLI (issue 39, item 4): a child given `ask_human`
//! asks; `arbor run` (no terminal) exits 4 with the question waiting; `arbor approvals`
//! lists it with its choices; `arbor answer` records one answer, once, among the choices;
//! `arbor resume`, a later process, delivers it as the call's result.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const QUESTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/question.toml");

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The `ask_human` results in the transcript of the session named `name` under `root`.
fn answers_read(dir: &Path, root: &str, name: &str) -> Vec<(String, bool)> {
    let tree: Value =
        serde_json::from_slice(&arbor(dir, &["tree", root, "--json"]).stdout).unwrap();
    let id = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = arbor(dir, &["log", &id, "--json"]);
    String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .filter(|e| e["message"]["name"] == "ask_human")
        .map(|e| {
            (
                e["message"]["content"].as_str().unwrap().to_owned(),
                e["message"]["is_error"].as_bool().unwrap_or(false),
            )
        })
        .collect()
}

#[test]
fn a_question_waits_at_the_root_is_answered_once_and_reaches_the_child_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", QUESTION, "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4), "{:?}", text(&run));
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap().to_owned();

    let listed = arbor(dir.path(), &["approvals", &root]);
    let (out, _) = text(&listed);
    assert!(
        out.contains("painter: asks \"Which colour for the fence?\" [blue | green]"),
        "{out}"
    );
    assert!(
        out.contains(&format!("arbor answer {root} ID ANSWER")),
        "{out}"
    );
    let id = out
        .lines()
        .find(|l| l.contains("asks \""))
        .and_then(|l| l.split_whitespace().next())
        .unwrap()
        .to_owned();
    let json: Value =
        serde_json::from_slice(&arbor(dir.path(), &["approvals", &root, "--json"]).stdout).unwrap();
    let pending = &json["suspensions"][0]["pending"][0];
    assert_eq!(pending["tool"], "ask_human");
    assert_eq!(pending["arguments"]["choices"][1], "green");

    // Approving a question is not answering it; a word outside the choices is refused.
    let approve = arbor(dir.path(), &["approve", &root, &id[..12]]);
    let (_, err) = text(&approve);
    assert_eq!(approve.status.code(), Some(2), "{err}");
    assert!(err.contains("arbor answer"), "{err}");
    let red = arbor(dir.path(), &["answer", &root, &id[..12], "red"]);
    let (_, err) = text(&red);
    assert_eq!(red.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the answer must be one of the question's choices: \"blue\", \"green\""),
        "{err}"
    );
    // Answered once.
    let green = arbor(dir.path(), &["answer", &root, &id[..12], "green"]);
    let (out, err) = text(&green);
    assert_eq!(green.status.code(), Some(0), "{err}");
    assert!(out.contains("every call is decided"), "{out}");
    let again = arbor(dir.path(), &["answer", &root, &id, "blue"]);
    let (_, err) = text(&again);
    assert_eq!(again.status.code(), Some(2), "{err}");
    assert!(err.contains("already decided: allow_once"), "{err}");
    assert!(err.contains("(green)"), "{err}");

    // A later process resumes: the answer is the call's result.
    let resume = arbor(dir.path(), &["resume", &root, "--json"]);
    assert_eq!(resume.status.code(), Some(0), "{:?}", text(&resume));
    assert_eq!(
        answers_read(dir.path(), &root, "painter"),
        [("green".to_owned(), false)]
    );
}

#[test]
fn a_declined_question_reads_as_declined() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", QUESTION, "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4));
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let json: Value =
        serde_json::from_slice(&arbor(dir.path(), &["approvals", &root, "--json"]).stdout).unwrap();
    let id = json["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let reject = arbor(
        dir.path(),
        &["reject", &root, &id, "--reason", "ask the client"],
    );
    assert_eq!(reject.status.code(), Some(0), "{:?}", text(&reject));
    let resume = arbor(dir.path(), &["resume", &root]);
    assert_eq!(resume.status.code(), Some(0), "{:?}", text(&resume));
    assert_eq!(
        answers_read(dir.path(), &root, "painter"),
        [(
            "the person declined to answer: ask the client".to_owned(),
            true
        )]
    );
}

#[test]
fn an_answer_never_approves_a_call_waiting_for_approval() {
    let approvals = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", approvals, "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4));
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let json: Value =
        serde_json::from_slice(&arbor(dir.path(), &["approvals", &root, "--json"]).stdout).unwrap();
    let id = json["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = arbor(dir.path(), &["answer", &root, &id, "yes"]);
    let (_, err) = text(&out);
    assert_eq!(out.status.code(), Some(2), "{err}");
    assert!(
        err.contains("this is a call of \"echo\" waiting for approval: approve or reject it"),
        "{err}"
    );
    // Nothing was decided: it still waits.
    let json: Value =
        serde_json::from_slice(&arbor(dir.path(), &["approvals", &root, "--json"]).stdout).unwrap();
    assert_eq!(json["suspensions"][0]["pending"][0]["id"], Value::from(id));
}
