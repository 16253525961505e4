//! The delegation algorithm: admission (every check, in the documented order, before any
//! counter, slot or event changes), then the drive (hook, factory, child run) under the
//! delegation's timeout and cancellation, then exactly one terminal report.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::Duration;

use arbor_protocol::{ChildOrigin, SessionId, SupervisorEvent};
use futures::FutureExt;
use tokio_util::sync::CancellationToken;

use crate::dispatch::panic_message;
use crate::error::{CoreError, CoreResult, LimitInfo};
use crate::run::{RunOptions, RunResult};
use crate::session::SessionRef;
use crate::supervisor::catalog::ChildContext;
use crate::supervisor::core::Supervisor;
use crate::supervisor::hooks::{BeforeContext, BeforeDecision};
use crate::supervisor::limits::{LimitsInput, SupervisorLimits};
use crate::supervisor::policy::{EffectivePolicy, Lifetime, PolicyInput, Report};
use crate::supervisor::pump::run_pump;
use crate::supervisor::slots::SlotGuard;

/// One delegation request.
#[derive(Debug, Clone, Default)]
pub struct DelegationRequest {
    /// The allow-listed child to run.
    pub child_id: String,
    /// Its task.
    pub input: String,
    /// A thread within the child's resource (default `default`).
    pub thread_id: Option<String>,
    /// A readable name for the child's session (default: the child id).
    pub name: Option<String>,
    /// Limits that may only lower the inherited ones.
    pub limits: LimitsInput,
    /// Lifetime, report, milestone and budget share, narrowing the child's policy.
    pub policy: PolicyInput,
    /// The caller's cancellation (ignored for session lifetime).
    pub cancel: Option<CancellationToken>,
    /// The session delegating, whose child the new session becomes.
    pub parent: Option<SessionRef>,
}

impl DelegationRequest {
    /// A request to run `child_id` on `input`.
    pub fn new(child_id: impl Into<String>, input: impl Into<String>) -> Self {
        Self {
            child_id: child_id.into(),
            input: input.into(),
            ..Self::default()
        }
    }
}

/// A finished delegation.
#[derive(Debug, Clone, PartialEq)]
pub struct DelegationResult {
    /// The delegation.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
    /// The child's session (where its transcript lives).
    pub session_id: SessionId,
    /// The child session's name.
    pub name: String,
    /// The child run's result.
    pub result: RunResult,
}

/// Where a delegation sits: the chain above it.
#[derive(Debug, Clone)]
pub(crate) struct Scope {
    pub(crate) path: Arc<[String]>,
    pub(crate) parents: Arc<[String]>,
    pub(crate) token: CancellationToken,
}

/// Delegates on behalf of one place in the tree: the host (top level) or a running child.
#[derive(Debug, Clone)]
pub struct Delegator {
    pub(crate) supervisor: Supervisor,
    pub(crate) scope: Option<Arc<Scope>>,
}

impl Delegator {
    /// The supervisor it delegates through.
    pub fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    /// Child ids from the top down to the delegating child (empty at the top).
    pub fn path(&self) -> &[String] {
        self.scope.as_deref().map_or(&[], |s| &s.path)
    }

    /// Runs a child and waits for it.
    pub async fn delegate(&self, request: DelegationRequest) -> CoreResult<DelegationResult> {
        let admitted = self
            .supervisor
            .admit(self.scope.as_deref(), request, false)?;
        self.supervisor.begin(&admitted);
        // The drive runs as its own task, so a caller that drops this future (its run was
        // cancelled or timed out) still gets exactly one terminal report; the guard cancels
        // the delegation when that happens.
        let guard = admitted.token.clone().drop_guard();
        let supervisor = self.supervisor.clone();
        let task = self
            .supervisor
            .inner
            .tracker
            .spawn(async move { supervisor.drive(admitted).await });
        let joined = task.await;
        guard.disarm();
        joined.unwrap_or_else(|e| {
            Err(CoreError::Supervisor(format!(
                "delegation task failed: {e}"
            )))
        })
    }

    /// Starts a child and returns its handle at once; see [`Supervisor::wait`].
    pub fn delegate_async(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        let admitted = self
            .supervisor
            .admit(self.scope.as_deref(), request, true)?;
        Ok(self.supervisor.launch(admitted))
    }
}

/// The handle of an async delegation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncHandle {
    /// The delegation.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
}

/// Everything admission settled.
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(crate) entry: usize,
    pub(crate) child_id: String,
    pub(crate) delegation_id: String,
    pub(crate) depth: u32,
    pub(crate) path: Arc<[String]>,
    pub(crate) parents: Arc<[String]>,
    pub(crate) input: String,
    pub(crate) limits: SupervisorLimits,
    pub(crate) policy: EffectivePolicy,
    pub(crate) thread: String,
    pub(crate) name: String,
    pub(crate) parent: Option<SessionRef>,
    pub(crate) token: CancellationToken,
    pub(crate) caller: Option<CancellationToken>,
    pub(crate) slot: SlotGuard,
}

/// How the work between start and terminal ended.
pub(crate) enum Worked {
    Ran {
        session_id: SessionId,
        name: String,
        result: RunResult,
    },
    Rejected(String),
    Error(CoreError),
}

impl Supervisor {
    /// A delegator for the host (top of the tree).
    pub fn delegator(&self) -> Delegator {
        Delegator {
            supervisor: self.clone(),
            scope: None,
        }
    }

    /// Runs a child and waits for it (top level).
    pub async fn delegate(&self, request: DelegationRequest) -> CoreResult<DelegationResult> {
        self.delegator().delegate(request).await
    }

    /// Starts a child and returns its handle (top level).
    pub fn delegate_async(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.delegator().delegate_async(request)
    }

    /// Every check, in order, before anything is counted. Synchronous, so concurrent calls
    /// cannot overshoot a limit between a check and its reservation.
    pub(crate) fn admit(
        &self,
        scope: Option<&Scope>,
        request: DelegationRequest,
        is_async: bool,
    ) -> CoreResult<Admitted> {
        let inner = &self.inner;
        if inner.session_token.is_cancelled() {
            return Err(CoreError::Supervisor(
                "Supervisor session has ended".to_owned(),
            ));
        }
        let entry_index = *inner
            .index
            .get(&request.child_id)
            .ok_or_else(|| CoreError::Denied("Child is not allow-listed".to_owned()))?;
        let entry = &inner.entries[entry_index];
        let above: &[String] = scope.map_or(&[], |s| &s.path);
        if above.contains(&request.child_id) {
            return Err(CoreError::limit_error("Delegation cycle detected", None));
        }
        let policy = entry.policy.narrow(&request.policy, inner.child_events)?;
        if policy.lifetime == Lifetime::Session && !is_async {
            return Err(CoreError::validation(
                "Session-lifetime children must be started with delegate_async (mode: \"async\")",
            ));
        }
        if policy.lifetime == Lifetime::Session && scope.is_some() {
            return Err(CoreError::validation(
                "Session-lifetime children can only be started from the top level",
            ));
        }
        let mut limits = inner
            .limits
            .narrow(&entry.limits)?
            .narrow(&request.limits)?;
        if let Some(share) = policy.budget_share {
            limits = limits.narrow(&limits.scaled(share).to_input())?;
        }
        let depth = u32::try_from(above.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        check_depth(depth, &limits)?;
        let input = self.redact(&request.input);
        check_bytes(&input, &limits)?;
        let slot = inner.slots.reserve(
            limits
                .max_active_children
                .min(inner.limits.max_active_children),
        )?;

        let delegation_id = format!("{}-{}", inner.id, uuid_like());
        let mut path: Vec<String> = above.to_vec();
        path.push(request.child_id.clone());
        let parents: Vec<String> = scope.map_or_else(Vec::new, |s| s.parents.to_vec());
        let token = match (policy.lifetime, scope) {
            (Lifetime::Task, Some(s)) => s.token.child_token(),
            _ => inner.session_token.child_token(),
        };
        let caller = match policy.lifetime {
            Lifetime::Task => request.cancel,
            Lifetime::Session => None,
        };
        let thread = request.thread_id.as_deref().unwrap_or("default").to_owned();
        let name = request.name.unwrap_or_else(|| request.child_id.clone());
        Ok(Admitted {
            entry: entry_index,
            child_id: request.child_id,
            delegation_id,
            depth,
            path: Arc::from(path),
            parents: Arc::from(parents),
            input,
            limits,
            policy,
            thread,
            name,
            parent: request.parent,
            token,
            caller,
            slot,
        })
    }

    /// Counts the attempt and registers the delegation as live. Called synchronously at
    /// start, before an async launch returns its handle, so a failure of an ancestor counts
    /// every descendant already started.
    pub(crate) fn begin(&self, a: &Admitted) {
        self.state().summary.start(
            a.entry,
            &a.delegation_id,
            a.parents.clone(),
            a.policy.lifetime,
        );
    }

    /// Runs a begun delegation to its terminal report; then ends its task-lifetime
    /// descendants (nothing keeps running under a delegation that is over).
    pub(crate) async fn drive(&self, admitted: Admitted) -> CoreResult<DelegationResult> {
        let a = admitted;
        let origin = ChildOrigin {
            child_id: a.child_id.clone(),
            delegation_id: a.delegation_id.clone(),
            depth: a.depth,
        };
        let (deadline_tx, mut deadline_rx) = tokio::sync::watch::channel(
            tokio::time::Instant::now() + Duration::from_millis(a.limits.timeout_ms),
        );
        let mut timed_out = false;
        let worked = {
            let work = self.work(&a, &origin, &deadline_tx);
            tokio::pin!(work);
            let caller = a.caller.clone().unwrap_or_default();
            loop {
                let deadline = *deadline_rx.borrow_and_update();
                tokio::select! {
                    biased;
                    w = &mut work => break w,
                    _ = caller.cancelled(), if !a.token.is_cancelled() => a.token.cancel(),
                    changed = deadline_rx.changed() => { let _ = changed; }
                    _ = tokio::time::sleep_until(deadline), if !timed_out && !a.token.is_cancelled() => {
                        timed_out = true;
                        a.token.cancel();
                    }
                }
            }
        };
        let host_aborted = a.token.is_cancelled() && !timed_out;
        let outcome = self
            .terminal(&a, &origin, worked, timed_out, host_aborted)
            .await;
        a.token.cancel();
        drop(a.slot);
        outcome
    }

    /// Hook, factory and child run.
    async fn work(
        &self,
        a: &Admitted,
        origin: &ChildOrigin,
        deadline: &tokio::sync::watch::Sender<tokio::time::Instant>,
    ) -> Worked {
        let inner = &self.inner;
        let entry = &inner.entries[a.entry];
        let mut limits = a.limits;
        let mut input = a.input.clone();
        let mut hook_permission = None;
        if let Some(hook) = &inner.before {
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
                _ = a.token.cancelled() => return Worked::Error(CoreError::Supervisor("Delegation cancelled".into())),
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
        let resource_id = format!("{}/{}/{}", inner.id, a.delegation_id, a.child_id);
        let thread_id = format!("{resource_id}/{}", encode_component(&a.thread));
        let mut permission = inner.permission.and(&entry.permission);
        if let Some(p) = &hook_permission {
            permission = permission.and(p);
        }
        self.publish(SupervisorEvent::DelegationStarted {
            origin: origin.clone(),
            resource_id: resource_id.clone(),
            thread_id: thread_id.clone(),
        });
        let mut parents = a.parents.to_vec();
        parents.push(a.delegation_id.clone());
        let ctx = ChildContext {
            child_id: a.child_id.clone(),
            delegation_id: a.delegation_id.clone(),
            depth: a.depth,
            path: a.path.clone(),
            resource_id: resource_id.clone(),
            thread_id: thread_id.clone(),
            permission: permission.clone(),
            cancel: a.token.clone(),
            delegator: Delegator {
                supervisor: self.clone(),
                scope: Some(Arc::new(Scope {
                    path: a.path.clone(),
                    parents: Arc::from(parents),
                    token: a.token.clone(),
                })),
            },
        };
        let built = tokio::select! {
            b = AssertUnwindSafe(entry.factory.create(ctx)).catch_unwind() => b,
            _ = a.token.cancelled() => return Worked::Error(CoreError::Supervisor("Delegation cancelled".into())),
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
        let agent = match agent
            .to_builder()
            .permission(permission.and(agent.permission()))
            .limits(agent.limits().narrow(&limits.run_limits()))
            .build()
        {
            Ok(agent) => agent,
            Err(e) => return Worked::Error(e),
        };
        let mut builder = agent
            .session()
            .store(inner.store.clone())
            .name(a.name.clone())
            .meta(serde_json::json!({
                "supervisor_id": inner.id,
                "delegation_id": a.delegation_id,
                "child_id": a.child_id,
                "resource_id": resource_id,
                "thread_id": thread_id,
            }));
        if let Some(parent) = a.parent {
            builder = builder.parent(parent);
        }
        let mut session = match builder.create().await {
            Ok(s) => s,
            Err(e) => return Worked::Error(e),
        };
        self.publish(SupervisorEvent::DelegationAdmitted {
            origin: origin.clone(),
            session_id: session.id(),
            name: a.name.clone(),
            model: agent.model().to_owned(),
        });
        let options = RunOptions::default().with_cancel(a.token.clone());
        let ran = if a.policy.report == Report::OnComplete {
            AssertUnwindSafe(session.run(input, options))
                .catch_unwind()
                .await
        } else {
            // The pump subscribes before the run and is drained before any terminal event.
            let sub = session.subscribe();
            let stop = CancellationToken::new();
            let pump = run_pump(self, origin.clone(), a.policy, limits, sub, stop.clone());
            let run = async {
                let r = AssertUnwindSafe(session.run(input, options))
                    .catch_unwind()
                    .await;
                stop.cancel();
                r
            };
            tokio::join!(run, pump).0
        };
        match ran {
            Ok(Ok(result)) => Worked::Ran {
                session_id: session.id(),
                name: a.name.clone(),
                result,
            },
            Ok(Err(e)) => Worked::Error(e),
            Err(p) => Worked::Error(CoreError::Supervisor(format!(
                "child \"{}\" run panicked: {}",
                a.child_id,
                panic_message(&*p)
            ))),
        }
    }
}

fn check_depth(depth: u32, limits: &SupervisorLimits) -> CoreResult<()> {
    if depth > limits.max_depth {
        return Err(CoreError::limit_error(
            "Delegation depth exceeded",
            Some(LimitInfo {
                limit: "max_depth",
                maximum: u64::from(limits.max_depth),
                observed: u64::from(depth),
            }),
        ));
    }
    Ok(())
}

fn check_bytes(input: &str, limits: &SupervisorLimits) -> CoreResult<()> {
    let bytes = input.len() as u64;
    if bytes > limits.max_message_bytes {
        return Err(CoreError::limit_error(
            "Delegation input exceeds max bytes",
            Some(LimitInfo {
                limit: "max_message_bytes",
                maximum: limits.max_message_bytes,
                observed: bytes,
            }),
        ));
    }
    Ok(())
}

/// Percent-encodes everything but unreserved characters (as `encodeURIComponent` does).
fn encode_component(s: &str) -> String {
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

/// A fresh, time-ordered, never reused id suffix.
fn uuid_like() -> String {
    arbor_protocol::RunId::new().as_uuid().simple().to_string()
}
