//! `--big-store N`: what the `arbor` commands cost on a store that holds many finished trees.
//!
//! A command's memory and start-up time must not grow with the number of finished trees the
//! store holds (issue 34: a crash sweep that loaded every tree made `arbor ls` take 430 MB on
//! a store of 65,793 sessions). This seeds a SQLite store with `N` sessions (trees of a root
//! and four children, finished, each with a short transcript and the definition a real root
//! keeps, owned by a process that is gone), and a store with one such tree, then runs the
//! `arbor` binary next to this program on each: `ls`, `tree` of the newest root, and a small
//! `run` (the four-child review tree). Each command's peak resident memory (read from
//! `/proc/PID/status` while it runs) and wall time are compared with the small store's: the
//! check fails when a command needs more than [`MAX_EXTRA_MB`] more memory or
//! [`MAX_SLOWER`] times the time (plus [`SLACK_MS`]) on the big store.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use arbor_protocol::{EntryKind, Message, RunId, RunStatus, SessionStatus, StopReason, Usage};
use arbor_store::{SessionRecord, SessionUpdate, Store};
use arbor_store_sqlite::SqliteStore;

/// The most a command's peak memory may grow from the small store to the big one, in MB.
pub(crate) const MAX_EXTRA_MB: f64 = 8.0;
/// The most a command may slow down from the small store to the big one (a factor)...
pub(crate) const MAX_SLOWER: f64 = 3.0;
/// ...plus this much, in milliseconds (a process start varies by a few).
pub(crate) const SLACK_MS: f64 = 150.0;
/// Sessions per seeded tree: a root and four children.
const PER_TREE: u64 = 5;

const REVIEW: &str = include_str!("../../../examples/review.toml");

/// One command measured on both stores.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Measured {
    pub(crate) command: String,
    pub(crate) small_mb: f64,
    pub(crate) big_mb: f64,
    pub(crate) small_ms: f64,
    pub(crate) big_ms: f64,
}

impl Measured {
    /// Whether the big store stays within the bounds.
    pub(crate) fn ok(&self) -> bool {
        self.big_mb - self.small_mb <= MAX_EXTRA_MB
            && self.big_ms <= self.small_ms * MAX_SLOWER + SLACK_MS
    }
}

/// The `arbor` binary beside this program (`target/<profile>/arbor`).
fn arbor_binary() -> Result<PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let path = exe.with_file_name("arbor");
    if path.exists() {
        Ok(path)
    } else {
        Err(format!(
            "--big-store runs the arbor binary beside this program, and there is none at {} \
             (cargo build -p arbor-cli first, in the same profile)",
            path.display()
        ))
    }
}

/// A root record as `arbor run` leaves it: its definition (the spec's text) and the owner
/// lease of a process that is gone.
fn finished_root() -> SessionRecord {
    let mut root = SessionRecord::new_root("root", "root", "scripted");
    root.status = SessionStatus::Succeeded;
    root.meta = serde_json::json!({
        "definition": {"path": "review.toml", "spec": REVIEW, "fingerprint": "seeded"},
        "owner": {"pid": 1, "start": 1, "host": "gone.example", "renewed_ms": 1, "lease_ms": 1},
    })
    .into();
    root
}

/// Seeds `path` with `sessions` sessions of finished trees (rounded up to whole trees).
async fn seed(path: &Path, sessions: u64) -> Result<(), String> {
    let e = |e: arbor_store::StoreError| e.to_string();
    let store = SqliteStore::open(path).map_err(e)?;
    let usage = Usage::new(10, 5);
    for _ in 0..sessions.div_ceil(PER_TREE) {
        let root = finished_root();
        store.create_session(&root).await.map_err(e)?;
        for i in 0..PER_TREE - 1 {
            let mut child = SessionRecord::new_root(format!("child-{i}"), "worker", "scripted");
            child.parent_id = Some(root.id);
            child.root_id = root.id;
            child.depth = 1;
            child.status = SessionStatus::Succeeded;
            child.meta = serde_json::json!({"child_id": "worker", "mode": "sync"}).into();
            store.create_session(&child).await.map_err(e)?;
            let run = RunId::new();
            let entries = [
                EntryKind::Message {
                    message: Message::user("Review the part you were given."),
                },
                EntryKind::Message {
                    message: Message::assistant("Reviewed: nothing to change."),
                },
                EntryKind::RunFinished {
                    status: RunStatus::Succeeded,
                    stop_reason: StopReason::Completed,
                    usage,
                    breach: None,
                    error: None,
                },
            ];
            let update = SessionUpdate {
                own_usage: Some(usage),
                ..SessionUpdate::default()
            };
            store
                .append(child.id, run, &entries, Some(&update))
                .await
                .map_err(e)?;
        }
    }
    Ok(())
}

/// Runs `arbor ARGS` in `dir`: its peak resident memory (MB) and wall time (ms).
fn measure(arbor: &Path, dir: &Path, args: &[&str]) -> Result<(f64, f64), String> {
    let started = Instant::now();
    let mut child = Command::new(arbor)
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot start arbor: {e}"))?;
    let status_path = format!("/proc/{}/status", child.id());
    let mut peak_kib = 0u64;
    let status = loop {
        if let Ok(text) = std::fs::read_to_string(&status_path)
            && let Some(kib) = text
                .lines()
                .find_map(|l| l.strip_prefix("VmHWM:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        {
            peak_kib = peak_kib.max(kib);
        }
        if let Some(status) = child.try_wait().map_err(|e| e.to_string())? {
            break status;
        }
        std::thread::sleep(Duration::from_millis(1));
    };
    let elapsed = started.elapsed();
    if !status.success() {
        let mut err = String::new();
        if let Some(mut e) = child.stderr.take() {
            let _ = std::io::Read::read_to_string(&mut e, &mut err);
        }
        return Err(format!("arbor {args:?} failed: {}", err.trim()));
    }
    Ok((peak_kib as f64 / 1024.0, elapsed.as_secs_f64() * 1000.0))
}

/// Seeds both stores and measures each command on both.
pub(crate) fn run(sessions: u64) -> Result<Vec<Measured>, String> {
    let arbor = arbor_binary()?;
    let small = tempfile::tempdir().map_err(|e| e.to_string())?;
    let big = tempfile::tempdir().map_err(|e| e.to_string())?;
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    for (dir, n) in [(small.path(), PER_TREE), (big.path(), sessions)] {
        std::fs::create_dir(dir.join(".arbor")).map_err(|e| e.to_string())?;
        rt.block_on(seed(&dir.join(".arbor/arbor.db"), n))?;
        std::fs::write(dir.join("review.toml"), REVIEW).map_err(|e| e.to_string())?;
    }
    let commands: [&[&str]; 3] = [&["ls"], &["tree"], &["run", "review.toml", "-q"]];
    let mut out = Vec::new();
    for args in commands {
        // Once each first, so neither store is measured cold.
        measure(&arbor, small.path(), args)?;
        measure(&arbor, big.path(), args)?;
        let (small_mb, small_ms) = measure(&arbor, small.path(), args)?;
        let (big_mb, big_ms) = measure(&arbor, big.path(), args)?;
        out.push(Measured {
            command: format!("arbor {}", args.join(" ")),
            small_mb,
            big_mb,
            small_ms,
            big_ms,
        });
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_is_within_bounds_only_when_it_does_not_grow() {
        let m = |big_mb, big_ms| Measured {
            command: "arbor ls".into(),
            small_mb: 10.0,
            big_mb,
            small_ms: 20.0,
            big_ms,
        };
        assert!(m(17.9, 200.0).ok());
        assert!(!m(18.1, 20.0).ok());
        assert!(!m(10.0, 211.0).ok());
    }
}
