//! Coding children for arbor.
//!
//! - [`workspace`]: [`Worktrees`], one linked git worktree per delegation (branch
//!   `agent/<delegation id>`, under an allow-listed root), removed once at its end and kept
//!   when it has uncommitted changes.
//! - [`factory`]: [`WorktreeChildFactory`] wraps a catalog factory so each child is built
//!   for its own worktree (`cwd`); `Arc<Worktrees>` is the supervisor's after hook that
//!   removes it. The supervisor stays git-agnostic.
//! - [`tools`]: read, write, list, edit and run, confined to a [`Workdir`].
//! - [`bridge`]: supervisor events as `subagent_started` / `subagent_stopped` for a host's
//!   timeline.
//!
//! git runs as a child process (`git -C …`); it must be installed.

pub mod bridge;
mod error;
pub mod factory;
mod git;
mod paths;
pub mod tools;
pub mod workspace;

pub use bridge::{BridgeOptions, LifecycleBridge, LifecycleEvent, StopStatus, observe};
pub use error::{CodingError, CodingErrorKind, CodingResult};
pub use factory::{WorkspaceFactory, WorktreeChildFactory, workspace_factory};
pub use paths::Workdir;
pub use tools::{CODING_TOOL_NAMES, coding_tool, coding_tools};
pub use workspace::{Cleanup, WorkspaceConfig, Worktree, Worktrees};
