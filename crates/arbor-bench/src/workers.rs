//! `--workers N`: children handed to `arbor worker` processes over PostgreSQL, and back.
//!
//! On a schema of its own on the server [`crate::stores::POSTGRES_URL_ENV`] names (else `ARBOR_STORE_URL`),
//! with the `arbor` binary beside this program, two trees of the scripted model (every turn
//! 10 input and 5 output tokens) each run [`RUNS`] times in this process's `arbor run` and
//! [`RUNS`] times with `--workers` while `N` `arbor worker` processes run:
//!
//! - **hand-over**: a root whose one turn spawns [`SEQUENTIAL`] sync children one after
//!   another (`tool_concurrency = 1`). A child on a worker costs an enqueue and its
//!   notification, a claim, the worker building the child from its spec, the child's own
//!   run, the report and its notification, and the parent's read of the outcome. The
//!   hand-over per child is the difference of the two medians divided by [`SEQUENTIAL`]: what
//!   going through a worker adds to a child run in process.
//! - **throughput**: a root spawning [`WIDE`] sync children, 32 at a time (the hard cap of
//!   live children), over the `N` workers of [`PER_WORKER`] runs each: children per second.
//!
//! Each run must succeed with its exact token total at the root, else the check fails.

use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::scenario::median;

/// Runs of each tree, each way (the medians are reported); one with `--quick`.
pub(crate) const RUNS: usize = 3;
/// Children of the hand-over tree, one after another.
pub(crate) const SEQUENTIAL: u64 = 16;
/// Children of the throughput tree.
pub(crate) const WIDE: u64 = 256;
/// Runs each worker takes at once.
pub(crate) const PER_WORKER: usize = 8;
/// Tokens of one scripted turn.
const TURN_TOKENS: u64 = 15;

/// What `--workers N` measured.
#[derive(Debug, Clone, serde::Serialize)]
pub(crate) struct Measured {
    pub(crate) workers: usize,
    /// The hand-over tree in process and on workers: medians, in milliseconds.
    pub(crate) sequential_in_process_ms: f64,
    pub(crate) sequential_on_workers_ms: f64,
    /// What a worker adds to one child run, in milliseconds.
    pub(crate) handover_ms: f64,
    /// The throughput tree in process and on workers: medians, in milliseconds.
    pub(crate) wide_in_process_ms: f64,
    pub(crate) wide_on_workers_ms: f64,
    /// Children per second through the workers.
    pub(crate) children_per_sec: f64,
    /// Every run's time, in milliseconds, by tree and way.
    pub(crate) runs_ms: serde_json::Value,
}

/// The spec of a root spawning `children` sync children, `at_once` at a time.
fn spec(children: u64, at_once: u32) -> String {
    let calls: Vec<String> = (0..children)
        .map(|i| {
            format!(
                "  {{ name = \"spawn_agent\", arguments = {{ child_id = \"leaf\", input = \"leaf {i}\" }} }}"
            )
        })
        .collect();
    format!(
        "task = \"hand-over\"\nroot = \"root\"\n\n[supervisor]\n\
         limits = {{ max_active_children = 32, timeout_ms = 300000 }}\n\n\
         [agents.root]\nchildren = [\"leaf\"]\ntool_concurrency = {at_once}\n\
         limits = {{ max_steps = 4, max_tool_calls = {children}, timeout_ms = 300000 }}\n\
         [[agents.root.turns]]\nusage = {{ input_tokens = 10, output_tokens = 5 }}\n\
         tool_calls = [\n{}\n]\n\
         [[agents.root.turns]]\nusage = {{ input_tokens = 10, output_tokens = 5 }}\ntext = \"done\"\n\n\
         [agents.leaf]\n[[agents.leaf.turns]]\nusage = {{ input_tokens = 10, output_tokens = 5 }}\n\
         text = \"leaf done\"\n",
        calls.join(",\n")
    )
}

/// The PostgreSQL server, and a fresh schema name on it.
struct Target {
    url: String,
    schema: String,
}

/// Kills a worker process when dropped.
struct Worker(Child);

impl Drop for Worker {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs the `--workers` measurement with `workers` worker processes, each tree `runs` times
/// each way.
pub(crate) fn run(workers: usize, runs: usize) -> Result<Measured, String> {
    if workers == 0 {
        return Err("--workers must be at least 1".to_owned());
    }
    let arbor = crate::big_store::arbor_binary()?;
    let url = crate::stores::postgres_url("--workers")?;
    let target = Target {
        url,
        schema: format!("arbor_bench_workers_{}", std::process::id()),
    };
    let dir = tempfile::tempdir().map_err(|e| format!("temporary folder: {e}"))?;
    let specs = dir.path().join("specs");
    std::fs::create_dir(&specs).map_err(|e| format!("{}: {e}", specs.display()))?;
    let write = |name: &str, text: String| {
        std::fs::write(specs.join(name), text).map_err(|e| format!("{name}: {e}"))
    };
    write("sequential.toml", spec(SEQUENTIAL, 1))?;
    write("wide.toml", spec(WIDE, 32))?;
    let outcome = measure(&arbor, dir.path(), &target, (workers, runs.max(1)));
    let dropped = drop_schema(&target);
    let measured = outcome?;
    dropped?;
    Ok(measured)
}

fn measure(
    arbor: &Path,
    dir: &Path,
    target: &Target,
    (workers, runs): (usize, usize),
) -> Result<Measured, String> {
    let tree = |spec: &str, on_workers: bool, children: u64| -> Result<Vec<f64>, String> {
        (0..runs)
            .map(|_| run_tree(arbor, dir, target, spec, on_workers, children))
            .collect()
    };
    // A run not measured creates the schema; then in process, then on the workers.
    run_tree(arbor, dir, target, "sequential.toml", false, SEQUENTIAL)?;
    let seq_in = tree("sequential.toml", false, SEQUENTIAL)?;
    let wide_in = tree("wide.toml", false, WIDE)?;
    let fleet = (0..workers)
        .map(|n| start_worker(arbor, dir, target, n))
        .collect::<Result<Vec<_>, _>>()?;
    let seq_w = tree("sequential.toml", true, SEQUENTIAL)?;
    let wide_w = tree("wide.toml", true, WIDE)?;
    drop(fleet);
    let (mut a, mut b, mut c, mut d) = (
        seq_in.clone(),
        seq_w.clone(),
        wide_in.clone(),
        wide_w.clone(),
    );
    let (seq_in_ms, seq_w_ms) = (median(&mut a), median(&mut b));
    let (wide_in_ms, wide_w_ms) = (median(&mut c), median(&mut d));
    Ok(Measured {
        workers,
        sequential_in_process_ms: seq_in_ms,
        sequential_on_workers_ms: seq_w_ms,
        handover_ms: (seq_w_ms - seq_in_ms) / SEQUENTIAL as f64,
        wide_in_process_ms: wide_in_ms,
        wide_on_workers_ms: wide_w_ms,
        children_per_sec: if wide_w_ms > 0.0 {
            WIDE as f64 / (wide_w_ms / 1e3)
        } else {
            0.0
        },
        runs_ms: serde_json::json!({
            "sequential": {"in_process": seq_in, "on_workers": seq_w},
            "wide": {"in_process": wide_in, "on_workers": wide_w},
        }),
    })
}

/// `arbor` in `dir` on the target's schema.
fn command(arbor: &Path, dir: &Path, target: &Target) -> Command {
    let mut cmd = Command::new(arbor);
    cmd.current_dir(dir)
        .env("ARBOR_STORE_URL", &target.url)
        .env("ARBOR_STORE_SCHEMA", &target.schema)
        .env_remove("ARBOR_LOG");
    cmd
}

/// Runs `specs/SPEC` once and returns its wall time in milliseconds, after checking that it
/// succeeded with the exact token total of a root and `children` one-turn children.
fn run_tree(
    arbor: &Path,
    dir: &Path,
    target: &Target,
    spec: &str,
    on_workers: bool,
    children: u64,
) -> Result<f64, String> {
    let mut cmd = command(arbor, dir, target);
    cmd.args([
        "run",
        &format!("specs/{spec}"),
        "--json",
        "--no-input",
        "--quiet",
    ]);
    if on_workers {
        cmd.arg("--workers");
    }
    let start = Instant::now();
    let out = cmd
        .stderr(Stdio::piped())
        .output()
        .map_err(|e| format!("arbor run {spec}: {e}"))?;
    let took = start.elapsed().as_secs_f64() * 1e3;
    let way = if on_workers {
        "on workers"
    } else {
        "in process"
    };
    if !out.status.success() {
        return Err(format!(
            "arbor run {spec} ({way}) failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    let report: serde_json::Value = serde_json::from_slice(&out.stdout)
        .map_err(|e| format!("arbor run {spec} ({way}): its report is not JSON: {e}"))?;
    let expected = TURN_TOKENS * (2 + children);
    let got = report["reconciliation"]["root_aggregate_tokens"].as_u64();
    if report["status"] != "succeeded" || got != Some(expected) {
        return Err(format!(
            "arbor run {spec} ({way}): status {}, root tokens {got:?}, expected {expected}",
            report["status"]
        ));
    }
    Ok(took)
}

/// Starts worker `n` and waits until it listens for work.
fn start_worker(arbor: &Path, dir: &Path, target: &Target, n: usize) -> Result<Worker, String> {
    let log: PathBuf = dir.join(format!("worker-{n}.log"));
    let file = std::fs::File::create(&log).map_err(|e| format!("{}: {e}", log.display()))?;
    let child = command(arbor, dir, target)
        .args([
            "worker",
            "--specs",
            "specs",
            "--concurrency",
            &PER_WORKER.to_string(),
            "--poll-ms",
            "200",
        ])
        .stdout(Stdio::null())
        .stderr(file)
        .spawn()
        .map_err(|e| format!("arbor worker: {e}"))?;
    let worker = Worker(child);
    let start = Instant::now();
    loop {
        let text = std::fs::read_to_string(&log).unwrap_or_default();
        // Its start line (`arbor worker: N spec(s), up to …`) comes once it listens.
        if text.contains("spec(s), up to") {
            return Ok(worker);
        }
        if start.elapsed() > Duration::from_secs(20) {
            return Err(format!("worker {n} did not start: {text}"));
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Drops the run's schema.
fn drop_schema(target: &Target) -> Result<(), String> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| e.to_string())?;
    runtime.block_on(async {
        let store = arbor_store_postgres::PostgresOptions::new()
            .schema(&target.schema)
            .connect(&target.url)
            .await
            .map_err(|e| format!("postgres: {e}"))?;
        let dropped = store
            .drop_schema(&target.schema)
            .await
            .map_err(|e| format!("postgres: {e}"));
        store.close().await;
        dropped
    })
}
