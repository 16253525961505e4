//! The registry commands on the SQLite store after the run has exited: `ls`, `tree`, `log`,
//! `send` (a follow-up to a retained child) and `rm` (a tombstone); and a crash: SIGKILL in
//! the middle of a tree, then a new process finds everything that was reported as stored.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const REPLIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/replies.toml");
const REVIEW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml");

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

fn json(dir: &Path, args: &[&str]) -> Value {
    let out = arbor(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn child<'a>(rows: &'a Value, name: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {rows}"))
}

#[test]
fn ls_send_and_rm_work_on_the_store_after_the_run_exited() {
    let dir = tempfile::tempdir().unwrap();
    let run = json(dir.path(), &["run", REPLIES, "--json", "-q"]);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    assert_eq!(run["status"], "succeeded");
    assert_eq!(run["silent_children"], 1);

    let roots = json(dir.path(), &["ls", "--json"]);
    assert_eq!(roots["roots"][0]["id"], root.as_str());
    let kids = json(dir.path(), &["ls", &root, "--json"]);
    let rows = &kids["children"];
    assert_eq!(rows.as_array().unwrap().len(), 2);
    let papers = child(rows, "papers");
    assert_eq!(
        (papers["replies"].as_u64(), papers["silent"].as_bool()),
        (Some(1), Some(false))
    );
    assert_eq!(papers["mode"], "message");
    assert_eq!(
        (&papers["status"], &papers["model"], &papers["child_id"]),
        (
            &Value::from("succeeded"),
            &Value::from("scripted"),
            &Value::from("researcher")
        )
    );
    assert_eq!(papers["usage"]["own"]["total_tokens"], 98);
    assert_eq!(papers["usage"]["aggregate"]["total_tokens"], 98);
    assert_eq!(papers["context_tokens"], 57);
    // The table shows the same figures, and marks the silent child.
    let table = arbor(dir.path(), &["ls", &root]);
    let table = String::from_utf8_lossy(&table.stdout);
    assert!(table.starts_with("id        name    status              model     mode     own  aggregate  context  replies"), "{table}");
    assert!(
        table.contains("quiet   succeeded (silent)  scripted  message   10         10"),
        "{table}"
    );
    let quiet = child(rows, "quiet");
    assert_eq!(
        quiet["silent"], true,
        "a child that never replied is a silent no-op"
    );
    let quiet_id = quiet["id"].as_str().unwrap().to_owned();

    // The root read the reply and the notice.
    let out = arbor(dir.path(), &["log", &root]);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("user: [from child:papers] Found 3 papers"),
        "{log}"
    );
    assert!(log.contains("completed without sending a reply"), "{log}");

    let tree = json(dir.path(), &["tree", &root, "--json"]);
    assert_eq!(tree["silent_children"], 1);
    assert_eq!(tree["reconciliation"]["consistent"], true);

    // A follow-up in a new process: the retained child runs a new turn and replies.
    let sent = json(
        dir.path(),
        &["send", &root, "papers", "Which one first?", "--json"],
    );
    assert_eq!(
        sent["replies"],
        serde_json::json!([
            "Start with Wagner 1998: it defines the incremental model the others build on."
        ])
    );
    assert_eq!(sent["child"]["replies"], 2);
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");

    // Deletion: a tombstone, gone from listings, transcript kept, twice is harmless.
    let rm = json(
        dir.path(),
        &["rm", &root, "quiet", "--reason", "not useful", "--json"],
    );
    assert_eq!(rm["already_deleted"], false);
    assert_eq!(rm["tombstone"]["reason"], "not useful");
    assert_eq!(rm["tombstone"]["final_status"], "succeeded");
    assert!(rm["tombstone"]["by"].as_str().unwrap().starts_with("user:"));
    let kids = json(dir.path(), &["ls", &root, "--json"]);
    assert_eq!(kids["children"].as_array().unwrap().len(), 1);
    let all = json(dir.path(), &["ls", &root, "--deleted", "--json"]);
    assert_eq!(all["children"].as_array().unwrap().len(), 2);
    let out = arbor(dir.path(), &["log", &quiet_id]);
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("I skimmed the survey"));
    let again = json(dir.path(), &["rm", &root, &quiet_id, "--json"]);
    assert_eq!(again["already_deleted"], true);
    let by_name = json(dir.path(), &["rm", &root, "quiet", "--json"]);
    assert_eq!(
        by_name["already_deleted"], true,
        "deleting by name twice is harmless"
    );
    assert_eq!(by_name["tombstone"]["reason"], "not useful");
    // A deleted child and one that never existed get the same answer.
    let gone = arbor(dir.path(), &["send", &root, "quiet", "hello?"]);
    assert_eq!(gone.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&gone.stderr).trim(),
        "error: child \"quiet\" of this session not found"
    );
    let never = arbor(dir.path(), &["send", &root, "nosuch", "hello?"]);
    assert_eq!(
        String::from_utf8_lossy(&never.stderr).trim(),
        "error: child \"nosuch\" of this session not found"
    );
}

#[test]
fn unknown_sessions_and_missing_stores_are_usage_errors() {
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["ls"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no store at .arbor/arbor.db"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!dir.path().join(".arbor").exists(), "ls creates nothing");
    json(dir.path(), &["run", REPLIES, "--json", "-q"]);
    for args in [
        &["ls", "not-an-id"][..],
        &["tree", "01a238cb-95d9-72a4-8e8c-0c40399ceaa8"],
        &["send", "01a238cb-95d9-72a4-8e8c-0c40399ceaa8", "x", "y"],
    ] {
        let out = arbor(dir.path(), args);
        assert_eq!(out.status.code(), Some(2), "{args:?}");
    }
}

/// A tree whose root spawns two fast message-mode children, then a sync child that sleeps
/// for ten minutes.
const CRASH_SPEC: &str = r#"
task = "review"
root = "root"

[agents.root]
children = ["fast-a", "fast-b", "slow"]
[[agents.root.turns]]
usage = { input_tokens = 100, output_tokens = 0 }
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "fast-a", name = "fast-a", input = "a", mode = "message" } },
  { name = "spawn_agent", arguments = { child_id = "fast-b", name = "fast-b", input = "b", mode = "message" } },
]
[[agents.root.turns]]
usage = { input_tokens = 200, output_tokens = 0 }
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "slow", name = "slow", input = "take your time" } }]
[[agents.root.turns]]
text = "never reached"

[agents.fast-a]
[[agents.fast-a.turns]]
usage = { input_tokens = 1000, output_tokens = 0 }
tool_calls = [{ name = "send_message", arguments = { to = "parent", text = "a is done" } }]
[[agents.fast-a.turns]]
text = "done"
usage = { input_tokens = 10, output_tokens = 0 }

[agents.fast-b]
[[agents.fast-b.turns]]
usage = { input_tokens = 2000, output_tokens = 0 }
tool_calls = [{ name = "send_message", arguments = { to = "parent", text = "b is done" } }]
[[agents.fast-b.turns]]
text = "done"
usage = { input_tokens = 20, output_tokens = 0 }

[agents.slow]
tools = ["sleep"]
[[agents.slow.turns]]
usage = { input_tokens = 500, output_tokens = 0 }
tool_calls = [{ name = "sleep", arguments = { ms = 600000 } }]
[[agents.slow.turns]]
text = "slow, after the crash"
"#;

#[cfg(unix)]
#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_sigkill_mid_tree_loses_nothing_that_was_reported_as_stored() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("crash.toml"), CRASH_SPEC).unwrap();
    let mut process = command(dir.path(), &["run", "crash.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut reported = Vec::new();
    let (mut a, mut b, mut slow) = (false, false, false);
    for line in BufReader::new(process.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        a |= line.contains("fast-a: delegation succeeded");
        b |= line.contains("fast-b: delegation succeeded");
        slow |= line.contains("slow: delegation started");
        reported.push(line);
        if a && b && slow {
            break;
        }
    }
    assert!(a && b && slow, "{reported:#?}");
    // Wait (reading the store from another process, which must not disturb the live run)
    // until the slow child's first turn is stored, then kill without warning.
    let started = std::time::Instant::now();
    loop {
        let roots = json(dir.path(), &["ls", "--json"]);
        let root = roots["roots"][0]["id"].as_str().unwrap().to_owned();
        assert_eq!(
            roots["roots"][0]["status"], "running",
            "a live owner's run is left alone"
        );
        let tree = json(dir.path(), &["tree", &root, "--json"]);
        let stored = tree["sessions"]
            .as_array()
            .unwrap()
            .iter()
            .any(|r| r["name"] == "slow" && r["usage"]["own"]["total_tokens"] == 500);
        if stored {
            break;
        }
        assert!(started.elapsed().as_secs() < 20, "{tree}");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let killed = Command::new("kill")
        .args(["-KILL", &process.id().to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let status = process.wait().unwrap();
    assert!(!status.success());

    // A new process: the full registry, both totals, the interrupted runs.
    let roots = json(dir.path(), &["ls", "--json"]);
    let root = roots["roots"][0]["id"].as_str().unwrap().to_owned();
    assert_eq!(
        roots["roots"][0]["status"], "interrupted",
        "the root was mid-turn"
    );
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    let rows = &tree["sessions"];
    assert_eq!(rows.as_array().unwrap().len(), 4, "{tree}");
    let fast_a = child(rows, "fast-a");
    assert_eq!(fast_a["status"], "succeeded");
    assert_eq!(fast_a["usage"]["own"]["total_tokens"], 1010);
    assert_eq!(child(rows, "fast-b")["usage"]["own"]["total_tokens"], 2020);
    let slow = child(rows, "slow");
    assert_eq!(slow["status"], "interrupted");
    assert_eq!(slow["usage"]["own"]["total_tokens"], 500);
    let root_row = child(rows, "root");
    assert_eq!(root_row["usage"]["own"]["total_tokens"], 300);
    assert_eq!(
        root_row["usage"]["aggregate"]["total_tokens"],
        300 + 1010 + 2020 + 500
    );
    assert_eq!(root_row["context_tokens"], 200);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");

    // The transcripts: the root's attribution records and the replies it never read.
    let out = arbor(dir.path(), &["log", &root, "--json"]);
    let entries: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let attributed: u64 = entries
        .iter()
        .filter(|e| e["kind"] == "usage_attributed")
        .map(|e| e["child_usage"]["total_tokens"].as_u64().unwrap())
        .sum();
    assert_eq!(attributed, 1010 + 2020 + 500);
    let replies: Vec<&str> = entries
        .iter()
        .filter(|e| e["kind"] == "inbox_received")
        .map(|e| e["message"]["text"].as_str().unwrap())
        .collect();
    let mut sorted = replies.clone();
    sorted.sort_unstable();
    assert_eq!(sorted, ["a is done", "b is done"]);
    let slow_id = slow["id"].as_str().unwrap();
    let out = arbor(dir.path(), &["log", slow_id, "--json"]);
    let slow_log = String::from_utf8_lossy(&out.stdout);
    assert!(slow_log.contains("\"name\":\"sleep\""), "{slow_log}");
    // Marked once: a second look changes nothing.
    let again = json(dir.path(), &["tree", &root, "--json"]);
    assert_eq!(again["sessions"], tree["sessions"]);

    // The crashed tree goes on: the root continues from its transcript; its call to the
    // sync child that was in flight rejoins the child, which goes on here (its own call in
    // flight reported interrupted, never run again) and answers; the root reads the replies
    // it never read, and ends.
    let out = arbor(dir.path(), &["resume", &root, "--json"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(
        stderr.contains("went on with its caller: succeeded"),
        "the sync child went on with its caller: {stderr}"
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(report["status"], "succeeded", "{report}");
    assert_eq!(report["reconciliation"]["consistent"], true, "{report}");
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    let rows = &tree["sessions"];
    assert_eq!(child(rows, "root")["status"], "succeeded");
    assert_eq!(child(rows, "slow")["status"], "succeeded");
    let out = arbor(dir.path(), &["log", &root, "--json"]);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("slow, after the crash"),
        "the call read its answer: {log}"
    );
    let out = arbor(dir.path(), &["log", slow_id, "--json"]);
    let slow_log = String::from_utf8_lossy(&out.stdout);
    assert!(
        slow_log.contains("interrupted: this call was in flight"),
        "{slow_log}"
    );
    assert!(
        log.contains("never reached"),
        "the root's next turn ran: {log}"
    );
    // Nothing is left to resume.
    let out = arbor(dir.path(), &["resume", &root]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("nothing to resume"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

#[cfg(unix)]
#[test]
fn another_process_refuses_to_act_on_a_tree_a_live_process_runs() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("crash.toml"), CRASH_SPEC).unwrap();
    let mut process = command(dir.path(), &["run", "crash.toml"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    for line in BufReader::new(process.stderr.take().unwrap()).lines() {
        if line.unwrap().contains("slow: delegation started") {
            break;
        }
    }
    let roots = json(dir.path(), &["ls", "--json"]);
    let root = roots["roots"][0]["id"].as_str().unwrap().to_owned();
    let pid = process.id().to_string();
    for args in [
        vec!["send", root.as_str(), "fast-a", "more please"],
        vec!["rm", root.as_str(), "slow"],
        vec!["resume", root.as_str()],
    ] {
        let out = arbor(dir.path(), &args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(
            stderr.contains(&format!("is being run by process {pid} on ")),
            "{args:?}: {stderr}"
        );
    }
    // Nothing changed: the slow child is still live and not deleted.
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    let slow = child(&tree["sessions"], "slow");
    assert_eq!(slow["status"], "running", "{tree}");
    let _ = Command::new("kill").args(["-KILL", &pid]).status();
    let _ = process.wait();
}

/// Across hosts, the owner's liveness is its lease: renewed by heartbeat, it keeps another
/// host's process off the tree past its term; stalled (SIGSTOP) past it, the tree can be
/// taken over, and the stalled owner, once it wakes, stops instead of going on beside the
/// new one.
#[test]
fn an_owner_on_another_host_holds_the_tree_by_its_lease_and_stops_once_it_lost_it() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    use std::time::Duration;

    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("crash.toml"), CRASH_SPEC).unwrap();
    let mut process = command(dir.path(), &["run", "crash.toml"])
        .env("ARBOR_HOST", "host-a")
        .env("ARBOR_OWNER_LEASE_MS", "900")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(process.stderr.take().unwrap()).lines();
    for line in lines.by_ref() {
        if line.unwrap().contains("slow: delegation started") {
            break;
        }
    }
    let pid = process.id().to_string();
    let from_b = |args: &[&str]| {
        command(dir.path(), args)
            .env("ARBOR_HOST", "host-b")
            .output()
            .unwrap()
    };
    let roots = json(dir.path(), &["ls", "--json"]);
    let root = roots["roots"][0]["id"].as_str().unwrap().to_owned();
    // Three terms later the owner still holds the tree: it renewed its lease.
    std::thread::sleep(Duration::from_millis(2_700));
    let out = from_b(&["rm", &root, "slow"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains(&format!("is being run by process {pid} on host-a")),
        "{stderr}"
    );

    // Stalled past its term, it has lost the tree: host-b's process takes it over.
    assert!(
        Command::new("kill")
            .args(["-STOP", &pid])
            .status()
            .unwrap()
            .success()
    );
    std::thread::sleep(Duration::from_millis(1_500));
    let out = from_b(&["rm", &root, "slow"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    let _ = Command::new("kill").args(["-CONT", &pid]).status();
    assert_eq!(out.status.code(), Some(0), "{stderr}");

    // Awake again, the old owner finds the tree taken over and stops its run.
    let rest: Vec<String> = lines.map_while(Result::ok).collect();
    let status = process.wait().unwrap();
    assert!(
        rest.iter()
            .any(|l| l.contains("took over the tree") && l.contains("host-b")),
        "{rest:?}"
    );
    assert!(!status.success(), "{status:?}: {rest:?}");
    // What host-b did stands: the slow child stays deleted.
    let tree = json(dir.path(), &["tree", &root, "--json"]);
    let slow = child(&tree["sessions"], "slow");
    assert!(!slow["tombstone"].is_null(), "{tree}");
}

#[test]
fn rm_refuses_a_selector_that_is_one_childs_name_and_anothers_id() {
    let dir = tempfile::tempdir().unwrap();
    let run = json(dir.path(), &["run", REPLIES, "--json", "-q"]);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    let kids = json(dir.path(), &["ls", &root, "--json"]);
    let papers = child(&kids["children"], "papers")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let quiet = child(&kids["children"], "quiet")["id"]
        .as_str()
        .unwrap()
        .to_owned();
    // "quiet" is renamed to papers' session id (as a model may name a child).
    let db = dir.path().join(".arbor/arbor.db");
    let conn = rusqlite::Connection::open(&db).unwrap();
    let n = conn
        .execute(
            "UPDATE sessions SET name = ?1 WHERE id = ?2",
            [&papers, &quiet],
        )
        .unwrap();
    assert_eq!(n, 1);
    drop(conn);

    let out = arbor(dir.path(), &["rm", &root, &papers]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        String::from_utf8_lossy(&out.stderr).trim_end(),
        format!(
            "error: Selector \"{papers}\" is ambiguous: it is the name of session {quiet} and \
             the session id of \"papers\"; use a name or session id only one of them has"
        )
    );
    // Nothing was deleted; what only one has still selects it.
    let kids = json(dir.path(), &["ls", &root, "--json"]);
    assert_eq!(kids["children"].as_array().unwrap().len(), 2);
    let rm = json(dir.path(), &["rm", &root, &quiet, "--json"]);
    assert_eq!(rm["session_id"], quiet.as_str());
    assert_eq!(rm["already_deleted"], false);
}

#[test]
fn rename_moves_a_childs_name_and_the_transcript_records_it() {
    let dir = tempfile::tempdir().unwrap();
    let run = json(dir.path(), &["run", REPLIES, "--json", "-q"]);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    let out = arbor(dir.path(), &["rename", &root, "quiet", "papers"]);
    assert_eq!(out.status.code(), Some(2), "papers is taken");
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("Agent name \"papers\" is unavailable"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let renamed = json(
        dir.path(),
        &["rename", &root, "quiet", "silent-one", "--json"],
    );
    assert_eq!(
        (renamed["from"].as_str(), renamed["name"].as_str()),
        (Some("quiet"), Some("silent-one"))
    );
    let kids = json(dir.path(), &["ls", &root, "--json"]);
    let names: Vec<&str> = kids["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["name"].as_str().unwrap())
        .collect();
    assert!(
        names.contains(&"silent-one") && !names.contains(&"quiet"),
        "{names:?}"
    );
    let id = renamed["session_id"].as_str().unwrap();
    let log = arbor(dir.path(), &["log", id]);
    assert!(
        String::from_utf8_lossy(&log.stdout).contains("renamed quiet -> silent-one"),
        "{}",
        String::from_utf8_lossy(&log.stdout)
    );
}

#[test]
fn store_check_passes_a_healthy_store_and_names_a_damaged_one() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", REPLIES, "--json", "-q"]);
    assert!(run.status.success());
    let ok = arbor(dir.path(), &["store", "check"]);
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    assert!(
        String::from_utf8_lossy(&ok.stdout).contains(": ok (integrity and foreign keys checked)")
    );
    // Damage every page but the header: exit 3, the file named, the recovery said.
    let path = dir.path().join(".arbor/arbor.db");
    let mut bytes = std::fs::read(&path).unwrap();
    let page = 4096;
    for (i, b) in bytes[page..].iter_mut().enumerate() {
        *b = (i as u8).wrapping_mul(31).wrapping_add(7);
    }
    std::fs::write(&path, &bytes).unwrap();
    let bad = arbor(dir.path(), &["store", "check"]);
    let stderr = String::from_utf8_lossy(&bad.stderr);
    assert_eq!(bad.status.code(), Some(3), "{stderr}");
    assert!(stderr.contains("arbor.db"), "{stderr}");
    assert!(
        stderr.contains(".recover"),
        "the recovery is said: {stderr}"
    );
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "the damaged file is never rewritten"
    );
}

/// Inspection works on a store that cannot be written (its directory mounted read-only in a
/// private mount namespace, which binds even root); skipped where no namespace can be made.
#[cfg(target_os = "linux")]
#[test]
fn inspection_reads_a_store_it_cannot_write() {
    let dir = tempfile::tempdir().unwrap();
    let run = json(dir.path(), &["run", REPLIES, "--json", "-q"]);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    let can = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount --bind / / 2>/dev/null || mount -t tmpfs none /mnt",
        ])
        .output()
        .is_ok_and(|o| o.status.success());
    if !can {
        eprintln!("skipped: no private mount namespace here");
        return;
    }
    let store_dir = dir.path().join(".arbor");
    let script = "mount --bind \"$D\" \"$D\" && mount -o remount,ro,bind \"$D\" && \
                  touch \"$D/probe\" 2>/dev/null && exit 9; exec \"$0\" \"$@\"";
    for args in [
        vec!["ls", "--json"],
        vec!["tree", root.as_str(), "--json"],
        vec!["log", root.as_str()],
        vec!["approvals", root.as_str()],
    ] {
        let out = Command::new("unshare")
            .args(["-m", "sh", "-c", script])
            .arg(env!("CARGO_BIN_EXE_arbor"))
            .args(&args)
            .env("D", &store_dir)
            .env_remove("ARBOR_LOG")
            .current_dir(dir.path())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?} on a read-only store: {:?} {}",
            out.status.code(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// A refused `rm` (an unknown child, the root itself) and one of a child deleted already
/// change nothing in the store: no lease taken, no record rewritten.
#[test]
fn a_refused_or_repeated_rm_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(dir.path(), &["run", REVIEW, "--json", "-q"]);
    assert!(run.status.success());
    let report: serde_json::Value = serde_json::from_slice(&run.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let child = report["sessions"][1]["name"].as_str().unwrap().to_owned();
    assert!(arbor(dir.path(), &["rm", &root, &child]).status.success());
    use arbor_store::{SessionQuery, Store};
    let dump = || {
        let store =
            arbor_store_sqlite::SqliteStore::open(dir.path().join(".arbor/arbor.db")).unwrap();
        tokio::runtime::Builder::new_current_thread()
            .build()
            .unwrap()
            .block_on(async {
                let mut all = Vec::new();
                for r in store.list_sessions(SessionQuery::Roots).await.unwrap() {
                    for s in store.list_sessions(SessionQuery::Tree(r.id)).await.unwrap() {
                        let entries = store.transcript(s.id, 0, None).await.unwrap().len();
                        all.push((
                            serde_json::to_string(&s.meta).unwrap(),
                            s.version,
                            s.updated_at,
                            entries,
                        ));
                    }
                }
                all
            })
    };
    let before = dump();
    for target in ["ghost", root.as_str(), child.as_str()] {
        let out = arbor(dir.path(), &["rm", "@latest", target]);
        assert_eq!(
            out.status.code(),
            Some(if target == child { 0 } else { 2 }),
            "{target}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    assert_eq!(
        dump(),
        before,
        "a refused or repeated rm wrote to the store"
    );
}

/// Three levels under approvals: the root's child `mid` hands the release to `publisher`,
/// whose `echo` waits for a decision at the root.
const WAITING_GRANDCHILD: &str = r#"
task = "Publish the release notes."
root = "root"

[supervisor]
approvals = true

[agents.root]
children = ["mid"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "mid", name = "mid", input = "Get it published." } }]
[[agents.root.turns]]
text = "Done."

[agents.mid]
children = ["publisher"]
[[agents.mid.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "publisher", name = "publisher", input = "Publish the notes." } }]
[[agents.mid.turns]]
text = "Handed over."

[agents.publisher]
tools = ["echo"]
[[agents.publisher.turns]]
tool_calls = [{ name = "echo", arguments = { text = "published" } }]
[[agents.publisher.turns]]
text = "Published."
"#;

/// Runs the waiting-grandchild spec to where `publisher` waits: `mid`'s own spawn waits
/// for a decision first (every child's call does), approved and resumed. Returns the root.
fn run_to_waiting_publisher(dir: &Path, spec: &Path) -> String {
    let out = arbor(dir, &["run", spec.to_str().unwrap(), "--json", "-q"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let run: Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    let id = run["suspension"]["pending"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("no pending call: {run}"))
        .to_owned();
    json(dir, &["approve", &root, &id, "--json"]);
    let out = arbor(dir, &["resume", &root, "--json"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    root
}

/// The status of the session named `name` in `arbor tree --json`.
fn status_in_tree(dir: &Path, root: &str, name: &str) -> Value {
    let tree = json(dir, &["tree", root, "--json"]);
    tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {tree}"))["status"]
        .clone()
}

/// `arbor rm` says which descendants it stopped: a grandchild waiting for a decision never
/// runs again, and is listed with the state it was in.
#[test]
fn rm_lists_the_waiting_descendants_it_stopped() {
    let dir = tempfile::tempdir().unwrap();
    let spec = dir.path().join("waiting.toml");
    std::fs::write(&spec, WAITING_GRANDCHILD).unwrap();
    let root = run_to_waiting_publisher(dir.path(), &spec);
    assert_eq!(status_in_tree(dir.path(), &root, "publisher"), "suspended");
    let listed = json(dir.path(), &["approvals", &root, "--json"]);
    let waiting = listed["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("nothing waits: {listed}"))
        .to_owned();

    let rm = json(dir.path(), &["rm", &root, "mid", "--json"]);
    assert_eq!(rm["already_deleted"], false, "{rm}");
    let stopped = rm["stopped"].as_array().unwrap();
    assert_eq!(stopped.len(), 1, "{rm}");
    assert_eq!(
        (
            &stopped[0]["name"],
            &stopped[0]["depth"],
            &stopped[0]["was"]
        ),
        (
            &serde_json::json!("publisher"),
            &serde_json::json!(2),
            &serde_json::json!("suspended")
        ),
        "{rm}"
    );
    // Its call is no longer listed at the root, and deciding it is refused as an unknown
    // id would be.
    let listed = json(dir.path(), &["approvals", &root, "--json"]);
    assert!(!listed.to_string().contains(&waiting), "{listed}");
    let decided = arbor(dir.path(), &["approve", &root, &waiting]);
    let forged = arbor(dir.path(), &["approve", &root, "sub_0000"]);
    assert!(!decided.status.success());
    assert_eq!(
        (
            decided.status.code(),
            String::from_utf8_lossy(&decided.stderr)
        ),
        (
            forged.status.code(),
            String::from_utf8_lossy(&forged.stderr)
        )
    );
    // Nothing of it runs again: the root's run, which carries its wait, settles it
    // aborted when it goes on (its call never ran).
    let out = arbor(dir.path(), &["resume", &root, "--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(status_in_tree(dir.path(), &root, "publisher"), "aborted");

    // Said in words too, without --json.
    let root = run_to_waiting_publisher(dir.path(), &spec);
    let out = arbor(dir.path(), &["rm", &root, "mid"]);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("stopped") && text.contains("publisher") && text.contains("was suspended"),
        "{text}"
    );
}
