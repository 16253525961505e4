//! PostgreSQL restarted under load: a tree whose children run on `arbor worker` processes
//! goes on through restarts of its server (every connection cut, the transactions in flight
//! rolled back) and a short outage, and ends with every child run exactly once and every
//! effect at most once. Runs its own server (Debian's binaries, installed by
//! `.ci/postgres.sh`); skips loudly without them.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs
)]
#![cfg(unix)]

#[allow(dead_code)]
mod pg_support;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use pg_support::fleet::{lines, start_tree, worker};
use pg_support::own::OwnServer;
use pg_support::{Proc, json};
use serde_json::Value;

/// The root starts 3 leads; each asks for 8 leaves, 4 at a time, and each leaf appends a
/// line before it answers.
fn spec() -> String {
    let mut spec = String::from(
        "task = \"fan out\"\nroot = \"root\"\n\n[supervisor]\n\
         limits = { max_active_children = 8, timeout_ms = 300000 }\n\n\
         [agents.root]\nchildren = [\"lead\"]\ntool_concurrency = 3\n\
         limits = { max_steps = 8, max_tool_calls = 8, timeout_ms = 300000 }\n\
         [[agents.root.turns]]\ntool_calls = [\n",
    );
    for i in 0..3 {
        spec.push_str(&format!(
            "  {{ name = \"spawn_agent\", arguments = {{ child_id = \"lead\", name = \"lead-{i}\", \
             input = \"lead {i}\" }} }},\n"
        ));
    }
    spec.push_str(
        "]\n[[agents.root.turns]]\ntext = \"all led\"\n\n[agents.lead]\nchildren = [\"leaf\"]\n\
         tool_concurrency = 4\nlimits = { max_steps = 8, max_tool_calls = 40, timeout_ms = 300000 }\n\
         [[agents.lead.turns]]\ntool_calls = [\n",
    );
    for i in 0..8 {
        spec.push_str(&format!(
            "  {{ name = \"spawn_agent\", arguments = {{ child_id = \"leaf\", input = \"leaf {i}\" }} }},\n"
        ));
    }
    spec.push_str(
        "]\n[[agents.lead.turns]]\ntext = \"led\"\n\n[agents.leaf]\ntools = [\"append_line\"]\n\
         [[agents.leaf.turns]]\ndelay_ms = 900\ntool_calls = [{ name = \"append_line\", \
         arguments = { path = \"effects.txt\", text = \"leaf\" } }]\n\
         [[agents.leaf.turns]]\ndelay_ms = 900\ntext = \"leaf done\"\n",
    );
    spec
}

#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn a_tree_on_workers_goes_on_through_postgres_restarts_and_loses_nothing() {
    let Some(server) = OwnServer::start("a_tree_on_workers_goes_on_through_postgres_restarts")
    else {
        return;
    };
    let pg = server.pg();
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/tree.toml"), spec()).unwrap();
    let mut workers: Vec<Proc> = (0..2).map(|n| worker(dir.path(), &pg, n, "6")).collect();
    let mut run = start_tree(dir.path(), &pg);
    let start = Instant::now();
    // Two restarts and a 2 s outage while the leaves run.
    let mut outages = 0;
    for (at, down_for) in [(1500, 0), (3500, 0), (5500, 2000)] {
        while start.elapsed() < Duration::from_millis(at) {
            std::thread::sleep(Duration::from_millis(20));
        }
        if run.try_wait().unwrap().is_some() {
            break;
        }
        if down_for == 0 {
            server.restart();
        } else {
            server.down();
            std::thread::sleep(Duration::from_millis(down_for));
            server.up();
        }
        outages += 1;
    }
    let status = loop {
        if let Some(status) = run.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > Duration::from_secs(120) {
            panic!(
                "the tree did not end\nrun:\n{}\nworker 0:\n{}\nserver:\n{}",
                std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default(),
                std::fs::read_to_string(dir.path().join("worker-0.log")).unwrap_or_default(),
                server.log()
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let took = start.elapsed();
    let out = std::fs::read_to_string(pg_support::stdout_of(&dir.path().join("run.log"))).unwrap();
    assert!(
        status.success(),
        "the run failed ({status}) after {outages} outages: {out}\nrun:\n{}\nworker 0:\n{}",
        std::fs::read_to_string(dir.path().join("run.log")).unwrap_or_default(),
        std::fs::read_to_string(dir.path().join("worker-0.log")).unwrap_or_default(),
    );
    let report: Value = serde_json::from_str(&out).unwrap();
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    eprintln!(
        "postgres restarts: {outages} outages, the tree ended in {} ms",
        took.as_millis()
    );
    assert_eq!(outages, 3, "the tree ended before the outages: {took:?}");
    assert_eq!(report["status"], "succeeded", "{report}");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    let sessions = tree["sessions"].as_array().unwrap();
    // Every child ran exactly once: 3 leads of 8 leaves each, all succeeded.
    let leads: Vec<&Value> = sessions
        .iter()
        .filter(|s| s["parent_id"] == root.as_str())
        .collect();
    assert_eq!(leads.len(), 3, "{tree}");
    let mut leaves = BTreeSet::new();
    for lead in &leads {
        assert_eq!(lead["status"], "succeeded", "{tree}");
        let id = lead["id"].as_str().unwrap();
        let own: Vec<&Value> = sessions.iter().filter(|s| s["parent_id"] == id).collect();
        assert_eq!(own.len(), 8, "lead {id}: {tree}");
        for leaf in own {
            assert_eq!(leaf["status"], "succeeded", "{tree}");
            leaves.insert(leaf["id"].as_str().unwrap().to_owned());
        }
    }
    // Every effect at most once: each leaf made one call; the lines are those its answers
    // say were appended, plus at most the calls cut off in flight (reported interrupted).
    let (mut appended, mut interrupted) = (0, 0);
    for leaf in &leaves {
        let out = pg_support::arbor(dir.path(), &pg, &["log", leaf, "--json"]);
        let results: Vec<String> = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
            .map(|e| e["message"]["content"].as_str().unwrap_or("").to_owned())
            .collect();
        assert_eq!(results.len(), 1, "leaf {leaf}: {results:?}");
        appended += usize::from(results[0].starts_with("appended"));
        interrupted += usize::from(results[0].starts_with("interrupted"));
    }
    let written = lines(&dir.path().join("effects.txt")).len();
    eprintln!(
        "postgres restarts: {written} effects, {appended} appended, {interrupted} interrupted"
    );
    assert!(
        appended <= written && written <= appended + interrupted && written <= 24,
        "{written} lines written, {appended} answered appended, {interrupted} interrupted"
    );
}
