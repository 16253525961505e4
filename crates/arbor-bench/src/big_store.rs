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
//!
//! It also builds a wide tree (a root, `F` children, `F` grandchildren each: `F` is the
//! square root of `N`, at most [`MAX_FANOUT`]) with `arbor run --json` and compares its peak
//! memory with a tree of fanout 4: building a tree costs what its run holds live and what its
//! report prints, not the tree held whole (issue 34: the end-of-run report loaded every
//! record twice, 970 MB for 65,793 sessions). Its time is not judged (it grows with the tree).

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
/// What building a wider tree may cost per session, in KB, beyond [`MAX_EXTRA_MB`]: its
/// report's lines and the root's transcript (a usage entry per descendant). Holding the
/// tree's records whole took about 14 KB per session.
pub(crate) const TREE_KB_PER_SESSION: f64 = 2.0;
/// The widest tree built: 256 children of 256 grandchildren (65,793 sessions).
pub(crate) const MAX_FANOUT: u64 = 256;
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
    /// The most the big case may need beyond the small one, in MB.
    pub(crate) allowed_extra_mb: f64,
    /// Whether the time is judged (not for a bigger tree, which takes longer to build).
    #[serde(skip)]
    pub(crate) timed: bool,
}

impl Measured {
    /// Whether the big store stays within the bounds.
    pub(crate) fn ok(&self) -> bool {
        self.big_mb - self.small_mb <= self.allowed_extra_mb
            && (!self.timed || self.big_ms <= self.small_ms * MAX_SLOWER + SLACK_MS)
    }
}

/// The `arbor` binary beside this program (`target/<profile>/arbor`).
pub(crate) fn arbor_binary() -> Result<PathBuf, String> {
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
pub(crate) async fn seed(path: &Path, sessions: u64) -> Result<(), String> {
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
    // Read as it comes: a run's progress fills a pipe's buffer long before it ends.
    let stderr = child.stderr.take().map(|mut e| {
        std::thread::spawn(move || {
            let mut text = String::new();
            let _ = std::io::Read::read_to_string(&mut e, &mut text);
            text
        })
    });
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
    let err = stderr
        .and_then(|reader| reader.join().ok())
        .unwrap_or_default();
    if !status.success() {
        let tail: String = err.lines().rev().take(5).collect::<Vec<_>>().join("\n");
        return Err(format!("arbor {args:?} failed: {tail}"));
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
            allowed_extra_mb: MAX_EXTRA_MB,
            timed: true,
        });
    }
    // Building a small and a wide tree, each in a store of its own.
    let fanout = (sessions as f64)
        .sqrt()
        .floor()
        .clamp(4.0, MAX_FANOUT as f64) as u64;
    let mut wide = Vec::new();
    for f in [4, fanout] {
        let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
        std::fs::write(dir.path().join("wide.toml"), wide_spec(f)).map_err(|e| e.to_string())?;
        wide.push((measure(&arbor, dir.path(), &["run", "wide.toml"])?, dir));
    }
    let size = 1 + fanout + fanout * fanout;
    out.push(Measured {
        command: format!("arbor run (tree of {size})"),
        small_mb: wide[0].0.0,
        big_mb: wide[1].0.0,
        small_ms: wide[0].0.1,
        big_ms: wide[1].0.1,
        allowed_extra_mb: MAX_EXTRA_MB + TREE_KB_PER_SESSION * size as f64 / 1024.0,
        timed: false,
    });
    Ok(out)
}

/// A spec whose root asks for `fanout` children, each asking for `fanout` leaves, with
/// limits that let it (at most 18 live at once).
fn wide_spec(fanout: u64) -> String {
    let calls = |agent: &str| {
        (0..fanout)
            .map(|i| {
                format!(
                    "  {{ name = \"spawn_agent\", arguments = {{ child_id = \"{agent}\", \
                     input = \"{agent} {i}\" }} }},\n"
                )
            })
            .collect::<String>()
    };
    let tools = (fanout + 4).min(256);
    format!(
        "task = \"fan out\"\nroot = \"root\"\n\n[supervisor]\nlimits = {{ \
         max_active_children = 32, max_tool_calls = {tools}, max_tokens = 1000000 }}\n\n\
         [agents.root]\nchildren = [\"mid\"]\ntool_concurrency = 2\n\
         limits = {{ max_tool_calls = {tools}, max_tokens = 1000000 }}\n\
         [[agents.root.turns]]\ntool_calls = [\n{}]\n[[agents.root.turns]]\ntext = \"done\"\n\n\
         [agents.mid]\nchildren = [\"leaf\"]\ntool_concurrency = 8\n\
         limits = {{ max_tool_calls = {tools}, max_tokens = 1000000 }}\n\
         [[agents.mid.turns]]\ntool_calls = [\n{}]\n[[agents.mid.turns]]\ntext = \"mid done\"\n\n\
         [agents.leaf]\n[[agents.leaf.turns]]\ntext = \"leaf done\"\n",
        calls("mid"),
        calls("leaf")
    )
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
            allowed_extra_mb: MAX_EXTRA_MB,
            timed: true,
        };
        assert!(m(17.9, 200.0).ok());
        assert!(!m(18.1, 20.0).ok());
        assert!(!m(10.0, 211.0).ok());
    }
}
