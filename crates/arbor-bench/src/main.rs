//! `arbor-bench`: what arbor itself costs per delegation, on the scripted model with zero
//! delay (every model call reports 10 input and 5 output tokens).
//!
//! Each scenario and store runs in a fresh child process of this program (the hidden
//! `--worker` mode), so each row's peak resident memory is its own. The parent prints a
//! table, or one JSON object with `--json`, and exits 1 if any row's token total read back
//! from the store differs from the exact figure its scripts imply, or if the long-life
//! scenario ends with its supervisor tracking more sessions than the host's root.
//!
//! - [`scenario`]: the scenarios and their measurement.
//! - [`trees`]: the agents, supervisors and stores they run.
//! - [`pump`]: scenario E, the child-event projection.
//! - [`long_life`]: scenario L, a long-lived supervisor's memory.
//! - [`service`]: scenario H, a sync delegation over HTTP (`arbor-server` on loopback).
//! - [`report`]: the rows, as a table or JSON.
//! - [`big_store`]: `--big-store N`, the `arbor` commands on a store of many finished trees.
//! - [`serve_load`]: `--serve-load RUNS`, `arbor serve` under a bounded load.
//! - [`workers`]: `--workers N`, children handed to `arbor worker` processes over PostgreSQL.
//! - [`modes`]: those three modes' reports, and `--all`, every mode in one document.
//! - [`targets`]: round 3's targets beside the figures `--all` measured.

#![allow(clippy::print_stdout, clippy::print_stderr)]

mod big_store;
mod counted;
mod long_life;
mod modes;
mod parallel;
mod pump;
mod report;
mod rss;
mod scenario;
mod serve_load;
mod service;
mod stores;
mod targets;
mod trees;
mod workers;

use std::process::{Command, ExitCode};

#[cfg(feature = "mimalloc")]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

use clap::Parser;

use crate::report::Row;
use crate::scenario::Scenario;
use crate::stores::StoreKind;

/// Measures arbor's own overhead per delegation.
#[derive(Debug, Parser)]
#[command(name = "arbor-bench", version)]
struct Args {
    /// Scenarios to run (B S C D A E L H; default all).
    #[arg(value_name = "SCENARIO")]
    scenarios: Vec<String>,
    /// Only this store (default: memory, then sqlite; postgres on the server
    /// ARBOR_BENCH_POSTGRES_URL names, a schema per run).
    #[arg(long, value_parser = ["memory", "sqlite", "postgres"])]
    store: Option<String>,
    /// Print one JSON object instead of the table.
    #[arg(long)]
    json: bool,
    /// A few iterations of each, one run: checks that everything works, not how fast.
    #[arg(long)]
    quick: bool,
    /// Run on tokio's multi-thread runtime (a worker per core) instead of one thread.
    #[arg(long)]
    multi_thread: bool,
    /// Operations in one run instead of the scenario's own count (one run is made): for
    /// instruction counts under callgrind, say.
    #[arg(long)]
    ops: Option<u64>,
    /// Instead of the scenarios: seed a SQLite store with this many sessions of finished
    /// trees and check that `arbor ls`, `tree` and a small `run` cost no more memory or
    /// time there than on a store of one tree, and that building a tree of about as many
    /// sessions costs little more memory than a small one (the `arbor` binary beside this
    /// program).
    #[arg(long, value_name = "SESSIONS")]
    big_store: Option<u64>,
    /// Instead of the scenarios: drive the `arbor serve` beside this program with a bounded
    /// load (this many runs started by 32 clients, probes, slow-header and event-stream
    /// clients at once, on a store of 10,000 sessions) and check it (exits 1 past the bounds).
    #[arg(long, value_name = "RUNS")]
    serve_load: Option<u64>,
    /// Instead of the scenarios: the hand-over of a child to this many `arbor worker`
    /// processes and back (a tree of 16 sync children one after another, in process and on
    /// the workers), and children per second through them (256 children, 32 at a time), on
    /// the PostgreSQL server ARBOR_BENCH_POSTGRES_URL names (the `arbor` binary beside this
    /// program)
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// Every mode, one after another: the scenarios, `--big-store` (1,000,000 sessions;
    /// 10,000 with --quick), `--serve-load` (200 runs), and `--workers` (4; 2 with --quick;
    /// only when a PostgreSQL server is named), each size overridden by its own option. With
    /// --json, one document holding every figure and round 3's targets beside them.
    #[arg(long)]
    all: bool,
    /// Internal: run one scenario on one store and print its row as JSON.
    #[arg(long, hide = true, num_args = 2, value_names = ["SCENARIO", "STORE"])]
    worker: Option<Vec<String>>,
}

fn main() -> ExitCode {
    let args = Args::parse();
    match run(args) {
        Ok(code) => code,
        Err(message) => {
            eprintln!("arbor-bench: {message}");
            ExitCode::from(2)
        }
    }
}

fn run(args: Args) -> Result<ExitCode, String> {
    if args.all {
        let plan = modes::All {
            big_store: args
                .big_store
                .unwrap_or(if args.quick { 10_000 } else { 1_000_000 }),
            serve_load: args.serve_load.unwrap_or(200),
            workers: match args.workers {
                Some(n) => Some(n),
                None => stores::postgres_url("--workers")
                    .ok()
                    .map(|_| if args.quick { 2 } else { 4 }),
            },
            quick: args.quick,
        };
        let scenarios = scenarios(&args)?;
        return Ok(modes::all(scenarios, &plan, args.json)?.finish(args.json));
    }
    if let Some(sessions) = args.big_store {
        return Ok(modes::big_store(sessions, args.json)?.finish(args.json));
    }
    if let Some(runs) = args.serve_load {
        return Ok(modes::serve_load(runs, args.json)?.finish(args.json));
    }
    if let Some(n) = args.workers {
        return Ok(modes::workers(n, args.json, args.quick)?.finish(args.json));
    }
    if let Some(worker) = &args.worker {
        let (scenario, kind) = match worker.as_slice() {
            [s, k] => (parse_scenario(s)?, parse_store(k)?),
            _ => return Err("--worker takes a scenario and a store".to_owned()),
        };
        let (ops, runs) = match args.ops {
            Some(ops) => (ops.max(1), 1),
            None => scenario.plan(kind, args.quick),
        };
        let row = worker_row(scenario, kind, (ops, runs), args.multi_thread)?;
        println!(
            "{}",
            serde_json::to_string(&row).map_err(|e| e.to_string())?
        );
        return Ok(ExitCode::SUCCESS);
    }
    Ok(scenarios(&args)?.finish(args.json))
}

/// The scenarios asked for on the stores asked for: a table printed, or their document.
fn scenarios(args: &Args) -> Result<modes::Outcome, String> {
    let scenarios = if args.scenarios.is_empty() {
        Scenario::ALL.to_vec()
    } else {
        args.scenarios
            .iter()
            .map(|s| parse_scenario(s))
            .collect::<Result<Vec<_>, _>>()?
    };
    let stores = match &args.store {
        Some(s) => vec![parse_store(s)?],
        None => vec![StoreKind::Memory, StoreKind::Sqlite],
    };
    let rows = run_workers(args, &stores, &scenarios)?;
    let doc = serde_json::json!({
            "quick": args.quick,
            "runtime": if args.multi_thread { "multi_thread" } else { "current_thread" },
            "cores": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            "allocator": if cfg!(feature = "mimalloc") { "mimalloc" } else { "system" },
            "rows": rows,
    });
    if !args.json {
        print!("{}", report::table(&rows));
    }
    Ok(modes::Outcome {
        ok: judge(&rows),
        doc,
    })
}

/// Each scenario on each store in a worker process of its own (so one's memory never
/// counts in another's), its row read from the worker's output.
fn run_workers(
    args: &Args,
    stores: &[StoreKind],
    scenarios: &[Scenario],
) -> Result<Vec<Row>, String> {
    let exe = std::env::current_exe().map_err(|e| format!("cannot find this program: {e}"))?;
    let mut rows = Vec::new();
    for kind in stores {
        for scenario in scenarios {
            if !args.json {
                eprintln!("running {} on {}", scenario.letter(), kind.name());
            }
            let mut cmd = Command::new(&exe);
            cmd.args(["--worker", scenario.letter(), kind.name()]);
            if args.quick {
                cmd.arg("--quick");
            }
            if args.multi_thread {
                cmd.arg("--multi-thread");
            }
            if let Some(ops) = args.ops {
                cmd.args(["--ops", &ops.to_string()]);
            }
            let out = cmd
                .output()
                .map_err(|e| format!("cannot start a worker: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "scenario {} on {} failed: {}",
                    scenario.letter(),
                    kind.name(),
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            let row: Row = serde_json::from_slice(&out.stdout)
                .map_err(|e| format!("a worker's report is not a row: {e}"))?;
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Whether the rows hold the bounds: token totals as expected, the sessions tracked at the
/// end and the growth per 10,000 children under their ceilings; says which do not.
fn judge(rows: &[Row]) -> bool {
    let wrong: Vec<String> = rows
        .iter()
        .filter(|r| !r.tokens_ok())
        .map(|r| format!("{} on {}", r.scenario, r.store))
        .collect();
    let unbounded: Vec<String> = rows
        .iter()
        .filter(|r| !r.tracked_ok())
        .map(|r| {
            format!(
                "{} on {} ({} tracked)",
                r.scenario,
                r.store,
                r.tracked_sessions.unwrap_or_default()
            )
        })
        .collect();
    if !wrong.is_empty() {
        eprintln!(
            "arbor-bench: token totals differ from the expected figure: {}",
            wrong.join(", ")
        );
    }
    if !unbounded.is_empty() {
        eprintln!(
            "arbor-bench: the supervisor tracks more than {} session(s) at the end: {}",
            long_life::MAX_TRACKED,
            unbounded.join(", ")
        );
    }
    let growing: Vec<String> = rows
        .iter()
        .filter(|r| !r.growth_ok())
        .map(|r| {
            format!(
                "{} on {} (+{:.2} MB per 10,000)",
                r.scenario,
                r.store,
                r.rss_growth_mb_per_10k.unwrap_or_default()
            )
        })
        .collect();
    if !growing.is_empty() {
        eprintln!(
            "arbor-bench: the process grows by more than {} MB per 10,000 children: {}",
            long_life::MAX_GROWTH_MB_PER_10K,
            growing.join(", ")
        );
    }
    wrong.is_empty() && unbounded.is_empty() && growing.is_empty()
}

fn parse_scenario(s: &str) -> Result<Scenario, String> {
    Scenario::parse(s).ok_or_else(|| format!("unknown scenario {s:?} (one of B S C D A E L H P R)"))
}

fn parse_store(s: &str) -> Result<StoreKind, String> {
    StoreKind::parse(s).ok_or_else(|| format!("unknown store {s:?} (memory, sqlite or postgres)"))
}

/// One scenario on one store, in this process: on one thread by default (the runtime's own
/// cost, without the scheduler's cross-thread wake-ups), or on a worker per core.
fn worker_row(
    scenario: Scenario,
    kind: StoreKind,
    (ops, runs): (u64, u32),
    multi_thread: bool,
) -> Result<Row, String> {
    // P is about scaling with cores: always a worker per core.
    let multi_thread = multi_thread || scenario == Scenario::P;
    let mut builder = if multi_thread {
        tokio::runtime::Builder::new_multi_thread()
    } else {
        tokio::runtime::Builder::new_current_thread()
    };
    let rt = builder
        .enable_all()
        .build()
        .map_err(|e| format!("cannot start the runtime: {e}"))?;
    // The scenario runs as a task, as a host's requests do: on the multi-thread runtime the
    // tasks it spawns start on the same worker instead of waking a blocked main thread.
    rt.block_on(async {
        tokio::spawn(scenario::measure(scenario, kind, ops, runs))
            .await
            .map_err(|e| format!("the scenario panicked: {e}"))?
    })
}
