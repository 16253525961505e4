//! Hooks around each delegation.
//!
//! `before` runs after the slot is reserved and before the child is built: it may refuse,
//! replace the input (re-redacted and re-checked), lower limits or add a permission policy.
//! A lowered `max_active_children` (a per-tenant quota) applies to that admission: the
//! delegation runs only if fewer children than the lowered cap are live once the decision
//! is applied, else it fails with the limit error naming the lowered maximum.
//! `after` sees the redacted terminal summary exactly once per terminal and cannot change it.

use std::fmt;
use std::sync::Arc;

use arbor_protocol::Usage;
use async_trait::async_trait;

use crate::permission::Permission;
use crate::supervisor::config::limits::{LimitsInput, SupervisorLimits};

/// What the `before` hook sees.
#[derive(Debug, Clone)]
pub struct BeforeContext {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation.
    pub delegation_id: String,
    /// Its depth.
    pub depth: u32,
    /// Child ids from the top, this one last.
    pub path: Arc<[String]>,
    /// The redacted input.
    pub input: String,
    /// The limits it would run with.
    pub limits: SupervisorLimits,
}

/// The `before` hook's answer.
#[derive(Debug, Clone, Default)]
pub enum BeforeDecision {
    /// Go on unchanged.
    #[default]
    Allow,
    /// Go on with changes.
    Modify {
        /// Replacement input.
        input: Option<String>,
        /// Lower limits.
        limits: Option<LimitsInput>,
        /// An extra policy, AND-composed after the others.
        permission: Option<Permission>,
    },
    /// Refuse the delegation.
    Deny {
        /// Why (redacted before it is published).
        reason: Option<String>,
    },
}

/// How a delegation ended, as the `after` hook sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CompletionStatus {
    /// The child run succeeded.
    Succeeded,
    /// It failed.
    Failed,
    /// It was cancelled.
    Aborted,
    /// A policy denied it.
    Denied,
    /// The `before` hook refused it.
    Rejected,
}

/// What the `after` hook sees.
#[derive(Debug, Clone)]
pub struct Completion {
    /// The catalog entry.
    pub child_id: String,
    /// The delegation.
    pub delegation_id: String,
    /// Its depth.
    pub depth: u32,
    /// How it ended.
    pub status: CompletionStatus,
    /// The child's last text, redacted.
    pub text: String,
    /// Its usage, when it ran.
    pub usage: Option<Usage>,
    /// The error, redacted.
    pub error: Option<String>,
}

/// Runs before each delegation (and again at each resume, so it must be idempotent).
#[async_trait]
pub trait BeforeHook: fmt::Debug + Send + Sync {
    /// Decides.
    async fn before(&self, ctx: &BeforeContext) -> BeforeDecision;
}

/// What a failed `after` hook reports: it is published (redacted) as a `delegation_error`
/// event; the delegation's result is unchanged.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct HookError {
    /// What went wrong.
    pub message: String,
}

impl HookError {
    /// A failure saying `message`.
    pub fn new(message: impl Into<String>) -> Self {
        Self {
            message: message.into(),
        }
    }
}

impl From<String> for HookError {
    fn from(message: String) -> Self {
        Self { message }
    }
}

impl From<&str> for HookError {
    fn from(message: &str) -> Self {
        Self::new(message)
    }
}

/// Runs once per terminal delegation.
#[async_trait]
pub trait AfterHook: fmt::Debug + Send + Sync {
    /// Observes. An `Err` is published as `delegation_error`; the result is unchanged.
    async fn after(&self, completion: &Completion) -> Result<(), HookError>;
}

/// A shared hook (the host keeps a handle to what it observes).
#[async_trait]
impl<T: AfterHook + ?Sized> AfterHook for Arc<T> {
    async fn after(&self, completion: &Completion) -> Result<(), HookError> {
        (**self).after(completion).await
    }
}

/// A shared hook.
#[async_trait]
impl<T: BeforeHook + ?Sized> BeforeHook for Arc<T> {
    async fn before(&self, ctx: &BeforeContext) -> BeforeDecision {
        (**self).before(ctx).await
    }
}

/// A `before` hook from an async closure (see [`before_fn`]).
pub struct FnBefore<F>(F);

impl<F> fmt::Debug for FnBefore<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnBefore")
    }
}

#[async_trait]
impl<F, Fut> BeforeHook for FnBefore<F>
where
    F: Fn(BeforeContext) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = BeforeDecision> + Send,
{
    async fn before(&self, ctx: &BeforeContext) -> BeforeDecision {
        (self.0)(ctx.clone()).await
    }
}

/// Makes a `before` hook of an async closure, which gets its own copy of the context:
///
/// ```
/// use arbor_core::supervisor::{BeforeDecision, before_fn};
///
/// let no_secrets = before_fn(|ctx| async move {
///     if ctx.input.contains("password") {
///         BeforeDecision::Deny { reason: Some("no secrets in a child's task".into()) }
///     } else {
///         BeforeDecision::Allow
///     }
/// });
/// # let _ = no_secrets;
/// ```
pub fn before_fn<F, Fut>(f: F) -> FnBefore<F>
where
    F: Fn(BeforeContext) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = BeforeDecision> + Send,
{
    FnBefore(f)
}

/// An `after` hook from an async closure (see [`after_fn`]).
pub struct FnAfter<F>(F);

impl<F> fmt::Debug for FnAfter<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnAfter")
    }
}

#[async_trait]
impl<F, Fut> AfterHook for FnAfter<F>
where
    F: Fn(Completion) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<(), HookError>> + Send,
{
    async fn after(&self, completion: &Completion) -> Result<(), HookError> {
        (self.0)(completion.clone()).await
    }
}

/// Makes an `after` hook of an async closure, which gets its own copy of the completion.
pub fn after_fn<F, Fut>(f: F) -> FnAfter<F>
where
    F: Fn(Completion) -> Fut + Send + Sync,
    Fut: std::future::Future<Output = Result<(), HookError>> + Send,
{
    FnAfter(f)
}
