//! How a merge's state is read and settled: whether the checkout is ready for one, whether a
//! child's tip is in it already (by history or by a squash's trailer), a merge a crash cut
//! off found done or undone, and what a failed merge changed taken back.

use std::path::{Path, PathBuf};

use super::marker::{read_marker, remove_marker};
use crate::error::{CodingError, CodingResult};
use crate::git;

/// The squash commit's trailer naming the branch it brought in.
pub(super) const TRAILER: &str = "Arbor-Merged:";
/// What the checkout's git directory holds while an operation of its own is in progress.
const IN_PROGRESS: [&str; 6] = [
    "MERGE_HEAD",
    "rebase-merge",
    "rebase-apply",
    "CHERRY_PICK_HEAD",
    "REVERT_HEAD",
    "BISECT_LOG",
];

/// The branch the checkout has out, refusing a detached HEAD, uncommitted changes to
/// tracked files and an operation of the checkout's own in progress.
pub(super) async fn ready(g: &Path, repo: &Path, git_dir: &Path) -> CodingResult<String> {
    let (code, on, _) = git::run(g, repo, &["symbolic-ref", "-q", "HEAD"]).await?;
    if code != Some(0) {
        return Err(CodingError::Repository(
            "the main checkout's HEAD is detached: check out the branch to merge into first"
                .to_owned(),
        ));
    }
    if let Some(busy) = IN_PROGRESS.iter().find(|f| git_dir.join(f).exists()) {
        return Err(CodingError::Repository(format!(
            "the main checkout has an operation in progress ({busy}): finish or abort it first"
        )));
    }
    if git::has_tracked_changes(g, repo).await? {
        return Err(CodingError::Repository(format!(
            "the main checkout {} has uncommitted changes: commit or stash them before merging",
            repo.display()
        )));
    }
    Ok(on.trim().to_owned())
}

/// Finds a merge a crash cut off through its marker: done (its commit is in the history),
/// undone when the checkout is still on its branch at the commit it started from (only the
/// merge's own changes go: `reset --merge` keeps a user's edits), and otherwise left alone
/// and reported. The marker goes once it is resolved.
pub(super) async fn recover(g: &Path, repo: &Path, marker: &Path) -> CodingResult<()> {
    let Some(m) = read_marker(marker).await? else {
        return Ok(());
    };
    let head = git::git(g, repo, &["rev-parse", "HEAD"]).await?;
    let (_, on, _) = git::run(g, repo, &["symbolic-ref", "-q", "HEAD"]).await?;
    let landed = head != m.start
        && git::run(g, repo, &["merge-base", "--is-ancestor", &m.tip, "HEAD"])
            .await?
            .0
            == Some(0)
        || squashed(g, repo, &m.tip, &m.start).await?;
    if landed {
        tracing::info!(commit = %m.tip, "a merge cut off had finished");
    } else if head == m.start && on.trim() == m.on {
        undo_if_moved(g, repo, &m.start).await?;
        tracing::warn!(commit = %m.tip, start = %m.start, "a merge cut off was undone");
    } else {
        return Err(CodingError::Repository(format!(
            "a merge cut off ({} into {} at {}) is neither done nor where it started (the \
             checkout moved since): resolve it by hand, then remove {}",
            m.tip,
            m.on,
            m.start,
            marker.display()
        )));
    }
    remove_marker(marker).await
}

/// Whether a squash of `tip` landed after `start`: a commit since names it in its trailer.
async fn squashed(g: &Path, repo: &Path, tip: &str, start: &str) -> CodingResult<bool> {
    let range = format!("{start}..HEAD");
    let (code, out, _) = git::run(
        g,
        repo,
        &[
            "log",
            "--format=%(trailers:key=Arbor-Merged,valueonly)",
            &range,
        ],
    )
    .await?;
    Ok(code == Some(0)
        && out
            .lines()
            .any(|l| l.split_whitespace().nth(1) == Some(tip)))
}

/// Whether `tip` of `branch` is in the checkout already: in HEAD's history, or brought in
/// by a squash commit naming both (since their merge base).
pub(super) async fn merged_already(
    g: &Path,
    repo: &Path,
    branch: &str,
    tip: &str,
) -> CodingResult<bool> {
    if git::run(g, repo, &["merge-base", "--is-ancestor", tip, "HEAD"])
        .await?
        .0
        == Some(0)
    {
        return Ok(true);
    }
    let base = git::git(g, repo, &["merge-base", "HEAD", tip]).await?;
    let range = format!("{base}..HEAD");
    let out = git::git(
        g,
        repo,
        &[
            "log",
            "--format=%(trailers:key=Arbor-Merged,valueonly)",
            &range,
        ],
    )
    .await?;
    Ok(out.lines().any(|l| {
        let mut parts = l.split_whitespace();
        parts.next() == Some(branch) && parts.next() == Some(tip)
    }))
}

/// A git command that commits: with an identity only when git has none to use.
pub(super) async fn committing(g: &Path, repo: &Path, args: &[&str]) -> CodingResult<()> {
    let named = git::run(g, repo, &["var", "GIT_COMMITTER_IDENT"]).await?.0 == Some(0)
        && git::run(g, repo, &["var", "GIT_AUTHOR_IDENT"]).await?.0 == Some(0);
    if named {
        return git::git(g, repo, args).await.map(drop);
    }
    let mut with = vec!["-c", "user.name=arbor", "-c", "user.email=arbor@localhost"];
    with.extend_from_slice(args);
    git::git(g, repo, &with).await.map(drop)
}

/// Back to `start` when the merge moved HEAD or left something staged or in progress:
/// `reset --merge` takes back only what the merge changed (and refuses rather than lose a
/// user's edit).
pub(super) async fn undo_if_moved(g: &Path, repo: &Path, start: &str) -> CodingResult<()> {
    let head = git::git(g, repo, &["rev-parse", "HEAD"]).await?;
    let staged = git::run(g, repo, &["diff", "--cached", "--quiet"]).await?.0 != Some(0);
    let git_dir = PathBuf::from(git::git(g, repo, &["rev-parse", "--absolute-git-dir"]).await?);
    let merging = git_dir.join("MERGE_HEAD").exists() || git_dir.join("SQUASH_MSG").exists();
    if head == start && !staged && !merging {
        return Ok(());
    }
    git::git(g, repo, &["reset", "-q", "--merge", start]).await?;
    let _ = tokio::fs::remove_file(git_dir.join("SQUASH_MSG")).await;
    Ok(())
}
