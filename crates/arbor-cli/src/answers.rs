//! Saying what happened when a decision or a resume finds nothing to act on. The runtime
//! answers "Unknown approval" for every id that names no call (so a forged id learns
//! nothing) and names the first decision to a person who decides a call twice; a person
//! whose resume lost a race with another process is told that instead, from what the store
//! still holds.

use arbor_core::approval;
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

/// What a resume of `run` that failed with `fail` means, when it lost to another process.
pub(crate) async fn lost_resume(
    store: &dyn Store,
    session: SessionId,
    run: RunId,
    fail: Fail,
) -> Fail {
    // Another resume holds the run, or decided on it since it was read.
    if fail.is(arbor_core::CoreErrorKind::Conflict) {
        return Fail::usage(format!(
            "run {run} of {session} is being resumed by another process"
        ));
    }
    if fail.denied_for(arbor_core::DenyReason::Unknown)
        && matches!(approval::load(store, run).await, Ok(None))
    {
        return Fail::usage(format!(
            "run {run} of {session} was resumed by another process meanwhile; it waits for no \
             decision now"
        ));
    }
    fail
}

/// What waits for a decision at `id` (see [`arbor_core::supervisor::waiting_at`]).
pub(crate) async fn waiting_at(
    store: &dyn arbor_store::Store,
    id: SessionId,
) -> Result<Vec<arbor_core::approval::Suspension>, Fail> {
    arbor_core::supervisor::waiting_at(store, id)
        .await
        .map_err(Fail::core)
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
}
