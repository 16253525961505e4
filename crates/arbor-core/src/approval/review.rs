//! What a person sees of a held call beyond its arguments: the review a tool computes when
//! one of its calls starts waiting ([`DynTool::review`]), kept in the store (namespace
//! [`REVIEW_NAMESPACE`], key = the call's own approval id, see [`own_id`]), listed with the
//! pending decision by every surface, and read by the call once approved to check that what
//! it is about to do is still what was shown.
//!
//! A review is written once: the first one stands (a call held again after a crash keeps
//! what the person may already have seen).
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

/// Keeps `review` for the call whose own approval id is `approval_id` (the first stands).
pub(crate) async fn record(store: &dyn Store, approval_id: &str, review: &Value) -> CoreResult<()> {
    match store
        .put_checkpoint(REVIEW_NAMESPACE, approval_id, review, 0)
        .await
    {
        Ok(_) | Err(StoreError::Conflict { .. }) => Ok(()),
        Err(e) => Err(CoreError::Store(e)),
    }
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
