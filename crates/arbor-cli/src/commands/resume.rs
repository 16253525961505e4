//! `arbor resume`: goes on with a tree that stopped (see [`crate::resume`]), asking the
//! person at the terminal as `arbor run` does.

use crate::ask::{Show, can_ask, go_on};
use crate::cli::ResumeArgs;
use crate::drive::Held;
use crate::fail::Fail;

/// `arbor resume`: as [`run`] does after the first stop, from the first resume on.
pub(crate) async fn resume(args: ResumeArgs) -> Result<u8, Fail> {
    let asking = can_ask(args.no_input);
    let held = Held::default();
    let resumed = crate::resume::resume(&args, asking.then_some(&held)).await?;
    let show = Show {
        json: args.target.store.json,
        quiet: false,
        progress: crate::render::live::Progress::Auto,
    };
    let (store, name) = (&resumed.store, resumed.choice.name());
    go_on(
        (store, name),
        resumed.root,
        resumed.code,
        asking.then_some(&held),
        show,
    )
    .await
}
