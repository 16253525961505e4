//! The command-line arguments and the help text.

use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};

const RUN_AFTER_HELP: &str = "\
Exit codes:
  0  the root run succeeded
  1  the root run ended failed, aborted or denied (the report is still printed)
  2  bad usage or a bad spec (nothing was stored)
  3  the store cannot be opened, is locked by another process, or failed

Environment:
  ARBOR_LOG              log filter for tracing output on stderr (default: warn)
  ARBOR_BUSY_TIMEOUT_MS  how long to wait for a store locked by another process (default: 5000)

Ctrl-C cancels the run: it ends aborted and the report is printed.";

/// The `arbor` command line.
#[derive(Debug, Parser)]
#[command(
    name = "arbor",
    version,
    about = "Supervised recursive agent delegation: run agent trees from a spec"
)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Run the root agent of a spec (and the tree it delegates to).
    #[command(after_help = RUN_AFTER_HELP)]
    Run(RunArgs),
}

/// Arguments of `arbor run`.
#[derive(Debug, Args)]
pub(crate) struct RunArgs {
    /// The TOML spec.
    #[arg(value_name = "SPEC")]
    pub(crate) spec: PathBuf,
    /// SQLite store file (default ./.arbor/arbor.db, its directory created if missing).
    #[arg(long, value_name = "PATH", conflicts_with = "memory")]
    pub(crate) store: Option<PathBuf>,
    /// Keep nothing: use the in-memory store.
    #[arg(long)]
    pub(crate) memory: bool,
    /// Print one JSON report on stdout instead of the table.
    #[arg(long)]
    pub(crate) json: bool,
    /// No progress lines on stderr.
    #[arg(long, short)]
    pub(crate) quiet: bool,
}
