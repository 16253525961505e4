//! A child's work brought back (issue 41): its diff against the main checkout, a merge
//! (fast-forward, merge commit, squash) done once, a conflict returned file by file with the
//! checkout untouched, two children merged in turn onto a moving base, a merge cut off half
//! way undone and run again (never twice), a symbolic link in a child's change that writes
//! nothing outside the checkout, and a discard.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::path::Path;

use arbor_coding::{Merged, Strategy, WorkspaceConfig, Worktrees};
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

/// The child `id` writes `files` in its worktree and commits them.
async fn child_commits(trees: &Worktrees, id: &str, files: &[(&str, &str)]) -> String {
    let tree = trees.create(id).await.unwrap();
    for (path, text) in files {
        std::fs::write(tree.path.join(path), text).unwrap();
    }
    git(&tree.path, &["add", "."]);
    git(&tree.path, &["commit", "-q", "-m", &format!("{id}'s work")]);
    git(&tree.path, &["rev-parse", "HEAD"])
}

fn main_repo(dir: &tempfile::TempDir) -> std::path::PathBuf {
    dir.path().join("repo")
}

fn head(repo: &Path) -> String {
    git(repo, &["rev-parse", "HEAD"])
}

#[tokio::test]
async fn a_childs_diff_lists_its_files_and_pages_its_patch() {
    let (dir, trees) = setup();
    child_commits(
        &trees,
        "d1",
        &[("a.txt", "alpha\nmore\n"), ("c.txt", "gamma\n")],
    )
    .await;
    let diff = trees.diff("d1", 0, 1 << 20).await.unwrap();
    assert_eq!(diff.branch, "agent/d1");
    let files: Vec<_> = diff
        .files
        .iter()
        .map(|f| (f.path.as_str(), f.added, f.removed))
        .collect();
    assert_eq!(
        files,
        [("a.txt", Some(1), Some(0)), ("c.txt", Some(1), Some(0))]
    );
    assert!(diff.patch.contains("+gamma"), "{}", diff.patch);
    assert_eq!(diff.next_offset, None);
    // Paged: the pages put back together are the patch.
    let mut whole = String::new();
    let mut offset = Some(0);
    while let Some(at) = offset {
        let page = trees.diff("d1", at, 64).await.unwrap();
        assert!(page.patch.len() <= 64, "{}", page.patch.len());
        whole.push_str(&page.patch);
        offset = page.next_offset;
    }
    assert_eq!(whole, diff.patch);
    assert_eq!(diff.total_bytes, diff.patch.len());
    // Nothing was touched.
    assert_eq!(git(&main_repo(&dir), &["status", "--porcelain"]), "");
    let e = trees.diff("nobody", 0, 100).await.unwrap_err();
    assert!(e.to_string().contains("no branch agent/nobody"), "{e}");
}

#[tokio::test]
async fn each_strategy_merges_once() {
    for strategy in [Strategy::FastForward, Strategy::Merge, Strategy::Squash] {
        let (dir, trees) = setup();
        let repo = main_repo(&dir);
        let tip = child_commits(&trees, "m1", &[("c.txt", "gamma\n")]).await;
        let before = head(&repo);
        let done = trees.merge("m1", strategy).await.unwrap();
        let Merged::Done { commit, files, .. } = done else {
            panic!("{strategy:?}: {done:?}");
        };
        assert_eq!(commit, head(&repo));
        assert_eq!(files.len(), 1);
        assert_eq!(
            std::fs::read_to_string(repo.join("c.txt")).unwrap(),
            "gamma\n"
        );
        let parents = git(&repo, &["rev-list", "--parents", "-n", "1", "HEAD"]);
        match strategy {
            Strategy::FastForward => assert_eq!(commit, tip),
            Strategy::Merge => assert_eq!(parents.split(' ').count(), 3, "{parents}"),
            _ => {
                assert_eq!(parents, format!("{commit} {before}"));
                let message = git(&repo, &["log", "-1", "--format=%B"]);
                assert!(
                    message.contains(&format!("Arbor-Merged: agent/m1 {tip}")),
                    "{message}"
                );
            }
        }
        // Again: recognised, nothing changes.
        let again = trees.merge("m1", strategy).await.unwrap();
        assert_eq!(
            again,
            Merged::AlreadyMerged {
                commit: commit.clone()
            },
            "{strategy:?}"
        );
        assert_eq!(head(&repo), commit);
    }
}

#[tokio::test]
async fn a_conflict_comes_back_by_file_and_leaves_the_checkout_untouched() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "c1", &[("a.txt", "alpha from the child\n")]).await;
    std::fs::write(repo.join("a.txt"), "alpha from main\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "main moves"]);
    let before = head(&repo);
    let out = trees.merge("c1", Strategy::Merge).await.unwrap();
    let Merged::Conflicts(conflicts) = out else {
        panic!("{out:?}");
    };
    assert_eq!(conflicts.len(), 1);
    assert_eq!(conflicts[0].path, "a.txt");
    assert!(
        conflicts[0].hunks.starts_with("<<<<<<<"),
        "{}",
        conflicts[0].hunks
    );
    assert!(conflicts[0].hunks.contains("alpha from main"));
    assert!(conflicts[0].hunks.contains("alpha from the child"));
    assert_eq!(head(&repo), before);
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(!repo.join(".git/MERGE_HEAD").exists());
}

#[tokio::test]
async fn two_children_merge_in_turn_onto_a_moving_base() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "one", &[("one.txt", "1\n")]).await;
    child_commits(&trees, "two", &[("two.txt", "2\n")]).await;
    assert!(matches!(
        trees.merge("one", Strategy::Merge).await.unwrap(),
        Merged::Done { .. }
    ));
    // The base moved: the second child's diff still shows only its own change.
    let diff = trees.diff("two", 0, 1 << 20).await.unwrap();
    let paths: Vec<_> = diff.files.iter().map(|f| f.path.as_str()).collect();
    assert_eq!(paths, ["two.txt"]);
    // Not a fast-forward any more.
    assert!(trees.merge("two", Strategy::FastForward).await.is_err());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(matches!(
        trees.merge("two", Strategy::Merge).await.unwrap(),
        Merged::Done { .. }
    ));
    assert!(repo.join("one.txt").exists() && repo.join("two.txt").exists());
}

#[tokio::test]
async fn a_merge_cut_off_half_way_is_undone_and_run_again_once() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "k1", &[("c.txt", "gamma\n")]).await;
    let before = head(&repo);
    // A crash mid-merge: the marker written, a merge in progress not committed.
    std::fs::write(
        repo.join(".git/arbor-merge"),
        format!("agent/k1 {before}\n"),
    )
    .unwrap();
    git(&repo, &["merge", "--no-ff", "--no-commit", "agent/k1"]);
    assert!(repo.join(".git/MERGE_HEAD").exists());
    let done = trees.merge("k1", Strategy::Merge).await.unwrap();
    assert!(matches!(done, Merged::Done { .. }), "{done:?}");
    let merges = git(&repo, &["rev-list", "--merges", "--count", "HEAD"]);
    assert_eq!(merges, "1", "merged once");
    assert!(!repo.join(".git/arbor-merge").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // A crash after the merge committed but before its marker went: found done.
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "k2", &[("c.txt", "gamma\n")]).await;
    let before = head(&repo);
    std::fs::write(
        repo.join(".git/arbor-merge"),
        format!("agent/k2 {before}\n"),
    )
    .unwrap();
    git(
        &repo,
        &["merge", "--no-ff", "-q", "-m", "Merge agent/k2", "agent/k2"],
    );
    let merged_at = head(&repo);
    let out = trees.merge("k2", Strategy::Merge).await.unwrap();
    assert_eq!(out, Merged::AlreadyMerged { commit: merged_at });
    assert!(!repo.join(".git/arbor-merge").exists());
}

#[tokio::test]
async fn a_dirty_checkout_is_refused_and_a_symlink_writes_nothing_outside() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    // A symbolic link to a folder outside the checkout, committed by the child.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    let tree = trees.create("s1").await.unwrap();
    std::os::unix::fs::symlink(&outside, tree.path.join("out")).unwrap();
    git(&tree.path, &["add", "out"]);
    git(&tree.path, &["commit", "-q", "-m", "a link"]);
    std::fs::write(repo.join("a.txt"), "edited, not committed\n").unwrap();
    let e = trees.merge("s1", Strategy::Merge).await.unwrap_err();
    assert!(e.to_string().contains("uncommitted changes"), "{e}");
    git(&repo, &["checkout", "--", "a.txt"]);
    assert!(matches!(
        trees.merge("s1", Strategy::Squash).await.unwrap(),
        Merged::Done { .. }
    ));
    let link = repo.join("out");
    assert!(link.symlink_metadata().unwrap().file_type().is_symlink());
    assert_eq!(
        std::fs::read_dir(&outside).unwrap().count(),
        0,
        "nothing written outside"
    );
}

#[tokio::test]
async fn a_discard_removes_the_branch_and_any_worktree_left() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "x1", &[("c.txt", "gamma\n")]).await;
    let out = trees.discard("x1").await.unwrap();
    assert_eq!(out.branch.as_deref(), Some("agent/x1"));
    assert!(out.worktree.is_some());
    assert_eq!(git(&repo, &["branch", "--list", "agent/x1"]), "");
    let again = trees.discard("x1").await.unwrap();
    assert_eq!((again.branch, again.worktree), (None, None));
    let e = trees.merge("x1", Strategy::Merge).await.unwrap_err();
    assert!(e.to_string().contains("no branch agent/x1"), "{e}");
}
