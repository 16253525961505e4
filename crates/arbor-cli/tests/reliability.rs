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
    root.meta = json!({"owner": dead_owner()});
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
