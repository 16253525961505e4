//! The runs that wait for decisions, read in one pass over their checkpoints, each with its
//! tree's root and tenant: what the metrics count and the feed watches.

use std::collections::HashMap;

use arbor_core::approval::{RUN_NAMESPACE, RunCheckpoint};
use arbor_protocol::SessionId;
use arbor_store::{Store, StoreError};

use crate::auth::tenant_of_root;

/// A suspended run, its tree's root and tenant (none when its session is gone).
pub(crate) struct Suspended {
    pub(crate) checkpoint: RunCheckpoint,
    pub(crate) root: Option<(SessionId, String)>,
}

/// Every suspended run; the sessions' roots read once each.
pub(crate) async fn suspended_runs(store: &dyn Store) -> Result<Vec<Suspended>, StoreError> {
    let mut root_of: HashMap<SessionId, Option<(SessionId, String)>> = HashMap::new();
    let mut out = Vec::new();
    for c in store.list_checkpoints(RUN_NAMESPACE).await? {
        let Ok(checkpoint) = serde_json::from_value::<RunCheckpoint>(c.value) else {
            continue;
        };
        let session = checkpoint.session_id;
        let root = match root_of.get(&session) {
            Some(r) => r.clone(),
            None => {
                let r = root_and_tenant(store, session).await?;
                root_of.insert(session, r.clone());
                r
            }
        };
        out.push(Suspended { checkpoint, root });
    }
    Ok(out)
}

/// The root of `session`'s tree and its tenant.
async fn root_and_tenant(
    store: &dyn Store,
    session: SessionId,
) -> Result<Option<(SessionId, String)>, StoreError> {
    let Some(record) = store.session(session).await? else {
        return Ok(None);
    };
    let root = if record.root_id == record.id {
        record
    } else {
        match store.session(record.root_id).await? {
            Some(root) => root,
            None => return Ok(None),
        }
    };
    Ok(Some((root.id, tenant_of_root(&root).to_owned())))
}
