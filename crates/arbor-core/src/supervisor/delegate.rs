//! The delegation algorithm: admission (every check, in the documented order, before any
//! counter, slot or event changes), then the drive (hook, factory, child run) under the
//! delegation's timeout and cancellation, then exactly one terminal report.

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeSet;

use arbor_protocol::{ChildOrigin, SessionId, SpawnPoint, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult, LimitInfo};
use crate::identity::Identity;
use crate::outcome::RunResult;
use crate::outcome::SessionRef;
use crate::supervisor::admission::resolve_model;
use crate::supervisor::core::Supervisor;
use crate::supervisor::limits::{LimitsInput, SupervisorLimits};
use crate::supervisor::names;
use crate::supervisor::policy::{EffectivePolicy, Lifetime, PolicyInput};
use crate::supervisor::slots::SlotGuard;
use crate::supervisor::thinking;

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
    /// The parent's run and turn that asked for the child (its usage is attributed there).
    pub spawned_by: Option<SpawnPoint>,
    /// The model to run: one the child's catalog entry allows (default: the entry's own).
    pub model: Option<String>,
    /// How much the child's model reasons: one of the levels the resolved model supports
    /// ([`ChildEntry::supported_thinking`](crate::supervisor::ChildEntry::supported_thinking)),
    /// else admission refuses the spawn naming them. Kept in the child's record
    /// (`meta.thinking`) and forced onto every run of it; unset leaves the agent's own.
    pub thinking: Option<arbor_model::ThinkingLevel>,
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
    /// The identity the delegating child acts as.
    pub(crate) identity: Option<Arc<Identity>>,
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
        let mut admitted = self
            .supervisor
            .admit(self.scope.as_deref(), request, Mode::Sync)?;
        self.supervisor.register(&mut admitted).await?;
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
            // Boxed: the drive's state is large, and a task moves its future several times.
            .spawn(Box::pin(async move { supervisor.drive(admitted).await }));
        let joined = task.await;
        guard.disarm();
        joined.unwrap_or_else(|e| {
            Err(CoreError::Supervisor(format!(
                "delegation task failed: {e}"
            )))
        })
    }

    /// Admits a child and returns its handle once its record exists (before its first
    /// model call); collect the result with [`Supervisor::wait`].
    pub async fn delegate_async(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.start(request, Mode::Join).await
    }

    /// Admits a child and returns its handle; the child answers by message (its reply, or a
    /// lifecycle notice, arrives in the parent session's inbox).
    pub async fn spawn(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.start(request, Mode::Message).await
    }

    async fn start(&self, request: DelegationRequest, mode: Mode) -> CoreResult<AsyncHandle> {
        let mut admitted = self
            .supervisor
            .admit(self.scope.as_deref(), request, mode)?;
        self.supervisor.register(&mut admitted).await?;
        self.supervisor.launch(admitted)
    }
}

/// How the caller takes the result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// The caller waits (`delegate`).
    Sync,
    /// The caller collects it with `wait` (`delegate_async`).
    Join,
    /// The child replies by message (`spawn`).
    Message,
}

impl Mode {
    /// The mode's name in records and tool arguments.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Sync => "sync",
            Self::Join => "async",
            Self::Message => "message",
        }
    }
}

/// The handle of an admitted delegation: what a parent needs to address the child later,
/// and nothing of its result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AsyncHandle {
    /// The delegation.
    pub delegation_id: String,
    /// The catalog entry.
    pub child_id: String,
    /// The child's session: where its transcript lives.
    pub session_id: SessionId,
    /// Its readable name, unique among its siblings.
    pub name: String,
    /// The model it runs (none when its factory chooses).
    pub model: Option<String>,
}

/// Why a delegation was cancelled: the first reason set wins.
#[derive(Debug, Clone, Default)]
pub(crate) struct CancelReason(Arc<std::sync::OnceLock<&'static str>>);

impl CancelReason {
    pub(crate) fn set(&self, reason: &'static str) {
        let _ = self.0.set(reason);
    }

    pub(crate) fn get(&self) -> Option<&'static str> {
        self.0.get().copied()
    }
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
    /// The checked name the request asked for, reserved until its record exists (a default
    /// is made at registration).
    pub(crate) requested_name: Option<names::ReservedName>,
    pub(crate) model: Option<String>,
    /// The checked thinking level the request asked for (a rerun reads its record's).
    pub(crate) thinking: Option<arbor_model::ThinkingLevel>,
    pub(crate) mode: Mode,
    /// The child's session record, written at registration.
    pub(crate) record: Option<arbor_store::SessionRecord>,
    pub(crate) parent: Option<SessionRef>,
    pub(crate) spawned_by: Option<SpawnPoint>,
    pub(crate) identity: Option<Arc<Identity>>,
    pub(crate) token: CancellationToken,
    /// Why the token was cancelled, set by whoever cancels it first.
    pub(crate) reason: CancelReason,
    pub(crate) caller: Option<CancellationToken>,
    pub(crate) slot: SlotGuard,
    /// A follow-up run of an existing session on its pending messages.
    pub(crate) resume: bool,
    /// A suspended run of the child to resume (its decisions are recorded).
    pub(crate) resume_run: Option<arbor_protocol::RunId>,
    /// The child's interrupted run to continue (its process died mid-run).
    pub(crate) recover: bool,
    /// The child's reply count when this run began (a first task that ends with the same
    /// count never replied).
    pub(crate) replies_at_start: u32,
    /// Nobody awaits this run's outcome (a message-mode child, a follow-up): if it suspends,
    /// no caller's run carries its approvals, and [`Supervisor::resume_child`] resumes it.
    ///
    /// [`Supervisor::resume_child`]: crate::supervisor::Supervisor::resume_child
    pub(crate) detached: bool,
}

/// How the work between start and terminal ended.
pub(crate) enum Worked {
    Ran {
        session_id: SessionId,
        name: String,
        result: Box<RunResult>,
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
    pub async fn delegate_async(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.delegator().delegate_async(request).await
    }

    /// Starts a child that answers by message (top level).
    pub async fn spawn(&self, request: DelegationRequest) -> CoreResult<AsyncHandle> {
        self.delegator().spawn(request).await
    }

    /// Every check, in order, before anything is counted. Synchronous, so concurrent calls
    /// cannot overshoot a limit between a check and its reservation.
    pub(crate) fn admit(
        &self,
        scope: Option<&Scope>,
        request: DelegationRequest,
        mode: Mode,
    ) -> CoreResult<Admitted> {
        let is_async = mode != Mode::Sync;
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
        let parent_identity = match scope {
            Some(s) => s.identity.clone(),
            None => inner.identity.clone(),
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
                Some(inner.names.reserve(parent, &name, depth)?)
            }
            None => None,
        };
        let model = resolve_model(entry, request.model.as_deref())?;
        let thinking = thinking::check(entry, model.as_deref(), request.thinking)?;
        let slot = inner.slots.reserve(
            limits
                .max_active_children
                .min(inner.limits.max_active_children),
        )?;

        let delegation_id = format!("{}-{}", inner.id, uuid_like());
        let mut path: Vec<String> = above.to_vec();
        path.push(request.child_id.clone());
        let parents: Vec<String> = scope.map_or_else(Vec::new, |s| s.parents.to_vec());
        // A message-mode child outlives the turn (and the run) that spawned it: it is bound
        // to the supervisor's session, and ends when it is deleted, its parent is closed, or
        // the session ends.
        let token = match (policy.lifetime, scope, mode) {
            (_, _, Mode::Message) => inner.session_token.child_token(),
            (Lifetime::Task, Some(s), _) => s.token.child_token(),
            _ => inner.session_token.child_token(),
        };
        let caller = match (policy.lifetime, mode) {
            (Lifetime::Task, Mode::Sync | Mode::Join) => request.cancel,
            _ => None,
        };
        let thread = request.thread_id.as_deref().unwrap_or("default").to_owned();
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
            // Set at registration, with the record.
            name: String::new(),
            requested_name,
            model,
            thinking,
            mode,
            record: None,
            parent: request.parent,
            spawned_by: request.spawned_by,
            identity,
            token,
            reason: CancelReason::default(),
            caller,
            slot,
            resume: false,
            resume_run: None,
            recover: false,
            replies_at_start: 0,
            detached: mode == Mode::Message,
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
                    _ = caller.cancelled(), if !a.token.is_cancelled() => {
                        a.reason.set("Delegation cancelled");
                        a.token.cancel();
                    }
                    changed = deadline_rx.changed() => { let _ = changed; }
                    _ = tokio::time::sleep_until(deadline), if !timed_out && !a.token.is_cancelled() => {
                        timed_out = true;
                        a.token.cancel();
                    }
                }
            }
        };
        let host_aborted = a.token.is_cancelled() && !timed_out;
        // Whether the child's run began (and so read what waited in its inbox).
        let started = matches!(worked, Worked::Ran { .. });
        let outcome = self
            .terminal(&a, &origin, worked, timed_out, host_aborted)
            .await;
        a.token.cancel();
        // A hosted child its host (or its parent model) cancelled through its handle is
        // released: its record gets a `revoked` tombstone once its run has ended.
        let revoked = a.reason.get() == Some(crate::supervisor::join::HANDLE_CANCELLED);
        let Admitted {
            slot,
            record,
            mode,
            resume,
            replies_at_start,
            ..
        } = a;
        drop(slot);
        if let Some(record) = record {
            let ended = Ended {
                mode,
                resume,
                replies_at_start,
                host_aborted,
                started,
                revoked,
            };
            self.after_run(&record, &outcome, ended).await;
        }
        outcome
    }
}

/// How a run of a registered child ended, for what follows it (notices, wake-ups).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    pub(crate) mode: Mode,
    pub(crate) resume: bool,
    pub(crate) replies_at_start: u32,
    pub(crate) host_aborted: bool,
    /// The child's run began (a hook, factory or delete stopped it before otherwise).
    pub(crate) started: bool,
    /// Cancelled through its handle: the child is released (a `revoked` tombstone).
    pub(crate) revoked: bool,
}

/// The identity a child acts as: the parent's, narrowed to the catalog entry's scopes when it
/// names any, and checked so it holds no more than the parent's. An inactive parent identity
/// refuses the delegation even without narrowing: no child runs on an expired or revoked
/// identity.
pub(crate) fn child_identity(
    parent: Option<Arc<Identity>>,
    scopes: Option<&BTreeSet<String>>,
) -> CoreResult<Option<Arc<Identity>>> {
    let Some(parent) = parent else {
        return Ok(None);
    };
    let now = Timestamp::now();
    parent.check_active(now)?;
    let Some(scopes) = scopes else {
        return Ok(Some(parent));
    };
    let narrowed = parent.narrow(scopes.iter().cloned(), None, now)?;
    parent.assert_propagation(&narrowed, now)?;
    Ok(Some(Arc::new(narrowed)))
}

pub(super) fn check_depth(depth: u32, limits: &SupervisorLimits) -> CoreResult<()> {
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

pub(super) fn check_bytes(input: &str, limits: &SupervisorLimits) -> CoreResult<()> {
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

/// A fresh, time-ordered, never reused id suffix.
fn uuid_like() -> String {
    arbor_protocol::RunId::new().as_uuid().simple().to_string()
}
