//! Children on `arbor worker` processes over a shared PostgreSQL store (`arbor run
//! --workers`): a worker SIGKILLed in the middle of a child's multi-turn run is taken over by
//! another, which goes on from the transcript with no effect run twice; a tree of 100
//! children with `max_active_children = 8` on four workers killed at random never has more
//! than 8 live (sampled from the database) and leaves no slot behind. Needs the test server
//! of `ARBOR_TEST_POSTGRES_URL` (`. .ci/postgres.sh`); skips loudly without it.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs
)]
#![cfg(unix)]

#[allow(dead_code)]
mod pg_support;
#[allow(dead_code)]
mod serve_support;

use std::collections::BTreeSet;
use std::path::Path;
use std::time::{Duration, Instant};

use pg_support::fleet::{finish, lines, start_tree, wait_until, worker};
use pg_support::{Pg, Proc, drop_schema, json, server, spawn};
use serde_json::Value;

/// A child that appends a line per turn (each of its own text), a turn every 400 ms.
fn counter_spec(lines: usize) -> String {
    let mut spec = String::from(
        "task = \"count\"\nroot = \"root\"\n\n[agents.root]\nchildren = [\"counter\"]\n\
         [[agents.root.turns]]\nusage = { input_tokens = 100, output_tokens = 10 }\n\
         tool_calls = [{ name = \"spawn_agent\", arguments = { child_id = \"counter\", \
         name = \"c1\", input = \"count\" } }]\n[[agents.root.turns]]\n\
         usage = { input_tokens = 200, output_tokens = 20 }\ntext = \"root done\"\n\n\
         [agents.counter]\ntools = [\"append_line\"]\n\
         limits = { max_steps = 40, max_tool_calls = 40, timeout_ms = 120000 }\n",
    );
    for i in 1..=lines {
        spec.push_str(&format!(
            "[[agents.counter.turns]]\ndelay_ms = 400\nusage = {{ input_tokens = {}, \
             output_tokens = 1 }}\ntool_calls = [{{ name = \"append_line\", arguments = {{ \
             path = \"count.txt\", text = \"line-{i}\" }} }}]\n",
            10 * i
        ));
    }
    spec.push_str(
        "[[agents.counter.turns]]\nusage = { input_tokens = 7, output_tokens = 1 }\n\
         text = \"counted\"\n",
    );
    spec
}

#[test]
fn a_worker_killed_mid_run_is_taken_over_and_no_effect_runs_twice() {
    let Some(pg) = server("a_worker_killed_mid_run_is_taken_over") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/tree.toml"), counter_spec(8)).unwrap();
    let count = dir.path().join("count.txt");

    let mut first = worker(dir.path(), &pg, 1, "4");
    let run = start_tree(dir.path(), &pg);
    // The first worker is the only one: it holds the child. Kill it mid-run.
    wait_until("the first lines", Duration::from_secs(60), || {
        lines(&count).len() >= 3
    });
    let mut second = worker(dir.path(), &pg, 2, "4");
    std::thread::sleep(Duration::from_millis(300));
    first.kill().unwrap();
    let killed = Instant::now();
    first.wait().unwrap();
    let at_kill = lines(&count).len();
    wait_until(
        "the second worker to go on",
        Duration::from_secs(30),
        || lines(&count).len() > at_kill,
    );
    let resumed = killed.elapsed();
    let report = finish(run, &dir.path().join("run.log"), Duration::from_secs(120));
    second.kill().unwrap();
    second.wait().unwrap();
    eprintln!(
        "takeover: kill to resume {} ms (lease 1500 ms), {at_kill} lines before the kill",
        resumed.as_millis()
    );

    // Each line at most once, in order; only a call in flight at the kill may be missing.
    let written = lines(&count);
    let unique: BTreeSet<&String> = written.iter().collect();
    assert_eq!(
        unique.len(),
        written.len(),
        "an effect ran twice: {written:?}"
    );
    let expected: Vec<String> = (1..=8).map(|i| format!("line-{i}")).collect();
    assert!(written.iter().all(|l| expected.contains(l)), "{written:?}");
    assert!(written.len() >= 7, "{written:?}");

    // The child: two runs (the first cut off, the takeover), every call answered once, the
    // calls answered "appended" each wrote their line.
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    let sessions = tree["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 2, "one tree: {tree}");
    assert_eq!(sessions[1]["parent_id"], root.as_str());
    assert_eq!(sessions[1]["status"], "succeeded");
    let child = sessions[1]["id"].as_str().unwrap();
    let out = pg_support::arbor(dir.path(), &pg, &["log", child, "--json"]);
    let entries: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let runs = entries
        .iter()
        .filter(|e| e["kind"] == "run_started")
        .count();
    assert_eq!(runs, 2, "the takeover is a second run of the same session");
    let results: Vec<&str> = entries
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap())
        .collect();
    assert_eq!(results.len(), 8, "{results:?}");
    let appended = results.iter().filter(|r| r.starts_with("appended")).count();
    assert!(appended <= written.len() && written.len() <= appended + 1);
    assert!(
        results
            .iter()
            .filter(|r| r.starts_with("interrupted"))
            .count()
            <= 1,
        "{results:?}"
    );
    drop_schema(&pg);
}

/// Workers killed at random while the wide tree runs, one every [`KILL_EVERY_MS`]: CI runs
/// this fixed count and seed; `ARBOR_CHAOS_KILLS=N` and `ARBOR_CHAOS_SEED=S` make a longer or
/// other run (docs/RELIABILITY.md).
const KILLS: u32 = 20;

/// The kill count and the victims' seed, from the environment or CI's.
fn chaos() -> (u32, u64) {
    let read = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let kills = read("ARBOR_CHAOS_KILLS").map_or(KILLS, |k| u32::try_from(k).unwrap());
    (
        kills,
        read("ARBOR_CHAOS_SEED")
            .unwrap_or(0x9e37_79b9_7f4a_7c15)
            .max(1),
    )
}
const KILL_EVERY_MS: u64 = 500;

/// The root starts 4 leads at once; each lead asks for 25 leaves, 4 at a time: 100 children
/// that would be 20 live at once without a tree-wide count.
fn wide_spec() -> String {
    let mut spec = String::from(
        "task = \"fan out\"\nroot = \"root\"\n\n[supervisor]\n\
         limits = { max_active_children = 8, timeout_ms = 300000 }\n\n\
         [agents.root]\nchildren = [\"lead\"]\ntool_concurrency = 4\n\
         limits = { max_steps = 8, max_tool_calls = 8, timeout_ms = 300000 }\n\
         [[agents.root.turns]]\nusage = { input_tokens = 100, output_tokens = 10 }\ntool_calls = [\n",
    );
    for i in 0..4 {
        spec.push_str(&format!(
            "  {{ name = \"spawn_agent\", arguments = {{ child_id = \"lead\", name = \"lead-{i}\", \
             input = \"lead {i}\" }} }},\n"
        ));
    }
    spec.push_str(
        "]\n[[agents.root.turns]]\nusage = { input_tokens = 200, output_tokens = 20 }\n\
         text = \"all led\"\n\n[agents.lead]\nchildren = [\"leaf\"]\ntool_concurrency = 4\n\
         limits = { max_steps = 8, max_tool_calls = 40, timeout_ms = 300000 }\n\
         [[agents.lead.turns]]\nusage = { input_tokens = 10, output_tokens = 1 }\ntool_calls = [\n",
    );
    for i in 0..25 {
        spec.push_str(&format!(
            "  {{ name = \"spawn_agent\", arguments = {{ child_id = \"leaf\", input = \"leaf {i}\" }} }},\n"
        ));
    }
    spec.push_str(
        "]\n[[agents.lead.turns]]\nusage = { input_tokens = 20, output_tokens = 2 }\n\
         text = \"led\"\n\n[agents.leaf]\n[[agents.leaf.turns]]\ndelay_ms = 600\n\
         usage = { input_tokens = 3, output_tokens = 1 }\ntext = \"leaf done\"\n",
    );
    spec
}

/// Fails with what the database and the workers' logs say about a tree that did not end.
fn stuck(dir: &Path, pg: &Pg, workers: usize) -> ! {
    let logs: Vec<String> = (0..workers)
        .map(|n| {
            let log =
                std::fs::read_to_string(dir.join(format!("worker-{n}.log"))).unwrap_or_default();
            let tail: Vec<&str> = log.lines().rev().take(15).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            format!("worker {n}:\n{}", tail.join("\n"))
        })
        .collect();
    let run = std::fs::read_to_string(dir.join("run.log")).unwrap_or_default();
    panic!(
        "the tree did not end: runs {:?}\nowners {:?}\nrun:\n{run}\n{}",
        run_states(pg),
        run_owners(pg),
        logs.join("\n")
    );
}

/// The live claims (lease not run out) and the runs not ended, from the database.
async fn sample(pool: &sqlx::PgPool, schema: &str) -> (i64, i64) {
    let live: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{schema}\".child_runs WHERE state = 'claimed' AND \
         lease_until >= (EXTRACT(EPOCH FROM clock_timestamp()) * 1000)::BIGINT"
    )))
    .fetch_one(pool)
    .await
    .unwrap_or(0);
    let open: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "SELECT COUNT(*) FROM \"{schema}\".child_runs WHERE state IN ('queued', 'claimed')"
    )))
    .fetch_one(pool)
    .await
    .unwrap_or(-1);
    (live, open)
}

#[test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn four_workers_killed_at_random_never_run_more_than_max_active_children() {
    let Some(pg) = server("four_workers_killed_at_random") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/tree.toml"), wide_spec()).unwrap();
    let mut workers: Vec<Proc> = (0..4).map(|n| worker(dir.path(), &pg, n, "6")).collect();
    let mut next = 4;
    let run = start_tree(dir.path(), &pg);
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let pool = runtime.block_on(sqlx::PgPool::connect(&pg.url)).unwrap();
    // Sample while killing a random worker (and starting another) every 1.2 s.
    let (kills_wanted, mut rng) = chaos();
    let (mut peak, mut samples, mut kills) = (0i64, 0u32, 0u32);
    let mut last_kill = Instant::now();
    let mut run = Some(run);
    let start = Instant::now();
    let report = loop {
        let (live, _) = runtime.block_on(sample(&pool, &pg.schema));
        peak = peak.max(live);
        samples += 1;
        assert!(
            live <= 8,
            "{live} children live at once, over max_active_children = 8"
        );
        if let Some(r) = run.as_mut()
            && r.try_wait().unwrap().is_some()
        {
            break finish(
                run.take().unwrap(),
                &dir.path().join("run.log"),
                Duration::from_secs(1),
            );
        }
        if start.elapsed() > Duration::from_secs(120 + u64::from(kills_wanted)) {
            stuck(dir.path(), &pg, next);
        }
        if kills < kills_wanted && last_kill.elapsed() > Duration::from_millis(KILL_EVERY_MS) {
            rng ^= rng << 13;
            rng ^= rng >> 7;
            rng ^= rng << 17;
            let victim = usize::try_from(rng % 4).unwrap();
            workers[victim].kill().unwrap();
            workers[victim].wait().unwrap();
            workers[victim] = worker(dir.path(), &pg, next, "6");
            next += 1;
            kills += 1;
            last_kill = Instant::now();
        }
        std::thread::sleep(Duration::from_millis(25));
    };
    // Runs whose parent died with a killed worker still end; then nothing is left open.
    let drained = Instant::now();
    loop {
        let (live, open) = runtime.block_on(sample(&pool, &pg.schema));
        assert!(live <= 8);
        if open == 0 {
            break;
        }
        assert!(
            drained.elapsed() < Duration::from_secs(60),
            "{open} child runs never ended: a slot leaked"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for mut w in workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    let total: i64 = runtime
        .block_on(
            sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!(
                "SELECT COUNT(*) FROM \"{}\".child_runs",
                pg.schema
            )))
            .fetch_one(&pool),
        )
        .unwrap();
    eprintln!(
        "limits: {total} child runs, {kills} workers killed, peak {peak} live over {samples} \
         samples, {} s",
        start.elapsed().as_secs()
    );
    assert_eq!(report["status"], "succeeded", "{report}");
    assert!(peak >= 6, "the tree never filled its slots (peak {peak})");
    assert!(total > 4, "{total}");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    // A lead taken over waits again for the leaves its cut-off calls started: every leaf
    // that ran has its answer in its lead's transcript, none is orphaned.
    let sessions = tree["sessions"].as_array().unwrap();
    let (mut leaves_done, mut answers) = (0, 0);
    for lead in sessions.iter().filter(|s| s["parent_id"] == root.as_str()) {
        let id = lead["id"].as_str().unwrap();
        let done = sessions
            .iter()
            .filter(|s| s["parent_id"] == id && s["status"] == "succeeded")
            .count();
        let out = pg_support::arbor(dir.path(), &pg, &["log", id, "--json"]);
        let answered = String::from_utf8_lossy(&out.stdout)
            .lines()
            .map(|l| serde_json::from_str::<Value>(l).unwrap())
            .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
            .filter(|e| {
                serde_json::from_str::<Value>(e["message"]["content"].as_str().unwrap_or(""))
                    .is_ok_and(|a| a["status"] == "succeeded")
            })
            .count();
        assert_eq!(
            done, answered,
            "lead {id}: {done} leaves ran, {answered} answers read"
        );
        leaves_done += done;
        answers += answered;
    }
    eprintln!("limits: {leaves_done} leaves ran, {answers} answers reached their leads");
    // Every spawn of every lead ran exactly once: none lost to a worker killed before its
    // child registered (issued again on takeover), none registered twice.
    for lead in sessions.iter().filter(|s| s["parent_id"] == root.as_str()) {
        let id = lead["id"].as_str().unwrap();
        let leaves: Vec<&Value> = sessions.iter().filter(|s| s["parent_id"] == id).collect();
        assert_eq!(
            (leaves.len(), lead["status"].as_str()),
            (25, Some("succeeded")),
            "lead {id}: {} leaves registered: {tree}",
            leaves.len()
        );
    }
    assert!(
        kills >= kills_wanted.min(20),
        "only {kills} workers were killed"
    );
    drop(pool);
    drop_schema(&pg);
}

/// One column of every child run, oldest first, from the database.
fn runs_column(pg: &Pg, column: &str) -> Vec<String> {
    let (url, schema) = (pg.url.clone(), pg.schema.clone());
    let sql = format!("SELECT {column} FROM \"{schema}\".child_runs ORDER BY enqueued_at");
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
            .block_on(async move {
                let pool = sqlx::PgPool::connect(&url).await.unwrap();
                sqlx::query_scalar(sqlx::AssertSqlSafe(sql))
                    .fetch_all(&pool)
                    .await
                    .unwrap()
            })
    })
    .join()
    .unwrap()
}

/// The state of every child run.
fn run_states(pg: &Pg) -> Vec<String> {
    runs_column(pg, "state")
}

/// Who holds (or last held) each child run.
fn run_owners(pg: &Pg) -> Vec<String> {
    runs_column(pg, "COALESCE(owner, '')")
}

/// The id of the newest root (`arbor ls`).
fn newest_root(dir: &Path, pg: &Pg) -> String {
    let rows = json(dir, pg, &["ls", "--json"]);
    rows["roots"][0]["id"].as_str().unwrap().to_owned()
}

/// `arbor rm ROOT c1`, which must succeed.
fn delete_c1(dir: &Path, pg: &Pg, root: &str) {
    let out = pg_support::arbor(dir, pg, &["rm", root, "c1"]);
    assert!(
        out.status.success(),
        "rm: {}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The transcript entries (`arbor log --json`) of the first child of `root`.
fn first_childs_log(dir: &Path, pg: &Pg, root: &str) -> Vec<Value> {
    let tree = json(dir, pg, &["tree", root, "--json"]);
    let child = tree["sessions"][1]["id"].as_str().unwrap().to_owned();
    let out = pg_support::arbor(dir, pg, &["log", &child, "--json"]);
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// Starts a worker and a tree whose child counts slowly, and waits until the child is
/// mid-run on the worker.
fn counting_on_a_worker(dir: &Path, pg: &Pg) -> (Proc, Proc) {
    std::fs::create_dir(dir.join("specs")).unwrap();
    std::fs::write(dir.join("specs/tree.toml"), counter_spec(30)).unwrap();
    let w = worker(dir, pg, 1, "2");
    let run = start_tree(dir, pg);
    wait_until("the child mid-run", Duration::from_secs(60), || {
        lines(&dir.join("count.txt")).len() >= 2
    });
    (w, run)
}

/// Waits until the child's run ended on its worker (reported), and checks that nothing of
/// it runs afterwards; returns how long it took.
fn stops_on_its_worker(dir: &Path, pg: &Pg, from: Instant) -> Duration {
    wait_until(
        "the worker to stop the run",
        Duration::from_secs(10),
        || run_states(pg).first().is_some_and(|s| s != "claimed"),
    );
    let stopped = from.elapsed();
    let at_stop = lines(&dir.join("count.txt")).len();
    std::thread::sleep(Duration::from_millis(1200));
    assert_eq!(
        lines(&dir.join("count.txt")).len(),
        at_stop,
        "the run went on after it was reported stopped"
    );
    assert!(at_stop < 30, "it ran to its end instead");
    stopped
}

#[test]
fn cancelling_the_tree_stops_its_child_on_the_worker_within_a_heartbeat() {
    let Some(pg) = server("cancelling_the_tree_stops_its_child") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut w, mut run) = counting_on_a_worker(dir.path(), &pg);
    let cancelled = Instant::now();
    let sent = std::process::Command::new("kill")
        .args(["-INT", &run.id().to_string()])
        .status()
        .unwrap();
    assert!(sent.success());
    let took = stops_on_its_worker(dir.path(), &pg, cancelled);
    let status = run.wait().unwrap();
    assert_eq!(
        status.code(),
        Some(130),
        "a cancelled run exits 128 + SIGINT"
    );
    assert_eq!(
        run_states(&pg),
        ["failed"],
        "reported by the worker, as it ended"
    );
    w.kill().unwrap();
    w.wait().unwrap();
    eprintln!(
        "cancel: Ctrl-C to the run stopped on its worker in {} ms",
        took.as_millis()
    );
    // A heartbeat is a quarter of the 1,500 ms lease; the scripted turn in progress is 400 ms.
    assert!(took < Duration::from_millis(1500), "{took:?}");
    drop_schema(&pg);
}

#[test]
fn a_child_deleted_from_another_process_stops_on_its_worker_within_a_heartbeat() {
    let Some(pg) = server("a_child_deleted_from_another_process") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut w, mut run) = counting_on_a_worker(dir.path(), &pg);
    // The parent dies; its child goes on on the worker until someone deletes it.
    run.kill().unwrap();
    run.wait().unwrap();
    let root = newest_root(dir.path(), &pg);
    let deleted = Instant::now();
    delete_c1(dir.path(), &pg, &root);
    let took = stops_on_its_worker(dir.path(), &pg, deleted);
    w.kill().unwrap();
    w.wait().unwrap();
    eprintln!(
        "delete: arbor rm stopped the run on its worker in {} ms",
        took.as_millis()
    );
    assert!(took < Duration::from_millis(1500), "{took:?}");
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["sessions"][1]["deleted"], true, "{tree}");
    drop_schema(&pg);
}

#[test]
fn a_child_deleted_while_its_worker_is_dead_is_never_run_by_the_takeover() {
    let Some(pg) = server("a_child_deleted_while_its_worker_is_dead") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut w, mut run) = counting_on_a_worker(dir.path(), &pg);
    // The parent and the child's worker both die mid-run; the child is deleted meanwhile.
    for p in [&mut run, &mut w] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
    let at_kill = lines(&dir.path().join("count.txt")).len();
    let root = newest_root(dir.path(), &pg);
    delete_c1(dir.path(), &pg, &root);
    // Another worker claims the run once its lease runs out, and refuses to run it.
    let mut second = worker(dir.path(), &pg, 2, "2");
    wait_until(
        "the takeover to report the run",
        Duration::from_secs(15),
        || run_states(&pg).first().is_some_and(|s| s != "claimed"),
    );
    std::thread::sleep(Duration::from_millis(1200));
    second.kill().unwrap();
    second.wait().unwrap();
    assert_eq!(run_states(&pg), ["failed"]);
    assert_eq!(
        lines(&dir.path().join("count.txt")).len(),
        at_kill,
        "the deleted child ran again"
    );
    let log = std::fs::read_to_string(dir.path().join("worker-2.log")).unwrap();
    assert!(log.contains("taking over a run"), "{log}");
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["sessions"][1]["deleted"], true, "{tree}");
    let child = tree["sessions"][1]["id"].as_str().unwrap().to_owned();
    let out = pg_support::arbor(dir.path(), &pg, &["log", &child, "--json"]);
    let runs = String::from_utf8_lossy(&out.stdout)
        .lines()
        .filter(|l| l.contains("\"run_started\""))
        .count();
    assert_eq!(runs, 1, "no second run of a deleted child");
    drop_schema(&pg);
}

#[test]
fn a_message_sent_while_the_childs_worker_is_dead_reaches_the_takeover() {
    let Some(pg) = server("a_message_sent_while_the_childs_worker_is_dead") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let (mut w, mut run) = counting_on_a_worker(dir.path(), &pg);
    for p in [&mut run, &mut w] {
        p.kill().unwrap();
        p.wait().unwrap();
    }
    let root = newest_root(dir.path(), &pg);
    let sent = pg_support::arbor(
        dir.path(),
        &pg,
        &[
            "send",
            &root,
            "c1",
            "hello while you were away",
            "--no-wait",
        ],
    );
    assert!(
        sent.status.success(),
        "send: {}{}",
        String::from_utf8_lossy(&sent.stdout),
        String::from_utf8_lossy(&sent.stderr)
    );
    let mut second = worker(dir.path(), &pg, 2, "2");
    wait_until(
        "the takeover to end the run",
        Duration::from_secs(60),
        || run_states(&pg).first().is_some_and(|s| s != "claimed"),
    );
    second.kill().unwrap();
    second.wait().unwrap();
    let entries = first_childs_log(dir.path(), &pg, &root);
    let received = entries
        .iter()
        .find(|e| e["kind"] == "inbox_received")
        .unwrap_or_else(|| panic!("never stored: {entries:?}"));
    assert_eq!(received["message"]["text"], "hello while you were away");
    let id = received["message"]["id"].clone();
    let starts: Vec<usize> = entries
        .iter()
        .enumerate()
        .filter(|(_, e)| e["kind"] == "run_started")
        .map(|(i, _)| i)
        .collect();
    let kinds: Vec<String> = entries
        .iter()
        .map(|e| {
            format!(
                "{} {}",
                e["kind"].as_str().unwrap_or(""),
                e["run_id"].as_str().unwrap_or("").get(30..).unwrap_or("")
            )
        })
        .collect();
    assert_eq!(starts.len(), 2, "the cut run and the takeover: {kinds:#?}");
    let read_at = entries
        .iter()
        .position(|e| {
            e["kind"] == "inbox_read" && e["ids"].as_array().is_some_and(|ids| ids.contains(&id))
        })
        .unwrap_or_else(|| panic!("never read: {entries:?}"));
    assert!(read_at > starts[1], "read by the takeover: {entries:?}");
    assert_eq!(
        entries
            .iter()
            .filter(|e| e["kind"] == "inbox_read"
                && e["ids"].as_array().is_some_and(|ids| ids.contains(&id)))
            .count(),
        1,
        "read once"
    );
    drop_schema(&pg);
}

#[test]
fn a_message_to_a_child_on_a_worker_reaches_its_running_turns() {
    let Some(pg) = server("a_message_to_a_child_on_a_worker") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    let mut spec = String::from(
        "task = \"talk\"\nroot = \"root\"\n\n[agents.root]\nchildren = [\"listener\"]\n\
         [[agents.root.turns]]\ntool_calls = [{ name = \"spawn_agent\", arguments = { \
         child_id = \"listener\", name = \"listener\", mode = \"async\", input = \"listen\" } }]\n\
         [[agents.root.turns]]\ndelay_ms = 300\ntool_calls = [{ name = \"send_message\", \
         arguments = { to = \"listener\", text = \"hello from root\" } }]\n\
         [[agents.root.turns]]\ntool_calls = [{ name = \"wait_agent\", arguments = { \
         delegation_id = \"${call_1_1.delegation_id}\" } }]\n\
         [[agents.root.turns]]\ntext = \"root done\"\n\n\
         [agents.listener]\ntools = [\"echo\"]\n",
    );
    for i in 0..5 {
        spec.push_str(&format!(
            "[[agents.listener.turns]]\ndelay_ms = 500\ntool_calls = [{{ name = \"echo\", \
             arguments = {{ text = \"turn {i}\" }} }}]\n"
        ));
    }
    spec.push_str("[[agents.listener.turns]]\ntext = \"heard\"\n");
    std::fs::write(dir.path().join("specs/tree.toml"), spec).unwrap();
    let mut w = worker(dir.path(), &pg, 1, "2");
    let run = start_tree(dir.path(), &pg);
    let report = finish(run, &dir.path().join("run.log"), Duration::from_secs(60));
    w.kill().unwrap();
    w.wait().unwrap();
    assert_eq!(report["status"], "succeeded", "{report}");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let entries = first_childs_log(dir.path(), &pg, &root);
    let received = entries
        .iter()
        .find(|e| e["kind"] == "inbox_received")
        .unwrap_or_else(|| panic!("never delivered: {entries:?}"));
    assert_eq!(received["message"]["text"], "hello from root");
    let id = received["message"]["id"].clone();
    // Read by the run on the worker, before it ended: not by a later run here.
    let read_at = entries
        .iter()
        .position(|e| {
            e["kind"] == "inbox_read" && e["ids"].as_array().is_some_and(|ids| ids.contains(&id))
        })
        .unwrap_or_else(|| panic!("never read: {entries:?}"));
    let first_end = entries
        .iter()
        .position(|e| e["kind"] == "run_finished")
        .unwrap();
    assert!(
        read_at < first_end,
        "read after the worker's run ended: {entries:?}"
    );
    let runs = entries
        .iter()
        .filter(|e| e["kind"] == "run_started")
        .count();
    assert_eq!(runs, 1, "one run, on the worker");
    drop_schema(&pg);
}

#[test]
fn a_decision_taken_while_the_worker_is_dead_applies_when_another_worker_resumes() {
    let Some(pg) = server("a_decision_taken_while_the_worker_is_dead") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    let spec = "task = \"count\"\nroot = \"root\"\n\n[supervisor]\napprovals = true\n\n\
        [agents.root]\nchildren = [\"counter\"]\n[[agents.root.turns]]\n\
        usage = { input_tokens = 100, output_tokens = 10 }\ntool_calls = [{ name = \
        \"spawn_agent\", arguments = { child_id = \"counter\", name = \"c1\", input = \"count\" } }]\n\
        [[agents.root.turns]]\nusage = { input_tokens = 200, output_tokens = 20 }\n\
        text = \"root done\"\n\n[agents.counter]\ntools = [\"append_line\"]\n\
        [[agents.counter.turns]]\nusage = { input_tokens = 10, output_tokens = 1 }\n\
        tool_calls = [{ name = \"append_line\", arguments = { path = \"count.txt\", text = \
        \"approved line\" } }]\n[[agents.counter.turns]]\n\
        usage = { input_tokens = 20, output_tokens = 2 }\ntext = \"counted\"\n";
    std::fs::write(dir.path().join("specs/tree.toml"), spec).unwrap();
    let count = dir.path().join("count.txt");
    let mut first = worker(dir.path(), &pg, 1, "2");
    let run = start_tree(dir.path(), &pg);
    let mut run = run;
    let status = run.wait().unwrap();
    assert_eq!(status.code(), Some(4), "the tree waits for a decision");
    assert!(!count.exists(), "nothing ran before its approval");
    // The worker that ran the child dies; a person decides on another process.
    first.kill().unwrap();
    first.wait().unwrap();
    let waiting = json(dir.path(), &pg, &["approvals", "@latest", "--json"]);
    let id = waiting["suspensions"][0]["pending"][0]["id"]
        .as_str()
        .unwrap()
        .to_owned();
    assert_eq!(
        waiting["suspensions"][0]["pending"][0]["path"][0],
        "counter"
    );
    let approved = pg_support::arbor(dir.path(), &pg, &["approve", "@latest", &id]);
    assert!(approved.status.success());
    // Another worker resumes the child with the decision.
    let mut second = worker(dir.path(), &pg, 2, "2");
    let resumed = spawn(
        dir.path(),
        &pg,
        &["resume", "@latest", "--workers", "--json", "--no-input"],
        &dir.path().join("resume.log"),
    );
    let report = finish(
        resumed,
        &dir.path().join("resume.log"),
        Duration::from_secs(60),
    );
    let owners = run_owners(&pg);
    second.kill().unwrap();
    second.wait().unwrap();
    assert_eq!(report["status"], "succeeded", "{report}");
    assert_eq!(
        lines(&count),
        ["approved line"],
        "the approved effect, once"
    );
    assert_eq!(owners.len(), 1);
    assert!(
        owners[0].contains(&format!(":{}:", second.id())),
        "resumed by the second worker: {owners:?}"
    );
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    assert_eq!(tree["sessions"][1]["status"], "succeeded");
    drop_schema(&pg);
}

const REVIEW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml");

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbor_serve_hands_its_trees_children_to_workers() {
    let Some(pg) = server("arbor_serve_hands_its_trees_children_to_workers") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::copy(REVIEW, dir.path().join("specs/review.toml")).unwrap();
    let mut w = worker(dir.path(), &pg, 1, "4");
    let served = serve_support::serve_env(
        dir.path(),
        &["--workers"],
        &[
            ("ARBOR_STORE_URL", pg.url.as_str()),
            ("ARBOR_STORE_SCHEMA", pg.schema.as_str()),
        ],
    );
    let http = serve_support::client();
    let root = serve_support::start_run(&http, &served.base, "review").await;
    let run = serve_support::status_becomes(&http, &served.base, &root, "succeeded").await;
    drop(served);
    let owners = run_owners(&pg);
    let states = run_states(&pg);
    w.kill().unwrap();
    w.wait().unwrap();
    // The example's totals, as when its children run in the server.
    let sessions = run["tree"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 5, "{run}");
    assert_eq!(sessions[0]["usage"]["aggregate"]["total_tokens"], 740_000);
    // Its four children (a grandchild among them) ran on the worker.
    assert_eq!(states, ["done"; 4], "{states:?}");
    let pid = format!(":{}:", w.id());
    assert!(owners.iter().all(|o| o.contains(&pid)), "{owners:?}");
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    drop_schema(&pg);
}
