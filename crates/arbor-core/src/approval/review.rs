//! What a person sees of a held call beyond its arguments: the review a tool computes when
//! one of its calls starts waiting ([`DynTool::review`]), kept in the store (namespace
//! [`REVIEW_NAMESPACE`], key = the call's own approval id, see [`own_id`]), listed with the
//! pending decision by every surface, and read by the call once approved to check that what
//! it is about to do is still what was shown.
//!
//! The newest review of a call id stands: a call is held once per turn, and a model that
//! repeats an id in a later turn gets that call's own review, never an older one.
//!
//! [`DynTool::review`]: crate::tool::DynTool::review

use std::collections::HashMap;

use arbor_protocol::{PendingDecision, RunId};
use arbor_store::{Store, StoreError};
use serde_json::Value;

use crate::approval::own_id;
use crate::error::{CoreError, CoreResult};

/// The store namespace of reviews.
pub const REVIEW_NAMESPACE: &str = "review";

/// Keeps `review` for the call whose own approval id is `approval_id` (over an older one).
pub(crate) async fn record(store: &dyn Store, approval_id: &str, review: &Value) -> CoreResult<()> {
    // Compare-and-swap over whatever version is there (two writers of one call id do not
    // exist: a call is held by the one process running its turn).
    for _ in 0..3 {
        let version = store
            .checkpoint(REVIEW_NAMESPACE, approval_id)
            .await?
            .map_or(0, |c| c.version);
        match store
            .put_checkpoint(REVIEW_NAMESPACE, approval_id, review, version)
            .await
        {
            Ok(_) => return Ok(()),
            Err(StoreError::Conflict { .. }) => continue,
            Err(e) => return Err(CoreError::Store(e)),
        }
    }
    Err(CoreError::Conflict(format!(
        "the review of {approval_id} kept changing while it was written"
    )))
}

/// The review kept for call `call_id` of run `run`, if its tool computed one when it was
/// held.
pub async fn review(store: &dyn Store, run: RunId, call_id: &str) -> CoreResult<Option<Value>> {
    Ok(store
        .checkpoint(REVIEW_NAMESPACE, &own_id(run, call_id))
        .await?
        .map(|c| c.value))
}

/// The reviews of `pending` decisions (their own or a descendant's calls), by decision id.
pub async fn reviews_of(
    store: &dyn Store,
    pending: &[PendingDecision],
) -> CoreResult<HashMap<String, Value>> {
    let mut out = HashMap::new();
    for p in pending {
        let Some(run) = p.run_id else { continue };
        if let Some(v) = review(store, run, &p.call_id).await? {
            out.insert(p.id.clone(), v);
        }
    }
    Ok(out)
}
