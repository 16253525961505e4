//! `arbor run`: runs the spec's root (see [`crate::drive`]), and asks the person at the
//! terminal about calls waiting for approval ([`crate::ask`]).

use crate::ask::{Show, can_ask, go_on};
use crate::cli::RunArgs;
use crate::drive::Held;
use crate::fail::Fail;

/// `arbor run`: runs the spec's root; when it stops on calls waiting for approval and a
/// person is at the terminal, asks about them and resumes the tree in this process, until it
/// ends or something is left for later.
pub(crate) async fn run(args: RunArgs) -> Result<u8, Fail> {
    // Standard input that held the task cannot answer.
    let asking = can_ask(args.no_input) && args.task.as_deref() != Some("-");
    let held = Held::default();
    let started = crate::drive::run(&args, asking.then_some(&held)).await?;
    let show = Show {
        json: args.json,
        quiet: args.quiet,
        progress: args.progress,
    };
    let (store, name) = (&started.store, started.choice.name());
    go_on(
        (store, name),
        started.root,
        started.code,
        asking.then_some(&held),
        show,
    )
    .await
}
