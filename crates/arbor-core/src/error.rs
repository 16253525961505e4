//! The error type of arbor-core.

use std::fmt;

use arbor_store::StoreError;
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::identity::{IdentityError, IdentityErrorCode};
use crate::outcome::RunResult;

/// What kind of failure a [`CoreError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CoreErrorKind {
    /// A configuration or request is invalid.
    Validation,
    /// A record the caller named does not exist.
    NotFound,
    /// The store failed.
    Store,
    /// A policy, the allow-list or a hook refused the delegation.
    Denied,
    /// A limit refused the delegation or ended it.
    Limit,
    /// The supervisor or a child factory failed.
    Supervisor,
    /// A child run failed or was cancelled.
    Run,
    /// A delegated run waits for approvals (not a failure: resume it).
    Suspended,
    /// The host wired the runtime wrong (a root session outside the supervisor's store, a
    /// sink that can receive nothing): fix the host's setup. A delegation tool that meets
    /// one ends its run with it rather than letting the model read it.
    Config,
    /// What the call relied on changed meanwhile (a stale version: the run's approvals were
    /// decided, or it is being resumed, since they were read): read again, then retry.
    Conflict,
    /// The delegation was cancelled (by its caller, a timeout, a delete or the host).
    Cancelled,
    /// The supervisor's session has ended: nothing new starts under it.
    Closed,
}

/// Why something was refused ([`CoreError::Denied`]), so a host can tell the cases apart
/// without reading the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum DenyReason {
    /// The child is not in the supervisor's catalog (or not offered to this caller).
    NotAllowListed,
    /// The child's catalog policy refuses what was asked (a session lifetime, say).
    Policy,
    /// The `before` hook refused; the message carries its reason.
    Hook,
    /// The parent was closed or deleted: nothing new starts under it.
    ParentClosed,
    /// The session, delegation, run or approval named is unknown, deleted or another
    /// tree's (all get the same answer).
    Unknown,
    /// A message's target is out of the sender's reach, or cannot take messages.
    Unreachable,
    /// The identity was refused (inactive, not the owner's, or wider than its parent's).
    Identity,
    /// The call was decided already: a call is decided once, and the message names the
    /// decision taken (what, who, when, why).
    Decided,
}

/// Which limit fired, its maximum and the value observed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct LimitInfo {
    /// Which limit (it displays as its configuration key, `max_active_children`, …, and
    /// compares equal to it).
    pub limit: arbor_protocol::LimitKind,
    /// Its maximum.
    pub maximum: u64,
    /// What was observed.
    pub observed: u64,
}

impl fmt::Display for LimitInfo {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} (maximum {}, observed {})",
            self.limit, self.maximum, self.observed
        )
    }
}

/// A limit error: the message of the contract, which limit fired, and the child's result when
/// a child run died on a limit.
#[derive(Debug, Clone, PartialEq)]
pub struct LimitError {
    /// The message (`Active child limit exceeded`, …).
    pub message: String,
    /// Which limit, when a numeric limit fired (none for a cycle).
    pub info: Option<LimitInfo>,
    /// The child's terminal result, when its run died on a limit.
    pub result: Option<Box<RunResult>>,
}

impl fmt::Display for LimitError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

/// A failure of the runtime itself (bad configuration, the store, a refused delegation).
/// Model, tool and limit failures of a run are not errors: they end the run with a status in
/// its `RunResult`.
#[derive(Debug, Clone, Error, PartialEq)]
#[non_exhaustive]
pub enum CoreError {
    /// A configuration or request is invalid.
    #[error("{0}")]
    Validation(String),
    /// A named record does not exist.
    #[error("{what} {id} not found")]
    NotFound {
        /// What was looked up.
        what: &'static str,
        /// Its id.
        id: String,
    },
    /// The store failed.
    #[error(transparent)]
    Store(#[from] StoreError),
    /// A policy, the allow-list or a hook refused, or what was named is unknown (a foreign
    /// id gets the same answer as an unknown one). [`CoreError::deny_reason`] says which.
    #[error("{message}")]
    Denied {
        /// Why, for a host to tell the cases apart.
        reason: DenyReason,
        /// What the caller (or the model) reads.
        message: String,
    },
    /// A limit refused or ended a delegation.
    #[error("{0}")]
    Limit(Box<LimitError>),
    /// An identity was refused (inactive, not the owner's, or wider than its parent's).
    /// Its kind is [`CoreErrorKind::Denied`]; [`CoreError::identity_code`] says why.
    #[error(transparent)]
    Identity(#[from] IdentityError),
    /// The supervisor or a child factory failed.
    #[error("{0}")]
    Supervisor(String),
    /// The host wired the runtime wrong; the message says how to fix it.
    #[error("{0}")]
    Config(String),
    /// A field of a request is invalid. Its kind is [`CoreErrorKind::Validation`];
    /// [`CoreError::field`] names the field.
    #[error("{message}")]
    Invalid {
        /// The field, as the request names it (`name`, `child_id`, `model`).
        field: &'static str,
        /// What is wrong with it.
        message: String,
    },
    /// What the call relied on changed meanwhile; the message says what.
    #[error("{0}")]
    Conflict(String),
    /// The delegation was cancelled; the message says by what.
    #[error("{0}")]
    Cancelled(String),
    /// The supervisor's session has ended.
    #[error("{0}")]
    Closed(String),
    /// The delegated run suspended on approvals; its pending decisions are attached (paths
    /// from the top of the tree).
    #[error("Delegated run suspended")]
    Suspended(Box<crate::outcome::NestedSuspension>),
    /// A child run failed or was cancelled; its result is attached.
    #[error("{message}")]
    Run {
        /// What happened.
        message: String,
        /// The child's terminal result.
        result: Box<RunResult>,
    },
}

impl CoreError {
    /// The kind of failure.
    pub fn kind(&self) -> CoreErrorKind {
        match self {
            Self::Validation(_) | Self::Invalid { .. } => CoreErrorKind::Validation,
            Self::Conflict(_) => CoreErrorKind::Conflict,
            Self::Cancelled(_) => CoreErrorKind::Cancelled,
            Self::Closed(_) => CoreErrorKind::Closed,
            Self::NotFound { .. } => CoreErrorKind::NotFound,
            Self::Store(_) => CoreErrorKind::Store,
            Self::Denied { .. } | Self::Identity(_) => CoreErrorKind::Denied,
            Self::Limit(_) => CoreErrorKind::Limit,
            Self::Supervisor(_) => CoreErrorKind::Supervisor,
            Self::Config(_) => CoreErrorKind::Config,
            Self::Run { .. } => CoreErrorKind::Run,
            Self::Suspended(_) => CoreErrorKind::Suspended,
        }
    }

    /// The child's result, for limit and run errors that carry one.
    pub fn result(&self) -> Option<&RunResult> {
        match self {
            Self::Limit(e) => e.result.as_deref(),
            Self::Run { result, .. } => Some(result),
            _ => None,
        }
    }

    /// The limit that fired, for limit errors.
    pub fn limit(&self) -> Option<LimitInfo> {
        match self {
            Self::Limit(e) => e.info,
            _ => None,
        }
    }

    /// The invalid field, for errors that name one.
    pub fn field(&self) -> Option<&'static str> {
        match self {
            Self::Invalid { field, .. } => Some(field),
            _ => None,
        }
    }

    /// Why an identity was refused, for identity errors.
    pub fn identity_code(&self) -> Option<IdentityErrorCode> {
        match self {
            Self::Identity(e) => Some(e.code),
            _ => None,
        }
    }

    /// Why a refusal was made, for refusals ([`CoreErrorKind::Denied`]); an identity
    /// refusal is [`DenyReason::Identity`].
    pub fn deny_reason(&self) -> Option<DenyReason> {
        match self {
            Self::Denied { reason, .. } => Some(*reason),
            Self::Identity(_) => Some(DenyReason::Identity),
            _ => None,
        }
    }

    /// A refusal for `reason`.
    pub(crate) fn denied(reason: DenyReason, message: impl Into<String>) -> Self {
        Self::Denied {
            reason,
            message: message.into(),
        }
    }

    pub(crate) fn validation(message: impl Into<String>) -> Self {
        Self::Validation(message.into())
    }

    /// An invalid `field` (the message names it).
    pub fn invalid(field: &'static str, message: impl Into<String>) -> Self {
        Self::Invalid {
            field,
            message: message.into(),
        }
    }

    /// The message of the session's end.
    pub(crate) fn closed() -> Self {
        Self::Closed("Supervisor session has ended".to_owned())
    }

    pub(crate) fn limit_error(message: impl Into<String>, info: Option<LimitInfo>) -> Self {
        Self::Limit(Box::new(LimitError {
            message: message.into(),
            info,
            result: None,
        }))
    }
}

/// Result of a runtime operation.
pub type CoreResult<T> = Result<T, CoreError>;
