//! Worktrees: one linked git worktree per delegation, on its own branch, under an
//! allow-listed root, removed once when the delegation ends (kept when it has uncommitted
//! changes). Keyed by delegation id, so a resumed child finds the same worktree again.
//!
//! Nothing is left behind for good: a removal that failed (a locked worktree, git failing)
//! and a creation abandoned half-way (its future dropped during `git worktree add`, say)
//! are remembered and tried again by [`Worktrees::retry_cleanup`], which every creation
//! runs first.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use crate::error::{CodingError, CodingResult};
use crate::git;

/// Where worktrees come from and where they may go.
#[derive(Debug, Clone)]
pub struct WorkspaceConfig {
    repository: PathBuf,
    repository_id: String,
    worktree_roots: Vec<PathBuf>,
    branch_prefix: String,
    git: PathBuf,
}

impl WorkspaceConfig {
    /// Worktrees of the repository at `repository`, named `repository_id` in paths.
    pub fn new(repository: impl Into<PathBuf>, repository_id: impl Into<String>) -> Self {
        Self {
            repository: repository.into(),
            repository_id: repository_id.into(),
            worktree_roots: Vec::new(),
            branch_prefix: "agent/".to_owned(),
            git: PathBuf::from("git"),
        }
    }

    /// Allows worktrees under `root` (the first root given is used). Without one, every
    /// child is refused before git runs.
    pub fn worktree_root(mut self, root: impl Into<PathBuf>) -> Self {
        self.worktree_roots.push(root.into());
        self
    }

    /// The branch prefix (default `agent/`): a delegation's branch is prefix + its id.
    pub fn branch_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.branch_prefix = prefix.into();
        self
    }

    /// The git program (default `git`, found on PATH).
    pub fn git_program(mut self, program: impl Into<PathBuf>) -> Self {
        self.git = program.into();
        self
    }

    /// The repository.
    pub fn repository(&self) -> &Path {
        &self.repository
    }

    /// The git program.
    pub(crate) fn git_path(&self) -> PathBuf {
        self.git.clone()
    }
}

/// A delegation's worktree.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Worktree {
    /// Its directory: the child's `cwd`.
    pub path: PathBuf,
    /// Its branch.
    pub branch: String,
}

/// A commit's first 12 hex digits.
fn short_commit(commit: &str) -> &str {
    commit.get(..12).unwrap_or(commit)
}

/// Creates the worktree root when it does not exist, ignoring itself in git (a `.gitignore`
/// holding `*`), so worktrees under a repository's own `.arbor/` never show in its `git
/// status`. A root that exists already is the host's: it is left as it is. A failure is
/// logged, never fatal (the worktree's creation says what is wrong).
async fn ignore_root(root: Option<&PathBuf>) {
    let Some(root) = root else { return };
    if tokio::fs::try_exists(root).await.unwrap_or(true) {
        return;
    }
    let file = root.join(".gitignore");
    let written = async {
        tokio::fs::create_dir_all(root).await?;
        tokio::fs::write(&file, "*\n").await
    }
    .await;
    if let Err(e) = written {
        tracing::warn!(path = %file.display(), error = %e, "cannot write the worktree root's .gitignore");
    }
}

/// What a cleanup did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Cleanup {
    /// The worktree was removed (its branch, with any commits, stays).
    Removed(Worktree),
    /// Not one this manager created (or cleaned up already): nothing was touched.
    NotOurs,
}

/// A name usable as a folder and inside a branch name: ASCII letters, digits, `-`, `_`,
/// `.`; not starting with `.`, without `..`, not ending in `.lock`.
fn safe_segment(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 128
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        && !s.starts_with('.')
        && !s.contains("..")
        && !s.ends_with(".lock")
}

/// A cleanup still to do.
#[derive(Debug, Clone)]
enum Pending {
    /// The removal of a worktree this manager created failed; it is still in `created`.
    Removal,
    /// A creation was abandoned half-way: whatever of the worktree and its (new) branch
    /// exists goes.
    HalfMade(Worktree),
}

/// Creates and removes worktrees; remembers which it created. Construction does no I/O.
#[derive(Debug)]
pub struct Worktrees {
    config: WorkspaceConfig,
    created: Mutex<HashMap<String, Worktree>>,
    pending: Mutex<HashMap<String, Pending>>,
    /// Whether the main checkout's uncommitted tracked changes were warned about.
    warned: std::sync::atomic::AtomicBool,
    /// Held around git's commands that change the repository's list of worktrees (`worktree
    /// add`, `remove`, `prune`): git does not lock that list, and two run at once fail
    /// (`failed to read .git/worktrees/<other>/commondir` while the other is being made).
    admin: std::sync::Arc<tokio::sync::Mutex<()>>,
    /// The main checkout's git directory, once read (where the repository's lock is).
    git_dir: tokio::sync::OnceCell<Option<PathBuf>>,
}

/// Armed while `git worktree add` may have made something: dropped armed (the creation's
/// future dropped half-way, or git failing), it leaves the worktree to the next cleanup.
struct HalfMade<'a> {
    trees: &'a Worktrees,
    delegation_id: &'a str,
    tree: Option<Worktree>,
}

impl Drop for HalfMade<'_> {
    fn drop(&mut self) {
        if let Some(tree) = self.tree.take() {
            tracing::warn!(path = %tree.path.display(), "worktree creation abandoned: removed at the next cleanup");
            self.trees
                .pending()
                .insert(self.delegation_id.to_owned(), Pending::HalfMade(tree));
        }
    }
}

impl Worktrees {
    /// A manager for `config`.
    pub fn new(config: WorkspaceConfig) -> Self {
        Self {
            config,
            created: Mutex::new(HashMap::new()),
            pending: Mutex::new(HashMap::new()),
            warned: std::sync::atomic::AtomicBool::new(false),
            admin: std::sync::Arc::new(tokio::sync::Mutex::new(())),
            git_dir: tokio::sync::OnceCell::new(),
        }
    }

    /// Its configuration.
    pub fn config(&self) -> &WorkspaceConfig {
        &self.config
    }

    /// Held while git changes the repository's worktrees or its checkout's branch, across
    /// processes too (see [`crate::lock`]).
    pub(crate) async fn repo_lock(&self) -> crate::lock::RepoLock {
        let dir = self
            .git_dir
            .get_or_init(|| async {
                let g = &self.config.git;
                match git::git(
                    g,
                    &self.config.repository,
                    &["rev-parse", "--absolute-git-dir"],
                )
                .await
                {
                    Ok(d) => Some(PathBuf::from(d)),
                    Err(e) => {
                        tracing::debug!(error = %e, "no git directory to lock yet");
                        None
                    }
                }
            })
            .await;
        crate::lock::repo_lock(&self.admin, dir.as_deref()).await
    }

    /// Forgets the worktree of `delegation_id` (it is being removed some other way).
    pub(crate) fn forget(&self, delegation_id: &str) {
        self.created().remove(delegation_id);
        self.pending().remove(delegation_id);
    }

    fn created(&self) -> std::sync::MutexGuard<'_, HashMap<String, Worktree>> {
        self.created.lock().unwrap_or_else(|p| p.into_inner())
    }

    fn pending(&self) -> std::sync::MutexGuard<'_, HashMap<String, Pending>> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The worktree `delegation_id` would get, checked before any git call.
    pub fn plan(&self, delegation_id: &str) -> CodingResult<Worktree> {
        let Some(root) = self.config.worktree_roots.first() else {
            return Err(CodingError::Config(
                "no worktree root is allow-listed: configure one before delegating".to_owned(),
            ));
        };
        if !safe_segment(&self.config.repository_id) {
            return Err(CodingError::Config(format!(
                "repository id {:?} must be 1-128 ASCII letters, digits, '-', '_' or '.'",
                self.config.repository_id
            )));
        }
        if !safe_segment(delegation_id) {
            return Err(CodingError::Config(format!(
                "delegation id {delegation_id:?} cannot name a worktree"
            )));
        }
        // Absolute: git runs with `-C <repository>`, where a relative path would mean
        // something else.
        let root = std::path::absolute(root)
            .map_err(|e| CodingError::Config(format!("cannot resolve {}: {e}", root.display())))?;
        Ok(Worktree {
            path: root.join(&self.config.repository_id).join(delegation_id),
            branch: format!("{}{delegation_id}", self.config.branch_prefix),
        })
    }

    /// Creates the worktree of `delegation_id` (or finds it again, for a resumed child),
    /// from the main checkout's current commit. Refuses a repository that is not one and a
    /// branch that exists without this delegation's worktree. Untracked files in the main
    /// checkout are no obstacle (a worktree starts from a commit, and they are not in it);
    /// uncommitted changes to tracked files are not either, but children do not see them:
    /// the first creation that finds some warns, naming the commit.
    pub async fn create(&self, delegation_id: &str) -> CodingResult<Worktree> {
        let plan = self.plan(delegation_id)?;
        let repo = &self.config.repository;
        let g = &self.config.git;
        git::toplevel(g, repo).await?;
        // What earlier cleanups left (this delegation's abandoned creation included) goes
        // first; what still cannot go stays for the next opportunity.
        for (id, result) in self.retry_cleanup().await {
            if let Err(e) = result {
                tracing::warn!(delegation_id = %id, error = %e, "cleanup retried and failed again");
            }
        }
        // A resume: the same delegation's worktree is there, on its branch.
        if plan.path.join(".git").exists()
            && git::git(g, &plan.path, &["rev-parse", "--abbrev-ref", "HEAD"]).await? == plan.branch
        {
            self.created()
                .insert(delegation_id.to_owned(), plan.clone());
            tracing::debug!(path = %plan.path.display(), "worktree found again");
            return Ok(plan);
        }
        let base = git::git(g, repo, &["rev-parse", "HEAD"]).await?;
        if git::has_tracked_changes(g, repo).await?
            && !self.warned.swap(true, std::sync::atomic::Ordering::Relaxed)
        {
            tracing::warn!(
                repository = %repo.display(),
                commit = %base,
                "the main checkout at {} has uncommitted changes to tracked files; worktrees \
                 start from commit {} and do not see them (commit them for children to work \
                 on them)",
                repo.display(),
                short_commit(&base)
            );
        }
        if git::branch_exists(g, repo, &plan.branch).await? {
            return Err(CodingError::Repository(format!(
                "branch {} already exists",
                plan.branch
            )));
        }
        if plan.path.exists() {
            return Err(CodingError::Repository(format!(
                "{} already exists",
                plan.path.display()
            )));
        }
        ignore_root(self.config.worktree_roots.first()).await;
        if let Some(parent) = plan.path.parent() {
            tokio::fs::create_dir_all(parent)
                .await
                .map_err(|e| CodingError::Io(format!("cannot create {}: {e}", parent.display())))?;
        }
        let path = plan.path.to_string_lossy().into_owned();
        let mut half_made = HalfMade {
            trees: self,
            delegation_id,
            tree: Some(plan.clone()),
        };
        let added = {
            let _one_at_a_time = self.repo_lock().await;
            git::git(
                g,
                repo,
                &["worktree", "add", "-b", &plan.branch, &path, &base],
            )
            .await
        };
        // git finished: it made the worktree, or failed and undid what it did itself (the
        // branch could be a concurrent creator's: not ours to delete).
        half_made.tree = None;
        added?;
        self.created()
            .insert(delegation_id.to_owned(), plan.clone());
        tracing::info!(
            path = %plan.path.display(),
            branch = %plan.branch,
            commit = %base,
            "worktree created from commit {}",
            short_commit(&base)
        );
        Ok(plan)
    }

    /// A cleanup that failed for another reason than uncommitted work: the worktree stays
    /// this manager's, so a later cleanup can try again.
    fn put_back(&self, delegation_id: &str, tree: Worktree, e: CodingError) -> CodingError {
        self.created().insert(delegation_id.to_owned(), tree);
        self.pending()
            .insert(delegation_id.to_owned(), Pending::Removal);
        e
    }

    /// Tries again every cleanup that failed (see [`Worktrees::cleanup`]) and removes what
    /// abandoned creations left (a worktree and its new branch, no work of a child yet).
    /// Each comes back with what happened; what fails again stays for the next call. Every
    /// [`Worktrees::create`] runs it first; a host may also call it, at shutdown say.
    pub async fn retry_cleanup(&self) -> Vec<(String, CodingResult<Cleanup>)> {
        let pending: Vec<(String, Pending)> = self.pending().drain().collect();
        let mut done = Vec::with_capacity(pending.len());
        for (id, what) in pending {
            if let Pending::HalfMade(_) = what {
                self.pending().entry(id.clone()).or_insert(what);
            }
            let result = self.cleanup(&id).await;
            done.push((id, result));
        }
        done
    }

    /// Removes what an abandoned creation made: the worktree (by git, else its folder,
    /// which did not exist before), git's record of it, and its branch (new, so it holds no
    /// one's work).
    async fn remove_half_made(&self, tree: &Worktree) -> CodingResult<()> {
        let (g, repo) = (&self.config.git, &self.config.repository);
        let path = tree.path.to_string_lossy().into_owned();
        let _one_at_a_time = self.repo_lock().await;
        // Twice forced: a worktree git was killed while making is still locked.
        if git::git(
            g,
            repo,
            &["worktree", "remove", "--force", "--force", &path],
        )
        .await
        .is_err()
            && tree.path.exists()
        {
            tokio::fs::remove_dir_all(&tree.path).await.map_err(|e| {
                CodingError::Io(format!("cannot remove {}: {e}", tree.path.display()))
            })?;
        }
        git::git(g, repo, &["worktree", "prune"]).await?;
        if git::branch_exists(g, repo, &tree.branch).await? {
            git::git(g, repo, &["branch", "-D", &tree.branch]).await?;
        }
        tracing::debug!(path = %tree.path.display(), "abandoned worktree removed");
        Ok(())
    }

    /// Removes the worktree of `delegation_id` if this manager created it, exactly once;
    /// foreign or repeated calls do nothing. A worktree with uncommitted changes is kept
    /// (and forgotten, so it is reported once): the error says where it is. A removal that
    /// fails otherwise is remembered and tried again ([`Worktrees::retry_cleanup`]).
    pub async fn cleanup(&self, delegation_id: &str) -> CodingResult<Cleanup> {
        let pending = self.pending().remove(delegation_id);
        if let Some(Pending::HalfMade(tree)) = pending {
            // Its creation was abandoned: what it left goes now.
            return match self.remove_half_made(&tree).await {
                Ok(()) => Ok(Cleanup::Removed(tree)),
                Err(e) => {
                    self.pending()
                        .insert(delegation_id.to_owned(), Pending::HalfMade(tree));
                    Err(e)
                }
            };
        }
        let Some(tree) = self.created().remove(delegation_id) else {
            return Ok(Cleanup::NotOurs);
        };
        let g = &self.config.git;
        let kept = match git::is_dirty(g, &tree.path).await {
            // Uncommitted work, or commits that only a detached or switched HEAD holds
            // (removing the worktree would lose them): kept and reported, once.
            Ok(true) => true,
            Ok(false) => match git::on_branch(g, &tree.path, &tree.branch).await {
                Ok(on) => !on,
                Err(e) => return Err(self.put_back(delegation_id, tree, e)),
            },
            Err(e) => return Err(self.put_back(delegation_id, tree, e)),
        };
        if kept {
            return Err(CodingError::Dirty { path: tree.path });
        }
        let path = tree.path.to_string_lossy().into_owned();
        let removed = {
            let _one_at_a_time = self.repo_lock().await;
            git::git(g, &self.config.repository, &["worktree", "remove", &path]).await
        };
        if let Err(e) = removed {
            return Err(self.put_back(delegation_id, tree, e));
        }
        tracing::debug!(path = %tree.path.display(), "worktree removed");
        Ok(Cleanup::Removed(tree))
    }
}
