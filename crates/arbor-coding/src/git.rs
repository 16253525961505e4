//! The few git commands worktrees need, run as `git -C <dir> …` child processes (no shell).

use std::path::Path;
use std::process::Stdio;

use tokio::process::Command;

use crate::error::{CodingError, CodingResult};

/// Runs `<program> -C dir args…` and returns its trimmed stdout, or the error it printed.
pub(crate) async fn git(program: &Path, dir: &Path, args: &[&str]) -> CodingResult<String> {
    let (code, stdout, stderr) = run(program, dir, args).await?;
    if code == Some(0) {
        Ok(stdout.trim().to_owned())
    } else {
        Err(CodingError::Git {
            args: args.join(" "),
            stderr,
        })
    }
}

/// Runs `<program> -C dir args…`: its exit code (`None` when a signal ended it), its stdout
/// as printed and its stderr (trimmed), for a command whose exit code says something
/// (`merge-tree` exits 1 on conflicts) or whose output must stay whole (a patch).
pub(crate) async fn run(
    program: &Path,
    dir: &Path,
    args: &[&str],
) -> CodingResult<(Option<i32>, String, String)> {
    let mut cmd = Command::new(program);
    // What a worktree's files (written by a model) could make git run on the host is
    // switched off, and the caller's GIT_* environment (inside a hook, say) cannot redirect
    // these commands to another repository.
    for (key, _) in std::env::vars_os() {
        if key.to_string_lossy().starts_with("GIT_") {
            cmd.env_remove(key);
        }
    }
    let out = cmd
        .args([
            "-c",
            "core.fsmonitor=false",
            "-c",
            "core.hooksPath=/dev/null",
            "-c",
            "gc.auto=0",
        ])
        .arg("-C")
        .arg(dir)
        .args(args)
        .stdin(Stdio::null())
        .env("GIT_TERMINAL_PROMPT", "0")
        .kill_on_drop(true)
        .output()
        .await
        .map_err(|e| match e.kind() {
            std::io::ErrorKind::NotFound => CodingError::GitMissing,
            _ => CodingError::Io(format!("cannot run git: {e}")),
        })?;
    Ok((
        out.status.code(),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).trim().to_owned(),
    ))
}

/// The top of the work tree `dir` belongs to; a clear error when it is no git repository.
pub(crate) async fn toplevel(program: &Path, dir: &Path) -> CodingResult<String> {
    match git(program, dir, &["rev-parse", "--show-toplevel"]).await {
        Ok(top) => Ok(top),
        Err(CodingError::Git { .. }) => Err(CodingError::Repository(format!(
            "{} is not a git repository",
            dir.display()
        ))),
        Err(e) => Err(e),
    }
}

/// Whether the work tree at `dir` has uncommitted changes (untracked files included).
pub(crate) async fn is_dirty(program: &Path, dir: &Path) -> CodingResult<bool> {
    Ok(!git(program, dir, &["status", "--porcelain"])
        .await?
        .is_empty())
}

/// Whether the work tree at `dir` has uncommitted changes to tracked files (untracked files
/// not counted).
pub(crate) async fn has_tracked_changes(program: &Path, dir: &Path) -> CodingResult<bool> {
    Ok(!git(
        program,
        dir,
        &["status", "--porcelain", "--untracked-files=no"],
    )
    .await?
    .is_empty())
}

/// Whether the work tree at `dir` has `branch` checked out (not detached, not another
/// branch): only then are its commits safe on that branch when the worktree goes.
pub(crate) async fn on_branch(program: &Path, dir: &Path, branch: &str) -> CodingResult<bool> {
    match git(program, dir, &["symbolic-ref", "-q", "HEAD"]).await {
        Ok(head) => Ok(head == format!("refs/heads/{branch}")),
        Err(CodingError::Git { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Whether the branch exists in the repository at `dir`.
pub(crate) async fn branch_exists(program: &Path, dir: &Path, branch: &str) -> CodingResult<bool> {
    let refname = format!("refs/heads/{branch}");
    match git(
        program,
        dir,
        &["rev-parse", "--verify", "--quiet", &refname],
    )
    .await
    {
        Ok(_) => Ok(true),
        Err(CodingError::Git { .. }) => Ok(false),
        Err(e) => Err(e),
    }
}
