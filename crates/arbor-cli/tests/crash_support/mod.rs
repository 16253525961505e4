//! Helpers of the crash harness: a seeded generator, the `arbor` binary as a new process,
//! a command killed with SIGKILL at a random point, and readers of what the store shows.

use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::Value;

/// The text of the approved side effect (the publisher's `echo`).
pub(crate) const EFFECT: &str = "EFFECT published";

/// xorshift64*: small, deterministic, enough to pick kill points.
#[derive(Debug)]
pub(crate) struct Rng(u64);

impl Rng {
    pub(crate) fn new(seed: u64) -> Self {
        // Never zero; seeds close together still start far apart.
        Self(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1)
    }

    pub(crate) fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n > 0`).
    pub(crate) fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

pub(crate) fn command(dir: &Path, args: &[&str]) -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_arbor"));
    cmd.args(args)
        .current_dir(dir)
        .env("ARBOR_BUSY_TIMEOUT_MS", "5000")
        .env_remove("ARBOR_LOG");
    cmd
}

pub(crate) fn arbor(dir: &Path, args: &[&str]) -> Output {
    command(dir, args).output().unwrap()
}

/// Runs a command that must succeed and print JSON.
pub(crate) fn json(dir: &Path, args: &[&str]) -> Value {
    let out = arbor(dir, args);
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What a killed command left behind it: what it said before it died.
#[derive(Debug)]
pub(crate) struct Killed {
    /// Its stderr lines (progress), all written before the kill.
    pub(crate) stderr: Vec<String>,
    /// Its stdout.
    pub(crate) stdout: String,
    /// Whether it was still running when it was killed (else it had finished).
    pub(crate) killed: bool,
    /// What the kill waited for.
    pub(crate) point: String,
}

/// Starts `arbor ARGS` and kills it with SIGKILL: after a random delay below `max_ms`, or
/// (half the time, when `max_lines > 0`) right after a random number of progress lines up to
/// `max_lines`.
pub(crate) fn killed_command(
    dir: &Path,
    args: &[&str],
    rng: &mut Rng,
    max_ms: u64,
    max_lines: u64,
) -> Killed {
    let by_lines = max_lines > 0 && rng.below(2) == 0;
    let lines_wanted = (1 + rng.below(max_lines.max(1))) as usize;
    let delay = Duration::from_millis(rng.below(max_ms.max(1)));
    let jitter = Duration::from_millis(rng.below(8));
    let mut child = command(dir, args)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let err = child.stderr.take().unwrap();
    let sink = lines.clone();
    let stderr_reader = std::thread::spawn(move || {
        for line in BufReader::new(err).lines() {
            let Ok(line) = line else { break };
            sink.lock().unwrap().push(line);
        }
    });
    let mut out = child.stdout.take().unwrap();
    let stdout_reader = std::thread::spawn(move || {
        let mut s = String::new();
        let _ = out.read_to_string(&mut s);
        s
    });
    let point = if by_lines {
        let started = Instant::now();
        while lines.lock().unwrap().len() < lines_wanted
            && child.try_wait().unwrap().is_none()
            && started.elapsed() < Duration::from_secs(20)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
        std::thread::sleep(jitter);
        format!("after {lines_wanted} line(s) + {jitter:?}")
    } else {
        std::thread::sleep(delay);
        format!("after {delay:?}")
    };
    let killed = child.try_wait().unwrap().is_none();
    if killed {
        // SIGKILL on Unix.
        child.kill().unwrap();
    }
    child.wait().unwrap();
    stderr_reader.join().unwrap();
    let stdout = stdout_reader.join().unwrap();
    let stderr = lines.lock().unwrap().clone();
    Killed {
        stderr,
        stdout,
        killed,
        point,
    }
}

/// The transcript entries of `session`.
pub(crate) fn log_entries(dir: &Path, session: &str) -> Vec<Value> {
    let out = arbor(dir, &["log", session, "--json"]);
    assert!(
        out.status.success(),
        "log {session}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

/// The calls `session`'s suspended runs wait on: (id, tool).
pub(crate) fn pending(dir: &Path, session: &str) -> Vec<(String, String)> {
    let listed = json(dir, &["approvals", session, "--json"]);
    listed["suspensions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["pending"].as_array().unwrap().iter())
        .map(|p| {
            (
                p["id"].as_str().unwrap().to_owned(),
                p["tool"].as_str().unwrap().to_owned(),
            )
        })
        .collect()
}

/// The rows of `tree --json`.
pub(crate) fn sessions(tree: &Value) -> Vec<Value> {
    tree["sessions"].as_array().unwrap().clone()
}

/// The root's row of `tree --json`.
pub(crate) fn root_row(tree: &Value) -> &Value {
    tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["parent_id"].is_null())
        .unwrap_or_else(|| panic!("no root in {tree}"))
}

/// For each session of the tree, how many times the approved effect's result is in its
/// transcript.
pub(crate) fn echo_effects(dir: &Path, tree: &Value) -> Vec<(String, usize)> {
    sessions(tree)
        .iter()
        .map(|row| {
            let id = row["id"].as_str().unwrap().to_owned();
            let n = log_entries(dir, &id)
                .iter()
                .filter(|e| {
                    e["kind"] == "message"
                        && e["message"]["role"] == "tool"
                        && e["message"]["content"] == EFFECT
                })
                .count();
            (id, n)
        })
        .collect()
}
