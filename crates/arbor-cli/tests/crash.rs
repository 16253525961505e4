//! The crash harness: SIGKILL at random points of a tree with async and message-mode
//! children and a child whose tool call waits for a durable approval, during `run`,
//! `resume` (after an approval, and of a tree a crash interrupted), `send` and `rm`.
//!
//! After each kill, new processes must: open the store, find every record the killed process
//! had reported as stored on its stderr (or stdout), reconcile the token totals, leave no
//! session `running`, and then drive the tree to completion with `arbor approve` and
//! `arbor resume`, with the approved side effect (an `echo`) executed at most once.
//!
//! The kill points come from a seeded xorshift generator over a fixed list of seeds, so a
//! failure names its seed and can be replayed: `ARBOR_CRASH_SEEDS=7,12 cargo test -p
//! arbor-cli --test crash` runs only those seeds; `ARBOR_CRASH_ROUNDS=200` adds that many
//! more seeds for a longer soak; `ARBOR_CRASH_VERBOSE=1` prints every transcript after each
//! kill (with `-- --nocapture`).
// The harness prints its seeds and figures on stderr (shown with --nocapture or on failure).
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::print_stderr,
    missing_docs
)]
#![cfg(unix)]

#[allow(dead_code)]
mod crash_support;

use std::collections::HashSet;
use std::path::Path;
use std::time::Instant;

use crash_support::{
    Killed, Rng, arbor, echo_effects, json, killed_command, log_entries, pending, root_row,
    sessions,
};
use serde_json::Value;

/// The tree: the root spawns `notes` (message mode: its reply to the root waits for an
/// approval nobody's run carries, then wakes the root again) and `worker` (async), then
/// `publisher` (sync), whose `echo` waits for an approval, then waits on the worker and
/// answers. Every turn takes a while, so kills land inside runs.
const TREE: &str = r#"
task = "crash me"
root = "root"

[supervisor]
approvals = true

[agents.root]
children = ["notes", "worker", "publisher"]
repeat_last = true
[[agents.root.turns]]
delay_ms = 50
usage = { input_tokens = 100, output_tokens = 1 }
tool_calls = [
  { name = "spawn_agent", arguments = { child_id = "notes", name = "notes", mode = "message", input = "take notes" } },
  { name = "spawn_agent", arguments = { child_id = "worker", name = "worker", mode = "async", input = "work" } },
]
[[agents.root.turns]]
delay_ms = 50
usage = { input_tokens = 200, output_tokens = 2 }
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "publisher", name = "publisher", input = "publish" } }]
[[agents.root.turns]]
delay_ms = 50
usage = { input_tokens = 300, output_tokens = 3 }
tool_calls = [{ name = "wait_agent", arguments = { delegation_id = "${call_1_2.delegation_id}" } }]
[[agents.root.turns]]
delay_ms = 40
usage = { input_tokens = 400, output_tokens = 4 }
text = "done"

[agents.notes]
repeat_last = true
[[agents.notes.turns]]
delay_ms = 60
usage = { input_tokens = 10, output_tokens = 1 }
tool_calls = [{ name = "send_message", arguments = { to = "parent", text = "notes taken" } }]
[[agents.notes.turns]]
delay_ms = 30
usage = { input_tokens = 5, output_tokens = 1 }
text = "noted"

[agents.worker]
[[agents.worker.turns]]
delay_ms = 90
usage = { input_tokens = 20, output_tokens = 2 }
text = "worked"

[agents.publisher]
tools = ["echo"]
[[agents.publisher.turns]]
delay_ms = 40
usage = { input_tokens = 30, output_tokens = 3 }
tool_calls = [{ name = "echo", arguments = { text = "EFFECT published" } }]
[[agents.publisher.turns]]
delay_ms = 60
usage = { input_tokens = 40, output_tokens = 4 }
text = "published"
"#;

/// The seeds CI runs: each is one round (its kind is chosen from the seed).
const SEEDS: &[u64] = &[
    1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20,
];

/// What a round kills.
#[derive(Debug, Clone, Copy)]
enum Kind {
    /// `arbor run` of a new tree.
    Run,
    /// `arbor resume` after the pending call was approved.
    ApproveResume,
    /// `arbor send` to the message-mode child of a finished tree.
    Send,
    /// `arbor rm` of a child of the suspended tree.
    Rm,
    /// `arbor run`, then the `arbor resume` that continues the crashed tree.
    RunThenResume,
}

const KINDS: [Kind; 5] = [
    Kind::Run,
    Kind::ApproveResume,
    Kind::Send,
    Kind::Rm,
    Kind::RunThenResume,
];

/// What one round did, for the figures.
#[derive(Debug, Default)]
struct Tally {
    kills: usize,
    finished_before_kill: usize,
    resumes: usize,
    known_defect: usize,
}

/// What was stored before the killed command started.
#[derive(Debug, Default)]
struct Before {
    root_own_tokens: u64,
    root_runs_finished: usize,
}

fn before(dir: &Path, root: Option<&str>) -> Before {
    let Some(root) = root else {
        return Before::default();
    };
    let tree = json(dir, &["tree", root, "--json"]);
    Before {
        root_own_tokens: root_row(&tree)["usage"]["own"]["total_tokens"]
            .as_u64()
            .unwrap(),
        root_runs_finished: runs_finished(dir, root),
    }
}

fn runs_finished(dir: &Path, root: &str) -> usize {
    log_entries(dir, root)
        .iter()
        .filter(|e| e["kind"] == "run_finished")
        .count()
}

/// Checks, with new processes, what a killed command leaves; returns the root (None when
/// the kill came before a root was stored, which its stderr must agree with).
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
fn check_after_kill(
    dir: &Path,
    root: Option<&str>,
    killed: &Killed,
    before: &Before,
) -> Option<String> {
    let lines = &killed.stderr;
    // The store opens (unless the kill came before it was created: then nothing was said).
    let out = arbor(dir, &["ls", "--json"]);
    if out.status.code() == Some(2) && root.is_none() {
        assert!(
            String::from_utf8_lossy(&out.stderr).contains("no store at"),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        assert!(lines.is_empty(), "reported {lines:#?} but no store");
        return None;
    }
    assert!(
        out.status.success(),
        "the store must open after a kill: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let roots: Value = serde_json::from_slice(&out.stdout).unwrap();
    let reported_root = lines.iter().find_map(|l| {
        l.strip_prefix("root: run started (")
            .and_then(|r| r.split("session ").nth(1))
            .map(|s| s.trim_end_matches(')').to_owned())
    });
    let root = match (root, &reported_root) {
        (Some(r), _) => r.to_owned(),
        (None, Some(r)) => r.clone(),
        (None, None) => match roots["roots"].as_array().unwrap().first() {
            Some(r) => r["id"].as_str().unwrap().to_owned(),
            None => return None,
        },
    };
    if let Some(r) = &reported_root {
        assert_eq!(r, &root, "the reported root is the tree's root");
    }
    let listed = roots["roots"]
        .as_array()
        .unwrap()
        .iter()
        .any(|r| r["id"] == root.as_str());
    assert!(listed, "root {root} reported but not listed: {roots}");

    let tree = json(dir, &["tree", &root, "--json"]);
    assert_eq!(
        tree["reconciliation"]["consistent"], true,
        "totals reconcile after the kill: {tree}"
    );
    let rows = sessions(&tree);
    for row in &rows {
        assert_ne!(
            row["status"], "running",
            "a dead process's run is swept: {tree}"
        );
    }
    // Every turn the root reported is in its own usage.
    let reported_tokens: u64 = lines
        .iter()
        .filter_map(|l| l.strip_prefix("root: turn "))
        .map(|rest| {
            let after = rest.split_once(": ").unwrap().1;
            after
                .split(' ')
                .next()
                .unwrap()
                .replace(',', "")
                .parse::<u64>()
                .unwrap()
        })
        .sum();
    let own = root_row(&tree)["usage"]["own"]["total_tokens"]
        .as_u64()
        .unwrap();
    assert!(
        own >= before.root_own_tokens + reported_tokens,
        "root own {own} < {} stored before + {reported_tokens} reported: {lines:#?}",
        before.root_own_tokens
    );
    // Every run the root reported finished has its record.
    let finished = lines
        .iter()
        .filter(|l| l.starts_with("root: run ") && !l.starts_with("root: run started"))
        .count();
    let stored = runs_finished(dir, &root);
    assert!(
        stored >= before.root_runs_finished + finished,
        "{stored} run_finished < {} + {finished} reported: {lines:#?}",
        before.root_runs_finished
    );
    // Every delegation reported succeeded is stored with at least its tokens.
    for line in lines {
        let Some((child, rest)) = line.trim().split_once(": delegation succeeded, ") else {
            continue;
        };
        let tokens: u64 = rest
            .trim_end_matches(" tokens")
            .replace(',', "")
            .parse()
            .unwrap();
        let found = rows.iter().any(|r| {
            r["child_id"] == child && r["usage"]["own"]["total_tokens"].as_u64().unwrap() >= tokens
        });
        assert!(found, "{line:?} reported but not stored: {tree}");
    }
    // A suspension reported is listed with as many pending calls (and those of message-mode
    // children that wait beside it).
    if let Some(n) = lines.iter().find_map(|l| {
        l.strip_prefix("root: suspended, waiting for ")
            .map(|r| r.split(' ').next().unwrap().parse::<usize>().unwrap())
    }) {
        let waiting = pending(dir, &root);
        assert!(waiting.len() >= n, "{waiting:?}: {lines:#?}");
    }
    // What `rm --json` and `send --json` printed is stored.
    if let Ok(printed) = serde_json::from_str::<Value>(killed.stdout.trim()) {
        if let Some(t) = printed.get("tombstone") {
            let id = printed["session_id"].as_str().unwrap();
            let all = json(dir, &["ls", &root, "--deleted", "--json"]);
            let row = all["children"]
                .as_array()
                .unwrap()
                .iter()
                .find(|r| r["id"] == id)
                .unwrap_or_else(|| panic!("{id} deleted but not stored: {all}"));
            assert_eq!(row["tombstone"]["at"], t["at"], "{all}");
        }
        if let Some(child) = printed.get("child") {
            let id = child["id"].as_str().unwrap();
            let row = rows.iter().find(|r| r["id"] == id).unwrap();
            assert!(
                row["usage"]["own"]["total_tokens"].as_u64()
                    >= child["usage"]["own"]["total_tokens"].as_u64(),
                "{printed} vs {tree}"
            );
        }
    }
    Some(root)
}

/// Approves what waits and resumes until nothing can go on; returns how many resumes ran.
/// With `kill_first`, the first resume is itself killed (and checked like any kill).
fn drive_to_completion(
    dir: &Path,
    root: &str,
    rng: &mut Rng,
    approved: &mut HashSet<String>,
    tally: &mut Tally,
    kill_first: bool,
) {
    let mut kill = kill_first;
    for _ in 0..8 {
        for (id, tool) in pending(dir, root) {
            let out = arbor(dir, &["approve", root, &id]);
            assert!(
                out.status.success(),
                "approve {id}: {}",
                String::from_utf8_lossy(&out.stderr)
            );
            if tool == "echo" {
                approved.insert(id);
            }
        }
        if std::mem::take(&mut kill) {
            let before = before(dir, Some(root));
            let killed = killed_command(dir, &["resume", root], rng, 300, 10);
            tally.kills += usize::from(killed.killed);
            check_after_kill(dir, Some(root), &killed, &before);
            continue;
        }
        let out = arbor(dir, &["resume", root, "--json"]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        tally.resumes += 1;
        eprintln!("  resume exited {:?}: {}", out.status.code(), stderr.trim());
        match out.status.code() {
            Some(0 | 1 | 4) => {}
            Some(2) if stderr.contains("nothing to resume") => return,
            code => panic!("resume exited {code:?}: {stderr}"),
        }
    }
    panic!("the tree of {root} was not done after 8 resumes");
}

/// The tree is done: nothing runs or waits, the totals reconcile, and the approved effect
/// ran at most once per approval. Returns how many sessions showed the known core defect
/// (tolerated, and counted, until arbor-core fixes it).
fn check_done(dir: &Path, root: &str, approved: &HashSet<String>) -> usize {
    let tree = json(dir, &["tree", root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    // No known defect is tolerated any more (the orphaned nested suspension is fixed).
    let known = 0;
    for row in sessions(&tree) {
        assert!(
            row["status"] != "running" && row["status"] != "suspended",
            "left {}: {tree}",
            row["status"]
        );
        let id = row["id"].as_str().unwrap();
        assert!(pending(dir, id).is_empty(), "{id} still waits: {tree}");
    }
    let effects = echo_effects(dir, &tree);
    for (session, n) in &effects {
        assert!(*n <= 1, "the approved echo ran {n} times in {session}");
    }
    let total: usize = effects.iter().map(|(_, n)| n).sum();
    assert!(
        total <= approved.len(),
        "{total} effects for {} approvals",
        approved.len()
    );
    known
}

/// Runs the tree until it suspends (unkilled); returns its root.
fn run_to_suspension(dir: &Path, approved: &mut HashSet<String>, approve: bool) -> String {
    let out = arbor(dir, &["run", "tree.toml", "--json", "-q"]);
    assert_eq!(
        out.status.code(),
        Some(4),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).unwrap();
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    if approve {
        for (id, tool) in pending(dir, &root) {
            assert!(arbor(dir, &["approve", &root, &id]).status.success());
            if tool == "echo" {
                approved.insert(id);
            }
        }
    }
    root
}

fn round(seed: u64, tally: &mut Tally) {
    let mut rng = Rng::new(seed);
    let kind = KINDS[rng.below(KINDS.len() as u64) as usize];
    let dir = tempfile::tempdir().unwrap();
    let dir = dir.path();
    std::fs::write(dir.join("tree.toml"), TREE).unwrap();
    let mut approved = HashSet::new();
    let (root, before, killed) = match kind {
        Kind::Run | Kind::RunThenResume => {
            let k = killed_command(dir, &["run", "tree.toml"], &mut rng, 260, 12);
            (None, Before::default(), k)
        }
        Kind::ApproveResume => {
            let root = run_to_suspension(dir, &mut approved, true);
            let b = before(dir, Some(&root));
            let k = killed_command(dir, &["resume", &root], &mut rng, 320, 8);
            (Some(root), b, k)
        }
        Kind::Send => {
            let root = run_to_suspension(dir, &mut approved, true);
            let out = arbor(dir, &["resume", &root, "--json"]);
            assert!(
                out.status.success(),
                "{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let b = before(dir, Some(&root));
            let args = ["send", &root, "notes", "more", "--json"];
            let k = killed_command(dir, &args, &mut rng, 260, 0);
            (Some(root), b, k)
        }
        Kind::Rm => {
            let approve = rng.below(2) == 0;
            let root = run_to_suspension(dir, &mut approved, approve);
            let b = before(dir, Some(&root));
            let name = ["notes", "worker", "publisher"][rng.below(3) as usize];
            let k = killed_command(dir, &["rm", &root, name, "--json"], &mut rng, 90, 0);
            (Some(root), b, k)
        }
    };
    tally.kills += usize::from(killed.killed);
    tally.finished_before_kill += usize::from(!killed.killed);
    eprintln!(
        "seed {seed}: {kind:?}, killed {} ({}), {} line(s) said",
        killed.killed,
        killed.point,
        killed.stderr.len()
    );
    let Some(root) = check_after_kill(dir, root.as_deref(), &killed, &before) else {
        return;
    };
    let tree = json(dir, &["tree", &root, "--json"]);
    let statuses: Vec<String> = sessions(&tree)
        .iter()
        .map(|s| format!("{} {}", s["name"], s["status"]))
        .collect();
    eprintln!("  after the kill: {}", statuses.join(", "));
    if std::env::var_os("ARBOR_CRASH_VERBOSE").is_some() {
        eprintln!("  the killed command said: {:#?}", killed.stderr);
        for row in sessions(&tree) {
            let id = row["id"].as_str().unwrap();
            eprintln!(
                "  log of {}: {}",
                row["name"],
                String::from_utf8_lossy(&arbor(dir, &["log", id]).stdout)
            );
            eprintln!(
                "  approvals of {}: {}",
                row["name"],
                String::from_utf8_lossy(&arbor(dir, &["approvals", id, "--json"]).stdout)
            );
        }
    }
    let kill_resume = matches!(kind, Kind::RunThenResume);
    drive_to_completion(dir, &root, &mut rng, &mut approved, tally, kill_resume);
    tally.known_defect += check_done(dir, &root, &approved);
}

#[test]
fn sigkill_at_random_points_loses_nothing_reported_and_the_tree_finishes() {
    let mut seeds: Vec<u64> = match std::env::var("ARBOR_CRASH_SEEDS") {
        Ok(list) => list.split(',').map(|s| s.trim().parse().unwrap()).collect(),
        Err(_) => SEEDS.to_vec(),
    };
    if let Ok(more) = std::env::var("ARBOR_CRASH_ROUNDS") {
        let n: u64 = more.parse().unwrap();
        seeds.extend((0..n).map(|i| 1000 + i));
    }
    let started = Instant::now();
    let mut tally = Tally::default();
    for seed in &seeds {
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            round(*seed, &mut tally);
        }));
        if let Err(e) = result {
            let msg = e
                .downcast_ref::<String>()
                .cloned()
                .or_else(|| e.downcast_ref::<&str>().map(|s| (*s).to_owned()))
                .unwrap_or_default();
            panic!("crash round with seed {seed} failed (replay: ARBOR_CRASH_SEEDS={seed}): {msg}");
        }
    }
    eprintln!(
        "crash harness: {} rounds, {} kills ({} commands finished before their kill), {} resumes, \
         {} known core defect(s) seen, {:?}",
        seeds.len(),
        tally.kills,
        tally.finished_before_kill,
        tally.resumes,
        tally.known_defect,
        started.elapsed()
    );
    assert!(
        tally.kills >= seeds.len() / 2,
        "most rounds must kill something"
    );
}
