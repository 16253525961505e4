//! `arbor resume --workers` after the parent's process was killed says what happened: its
//! children kept running on the workers, the continued root waits for them again and reads
//! their answers, and the report says so (calls that got their results, children that went
//! on with their caller), checked against the store. Needs the test server of
//! `ARBOR_TEST_POSTGRES_URL` (`. .ci/postgres.sh`); skips loudly without it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs
)]
#![cfg(unix)]

#[allow(dead_code)]
mod pg_support;

use std::time::{Duration, Instant};

use pg_support::{drop_schema, json, server, spawn};
use serde_json::Value;

/// A root that starts four slow sync children at once.
fn spec() -> String {
    let calls: Vec<String> = (0..4)
        .map(|i| {
            format!(
                "{{ name = \"spawn_agent\", arguments = {{ child_id = \"lead\", name = \
                 \"lead{i}\", input = \"part {i}\" }} }}"
            )
        })
        .collect();
    format!(
        "task = \"split\"\nroot = \"root\"\n\n[agents.root]\nchildren = [\"lead\"]\n\
         tool_concurrency = 4\n[[agents.root.turns]]\ntool_calls = [{}]\n\
         [[agents.root.turns]]\ntext = \"all parts in\"\n\n[agents.lead]\n\
         [[agents.lead.turns]]\ndelay_ms = 2500\ntext = \"part done\"\n",
        calls.join(", ")
    )
}

#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn resume_with_workers_after_a_parent_kill_reports_what_the_store_holds() {
    let Some(pg) = server("resume_with_workers_after_a_parent_kill") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/tree.toml"), spec()).unwrap();
    let workers: Vec<_> = (0..2)
        .map(|n| {
            spawn(
                dir.path(),
                &pg,
                &[
                    "worker",
                    "--specs",
                    "specs",
                    "--lease-ms",
                    "1500",
                    "--poll-ms",
                    "100",
                    "--concurrency",
                    "4",
                ],
                &dir.path().join(format!("worker-{n}.log")),
            )
        })
        .collect();
    let mut run = spawn(
        dir.path(),
        &pg,
        &[
            "run",
            "specs/tree.toml",
            "--workers",
            "--json",
            "--no-input",
        ],
        &dir.path().join("run.log"),
    );
    // Kill the parent once its four children run on the workers.
    let start = Instant::now();
    loop {
        let tree = pg_support::arbor(dir.path(), &pg, &["tree", "--json"]);
        if tree.status.success() {
            let tree: Value = serde_json::from_slice(&tree.stdout).unwrap();
            let running = tree["sessions"]
                .as_array()
                .map_or(0, |s| s.iter().filter(|s| s["status"] == "running").count());
            if running == 5 {
                break;
            }
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "the children never ran"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    run.kill().unwrap();
    run.wait().unwrap();
    let resumed = pg_support::arbor(
        dir.path(),
        &pg,
        &["resume", "@latest", "--workers", "--json", "--no-input"],
    );
    let said = String::from_utf8_lossy(&resumed.stderr).into_owned();
    assert!(resumed.status.success(), "{said}");
    let report: Value = serde_json::from_slice(&resumed.stdout).unwrap();
    assert_eq!(report["status"], "succeeded", "{report} {said}");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    let sessions = tree["sessions"].as_array().unwrap();
    // What the root's transcript holds: the calls answered, and those reported interrupted.
    let log = pg_support::arbor(dir.path(), &pg, &["log", &root, "--json"]);
    let results: Vec<Value> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .collect();
    let interrupted = results
        .iter()
        .filter(|e| {
            e["message"]["content"]
                .as_str()
                .unwrap()
                .starts_with("interrupted")
        })
        .count();
    let answered = results.len() - interrupted;
    // The report says the same.
    if answered > 0 {
        assert!(
            said.contains(&format!("{answered} call(s) in flight got their results")),
            "{said}"
        );
    }
    if interrupted > 0 {
        assert!(
            said.contains(&format!(
                "{interrupted} call(s) in flight reported interrupted"
            )),
            "{said}"
        );
    } else {
        assert!(!said.contains("reported interrupted"), "{said}");
    }
    // Each child the report names, it names as the store has it.
    let mut named = 0;
    for child in sessions.iter().filter(|s| s["parent_id"] == root.as_str()) {
        let name = child["name"].as_str().unwrap();
        let id = child["id"].as_str().unwrap();
        let status = child["status"].as_str().unwrap();
        let left = format!("left interrupted: {name} ({id})");
        let went = format!("{name} ({id}) went on with its caller: ");
        if said.contains(&left) {
            assert_eq!(status, "interrupted", "{left}: {said}");
            named += 1;
        }
        if let Some(at) = said.find(&went) {
            let told = said[at + went.len()..].lines().next().unwrap_or_default();
            assert_eq!(told, status, "{went}: {said}");
            named += 1;
        }
    }
    eprintln!(
        "workers report: {answered} answered, {interrupted} interrupted, {named} children \
         named, children: {:?}",
        sessions
            .iter()
            .map(|s| s["status"].as_str().unwrap_or_default())
            .collect::<Vec<_>>()
    );
    for mut w in workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    drop_schema(&pg);
}
