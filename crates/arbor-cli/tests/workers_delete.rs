//! A stop reaches a worker's child through its tree (issue 39, item 6): a grandchild runs on
//! an `arbor worker` while the parent's process (`arbor run`) is dead; deleting its parent
//! (`arbor rm ROOT mid`, not the grandchild itself) stops it within a heartbeat, and nothing
//! of it runs after. Needs the test server of `ARBOR_TEST_POSTGRES_URL`
//! (`. .ci/postgres.sh`); skips loudly without it.
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

use pg_support::fleet::{lines, start_tree, wait_until, worker};
use pg_support::{drop_schema, json, server};

/// The root starts `mid`, which starts `counter` and waits for it; the counter appends a
/// line every 400 ms.
fn spec() -> String {
    let mut spec = String::from(
        "task = \"count\"\nroot = \"root\"\n\n[agents.root]\nchildren = [\"mid\"]\n\
         [[agents.root.turns]]\ntool_calls = [{ name = \"spawn_agent\", arguments = { \
         child_id = \"mid\", name = \"mid\", input = \"delegate\" } }]\n[[agents.root.turns]]\n\
         text = \"root done\"\n\n[agents.mid]\nchildren = [\"counter\"]\n\
         limits = { timeout_ms = 120000 }\n[[agents.mid.turns]]\ntool_calls = [{ name = \
         \"spawn_agent\", arguments = { child_id = \"counter\", name = \"leaf\", input = \
         \"count\" } }]\n[[agents.mid.turns]]\ntext = \"mid done\"\n\n[agents.counter]\n\
         tools = [\"append_line\"]\nlimits = { max_steps = 40, max_tool_calls = 40, \
         timeout_ms = 120000 }\n",
    );
    for i in 1..=30 {
        spec.push_str(&format!(
            "[[agents.counter.turns]]\ndelay_ms = 400\ntool_calls = [{{ name = \
             \"append_line\", arguments = {{ path = \"count.txt\", text = \"line-{i}\" }} }}]\n"
        ));
    }
    spec.push_str("[[agents.counter.turns]]\ntext = \"counted\"\n");
    spec
}

#[test]
fn deleting_its_parent_stops_a_grandchild_on_its_worker_while_the_root_is_dead() {
    let Some(pg) = server("deleting_its_parent_stops_a_grandchild") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/tree.toml"), spec()).unwrap();
    let mut w = worker(dir.path(), &pg, 1, "4");
    let mut run = start_tree(dir.path(), &pg);
    let count = dir.path().join("count.txt");
    wait_until("the grandchild mid-run", Duration::from_secs(60), || {
        lines(&count).len() >= 2
    });
    // The root's process dies; the tree's children go on on the worker.
    run.kill().unwrap();
    run.wait().unwrap();
    let rows = json(dir.path(), &pg, &["ls", "--json"]);
    let root = rows["roots"][0]["id"].as_str().unwrap().to_owned();
    let deleted = Instant::now();
    let out = pg_support::arbor(dir.path(), &pg, &["rm", &root, "mid"]);
    assert!(
        out.status.success(),
        "rm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // Stopped within a heartbeat (a quarter of the 1,500 ms lease) plus the turn under way.
    let mut at_stop = 0;
    let mut stopped = None;
    while deleted.elapsed() < Duration::from_secs(5) {
        let now = lines(&count).len();
        std::thread::sleep(Duration::from_millis(500));
        if lines(&count).len() == now {
            at_stop = now;
            stopped = Some(deleted.elapsed());
            break;
        }
    }
    let took = stopped.expect("the grandchild went on counting after its parent was deleted");
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(lines(&count).len(), at_stop, "it went on after it stopped");
    assert!(at_stop < 30, "it ran to its end instead");
    w.kill().unwrap();
    w.wait().unwrap();
    eprintln!(
        "delete: removing its parent stopped the grandchild on its worker in {} ms",
        took.as_millis()
    );
    assert!(took < Duration::from_millis(2500), "{took:?}");
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    let sessions = tree["sessions"].as_array().unwrap();
    let leaf = sessions.iter().find(|s| s["name"] == "leaf").unwrap();
    assert_ne!(leaf["status"], "running", "{tree}");
    assert_ne!(leaf["status"], "succeeded", "{tree}");
    drop_schema(&pg);
}
