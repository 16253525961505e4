//! Worktrees: created per delegation, removed once, kept when dirty, found again on resume;
//! and the bad inputs, each refused with nothing leaked.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use arbor_coding::{Cleanup, CodingErrorKind, WorkspaceConfig, Worktrees};
use common::{git, repo};

fn setup() -> (tempfile::TempDir, Worktrees) {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("repo"));
    let trees = Worktrees::new(
        WorkspaceConfig::new(dir.path().join("repo"), "demo")
            .worktree_root(dir.path().join("trees")),
    );
    (dir, trees)
}

#[tokio::test]
async fn a_worktree_starts_from_the_commit_whatever_the_main_checkout_holds() {
    let (dir, trees) = setup();
    let repo = dir.path().join("repo");
    // Untracked files and uncommitted changes to tracked ones: neither blocks, neither is
    // in the worktree.
    std::fs::write(repo.join("mine.txt"), "untracked\n").unwrap();
    std::fs::write(repo.join("a.txt"), "changed\n").unwrap();
    let t = trees.create("d1").await.unwrap();
    assert_eq!(
        std::fs::read_to_string(t.path.join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert!(!t.path.join("mine.txt").exists());
    assert_eq!(
        git(&t.path, &["rev-parse", "HEAD"]),
        git(&repo, &["rev-parse", "HEAD"])
    );
    // The worktree root ignores itself.
    assert_eq!(
        std::fs::read_to_string(dir.path().join("trees/.gitignore")).unwrap(),
        "*\n"
    );
    assert_eq!(trees.cleanup("d1").await.unwrap(), Cleanup::Removed(t));

    // A root that exists already is the host's: no .gitignore is put into it.
    let own = dir.path().join("mine");
    std::fs::create_dir(&own).unwrap();
    let trees = Worktrees::new(WorkspaceConfig::new(&repo, "demo").worktree_root(&own));
    let t = trees.create("d2").await.unwrap();
    assert!(!own.join(".gitignore").exists());
    assert_eq!(trees.cleanup("d2").await.unwrap(), Cleanup::Removed(t));
}

#[tokio::test]
async fn a_worktree_per_delegation_removed_exactly_once() {
    let (dir, trees) = setup();
    let t = trees.create("d1").await.unwrap();
    assert_eq!(t.path, dir.path().join("trees/demo/d1"));
    assert_eq!(t.branch, "agent/d1");
    assert_eq!(
        std::fs::read_to_string(t.path.join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert_eq!(
        git(&t.path, &["rev-parse", "--abbrev-ref", "HEAD"]),
        "agent/d1"
    );
    // Work committed on the branch survives the cleanup.
    std::fs::write(t.path.join("a.txt"), "ALPHA\n").unwrap();
    git(&t.path, &["commit", "-q", "-am", "edit"]);

    assert_eq!(trees.cleanup("other").await.unwrap(), Cleanup::NotOurs);
    assert_eq!(
        trees.cleanup("d1").await.unwrap(),
        Cleanup::Removed(t.clone())
    );
    assert!(!t.path.exists());
    assert_eq!(trees.cleanup("d1").await.unwrap(), Cleanup::NotOurs, "once");
    let repo = dir.path().join("repo");
    assert_eq!(git(&repo, &["show", "agent/d1:a.txt"]), "ALPHA");
    assert_eq!(
        std::fs::read_to_string(repo.join("a.txt")).unwrap(),
        "alpha\n"
    );
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}

#[tokio::test]
async fn a_dirty_worktree_is_kept_and_reported_once() {
    let (_dir, trees) = setup();
    let t = trees.create("d2").await.unwrap();
    std::fs::write(t.path.join("new.txt"), "unsaved work").unwrap();
    let e = trees.cleanup("d2").await.unwrap_err();
    assert_eq!(e.kind(), CodingErrorKind::Dirty);
    assert_eq!(
        e.to_string(),
        format!(
            "worktree {} has uncommitted changes: kept for review",
            t.path.display()
        )
    );
    assert!(t.path.join("new.txt").exists());
    assert_eq!(trees.cleanup("d2").await.unwrap(), Cleanup::NotOurs);
}

#[tokio::test]
async fn commits_off_the_branch_keep_the_worktree() {
    let (_dir, trees) = setup();
    let t = trees.create("d4").await.unwrap();
    // The child detaches HEAD and commits: removing the worktree would lose the commit.
    git(&t.path, &["checkout", "-q", "--detach"]);
    std::fs::write(t.path.join("a.txt"), "detached work\n").unwrap();
    git(&t.path, &["commit", "-q", "-am", "off the branch"]);
    let e = trees.cleanup("d4").await.unwrap_err();
    assert_eq!(e.kind(), CodingErrorKind::Dirty);
    assert!(t.path.join("a.txt").exists());
}

#[tokio::test]
async fn a_resume_finds_the_same_worktree_again() {
    let (dir, trees) = setup();
    let first = trees.create("d3").await.unwrap();
    std::fs::write(first.path.join("b.txt"), "half done\n").unwrap();
    // Another process (a restart) resumes the same delegation.
    let again = Worktrees::new(
        WorkspaceConfig::new(dir.path().join("repo"), "demo")
            .worktree_root(dir.path().join("trees")),
    );
    let second = again.create("d3").await.unwrap();
    assert_eq!(second, first);
    assert_eq!(
        std::fs::read_to_string(second.path.join("b.txt")).unwrap(),
        "half done\n",
        "the work in progress is there"
    );
    // It is the new process's to clean up now (dirty: kept).
    assert_eq!(
        again.cleanup("d3").await.unwrap_err().kind(),
        CodingErrorKind::Dirty
    );
}

#[tokio::test]
async fn bad_inputs_are_refused_before_anything_is_made() {
    let dir = tempfile::tempdir().unwrap();
    repo(&dir.path().join("repo"));
    let repo_path = dir.path().join("repo");

    // No allow-listed root: refused before git runs (the repository is not even checked).
    let none = Worktrees::new(WorkspaceConfig::new(dir.path().join("nowhere"), "demo"));
    let e = none.create("d").await.unwrap_err();
    assert_eq!(e.kind(), CodingErrorKind::Config);
    assert_eq!(
        e.to_string(),
        "no worktree root is allow-listed: configure one before delegating"
    );

    let trees = |repo: &std::path::Path| {
        Worktrees::new(WorkspaceConfig::new(repo, "demo").worktree_root(dir.path().join("trees")))
    };
    // Not a repository.
    let plain = dir.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let e = trees(&plain).create("d").await.unwrap_err();
    assert_eq!(e.kind(), CodingErrorKind::Repository);
    assert_eq!(
        e.to_string(),
        format!("{} is not a git repository", plain.display())
    );

    // A branch that exists already.
    git(&repo_path, &["branch", "agent/taken"]);
    let e = trees(&repo_path).create("taken").await.unwrap_err();
    assert_eq!(e.to_string(), "branch agent/taken already exists");

    // git missing.
    let nogit = Worktrees::new(
        WorkspaceConfig::new(&repo_path, "demo")
            .worktree_root(dir.path().join("trees"))
            .git_program(dir.path().join("no-such-git")),
    );
    let e = nogit.create("d").await.unwrap_err();
    assert_eq!(e.kind(), CodingErrorKind::Git);
    assert_eq!(e.to_string(), "git is not installed (or not on PATH)");

    // Delegation ids that cannot name a folder or a branch.
    for bad in ["../up", ".hidden", "a..b", "x.lock"] {
        let e = trees(&repo_path).create(bad).await.unwrap_err();
        assert_eq!(e.kind(), CodingErrorKind::Config, "{bad}");
    }

    // Nothing leaked: no worktree, no branch but the one made by hand.
    assert!(!dir.path().join("trees").join("demo").exists());
    assert_eq!(git(&repo_path, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(
        git(&repo_path, &["branch", "--list", "agent/*"]),
        "agent/taken"
    );
}

#[tokio::test]
async fn a_failed_cleanup_is_retried_at_the_next_opportunity() {
    let (dir, trees) = setup();
    let repo = dir.path().join("repo");
    let t1 = trees.create("d1").await.unwrap();
    let path1 = t1.path.to_str().unwrap();
    // A locked worktree cannot be removed: the cleanup fails, and is remembered.
    git(&repo, &["worktree", "lock", path1]);
    let e = trees.cleanup("d1").await.unwrap_err();
    assert_eq!(e.kind(), CodingErrorKind::Git);
    assert!(
        e.to_string()
            .starts_with(&format!("git worktree remove {path1} failed: ")),
        "{e}"
    );
    // Still failing: reported again, still remembered.
    let again = trees.retry_cleanup().await;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].0, "d1");
    assert_eq!(
        again[0].1.as_ref().unwrap_err().kind(),
        CodingErrorKind::Git
    );
    assert!(t1.path.exists());

    // Once it can go, the next creation takes it with it.
    git(&repo, &["worktree", "unlock", path1]);
    let t2 = trees.create("d2").await.unwrap();
    assert!(!t1.path.exists(), "the failed cleanup was retried");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 2);
    assert!(
        trees.retry_cleanup().await.is_empty(),
        "nothing left to retry"
    );

    // Or an explicit retry does.
    let path2 = t2.path.to_str().unwrap();
    git(&repo, &["worktree", "lock", path2]);
    assert!(trees.cleanup("d2").await.is_err());
    git(&repo, &["worktree", "unlock", path2]);
    let done = trees.retry_cleanup().await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, "d2");
    assert_eq!(done[0].1.as_ref().unwrap(), &Cleanup::Removed(t2.clone()));
    assert!(!t2.path.exists());
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(trees.cleanup("d2").await.unwrap(), Cleanup::NotOurs);
}

/// A git that, while `marker` exists, holds on after `git worktree add` has made the
/// worktree: a creation dropped then is abandoned half-way.
#[cfg(unix)]
fn slow_git(dir: &std::path::Path, marker: &std::path::Path) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let script = dir.join("slow-git");
    std::fs::write(
        &script,
        format!(
            "#!/bin/sh\ngit \"$@\" || exit $?\ncase \"$*\" in *\"worktree add\"*) \
             [ -e '{}' ] && exec sleep 30 ;; esac\nexit 0\n",
            marker.display()
        ),
    )
    .unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    script
}

#[cfg(unix)]
#[tokio::test]
async fn a_creation_dropped_half_way_leaves_nothing_behind() {
    let dir = tempfile::tempdir().unwrap();
    let repo_path = dir.path().join("repo");
    repo(&repo_path);
    let marker = dir.path().join("hold");
    std::fs::write(&marker, "").unwrap();
    let trees = Worktrees::new(
        WorkspaceConfig::new(&repo_path, "demo")
            .worktree_root(dir.path().join("trees"))
            .git_program(slow_git(dir.path(), &marker)),
    );
    let plan = trees.plan("d1").unwrap();
    let dropped = tokio::time::timeout(std::time::Duration::from_secs(2), trees.create("d1")).await;
    assert!(dropped.is_err(), "{dropped:?}");
    // git made it before the creation was dropped.
    assert!(plan.path.exists());
    assert_eq!(
        git(&repo_path, &["branch", "--list", "agent/*"]),
        "+ agent/d1",
        "checked out in the worktree"
    );

    // The next cleanup removes it, branch included (it holds no one's work).
    let done = trees.retry_cleanup().await;
    assert_eq!(done.len(), 1);
    assert_eq!(done[0].0, "d1");
    assert_eq!(done[0].1.as_ref().unwrap(), &Cleanup::Removed(plan.clone()));
    assert!(!plan.path.exists());
    assert_eq!(git(&repo_path, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(&repo_path, &["branch", "--list", "agent/*"]), "");

    // Abandoned again, then the next creation (of the same delegation) cleans up first.
    let dropped = tokio::time::timeout(std::time::Duration::from_secs(2), trees.create("d1")).await;
    assert!(dropped.is_err());
    std::fs::remove_file(&marker).unwrap();
    let made = trees.create("d1").await.unwrap();
    assert_eq!(made, plan);
    assert_eq!(git(&repo_path, &["worktree", "list"]).lines().count(), 2);
    assert_eq!(trees.cleanup("d1").await.unwrap(), Cleanup::Removed(plan));
    assert_eq!(git(&repo_path, &["worktree", "list"]).lines().count(), 1);
}

/// git does not lock the repository's list of worktrees: two `worktree add` at once fail
/// ("failed to read .git/worktrees/<other>/commondir") while the other is half made. Twelve
/// children of one tree start at once here, on threads of their own; every one gets its
/// worktree, and every cleanup removes one.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn worktrees_made_and_removed_at_once_all_succeed() {
    let (dir, trees) = setup();
    let trees = std::sync::Arc::new(trees);
    let ids: Vec<String> = (0..12).map(|i| format!("d{i}")).collect();
    let made: Vec<_> = ids
        .iter()
        .map(|id| {
            let (trees, id) = (trees.clone(), id.clone());
            tokio::spawn(async move { trees.create(&id).await })
        })
        .collect();
    for (id, m) in ids.iter().zip(made) {
        let t = m.await.unwrap();
        assert!(t.is_ok(), "{id}: {t:?}");
    }
    let repo = dir.path().join("repo");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 13);
    let removed: Vec<_> = ids
        .iter()
        .map(|id| {
            let (trees, id) = (trees.clone(), id.clone());
            tokio::spawn(async move { trees.cleanup(&id).await })
        })
        .collect();
    for (id, r) in ids.iter().zip(removed) {
        let r = r.await.unwrap();
        assert!(matches!(r, Ok(Cleanup::Removed(_))), "{id}: {r:?}");
    }
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
}
