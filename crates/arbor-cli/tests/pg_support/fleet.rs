//! A tree on `arbor worker` processes: starting workers and the tree, waiting for it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::{Pg, Proc, spawn};

/// The lines of a file an effect appends to (none when it does not exist yet).
pub(crate) fn lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

/// Polls `done` every 20 ms; fails naming `what` past `within`.
pub(crate) fn wait_until(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let start = Instant::now();
    while !done() {
        assert!(start.elapsed() < within, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Worker `n` in `dir`, on `pg`, with a 1.5 s lease, its log in `worker-N.log`.
pub(crate) fn worker(dir: &Path, pg: &Pg, n: usize, concurrency: &str) -> Proc {
    spawn(
        dir,
        pg,
        &[
            "worker",
            "--specs",
            "specs",
            "--lease-ms",
            "1500",
            "--poll-ms",
            "200",
            "--concurrency",
            concurrency,
        ],
        &dir.join(format!("worker-{n}.log")),
    )
}

/// `arbor run specs/tree.toml --workers --json --no-input` in `dir`, its stderr in `run.log`.
pub(crate) fn start_tree(dir: &Path, pg: &Pg) -> Proc {
    spawn(
        dir,
        pg,
        &[
            "run",
            "specs/tree.toml",
            "--workers",
            "--json",
            "--no-input",
        ],
        &dir.join("run.log"),
    )
}

/// Waits for `run` (started by [`spawn`] with its stderr in `log`) to end, and
/// reads its report.
pub(crate) fn finish(mut run: Proc, log: &Path, within: Duration) -> Value {
    let start = Instant::now();
    loop {
        if let Some(status) = run.try_wait().unwrap() {
            let out = std::fs::read_to_string(super::stdout_of(log)).unwrap();
            assert!(status.success(), "the run failed: {status}: {out}");
            return serde_json::from_str(&out).unwrap();
        }
        assert!(start.elapsed() < within, "the run did not end");
        std::thread::sleep(Duration::from_millis(50));
    }
}
