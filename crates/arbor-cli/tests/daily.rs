//! The CLI as people use it every day, through the binary on a temp store: sessions named by
//! a piece of their id or `@latest`, the short ids `ls` shows, the task on the command line,
//! approvals by prefix, a follow-up that does not wait.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Output, Stdio};

use serde_json::Value;

const REPLIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/replies.toml");
const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbor"));
    cmd.args(args)
        .current_dir(dir)
        .env("ARBOR_BUSY_TIMEOUT_MS", "2000")
        .env_remove("ARBOR_LOG");
    cmd
}

fn arbor(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

fn text(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn json(dir: &Path, args: &[&str]) -> Value {
    let out = arbor(dir, args);
    assert!(out.status.success(), "{args:?}: {}", text(&out).1);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn short(id: &str) -> &str {
    &id[id.len() - 8..]
}

#[test]
fn sessions_are_named_by_a_piece_of_their_id_or_latest() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    // Nothing stored yet: @latest says so.
    json(d, &["run", REPLIES, "--json", "-q"]);
    let first = json(d, &["ls", "--json"])["roots"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let second = json(d, &["run", REPLIES, "--json", "-q"])["root_session_id"]
        .as_str()
        .unwrap()
        .to_owned();

    // ls shows each root's short id: two runs of one spec are told apart.
    let (table, _) = text(&arbor(d, &["ls"]));
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("id        name  status"), "{table}");
    assert_eq!(lines.len(), 3, "{table}");
    assert!(lines[1].starts_with(short(&first)), "{table}");
    assert!(lines[2].starts_with(short(&second)), "{table}");
    assert!(lines[2].ends_with("replies.toml"), "{table}");

    // The short id, a prefix, @latest, - and no argument all name a session.
    for (args, want) in [
        (vec!["tree", short(&first), "--json"], &first),
        (vec!["tree", &second[..13], "--json"], &second),
        (vec!["tree", "@latest", "--json"], &second),
        (vec!["tree", "-", "--json"], &second),
        (vec!["tree", "--json"], &second),
    ] {
        let tree = json(d, &args);
        assert_eq!(tree["root_session_id"], want.as_str(), "{args:?}");
    }
    // The children table shows short ids too, and a child is named by one.
    let kids = json(d, &["ls", short(&first), "--json"]);
    let papers = kids["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "papers")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let (table, _) = text(&arbor(d, &["ls", short(&first)]));
    assert!(
        table.contains(&format!("{}  papers", short(&papers))),
        "{table}"
    );
    let log = arbor(d, &["log", short(&papers), "--json"]);
    assert!(log.status.success(), "{}", text(&log).1);
    let renamed = json(
        d,
        &[
            "rename",
            short(&first),
            short(&papers),
            "articles",
            "--json",
        ],
    );
    assert_eq!(renamed["session_id"], papers.as_str());

    // Both roots were made within a minute: their ids share the clock's digits, so a short
    // prefix matches both and is refused with the candidates listed.
    let shared = first
        .chars()
        .zip(second.chars())
        .take_while(|(a, b)| a == b)
        .count();
    assert!(shared >= 8, "{first} {second}");
    let out = arbor(d, &["tree", &first[..8]]);
    assert_eq!(out.status.code(), Some(2));
    let err = text(&out).1;
    assert!(
        err.starts_with(&format!(
            "error: session \"{}\" is ambiguous: it matches ",
            &first[..8]
        )),
        "{err}"
    );
    assert!(err.contains(&second) && err.contains(&first), "{err}");
    // Unknown, too short, or not an id at all: usage errors that say so.
    let out = arbor(d, &["tree", "ffffffff"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out).1.trim(),
        "error: unknown session \"ffffffff\": no session id starts or ends with it"
    );
    let out = arbor(d, &["tree", "abc"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("at least 4 of its hex digits"));
}

#[test]
fn latest_in_an_empty_store_says_there_is_no_run() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = arbor(d, &["tree"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out).1.contains("no store at"), "{}", text(&out).1);
    // A store that holds no run yet.
    drop(arbor_store_sqlite::SqliteStore::open(d.join("empty.db")).unwrap());
    for args in [
        &["tree", "--store", "empty.db"][..],
        &["approvals", "@latest", "--store", "empty.db"],
    ] {
        let out = arbor(d, args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
        assert_eq!(
            text(&out).1.trim(),
            "error: the store holds no run yet (start one: arbor run SPEC)"
        );
    }
}

#[test]
fn the_task_comes_from_the_command_line_or_standard_input() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("s.toml"),
        "[agents.root]\n[[agents.root.turns]]\ntext = \"done\"\n",
    )
    .unwrap();
    // No task anywhere: refused before anything is stored.
    let out = arbor(d, &["run", "s.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .contains("s.toml: no task: give one with --task TEXT"),
        "{}",
        text(&out).1
    );
    assert!(!d.join(".arbor").exists(), "a refused run stores nothing");
    let out = arbor(d, &["run", "s.toml", "--task", "  "]);
    assert_eq!(text(&out).1.trim(), "error: --task: the task is empty");

    let run = json(
        d,
        &[
            "run",
            "s.toml",
            "--task",
            "Summarise the diff",
            "--json",
            "-q",
        ],
    );
    assert_eq!(run["status"], "succeeded");
    let (lines, _) = text(&arbor(d, &["log"]));
    assert!(lines.contains("user: Summarise the diff"), "{lines}");

    let mut child = command(d, &["run", "s.toml", "--task", "-", "-q"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all("Review\nthe two files\n".as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out).1);
    let (lines, _) = text(&arbor(d, &["log"]));
    assert!(lines.contains("user: Review the two files"), "{lines}");
}

#[test]
fn approvals_are_decided_by_a_prefix_of_their_id() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = arbor(d, &["run", APPROVALS, "--no-input"]);
    assert_eq!(out.status.code(), Some(4), "{}", text(&out).1);
    // A suspension is not an error.
    let progress = text(&out).1;
    assert!(
        progress.contains("root: tool spawn_agent suspended, waiting for approval"),
        "{progress}"
    );
    assert!(!progress.contains(" error"), "{progress}");
    let waiting = json(d, &["approvals", "--json"]);
    let id = waiting["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(id.len(), 68);
    // Without its head, six digits name it.
    let out = arbor(d, &["approve", "@latest", &id[4..10]]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(
        text(&out).0.starts_with("every call is decided"),
        "{}",
        text(&out).0
    );
    let out = arbor(d, &["resume"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
}

fn papers_of(d: &Path, root: &str) -> String {
    json(d, &["ls", root, "--json"])["children"]
        .as_array()
        .unwrap()
        .iter()
        .find(|k| k["name"] == "papers")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn send_no_wait_returns_once_the_message_is_delivered() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let root = json(d, &["run", REPLIES, "--json", "-q"])["root_session_id"]
        .as_str()
        .unwrap()
        .to_owned();
    let out = arbor(
        d,
        &[
            "send",
            short(&root),
            "papers",
            "Which one first?",
            "--no-wait",
        ],
    );
    assert!(out.status.success(), "{}", text(&out).1);
    let (said, _) = text(&out);
    assert!(said.starts_with("queued msg_"), "{said}");
    assert!(
        said.contains(&format!("arbor tree {}", short(&root))),
        "{said}"
    );
    assert!(said.contains("for papers"), "{said}");
    // The follow-up ran on in the background: its reply reaches the root's transcript.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (log, _) = text(&arbor(d, &["log", &root]));
        if log.contains("Start with Wagner 1998") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "no reply: {log}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A message that looks like a flag, and a background process that logs a great deal
    // before it delivers (more than a pipe holds): neither gets in the way.
    // (Once the first background process is done: one process runs a tree at a time.)
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let out = loop {
        let out = command(
            d,
            &["send", &root, "papers", "--no-wait", "--", "-v please"],
        )
        .env("ARBOR_LOG", "trace")
        .output()
        .unwrap();
        if !text(&out).1.contains("is being run by process") {
            break out;
        }
        assert!(std::time::Instant::now() < deadline, "{}", text(&out).1);
        std::thread::sleep(std::time::Duration::from_millis(100));
    };
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(text(&out).0.starts_with("queued msg_"), "{}", text(&out).0);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (log, _) = text(&arbor(d, &["log", short(&papers_of(d, &root))]));
        if log.contains("-v please") {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "not delivered: {log}");
        std::thread::sleep(std::time::Duration::from_millis(100));
    }
    // A bad child is refused in the foreground, as without --no-wait.
    let out = arbor(d, &["send", &root, "nosuch", "x", "--no-wait"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out).1.trim(),
        "error: child \"nosuch\" of this session not found"
    );
}

#[test]
fn the_supervisors_limits_are_the_roots_default_and_a_stop_says_where_its_limit_is_set() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let turn = "[[agents.root.turns]]\ntext = \"done\"\nusage = { input_tokens = 30000, output_tokens = 10 }\n";
    std::fs::write(
        d.join("wide.toml"),
        format!(
            "task = \"x\"\n[supervisor]\nlimits = {{ max_tokens = 1000000 }}\n[agents.root]\n{turn}"
        ),
    )
    .unwrap();
    let run = json(d, &["run", "wide.toml", "--json", "-q"]);
    assert_eq!(run["status"], "succeeded", "{run}");

    // No limit anywhere: the built-in default stops it, and the report says so.
    std::fs::write(
        d.join("narrow.toml"),
        format!("task = \"x\"\n[agents.root]\n{turn}"),
    )
    .unwrap();
    let out = arbor(d, &["run", "narrow.toml"]);
    assert_eq!(out.status.code(), Some(1));
    let (report, progress) = text(&out);
    assert!(
        report.contains(
            "root stopped at its limit max_tokens = 20,000 (the built-in default; raise it with \
             agents.root.limits.max_tokens or [supervisor] limits.max_tokens)"
        ),
        "{report}"
    );
    assert!(
        progress.contains(
            "root: limit max_tokens exceeded (maximum 20,000, observed 30,010): the built-in default"
        ),
        "{progress}"
    );
    let run =
        serde_json::from_slice::<Value>(&arbor(d, &["run", "narrow.toml", "--json", "-q"]).stdout)
            .unwrap();
    assert_eq!(run["result"]["breach_origin"], "default");
    assert_eq!(
        run["result"]["breach_setting"],
        "agents.root.limits.max_tokens"
    );

    // The agent's own limit above the supervisor's: the supervisor's holds, and is named.
    std::fs::write(
        d.join("capped.toml"),
        format!(
            "task = \"x\"\n[supervisor]\nlimits = {{ max_tokens = 25000 }}\n[agents.root]\nlimits = {{ max_tokens = 900000 }}\n{turn}"
        ),
    )
    .unwrap();
    let run =
        serde_json::from_slice::<Value>(&arbor(d, &["run", "capped.toml", "--json", "-q"]).stdout)
            .unwrap();
    assert_eq!(run["status"], "failed");
    assert_eq!(run["result"]["breach"]["maximum"], 25000);
    assert_eq!(run["result"]["breach_origin"], "supervisor");
    assert_eq!(
        run["result"]["breach_setting"],
        "supervisor.limits.max_tokens"
    );
}

#[test]
fn init_writes_a_spec_that_validates_and_runs_offline() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let out = arbor(d, &["init"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let starter = std::fs::read_to_string(d.join("arbor.toml")).unwrap();
    assert!(
        starter.contains("[providers.main]"),
        "a real provider section"
    );
    assert!(
        starter.contains("[[agents.lead.turns]]"),
        "a scripted fallback"
    );
    // Never overwritten unless asked.
    std::fs::write(d.join("arbor.toml"), "mine").unwrap();
    let out = arbor(d, &["init"]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        text(&out).1.trim(),
        "error: arbor.toml exists: pass --force to overwrite it"
    );
    assert_eq!(
        std::fs::read_to_string(d.join("arbor.toml")).unwrap(),
        "mine"
    );
    assert!(arbor(d, &["init", "--force"]).status.success());

    let out = arbor(d, &["validate", "arbor.toml"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(
        text(&out)
            .0
            .starts_with("arbor.toml: ok: 2 agent(s), root lead")
    );
    assert!(!d.join(".arbor").exists(), "validate stores nothing");
    let checked = json(d, &["validate", "arbor.toml", "--json"]);
    let lead = &checked["agents"][0];
    assert_eq!(lead["name"], "lead");
    assert_eq!(
        lead["limits"]["max_tokens"],
        serde_json::json!({"value": 200000, "from": "supervisor"})
    );
    assert_eq!(
        lead["limits"]["max_steps"],
        serde_json::json!({"value": 8, "from": "default"})
    );

    let run = json(
        d,
        &["run", "arbor.toml", "--task", "What is it?", "--json", "-q"],
    );
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["sessions"].as_array().unwrap().len(), 2);
}

#[test]
fn validate_names_the_file_and_line_of_what_is_wrong() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::write(
        d.join("bad.toml"),
        "task = \"x\"\n\n[agents.root]\nchildren = [\"kid\"]\n[[agents.root.turns]]\n\n[agents.kid]\ntools = [\"rm\"]\n[[agents.kid.turns]]\n",
    )
    .unwrap();
    let out = arbor(d, &["validate", "bad.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .starts_with("error: bad.toml:7: agent \"kid\": unknown tool \"rm\""),
        "{}",
        text(&out).1
    );
    std::fs::write(
        d.join("bad.toml"),
        "task = \"x\"\n[agents.root]\nmodle = \"m\"\n",
    )
    .unwrap();
    let out = arbor(d, &["validate", "bad.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        text(&out)
            .1
            .starts_with("error: bad.toml:3: unknown field `modle`"),
        "{}",
        text(&out).1
    );
    std::fs::write(
        d.join("bad.toml"),
        "task = \"x\"\n[supervisor]\nlimits = { max_depth = 99 }\n[agents.root]\n[[agents.root.turns]]\n",
    )
    .unwrap();
    let out = arbor(d, &["validate", "bad.toml"]);
    assert!(
        text(&out)
            .1
            .starts_with("error: bad.toml:2: supervisor: max_depth must be"),
        "{}",
        text(&out).1
    );
}

#[test]
fn completions_and_the_man_page() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let (bash, _) = text(&arbor(d, &["completions", "bash"]));
    assert!(
        bash.contains("_arbor()") && bash.contains("complete -F _arbor"),
        "{bash}"
    );
    assert!(
        bash.contains("validate") && bash.contains("--no-wait"),
        "every command and flag"
    );
    let (zsh, _) = text(&arbor(d, &["completions", "zsh"]));
    assert!(zsh.starts_with("#compdef arbor"), "{zsh}");
    let out = arbor(d, &["completions", "tcsh"]);
    assert_eq!(out.status.code(), Some(2));
    let (man, _) = text(&arbor(d, &["man"]));
    assert!(man.contains(".TH arbor 1"), "{man}");
    assert!(
        man.contains("validate") && man.contains("completions"),
        "{man}"
    );
}
