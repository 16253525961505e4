//! A run's end in the server: how the root's run ended is kept in its record
//! (`meta.result`) while the tree still counts as running here, so a reader that sees it no
//! longer live sees its result (an A2A task settles by it). A root that stopped on a call
//! waiting for a decision leaves its message-mode children's runs going: the tree quiets
//! (each reaches its own end or suspension) before it ends, and a resume asked for
//! meanwhile goes on in that tree ([`Running::quiet_down`]).

use std::sync::Arc;

use arbor_core::Session;
use arbor_protocol::SessionId;
use arbor_store::Store;
use tokio_util::sync::CancellationToken;

use super::claims::{Running, Settled};
use crate::drive::{Start, drive_tree, suspended_run};

/// Runs the root from `start` to rest: its result kept each time it stops; a suspended
/// root's tree quiets before it ends, and a resume asked for meanwhile (its decisions
/// made) resumes the root here. Returns whether the tree is hosted from now on (see
/// [`Running::run_ended`]).
pub(super) async fn run_to_rest(
    built: &crate::tree::Built,
    session: &mut Session,
    start: Start,
    token: &CancellationToken,
    claim: Option<&Running>,
    store: &Arc<dyn Store>,
) -> bool {
    let id = session.id();
    let mut result = drive_tree(built, session, start, token).await;
    loop {
        let (Some(run), Some(sup)) = (suspended_run(&result), &built.supervisor) else {
            keep_result(store, id, built.root.redactor(), &result).await;
            return claim.is_some_and(Running::run_ended);
        };
        let Some(claim) = claim else {
            // Not claimed here (nothing resumes it in place): it quiets all the same.
            keep_result(store, id, built.root.redactor(), &result).await;
            tokio::select! {
                () = sup.wait_for_quiet() => {}
                () = token.cancelled() => {}
            }
            return false;
        };
        // Quieting before the result is kept: a reader that sees it can resume in place.
        let wake = claim.quiet_down();
        keep_result(store, id, built.root.redactor(), &result).await;
        tokio::select! {
            () = sup.wait_for_quiet() => {}
            () = wake.notified() => {}
            () = token.cancelled() => {}
        }
        match claim.settle() {
            Settled::Resume(begun) if !token.is_cancelled() => {
                forget_result(store, id).await;
                begun.notify_one();
                result = drive_tree(built, session, Start::Resume(run), token).await;
            }
            Settled::Resume(begun) => {
                begun.notify_one();
                return claim.run_ended();
            }
            Settled::Ended(hosted) => return hosted,
        }
    }
}

/// Keeps how the root's run ended in its record (`meta.result`: status, stop reason, its
/// answer and error, redacted), for `GET /v1/runs/{id}`. Written with the record's version,
/// so the owner's heartbeat (also in `meta`) is never overwritten.
pub(super) async fn keep_result(
    store: &Arc<dyn Store>,
    root: SessionId,
    redactor: Option<&Arc<dyn arbor_core::Redactor>>,
    result: &arbor_core::CoreResult<arbor_core::RunResult>,
) {
    let redact = |t: &str| redactor.map_or_else(|| t.to_owned(), |r| r.redact(t).into_owned());
    let kept = match result {
        Ok(r) => {
            tracing::info!(root = %root, status = ?r.status, "run ended");
            serde_json::json!({
                "status": r.status,
                "stop_reason": r.stop_reason,
                "text": redact(&r.text),
                "error": r.error.as_deref().map(redact),
            })
        }
        Err(e) => {
            tracing::warn!(root = %root, "run failed: {e}");
            serde_json::json!({"status": "failed", "error": redact(&e.to_string())})
        }
    };
    let kept_result = |record: &arbor_store::SessionRecord| {
        let mut meta = record.meta.clone();
        meta["result"] = kept.clone();
        arbor_store::SessionUpdate {
            meta: Some(meta.into_value()),
            ..arbor_store::SessionUpdate::default()
        }
    };
    if let Err(e) = crate::store::update_record(store.as_ref(), root, kept_result).await {
        tracing::warn!(root = %root, "could not keep the run's result: {e}");
    }
}

/// Drops the result kept from the root's last run (`meta.result`), as a resume starts it
/// again; the run's end keeps its new one.
pub(super) async fn forget_result(store: &Arc<dyn Store>, root: SessionId) {
    let dropped = |record: &arbor_store::SessionRecord| {
        let mut meta = record.meta.clone().into_value();
        if let Some(m) = meta.as_object_mut() {
            m.remove("result");
        }
        arbor_store::SessionUpdate {
            meta: Some(meta),
            ..arbor_store::SessionUpdate::default()
        }
    };
    if let Err(e) = crate::store::update_record(store.as_ref(), root, dropped).await {
        tracing::warn!(root = %root, "could not drop the run's last result: {e}");
    }
}
