//! The coding tools stay inside their worktree and bound what they return.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use arbor_coding::{Workdir, WorkspaceConfig, Worktrees, coding_tool};
use arbor_core::{SessionRef, ToolContext, ToolError};
use arbor_protocol::RunId;
use serde_json::{Value, json};

fn ctx() -> ToolContext {
    let record = arbor_store::SessionRecord::new_root("s", "coder", "scripted");
    ToolContext::new("coder", SessionRef::from(&record), RunId::new(), "c1")
}

async fn call(dir: &Workdir, tool: &str, args: Value) -> Result<String, ToolError> {
    coding_tool(dir, tool).unwrap().call_json(args, ctx()).await
}

fn model_error(r: Result<String, ToolError>) -> String {
    match r {
        Err(ToolError::ToModel(m)) => m,
        other => panic!("expected a tool error, got {other:?}"),
    }
}

#[tokio::test]
async fn files_are_read_written_listed_and_edited_inside_the_worktree() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let out = call(
        &dir,
        "write_file",
        json!({"path": "src/lib.rs", "content": "fn a() {}\n"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "wrote src/lib.rs (10 bytes)");
    assert_eq!(
        call(&dir, "read_file", json!({"path": "src/lib.rs"}))
            .await
            .unwrap(),
        "fn a() {}\n"
    );
    let out = call(
        &dir,
        "edit_file",
        json!({"path": "src/lib.rs", "old": "a()", "new": "b()"}),
    )
    .await
    .unwrap();
    assert_eq!(out, "edited src/lib.rs");
    assert_eq!(
        std::fs::read_to_string(tmp.path().join("src/lib.rs")).unwrap(),
        "fn b() {}\n"
    );
    // The edit must name one exact occurrence.
    let e = model_error(
        call(
            &dir,
            "edit_file",
            json!({"path": "src/lib.rs", "old": "zzz", "new": "y"}),
        )
        .await,
    );
    assert_eq!(
        e,
        "`old` occurs 0 times in src/lib.rs; it must occur exactly once"
    );
    std::fs::write(tmp.path().join("README"), "x").unwrap();
    assert_eq!(
        call(&dir, "list_dir", json!({})).await.unwrap(),
        "README\nsrc/"
    );
    assert_eq!(
        call(&dir, "list_dir", json!({"path": "src"}))
            .await
            .unwrap(),
        "lib.rs"
    );
    // Strict arguments.
    let e = model_error(call(&dir, "read_file", json!({"path": "x", "mode": "raw"})).await);
    assert!(e.contains("unknown field `mode`"), "{e}");
}

#[tokio::test]
async fn paths_that_escape_are_refused_and_nothing_outside_is_touched() {
    let tmp = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret"), "s3cret").unwrap();
    #[cfg(unix)]
    std::os::unix::fs::symlink(outside.path(), tmp.path().join("link")).unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let secret = outside.path().join("secret").display().to_string();
    for (tool, args) in [
        ("read_file", json!({"path": "../secret"})),
        ("read_file", json!({"path": secret})),
        ("write_file", json!({"path": "../../evil", "content": "x"})),
        (
            "write_file",
            json!({"path": "link/secret", "content": "overwritten"}),
        ),
        (
            "edit_file",
            json!({"path": "link/secret", "old": "s3", "new": "xx"}),
        ),
        ("list_dir", json!({"path": "link"})),
    ] {
        let e = model_error(call(&dir, tool, args.clone()).await);
        assert!(e.ends_with("is outside the worktree"), "{tool} {args}: {e}");
    }
    assert_eq!(
        std::fs::read_to_string(outside.path().join("secret")).unwrap(),
        "s3cret"
    );
}

#[tokio::test]
async fn commands_run_in_the_worktree_with_a_timeout_and_bounded_output() {
    let tmp = tempfile::tempdir().unwrap();
    std::fs::write(tmp.path().join("here.txt"), "").unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let out: Value = serde_json::from_str(
        &call(&dir, "run_command", json!({"argv": ["ls"]}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_eq!(out["exit_code"], 0);
    assert_eq!(out["stdout"], "here.txt\n");
    // Huge output is cut at 64 KiB.
    let out: Value = serde_json::from_str(
        &call(
            &dir,
            "run_command",
            json!({"argv": ["head", "-c", "200000", "/dev/zero"]}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(out["truncated"], true);
    assert_eq!(out["stdout"].as_str().unwrap().len(), 64 * 1024);
    // A command past its timeout is killed.
    let started = std::time::Instant::now();
    let out: Value = serde_json::from_str(
        &call(
            &dir,
            "run_command",
            json!({"argv": ["sleep", "5"], "timeout_ms": 200}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(out["timed_out"], true);
    assert!(started.elapsed() < std::time::Duration::from_secs(3));
    // What a command leaves running does not hold the call, and is killed with it.
    let started = std::time::Instant::now();
    let out: Value = serde_json::from_str(
        &call(
            &dir,
            "run_command",
            json!({"argv": ["sh", "-c", "sleep 30 & echo started"]}),
        )
        .await
        .unwrap(),
    )
    .unwrap();
    assert_eq!(
        (out["exit_code"].as_i64(), out["stdout"].as_str()),
        (Some(0), Some("started\n"))
    );
    assert!(started.elapsed() < std::time::Duration::from_secs(5));
    // Failures are the model's to read.
    let out: Value = serde_json::from_str(
        &call(&dir, "run_command", json!({"argv": ["ls", "no-such-file"]}))
            .await
            .unwrap(),
    )
    .unwrap();
    assert_ne!(out["exit_code"], 0);
    assert!(out["stderr"].as_str().unwrap().contains("no-such-file"));
    // The host's environment stays out: only what a build needs passes.
    let out: Value = serde_json::from_str(
        &call(&dir, "run_command", json!({"argv": ["env"]}))
            .await
            .unwrap(),
    )
    .unwrap();
    for line in out["stdout"].as_str().unwrap().lines() {
        let key = line.split('=').next().unwrap();
        assert!(
            [
                "PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TERM", "USER", "PWD", "SHLVL", "_"
            ]
            .contains(&key),
            "{key} leaked into the command's environment"
        );
    }
    let e = model_error(call(&dir, "run_command", json!({"argv": []})).await);
    assert_eq!(e, "argv must name a program");
    let e = model_error(
        call(
            &dir,
            "run_command",
            json!({"argv": ["ls"], "timeout_ms": 700000}),
        )
        .await,
    );
    assert_eq!(e, "timeout_ms must be between 1 and 600000");
    let e = model_error(call(&dir, "run_command", json!({"argv": ["no-such-program-x"]})).await);
    assert!(e.starts_with("cannot run no-such-program-x"), "{e}");
}

#[tokio::test]
async fn large_files_are_cut_on_a_character_boundary() {
    let tmp = tempfile::tempdir().unwrap();
    // 'é' is two bytes: 256 KiB + 1 falls inside one.
    let text = format!("x{}", "é".repeat(200 * 1024));
    std::fs::write(tmp.path().join("big.txt"), &text).unwrap();
    let dir = Workdir::new(tmp.path()).unwrap();
    let out = call(&dir, "read_file", json!({"path": "big.txt"}))
        .await
        .unwrap();
    let (body, note) = out.split_once("\n[truncated: ").unwrap();
    assert_eq!(body.len(), 256 * 1024 - 1);
    assert!(note.starts_with(&format!("{} bytes", text.len())), "{note}");
    let e = model_error(
        call(
            &dir,
            "write_file",
            json!({"path": "huge", "content": "x".repeat(1024 * 1024 + 1)}),
        )
        .await,
    );
    assert_eq!(e, "content is 1048577 bytes; write at most 1048576");
    assert!(!tmp.path().join("huge").exists());
    // Only regular files are read: a folder is refused, not waited on.
    std::fs::create_dir(tmp.path().join("sub")).unwrap();
    let e = model_error(call(&dir, "read_file", json!({"path": "sub"})).await);
    assert_eq!(e, "sub is not a regular file");
    let e = model_error(call(&dir, "read_file", json!({"path": ".git/config"})).await);
    assert_eq!(e, "path \".git/config\" is outside the worktree");
}

/// Every file tool refuses `path` in `dir` exactly as it refuses a `.git` path.
async fn refused_everywhere(dir: &Workdir, path: &str) {
    let outside = format!("path {path:?} is outside the worktree");
    for (tool, args) in [
        ("read_file", json!({ "path": path })),
        (
            "write_file",
            json!({ "path": path, "content": "#!/bin/sh\necho pwned\n" }),
        ),
        (
            "edit_file",
            json!({ "path": path, "old": "[core]", "new": "[evil]" }),
        ),
        ("list_dir", json!({ "path": path })),
    ] {
        let e = model_error(call(dir, tool, args).await);
        assert_eq!(e, outside, "{tool} {path}");
    }
}

#[cfg(unix)]
#[tokio::test]
async fn links_into_git_data_are_refused_like_git_itself() {
    use std::os::unix::fs::symlink;
    let tmp = tempfile::tempdir().unwrap();
    let main = tmp.path().join("repo");
    common::repo(&main);
    let trees =
        Worktrees::new(WorkspaceConfig::new(&main, "demo").worktree_root(tmp.path().join("trees")));
    let tree = trees.create("d1").await.unwrap().path;
    let config = std::fs::read_to_string(main.join(".git/config")).unwrap();

    // In the main checkout (`.git` is a folder): links to it, to a part of it, nested.
    symlink(".git", main.join("link")).unwrap();
    symlink(".git/hooks", main.join("hooks")).unwrap();
    std::fs::create_dir(main.join("nested")).unwrap();
    symlink("../.git", main.join("nested/deeper")).unwrap();
    let dir = Workdir::new(&main).unwrap();
    for path in [
        ".git/config",
        "link",
        "link/config",
        "link/hooks/pre-commit",
        "hooks/pre-commit",
        "nested/deeper/config",
        "nested/deeper/hooks/pre-commit",
    ] {
        refused_everywhere(&dir, path).await;
    }

    // In a linked worktree (`.git` is a file naming its git folder inside the main
    // repository's): links to that file, to the main repository's `.git` (absolute and
    // relative), and to the worktree's own git folder.
    let gitdir = common::git(&tree, &["rev-parse", "--absolute-git-dir"]);
    symlink(".git", tree.join("link")).unwrap();
    symlink(main.join(".git"), tree.join("main")).unwrap();
    symlink("../../../repo/.git", tree.join("rel")).unwrap();
    symlink(&gitdir, tree.join("own")).unwrap();
    let dir = Workdir::new(&tree).unwrap();
    for path in [
        ".git",
        "link",
        "main/config",
        "main/hooks/pre-commit",
        "rel/config",
        "rel/hooks/pre-commit",
        "own/HEAD",
        "own/hooks/pre-commit",
    ] {
        refused_everywhere(&dir, path).await;
    }

    // Nothing of git's was touched.
    assert_eq!(
        std::fs::read_to_string(main.join(".git/config")).unwrap(),
        config
    );
    assert!(!main.join(".git/hooks/pre-commit").exists());
    assert!(!std::path::Path::new(&gitdir).join("hooks").exists());
    // Ordinary files stay reachable.
    assert_eq!(
        call(&dir, "read_file", json!({"path": "a.txt"}))
            .await
            .unwrap(),
        "alpha\n"
    );
}
