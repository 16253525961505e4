//! The worktree child factory: wraps a factory so each delegation runs in its own worktree,
//! handed to it as `cwd`, and the after hook that removes it. The supervisor stays
//! git-agnostic: it sees a [`ChildFactory`] and an [`AfterHook`].

use std::fmt;
use std::future::Future;
use std::path::PathBuf;
use std::sync::Arc;

use arbor_core::supervisor::{AfterHook, ChildContext, ChildFactory, Completion, HookError};
use arbor_core::{Agent, CoreResult};
use async_trait::async_trait;

use crate::workspace::{Cleanup, Worktrees};

/// Builds a child's agent to work in `cwd`.
#[async_trait]
pub trait WorkspaceFactory: fmt::Debug + Send + Sync {
    /// Builds the agent for one delegation.
    async fn create(&self, ctx: ChildContext, cwd: PathBuf) -> CoreResult<Agent>;
}

/// A [`WorkspaceFactory`] from an async closure.
pub struct FnWorkspaceFactory<F>(F);

impl<F> fmt::Debug for FnWorkspaceFactory<F> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("FnWorkspaceFactory")
    }
}

#[async_trait]
impl<F, Fut> WorkspaceFactory for FnWorkspaceFactory<F>
where
    F: Fn(ChildContext, PathBuf) -> Fut + Send + Sync,
    Fut: Future<Output = CoreResult<Agent>> + Send,
{
    async fn create(&self, ctx: ChildContext, cwd: PathBuf) -> CoreResult<Agent> {
        (self.0)(ctx, cwd).await
    }
}

/// Makes a [`WorkspaceFactory`] of an async closure.
pub fn workspace_factory<F, Fut>(f: F) -> FnWorkspaceFactory<F>
where
    F: Fn(ChildContext, PathBuf) -> Fut + Send + Sync,
    Fut: Future<Output = CoreResult<Agent>> + Send,
{
    FnWorkspaceFactory(f)
}

/// A catalog factory whose children each work in their own worktree.
#[derive(Debug, Clone)]
pub struct WorktreeChildFactory {
    worktrees: Arc<Worktrees>,
    inner: Arc<dyn WorkspaceFactory>,
}

impl WorktreeChildFactory {
    /// Wraps `inner`; `worktrees` creates the worktrees (and, as the supervisor's after
    /// hook, removes them).
    pub fn new(worktrees: Arc<Worktrees>, inner: impl WorkspaceFactory + 'static) -> Self {
        Self {
            worktrees,
            inner: Arc::new(inner),
        }
    }
}

#[async_trait]
impl ChildFactory for WorktreeChildFactory {
    async fn create(&self, ctx: ChildContext) -> CoreResult<Agent> {
        // The configuration is checked before git or the inner factory runs.
        self.worktrees.plan(&ctx.delegation_id)?;
        let mut creating = Box::pin(self.worktrees.create(&ctx.delegation_id));
        let made = tokio::select! {
            tree = &mut creating => Some(tree),
            () = ctx.cancel.cancelled() => None,
        };
        drop(creating);
        let Some(tree) = made else {
            // Dropped half-way, the creation left its worktree to the next cleanup: that
            // runs now, not at the next creation.
            let trees = self.worktrees.clone();
            tokio::spawn(async move { trees.retry_cleanup().await });
            return Err(arbor_core::CoreError::Supervisor(
                "the delegation was cancelled while its worktree was being made".to_owned(),
            ));
        };
        let tree = tree?;
        self.inner.create(ctx, tree.path).await
    }
}

/// Removes a finished delegation's worktree: pass the same `Arc<Worktrees>` as the
/// supervisor's after hook. Foreign and repeated ids do nothing; a dirty worktree is kept
/// and the hook's error (a `delegation_error` event) says where.
#[async_trait]
impl AfterHook for Worktrees {
    async fn after(&self, completion: &Completion) -> Result<(), HookError> {
        match self.cleanup(&completion.delegation_id).await {
            Ok(Cleanup::Removed(_) | Cleanup::NotOurs) => Ok(()),
            Err(e) => Err(HookError::new(e.to_string())),
        }
    }
}
