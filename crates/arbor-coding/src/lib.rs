//! Coding children for arbor.
//!
//! - [`workspace`]: [`Worktrees`], one linked git worktree per delegation (branch
//!   `agent/<delegation id>`, under an allow-listed root), removed once at its end and kept
//!   when it has uncommitted changes.
//! - [`factory`]: [`WorktreeChildFactory`] wraps a catalog factory so each child is built
//!   for its own worktree (`cwd`); `Arc<Worktrees>` is the supervisor's after hook that
//!   removes it. The supervisor stays git-agnostic.
//! - [`tools`]: read, write, list, edit and run, confined to a [`Workdir`]: a path that
//!   leads out of the worktree, or (symlinks resolved) into any git directory, is refused.
//! - [`run`]: `run_command`, whose whole process group is killed however its call ends
//!   (finished, timed out, cancelled, or its future dropped with a cancelled run).
//! - [`host`]: what such a command can read of the host: on Linux, unless the host opts out
//!   ([`ToolOptions::protect_host`]), not its environment, memory or open files (the host
//!   is made non-dumpable and commands start without the capabilities that bypass that).
//! - [`merge`]: a child's work brought back into the main checkout: its diff, a merge
//!   (fast-forward, merge commit or squash) done once and never half, or a discard.
//! - [`child_work`]: the same for a parent, family-scoped by child name or session id, and
//!   as the model's `diff_child`, `merge_child` (behind a person's approval) and
//!   `discard_child`.
//! - [`bridge`]: supervisor events as `subagent_started` / `subagent_stopped` for a host's
//!   timeline.
//!
//! git runs as a child process (`git -C …`); it must be installed.

pub mod bridge;
pub mod child_work;
mod error;
pub mod factory;
mod git;
pub mod host;
mod lock;
pub mod merge;
mod paths;
pub mod run;
pub mod tools;
pub mod workspace;

pub use bridge::{BridgeOptions, LifecycleBridge, LifecycleEvent, StopStatus, observe};
pub use child_work::{CHILD_WORK_TOOL_NAMES, ChildWork, Located};
pub use error::{CodingError, CodingErrorKind, CodingResult};
pub use factory::{WorkspaceFactory, WorktreeChildFactory, workspace_factory};
pub use host::protect_host;
pub use merge::{Conflict, Diff, Discarded, FileChange, Merged, Strategy};
pub use paths::Workdir;
pub use tools::{
    CODING_TOOL_NAMES, ToolOptions, coding_tool, coding_tool_with, coding_tools, coding_tools_with,
};
pub use workspace::{Cleanup, WorkspaceConfig, Worktree, Worktrees};
