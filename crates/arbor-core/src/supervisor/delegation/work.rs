//! The work of a begun delegation, between admission and the terminal report: the `before`
//! hook, the child's factory, the rebuilt agent (permission, identity and limits forced onto
//! it), its session and its run, with the child-event pump when the report policy asks.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use arbor_model::ThinkingLevel;
use arbor_protocol::{ChildOrigin, SupervisorEvent};
use futures::FutureExt;
use futures::future::Either;
use tokio_util::sync::CancellationToken;

use crate::agent::Agent;
use crate::error::CoreError;
use crate::permission::{Permission, ToolBudget};
use crate::session::Session;
use crate::session::dispatch::panic_message;
use crate::session::run::RunOptions;
use crate::supervisor::config::catalog::ChildContext;
use crate::supervisor::config::child_meta::ChildMeta;
use crate::supervisor::config::hooks::{BeforeContext, BeforeDecision};
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::policy::Report;
use crate::supervisor::config::thinking;
use crate::supervisor::delegation::admitted::{Admitted, Start, Worked, check_bytes, check_depth};
use crate::supervisor::delegation::pump::run_pump;
use crate::supervisor::delegation::register::{resource_and_thread, session_of};
use crate::supervisor::runtime::Scope;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::runtime::{ChildEntry, Delegator};

/// What the `before` hook left of the request: the limits (narrowed), the input (replaced)
/// and a permission it added.
struct Hooked {
    limits: SupervisorLimits,
    input: String,
    permission: Option<Permission>,
}

impl Supervisor {
    /// Hook, factory and child run, in that order; each step's early end is the delegation's
    /// outcome.
    pub(super) async fn work(
        &self,
        a: &Admitted,
        origin: &ChildOrigin,
        deadline: &tokio::sync::watch::Sender<tokio::time::Instant>,
    ) -> Worked {
        match self.work_steps(a, origin, deadline).await {
            Ok(worked) | Err(worked) => worked,
        }
    }

    async fn work_steps(
        &self,
        a: &Admitted,
        origin: &ChildOrigin,
        deadline: &tokio::sync::watch::Sender<tokio::time::Instant>,
    ) -> Result<Worked, Worked> {
        let Some(entry) = self.catalog().entry(a.terms.entry) else {
            return Err(Worked::Error(crate::supervisor::runtime::unknown_entry()));
        };
        // The run is marked started before anything of it happens: a delete that landed
        // since admission (or since a follow-up was claimed) has closed the session, and
        // then nothing starts (no hook, no factory, no turn).
        if let Some(id) = session_of(a) {
            self.live().hub().start_run(id, &a.control.token);
        }
        if a.control.token.is_cancelled() {
            return Err(Worked::Error(self.cancel_error(a)));
        }
        self.wait_for_slot(a, deadline).await?;
        let hooked = self.before_hook(a, deadline).await?;
        // The hook's decision is applied: the slot counts as live from here on, and a cap
        // the hook lowered is checked against the children already live (atomically).
        let limits = hooked.limits;
        let lowered = (limits.max_active_children < a.terms.limits.max_active_children)
            .then_some(limits.max_active_children);
        a.control.slot.confirm(lowered).map_err(Worked::Error)?;
        // Kept in the record of a child registered by this process; built again otherwise.
        let (resource_id, thread_id) = match a
            .record
            .as_ref()
            .and_then(|r| r.meta.typed_as::<ChildMeta>())
        {
            Some(m) => (m.resource_id.clone(), m.thread_id.clone()),
            None => resource_and_thread(self, a),
        };
        // supervisor → catalog → hook → tool budget; the agent's own comes last.
        let mut permission = self.settings().permission().and(&entry.permission);
        if let Some(p) = &hooked.permission {
            permission = permission.and(p);
        }
        let permission = permission.and_policy(ToolBudget::new(limits.max_tool_calls));
        self.publish(SupervisorEvent::DelegationStarted {
            origin: origin.clone(),
            resource_id: resource_id.clone(),
            thread_id: thread_id.clone(),
        });
        if let Some(child) =
            self.remote_child(a, limits, &hooked.input, hooked.permission.is_some())
        {
            return Ok(self.run_remote(a, child, origin, limits).await);
        }
        let ctx = self.child_context(a, resource_id, thread_id, permission.clone());
        let agent = self.build_agent(a, entry, ctx, permission, limits).await?;
        let session = self.open_session(a, agent).await?;
        Ok(self
            .run_child(a, session, origin, limits, hooked.input)
            .await)
    }

    /// A queued delegation's wait for its slot (at once for one that holds it): its timeout
    /// counts from when the slot came, not while it waited; a cancel or a delete while it
    /// waits gives up its place.
    async fn wait_for_slot(
        &self,
        a: &Admitted,
        deadline: &tokio::sync::watch::Sender<tokio::time::Instant>,
    ) -> Result<(), Worked> {
        if !a.control.slot.is_queued() {
            return Ok(());
        }
        // A day: no delegation waits that long, and the real one is set once the slot comes.
        let far = tokio::time::Instant::now() + std::time::Duration::from_secs(86_400);
        deadline.send_replace(far);
        match a.control.slot.acquire(&a.control.token).await {
            Some(_) => {
                tracing::debug!(delegation = %a.terms.delegation_id, "a queued delegation got its slot");
                deadline.send_replace(
                    tokio::time::Instant::now()
                        + std::time::Duration::from_millis(a.terms.limits.timeout_ms),
                );
                Ok(())
            }
            None => Err(Worked::Error(self.cancel_error(a))),
        }
    }

    /// The `before` hook, when the settings have one and the run was not claimed (a claimed
    /// run's hook ran where it was admitted): it allows, denies, or narrows and replaces.
    async fn before_hook(
        &self,
        a: &Admitted,
        deadline: &tokio::sync::watch::Sender<tokio::time::Instant>,
    ) -> Result<Hooked, Worked> {
        let mut hooked = Hooked {
            limits: a.terms.limits,
            input: a.terms.input.clone(),
            permission: None,
        };
        let Some(hook) = self
            .settings()
            .before()
            .filter(|_| a.control.claimed.is_none())
        else {
            return Ok(hooked);
        };
        let ctx = BeforeContext {
            child_id: a.terms.child_id.clone(),
            delegation_id: a.terms.delegation_id.clone(),
            depth: a.terms.depth,
            path: a.terms.path.clone(),
            input: hooked.input.clone(),
            limits: hooked.limits,
        };
        let decision = tokio::select! {
            d = AssertUnwindSafe(hook.before(&ctx)).catch_unwind() => d,
            _ = a.control.token.cancelled() => return Err(Worked::Error(self.cancel_error(a))),
        };
        let (new_input, new_limits, permission) = match decision {
            Err(p) => {
                return Err(Worked::Error(CoreError::Supervisor(format!(
                    "before hook panicked: {}",
                    panic_message(&*p)
                ))));
            }
            Ok(BeforeDecision::Deny { reason }) => {
                let reason = reason.unwrap_or_else(|| "Delegation denied".to_owned());
                return Err(Worked::Rejected(self.redact(&reason)));
            }
            Ok(BeforeDecision::Allow) => return Ok(hooked),
            Ok(BeforeDecision::Modify {
                input,
                limits,
                permission,
            }) => (input, limits, permission),
        };
        if let Some(l) = new_limits {
            hooked.limits = hooked.limits.narrow(&l).map_err(Worked::Error)?;
            check_depth(a.terms.depth, &hooked.limits).map_err(Worked::Error)?;
            let _ = deadline.send(
                tokio::time::Instant::now() + Duration::from_millis(hooked.limits.timeout_ms),
            );
        }
        if let Some(i) = new_input {
            hooked.input = self.redact(&i);
            check_bytes(&hooked.input, &hooked.limits).map_err(Worked::Error)?;
        }
        hooked.permission = permission;
        Ok(hooked)
    }

    /// What the child's factory is told: who, where in the tree, under what permission, and
    /// a delegator scoped below this delegation.
    fn child_context(
        &self,
        a: &Admitted,
        resource_id: String,
        thread_id: String,
        permission: Permission,
    ) -> ChildContext {
        let mut parents = a.terms.parents.to_vec();
        parents.push(a.terms.delegation_id.clone());
        ChildContext {
            child_id: a.terms.child_id.clone(),
            delegation_id: a.terms.delegation_id.clone(),
            depth: a.terms.depth,
            path: a.terms.path.clone(),
            resource_id,
            thread_id,
            permission,
            identity: a.terms.identity.clone(),
            model: a.terms.model.clone(),
            thinking: recorded_thinking(a),
            cancel: a.control.token.clone(),
            delegator: Delegator {
                supervisor: self.clone(),
                scope: Some(Arc::new(Scope {
                    path: a.terms.path.clone(),
                    parents: Arc::from(parents),
                    token: a.control.token.clone(),
                    identity: a.terms.identity.clone(),
                    sync_chain: a.terms.sync_chain,
                })),
            },
        }
    }

    /// The factory's agent, rebuilt with the permission, identity, redactor, effect store,
    /// thinking level and limits the supervisor forces onto it.
    async fn build_agent(
        &self,
        a: &Admitted,
        entry: &ChildEntry,
        ctx: ChildContext,
        permission: Permission,
        limits: SupervisorLimits,
    ) -> Result<Agent, Worked> {
        let built = tokio::select! {
            b = AssertUnwindSafe(entry.factory.create(ctx)).catch_unwind() => b,
            _ = a.control.token.cancelled() => return Err(Worked::Error(self.cancel_error(a))),
        };
        let agent = match built {
            Ok(Ok(agent)) => agent,
            Ok(Err(e)) => return Err(Worked::Error(e)),
            Err(p) => {
                return Err(Worked::Error(CoreError::Supervisor(format!(
                    "child \"{}\" factory panicked: {}",
                    a.terms.child_id,
                    panic_message(&*p)
                ))));
            }
        };
        // A child that may ask a person suspends on its own: it must be rebuilt under a
        // definition revision, else its question could never be answered.
        if self.settings().revision().is_none()
            && let Some(tool) = agent.tools().specs().iter().find(|spec| {
                agent
                    .tools()
                    .get(&spec.name)
                    .is_some_and(|t| t.asks_human())
            })
        {
            return Err(Worked::Error(CoreError::Config(format!(
                "child \"{}\" has the tool {:?}, but its supervisor has no definition revision \
                 to resume it under once the question is answered: set \
                 SupervisorBuilder::definition_revision (or durable_approvals)",
                a.terms.child_id, tool.name
            ))));
        }
        let mut builder = agent.to_builder();
        // A message-mode child answers with `send_message`: the runtime gives it the tool
        // when its factory did not, so no factory has to remember it.
        if a.terms.mode == crate::supervisor::request::Mode::Message
            && agent.tools().get("send_message").is_none()
        {
            builder = builder.dyn_tools(self.delegator().reply_tools());
        }
        // The controls admission checked, from the record, over the agent's own: every run
        // of the child keeps them (build refuses one its provider cannot carry).
        if let Some(c) = recorded_controls(a) {
            builder = builder.controls(c.over(&agent.controls().cloned().unwrap_or_default()));
        }
        let settings = self.settings();
        if let Some(table) = settings.pricing() {
            builder = builder.pricing(table.clone());
        }
        builder
            .permission(permission.and(agent.permission()))
            .overrides(
                a.terms.identity.as_deref().or(agent.identity()).cloned(),
                settings
                    .redactor()
                    .cloned()
                    .or_else(|| agent.redactor().cloned()),
                settings
                    .effects()
                    .cloned()
                    .or_else(|| agent.effect_store().cloned()),
                // The level admission checked, from the record: every run of the child
                // keeps it.
                recorded_thinking(a).or(agent.thinking()),
            )
            .limits(agent.limits().narrow(&limits.run_limits()))
            .build()
            .map_err(Worked::Error)
    }

    /// The child's session on its registered record (reopened for a follow-up, a resumed or
    /// a recovered run), with its inbox shared through the hub and the mapping back to this
    /// delegation kept beside a suspension.
    async fn open_session(&self, a: &Admitted, agent: Agent) -> Result<Session, Worked> {
        let Some(record) = a.record.clone() else {
            return Err(Worked::Error(CoreError::Supervisor(
                "delegation ran without a registered session".into(),
            )));
        };
        if !record.model.is_empty() && agent.model() != record.model {
            return Err(Worked::Error(CoreError::Supervisor(format!(
                "child \"{}\" factory built an agent for model \"{}\", but the delegation was \
                 admitted for model \"{}\"",
                a.terms.child_id,
                agent.model(),
                record.model
            ))));
        }
        let parent_id = record.parent_id;
        let store = self.live().store().clone();
        let opened = if a.control.start.reopens() {
            Session::reopen(agent, store, record).await
        } else {
            Session::attach(agent, store, record).await
        };
        let mut session = opened.map_err(Worked::Error)?;
        // One inbox per session: deliveries made before this run began are in it.
        let inbox =
            self.live()
                .hub()
                .register(session.id(), parent_id, session.inbox().clone(), false);
        session.share_inbox(inbox);
        let mapping = match &a.control.claimed {
            Some(from) => from.mapping.clone(),
            None => self.mapping_value(a),
        };
        if let Some(mapping) = mapping {
            session.keep_beside_suspension(
                crate::supervisor::delegation::nested::DELEGATION_NAMESPACE,
                mapping,
            );
        }
        Ok(session)
    }

    /// The child's run, with the event pump beside it when the report policy streams (or the
    /// relay back to the process that streams a claimed run's events).
    async fn run_child(
        &self,
        a: &Admitted,
        mut session: Session,
        origin: &ChildOrigin,
        limits: SupervisorLimits,
        input: String,
    ) -> Worked {
        let hub = self.live().hub();
        hub.start_run(session.id(), &a.control.token);
        hub.started(session.id());
        let mut options = RunOptions::default()
            .with_cancel(a.control.token.clone())
            .with_nested(Arc::new(self.clone()));
        if self.settings().gates_children() {
            // Durable approvals: every call of every child waits for a decision, its own
            // delegations included, so delegating and side effects are approved apart.
            options = options.with_approvals();
        }
        let relay = a.control.claimed.as_ref().and_then(|c| c.relay.clone());
        let ran = if a.terms.policy.report == Report::OnComplete {
            AssertUnwindSafe(run_on(&mut session, a.control.start, input, options))
                .catch_unwind()
                .await
        } else {
            // The pump subscribes before the run and is drained before any terminal event; a
            // claimed run's events go back instead to the process that streams them (its
            // pump).
            let sub = session.subscribe();
            let stop = CancellationToken::new();
            let beside = match relay {
                Some(relay) => Either::Left(crate::supervisor::delegation::remote::forward(
                    sub,
                    relay,
                    stop.clone(),
                )),
                None => Either::Right(run_pump(
                    self,
                    origin.clone(),
                    a.terms.policy,
                    limits,
                    sub,
                    stop.clone(),
                )),
            };
            let run = async {
                let r = AssertUnwindSafe(run_on(&mut session, a.control.start, input, options))
                    .catch_unwind()
                    .await;
                stop.cancel();
                r
            };
            tokio::join!(run, beside).0
        };
        match ran {
            Ok(Ok(result)) => Worked::Ran {
                session_id: session.id(),
                name: a.name.clone(),
                result: Box::new(result),
            },
            Ok(Err(CoreError::Store(arbor_store::StoreError::Deleted { .. }))) => {
                // Deleted by another process as the run started: it ends as cancelled.
                a.control.reason.set("Child was deleted");
                a.control.token.cancel();
                Worked::Error(self.cancel_error(a))
            }
            Ok(Err(e)) => Worked::Error(e),
            Err(p) => Worked::Error(CoreError::Supervisor(format!(
                "child \"{}\" run panicked: {}",
                a.terms.child_id,
                panic_message(&*p)
            ))),
        }
    }
}

/// The thinking level admission checked, kept in the child's record.
fn recorded_controls(a: &Admitted) -> Option<arbor_model::Controls> {
    a.record
        .as_ref()
        .and_then(|r| thinking::recorded_controls(&r.meta))
}

fn recorded_thinking(a: &Admitted) -> Option<ThinkingLevel> {
    a.record.as_ref().and_then(|r| thinking::recorded(&r.meta))
}

/// A first task runs on its input; a follow-up on what is pending in the inbox; a suspended
/// run goes on with its decisions. The last two are rarer and larger: boxed, so the future
/// of every delegation does not carry their size.
async fn run_on(
    session: &mut Session,
    start: Start,
    input: String,
    options: RunOptions,
) -> crate::CoreResult<crate::RunResult> {
    match start {
        Start::Fresh => session.run(input, options).await,
        Start::FollowUp => session.run_inbox(options).await,
        Start::Resume { run, .. } => Box::pin(session.resume(run, options)).await,
        Start::Recover => Box::pin(session.continue_from_transcript(options))
            .await
            .map(|(_, r)| r),
    }
}
