//! Reliability as a user meets it: what the crash sweep marks in a tree whose process is
//! gone, termination signals, misleading answers, and large trees.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use arbor_protocol::SessionStatus;
use arbor_store::{SessionRecord, Store};
use arbor_store_sqlite::SqliteStore;
use serde_json::{Value, json};

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

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn json_of(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout).unwrap_or_else(|e| {
        panic!(
            "{e}: {}\n{}",
            String::from_utf8_lossy(&out.stdout),
            stderr(out)
        )
    })
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// An owner no process matches: a pid above the kernel's maximum.
fn dead_owner() -> Value {
    json!({"pid": 4_194_305 + 17, "start": 1})
}

#[test]
fn the_sweep_marks_never_started_children_of_a_dead_owner_and_keeps_suspended_ones() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("a.db");
    let store = SqliteStore::open(&db).unwrap();
    let mut root = SessionRecord::new_root("root", "root", "scripted");
    root.status = SessionStatus::Running;
    root.meta = json!({"owner": dead_owner()}).into();
    let mut waiting = SessionRecord::new_child(&root, "waiting", "waiting", "scripted");
    waiting.status = SessionStatus::Suspended;
    let never = SessionRecord::new_child(&root, "never", "never", "scripted");
    let mut running = SessionRecord::new_child(&root, "running", "running", "scripted");
    running.status = SessionStatus::Running;
    let mut done = SessionRecord::new_child(&root, "done", "done", "scripted");
    done.status = SessionStatus::Succeeded;
    let never_below = SessionRecord::new_child(&running, "below", "below", "scripted");
    block_on(async {
        for r in [&root, &waiting, &never, &running, &done, &never_below] {
            store.create_session(r).await.unwrap();
        }
    });
    drop(store);

    let out = arbor(
        dir.path(),
        &["ls", &root.id.to_string(), "--json", "--store", "a.db"],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    let statuses: Vec<(String, String)> = json_of(&out)["children"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap().to_owned(),
                r["status"].as_str().unwrap().to_owned(),
            )
        })
        .collect();
    let expected: Vec<(String, String)> = [
        ("waiting", "suspended"),
        ("never", "interrupted"),
        ("running", "interrupted"),
        ("done", "succeeded"),
    ]
    .iter()
    .map(|(a, b)| ((*a).to_owned(), (*b).to_owned()))
    .collect();
    assert_eq!(statuses, expected);
    let below = json_of(&arbor(
        dir.path(),
        &["ls", &running.id.to_string(), "--json", "--store", "a.db"],
    ));
    assert_eq!(below["children"][0]["name"], "below");
    assert_eq!(below["children"][0]["status"], "interrupted");
    let roots = json_of(&arbor(dir.path(), &["ls", "--json", "--store", "a.db"]));
    assert_eq!(roots["roots"][0]["status"], "interrupted");
}

/// A root whose child is slow in its model call (a minute).
#[cfg(unix)]
const SLOW_CHILD: &str = r#"
task = "wait"
[agents.root]
children = ["slow"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "slow", name = "slow", input = "take your time" } }]
[[agents.root.turns]]
text = "never"
[agents.slow]
[[agents.slow.turns]]
delay_ms = 60000
text = "late"
"#;

/// Starts `arbor run` on [`SLOW_CHILD`] and reads stderr until the child started.
#[cfg(unix)]
fn start_slow(
    dir: &Path,
    env: &[(&str, &str)],
) -> (
    std::process::Child,
    std::io::Lines<std::io::BufReader<std::process::ChildStderr>>,
) {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    std::fs::write(dir.join("slow.toml"), SLOW_CHILD).unwrap();
    let mut cmd = command(dir, &["run", "slow.toml", "--json"]);
    for (k, v) in env {
        cmd.env(k, v);
    }
    let mut child = cmd
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let started = line.contains("slow: delegation started");
        seen.push(line);
        if started {
            return (child, lines);
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    panic!("the child never started: {seen:#?}");
}

#[cfg(unix)]
fn kill(signal: &str, pid: u32) {
    let sent = Command::new("kill")
        .args([&format!("-{signal}"), &pid.to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
}

/// `signal` stops the run gracefully: the exit code, the report, and the stored statuses.
#[cfg(unix)]
fn a_signal_ends_the_tree_aborted(signal: &str, name: &str, code: i32) {
    let dir = tempfile::tempdir().unwrap();
    let (child, lines) = start_slow(dir.path(), &[]);
    kill(signal, child.id());
    let rest: Vec<String> = lines.map(|l| l.unwrap()).collect();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(code), "{rest:#?}");
    assert!(
        rest.iter().any(|l| l
            == &format!(
                "arbor: {name} received, cancelling the run (send it again to exit at once)"
            )),
        "{rest:#?}"
    );
    assert!(
        rest.iter()
            .any(|l| l.starts_with("root: run aborted (cancelled)")),
        "{rest:#?}"
    );
    let report = json_of(&out);
    assert_eq!(report["status"], "aborted");
    assert_eq!(report["result"]["stop_reason"], "cancelled");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    // What a later process finds: both ended aborted (not running, not interrupted).
    let roots = json_of(&arbor(dir.path(), &["ls", "--json"]));
    assert_eq!(roots["roots"][0]["status"], "aborted", "{roots}");
    let kids = json_of(&arbor(dir.path(), &["ls", &root, "--json"]));
    assert_eq!(kids["children"][0]["name"], "slow");
    assert_eq!(kids["children"][0]["status"], "aborted", "{kids}");
}

#[cfg(unix)]
#[test]
fn sigterm_ends_the_run_aborted_with_the_report_and_exit_143() {
    a_signal_ends_the_tree_aborted("TERM", "SIGTERM", 143);
}

#[cfg(unix)]
#[test]
fn sighup_ends_the_run_aborted_with_the_report_and_exit_129() {
    a_signal_ends_the_tree_aborted("HUP", "SIGHUP", 129);
}

#[cfg(unix)]
#[test]
fn a_second_sigterm_during_a_slow_shutdown_exits_at_once() {
    let dir = tempfile::tempdir().unwrap();
    // Shutdown writes the aborted statuses; another process holds the store's write lock, so
    // they would wait a minute.
    let (mut child, mut lines) = start_slow(dir.path(), &[("ARBOR_BUSY_TIMEOUT_MS", "60000")]);
    let lock = rusqlite::Connection::open(dir.path().join(".arbor/arbor.db")).unwrap();
    lock.busy_timeout(std::time::Duration::from_secs(10))
        .unwrap();
    lock.execute_batch("BEGIN IMMEDIATE").unwrap();
    kill("TERM", child.id());
    let notice = "arbor: SIGTERM received, cancelling the run (send it again to exit at once)";
    let mut seen = Vec::new();
    for line in lines.by_ref() {
        let line = line.unwrap();
        let found = line == notice;
        seen.push(line);
        if found {
            break;
        }
    }
    assert_eq!(seen.last().map(String::as_str), Some(notice), "{seen:#?}");
    std::thread::sleep(std::time::Duration::from_millis(1000));
    assert!(
        child.try_wait().unwrap().is_none(),
        "the shutdown waits on the store"
    );
    let second = std::time::Instant::now();
    kill("TERM", child.id());
    let out = child.wait_with_output().unwrap();
    let waited = second.elapsed();
    assert_eq!(out.status.code(), Some(143));
    assert!(
        waited < std::time::Duration::from_secs(5),
        "the second signal took {waited:?}"
    );
    lock.execute_batch("ROLLBACK").unwrap();
}

const APPROVALS: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/approvals.toml");

/// Runs the approvals example to its suspension: (root session, the pending id).
fn suspended(dir: &Path, spec: &str) -> (String, String) {
    let run = arbor(dir, &["run", spec, "--json", "-q"]);
    assert_eq!(run.status.code(), Some(4), "{}", stderr(&run));
    let report = json_of(&run);
    (
        report["root_session_id"].as_str().unwrap().to_owned(),
        report["suspension"]["pending"][0]["id"]
            .as_str()
            .unwrap()
            .to_owned(),
    )
}

#[test]
fn deciding_twice_says_the_approval_was_already_decided() {
    let dir = tempfile::tempdir().unwrap();
    let (root, id) = suspended(dir.path(), APPROVALS);
    assert!(arbor(dir.path(), &["approve", &root, &id]).status.success());
    for verb in ["approve", "reject"] {
        let again = arbor(dir.path(), &[verb, &root, &id]);
        assert_eq!(again.status.code(), Some(2), "{verb}");
        // One decision per call: the second names the first (what, who, when).
        let said = stderr(&again);
        assert!(
            said.starts_with("error: This call was already decided: allow_once by ")
                && said.contains("(tenant local) on ")
                && said.ends_with("; a call is decided once\n"),
            "{verb}: {said}"
        );
    }
    // A forged id still learns nothing.
    let forged = arbor(dir.path(), &["approve", &root, "sub_deadbeef"]);
    assert_eq!(forged.status.code(), Some(2));
    assert_eq!(stderr(&forged), "error: Unknown approval\n");
    // Once the run is over, nothing waits.
    assert!(arbor(dir.path(), &["resume", &root]).status.success());
    let late = arbor(dir.path(), &["approve", &root, &id]);
    assert_eq!(late.status.code(), Some(2));
    assert_eq!(
        stderr(&late),
        format!("error: {root} waits for no decision (its run is over or never suspended)\n")
    );
}

#[test]
fn an_over_long_reason_is_bad_usage_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let (root, id) = suspended(dir.path(), APPROVALS);
    let before = json_of(&arbor(dir.path(), &["approvals", &root, "--json"]));
    let reason = "x".repeat(3000);
    let out = arbor(dir.path(), &["reject", &root, &id, "--reason", &reason]);
    assert_eq!(out.status.code(), Some(2));
    assert_eq!(
        stderr(&out),
        "error: --reason is 3000 bytes; at most 2048 are allowed\n"
    );
    let after = json_of(&arbor(dir.path(), &["approvals", &root, "--json"]));
    assert_eq!(after, before, "nothing was decided");
}

#[cfg(unix)]
#[test]
fn a_resume_that_loses_the_race_names_the_process_that_resumes() {
    use std::io::{BufRead, BufReader};
    use std::process::Stdio;
    let dir = tempfile::tempdir().unwrap();
    let slow = std::fs::read_to_string(APPROVALS)
        .unwrap()
        .replace("tools = [\"echo\"]", "tools = [\"sleep\"]")
        .replace(
            "{ name = \"echo\", arguments = { text = \"published v1.2 release notes\" } }",
            "{ name = \"sleep\", arguments = { ms = 20000 } }",
        );
    std::fs::write(dir.path().join("slow.toml"), slow).unwrap();
    let (root, id) = suspended(dir.path(), "slow.toml");
    assert!(arbor(dir.path(), &["approve", &root, &id]).status.success());
    let mut first = command(dir.path(), &["resume", &root])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut seen = Vec::new();
    for line in BufReader::new(first.stderr.take().unwrap()).lines() {
        let line = line.unwrap();
        let started = line.contains("publisher: delegation started");
        seen.push(line);
        if started {
            break;
        }
    }
    let second = arbor(dir.path(), &["resume", &root]);
    let first_pid = first.id();
    let _ = first.kill();
    let _ = first.wait();
    assert!(
        seen.iter()
            .any(|l| l.contains("publisher: delegation started")),
        "{seen:#?}"
    );
    assert_eq!(second.status.code(), Some(2), "{}", stderr(&second));
    // The tree's owner is checked first (compare-and-swap on the root): the answer names the
    // process that resumes it.
    let err = stderr(&second);
    assert!(
        err.starts_with(&format!(
            "error: the tree of {root} is being run by process {first_pid} on "
        )) && err.ends_with("; wait until it ends (or stop it), then try again\n"),
        "{err}"
    );
}

/// Read-only inspection works where the user cannot write the store's directory (nor its
/// file): `ls`, `tree`, `log` and `store check` fall back to a read-only open. Run as an
/// unprivileged user (root writes anywhere): `setpriv` to `nobody` when the test runs as root.
#[test]
fn inspection_reads_a_store_in_a_directory_it_cannot_write() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let run = arbor(
        dir.path(),
        &[
            "run",
            concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml"),
            "-q",
        ],
    );
    assert!(run.status.success(), "{}", stderr(&run));
    let set = |p: &Path, mode: u32| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    set(dir.path(), 0o755);
    set(&dir.path().join(".arbor/arbor.db"), 0o644);
    set(&dir.path().join(".arbor"), 0o555);
    let root = rustix::process::getuid().is_root();
    for args in [&["ls"][..], &["tree"], &["log"], &["store", "check"]] {
        let mut cmd = if root {
            let mut c = Command::new("setpriv");
            c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
                .arg(env!("CARGO_BIN_EXE_arbor"));
            c
        } else {
            Command::new(env!("CARGO_BIN_EXE_arbor"))
        };
        let out = cmd
            .args(args)
            .current_dir(dir.path())
            .env_remove("ARBOR_LOG")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{args:?}: {}", stderr(&out));
    }
    set(&dir.path().join(".arbor"), 0o700);
}
