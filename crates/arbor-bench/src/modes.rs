//! The modes other than the scenarios (`--big-store`, `--serve-load`, `--workers`), and
//! `--all`, which runs every mode and sets round 3's targets beside the figures.
//!
//! Each mode returns what it measured as JSON and whether it held its bounds; it prints its
//! text (to stderr while it runs, its result to stdout) unless JSON was asked for.

use std::process::ExitCode;

use crate::{big_store, serve_load, targets, workers};

/// What one mode measured, and whether it held its bounds.
pub(crate) struct Outcome {
    pub(crate) doc: serde_json::Value,
    pub(crate) ok: bool,
}

impl Outcome {
    /// Prints the document when JSON was asked for; the exit code either way.
    pub(crate) fn finish(self, json: bool) -> ExitCode {
        if json {
            println!("{}", self.doc);
        }
        if self.ok {
            ExitCode::SUCCESS
        } else {
            ExitCode::FAILURE
        }
    }
}

fn to_json<T: serde::Serialize>(value: &T) -> Result<serde_json::Value, String> {
    serde_json::to_value(value).map_err(|e| e.to_string())
}

/// What `--all` runs, each mode's size.
pub(crate) struct All {
    pub(crate) big_store: u64,
    pub(crate) serve_load: u64,
    /// `None` when no PostgreSQL server is named: the mode is reported as skipped.
    pub(crate) workers: Option<usize>,
    pub(crate) quick: bool,
}

/// `--all`: the scenarios' outcome (already run), then every other mode, in one document
/// with round 3's targets beside the figures.
pub(crate) fn all(scenarios: Outcome, plan: &All, json: bool) -> Result<Outcome, String> {
    let big = big_store(plan.big_store, json)?;
    let serve = serve_load(plan.serve_load, json)?;
    let workers = match plan.workers {
        Some(n) => workers(n, json, plan.quick)?,
        None => Outcome {
            doc: serde_json::json!({"skipped": format!(
                "no PostgreSQL server: set {} to measure the hand-over",
                crate::stores::POSTGRES_URL_ENV
            )}),
            ok: true,
        },
    };
    let ok = scenarios.ok && big.ok && serve.ok && workers.ok;
    let mut doc = serde_json::json!({
        "build": if cfg!(debug_assertions) { "debug" } else { "release" },
        "scenarios": scenarios.doc,
        "big_store": big.doc,
        "serve_load": serve.doc,
        "workers": workers.doc,
    });
    let judged = targets::judge(&doc);
    if !json {
        print!("{}", targets::table(&judged));
    }
    doc["targets"] = to_json(&judged)?;
    Ok(Outcome { doc, ok })
}

/// `--big-store N`: prints what each command cost on both stores; exits 1 when one grew past
/// the bounds.
pub(crate) fn big_store(sessions: u64, json: bool) -> Result<Outcome, String> {
    if !json {
        eprintln!("seeding a store of {sessions} sessions, and one of a single tree");
    }
    let measured = big_store::run(sessions)?;
    let doc = serde_json::json!({"sessions": sessions, "commands": measured});
    if !json {
        println!(
            "{:<24} {:>9} {:>9} {:>9} {:>9}",
            "command",
            "small MB",
            format!("{sessions} MB"),
            "small ms",
            format!("{sessions} ms")
        );
        for m in &measured {
            println!(
                "{:<24} {:>9.1} {:>9.1} {:>9.1} {:>9.1}",
                m.command, m.small_mb, m.big_mb, m.small_ms, m.big_ms
            );
        }
    }
    let over: Vec<&str> = measured
        .iter()
        .filter(|m| !m.ok())
        .map(|m| m.command.as_str())
        .collect();
    if !over.is_empty() {
        eprintln!(
            "arbor-bench: on a store of {sessions} sessions these cost more than {} MB more \
             (a wider tree: {} KB more per session), or {}x the time plus {} ms: {}",
            big_store::MAX_EXTRA_MB,
            big_store::TREE_KB_PER_SESSION,
            big_store::MAX_SLOWER,
            big_store::SLACK_MS,
            over.join(", ")
        );
    }
    Ok(Outcome {
        doc,
        ok: over.is_empty(),
    })
}

/// `--serve-load RUNS`: prints what the load measured; exits 1 past the bounds.
pub(crate) fn serve_load(runs: u64, json: bool) -> Result<Outcome, String> {
    if !json {
        eprintln!(
            "serve load: {runs} runs by {} clients, {} probes, {} slow-header and {} \
             event-stream clients, on a store of {} sessions",
            serve_load::CLIENTS,
            serve_load::PROBES,
            serve_load::SLOW_CLIENTS,
            serve_load::SSE_CLIENTS,
            serve_load::SEED_SESSIONS
        );
    }
    let r = serve_load::run(runs)?;
    let doc = to_json(&r)?;
    if !json {
        println!(
            "runs/s {:.0}  start p50 {:.1} ms  p99 {:.1} ms  probes {} (p99 {:.1} ms)  \
             slow clients cut {}  streams ended {}  peak RSS {:.0} MB  shutdown {:.1} s",
            r.runs_per_s,
            r.start_p50_ms,
            r.start_p99_ms,
            r.probes,
            r.probe_p99_ms,
            r.slow_cut,
            r.streams_ended,
            r.peak_rss_mb,
            r.shutdown_s
        );
    }
    if r.ok() {
        return Ok(Outcome { doc, ok: true });
    }
    eprintln!(
        "arbor-bench: the served load broke its bounds (no error, a start's p99 at most {} \
         ms, a probe's at most {} ms, peak RSS at most {} MB, shutdown within {} s): {}",
        serve_load::MAX_START_P99_MS,
        serve_load::MAX_PROBE_P99_MS,
        serve_load::MAX_RSS_MB,
        serve_load::MAX_SHUTDOWN_S,
        r.errors.join("; ")
    );
    Ok(Outcome { doc, ok: false })
}

/// `--workers N`: prints the hand-over and the throughput; fails if a run failed.
pub(crate) fn workers(n: usize, json: bool, quick: bool) -> Result<Outcome, String> {
    let runs = if quick { 1 } else { workers::RUNS };
    if !json {
        eprintln!(
            "{runs} run(s) of each tree in process, then on {n} worker(s) of {} runs each",
            workers::PER_WORKER
        );
    }
    let m = workers::run(n, runs)?;
    let doc = to_json(&m)?;
    if !json {
        println!(
            "{} sync children in turn: {:.1} ms in process, {:.1} ms on workers: hand-over \
             {:.2} ms a child\n{} children, 32 at a time: {:.1} ms in process, {:.1} ms on \
             {n} workers: {:.0} children/s",
            workers::SEQUENTIAL,
            m.sequential_in_process_ms,
            m.sequential_on_workers_ms,
            m.handover_ms,
            workers::WIDE,
            m.wide_in_process_ms,
            m.wide_on_workers_ms,
            m.children_per_sec
        );
    }
    Ok(Outcome { doc, ok: true })
}
