//! Helpers of the tests that SIGKILL `arbor run` mid-tree and go on with `arbor resume`:
//! the command in a directory, the sessions of a tree, and the run started in the background
//! until the tree is in the state to kill it in.

use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// `arbor ARGS` in `dir` (a short busy timeout, no log).
pub(crate) fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbor"));
    cmd.args(args)
        .current_dir(dir)
        .env("ARBOR_BUSY_TIMEOUT_MS", "2000")
        .env_remove("ARBOR_LOG");
    cmd
}

/// `arbor ARGS` in `dir`, run to its end.
pub(crate) fn arbor(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

/// The sessions of `arbor tree ROOT --json` (none while it cannot be read).
pub(crate) fn sessions(dir: &Path, root: &str) -> Vec<Value> {
    let out = arbor(dir, &["tree", root, "--json"]);
    serde_json::from_slice::<Value>(&out.stdout)
        .ok()
        .and_then(|t| t["sessions"].as_array().cloned())
        .unwrap_or_default()
}

/// The session named `name` among `rows`.
pub(crate) fn named<'a>(rows: &'a [Value], name: &str) -> Option<&'a Value> {
    rows.iter().find(|s| s["name"] == name)
}

/// Starts `arbor run s.toml -q` in `dir` and waits (at most 20 s, failing with `what`) until
/// the tree's sessions pass `ready`; the run, still going, and its root's id.
// The run is returned still going: its caller kills it and waits for it.
#[allow(clippy::zombie_processes)]
pub(crate) fn run_until(
    dir: &Path,
    what: &str,
    ready: impl Fn(&[Value]) -> bool,
) -> (Child, String) {
    let mut run = command(dir, &["run", "s.toml", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    loop {
        if started.elapsed() > Duration::from_secs(20) {
            let _ = run.kill();
            let _ = run.wait();
            panic!("{what}");
        }
        std::thread::sleep(Duration::from_millis(50));
        let Ok(out) = command(dir, &["ls", "--json"]).output() else {
            continue;
        };
        let Ok(roots) = serde_json::from_slice::<Value>(&out.stdout) else {
            continue;
        };
        let Some(root) = roots["roots"][0]["id"].as_str().map(str::to_owned) else {
            continue;
        };
        if ready(&sessions(dir, &root)) {
            return (run, root);
        }
    }
}
