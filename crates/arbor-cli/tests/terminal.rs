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
const QUESTION: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/question.toml");

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
        .unwrap()["id"]
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
fn a_childs_question_is_asked_on_the_terminal_and_its_answer_reaches_the_child() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", QUESTION], 100, &[]);
    term.wait_for("[1/1] painter asks: Which colour for the fence?", 1);
    term.wait_for("2. green", 1);
    term.wait_for("> ", 1);
    // Not a choice: asked again; then the second choice by its number.
    term.type_line("red");
    term.wait_for("the answer must be one of the question's choices", 1);
    term.type_line("2");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}\n{out}");
    let results = tool_results(dir.path(), "painter");
    assert_eq!(results.len(), 1, "{results:?}");
    assert_eq!(results[0]["message"]["content"], "green", "{results:?}");
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
fn a_skipped_call_under_json_prints_the_json_report() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", APPROVALS, "--json"], 100, &[]);
    term.wait_for("> ", 1);
    term.type_line("s");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(4), "{screen}\n{out}");
    let report: Value = serde_json::from_str(&out).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(report["status"], "suspended", "{report}");
    assert_eq!(report["suspension"]["pending"].as_array().unwrap().len(), 1);
}

#[test]
fn the_end_of_input_at_the_reason_decides_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", APPROVALS], 100, &[]);
    term.wait_for("> ", 1);
    term.type_line("j");
    term.wait_for("why (the model reads it", 1);
    term.type_raw(b"\x04");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(4), "{screen}\n{out}");
    let waiting: Value =
        serde_json::from_str(&arbor(dir.path(), &["approvals", "--json"])).unwrap();
    assert_eq!(
        waiting["suspensions"][0]["pending"]
            .as_array()
            .unwrap()
            .len(),
        1,
        "still undecided, not rejected: {waiting}"
    );
}

/// Approved, then the child thinks for 30 s: Ctrl-C cancels the resumed run as it would
/// any run (it ends aborted, the report is printed, exit 130), not the process at once.
#[test]
fn ctrl_c_after_an_inline_approval_cancels_the_run() {
    const SLOW: &str = r#"
task = "x"
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
tool_calls = [{ name = "echo", arguments = { text = "published" } }]
[[agents.publisher.turns]]
text = "published"
delay_ms = 30000
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("slow.toml"), SLOW).unwrap();
    let mut term = OnTerminal::start(dir.path(), &["run", "slow.toml"], 100, &[]);
    term.wait_for("> ", 1);
    term.type_line("o");
    term.wait_for("publisher", 2);
    std::thread::sleep(std::time::Duration::from_millis(500));
    term.interrupt();
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(130), "{screen}\n{out}");
    assert!(
        screen.contains("arbor: interrupted, cancelling the run"),
        "{screen}"
    );
    assert!(out.starts_with("session"), "the report: {out}");
    let roots: Value = serde_json::from_str(&arbor(dir.path(), &["ls", "--json"])).unwrap();
    assert_eq!(roots["roots"][0]["status"], "aborted", "{roots}");
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

/// A root that runs two children at once: one done at once, one that calls `echo`, then
/// thinks for 1.5 s.
const TWO_PACE: &str = r#"
task = "x"
[agents.root]
children = ["fast", "slow"]
tool_concurrency = 2
[[agents.root.turns]]
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "fast", name = "fast", input = "a" } },
  { name = "spawn_agent", arguments = { child_id = "slow", name = "slow", input = "b" } },
]
[[agents.root.turns]]
text = "done"
[agents.fast]
[[agents.fast.turns]]
text = "quick"
usage = { input_tokens = 10, output_tokens = 2 }
[agents.slow]
tools = ["echo"]
[[agents.slow.turns]]
tool_calls = [{ name = "echo", arguments = { text = "hi" } }]
usage = { input_tokens = 30, output_tokens = 4 }
[[agents.slow.turns]]
text = "slowly"
delay_ms = 1500
"#;

#[test]
fn a_live_tree_is_redrawn_in_place_while_the_run_goes() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("two.toml"), TWO_PACE).unwrap();
    let term = OnTerminal::start(dir.path(), &["run", "two.toml"], 120, &[]);
    // The slow child, live, with its last tool; the fast one collapsed as done.
    term.wait_for("  … 1 done (1 succeeded)", 1);
    term.wait_for("echo", 1);
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}");
    // A frame from while the slow child thinks (after its echo call).
    let frame = screen
        .split("\x1b[J")
        .find(|f| {
            f.contains("1 done (1 succeeded)")
                && f.lines()
                    .any(|l| l.contains("slow") && l.contains("running") && l.ends_with("echo"))
        })
        .unwrap_or_else(|| panic!("no frame with both children:\n{screen:?}"));
    let slow = frame.lines().find(|l| l.contains("slow")).unwrap();
    assert!(slow.starts_with("  slow"), "{slow:?}");
    assert!(slow.contains("\x1b[36mrunning"), "coloured: {slow:?}");
    assert!(
        slow.contains("own       34 | tree       34  echo"),
        "{slow:?}"
    );
    assert!(
        !frame.contains("fast  "),
        "a done child is collapsed: {frame:?}"
    );
    // Redrawn in place (cursor up, clear), not scrolled as lines; erased at the end.
    assert!(
        screen.contains("\x1b[J") && screen.contains("F\x1b[J"),
        "{screen:?}"
    );
    assert!(!screen.contains("delegation started"), "{screen:?}");
    assert!(
        screen.trim_end().ends_with("\x1b[J"),
        "the view is erased: {screen:?}"
    );
    // The report is on stdout, as always.
    assert!(out.starts_with("session"), "{out}");
}

#[test]
fn no_color_and_progress_lines_are_honoured() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("two.toml"), TWO_PACE).unwrap();
    let term = OnTerminal::start(dir.path(), &["run", "two.toml"], 120, &[("NO_COLOR", "1")]);
    let (code, _, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}");
    assert!(screen.contains("slow"), "{screen:?}");
    for sgr in ["\x1b[0m", "\x1b[36m", "\x1b[32m"] {
        assert!(!screen.contains(sgr), "no colour: {screen:?}");
    }
    assert!(screen.contains("\x1b[J"), "still live: {screen:?}");

    let term = OnTerminal::start(
        dir.path(),
        &["run", "two.toml", "--progress", "lines"],
        120,
        &[],
    );
    let (code, _, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}");
    assert!(
        screen.contains("  slow: delegation started (depth 1)"),
        "{screen:?}"
    );
    assert!(!screen.contains("\x1b[J"), "{screen:?}");
}

/// The README's quick start, command by command: run with a task (the live tree), approve
/// inline, inspect the tree by a piece of its id, follow up.
#[test]
fn the_quick_start_works_as_the_readme_shows_it() {
    const QUICKSTART: &str = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/quickstart.toml"
    );
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let mut term = OnTerminal::start(
        d,
        &["run", QUICKSTART, "--task", "What changed in 1.3?"],
        100,
        &[],
    );
    term.wait_for(
        "[1/1] researcher: echo {\"text\":\"CHANGELOG.md, section 1.3\"}",
        1,
    );
    term.wait_for("> ", 1);
    term.type_line("o");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}\n{out}");
    assert!(screen.contains("lead  "), "the live tree: {screen}");
    // The report's short ids name the sessions.
    let lead = out.lines().find(|l| l.starts_with("lead ")).unwrap();
    let short = lead.split_whitespace().last().unwrap();
    let tree = arbor(d, &["tree", &short[4..]]);
    assert!(
        tree.contains("  researcher  lead        1  succeeded"),
        "{tree}"
    );
    let log = arbor(d, &["log", "@latest"]);
    assert!(log.contains("user: What changed in 1.3?"), "{log}");
    let answer = arbor(d, &["send", "@latest", "researcher", "And what broke?"]);
    assert_eq!(
        answer.trim(),
        "researcher: 1.3: inline approvals, a live tree view; nothing removed."
    );
}

#[test]
fn resume_on_a_terminal_asks_about_what_still_waits() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["run", APPROVALS, "--no-input", "-q"])
        .current_dir(d)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(4));
    let mut term = OnTerminal::start(d, &["resume"], 100, &[]);
    term.wait_for("[1/1] publisher: echo", 1);
    term.wait_for("> ", 1);
    term.type_line("o");
    let (code, out, screen) = term.finish();
    assert_eq!(code, Some(0), "{screen}\n{out}");
    assert_eq!(tool_results(d, "publisher").len(), 1);
}
