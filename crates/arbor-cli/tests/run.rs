//! More of `arbor run`, as a user runs it: the tools example, the definition kept in the
//! store, Ctrl-C, a closed stdout, and usage errors.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Command, Output, Stdio};

use arbor_store::{SessionQuery, SessionRecord, Store};
use arbor_store_sqlite::SqliteStore;
use sha2::{Digest, Sha256};

const REVIEW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml");
const TOOLS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/tools.toml");

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbor"));
    cmd.args(args)
        .current_dir(dir)
        .env("ARBOR_BUSY_TIMEOUT_MS", "200")
        .env_remove("ARBOR_LOG");
    cmd
}

fn arbor(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn roots(db: &Path) -> Vec<SessionRecord> {
    let store = SqliteStore::open(db).unwrap();
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(store.list_sessions(SessionQuery::Roots))
        .unwrap()
}

#[test]
fn the_tools_example_runs_echo_and_sleep_over_three_turns() {
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["run", TOOLS, "--json", "--memory"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["store"], "memory");
    assert_eq!(report["result"]["turns"], 3);
    assert_eq!(report["result"]["tool_calls"], 3);
    assert_eq!(report["result"]["breach"], serde_json::Value::Null);
    assert_eq!(report["result"]["error"], serde_json::Value::Null);
    let helper = &report["sessions"][0];
    assert_eq!(helper["name"], "helper");
    assert_eq!(helper["usage"]["own"]["total_tokens"], 4_630);
    assert_eq!(helper["context_tokens"], 1_800);
    let err = stderr(&out);
    for line in [
        "helper: run started (agent helper, model scripted, store memory, session ",
        "helper: turn 2: 1,560 tokens (input 1,500, output 60), 2 tool calls",
        "helper: tool sleep started",
        "helper: tool sleep finished (11 bytes)",
        "helper: tool echo finished (21 bytes)",
        "helper: run succeeded (completed): 3 turns, 4,630 tokens, ",
    ] {
        assert!(err.contains(line), "missing {line:?} in:\n{err}");
    }
    assert!(!err.contains("message_delta"), "{err}");
}

#[test]
fn the_root_record_keeps_the_definition_and_earlier_runs_stay_listed() {
    let dir = tempfile::tempdir().unwrap();
    let first = arbor(dir.path(), &["run", REVIEW, "--json", "-q"]);
    assert!(first.status.success(), "{}", stderr(&first));
    let second = arbor(dir.path(), &["run", REVIEW, "-q"]);
    assert!(second.status.success(), "{}", stderr(&second));
    let first: serde_json::Value = serde_json::from_str(&stdout(&first)).unwrap();

    let roots = roots(&dir.path().join(".arbor/arbor.db"));
    assert_eq!(roots.len(), 2);
    let root = &roots[0];
    assert_eq!(
        root.id.to_string(),
        first["root_session_id"].as_str().unwrap()
    );
    let text = std::fs::read_to_string(REVIEW).unwrap();
    let fingerprint: String = Sha256::digest(text.as_bytes())
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect();
    assert_eq!(
        root.meta["definition"],
        serde_json::json!({"path": REVIEW, "spec": text, "fingerprint": fingerprint})
    );
    assert!(
        root.meta["owner"]["pid"].as_u64().is_some(),
        "{}",
        root.meta
    );
    assert_eq!(root.own_usage.total_tokens, 40_000);
}

#[test]
fn a_bad_spec_leaves_an_existing_store_untouched() {
    let dir = tempfile::tempdir().unwrap();
    assert!(arbor(dir.path(), &["run", REVIEW, "-q"]).status.success());
    let db = dir.path().join(".arbor/arbor.db");
    let before = roots(&db);
    std::fs::write(
        dir.path().join("kid.toml"),
        "task = \"x\"\n[agents.root]\nchildren = [\"kid\"]\n[[agents.root.turns]]\n\
         [agents.kid]\ntool_concurrency = 0\n[[agents.kid.turns]]\n",
    )
    .unwrap();
    let out = arbor(dir.path(), &["run", "kid.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: kid.toml:5: agent \"kid\": tool_concurrency"),
        "{err}"
    );
    assert_eq!(roots(&db), before);
}

#[test]
fn usage_errors_exit_2_with_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["run", "missing.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: cannot read missing.toml: No such file or directory\n"
    );

    let out = command(dir.path(), &["run", REVIEW])
        .env("ARBOR_BUSY_TIMEOUT_MS", "soon")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: ARBOR_BUSY_TIMEOUT_MS must be a number of milliseconds, not \"soon\"\n"
    );

    let out = arbor(dir.path(), &["run", REVIEW, "--memory", "--store", "x.db"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(!dir.path().join(".arbor").exists());
    assert!(!dir.path().join("x.db").exists());

    let help = arbor(dir.path(), &["run", "--help"]);
    let help = stdout(&help);
    assert!(help.contains("Exit codes:"), "{help}");
    assert!(help.contains("ARBOR_BUSY_TIMEOUT_MS"), "{help}");
}

#[test]
fn a_store_that_cannot_be_opened_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["run", REVIEW, "--store", "no/such/dir/a.db"]);
    assert_eq!(out.status.code(), Some(3));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: store no/such/dir/a.db cannot be used"),
        "{err}"
    );
}

#[test]
fn a_closed_stdout_is_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let mut child = command(dir.path(), &["run", REVIEW, "--memory", "--json", "-q"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Nobody reads the report: the write fails with a broken pipe.
    drop(child.stdout.take());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert!(!stderr(&out).contains("panicked"), "{}", stderr(&out));
}

#[cfg(unix)]
#[test]
fn ctrl_c_cancels_the_run_which_ends_aborted() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("slow.toml"),
        "task = \"wait\"\n[agents.root]\ntools = [\"sleep\"]\n\
         [[agents.root.turns]]\ntool_calls = [{ name = \"sleep\", arguments = { ms = 60000 } }]\n\
         [[agents.root.turns]]\ntext = \"woke up\"\n",
    )
    .unwrap();
    let mut child = command(dir.path(), &["run", "slow.toml", "--json", "--memory"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let started = line.contains("root: tool sleep started");
        seen.push(line);
        if started {
            break;
        }
    }
    assert!(
        seen.iter().any(|l| l.contains("tool sleep started")),
        "{seen:#?}"
    );
    let killed = Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let out = child.wait_with_output().unwrap();
    // 128 + SIGINT, as shells report it.
    assert_eq!(out.status.code(), Some(130), "{rest:#?}");
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["status"], "aborted");
    assert_eq!(report["result"]["stop_reason"], "cancelled");
    assert_eq!(report["sessions"][0]["status"], "aborted");
    assert!(
        rest.iter()
            .any(|l| l.starts_with("root: run aborted (cancelled): 1 turn")),
        "{rest:#?}"
    );
}

/// A root and a child whose answer the provider cut off at its output cap.
const CUT_OFF: &str = r#"
task = "Summarise."
root = "root"

[agents.root]
children = ["writer"]

[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "writer", name = "writer", input = "Write it." } }]

[[agents.root.turns]]
text = "Here is the summary, cut"
truncated = true

[agents.writer]

[[agents.writer.turns]]
text = "Half of an ans"
truncated = true
"#;

#[test]
fn a_cut_off_answer_is_reported_truncated_everywhere_and_the_log_links_calls_to_children() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("cut.toml"), CUT_OFF).unwrap();
    let run = arbor(dir.path(), &["run", "cut.toml", "--json", "-q"]);
    assert_eq!(run.status.code(), Some(0), "{}", stderr(&run));
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(
        (&report["status"], &report["result"]["stop_reason"]),
        (
            &serde_json::json!("succeeded"),
            &serde_json::json!("completed_truncated")
        ),
        "{report}"
    );
    let writer = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "writer")
        .unwrap()
        .clone();
    let root = report["root_session_id"].as_str().unwrap();
    // The child's session names the call that made it.
    assert_eq!(writer["spawned_by"]["session"], root, "{writer}");
    assert_eq!(writer["spawned_by"]["turn"], 1);
    assert_eq!(writer["spawned_by"]["call_id"], "call_1_1");
    // The lines progress prints say so too.
    let lines = arbor(dir.path(), &["run", "cut.toml", "--progress", "lines"]);
    assert!(
        stderr(&lines).contains("run succeeded (completed_truncated)"),
        "{}",
        stderr(&lines)
    );
    // The log marks the cut turn, names the call and its arguments, the child it made, and
    // each result's status; the parent model read that the child's answer was cut.
    let log = stdout(&arbor(dir.path(), &["log", root]));
    let short = &writer["id"].as_str().unwrap()[writer["id"].as_str().unwrap().len() - 8..];
    assert!(
        log.contains(&format!(
            r#"assistant: → spawn_agent {{"child_id":"writer","input":"Write it.","name":"writer"}} ⇒ child {short}"#
        )),
        "{log}"
    );
    assert!(log.contains("message  tool spawn_agent ok: "), "{log}");
    let raw = stdout(&arbor(dir.path(), &["log", root, "--json"]));
    assert!(raw.contains(r#"\"truncated\":true"#), "{raw}");
    assert!(
        log.contains(
            "truncated  turn 2: the provider cut the answer off at its output cap (length)"
        ),
        "{log}"
    );
    let child_log = stdout(&arbor(dir.path(), &["log", writer["id"].as_str().unwrap()]));
    assert!(
        child_log.contains("run succeeded (completed_truncated)"),
        "{child_log}"
    );

    // An agent that fails on truncation fails, naming the cut.
    let strict = CUT_OFF.replace(
        "[agents.writer]",
        "[agents.writer]\nfail_on_truncation = true",
    );
    std::fs::write(dir.path().join("strict.toml"), strict).unwrap();
    let run = arbor(dir.path(), &["run", "strict.toml", "--json", "-q"]);
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let writer = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "writer")
        .unwrap();
    assert_eq!(writer["status"], "failed", "{report}");
}
