//! One change to the repository's worktrees or its checkout at a time: the in-process mutex
//! of a [`crate::Worktrees`] and, across processes (and across managers of one repository
//! in one process), an exclusive `flock` on `<git-dir>/arbor.lock`. Held by `git worktree
//! add`, `remove` and `prune`, by a merge (for as long as git runs, whoever stops waiting)
//! and by a discard.

use std::path::Path;
use std::sync::Arc;

use tokio::sync::{Mutex, OwnedMutexGuard};

/// The file whose lock one change holds at a time, in the main checkout's git directory.
pub(crate) const LOCK: &str = "arbor.lock";

/// Both locks, released when dropped (the file's also when its process dies).
#[derive(Debug)]
pub(crate) struct RepoLock {
    _admin: OwnedMutexGuard<()>,
    _file: Option<std::fs::File>,
}

/// Waits for `admin`, then for the file lock in `git_dir` (none when `git_dir` is unknown or
/// the file cannot be locked: only this manager's changes are then kept apart, and a
/// warning says why). Dropped while waiting for the file, the lock taken later is let go at
/// once.
pub(crate) async fn repo_lock(admin: &Arc<Mutex<()>>, git_dir: Option<&Path>) -> RepoLock {
    let admin = admin.clone().lock_owned().await;
    let Some(dir) = git_dir else {
        return RepoLock {
            _admin: admin,
            _file: None,
        };
    };
    let path = dir.join(LOCK);
    let shown = path.display().to_string();
    let file = tokio::task::spawn_blocking(move || -> std::io::Result<std::fs::File> {
        let file = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)?;
        #[cfg(unix)]
        rustix::fs::flock(&file, rustix::fs::FlockOperation::LockExclusive)?;
        Ok(file)
    })
    .await;
    let file = match file {
        Ok(Ok(f)) => Some(f),
        Ok(Err(e)) => {
            tracing::warn!(path = %shown, error = %e, "the repository's lock file cannot be locked: changes are kept apart in this process only");
            None
        }
        Err(e) => {
            tracing::warn!(path = %shown, error = %e, "the lock's task failed");
            None
        }
    };
    RepoLock {
        _admin: admin,
        _file: file,
    }
}
