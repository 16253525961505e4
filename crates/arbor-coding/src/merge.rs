//! Bringing a child's work back into the main checkout: what its branch changes
//! ([`Worktrees::diff`]), merged in once ([`Worktrees::merge`]: a fast-forward, a merge commit
//! or a squash), or thrown away ([`Worktrees::discard`]).
//!
//! A merge never leaves the main checkout half done:
//! - it is refused while the checkout has uncommitted changes to tracked files;
//! - a conflict is found before anything is touched (`git merge-tree`), and returned with
//!   the conflicting files and their hunks;
//! - a marker in the git directory names the merge in flight and the commit it started
//!   from, so a merge cut off by a crash is found again: done (its commit is there) or undone
//!   (the checkout goes back to that commit) and run again, never twice;
//! - a branch merged once is recognised (its head is in the checkout's history, or a squash
//!   commit names it), and merging it again changes nothing.
//!
//! git refuses to write through a symbolic link or outside the work tree whatever a
//! branch holds, so a child's change lands inside the main checkout or not at all.

use std::path::{Path, PathBuf};

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

    fn as_str(self) -> &'static str {
        match self {
            Self::FastForward => "ff",
            Self::Merge => "merge",
            Self::Squash => "squash",
        }
    }
}

/// One file a change touches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// Its path in the repository.
    pub path: String,
    /// Lines added (`None` for a binary file).
    pub added: Option<u64>,
    /// Lines removed (`None` for a binary file).
    pub removed: Option<u64>,
}

/// What a child's branch changes against the main checkout's branch, now: from their merge
/// base, so a moved base shows only the child's own change.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diff {
    /// The child's branch.
    pub branch: String,
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

/// A file a merge would conflict on, with its conflicting hunks (capped).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Conflict {
    /// Its path.
    pub path: String,
    /// The conflicting hunks, with git's markers.
    pub hunks: String,
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
    /// It was merged before (this call or a crashed one): nothing changed.
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

/// The most of a conflict's hunks returned per file, in bytes.
const MAX_HUNK_BYTES: usize = 8 * 1024;
/// The most files with conflicts returned.
const MAX_CONFLICTS: usize = 50;
/// The squash commit's trailer naming the branch it brought in.
const TRAILER: &str = "Arbor-Merged:";
/// The marker of a merge in flight, in the main checkout's git directory.
const MARKER: &str = "arbor-merge";

impl Worktrees {
    /// The child branch of `delegation_id`, which must exist.
    async fn child_branch(&self, delegation_id: &str) -> CodingResult<String> {
        let branch = self.plan(delegation_id)?.branch;
        let (g, repo) = (&self.config().git_path(), self.config().repository());
        git::toplevel(g, repo).await?;
        if !git::branch_exists(g, repo, &branch).await? {
            return Err(CodingError::Repository(format!(
                "no branch {branch}: the child made no worktree, or it was discarded"
            )));
        }
        Ok(branch)
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
        let branch = self.child_branch(delegation_id).await?;
        let (g, repo) = (&self.config().git_path(), self.config().repository());
        let base = git::git(g, repo, &["merge-base", "HEAD", &branch]).await?;
        let files = numstat(g, repo, &base, &branch).await?;
        let (_, patch, _) = git::run(g, repo, &["diff", "--no-color", &base, &branch]).await?;
        let (page, next_offset) = page_of(&patch, offset, max_bytes);
        Ok(Diff {
            branch,
            base,
            files,
            patch: page,
            next_offset,
            total_bytes: patch.len(),
        })
    }

    /// Merges the child `delegation_id`'s branch into the main checkout's branch, once (see
    /// the module docs): refused while the checkout has uncommitted changes to tracked
    /// files; a conflict leaves it untouched and comes back file by file.
    pub async fn merge(&self, delegation_id: &str, strategy: Strategy) -> CodingResult<Merged> {
        let branch = self.child_branch(delegation_id).await?;
        let g = self.config().git_path();
        let repo = self.config().repository().to_path_buf();
        let _one_at_a_time = self.admin_lock().await;
        let marker = marker_path(&g, &repo).await?;
        // A merge a crash cut off (this branch's or another's): done, or undone; this one
        // then runs (again) as if it were the first.
        if let Some((cut, started_at)) = read_marker(&marker).await? {
            if merged_already(&g, &repo, &cut).await? {
                tracing::info!(branch = %cut, "a merge cut off had finished");
            } else {
                undo(&g, &repo, &started_at).await?;
                tracing::warn!(branch = %cut, commit = %started_at, "a merge cut off was undone");
            }
            remove_marker(&marker).await?;
        }
        if merged_already(&g, &repo, &branch).await? {
            let commit = git::git(&g, &repo, &["rev-parse", "HEAD"]).await?;
            return Ok(Merged::AlreadyMerged { commit });
        }
        if git::has_tracked_changes(&g, &repo).await? {
            return Err(CodingError::Repository(format!(
                "the main checkout {} has uncommitted changes: commit or stash them before merging",
                repo.display()
            )));
        }
        let conflicts = dry_run(&g, &repo, &branch).await?;
        if !conflicts.is_empty() {
            return Ok(Merged::Conflicts(conflicts));
        }
        let head = git::git(&g, &repo, &["rev-parse", "HEAD"]).await?;
        let base = git::git(&g, &repo, &["merge-base", "HEAD", &branch]).await?;
        let files = numstat(&g, &repo, &base, &branch).await?;
        write_marker(&marker, &branch, &head).await?;
        let tip = git::git(&g, &repo, &["rev-parse", &branch]).await?;
        let message = format!("Merge {branch}");
        let merged = match strategy {
            Strategy::FastForward => git::git(&g, &repo, &["merge", "--ff-only", "-q", &branch])
                .await
                .map(drop),
            Strategy::Merge => {
                committing(
                    &g,
                    &repo,
                    &["merge", "--no-ff", "-q", "-m", &message, &branch],
                )
                .await
            }
            Strategy::Squash => {
                match git::git(&g, &repo, &["merge", "--squash", "-q", &branch]).await {
                    Ok(_) => {
                        let message = format!("{message} (squashed)\n\n{TRAILER} {branch} {tip}");
                        committing(&g, &repo, &["commit", "-q", "-m", &message]).await
                    }
                    Err(e) => Err(e),
                }
            }
        };
        if let Err(e) = merged {
            // Nothing half done stays: back to where it started.
            undo(&g, &repo, &head).await?;
            remove_marker(&marker).await?;
            return Err(e);
        }
        remove_marker(&marker).await?;
        let commit = git::git(&g, &repo, &["rev-parse", "HEAD"]).await?;
        tracing::info!(%branch, %commit, strategy = strategy.as_str(), "child merged");
        Ok(Merged::Done {
            commit,
            strategy,
            files,
        })
    }

    /// Throws the child `delegation_id`'s work away: its worktree (if one is left) and its
    /// branch. Its transcript is not this crate's: it stays.
    pub async fn discard(&self, delegation_id: &str) -> CodingResult<Discarded> {
        let plan = self.plan(delegation_id)?;
        let g = self.config().git_path();
        let repo = self.config().repository().to_path_buf();
        git::toplevel(&g, &repo).await?;
        let _one_at_a_time = self.admin_lock().await;
        self.forget(delegation_id);
        let mut out = Discarded {
            branch: None,
            worktree: None,
        };
        if plan.path.exists() {
            let path = plan.path.to_string_lossy().into_owned();
            git::git(&g, &repo, &["worktree", "remove", "--force", &path]).await?;
            out.worktree = Some(plan.path.clone());
        }
        git::git(&g, &repo, &["worktree", "prune"]).await?;
        if git::branch_exists(&g, &repo, &plan.branch).await? {
            git::git(&g, &repo, &["branch", "-D", &plan.branch]).await?;
            out.branch = Some(plan.branch);
        }
        tracing::info!(delegation_id, ?out, "child's work discarded");
        Ok(out)
    }
}

/// Whether `branch` is in the checkout already: its head in HEAD's history, or a squash
/// commit naming it.
async fn merged_already(g: &Path, repo: &Path, branch: &str) -> CodingResult<bool> {
    let (ancestor, _, _) =
        git::run(g, repo, &["merge-base", "--is-ancestor", branch, "HEAD"]).await?;
    if ancestor {
        return Ok(true);
    }
    let grep = format!("^{TRAILER} {branch} ");
    let found = git::git(
        g,
        repo,
        &[
            "log",
            "-1",
            "--format=%H",
            "--fixed-strings",
            "--grep",
            &grep[1..],
            "HEAD",
        ],
    )
    .await?;
    Ok(!found.is_empty())
}

/// A git command that commits: with an identity when the repository has none configured.
async fn committing(g: &Path, repo: &Path, args: &[&str]) -> CodingResult<()> {
    let named = git::git(g, repo, &["config", "user.email"]).await.is_ok();
    if named {
        return git::git(g, repo, args).await.map(drop);
    }
    let mut with = vec!["-c", "user.name=arbor", "-c", "user.email=arbor@localhost"];
    with.extend_from_slice(args);
    git::git(g, repo, &with).await.map(drop)
}

/// Back to `commit`, discarding what a merge left (an interrupted merge, a squash staged).
async fn undo(g: &Path, repo: &Path, commit: &str) -> CodingResult<()> {
    let _ = git::run(g, repo, &["merge", "--abort"]).await?;
    git::git(g, repo, &["reset", "-q", "--hard", commit])
        .await
        .map(drop)
}

/// The conflicts a merge of `branch` into HEAD would have, found without touching the
/// checkout (`git merge-tree --write-tree`); empty when it merges cleanly.
async fn dry_run(g: &Path, repo: &Path, branch: &str) -> CodingResult<Vec<Conflict>> {
    let (clean, out, err) = git::run(
        g,
        repo,
        &[
            "merge-tree",
            "--write-tree",
            "--name-only",
            "--no-messages",
            "HEAD",
            branch,
        ],
    )
    .await?;
    if clean {
        return Ok(Vec::new());
    }
    let mut lines = out.lines();
    let Some(tree) = lines.next().filter(|t| !t.is_empty()) else {
        return Err(CodingError::Git {
            args: format!("merge-tree HEAD {branch}"),
            stderr: err,
        });
    };
    let mut conflicts = Vec::new();
    for path in lines.filter(|l| !l.is_empty()).take(MAX_CONFLICTS) {
        let spec = format!("{tree}:{path}");
        let (_, content, _) = git::run(g, repo, &["cat-file", "-p", &spec]).await?;
        conflicts.push(Conflict {
            path: path.to_owned(),
            hunks: hunks_of(&content),
        });
    }
    Ok(conflicts)
}

/// The conflicting hunks of a file holding git's markers, capped at [`MAX_HUNK_BYTES`].
fn hunks_of(content: &str) -> String {
    let mut out = String::new();
    let mut inside = false;
    for line in content.lines() {
        if line.starts_with("<<<<<<<") {
            inside = true;
        }
        if inside {
            if out.len() + line.len() + 1 > MAX_HUNK_BYTES {
                out.push_str("… (cut)\n");
                break;
            }
            out.push_str(line);
            out.push('\n');
        }
        if line.starts_with(">>>>>>>") {
            inside = false;
        }
    }
    out
}

/// The files changed from `base` to `branch`, with their lines added and removed.
async fn numstat(g: &Path, repo: &Path, base: &str, branch: &str) -> CodingResult<Vec<FileChange>> {
    let out = git::git(g, repo, &["diff", "--numstat", base, branch]).await?;
    Ok(out
        .lines()
        .filter_map(|l| {
            let mut parts = l.splitn(3, '\t');
            let added = parts.next()?;
            let removed = parts.next()?;
            let path = parts.next()?;
            Some(FileChange {
                path: path.to_owned(),
                added: added.parse().ok(),
                removed: removed.parse().ok(),
            })
        })
        .collect())
}

/// At most `max` bytes of `text` from `offset`, cut at a line's end when one fits (else at
/// a character boundary), and where the next page starts.
fn page_of(text: &str, offset: usize, max: usize) -> (String, Option<usize>) {
    let mut start = offset.min(text.len());
    while !text.is_char_boundary(start) {
        start -= 1;
    }
    let rest = &text[start..];
    if rest.len() <= max {
        return (rest.to_owned(), None);
    }
    let mut end = max.max(1).min(rest.len());
    while !rest.is_char_boundary(end) {
        end -= 1;
    }
    if let Some(nl) = rest[..end].rfind('\n') {
        end = nl + 1;
    }
    (rest[..end].to_owned(), Some(start + end))
}

async fn marker_path(g: &Path, repo: &Path) -> CodingResult<PathBuf> {
    let dir = git::git(g, repo, &["rev-parse", "--absolute-git-dir"]).await?;
    Ok(PathBuf::from(dir).join(MARKER))
}

/// The branch and starting commit of a merge a crash cut off, if its marker is there.
async fn read_marker(marker: &Path) -> CodingResult<Option<(String, String)>> {
    let text = match tokio::fs::read_to_string(marker).await {
        Ok(t) => t,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => {
            return Err(CodingError::Io(format!(
                "cannot read {}: {e}",
                marker.display()
            )));
        }
    };
    let mut parts = text.split_whitespace();
    Ok(match (parts.next(), parts.next()) {
        (Some(branch), Some(commit)) => Some((branch.to_owned(), commit.to_owned())),
        _ => None,
    })
}

async fn write_marker(marker: &Path, branch: &str, head: &str) -> CodingResult<()> {
    tokio::fs::write(marker, format!("{branch} {head}\n"))
        .await
        .map_err(|e| CodingError::Io(format!("cannot write {}: {e}", marker.display())))
}

async fn remove_marker(marker: &Path) -> CodingResult<()> {
    match tokio::fs::remove_file(marker).await {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(CodingError::Io(format!(
            "cannot remove {}: {e}",
            marker.display()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pages_cut_at_line_ends_and_chain() {
        let text = "one\ntwo\nthree\n";
        assert_eq!(page_of(text, 0, 100), (text.to_owned(), None));
        assert_eq!(page_of(text, 0, 9), ("one\ntwo\n".to_owned(), Some(8)));
        assert_eq!(page_of(text, 8, 9), ("three\n".to_owned(), None));
        // No line end in reach: cut at a character boundary.
        assert_eq!(page_of("ééé", 0, 3), ("é".to_owned(), Some(2)));
        assert_eq!(page_of(text, 99, 5), (String::new(), None));
    }

    #[test]
    fn hunks_keep_the_markers_and_what_is_between() {
        let file = "a\n<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> b\nz\n";
        assert_eq!(
            hunks_of(file),
            "<<<<<<< HEAD\nours\n=======\ntheirs\n>>>>>>> b\n"
        );
    }

    #[test]
    fn strategies_parse_by_name() {
        assert_eq!(Strategy::parse("squash").unwrap(), Strategy::Squash);
        assert_eq!(Strategy::parse("ff").unwrap(), Strategy::FastForward);
        let e = Strategy::parse("rebase").unwrap_err().to_string();
        assert!(e.contains("\"ff\", \"merge\", \"squash\""), "{e}");
    }
}
