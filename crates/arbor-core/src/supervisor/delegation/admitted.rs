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
use crate::supervisor::tree::slots::SlotGuard;

/// The reason of a delegation cancelled through its handle (its child is then revoked).
pub(crate) const HANDLE_CANCELLED: &str = "Async delegation cancelled";

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
    /// The parent's tool call that asked for it (kept in its record).
    pub(crate) spawn_call: Option<String>,
    pub(crate) identity: Option<Arc<Identity>>,
    pub(crate) token: CancellationToken,
    /// Why the token was cancelled, set by whoever cancels it first.
    pub(crate) reason: CancelReason,
    pub(crate) caller: Option<CancellationToken>,
    pub(crate) slot: SlotGuard,
    /// What kind of run this is: a first task, a follow-up, a resume, a recovery.
    pub(crate) start: Start,
    /// The child's reply count when this run began (a first task that ends with the same
    /// count never replied).
    pub(crate) replies_at_start: u32,
    /// Nobody awaits this run's outcome (a message-mode child, a follow-up): if it suspends,
    /// no caller's run carries its approvals, and [`Supervisor::resume_child`] resumes it.
    ///
    /// [`Supervisor::resume_child`]: crate::supervisor::Supervisor::resume_child
    pub(crate) detached: bool,
    /// A run a worker claimed from another process's delegation: it runs here (never handed
    /// to the runner again), and its `before` hook ran where it was admitted.
    pub(crate) claimed: Option<ClaimedFrom>,
}

/// What kind of run a delegation starts. Where it runs (here, or claimed from another
/// process's delegation: [`Admitted::claimed`]) and whether anybody awaits it
/// ([`Admitted::detached`]) are apart: a claimed run may be any of these but a follow-up.
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
    pub(crate) mapping: Option<serde_json::Value>,
    /// Where its events go, when its parent streams them.
    pub(crate) relay: Option<tokio::sync::mpsc::UnboundedSender<arbor_protocol::EventEnvelope>>,
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
    pub(crate) mode: Mode,
    /// A run on pending messages (see [`Start::follow_up`]).
    pub(crate) follow_up: bool,
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
