//! A delegation rebuilt from a stored child's record, for a run this process did not admit:
//! a worker's claimed run, a follow-up, a continued run. [`StoredTerms`] reads back the terms
//! its spawn narrowed to; [`Supervisor::rebuilt`] makes the delegation of them.

use std::sync::Arc;

use crate::error::CoreResult;
use crate::identity::Identity;
use crate::outcome::SessionRef;
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::policy::EffectivePolicy;
use crate::supervisor::delegation::admitted::{Admitted, Control, Start, Terms, child_identity};
use crate::supervisor::delegation::register::admitted_terms;
use crate::supervisor::request::Mode;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tree::handles::CancelReason;

/// What a stored child was admitted with: the catalog entry, the mode, the terms its spawn
/// narrowed to (never the catalog's wider defaults), its identity and its place in the tree.
pub(crate) struct StoredTerms {
    pub(crate) entry: usize,
    pub(crate) child_id: String,
    pub(crate) mode: Mode,
    pub(crate) limits: SupervisorLimits,
    pub(crate) policy: EffectivePolicy,
    pub(crate) identity: Option<Arc<Identity>>,
    pub(crate) path: Vec<String>,
}

impl Supervisor {
    /// The terms `record` was admitted with, or `None` when it is not one of this
    /// supervisor's children (another supervisor's id, or an entry its catalog lacks).
    pub(crate) fn stored_terms(
        &self,
        record: &arbor_store::SessionRecord,
    ) -> CoreResult<Option<StoredTerms>> {
        let child_id = record.meta["child_id"]
            .as_str()
            .unwrap_or_default()
            .to_owned();
        let (Some((entry_index, entry)), true) = (
            self.catalog().get(&child_id),
            record.meta["supervisor_id"] == self.settings().id(),
        ) else {
            return Ok(None);
        };
        let mode = match record.meta["mode"].as_str() {
            Some("sync") => Mode::Sync,
            Some("async") => Mode::Async,
            _ => Mode::Message,
        };
        let (limits, policy) = admitted_terms(self, entry, record)?;
        let scopes: Option<Vec<String>> = record.meta["scopes"].as_array().map(|a| {
            a.iter()
                .filter_map(|s| s.as_str().map(str::to_owned))
                .collect()
        });
        let identity = child_identity(
            self.settings().identity().cloned(),
            scopes.map(|s| s.into_iter().collect()).as_ref(),
        )?;
        let path: Vec<String> = record.meta["path"].as_array().map_or_else(
            || vec![child_id.clone()],
            |a| {
                a.iter()
                    .filter_map(|s| s.as_str().map(str::to_owned))
                    .collect()
            },
        );
        Ok(Some(StoredTerms {
            entry: entry_index,
            child_id,
            mode,
            limits,
            policy,
            identity,
            path,
        }))
    }
}

impl Supervisor {
    /// The delegation of the stored child `record` rebuilt from its `terms`, under `limits`
    /// with `slot`, on `input`: a new delegation id, no caller, nothing resumed, recovered,
    /// detached or claimed (the caller sets what differs).
    pub(crate) async fn rebuilt(
        &self,
        terms: StoredTerms,
        record: arbor_store::SessionRecord,
        limits: SupervisorLimits,
        slot: crate::supervisor::tree::slots::SlotGuard,
        input: String,
    ) -> CoreResult<Admitted> {
        let parent: Option<SessionRef> = match record.parent_id {
            Some(p) => self.live().store().session(p).await?.map(|r| (&r).into()),
            None => None,
        };
        Ok(Admitted {
            terms: Terms {
                entry: terms.entry,
                child_id: terms.child_id,
                delegation_id: format!(
                    "{}-{}",
                    self.settings().id(),
                    arbor_protocol::RunId::new().as_uuid().simple()
                ),
                depth: record.depth.max(1),
                path: Arc::from(terms.path),
                parents: Arc::from(Vec::new()),
                // A rebuilt run's callers are not known here: its own slot only.
                sync_chain: 1,
                input,
                limits,
                policy: terms.policy,
                thread: "default".to_owned(),
                model: (!record.model.is_empty()).then(|| record.model.clone()),
                // Kept in the record's meta, which the run reads.
                thinking: None,
                controls: None,
                budget: None,
                output: None,
                fork: crate::session::fork::ForkContext::None,
                mode: terms.mode,
                parent,
                spawned_by: None,
                spawn_call: None,
                identity: terms.identity,
            },
            name: record.name.clone(),
            requested_name: None,
            replies_at_start: record.replies,
            record: Some(record),
            control: Control {
                token: self.live().session_token().child_token(),
                reason: CancelReason::default(),
                caller: None,
                slot: crate::supervisor::tree::slots::SlotCell::held(slot),
                start: Start::Fresh,
                detached: false,
                claimed: None,
            },
        })
    }
}
