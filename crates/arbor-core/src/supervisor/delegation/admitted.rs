//! A delegation between admission and its terminal report: what admission settled
//! ([`Admitted`]), where it sits in the tree ([`Scope`]), why it was cancelled
//! ([`CancelReason`]), how its work ended ([`Worked`], [`Ended`]), and the checks and the
//! identity narrowing admission applies.

use std::collections::BTreeSet;
use std::sync::Arc;

use arbor_protocol::{SessionId, SpawnPoint, Timestamp};
use tokio_util::sync::CancellationToken;

use crate::error::{CoreError, CoreResult, LimitInfo};
use crate::identity::Identity;
use crate::outcome::{RunResult, SessionRef};
use crate::supervisor::config::limits::SupervisorLimits;
use crate::supervisor::config::names;
use crate::supervisor::config::policy::EffectivePolicy;
use crate::supervisor::request::Mode;
use crate::supervisor::tree::handles::CancelReason;
use crate::supervisor::tree::slots::SlotCell;

/// The reason of a delegation cancelled through its handle (its child is then revoked).
pub(crate) const HANDLE_CANCELLED: &str = "Async delegation cancelled";

/// The reason of a delegation whose run was stopped through its handle, the child kept.
pub(crate) const HANDLE_STOPPED: &str = "Async delegation stopped";

/// A delegation from admission to its terminal report: what admission settled ([`Terms`]),
/// what registration adds (its record and name), and how this run is driven ([`Control`]).
#[derive(Debug)]
pub(crate) struct Admitted {
    pub(super) terms: Terms,
    /// Its name, set at registration with the record.
    pub(super) name: String,
    /// The checked name the request asked for, reserved until its record exists (a default
    /// is made at registration).
    pub(super) requested_name: Option<names::ReservedName>,
    /// The child's session record, written at registration.
    pub(super) record: Option<arbor_store::SessionRecord>,
    /// The child's reply count when this run began (a first task that ends with the same
    /// count never replied).
    pub(super) replies_at_start: u32,
    pub(super) control: Control,
}

/// What admission settled, fixed from then on: which child, where in the tree, on what
/// input, under which limits, policy, model, identity and mode.
#[derive(Debug)]
pub(crate) struct Terms {
    /// The catalog entry's position.
    pub(super) entry: usize,
    pub(super) child_id: String,
    pub(super) delegation_id: String,
    pub(super) depth: u32,
    /// The catalog ids from the root down to this child (cycle checks).
    pub(super) path: Arc<[String]>,
    /// The delegations above this one.
    pub(super) parents: Arc<[String]>,
    /// Slots that cannot free while this child waits on a sync spawn of its own: its own and
    /// those of the callers above that wait on it synchronously (1 when not known).
    pub(super) sync_chain: u32,
    pub(super) input: String,
    pub(super) limits: SupervisorLimits,
    pub(super) policy: EffectivePolicy,
    pub(super) thread: String,
    pub(super) model: Option<String>,
    /// The checked thinking level the request asked for (a rerun reads its record's).
    pub(super) thinking: Option<arbor_model::ThinkingLevel>,
    /// The checked controls the request asked for (a rerun reads its record's).
    pub(super) controls: Option<arbor_model::Controls>,
    /// The pool the request (or its catalog entry) asked for, checked (a rerun's is in the
    /// ledger already).
    pub(super) budget: Option<crate::budget::Budget>,
    /// The output schema the request (or its catalog entry) set, checked (a rerun's is in
    /// its record's meta, which the run reads).
    pub(super) output: Option<crate::output::OutputSchema>,
    /// How much of the parent's conversation it forks (a rerun's fork is in its record).
    pub(super) fork: crate::session::fork::ForkContext,
    pub(super) mode: Mode,
    pub(super) parent: Option<SessionRef>,
    pub(super) spawned_by: Option<SpawnPoint>,
    /// The parent's tool call that asked for it (kept in its record).
    pub(super) spawn_call: Option<String>,
    pub(super) identity: Option<Arc<Identity>>,
}

/// How this run of the delegation is driven: its cancellation (and why), the caller's
/// token, its slot, what kind of run it is, who awaits it, and where it was claimed from.
#[derive(Debug)]
pub(crate) struct Control {
    pub(super) token: CancellationToken,
    /// Why the token was cancelled, set by whoever cancels it first.
    pub(super) reason: CancelReason,
    /// The caller's own token, for a caller that waits (its cancel reaches the child).
    pub(super) caller: Option<CancellationToken>,
    pub(super) slot: SlotCell,
    /// What kind of run this is: a first task, a follow-up, a resume, a recovery.
    pub(super) start: Start,
    /// Nobody awaits this run's outcome (a message-mode child, a follow-up): if it suspends,
    /// no caller's run carries its approvals, and [`Supervisor::resume_child`] resumes it.
    ///
    /// [`Supervisor::resume_child`]: crate::supervisor::Supervisor::resume_child
    pub(super) detached: bool,
    /// A run a worker claimed from another process's delegation: it runs here (never handed
    /// to the runner again), and its `before` hook ran where it was admitted.
    pub(super) claimed: Option<ClaimedFrom>,
}

/// What kind of run a delegation starts. Where it runs (here, or claimed from another
/// process's delegation: [`Control::claimed`]) and whether anybody awaits it
/// ([`Control::detached`]) are apart: a claimed run may be any of these but a follow-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
    /// A first task, on the delegation's input.
    Fresh,
    /// A follow-up run of an existing child on the messages pending in its inbox.
    FollowUp,
    /// A suspended run of the child going on with its recorded decisions; `follow_up` when
    /// that run was itself a follow-up.
    Resume {
        run: arbor_protocol::RunId,
        follow_up: bool,
    },
    /// The child's run a dead process left interrupted, continued from its transcript.
    Recover,
}

impl Start {
    /// A run of an existing session (its record is reopened, not attached new).
    pub(crate) fn reopens(self) -> bool {
        self != Self::Fresh
    }

    /// A run on pending messages rather than on a task (a follow-up, or a resumed one).
    pub(crate) fn follow_up(self) -> bool {
        matches!(
            self,
            Self::FollowUp
                | Self::Resume {
                    follow_up: true,
                    ..
                }
        )
    }

    /// The suspended run this resumes.
    pub(crate) fn resumed_run(self) -> Option<arbor_protocol::RunId> {
        match self {
            Self::Resume { run, .. } => Some(run),
            _ => None,
        }
    }
}

/// What a claimed run keeps of the delegation it was handed over from.
#[derive(Debug, Clone, Default)]
pub(crate) struct ClaimedFrom {
    /// The delegation mapping its parent would store beside a suspension (durable
    /// approvals): stored as it is, so the parent's process rebuilds the delegation it knows.
    pub(super) mapping: Option<serde_json::Value>,
    /// Where its events go, when its parent streams them.
    pub(super) relay: Option<tokio::sync::mpsc::UnboundedSender<arbor_protocol::EventEnvelope>>,
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

/// How a run of a registered child ended, for what follows it (notices, wake-ups).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Ended {
    pub(super) mode: Mode,
    /// A run on pending messages (see [`Start::follow_up`]).
    pub(super) follow_up: bool,
    pub(super) replies_at_start: u32,
    pub(super) host_aborted: bool,
    /// The child's run began (a hook, factory or delete stopped it before otherwise).
    pub(super) started: bool,
    /// Cancelled through its handle: the child is released (a `revoked` tombstone).
    pub(super) revoked: bool,
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

pub(crate) fn check_depth(depth: u32, limits: &SupervisorLimits) -> CoreResult<()> {
    if depth > limits.max_depth {
        return Err(CoreError::limit_error(
            "Delegation depth exceeded",
            Some(LimitInfo {
                limit: arbor_protocol::LimitKind::MaxDepth,
                maximum: u64::from(limits.max_depth),
                observed: u64::from(depth),
            }),
        ));
    }
    Ok(())
}

pub(crate) fn check_bytes(input: &str, limits: &SupervisorLimits) -> CoreResult<()> {
    let bytes = input.len() as u64;
    if bytes > limits.max_message_bytes {
        return Err(CoreError::limit_error(
            "Delegation input exceeds max bytes",
            Some(LimitInfo {
                limit: arbor_protocol::LimitKind::MaxMessageBytes,
                maximum: limits.max_message_bytes,
                observed: bytes,
            }),
        ));
    }
    Ok(())
}
