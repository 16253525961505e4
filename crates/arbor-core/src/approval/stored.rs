//! The checkpoints of suspended runs in the store: reading one ([`load`], [`suspension`],
//! [`checkpoints_of`], [`suspensions`]), writing one compare-and-swap ([`save`]), and
//! recording decisions on one run's own record ([`decide`]).

use arbor_protocol::{ApprovalDecision, RunId, SessionId};
use arbor_store::{Store, StoreError};

use super::{RUN_NAMESPACE, RunCheckpoint, Suspension, unknown_approval};
use crate::error::{CoreError, CoreResult};

/// The stored checkpoint of `run`, if it is suspended.
pub async fn load(store: &dyn Store, run: RunId) -> CoreResult<Option<(u64, RunCheckpoint)>> {
    let Some(c) = store.checkpoint(RUN_NAMESPACE, &run.to_string()).await? else {
        return Ok(None);
    };
    let checkpoint: RunCheckpoint = serde_json::from_value(c.value)
        .map_err(|e| CoreError::Store(StoreError::Corrupt(format!("run checkpoint {run}: {e}"))))?;
    Ok(Some((c.version, checkpoint)))
}

/// Writes `checkpoint` over `expected` (0: a new one); a stale version is
/// `Conflict("the run's approvals changed: expected version …")`, nothing written.
pub async fn save(store: &dyn Store, checkpoint: &RunCheckpoint, expected: u64) -> CoreResult<u64> {
    put(store, checkpoint, expected).await.map_err(|e| match e {
        CoreError::Store(e) => stale(e),
        other => other,
    })
}

/// [`save`], a stale version left as the store's `Conflict` (for a caller that reads again
/// and retries).
pub(crate) async fn put(
    store: &dyn Store,
    checkpoint: &RunCheckpoint,
    expected: u64,
) -> CoreResult<u64> {
    let value = serde_json::to_value(checkpoint)
        .map_err(|e| CoreError::Supervisor(format!("a run checkpoint does not encode: {e}")))?;
    Ok(store
        .put_checkpoint(
            RUN_NAMESPACE,
            &checkpoint.run_id.to_string(),
            &value,
            expected,
        )
        .await?)
}

fn stale(e: StoreError) -> CoreError {
    match e {
        StoreError::Conflict { expected, actual } => CoreError::Conflict(format!(
            "the run's approvals changed: expected version {expected}, found {actual}"
        )),
        other => CoreError::Store(other),
    }
}

/// What `run` waits on (the run must be suspended, else the one unknown-approval error).
pub async fn suspension(store: &dyn Store, run: RunId) -> CoreResult<Suspension> {
    let (version, c) = load(store, run).await?.ok_or_else(unknown_approval)?;
    Ok(Suspension {
        run_id: c.run_id,
        session_id: c.session_id,
        version,
        pending: c.pending(),
    })
}

/// Every suspended run of `session`, as stored (with its version).
pub async fn checkpoints_of(
    store: &dyn Store,
    session: SessionId,
) -> CoreResult<Vec<(u64, RunCheckpoint)>> {
    let mut out = Vec::new();
    for c in store.list_checkpoints(RUN_NAMESPACE).await? {
        let Ok(checkpoint) = serde_json::from_value::<RunCheckpoint>(c.value) else {
            continue;
        };
        if checkpoint.session_id == session {
            out.push((c.version, checkpoint));
        }
    }
    Ok(out)
}

/// Every suspended run of `session`, with what its own record lists as waiting (see
/// [`crate::supervisor::waiting_at`] for what waits there once decisions taken through an
/// ancestor's ids are counted).
pub async fn suspensions(store: &dyn Store, session: SessionId) -> CoreResult<Vec<Suspension>> {
    Ok(checkpoints_of(store, session)
        .await?
        .into_iter()
        .map(|(version, checkpoint)| Suspension {
            run_id: checkpoint.run_id,
            session_id: session,
            version,
            pending: checkpoint.pending(),
        })
        .collect())
}

/// Records `decisions` on the suspended `run`'s own record, against `expected_version`: a
/// batch applies whole or not at all. Returns what still waits (with the new version).
/// Nothing runs until the run is resumed.
///
/// This is the record-level step: a surface deciding for a person uses
/// [`crate::supervisor::decide_at`], which routes a decision on a call that an ancestor's run
/// carries to that ancestor's record (one decision per call, whichever id names it) and
/// writes it into the call's transcript.
pub async fn decide(
    store: &dyn Store,
    run: RunId,
    expected_version: u64,
    decisions: &[ApprovalDecision],
) -> CoreResult<Suspension> {
    let (version, mut checkpoint) = load(store, run).await?.ok_or_else(unknown_approval)?;
    if version != expected_version {
        return Err(stale(StoreError::Conflict {
            expected: expected_version,
            actual: version,
        }));
    }
    checkpoint.decide(decisions)?;
    let version = save(store, &checkpoint, version).await?;
    Ok(Suspension {
        run_id: run,
        session_id: checkpoint.session_id,
        version,
        pending: checkpoint.pending(),
    })
}
