//! Bringing a child's work back into the main checkout: what its branch changes
//! ([`Worktrees::diff`]), merged in once ([`Worktrees::merge`]: a fast-forward, a merge commit
//! or a squash), or thrown away ([`Worktrees::discard`]).
//!
//! A merge never leaves the main checkout half done:
//! - it is refused while the checkout has uncommitted changes to tracked files, a detached
//!   HEAD, or an operation of its own in progress (a merge, a rebase, a cherry-pick, a
//!   bisect), and while the child's worktree holds uncommitted work;
//! - the child's branch is read once, as a commit, and that commit is what is merged (a
//!   child still committing, or a tag of the same name, changes nothing);
//! - a conflict is found before anything is touched (`git merge-tree`), and returned with
//!   the conflicting files and their hunks;
//! - every option the merge depends on is given explicitly (never the user's `merge.ff`,
//!   `mergeOptions` or signing), ignored files are never overwritten, and what git did is
//!   checked after it: a merge that did not commit cleanly is undone;
//! - a marker in the git directory names the merge in flight (the branch checked out, the
//!   commit it started from, the commit merged), so a merge cut off by a crash is found
//!   again: done (that commit is in the history), or undone and run again when the checkout
//!   is still where it started; anything else (commits since, another branch checked out)
//!   is left alone and reported, naming the marker;
//! - its git commands run in a task of their own: a caller that stops waiting (a cancel,
//!   a timeout) never kills git half way through writing the checkout;
//! - a branch merged once is recognised (the commit is in the history, or a squash commit
//!   names it with that commit), and merging it again changes nothing.
//!
//! git refuses to write through a symbolic link or outside the work tree whatever a
//! branch holds, so a child's change lands inside the main checkout or not at all.

use std::path::PathBuf;

mod marker;
mod reading;
mod settle;

use marker::{read_marker, remove_marker, write_marker};
pub use reading::{Conflict, FileChange};
use reading::{checked, dry_run, numstat, page_of};
use settle::{TRAILER, committing, merged_already, ready, recover, undo_if_moved};

use crate::error::{CodingError, CodingResult};
use crate::git;
use crate::workspace::Worktrees;

/// How a child's branch is brought in.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Strategy {
    /// Only when the checkout's branch is an ancestor of the child's: no new commit.
    FastForward,
    /// A merge commit with both histories.
    Merge,
    /// One new commit with the child's whole change (its own commits are not kept).
    Squash,
}

impl Strategy {
    /// Parses `ff`, `merge` or `squash`.
    pub fn parse(s: &str) -> CodingResult<Self> {
        match s {
            "ff" | "fast_forward" => Ok(Self::FastForward),
            "merge" => Ok(Self::Merge),
            "squash" => Ok(Self::Squash),
            other => Err(CodingError::Config(format!(
                "strategy must be one of \"ff\", \"merge\", \"squash\" (got {other:?})"
            ))),
        }
    }

    /// Its name: `ff`, `merge` or `squash`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::FastForward => "ff",
            Self::Merge => "merge",
            Self::Squash => "squash",
        }
    }
}

/// What a child's branch changes against the main checkout's branch, now: from their merge
/// base, so a moved base shows only the child's own change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// The child's branch.
    pub branch: String,
    /// Its tip: the commit read (and the one a merge now would bring in).
    pub tip: String,
    /// The merge base it is read from.
    pub base: String,
    /// Every file it touches.
    pub files: Vec<FileChange>,
    /// A page of the patch: `max_bytes` from `offset` (cut at a line's end when one fits).
    pub patch: String,
    /// Where the next page starts, if the patch goes on.
    pub next_offset: Option<usize>,
    /// The whole patch's size, in bytes.
    pub total_bytes: usize,
}

/// How a merge ended.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Merged {
    /// Merged: the checkout's branch is at `commit` now.
    Done {
        /// The commit the checkout is at.
        commit: String,
        /// How.
        strategy: Strategy,
        /// The files it changed.
        files: Vec<FileChange>,
    },
    /// It was merged before (this call or a crashed one), or it holds nothing the checkout
    /// does not: nothing changed.
    AlreadyMerged {
        /// The commit the checkout is at.
        commit: String,
    },
    /// It would conflict: the checkout is untouched.
    Conflicts(Vec<Conflict>),
}

/// What a discard removed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Discarded {
    /// The branch deleted (`None`: there was none).
    pub branch: Option<String>,
    /// The worktree removed (`None`: there was none).
    pub worktree: Option<PathBuf>,
}

/// The marker of a merge in flight, in the main checkout's git directory.
const MARKER: &str = "arbor-merge";
/// What git may not do on its own while merging a child's work.
const EXPLICIT: [&str; 6] = [
    "-c",
    "commit.gpgSign=false",
    "-c",
    "merge.verifySignatures=false",
    "-c",
    "core.quotePath=false",
];

impl Worktrees {
    /// The child branch of `delegation_id` and its tip, read once as a commit.
    async fn child_tip(&self, delegation_id: &str) -> CodingResult<(String, String)> {
        let branch = self.plan(delegation_id)?.branch;
        let (g, repo) = (&self.config().git_path(), self.config().repository());
        git::toplevel(g, repo).await?;
        let refname = format!("refs/heads/{branch}^{{commit}}");
        let (code, tip, _) =
            git::run(g, repo, &["rev-parse", "--verify", "--quiet", &refname]).await?;
        if code != Some(0) {
            return Err(CodingError::Repository(format!(
                "no branch {branch}: the child made no worktree, or it was discarded"
            )));
        }
        Ok((branch, tip.trim().to_owned()))
    }

    /// What the child `delegation_id`'s branch changes against the main checkout's branch
    /// (from their merge base): every file with its lines added and removed, and a page of
    /// the patch of at most `max_bytes` from `offset`.
    pub async fn diff(
        &self,
        delegation_id: &str,
        offset: usize,
        max_bytes: usize,
    ) -> CodingResult<Diff> {
        let (branch, tip) = self.child_tip(delegation_id).await?;
        let (g, repo) = (&self.config().git_path(), self.config().repository());
        let base = git::git(g, repo, &["merge-base", "HEAD", &tip]).await?;
        let files = numstat(g, repo, &base, &tip).await?;
        let patch = checked(
            g,
            repo,
            &[
                "diff",
                "--no-color",
                "--no-ext-diff",
                "--no-textconv",
                &base,
                &tip,
            ],
        )
        .await?;
        let (page, next_offset) = page_of(&patch, offset, max_bytes);
        Ok(Diff {
            branch,
            tip,
            base,
            files,
            patch: page,
            next_offset,
            total_bytes: patch.len(),
        })
    }

    /// Merges the child `delegation_id`'s branch into the main checkout's branch, once (see
    /// the module docs): a conflict leaves the checkout untouched and comes back file by
    /// file.
    pub async fn merge(&self, delegation_id: &str, strategy: Strategy) -> CodingResult<Merged> {
        self.merge_expecting(delegation_id, strategy, None).await
    }

    /// [`Worktrees::merge`], only when the child's branch is still at `expected` (the tip a
    /// person approved, [`Diff::tip`]): a branch that moved since is refused, nothing
    /// touched.
    pub async fn merge_expecting(
        &self,
        delegation_id: &str,
        strategy: Strategy,
        expected: Option<&str>,
    ) -> CodingResult<Merged> {
        let (branch, tip) = self.child_tip(delegation_id).await?;
        if let Some(want) = expected
            && want != tip
        {
            return Err(CodingError::Repository(format!(
                "{branch} moved since its merge was approved (approved {}, now {}): ask \
                 again to merge what it holds now",
                short(want),
                short(&tip)
            )));
        }
        let g = self.config().git_path();
        let repo = self.config().repository().to_path_buf();
        let plan = self.plan(delegation_id)?;
        if plan.path.join(".git").exists() && git::has_tracked_changes(&g, &plan.path).await? {
            return Err(CodingError::Repository(format!(
                "the child's worktree {} has uncommitted changes (it is still working, or left \
                 them uncommitted): they are not on {branch}",
                plan.path.display()
            )));
        }
        let held = self.repo_lock().await;
        let git_dir =
            PathBuf::from(git::git(&g, &repo, &["rev-parse", "--absolute-git-dir"]).await?);
        let marker = git_dir.join(MARKER);
        recover(&g, &repo, &marker).await?;
        if merged_already(&g, &repo, &branch, &tip).await? {
            let commit = git::git(&g, &repo, &["rev-parse", "HEAD"]).await?;
            return Ok(Merged::AlreadyMerged { commit });
        }
        let on = ready(&g, &repo, &git_dir).await?;
        let conflicts = dry_run(&g, &repo, &tip).await?;
        if !conflicts.is_empty() {
            return Ok(Merged::Conflicts(conflicts));
        }
        let start = git::git(&g, &repo, &["rev-parse", "HEAD"]).await?;
        let base = git::git(&g, &repo, &["merge-base", "HEAD", &tip]).await?;
        let files = numstat(&g, &repo, &base, &tip).await?;
        write_marker(&marker, &on, &start, &tip).await?;
        // In a task of its own, holding the locks until the merge is settled: a caller that
        // stops waiting (a cancel, a timeout) neither kills git mid-write nor lets another
        // change of the repository in before this one is done or undone.
        let job = Job {
            g,
            repo,
            branch: branch.clone(),
            tip,
            start,
            strategy,
            marker,
        };
        let commit = tokio::spawn(async move {
            let _held = held;
            job.settle().await
        })
        .await
        .unwrap_or_else(|e| Err(CodingError::Io(format!("the merge's task failed: {e}"))))?;
        tracing::info!(%branch, %commit, strategy = strategy.as_str(), "child merged");
        Ok(Merged::Done {
            commit,
            strategy,
            files,
        })
    }

    /// Settles a merge a crash cut off, if its marker is there: found done, or undone when
    /// the checkout is still where it started (see the module docs); an error names the
    /// marker when neither holds. A host runs it when it starts again, so the checkout is
    /// never left half merged whether or not the merge is asked for again. `false`: there
    /// was nothing to settle.
    pub async fn recover_merge(&self) -> CodingResult<bool> {
        let g = self.config().git_path();
        let repo = self.config().repository().to_path_buf();
        git::toplevel(&g, &repo).await?;
        let git_dir =
            PathBuf::from(git::git(&g, &repo, &["rev-parse", "--absolute-git-dir"]).await?);
        let marker = git_dir.join(MARKER);
        if !tokio::fs::try_exists(&marker).await.unwrap_or(false) {
            return Ok(false);
        }
        let _one_at_a_time = self.repo_lock().await;
        recover(&g, &repo, &marker).await?;
        Ok(true)
    }

    /// Throws the child `delegation_id`'s work away: its worktree (if one is left) and its
    /// branch. Its transcript is not this crate's: it stays. Refused while a merge of that
    /// branch was cut off (its marker names it).
    pub async fn discard(&self, delegation_id: &str) -> CodingResult<Discarded> {
        let plan = self.plan(delegation_id)?;
        let g = self.config().git_path();
        let repo = self.config().repository().to_path_buf();
        git::toplevel(&g, &repo).await?;
        let _one_at_a_time = self.repo_lock().await;
        let git_dir =
            PathBuf::from(git::git(&g, &repo, &["rev-parse", "--absolute-git-dir"]).await?);
        if let Some(m) = read_marker(&git_dir.join(MARKER)).await?
            && m.tip_branch(&g, &repo, &plan.branch).await
        {
            return Err(CodingError::Repository(format!(
                "a merge of {} was cut off: merge it again (or resolve {}) before discarding",
                plan.branch,
                git_dir.join(MARKER).display()
            )));
        }
        let mut out = Discarded {
            branch: None,
            worktree: None,
        };
        if plan.path.exists() {
            let path = plan.path.to_string_lossy().into_owned();
            // Twice forced: a worktree git was killed while making is still locked.
            let removed = git::git(
                &g,
                &repo,
                &["worktree", "remove", "--force", "--force", &path],
            )
            .await;
            if removed.is_err() && plan.path.exists() {
                tokio::fs::remove_dir_all(&plan.path).await.map_err(|e| {
                    CodingError::Io(format!("cannot remove {}: {e}", plan.path.display()))
                })?;
            }
            out.worktree = Some(plan.path.clone());
        }
        git::git(&g, &repo, &["worktree", "prune"]).await?;
        if git::branch_exists(&g, &repo, &plan.branch).await? {
            git::git(&g, &repo, &["branch", "-D", &plan.branch]).await?;
            out.branch = Some(plan.branch);
        }
        self.forget(delegation_id);
        tracing::info!(delegation_id, ?out, "child's work discarded");
        Ok(out)
    }
}

/// A commit's first 12 hex digits, for messages.
fn short(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// The git commands of one merge, from its marker written to before its removal.
struct Job {
    g: PathBuf,
    repo: PathBuf,
    branch: String,
    tip: String,
    start: String,
    strategy: Strategy,
    /// Its marker: removed once the merge is done or undone.
    marker: PathBuf,
}

impl Job {
    /// Runs the merge and settles it: done (the commit the checkout is at), or undone back
    /// to where it started; the marker goes either way (it stays only when undoing failed).
    async fn settle(self) -> CodingResult<String> {
        let (g, repo, start, marker) = (
            self.g.clone(),
            self.repo.clone(),
            self.start.clone(),
            self.marker.clone(),
        );
        if let Err(e) = self.run().await {
            // Nothing half done stays: back to where it started, if anything moved.
            if let Err(undone) = undo_if_moved(&g, &repo, &start).await {
                return Err(CodingError::Repository(format!(
                    "{e}; undoing it failed too ({undone}): see {}",
                    marker.display()
                )));
            }
            remove_marker(&marker).await?;
            return Err(e);
        }
        remove_marker(&marker).await?;
        git::git(&g, &repo, &["rev-parse", "HEAD"]).await
    }

    async fn run(self) -> CodingResult<()> {
        let Job {
            g,
            repo,
            branch,
            tip,
            start,
            strategy,
            marker: _,
        } = self;
        let message = format!("Merge {branch}");
        let mut args: Vec<&str> = EXPLICIT.to_vec();
        match strategy {
            Strategy::FastForward => {
                args.extend([
                    "merge",
                    "--ff-only",
                    "--no-squash",
                    "--no-overwrite-ignore",
                    "-q",
                    &tip,
                ]);
                git::git(&g, &repo, &args).await?;
            }
            Strategy::Merge => {
                args.extend([
                    "merge",
                    "--no-ff",
                    "--commit",
                    "--no-squash",
                    "--no-overwrite-ignore",
                    "--no-gpg-sign",
                    "-q",
                    "-m",
                    &message,
                    &tip,
                ]);
                committing(&g, &repo, &args).await?;
            }
            Strategy::Squash => {
                args.extend([
                    "merge",
                    "--squash",
                    "--ff",
                    "--no-overwrite-ignore",
                    "-q",
                    &tip,
                ]);
                git::git(&g, &repo, &args).await?;
                let message = format!("{message} (squashed)\n\n{TRAILER} {branch} {tip}");
                let mut commit: Vec<&str> = EXPLICIT.to_vec();
                commit.extend(["commit", "--no-gpg-sign", "-q", "-m", &message]);
                committing(&g, &repo, &commit).await?;
            }
        }
        // What git did is checked, not assumed: the merge is committed, nothing is left
        // staged or in progress.
        let now = git::git(&g, &repo, &["rev-parse", "HEAD"]).await?;
        let landed = git::run(&g, &repo, &["merge-base", "--is-ancestor", &start, &now])
            .await?
            .0
            == Some(0);
        let left = git::has_tracked_changes(&g, &repo).await?
            || git::git(&g, &repo, &["rev-parse", "--absolute-git-dir"])
                .await
                .map(|d| PathBuf::from(d).join("MERGE_HEAD").exists())?;
        if now == start || !landed || left {
            return Err(CodingError::Repository(format!(
                "git did not commit the merge of {branch} cleanly (the checkout is at {now})"
            )));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn strategies_parse_by_name() {
        assert_eq!(Strategy::parse("squash").unwrap(), Strategy::Squash);
        assert_eq!(Strategy::parse("ff").unwrap(), Strategy::FastForward);
        let e = Strategy::parse("rebase").unwrap_err().to_string();
        assert!(e.contains("\"ff\", \"merge\", \"squash\""), "{e}");
    }
}
