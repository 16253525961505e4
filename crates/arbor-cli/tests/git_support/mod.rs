//! The coding tests' git: a command in a repository (its output, trimmed, or the test fails
//! with git's error), and a fresh repository on `main` with one commit of the given files.

use std::path::Path;
use std::process::Command;

/// `git -C DIR ARGS`, which must succeed: its stdout, trimmed.
pub(crate) fn git(dir: &Path, args: &[&str]) -> String {
    let out = Command::new("git")
        .arg("-C")
        .arg(dir)
        .args(args)
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "git {args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// A new repository at `dir` on branch `main`, whose one commit (`init`) holds `files`.
pub(crate) fn init_repo(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    git(dir, &["init", "-q", "-b", "main"]);
    for (name, text) in files {
        std::fs::write(dir.join(name), text).unwrap();
    }
    git(dir, &["add", "."]);
    git(
        dir,
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@example.invalid",
            "commit",
            "-q",
            "-m",
            "init",
        ],
    );
}
