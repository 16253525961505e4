//! The delegation algorithm: admission (every check, in the documented order, before any
//! counter, slot or event changes), then the drive (hook, factory, child run) under the
//! delegation's timeout and cancellation, then exactly one terminal report.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use crate::error::{CoreError, CoreResult};
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::names;
use crate::supervisor::config::policy::{EffectivePolicy, Lifetime};
use crate::supervisor::delegation::admitted::{
    Admitted, Control, Start, Terms, check_bytes, check_depth, child_identity,
};
use crate::supervisor::request::{AsyncHandle, DelegationRequest, DelegationResult, Mode};
use crate::supervisor::runtime::{ChildEntry, Delegator, Scope, Supervisor};
use crate::supervisor::tree::handles::CancelReason;
use crate::supervisor::tree::slots::SlotCell;

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
            .admit(self.scope.as_deref(), request, Mode::Sync)?;
        let registered = self.supervisor.register(admitted).await?;
        registered.begin();
        // The drive runs inside this future (no task of its own: no hand-off to another
        // worker thread and back). A caller that drops this future (its run was cancelled
        // or timed out) hands what is left of the drive to a task, so the delegation still
        // ends with exactly one terminal report; the guard cancels it when that happens.
        let guard = registered.admitted().control.token.clone().drop_guard();
        let live = self.supervisor.live();
        let result = Inline::new(live.abandoned().clone(), || {
            live.tracker()
                .track_future(registered.drive().in_current_span())
        })
        .await;
        guard.disarm();
        result
    }

    /// Admits a child and returns its handle once its record exists (before its first
    /// model call); collect the result with [`Supervisor::wait`].
    pub async fn delegate_async(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.start(request, Mode::Async).await
    }

    /// Admits a child and returns its handle; the child answers by message (its reply, or a
    /// lifecycle notice, arrives in the parent session's inbox). The request must name its
    /// parent ([`DelegationRequest::parent`]): a message-mode child without one would have
    /// nobody to answer, so it is refused (a validation error), never started as a detached
    /// root.
    pub async fn spawn(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        if request.parent.is_none() {
            return Err(CoreError::validation(
                "a message-mode child needs a parent session to answer: set \
                 DelegationRequest::parent",
            ));
        }
        self.start(request, Mode::Message).await
    }

    async fn start(&self, request: DelegationRequest, mode: Mode) -> CoreResult<AsyncHandle> {
        let admitted = self
            .supervisor
            .admit(self.scope.as_deref(), request, mode)?;
        let registered = self.supervisor.register(admitted).await?;
        self.supervisor.launch(registered)
    }
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
    pub async fn delegate_async(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.delegator().delegate_async(request).await
    }

    /// Starts a child that answers by message (top level).
    pub async fn spawn(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.delegator().spawn(request).await
    }

    /// Every check, in order, before anything is counted. Synchronous, so concurrent calls
    /// cannot overshoot a limit between a check and its reservation. A refusal is counted
    /// (the `admission_refused` metric event).
    pub(crate) fn admit(
        &self,
        scope: Option<&Scope>,
        request: DelegationRequest,
        mode: Mode,
    ) -> CoreResult<Admitted> {
        let admitted = self.checks(scope, request, mode);
        if let Err(e) = &admitted {
            crate::process::telemetry::admission_refused(e);
        }
        admitted
    }

    /// The child's policy and limits: the catalog entry's, narrowed by the request (and the
    /// supervisor's limits, and a budget share); a session-lifetime child only async, from
    /// the top level.
    fn policy_and_limits(
        &self,
        entry: &ChildEntry,
        scope: Option<&Scope>,
        request: &DelegationRequest,
        is_async: bool,
    ) -> CoreResult<(EffectivePolicy, SupervisorLimits)> {
        let policy = entry
            .policy
            .narrow(&request.policy, self.settings().child_events())?;
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
        let mut limits = self
            .settings()
            .limits()
            .narrow(&entry.limits)?
            .narrow(&request.limits)?;
        if let Some(share) = policy.budget_share {
            limits = limits.narrow(&limits.scaled(share).to_input())?;
        }
        Ok((policy, limits))
    }

    fn checks(
        &self,
        scope: Option<&Scope>,
        mut request: DelegationRequest,
        mode: Mode,
    ) -> CoreResult<Admitted> {
        let is_async = mode != Mode::Sync;
        let sup = self;
        if sup.live().session_token().is_cancelled() {
            return Err(CoreError::closed());
        }
        // One check for every surface (the tool, `/v1`, MCP): a child has a task.
        if request.input.trim().is_empty() {
            return Err(CoreError::invalid("input", "input must not be blank"));
        }
        let (entry_index, entry) = sup.catalog().get(&request.child_id).ok_or_else(|| {
            CoreError::denied(
                crate::error::DenyReason::NotAllowListed,
                "Child is not allow-listed".to_owned(),
            )
        })?;
        let above: &[String] = scope.map_or(&[], |s| &s.path);
        if above.contains(&request.child_id) {
            return Err(CoreError::limit_error("Delegation cycle detected", None));
        }
        let (policy, limits) = self.policy_and_limits(entry, scope, &request, is_async)?;
        let depth = u32::try_from(above.len())
            .unwrap_or(u32::MAX)
            .saturating_add(1);
        check_depth(depth, &limits)?;
        let parent_identity = match scope {
            Some(s) => s.identity.clone(),
            None => sup.settings().identity().cloned(),
        };
        let identity = child_identity(parent_identity, entry.scopes.as_ref())?;
        let input = self.redact(&request.input);
        check_bytes(&input, &limits)?;
        // Reserved before any await: a concurrent spawn of the same name is refused at once.
        let requested_name = match &request.name {
            Some(n) => {
                let name = names::requested(&self.redact(n))?;
                let parent = request.parent.map(|p| p.id);
                let depth = request.parent.map_or(0, |p| p.depth.saturating_add(1));
                Some(sup.live().names().reserve(parent, &name, depth)?)
            }
            None => None,
        };
        let (model, thinking, controls, budget, output, fork) =
            self.model_terms(entry, &mut request)?;
        // The slots its caller's chain holds: a sync spawn waits with all of them.
        let caller_chain = scope.map_or(0, |s| s.sync_chain);
        let waits_with = (mode == Mode::Sync).then_some(caller_chain);
        let slot = self.slot_for(&limits, request.on_full.unwrap_or_default(), waits_with)?;

        let delegation_id = format!("{}-{}", sup.settings().id(), uuid_like());
        let mut path: Vec<String> = above.to_vec();
        path.push(request.child_id.clone());
        let parents: Vec<String> = scope.map_or_else(Vec::new, |s| s.parents.to_vec());
        // A message-mode child outlives the turn (and the run) that spawned it: it is bound
        // to the supervisor's session, and ends when it is deleted, its parent is closed, or
        // the session ends.
        let token = match (policy.lifetime, scope, mode) {
            (_, _, Mode::Message) => sup.live().session_token().child_token(),
            (Lifetime::Task, Some(s), _) => s.token.child_token(),
            _ => sup.live().session_token().child_token(),
        };
        let caller = match (policy.lifetime, mode) {
            (Lifetime::Task, Mode::Sync | Mode::Async) => request.cancel,
            _ => None,
        };
        let thread = request.thread_id.as_deref().unwrap_or("default").to_owned();
        Ok(Admitted {
            terms: Terms {
                entry: entry_index,
                child_id: request.child_id,
                delegation_id,
                depth,
                path: Arc::from(path),
                parents: Arc::from(parents),
                // Its own slot, and its caller's chain when its caller waits on it.
                sync_chain: 1 + if mode == Mode::Sync { caller_chain } else { 0 },
                input,
                limits,
                policy,
                thread,
                model,
                thinking,
                controls,
                budget,
                output,
                fork,
                mode,
                parent: request.parent,
                spawned_by: request.spawned_by,
                spawn_call: request.spawn_call,
                identity,
            },
            // Set at registration, with the record.
            name: String::new(),
            requested_name,
            record: None,
            replies_at_start: 0,
            control: Control {
                token,
                reason: CancelReason::default(),
                caller,
                slot,
                start: Start::Fresh,
                // Nobody's run carries the approvals (or questions) of a message-mode child,
                // nor those of an async one (its caller went on; `wait_agent` reads that it
                // waits): when either stops on a call, it is listed at the root and resumed on
                // its own (`resume_child`).
                detached: matches!(mode, Mode::Message | Mode::Async),
                claimed: None,
            },
        })
    }
}

/// The refusal of a sync spawn that would queue behind slots only its own callers hold.
fn would_wait_forever(max: u32, chain: u32) -> CoreError {
    CoreError::limit_error(
        format!(
            "Active child limit exceeded, and queueing would wait forever: all {max} slot(s) \
             of max_active_children are held by this spawn's caller and the callers waiting on \
             it ({chain}); spawn it async, or raise max_active_children"
        ),
        Some(crate::error::LimitInfo {
            limit: arbor_protocol::LimitKind::MaxActiveChildren,
            maximum: u64::from(max),
            observed: u64::from(max).saturating_add(1),
        }),
    )
}

/// A fresh, time-ordered, never reused id suffix.
fn uuid_like() -> String {
    arbor_protocol::RunId::new().as_uuid().simple().to_string()
}

/// A future run inside its caller's future, handed to a task of its own if the caller drops
/// it before it ends (so it still ends, and reports, whatever becomes of the caller), unless
/// the supervisor was abandoned (then it is dropped with its caller, as if the process had
/// died). Boxed: a drive's state is large, and only the box moves.
struct Inline<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fut: Option<Pin<Box<F>>>,
    abandoned: CancellationToken,
}

impl<F> Inline<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    /// The future `make` builds, built straight into its box; `abandoned` is the
    /// supervisor's.
    fn new(abandoned: CancellationToken, make: impl FnOnce() -> F) -> Self {
        Self {
            fut: Some(boxed_in_place(make)),
            abandoned,
        }
    }
}

impl<F> Future for Inline<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let Some(fut) = self.fut.as_mut() else {
            return Poll::Pending;
        };
        let out = std::task::ready!(fut.as_mut().poll(cx));
        self.fut = None;
        Poll::Ready(out)
    }
}

impl<F> Drop for Inline<F>
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn drop(&mut self) {
        let Some(fut) = self.fut.take() else {
            return;
        };
        if self.abandoned.is_cancelled() {
            return;
        }
        // Outside a runtime (it is going away) nothing can run it: it is dropped.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let abandoned = self.abandoned.clone();
            drop(
                runtime.spawn(crate::supervisor::tree::live::unless_abandoned(
                    abandoned, fut,
                )),
            );
        }
    }
}

/// The future `make` builds, in a box allocated first, so that it is built there rather than
/// on the stack and copied in (`Box::pin(future)` copies the whole future, and a drive's is
/// kilobytes).
pub(crate) fn boxed_in_place<F: Future>(make: impl FnOnce() -> F) -> Pin<Box<F>> {
    Box::into_pin(Box::write(Box::new_uninit(), make()))
}

/// What admission settles about a child's model: the model, thinking level and controls,
/// and the pool it asked for.
type ModelTerms = (
    Option<String>,
    Option<arbor_model::ThinkingLevel>,
    Option<arbor_model::Controls>,
    Option<crate::budget::Budget>,
    Option<crate::output::OutputSchema>,
    crate::session::fork::ForkContext,
);

impl Supervisor {
    /// The model, thinking level and controls the request may have, and its pool, checked;
    /// a model without a price, where that is an error, is refused before anything is
    /// created (an entry without model choices is checked when its agent is built).
    /// A slot under the tighter of the request's and the supervisor's
    /// `max_active_children`: at once, or (`on_full: queue`) a place in the queue.
    ///
    /// `waits_with`: for a sync spawn, the slots its caller's chain holds (the caller's own
    /// and those of its sync callers above). When they are every slot there is, nothing can
    /// free one while the spawn waits: it is refused rather than queued forever.
    fn slot_for(
        &self,
        limits: &SupervisorLimits,
        on_full: crate::supervisor::request::OnFull,
        waits_with: Option<u32>,
    ) -> CoreResult<SlotCell> {
        let max = limits
            .max_active_children
            .min(self.settings().limits().max_active_children);
        let slots = self.live().slots();
        Ok(match on_full {
            crate::supervisor::request::OnFull::Refuse => SlotCell::held(slots.reserve(max)?),
            crate::supervisor::request::OnFull::Queue => match waits_with {
                Some(chain) if chain >= max => match slots.reserve(max) {
                    Ok(guard) => SlotCell::held(guard),
                    Err(_) => return Err(would_wait_forever(max, chain)),
                },
                _ => SlotCell::of(slots.reserve_or_wait(max, self.settings().max_queued())?),
            },
        })
    }

    fn model_terms(
        &self,
        entry: &crate::supervisor::ChildEntry,
        request: &mut DelegationRequest,
    ) -> CoreResult<ModelTerms> {
        let model = entry.resolve_model(request.model.as_deref())?;
        let thinking = entry.check_thinking(model.as_deref(), request.thinking)?;
        let controls = entry.check_controls(request.controls.take(), thinking)?;
        let budget = request
            .budget
            .take()
            .or(entry.budget)
            .filter(|b| !b.is_empty());
        if let Some(b) = &budget {
            b.check()?;
        }
        if let (Some(table), Some(model)) = (self.settings().pricing(), model.as_deref()) {
            table.require(model)?;
        }
        let output = match (request.output_schema.take(), &entry.output) {
            (Some(asked), Some(fixed)) if asked.schema() != fixed.schema() => {
                return Err(crate::CoreError::invalid(
                    "output_schema",
                    format!(
                        "output_schema: the catalog entry of {} fixes its output schema",
                        entry.id
                    ),
                ));
            }
            // The entry's own (its retries too) when it fixes one.
            (asked, fixed) => fixed.clone().or(asked),
        };
        let fork = entry.context.resolve(&entry.id, request.context)?;
        if fork.forks() && request.parent.is_none() {
            return Err(crate::CoreError::invalid(
                "context",
                "context: a fork needs a parent session".to_owned(),
            ));
        }
        Ok((model, thinking, controls, budget, output, fork))
    }
}
