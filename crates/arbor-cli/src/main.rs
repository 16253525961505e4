//! `arbor`: run agent trees from a spec and inspect what they left.
//!
//! Exit codes: 0 the root run succeeded; 1 it ended failed, aborted or denied (the report is
//! still printed); 2 bad usage or a bad spec; 3 the store failed.
#![allow(clippy::print_stdout, clippy::print_stderr)]

mod progress;
mod report;
mod spec;
mod store;
mod tree;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use arbor_core::RunOptions;
use arbor_protocol::RunStatus;
use arbor_store::SessionQuery;
use clap::{Parser, Subcommand};
use sha2::{Digest, Sha256};
use tokio_util::sync::CancellationToken;

const EXIT_RUN: u8 = 1;
const EXIT_SPEC: u8 = 2;
const EXIT_STORE: u8 = 3;

#[derive(Debug, Parser)]
#[command(
    name = "arbor",
    version,
    about = "Supervised recursive agent delegation"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Run the root agent of a spec (and the tree it delegates to).
    #[command(
        after_help = "Exit codes: 0 the root run succeeded; 1 it ended failed, aborted or denied; 2 bad usage or spec; 3 store error.\nARBOR_BUSY_TIMEOUT_MS sets how long to wait for a store locked by another process (default 5000)."
    )]
    Run(RunArgs),
}

#[derive(Debug, clap::Args)]
struct RunArgs {
    /// The TOML spec.
    spec: PathBuf,
    /// SQLite store file (default ./.arbor/arbor.db).
    #[arg(long, conflicts_with = "memory")]
    store: Option<PathBuf>,
    /// Keep nothing: use the in-memory store.
    #[arg(long)]
    memory: bool,
    /// Print one JSON report instead of the table.
    #[arg(long)]
    json: bool,
    /// No progress lines.
    #[arg(long, short)]
    quiet: bool,
}

/// A failure with its exit code.
struct Fail(u8, String);

fn main() -> ExitCode {
    let filter = tracing_subscriber::EnvFilter::try_from_env("ARBOR_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("error: cannot start the runtime: {e}");
            return ExitCode::from(EXIT_STORE);
        }
    };
    let outcome = match cli.command {
        Command::Run(args) => runtime.block_on(run(args)),
    };
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(Fail(code, message)) => {
            eprintln!("error: {message}");
            ExitCode::from(code)
        }
    }
}

async fn run(args: RunArgs) -> Result<u8, Fail> {
    let path = args.spec.display().to_string();
    let text = std::fs::read_to_string(&args.spec)
        .map_err(|e| Fail(EXIT_SPEC, format!("cannot read {path}: {e}")))?;
    let spec = spec::Spec::parse(&path, &text).map_err(|e| Fail(EXIT_SPEC, e))?;
    let (store, store_name) =
        store::open(args.memory, args.store.as_deref()).map_err(|e| Fail(EXIT_STORE, e))?;

    let token = CancellationToken::new();
    let built = tree::build(&spec, store.clone(), token.clone())
        .map_err(|e| Fail(EXIT_SPEC, e.to_string()))?;
    let fingerprint = hex(&Sha256::digest(text.as_bytes()));
    let meta = serde_json::json!({
        "definition": {"path": path, "spec": text, "fingerprint": fingerprint},
    });
    let mut session = built
        .root
        .session()
        .store(store.clone())
        .meta(meta)
        .create()
        .await
        .map_err(|e| Fail(EXIT_STORE, e.to_string()))?;
    let root_id = session.id();

    let done = CancellationToken::new();
    let mut followers = Vec::new();
    if !args.quiet {
        eprintln!("arbor: session {root_id} on {store_name}");
        followers.push(tokio::spawn(progress::follow_root(
            session.record().name.clone(),
            session.subscribe(),
        )));
        if let Some(sup) = &built.supervisor {
            followers.push(tokio::spawn(progress::follow_supervisor(
                sup.subscribe(),
                done.clone(),
            )));
        }
    }
    let ctrl_c = {
        let token = token.clone();
        tokio::spawn(async move {
            if tokio::signal::ctrl_c().await.is_ok() {
                token.cancel();
            }
        })
    };
    let started = Instant::now();
    let result = session
        .run(
            spec.task.clone(),
            RunOptions::default().with_cancel(token.clone()),
        )
        .await
        .map_err(|e| Fail(EXIT_STORE, e.to_string()))?;
    if let Some(sup) = &built.supervisor {
        // Nothing keeps running unwatched: children still live end with the root's run.
        sup.shutdown().await;
    }
    done.cancel();
    for f in followers {
        let _ = f.await;
    }
    ctrl_c.abort();
    if !args.quiet {
        eprintln!(
            "arbor: {} in {} turn(s), {:.1} ms",
            result.status,
            result.turns,
            started.elapsed().as_secs_f64() * 1000.0
        );
    }
    let sessions = store
        .list_sessions(SessionQuery::Tree(root_id))
        .await
        .map_err(|e| Fail(EXIT_STORE, e.to_string()))?;
    if args.json {
        let report = report::json_report(root_id, store_name.kind(), &sessions, &result);
        println!("{report}");
    } else {
        report::print_table(&sessions);
    }
    Ok(if result.status == RunStatus::Succeeded {
        0
    } else {
        EXIT_RUN
    })
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
