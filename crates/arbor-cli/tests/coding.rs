//! examples/coding-loop.toml end to end: two children edit a small repository in parallel,
//! each in its own worktree; afterwards both branches hold the edits, the worktrees are gone
//! and the main checkout is untouched.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

use serde_json::Value;

const EXAMPLE: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../examples/coding-loop.toml"
);

#[allow(dead_code)]
mod git_support;
use git_support::{git, init_repo};

/// The test repository: a.txt and b.txt, on `main`.
fn repo(dir: &Path) {
    init_repo(
        dir,
        &[("a.txt", "hello from a\n"), ("b.txt", "hello from b\n")],
    );
}

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

#[test]
fn the_coding_loop_leaves_two_branches_and_an_untouched_checkout() {
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    let head = git(&repo_dir, &["rev-parse", "HEAD"]);
    let run = arbor(
        work.path(),
        &[
            "run",
            EXAMPLE,
            "--repository",
            repo_dir.to_str().unwrap(),
            "--json",
            "-q",
        ],
    );
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    assert_eq!(report["status"], "succeeded");
    assert_eq!(
        report["result"]["text"],
        "Both edits are committed, each on its own branch."
    );

    let branches = git(
        &repo_dir,
        &["branch", "--list", "agent/*", "--format=%(refname:short)"],
    );
    let branches: Vec<&str> = branches.lines().collect();
    assert_eq!(branches.len(), 2, "{branches:?}");
    let mut edits: Vec<String> = branches
        .iter()
        .map(|b| {
            let changed = git(&repo_dir, &["diff", "--name-only", &head, b]);
            let text = git(&repo_dir, &["show", &format!("{b}:{changed}")]);
            format!("{changed}: {text}")
        })
        .collect();
    edits.sort();
    assert_eq!(edits, ["a.txt: Hello from a", "b.txt: Hello from b"]);
    // The worktrees are gone; the main checkout is as it was.
    assert_eq!(git(&repo_dir, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(&repo_dir, &["rev-parse", "HEAD"]), head);
    assert_eq!(git(&repo_dir, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("a.txt")).unwrap(),
        "hello from a\n"
    );
    let left: Vec<_> = std::fs::read_dir(work.path().join(".arbor/worktrees/demo"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[test]
fn a_missing_or_bad_repository_is_a_clear_error() {
    let work = tempfile::tempdir().unwrap();
    let out = arbor(work.path(), &["run", EXAMPLE, "--memory"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("[workspace] names no repository: set repository or pass --repository"),
        "{err}"
    );
    // Not a git repository: each child fails with the reason; nothing is made.
    let plain = work.path().join("plain");
    std::fs::create_dir(&plain).unwrap();
    let out = arbor(
        work.path(),
        &[
            "run",
            EXAMPLE,
            "--repository",
            plain.to_str().unwrap(),
            "--memory",
        ],
    );
    let err = String::from_utf8_lossy(&out.stderr);
    let failed = format!("child failed: {} is not a git repository", plain.display());
    assert_eq!(err.matches(&failed).count(), 2, "{err}");
    assert!(!work.path().join(".arbor/worktrees/demo").exists());
}

#[test]
fn run_from_inside_the_repository_arbors_directory_never_dirties_it() {
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    let head = git(&repo_dir, &["rev-parse", "HEAD"]);
    // Untracked files are no obstacle: a worktree starts from a commit.
    std::fs::write(repo_dir.join("notes.txt"), "mine\n").unwrap();
    let run = arbor(&repo_dir, &["run", EXAMPLE, "--repository", ".", "--json"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    assert!(!err.contains("child failed"), "{err}");
    assert!(!err.contains("uncommitted"), "{err}");
    let report: Value = serde_json::from_slice(&run.stdout).unwrap();
    let done = report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["depth"] == 1 && s["status"] == "succeeded")
        .count();
    assert_eq!(done, 2, "{report}");
    // arbor's own directory (store and worktrees) ignores itself.
    assert_eq!(
        std::fs::read_to_string(repo_dir.join(".arbor/.gitignore")).unwrap(),
        "*\n"
    );
    assert_eq!(git(&repo_dir, &["status", "--porcelain"]), "?? notes.txt");

    // Uncommitted changes to a tracked file: the children work from the commit, and the run
    // says so once (two children, one warning), naming the commit.
    std::fs::write(repo_dir.join("a.txt"), "edited, not committed\n").unwrap();
    let run = arbor(&repo_dir, &["run", EXAMPLE, "--repository", ".", "-q"]);
    let err = String::from_utf8_lossy(&run.stderr);
    assert!(run.status.success(), "{err}");
    let warning = format!(
        "has uncommitted changes to tracked files; worktrees start from commit {} and do not \
         see them",
        &head[..12]
    );
    assert_eq!(err.matches(&warning).count(), 1, "{err}");
    let branches = git(
        &repo_dir,
        &["branch", "--list", "agent/*", "--format=%(refname:short)"],
    );
    assert_eq!(branches.lines().count(), 4, "{branches}");
}
