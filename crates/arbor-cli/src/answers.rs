//! Saying what happened when a decision or a resume finds nothing to act on. The runtime
//! answers "Unknown approval" for every id that is not pending (so a forged id learns
//! nothing); a person who approves twice, or whose resume lost a race with another process,
//! is told that instead, from what the store still holds.

use arbor_core::approval::{self, CallState, MAX_PATH, RunCheckpoint, Suspension, nested_id};
use arbor_protocol::{RunId, SessionId};
use arbor_store::Store;

use crate::fail::Fail;

/// Checks the arguments of `approve` / `reject` before anything is opened.
pub(crate) fn check_reason(reason: Option<&str>) -> Result<(), Fail> {
    match reason {
        Some(r) if r.len() > approval::MAX_REASON_BYTES => Err(Fail::usage(format!(
            "--reason is {} bytes; at most {} are allowed",
            r.len(),
            approval::MAX_REASON_BYTES
        ))),
        _ => Ok(()),
    }
}

/// Why `id` is not among the pending decisions of `session`'s suspended runs (`waiting`).
/// An id that is not echoed unless it is a real one.
pub(crate) async fn not_pending(
    store: &dyn Store,
    session: SessionId,
    waiting: &[Suspension],
    id: &str,
) -> Result<Fail, Fail> {
    if waiting.is_empty() {
        return Ok(Fail::usage(format!(
            "{session} waits for no decision (its run is over or never suspended)"
        )));
    }
    for s in waiting {
        if decided_in(store, s.run_id, id).await? {
            return Ok(Fail::usage(format!("approval {id} was already decided")));
        }
    }
    Ok(Fail::usage(approval::unknown_approval().to_string()))
}

/// Whether `id`, as the run `run` names its decisions, was decided already: one of its own
/// calls decided, running or done, or a child's call decided here or in the child's run.
async fn decided_in(store: &dyn Store, run: RunId, id: &str) -> Result<bool, Fail> {
    // The runs to look at, each with the chain of runs between the top one and it (a child's
    // id reaches the top wrapped once per level).
    let mut todo: Vec<(Vec<RunId>, RunId)> = vec![(Vec::new(), run)];
    while let Some((chain, run)) = todo.pop() {
        let Some((_, checkpoint)) = approval::load(store, run).await.map_err(Fail::core)? else {
            continue;
        };
        if decided_here(&checkpoint, &chain, id) {
            return Ok(true);
        }
        if chain.len() >= MAX_PATH {
            continue;
        }
        for slot in &checkpoint.calls {
            if let CallState::Nested { run_id, .. } = &slot.state {
                let mut below = chain.clone();
                below.push(*run_id);
                todo.push((below, *run_id));
            }
        }
    }
    Ok(false)
}

/// `id` as the top run of `chain` names the decision `own` of the last run of `chain`.
fn lift(chain: &[RunId], own: &str) -> String {
    chain
        .iter()
        .rev()
        .fold(own.to_owned(), |acc, run| nested_id(*run, &acc))
}

fn decided_here(checkpoint: &RunCheckpoint, chain: &[RunId], id: &str) -> bool {
    checkpoint.calls.iter().any(|slot| match &slot.state {
        CallState::Decided { .. } | CallState::InFlight { .. } | CallState::Done { .. } => {
            lift(chain, &slot.approval_id) == id
        }
        CallState::Nested {
            run_id, decisions, ..
        } => {
            let mut below = chain.to_vec();
            below.push(*run_id);
            decisions.iter().any(|d| lift(&below, &d.id) == id)
        }
        CallState::Pending => false,
    })
}

/// What a resume of `run` that failed with `fail` means, when it lost to another process.
pub(crate) async fn lost_resume(
    store: &dyn Store,
    session: SessionId,
    run: RunId,
    fail: Fail,
) -> Fail {
    if fail.message == approval::being_resumed().to_string()
        || fail.message.starts_with("the run's approvals changed")
    {
        return Fail::usage(format!(
            "run {run} of {session} is being resumed by another process"
        ));
    }
    if fail.message == approval::unknown_approval().to_string()
        && matches!(approval::load(store, run).await, Ok(None))
    {
        return Fail::usage(format!(
            "run {run} of {session} was resumed by another process meanwhile; it waits for no \
             decision now"
        ));
    }
    fail
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_over_long_reason_is_bad_usage_naming_the_flag() {
        assert!(check_reason(None).is_ok());
        assert!(check_reason(Some(&"x".repeat(2048))).is_ok());
        let fail = check_reason(Some(&"x".repeat(2049))).unwrap_err();
        assert_eq!(
            (fail.code, fail.message.as_str()),
            (
                crate::fail::EXIT_USAGE,
                "--reason is 2049 bytes; at most 2048 are allowed"
            )
        );
    }

    #[test]
    fn ids_are_lifted_once_per_level() {
        let a: RunId = "01a238b5-0000-7000-8000-000000000001".parse().unwrap();
        let b: RunId = "01a238b5-0000-7000-8000-000000000002".parse().unwrap();
        assert_eq!(lift(&[], "apr_1"), "apr_1");
        assert_eq!(lift(&[a, b], "apr_1"), nested_id(a, &nested_id(b, "apr_1")));
    }
}
