//! `arbor tree` on large trees: the output is streamed (memory bounded by the tree's depth and
//! fan-out, not its size) and keeps the form it always had.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use arbor_core::registry::SessionView;
use arbor_protocol::SessionStatus;
use arbor_store::{SessionQuery, SessionRecord, Store};
use arbor_store_sqlite::SqliteStore;
use serde_json::{Value, json};

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
        .block_on(f)
}

/// A tree of `fanout` children per session over `levels` levels below the root, created in
/// depth-first order (so creation order and tree order agree), with a few kinds of rows: a
/// finished child, a message-mode child that never replied (silent). Returns the root.
async fn build(store: &SqliteStore, fanout: usize, levels: u32) -> SessionRecord {
    let mut root = SessionRecord::new_root("root", "root", "scripted");
    root.status = SessionStatus::Succeeded;
    root.meta = json!({"owner": {"pid": std::process::id(), "start": null}}).into();
    store.create_session(&root).await.unwrap();
    let mut stack: Vec<(SessionRecord, usize)> = vec![(root.clone(), 0)];
    let mut made = 0u64;
    while let Some((parent, next)) = stack.pop() {
        if next == fanout || parent.depth == levels {
            continue;
        }
        stack.push((parent.clone(), next + 1));
        made += 1;
        let name = format!("kid-{next}");
        let mut kid = SessionRecord::new_child(&parent, &name, "worker", "scripted");
        kid.status = match made % 3 {
            0 => SessionStatus::Succeeded,
            1 => SessionStatus::Failed,
            _ => SessionStatus::Aborted,
        };
        if made.is_multiple_of(7) {
            kid.status = SessionStatus::Succeeded;
            kid.meta = json!({"mode": "message", "child_id": "worker", "lifetime": "task"}).into();
        }
        kid.context_tokens = made * 1_000;
        store.create_session(&kid).await.unwrap();
        stack.push((kid, 0));
    }
    root
}

/// `arbor tree --json` as it was written before it was streamed: the whole tree in memory.
async fn old_json(store: &SqliteStore, root: &SessionRecord) -> String {
    let sessions = store
        .list_sessions(SessionQuery::Tree(root.id))
        .await
        .unwrap();
    let check = arbor_core::process::usage::reconcile(store, root.id)
        .await
        .unwrap();
    let rows: Vec<Value> = sessions
        .iter()
        .map(|s| serde_json::to_value(SessionView::of(s)).unwrap())
        .collect();
    json!({
        "root_session_id": root.id,
        "sessions": rows,
        "silent_children": arbor_core::registry::silent_count(&sessions),
        "reconciliation": {
            "consistent": check.is_consistent(),
            "own_total_tokens": check.own_total_tokens,
            "root_aggregate_tokens": check.root_aggregate_tokens,
            "own_total_cost_micros": check.own_total_cost,
            "root_aggregate_cost_micros": check.root_aggregate_cost,
        },
    })
    .to_string()
}

/// The peak resident memory of `arbor ARGS` in KiB, by `/usr/bin/time` (`None` without it).
fn peak_kib(dir: &Path, args: &[&str]) -> Option<u64> {
    let time = Path::new("/usr/bin/time");
    if !time.exists() {
        return None;
    }
    let out = Command::new(time)
        .args(["-f", "%M", env!("CARGO_BIN_EXE_arbor")])
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .stdout(std::process::Stdio::null())
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8_lossy(&out.stderr)
        .lines()
        .last()?
        .trim()
        .parse()
        .ok()
}

#[test]
fn a_tree_of_thousands_streams_in_the_old_form() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("big.db");
    let store = SqliteStore::open(&db).unwrap();
    let (root, expected) = block_on(async {
        let root = build(&store, 45, 2).await;
        let expected = old_json(&store, &root).await;
        (root, expected)
    });
    drop(store);
    let id = root.id.to_string();

    let out = arbor(dir.path(), &["tree", &id, "--json", "--store", "big.db"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let parsed: Value = serde_json::from_str(&text).unwrap();
    assert_eq!(
        parsed["sessions"].as_array().unwrap().len(),
        1 + 45 + 45 * 45
    );
    assert_eq!(text, format!("{expected}\n"));

    // The table: a header, one row per session in tree order (indented by depth), a total.
    let out = arbor(dir.path(), &["tree", &id, "--store", "big.db"]);
    assert!(out.status.success());
    let table = String::from_utf8(out.stdout).unwrap();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 1 + 2071 + 1);
    assert!(lines[0].starts_with("session  "), "{}", lines[0]);
    let rows = parsed["sessions"].as_array().unwrap();
    let name_width = rows
        .iter()
        .map(|r| 2 * r["depth"].as_u64().unwrap() as usize + r["name"].as_str().unwrap().len())
        .max()
        .unwrap();
    for (line, row) in lines[1..=rows.len()].iter().zip(rows) {
        let depth = row["depth"].as_u64().unwrap() as usize;
        let indented = format!("{}{}", "  ".repeat(depth), row["name"].as_str().unwrap());
        assert!(
            line.starts_with(&format!("{indented:<name_width$}  ")),
            "{line}"
        );
        let cells: Vec<&str> = line.split_whitespace().collect();
        assert_eq!(cells.len(), 8, "{line}");
        assert_eq!(cells[2], depth.to_string());
        assert_eq!(cells[3], row["status"].as_str().unwrap());
    }
    assert_eq!(
        lines.last().unwrap(),
        &"tree own total 0 tokens, root aggregate 0 tokens"
    );

    // Streamed: writing the tree costs about what listing the roots costs (which opens the
    // store and sweeps it), not a copy of the tree (held whole, it took 20 MiB more).
    let baseline = peak_kib(dir.path(), &["ls", "--store", "big.db"]);
    let tree = peak_kib(dir.path(), &["tree", &id, "--json", "--store", "big.db"]);
    match (baseline, tree) {
        (Some(baseline), Some(tree)) => assert!(
            tree < baseline + 8 * 1024,
            "tree --json peaked at {tree} KiB, ls at {baseline} KiB"
        ),
        _ => eprintln!("no /usr/bin/time: memory not measured"),
    }
}

/// Writes a large store for measuring `arbor tree` (not run by default):
/// `ARBOR_BIG_STORE=/tmp/big.db ARBOR_BIG_FANOUT=256 cargo test -p arbor-cli --test big_tree
/// -- --ignored --nocapture` makes 1 + 256 + 256² = 65,793 sessions and prints the root.
#[test]
#[ignore = "writes a large store for measurements"]
fn generate_a_big_store() {
    let path = std::env::var("ARBOR_BIG_STORE").unwrap();
    let fanout: usize = std::env::var("ARBOR_BIG_FANOUT")
        .ok()
        .and_then(|f| f.parse().ok())
        .unwrap_or(256);
    let store = SqliteStore::open(&path).unwrap();
    let root = block_on(build(&store, fanout, 2));
    println!("root {}", root.id);
}
