//! The work of a begun delegation, between admission and the terminal report: the `before`
//! hook, the child's factory, the rebuilt agent (permission, identity and limits forced onto
//! it), its session and its run, with the child-event pump when the report policy asks.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{ChildOrigin, SupervisorEvent};
use futures::FutureExt;
use futures::future::Either;
use tokio_util::sync::CancellationToken;

use crate::error::CoreError;
use crate::permission::ToolBudget;
use crate::session::Session;
use crate::session::dispatch::panic_message;
use crate::session::run::RunOptions;
use crate::supervisor::config::catalog::ChildContext;
use crate::supervisor::config::child_meta::ChildMeta;
use crate::supervisor::config::hooks::{BeforeContext, BeforeDecision};
use crate::supervisor::config::policy::Report;
use crate::supervisor::config::thinking;
use crate::supervisor::delegation::admitted::{Admitted, Worked, check_bytes, check_depth};
use crate::supervisor::delegation::pump::run_pump;
use crate::supervisor::delegation::register::{resource_and_thread, session_of};
use crate::supervisor::runtime::Delegator;
use crate::supervisor::runtime::Scope;
use crate::supervisor::runtime::Supervisor;

impl Supervisor {
    /// Hook, factory and child run.
    pub(super) async fn work(
        &self,
        a: &Admitted,
        origin: &ChildOrigin,
        deadline: &tokio::sync::watch::Sender<tokio::time::Instant>,
    ) -> Worked {
        let sup = self;
        let Some(entry) = sup.catalog().entry(a.entry) else {
            return Worked::Error(crate::supervisor::runtime::unknown_entry());
        };
        // The run is marked started before anything of it happens: a delete that landed
        // since admission (or since a follow-up was claimed) has closed the session, and
        // then nothing starts (no hook, no factory, no turn).
        if let Some(id) = session_of(a) {
            sup.live().hub().start_run(id, &a.token);
        }
        if a.token.is_cancelled() {
            return Worked::Error(self.cancel_error(a));
        }
        let mut limits = a.limits;
        let mut input = a.input.clone();
        let mut hook_permission = None;
        // A claimed run's hook ran where it was admitted.
        if let Some(hook) = sup.settings().before().filter(|_| a.claimed.is_none()) {
            let ctx = BeforeContext {
                child_id: a.child_id.clone(),
                delegation_id: a.delegation_id.clone(),
                depth: a.depth,
                path: a.path.clone(),
                input: input.clone(),
                limits,
            };
            let decision = tokio::select! {
                d = AssertUnwindSafe(hook.before(&ctx)).catch_unwind() => d,
                _ = a.token.cancelled() => return Worked::Error(self.cancel_error(a)),
            };
            match decision {
                Err(p) => {
                    return Worked::Error(CoreError::Supervisor(format!(
                        "before hook panicked: {}",
                        panic_message(&*p)
                    )));
                }
                Ok(BeforeDecision::Deny { reason }) => {
                    let reason = reason.unwrap_or_else(|| "Delegation denied".to_owned());
                    return Worked::Rejected(self.redact(&reason));
                }
                Ok(BeforeDecision::Allow) => {}
                Ok(BeforeDecision::Modify {
                    input: new_input,
                    limits: new_limits,
                    permission,
                }) => {
                    if let Some(l) = new_limits {
                        limits = match limits.narrow(&l) {
                            Ok(l) => l,
                            Err(e) => return Worked::Error(e),
                        };
                        if let Err(e) = check_depth(a.depth, &limits) {
                            return Worked::Error(e);
                        }
                        let _ = deadline.send(
                            tokio::time::Instant::now() + Duration::from_millis(limits.timeout_ms),
                        );
                    }
                    if let Some(i) = new_input {
                        input = self.redact(&i);
                        if let Err(e) = check_bytes(&input, &limits) {
                            return Worked::Error(e);
                        }
                    }
                    hook_permission = permission;
                }
            }
        }
        // The hook's decision is applied: the slot counts as live from here on, and a cap
        // the hook lowered is checked against the children already live (atomically).
        let lowered = (limits.max_active_children < a.limits.max_active_children)
            .then_some(limits.max_active_children);
        if let Err(e) = a.slot.confirm(lowered) {
            return Worked::Error(e);
        }
        // Kept in the record of a child registered by this process; built again otherwise.
        let (resource_id, thread_id) = match a
            .record
            .as_ref()
            .and_then(|r| r.meta.typed_as::<ChildMeta>())
        {
            Some(m) => (m.resource_id.clone(), m.thread_id.clone()),
            None => resource_and_thread(sup, a),
        };
        let model = a.model.clone();
        let recorded_thinking = a.record.as_ref().and_then(|r| thinking::recorded(&r.meta));
        // supervisor → catalog → hook → tool budget; the agent's own comes last.
        let mut permission = sup.settings().permission().and(&entry.permission);
        if let Some(p) = &hook_permission {
            permission = permission.and(p);
        }
        let permission = permission.and_policy(ToolBudget::new(limits.max_tool_calls));
        self.publish(SupervisorEvent::DelegationStarted {
            origin: origin.clone(),
            resource_id: resource_id.clone(),
            thread_id: thread_id.clone(),
        });
        if let Some(child) = self.remote_child(a, limits, &input, hook_permission.is_some()) {
            return self.run_remote(a, child, origin, limits).await;
        }
        let mut parents = a.parents.to_vec();
        parents.push(a.delegation_id.clone());
        let ctx = ChildContext {
            child_id: a.child_id.clone(),
            delegation_id: a.delegation_id.clone(),
            depth: a.depth,
            path: a.path.clone(),
            resource_id,
            thread_id,
            permission: permission.clone(),
            identity: a.identity.clone(),
            model,
            thinking: recorded_thinking,
            cancel: a.token.clone(),
            delegator: Delegator {
                supervisor: self.clone(),
                scope: Some(Arc::new(Scope {
                    path: a.path.clone(),
                    parents: Arc::from(parents),
                    token: a.token.clone(),
                    identity: a.identity.clone(),
                })),
            },
        };
        let built = tokio::select! {
            b = AssertUnwindSafe(entry.factory.create(ctx)).catch_unwind() => b,
            _ = a.token.cancelled() => return Worked::Error(self.cancel_error(a)),
        };
        let agent = match built {
            Ok(Ok(agent)) => agent,
            Ok(Err(e)) => return Worked::Error(e),
            Err(p) => {
                return Worked::Error(CoreError::Supervisor(format!(
                    "child \"{}\" factory panicked: {}",
                    a.child_id,
                    panic_message(&*p)
                )));
            }
        };
        let mut builder = agent.to_builder();
        // A message-mode child answers with `send_message`: the runtime gives it the tool
        // when its factory did not, so no factory has to remember it.
        if a.mode == crate::supervisor::request::Mode::Message
            && agent.tools().get("send_message").is_none()
        {
            builder = builder.dyn_tools(self.delegator().reply_tools());
        }
        let agent = match builder
            .permission(permission.and(agent.permission()))
            .overrides(
                a.identity.as_deref().or(agent.identity()).cloned(),
                sup.settings()
                    .redactor()
                    .cloned()
                    .or_else(|| agent.redactor().cloned()),
                sup.settings()
                    .effects()
                    .cloned()
                    .or_else(|| agent.effect_store().cloned()),
                // The level admission checked, from the record: every run of the child
                // keeps it.
                recorded_thinking.or(agent.thinking()),
            )
            .limits(agent.limits().narrow(&limits.run_limits()))
            .build()
        {
            Ok(agent) => agent,
            Err(e) => return Worked::Error(e),
        };
        let Some(record) = a.record.clone() else {
            return Worked::Error(CoreError::Supervisor(
                "delegation ran without a registered session".into(),
            ));
        };
        if !record.model.is_empty() && agent.model() != record.model {
            return Worked::Error(CoreError::Supervisor(format!(
                "child \"{}\" factory built an agent for model \"{}\", but the delegation was \
                 admitted for model \"{}\"",
                a.child_id,
                agent.model(),
                record.model
            )));
        }
        let parent_id = record.parent_id;
        let opened = if a.resume || a.resume_run.is_some() || a.recover {
            Session::reopen(agent, sup.live().store().clone(), record).await
        } else {
            Session::attach(agent, sup.live().store().clone(), record).await
        };
        let mut session = match opened {
            Ok(s) => s,
            Err(e) => return Worked::Error(e),
        };
        // One inbox per session: deliveries made before this run began are in it.
        let inbox =
            sup.live()
                .hub()
                .register(session.id(), parent_id, session.inbox().clone(), false);
        session.share_inbox(inbox);
        let mapping = match &a.claimed {
            Some(from) => from.mapping.clone(),
            None => self.mapping_value(a),
        };
        if let Some(mapping) = mapping {
            session.keep_beside_suspension(
                crate::supervisor::delegation::nested::DELEGATION_NAMESPACE,
                mapping,
            );
        }
        sup.live().hub().start_run(session.id(), &a.token);
        sup.live().hub().started(session.id());
        let mut options = RunOptions::default()
            .with_cancel(a.token.clone())
            .with_nested(Arc::new(self.clone()));
        if sup.settings().revision().is_some() {
            // Durable approvals: every call of every child waits for a decision, its own
            // delegations included, so delegating and side effects are approved apart.
            options = options.with_approvals();
        }
        let resume = match a.resume_run {
            Some(run) => Resume::Run(run),
            None if a.recover => Resume::Interrupted,
            None if a.resume => Resume::Inbox,
            None => Resume::No,
        };
        let relay = a.claimed.as_ref().and_then(|c| c.relay.clone());
        let ran = if a.policy.report == Report::OnComplete {
            AssertUnwindSafe(run_on(&mut session, resume, input, options))
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
                    a.policy,
                    limits,
                    sub,
                    stop.clone(),
                )),
            };
            let run = async {
                let r = AssertUnwindSafe(run_on(&mut session, resume, input, options))
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
                a.reason.set("Child was deleted");
                a.token.cancel();
                Worked::Error(self.cancel_error(a))
            }
            Ok(Err(e)) => Worked::Error(e),
            Err(p) => Worked::Error(CoreError::Supervisor(format!(
                "child \"{}\" run panicked: {}",
                a.child_id,
                panic_message(&*p)
            ))),
        }
    }
}

#[derive(Debug, Clone, Copy)]
enum Resume {
    No,
    Inbox,
    Run(arbor_protocol::RunId),
    Interrupted,
}

/// A first task runs on its input; a follow-up on what is pending in the inbox; a suspended
/// run goes on with its decisions. The last two are rarer and larger: boxed, so the future
/// of every delegation does not carry their size.
async fn run_on(
    session: &mut Session,
    resume: Resume,
    input: String,
    options: RunOptions,
) -> crate::CoreResult<crate::RunResult> {
    match resume {
        Resume::No => session.run(input, options).await,
        Resume::Inbox => session.run_inbox(options).await,
        Resume::Run(run) => Box::pin(session.resume(run, options)).await,
        Resume::Interrupted => Box::pin(session.continue_from_transcript(options))
            .await
            .map(|(_, r)| r),
    }
}
