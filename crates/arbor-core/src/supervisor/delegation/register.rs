//! Registration: the async half of admission. After the synchronous checks (and the slot),
//! the requested model is preflighted and the child's session record is written, which
//! reserves its name among its siblings atomically (a requested name was reserved in this
//! process at admission, before the first await, and is held until then). Only then does the caller get a handle,
//! and only then is the attempt counted: a failure here leaves no record and no counter.

use arbor_protocol::{SessionId, SupervisorEvent};
use arbor_store::{Meta, SessionRecord};

use crate::error::{CoreError, CoreResult};
use crate::outcome::SessionRef;
use crate::session::name_error;
use crate::supervisor::config::catalog::ChildEntry;
use crate::supervisor::config::child_meta::{ChildMeta, Path};
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::names;
use crate::supervisor::config::policy::{EffectivePolicy, PolicyInput};
use crate::supervisor::delegation::admitted::Admitted;
use crate::supervisor::runtime::Supervisor;

impl Supervisor {
    /// Preflights the model and writes the child's record (reserving its name); see
    /// [`Supervisor::register`], which hands the delegation over as registered.
    pub(crate) async fn write_record(&self, a: &mut Admitted) -> CoreResult<()> {
        let sup = self;
        let entry = sup
            .catalog()
            .entry(a.terms.entry)
            .ok_or_else(crate::supervisor::runtime::unknown_entry)?;
        // Every resolved model is preflighted, the entry's default too: a spawn never runs
        // a model its provider would refuse (HTTP providers cache a passed check).
        if let (Some(model), Some(provider)) = (&a.terms.model, &entry.preflight) {
            provider.preflight(model).await.map_err(|e| {
                CoreError::invalid(
                    "model",
                    format!(
                        "Model \"{model}\" for child \"{}\" failed its preflight: {e}; \
                         allowed models: {}",
                        a.terms.child_id,
                        entry.models().join(", ")
                    ),
                )
            })?;
        }
        let agent = entry
            .agent_name
            .clone()
            .unwrap_or_else(|| a.terms.child_id.clone());
        let mut record =
            SessionRecord::new_root("", agent, a.terms.model.clone().unwrap_or_default());
        // The reservation is held until the record exists (then the store holds the name);
        // an error or a dropped registration frees it.
        let reserved = a.requested_name.take();
        record.name = match &reserved {
            Some(name) => name.name().to_owned(),
            None => names::default_name(&a.terms.input, record.id),
        };
        let parent = match a.terms.parent {
            Some(parent) => Some(self.place_under(parent, &mut record).await?),
            None => None,
        };
        let inherited_depth = parent
            .as_ref()
            .and_then(crate::supervisor::delegation::depth::stored);
        record.spawned_by = a.terms.spawned_by;
        // Where its conversation forks, read before anything is written.
        let fork = self.fork_point(a, parent.as_ref()).await?;
        // Its pool, reserved from its parent's before anything is written (a refusal leaves
        // nothing behind).
        let pool = self.child_budget(a, &record, parent.as_ref()).await?;
        record.meta =
            Meta::typed(self.child_meta(a, parent.as_ref(), inherited_depth, fork, &pool));
        // Waiting for a slot: listed as such until its run starts.
        if a.control.slot.is_queued() {
            record.status = arbor_protocol::SessionStatus::Queued;
        }
        if let Err(e) = sup.live().store().create_session(&record).await {
            if pool.grant.as_ref().is_some_and(|g| g.opened) {
                // Its pool was reserved for a record that could not be written.
                crate::budget::remove_pool(sup.live().store().as_ref(), record.root_id, record.id)
                    .await;
            }
            return Err(name_error(e, record.depth));
        }
        drop(reserved);
        a.name = record.name.clone();
        // Known to the hub from admission on: messages can be delivered to it at once, and
        // the tree is not quiet while it is about to run.
        sup.live().hub().register(
            record.id,
            record.parent_id,
            std::sync::Arc::new(crate::session::inbox::Inbox::new()),
            false,
        );
        // Running from here on; a send that arrives before its first run begins waits for it.
        sup.live()
            .hub()
            .start_first_run(record.id, &a.control.token);
        self.publish(SupervisorEvent::DelegationAdmitted {
            origin: arbor_protocol::ChildOrigin {
                child_id: a.terms.child_id.clone(),
                delegation_id: a.terms.delegation_id.clone(),
                depth: a.terms.depth,
            },
            session_id: record.id,
            name: record.name.clone(),
            model: record.model.clone(),
        });
        a.record = Some(record);
        Ok(())
    }

    /// What a child's record keeps of its admission ([`ChildMeta`]).
    fn child_meta(
        &self,
        a: &Admitted,
        parent: Option<&SessionRecord>,
        max_depth: Option<u32>,
        fork: Option<crate::session::fork::ForkPoint>,
        pool: &crate::supervisor::delegation::budget::ChildPool,
    ) -> ChildMeta {
        let (resource_id, thread_id) = resource_and_thread(self, a);
        ChildMeta {
            child_id: a.terms.child_id.clone(),
            delegation_id: a.terms.delegation_id.clone(),
            fork,
            lifetime: a.terms.policy.lifetime.as_str(),
            limits: a.terms.limits,
            max_depth,
            mode: a.terms.mode.as_str(),
            output_schema: a.terms.output.clone(),
            path: Path(a.terms.path.clone()),
            policy: a.terms.policy,
            queued_input: a.control.slot.is_queued().then(|| a.terms.input.clone()),
            thread_id,
            resource_id,
            scopes: a
                .terms
                .identity
                .as_ref()
                .map(|i| i.scopes().iter().cloned().collect()),
            spawn_call: a.terms.spawn_call.clone(),
            standing: self.standing_of(a, parent),
            supervisor_id: self.settings().id().to_owned(),
            thinking: a.terms.thinking,
            controls: a.terms.controls.clone(),
            budgeted: pool.budgeted,
            budget: pool.grant.as_ref().map(|g| g.budget),
            budget_clamped: pool.grant.as_ref().is_some_and(|g| g.clamped),
        }
    }

    /// A child's standing decisions: its parent's (a root's children take the
    /// supervisor's), narrowed by its catalog entry's layer.
    fn standing_of(
        &self,
        a: &Admitted,
        parent: Option<&SessionRecord>,
    ) -> crate::approval::standing::Standing {
        let inherited = match parent {
            // A child's own: never the supervisor's again (that could widen what its entry
            // narrowed).
            Some(p) if p.parent_id.is_some() => {
                crate::approval::standing::Standing::of_record(&p.meta)
            }
            // A root's children take the supervisor's (a root's meta is its host's to fill:
            // never a way around the supervisor's).
            Some(_) | None => self.settings().standing().clone(),
        };
        let layer = self
            .catalog()
            .get(&a.terms.child_id)
            .and_then(|(_, e)| e.standing.as_ref());
        inherited.narrowed(layer)
    }

    /// Where a forking delegation's conversation forks from its parent's (`None` when it
    /// does not fork, or has no parent).
    async fn fork_point(
        &self,
        a: &Admitted,
        parent: Option<&SessionRecord>,
    ) -> CoreResult<Option<crate::session::fork::ForkPoint>> {
        match parent {
            Some(p) => {
                crate::session::fork::ForkPoint::at(
                    self.live().store().as_ref(),
                    p.id,
                    a.terms
                        .spawn_call
                        .as_deref()
                        .map(|c| (c, a.terms.spawned_by.map(|s| s.run_id))),
                    a.terms.fork,
                )
                .await
            }
            None => Ok(None),
        }
    }

    /// Places `record` under its parent, checked open and stored here: the parent's id, root
    /// and depth + 1, and within the parent's own maximum depth if its host lowered it
    /// (checked before anything is written; the child inherits it). Returns the parent's
    /// record.
    async fn place_under(
        &self,
        parent: SessionRef,
        record: &mut SessionRecord,
    ) -> CoreResult<SessionRecord> {
        if self.live().hub().is_closed(parent.id) {
            return Err(CoreError::denied(
                crate::error::DenyReason::ParentClosed,
                "Cannot spawn a child after its parent was closed",
            ));
        }
        let stored = match self.live().store().session(parent.id).await? {
            Some(p) if p.tombstone.is_none() => p,
            // Not in this store at all: the host created the parent elsewhere.
            None if parent.depth == 0 => {
                return Err(CoreError::Config(format!(
                    "the root session {} is not in the supervisor's store: create it with \
                     Supervisor::root_session (or in Supervisor::store()) so its children \
                     can be recorded under it",
                    parent.id
                )));
            }
            Some(_) | None => {
                return Err(CoreError::denied(
                    crate::error::DenyReason::ParentClosed,
                    "Cannot spawn a child of a deleted or unknown session",
                ));
            }
        };
        record.parent_id = Some(stored.id);
        record.root_id = stored.root_id;
        record.depth = stored.depth + 1;
        if let Some(max) = crate::supervisor::delegation::depth::stored(&stored) {
            crate::supervisor::delegation::depth::check(record.depth, max)?;
        }
        Ok(stored)
    }
}

/// The limits and policy admission gave the child of `record`, narrowed again by what the
/// catalog and the supervisor allow today (a definition may only have tightened since).
/// A record from before they were stored gets the catalog's.
pub(crate) fn admitted_terms(
    sup: &Supervisor,
    entry: &ChildEntry,
    record: &SessionRecord,
) -> CoreResult<(SupervisorLimits, EffectivePolicy)> {
    let mut limits = sup.settings().limits().narrow(&entry.limits)?;
    // A child registered by this process keeps its typed terms; any other, their JSON.
    let (stored_limits, stored) = match record.meta.typed_as::<ChildMeta>() {
        Some(child) => (Some(child.limits), Some(child.policy)),
        None => (
            serde_json::from_value::<SupervisorLimits>(record.meta["limits"].clone()).ok(),
            serde_json::from_value::<EffectivePolicy>(record.meta["policy"].clone()).ok(),
        ),
    };
    if let Some(stored) = stored_limits {
        limits = limits.narrow(&stored.to_input())?;
    }
    let policy = match stored {
        Some(p) => {
            let replay = PolicyInput {
                lifetime: Some(p.lifetime),
                report: Some(p.report),
                every_turns: p.every_turns,
                // Already applied to the stored limits: scaling them again would shrink them.
                budget_share: None,
            };
            let mut policy = entry
                .policy
                .narrow(&replay, sup.settings().child_events())?;
            policy.budget_share = p.budget_share;
            policy
        }
        None => entry
            .policy
            .narrow(&PolicyInput::default(), sup.settings().child_events())?,
    };
    Ok((limits, policy))
}

/// A delegation's resource id (`<supervisor>/<delegation>/<child>`) and thread id (the
/// resource id, then its thread, percent-encoded).
pub(crate) fn resource_and_thread(sup: &Supervisor, a: &Admitted) -> (String, String) {
    let resource_id = format!(
        "{}/{}/{}",
        sup.settings().id(),
        a.terms.delegation_id,
        a.terms.child_id
    );
    let thread_id = format!("{resource_id}/{}", encode_component(&a.terms.thread));
    (resource_id, thread_id)
}

/// The session an admitted delegation runs in.
pub(crate) fn session_of(a: &Admitted) -> Option<SessionId> {
    a.record.as_ref().map(|r| r.id)
}

/// Percent-encodes everything but unreserved characters (as `encodeURIComponent` does).
pub(crate) fn encode_component(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric()
            || matches!(
                b,
                b'-' | b'_' | b'.' | b'!' | b'~' | b'*' | b'\'' | b'(' | b')'
            )
        {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}
