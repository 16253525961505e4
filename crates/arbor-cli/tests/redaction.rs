//! `[redaction]`: secrets named by environment variable, and patterns, never reach the store
//! files, stdout or stderr; bad configuration is refused naming the field.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

const SECRET: &str = "supersecret-XYZ1";
const KEY: &str = "sk-abcdefgh1234";

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env("ARBOR_TEST_SECRET", SECRET)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

fn spec(redaction: &str) -> String {
    format!(
        r#"
task = "review the deploy"
root = "root"
{redaction}

[agents.root]
children = ["helper"]
tools = ["echo"]
[[agents.root.turns]]
tool_calls = [
  {{ name = "echo", arguments = {{ text = "token {SECRET} and {KEY}" }} }},
  {{ name = "spawn_agent", arguments = {{ child_id = "helper", input = "use {SECRET}" }} }},
]
[[agents.root.turns]]
text = "done with {KEY}"

[agents.helper]
[[agents.helper.turns]]
text = "I saw {SECRET}"
"#
    )
}

fn files_under(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files_under(&path, out);
        } else {
            out.push(path);
        }
    }
}

#[test]
fn secrets_never_reach_the_store_or_the_output() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("s.toml"),
        spec("[redaction]\nenv = [\"ARBOR_TEST_SECRET\"]\npatterns = ['sk-[a-z0-9]{8,}']"),
    )
    .unwrap();
    let run = arbor(dir.path(), &["run", "s.toml", "--json"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let log = arbor(dir.path(), &["log", &root, "--json"]);
    let tree = arbor(dir.path(), &["tree", &root, "--json"]);
    let mut seen: Vec<(String, Vec<u8>)> = vec![
        ("run stdout".into(), run.stdout.clone()),
        ("run stderr".into(), run.stderr.clone()),
        ("log".into(), log.stdout.clone()),
        ("tree".into(), tree.stdout.clone()),
    ];
    let mut files = Vec::new();
    files_under(&dir.path().join(".arbor"), &mut files);
    assert!(!files.is_empty());
    for f in files {
        seen.push((f.display().to_string(), std::fs::read(&f).unwrap()));
    }
    for (what, bytes) in &seen {
        for secret in [SECRET, KEY] {
            assert!(
                !bytes.windows(secret.len()).any(|w| w == secret.as_bytes()),
                "{secret} found in {what}"
            );
        }
    }
    let log = String::from_utf8_lossy(&log.stdout);
    assert!(log.contains("token [REDACTED] and [REDACTED]"), "{log}");
}

#[test]
fn bad_redaction_settings_are_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    for (section, expected) in [
        (
            "[redaction]\npatterns = ['(']",
            "redaction.patterns: redaction pattern \"(\" is invalid",
        ),
        ("[redaction]\nenvs = [\"X\"]", "unknown field `envs`"),
    ] {
        std::fs::write(dir.path().join("s.toml"), spec(section)).unwrap();
        let out = arbor(dir.path(), &["run", "s.toml"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{section}: {stderr}");
        assert!(stderr.contains(expected), "{section}: {stderr}");
    }
    assert!(
        !dir.path().join(".arbor").exists(),
        "refused before any store"
    );
}
