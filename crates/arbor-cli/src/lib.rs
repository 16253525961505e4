//! `arbor`: run agent trees from a spec and inspect what they left.
//!
//! The binary (`src/main.rs`) only calls [`main`], which parses the arguments, starts
//! logging and the runtime, and turns the command's outcome into the exit code (see
//! [`fail`]). The library exists so the spec parser can be fuzzed ([`check_spec`]); it is
//! not a stable API. The pieces:
//!
//! - [`cli`]: the arguments and the help text (exit codes, environment).
//! - [`run`]: the `run` command, start to end; [`interrupt`]: Ctrl-C, SIGTERM and SIGHUP.
//! - [`serve`]: the `serve` command, the HTTP service with the spec runner ([`launcher`]) as
//!   its launcher.
//! - [`mcp`]: the `mcp` command, an MCP client driving a root over stdio.
//! - [`approvals`]: `approvals`, `approve`, `reject`, `resume`; [`ask`]: the same decisions
//!   asked on the terminal when `run` stops on them; [`answers`]: what they say
//!   when nothing is pending.
//! - [`inspect`]: `ls`, `tree` and `log` ([`walk`]: `tree` streamed); [`follow`]: `send` and `rm`; [`owner`]: which
//!   process owns a tree's runs.
//! - [`spec`]: the TOML spec, parsed strictly ([`limits`]: how an agent's limits compose
//!   with the supervisor's); [`tree`]: the agents and supervisor it builds.
//! - [`input`]: a spec file, standard input and the task, as commands read them.
//! - [`store`]: which store a run uses and how it is opened; [`resolve`]: which session,
//!   child or approval an argument names (ids, unique pieces of them, `@latest`).
//! - [`progress`]: the progress lines on stderr ([`live`]: the live tree on a terminal); [`report`]: the table or JSON on stdout.
//! - [`setup`]: `validate`, `init`, `completions` and `man`, on files rather than a store.
//! - [`output`]: writing to stdout/stderr without panicking on a closed pipe.

// The map above links private modules: it is for contributors, rendered by
// `cargo doc -p arbor-cli --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

mod answers;
mod append;
mod approvals;
mod ask;
mod cli;
mod fail;
mod follow;
mod input;
mod inspect;
mod interrupt;
mod launcher;
mod limits;
mod live;
mod logging;
mod mcp;
mod models;
#[cfg(feature = "otel")]
mod otel;
mod output;
mod owner;
mod progress;
mod redaction;
mod report;
mod resolve;
mod resume;
mod run;
mod run_report;
mod serve;
mod setup;
mod spec;
mod store;
mod tree;
mod walk;
mod workers;

use std::process::ExitCode;

use clap::Parser;

use crate::cli::{Cli, Command};

/// The `arbor` command: parses the process's arguments, runs the command, and returns the
/// exit code.
pub fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
    {
        Ok(rt) => rt,
        Err(e) => {
            logging::init(false);
            output::err(&format!("error: cannot start the runtime: {e}"));
            return ExitCode::from(fail::EXIT_RUN);
        }
    };
    let serving = matches!(cli.command, Command::Serve(_));
    let telemetry = {
        let _inside = runtime.enter();
        logging::init(serving)
    };
    let outcome = match cli.command {
        Command::Run(args) => runtime.block_on(ask::run(args)),
        Command::Ls(args) => runtime.block_on(inspect::ls(args)),
        Command::Tree(args) => runtime.block_on(inspect::tree(args)),
        Command::Log(args) => runtime.block_on(inspect::log(args)),
        Command::Send(args) => runtime.block_on(follow::send(args)),
        Command::Rm(args) => runtime.block_on(follow::rm(args)),
        Command::Rename(args) => runtime.block_on(follow::rename(args)),
        Command::Approvals(args) => runtime.block_on(approvals::list(args)),
        Command::Approve(args) => runtime.block_on(approvals::decide(args, true)),
        Command::Reject(args) => runtime.block_on(approvals::decide(args, false)),
        Command::Resume(args) => runtime.block_on(ask::resume(args)),
        Command::Models(args) => runtime.block_on(models::list(args)),
        Command::Serve(args) => runtime.block_on(serve::serve(args, telemetry.runtime.clone())),
        Command::Mcp(args) => runtime.block_on(mcp::serve(args)),
        Command::Worker(args) => runtime.block_on(workers::worker::work(args)),
        Command::Store(cli::StoreCommand::Check(args)) => runtime.block_on(inspect::check(args)),
        Command::Validate(args) => runtime.block_on(setup::validate(args)),
        Command::Init(args) => setup::init(args),
        Command::Completions(args) => setup::completions(args),
        Command::Man => setup::man(),
    };
    telemetry.shutdown();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(fail) => {
            output::err(&format!("error: {}", output::one_line(&fail.message)));
            ExitCode::from(fail.code)
        }
    }
}

/// Parses and validates a spec's text as `arbor run` does before it opens a store (building
/// each HTTP provider it names, which sends nothing); the error is the one-line message
/// `arbor run` prints, prefixed with `path`. For fuzzing: it must return, never panic,
/// whatever `text` holds.
#[doc(hidden)]
pub fn check_spec(path: &str, text: &str) -> Result<(), String> {
    let spec = spec::Spec::parse(path, text)?;
    spec.root_name()?;
    let _ = spec.is_tree();
    Ok(())
}
