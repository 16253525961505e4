//! The crate's one error type.

use std::path::PathBuf;

/// What went wrong in a workspace, a git call or a coding tool.
#[derive(Debug, thiserror::Error)]
pub enum CodingError {
    /// The configuration is unusable (no allow-listed worktree root, a bad repository id).
    #[error("{0}")]
    Config(String),
    /// A path names something outside the worktree.
    #[error("path {path:?} is outside the worktree")]
    Escape {
        /// The path as given.
        path: String,
    },
    /// The repository is not one git can use.
    #[error("{0}")]
    Repository(String),
    /// git is not installed, or not on PATH.
    #[error("git is not installed (or not on PATH)")]
    GitMissing,
    /// A git command failed.
    #[error("git {args} failed: {stderr}")]
    Git {
        /// Its arguments.
        args: String,
        /// What it printed on stderr (trimmed).
        stderr: String,
    },
    /// The worktree has uncommitted changes (or commits off its branch): it is kept, not
    /// destroyed.
    #[error("worktree {} has uncommitted changes: kept for review", path.display())]
    Dirty {
        /// Where it is.
        path: PathBuf,
    },
    /// A file operation failed.
    #[error("{0}")]
    Io(String),
}

/// The kind of a [`CodingError`], for hosts that branch on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum CodingErrorKind {
    /// Configuration.
    Config,
    /// A path escaping the worktree.
    Escape,
    /// The repository.
    Repository,
    /// git missing or failing.
    Git,
    /// A dirty worktree kept.
    Dirty,
    /// File I/O.
    Io,
}

impl CodingError {
    /// Its kind.
    pub fn kind(&self) -> CodingErrorKind {
        match self {
            Self::Config(_) => CodingErrorKind::Config,
            Self::Escape { .. } => CodingErrorKind::Escape,
            Self::Repository(_) => CodingErrorKind::Repository,
            Self::GitMissing | Self::Git { .. } => CodingErrorKind::Git,
            Self::Dirty { .. } => CodingErrorKind::Dirty,
            Self::Io(_) => CodingErrorKind::Io,
        }
    }
}

impl From<CodingError> for arbor_core::CoreError {
    fn from(e: CodingError) -> Self {
        match e.kind() {
            CodingErrorKind::Config | CodingErrorKind::Escape => {
                arbor_core::CoreError::Validation(e.to_string())
            }
            _ => arbor_core::CoreError::Supervisor(e.to_string()),
        }
    }
}

/// The crate's result type.
pub type CodingResult<T> = Result<T, CodingError>;
