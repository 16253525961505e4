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

/// Writes the marker a merge of `branch`'s tip writes before git starts.
fn marker(repo: &Path, branch: &str, start: &str) {
    let tip = git(repo, &["rev-parse", branch]);
    std::fs::write(
        repo.join(".git/arbor-merge"),
        format!("refs/heads/main {start} {tip}\n"),
    )
    .unwrap();
}

#[tokio::test]
async fn a_merge_cut_off_half_way_is_undone_and_run_again_once() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "k1", &[("c.txt", "gamma\n")]).await;
    let before = head(&repo);
    // A crash mid-merge: the marker written, a merge in progress not committed.
    marker(&repo, "agent/k1", &before);
    git(&repo, &["merge", "--no-ff", "--no-commit", "agent/k1"]);
    assert!(repo.join(".git/MERGE_HEAD").exists());
    let done = trees.merge("k1", Strategy::Merge).await.unwrap();
    assert!(matches!(done, Merged::Done { .. }), "{done:?}");
    let merges = git(&repo, &["rev-list", "--merges", "--count", "HEAD"]);
    assert_eq!(merges, "1", "merged once");
    assert!(!repo.join(".git/arbor-merge").exists());
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // A crash mid-squash: the change staged, nothing committed.
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "k3", &[("c.txt", "gamma\n")]).await;
    let before = head(&repo);
    marker(&repo, "agent/k3", &before);
    git(&repo, &["merge", "--squash", "agent/k3"]);
    let done = trees.merge("k3", Strategy::Squash).await.unwrap();
    assert!(matches!(done, Merged::Done { .. }), "{done:?}");
    assert_eq!(
        git(&repo, &["rev-list", "--count", &format!("{before}..HEAD")]),
        "1"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");

    // A crash after the merge committed but before its marker went: found done.
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "k2", &[("c.txt", "gamma\n")]).await;
    let before = head(&repo);
    marker(&repo, "agent/k2", &before);
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
async fn a_marker_found_after_the_checkout_moved_is_left_alone_and_reported() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    child_commits(&trees, "u1", &[("c.txt", "gamma\n")]).await;
    let before = head(&repo);
    marker(&repo, "agent/u1", &before);
    // The person committed since: nothing of theirs may be reset.
    std::fs::write(repo.join("a.txt"), "the person's work\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "mine"]);
    let theirs = head(&repo);
    let e = trees.merge("u1", Strategy::Merge).await.unwrap_err();
    assert!(e.to_string().contains("resolve it by hand"), "{e}");
    assert!(e.to_string().contains("arbor-merge"), "{e}");
    assert_eq!(head(&repo), theirs);
    assert!(repo.join(".git/arbor-merge").exists());
    // Nor is the branch discarded while the marker names it.
    let e = trees.discard("u1").await.unwrap_err();
    assert!(e.to_string().contains("was cut off"), "{e}");
}

#[tokio::test]
async fn new_commits_after_a_squash_merge_again_and_the_users_config_changes_nothing() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    // Settings that would stop a merge half way or refuse a squash.
    git(&repo, &["config", "merge.ff", "false"]);
    git(
        &repo,
        &["config", "branch.main.mergeOptions", "--no-commit"],
    );
    child_commits(&trees, "q1", &[("c.txt", "gamma\n")]).await;
    assert!(matches!(
        trees.merge("q1", Strategy::Squash).await.unwrap(),
        Merged::Done { .. }
    ));
    // The child goes on: its new commit is not "already merged".
    let tree = trees.create("q1").await.unwrap();
    std::fs::write(tree.path.join("d.txt"), "delta\n").unwrap();
    git(&tree.path, &["add", "."]);
    git(&tree.path, &["commit", "-q", "-m", "more"]);
    let again = trees.merge("q1", Strategy::Merge).await.unwrap();
    assert!(matches!(again, Merged::Done { .. }), "{again:?}");
    assert_eq!(
        std::fs::read_to_string(repo.join("d.txt")).unwrap(),
        "delta\n"
    );
    assert_eq!(git(&repo, &["status", "--porcelain"]), "");
    assert!(!repo.join(".git/MERGE_HEAD").exists());
}

#[tokio::test]
async fn uncommitted_child_work_and_a_detached_head_are_refused() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    let tree = trees.create("w1").await.unwrap();
    std::fs::write(tree.path.join("a.txt"), "not committed\n").unwrap();
    let e = trees.merge("w1", Strategy::Merge).await.unwrap_err();
    assert!(e.to_string().contains("uncommitted changes"), "{e}");
    git(&tree.path, &["commit", "-q", "-am", "now committed"]);
    git(&repo, &["checkout", "-q", "--detach"]);
    let e = trees.merge("w1", Strategy::Merge).await.unwrap_err();
    assert!(e.to_string().contains("detached"), "{e}");
}

#[tokio::test]
async fn a_conflict_on_a_non_ascii_path_is_named_as_it_is() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    std::fs::write(repo.join("é.txt"), "base\n").unwrap();
    git(&repo, &["add", "."]);
    git(&repo, &["commit", "-q", "-m", "é"]);
    child_commits(&trees, "n1", &[("é.txt", "child\n")]).await;
    std::fs::write(repo.join("é.txt"), "main\n").unwrap();
    git(&repo, &["commit", "-q", "-am", "main"]);
    let Merged::Conflicts(c) = trees.merge("n1", Strategy::Merge).await.unwrap() else {
        panic!("no conflict");
    };
    assert_eq!(c[0].path, "é.txt");
    assert!(
        c[0].hunks.contains("child") && c[0].hunks.contains("main"),
        "{}",
        c[0].hunks
    );
    let diff = trees.diff("n1", 0, 1 << 20).await.unwrap();
    assert_eq!(diff.files[0].path, "é.txt");
}

#[tokio::test]
async fn a_dirty_checkout_is_refused_and_a_symlink_writes_nothing_outside() {
    let (dir, trees) = setup();
    let repo = main_repo(&dir);
    // The main checkout holds a link `out` to a folder outside it; the child replaces the
    // link with a folder holding a file: a merge that followed the link would write there.
    let outside = dir.path().join("outside");
    std::fs::create_dir(&outside).unwrap();
    std::os::unix::fs::symlink(&outside, repo.join("out")).unwrap();
    git(&repo, &["add", "out"]);
    git(&repo, &["commit", "-q", "-m", "a link"]);
    let tree = trees.create("s1").await.unwrap();
    std::fs::remove_file(tree.path.join("out")).unwrap();
    std::fs::create_dir(tree.path.join("out")).unwrap();
    std::fs::write(tree.path.join("out/x.txt"), "through the link?\n").unwrap();
    git(&tree.path, &["add", "-A"]);
    git(
        &tree.path,
        &["commit", "-q", "-m", "a folder where the link was"],
    );
    std::fs::write(repo.join("a.txt"), "edited, not committed\n").unwrap();
    let e = trees.merge("s1", Strategy::Merge).await.unwrap_err();
    assert!(e.to_string().contains("uncommitted changes"), "{e}");
    git(&repo, &["checkout", "--", "a.txt"]);
    let out = trees.merge("s1", Strategy::Squash).await.unwrap();
    assert!(matches!(out, Merged::Done { .. }), "{out:?}");
    assert!(repo.join("out").symlink_metadata().unwrap().is_dir());
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
