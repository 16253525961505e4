//! Standing decisions from a spec (issue 39, item 8): `[supervisor] standing` lets a call
//! that would wait for a decision run at once, written down as decided by `standing`; an
//! agent's own `standing` narrows what it inherits, never widens it.
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

/// The approvals example with `extra` added to its `[supervisor]` table and `agent` to its
/// publisher's.
fn spec(dir: &Path, extra: &str, agent: &str) -> String {
    let text = std::fs::read_to_string(APPROVALS)
        .unwrap()
        .replace(
            "[supervisor]\napprovals = true",
            &format!("[supervisor]\napprovals = true\n{extra}"),
        )
        .replace(
            "tools = [\"echo\"]",
            &format!("tools = [\"echo\"]\n{agent}"),
        );
    let path = dir.join("s.toml");
    std::fs::write(&path, text).unwrap();
    path.to_str().unwrap().to_owned()
}

const ALLOW_PUBLISHING: &str =
    r#"standing = { allow = [{ tool = "echo", arguments = { text = "published *" } }] }"#;

#[test]
fn a_standing_allow_in_the_spec_runs_the_call_without_asking() {
    let dir = tempfile::tempdir().unwrap();
    let path = spec(dir.path(), ALLOW_PUBLISHING, "");
    let out = arbor(dir.path(), &["run", &path, "--json", "-q"]);
    assert_eq!(
        out.status.code(),
        Some(0),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap();
    let tree: Value =
        serde_json::from_slice(&arbor(dir.path(), &["tree", root, "--json"]).stdout).unwrap();
    let publisher = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "publisher")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let log = arbor(dir.path(), &["log", &publisher, "--json"]);
    let decisions: Vec<Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "decision")
        .collect();
    assert_eq!(decisions.len(), 1, "{decisions:?}");
    assert_eq!(decisions[0]["by"], "standing");
    assert_eq!(decisions[0]["verdict"], "allow_once");
    assert!(
        decisions[0]["reason"]
            .as_str()
            .unwrap()
            .starts_with("standing decision: allow echo"),
        "{decisions:?}"
    );
}

#[test]
fn an_agents_own_standing_narrows_what_it_inherits() {
    let dir = tempfile::tempdir().unwrap();
    let path = spec(
        dir.path(),
        ALLOW_PUBLISHING,
        r#"standing = { allow = [{ tool = "read_*" }] }"#,
    );
    let out = arbor(dir.path(), &["run", &path, "--json", "-q"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "it waits: the publisher's entry narrowed the allow"
    );
    // A malformed rule is refused when the spec is read, naming it.
    let path = spec(
        dir.path(),
        r#"standing = { allow = [{ tol = "echo" }] }"#,
        "",
    );
    let out = arbor(dir.path(), &["run", &path, "-q"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("tol"), "{err}");
}
