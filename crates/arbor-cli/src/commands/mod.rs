//! The commands, one file per command or family of commands, each entry named after its
//! command; [`run`] dispatches the parsed command line to them.
//!
//! | command | entry |
//! | --- | --- |
//! | `arbor run` | [`run::run`] |
//! | `arbor resume` | [`resume::resume`] |
//! | `arbor ls`, `tree`, `log`, `store check` | [`inspect::ls`], [`inspect::tree`], [`inspect::log`], [`inspect::check`] |
//! | `arbor send`, `rm`, `rename` | [`children::send`], [`children::rm`], [`children::rename`] |
//! | `arbor approvals`, `approve`, `reject` | [`approvals::list`], [`approvals::decide`] |
//! | `arbor diff`, `merge`, `discard` | [`coding::diff`], [`coding::merge`], [`coding::discard`] |
//! | `arbor models` | [`models::list`] |
//! | `arbor serve` | [`serve::serve`] |
//! | `arbor mcp` | [`mcp::serve`] |
//! | `arbor worker` | [`crate::workers::worker::work`] |
//! | `arbor validate`, `init`, `completions`, `man` | [`setup::validate`], [`setup::init`], [`setup::completions`], [`setup::man`] |
//!
//! Nothing outside this folder imports it: what two commands share lives beside it.

pub(crate) mod approvals;
pub(crate) mod children;
pub(crate) mod coding;
pub(crate) mod inspect;
pub(crate) mod mcp;
pub(crate) mod models;
pub(crate) mod resume;
pub(crate) mod run;
pub(crate) mod serve;
pub(crate) mod setup;

use crate::cli::{Command, StoreCommand};
use crate::fail::Fail;

/// Runs `command` to its end on `runtime`; `metrics` are the runtime's, for `arbor serve`.
pub(crate) fn run(
    command: Command,
    runtime: &tokio::runtime::Runtime,
    metrics: Option<arbor_server::RuntimeMetrics>,
) -> Result<u8, Fail> {
    match command {
        Command::Run(args) => runtime.block_on(run::run(args)),
        Command::Ls(args) => runtime.block_on(inspect::ls(args)),
        Command::Tree(args) => runtime.block_on(inspect::tree(args)),
        Command::Log(args) => runtime.block_on(inspect::log(args)),
        Command::Send(args) => runtime.block_on(children::send(args)),
        Command::Rm(args) => runtime.block_on(children::rm(args)),
        Command::Rename(args) => runtime.block_on(children::rename(args)),
        Command::Approvals(args) => runtime.block_on(approvals::list(args)),
        Command::Approve(args) => runtime.block_on(approvals::decide(args, true)),
        Command::Reject(args) => runtime.block_on(approvals::decide(args, false)),
        Command::Answer(args) => runtime.block_on(approvals::answer(args)),
        Command::Resume(args) => runtime.block_on(resume::resume(args)),
        Command::Diff(args) => runtime.block_on(coding::diff(args)),
        Command::Merge(args) => runtime.block_on(coding::merge(args)),
        Command::Discard(args) => runtime.block_on(coding::discard(args)),
        Command::Models(args) => runtime.block_on(models::list(args)),
        Command::Serve(args) => runtime.block_on(serve::serve(args, metrics)),
        Command::Mcp(args) => runtime.block_on(mcp::serve(args)),
        Command::Worker(args) => runtime.block_on(crate::workers::worker::work(args)),
        Command::Store(StoreCommand::Check(args)) => runtime.block_on(inspect::check(args)),
        Command::Validate(args) => runtime.block_on(setup::validate(args)),
        Command::Init(args) => setup::init(args),
        Command::Completions(args) => setup::completions(args),
        Command::Man => setup::man(),
    }
}
