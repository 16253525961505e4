//! `arbor`: run agent trees from a spec and inspect what they left.
//!
//! The binary (`src/main.rs`) only calls [`main`], which parses the arguments, starts
//! logging and the runtime, and turns the command's outcome into the exit code (see
//! [`fail`]). The library exists so the spec parser can be fuzzed ([`check_spec`]); it is
//! not a stable API. The pieces:
//!
//! - [`cli`]: the arguments and the help text (exit codes, environment).
//! - [`commands`]: one file per command (or per family of commands), its entry named after
//!   it: `arbor run` enters at `commands/run.rs`, `ls`/`tree`/`log`/`store check` at
//!   `commands/inspect.rs`, `send`/`rm`/`rename` at `commands/children.rs`, and so on.
//! - [`drive`]: a root run start to end (prepare the spec, create the root, drive the tree,
//!   print the report); [`resume`]: a stopped tree going on; [`interrupt`]: Ctrl-C, SIGTERM
//!   and SIGHUP.
//! - [`launcher`]: the spec runner behind `arbor serve`; [`mcp`]: the root an MCP client
//!   drives; [`workers`]: `arbor worker` and the PostgreSQL queue.
//! - [`ask`]: decisions asked on the terminal when `run` stops on them; [`answers`]: what
//!   they say when nothing is pending, and what waits for one.
//! - [`owner`]: which process owns a tree's runs (and deletes under its lease).
//! - [`spec`]: the TOML spec, parsed strictly ([`spec::limits`]: how an agent's limits
//!   compose with the supervisor's); [`providers`]: the model providers it names;
//!   [`tree`]: the agents and supervisor it builds.
//! - [`input`]: a spec file, standard input and the task, as commands read them.
//! - [`store`]: which store a run uses and how it is opened; [`resolve`]: which session,
//!   child or approval an argument names (ids, unique pieces of them, `@latest`).
//! - [`render`]: what is shown: progress lines and the live tree on stderr, the table or
//!   JSON report on stdout, the tree walker, and writing without panicking on a closed pipe.

// The map above links private modules: it is for contributors, rendered by
// `cargo doc -p arbor-cli --document-private-items`.
#![allow(rustdoc::private_intra_doc_links)]

mod answers;
mod append;
mod ask;
mod cli;
mod commands;
mod drive;
mod fail;
mod input;
mod interrupt;
mod launcher;
mod logging;
mod mcp;
#[cfg(feature = "otel")]
mod otel;
mod owner;
mod providers;
mod redaction;
mod render;
mod resolve;
mod resume;
mod spec;
mod store;
mod tree;
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
            render::output::err(&format!("error: cannot start the runtime: {e}"));
            return ExitCode::from(fail::EXIT_RUN);
        }
    };
    let serving = matches!(cli.command, Command::Serve(_));
    let telemetry = {
        let _inside = runtime.enter();
        logging::init(serving)
    };
    let outcome = commands::run(cli.command, &runtime, telemetry.runtime.clone());
    // A remote A2A child's task that a dropped turn cancels is told so before the process
    // ends (each cancel bounded by 5 s).
    runtime.block_on(arbor_a2a::settle(std::time::Duration::from_secs(6)));
    telemetry.shutdown();
    match outcome {
        Ok(code) => ExitCode::from(code),
        Err(fail) => {
            render::output::err(&format!(
                "error: {}",
                render::output::one_line(&fail.message)
            ));
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
