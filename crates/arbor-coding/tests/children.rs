//! Coding children through a supervisor: each delegation in its own worktree, cleaned up
//! by the after hook, seen on a host timeline through the lifecycle bridge.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use arbor_coding::{
    BridgeOptions, LifecycleEvent, StopStatus, WorkspaceConfig, WorktreeChildFactory, Worktrees,
    coding_tools, observe, workspace_factory,
};
use arbor_core::supervisor::{ChildEntry, Ownership, SpawnAgentTool, Supervisor};
use arbor_core::{Agent, RunOptions};
use arbor_model::{Script, ScriptedProvider, ScriptedToolCall, ScriptedTurn};
use arbor_protocol::{RunStatus, SupervisorEvent};
use common::{git, repo};
use serde_json::json;

fn edit_and_commit(file: &str, new: &str, commit: bool) -> Vec<ScriptedTurn> {
    let mut turns = vec![ScriptedTurn::tool_call(
        "edit_file",
        json!({"path": file, "old": file.trim_end_matches(".txt"), "new": new}),
    )];
    if commit {
        turns.push(ScriptedTurn::tool_call(
            "run_command",
            json!({"argv": ["git", "commit", "-q", "-am", format!("edit {file}")]}),
        ));
    }
    turns.push(ScriptedTurn::text(format!("edited {file}")));
    turns
}

/// A worktree child playing `turns` with the coding tools; `built` counts its builds.
fn coder(
    trees: &Arc<Worktrees>,
    turns: Vec<ScriptedTurn>,
    built: &Arc<AtomicUsize>,
) -> WorktreeChildFactory {
    let script = Script::new(turns);
    let built = built.clone();
    WorktreeChildFactory::new(
        trees.clone(),
        workspace_factory(move |ctx, cwd| {
            let script = script.clone();
            built.fetch_add(1, Ordering::SeqCst);
            async move {
                let dir = arbor_coding::Workdir::new(&cwd)?;
                let mut b =
                    Agent::builder(ctx.child_id.clone()).provider(ScriptedProvider::new(script));
                for tool in coding_tools(&dir) {
                    b = b.dyn_tool(tool);
                }
                b.build()
            }
        }),
    )
}

struct Setup {
    _dir: tempfile::TempDir,
    repo: std::path::PathBuf,
    sup: Supervisor,
    trees: Arc<Worktrees>,
    built: Arc<AtomicUsize>,
}

fn setup(children: Vec<(&'static str, Vec<ScriptedTurn>)>, with_root: bool) -> Setup {
    let dir = tempfile::tempdir().unwrap();
    let repo_path = dir.path().join("repo");
    repo(&repo_path);
    // The files hold their own stem so edits are easy to script: a.txt is "a\n".
    std::fs::write(repo_path.join("a.txt"), "a\n").unwrap();
    std::fs::write(repo_path.join("b.txt"), "b\n").unwrap();
    git(&repo_path, &["commit", "-q", "-am", "stems"]);
    let mut config = WorkspaceConfig::new(&repo_path, "demo");
    if with_root {
        config = config.worktree_root(dir.path().join("trees"));
    }
    let trees = Arc::new(Worktrees::new(config));
    let built = Arc::new(AtomicUsize::new(0));
    let mut b = Supervisor::builder(Ownership::user("t", "u")).after(trees.clone());
    for (id, turns) in children {
        b = b.child(ChildEntry::new(id, coder(&trees, turns, &built)));
    }
    Setup {
        _dir: dir,
        repo: repo_path,
        sup: b.build().unwrap(),
        trees,
        built,
    }
}

fn spawn_call(id: &str, child: &str) -> ScriptedToolCall {
    ScriptedToolCall {
        id: Some(id.into()),
        name: "spawn_agent".into(),
        arguments: json!({"child_id": child, "name": child, "input": "edit your file"}),
    }
}

fn lead(sup: &Supervisor, turns: Vec<ScriptedTurn>) -> Agent {
    Agent::builder("lead")
        .provider(ScriptedProvider::new(Script::new(turns)))
        .dyn_tool(Arc::new(SpawnAgentTool::new(sup.delegator())))
        .build()
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_parallel_children_edit_in_their_own_worktrees_and_leave_branches() {
    let s = setup(
        vec![
            ("edit-a", edit_and_commit("a.txt", "A", true)),
            ("edit-b", edit_and_commit("b.txt", "B", true)),
        ],
        true,
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let sink = seen.clone();
    let observer = observe(
        &s.sup,
        BridgeOptions {
            include_failure: true,
            include_recovery: true,
        },
        move |e| sink.lock().unwrap().push(e),
    );
    let lead = lead(
        &s.sup,
        vec![
            ScriptedTurn {
                tool_calls: vec![spawn_call("c1", "edit-a"), spawn_call("c2", "edit-b")],
                ..ScriptedTurn::default()
            },
            ScriptedTurn::text("both edits are on their branches"),
        ],
    );
    let mut session = lead
        .session()
        .store(s.sup.store().clone())
        .create()
        .await
        .unwrap();
    let r = session
        .run("edit a and b", RunOptions::default())
        .await
        .unwrap();
    assert_eq!(r.status, RunStatus::Succeeded, "{:?}", r.error);
    s.sup.shutdown().await;
    observer.finish().await;

    // Both branches hold their edit; the worktrees are gone; main is untouched.
    let branches = git(
        &s.repo,
        &["branch", "--list", "agent/*", "--format=%(refname:short)"],
    );
    let branches: Vec<&str> = branches.lines().collect();
    assert_eq!(branches.len(), 2, "{branches:?}");
    let mut contents: Vec<String> = branches
        .iter()
        .flat_map(|b| {
            [
                git(&s.repo, &["show", &format!("{b}:a.txt")]),
                git(&s.repo, &["show", &format!("{b}:b.txt")]),
            ]
        })
        .collect();
    contents.sort();
    assert_eq!(
        contents,
        ["A", "B", "a", "b"],
        "each branch has its own edit only"
    );
    assert_eq!(git(&s.repo, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(git(&s.repo, &["status", "--porcelain"]), "");
    assert_eq!(
        std::fs::read_to_string(s.repo.join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(s.built.load(Ordering::SeqCst), 2);
    assert!(s.trees.cleanup("anything").await.is_ok());

    // The timeline: two starts, two successful stops, with recovery counters.
    let events = seen.lock().unwrap().clone();
    let starts = events
        .iter()
        .filter(|e| matches!(e, LifecycleEvent::SubagentStarted { .. }))
        .count();
    assert_eq!(starts, 2);
    let stops: Vec<_> = events
        .iter()
        .filter_map(|e| match e {
            LifecycleEvent::SubagentStopped {
                status, recovery, ..
            } => Some((*status, recovery.as_ref().map(|r| r.attempts))),
            _ => None,
        })
        .collect();
    assert_eq!(
        stops,
        [
            (StopStatus::Succeeded, Some(1)),
            (StopStatus::Succeeded, Some(1))
        ]
    );
}

#[tokio::test]
async fn a_child_that_leaves_uncommitted_work_keeps_its_worktree_and_says_so() {
    let s = setup(vec![("edit-a", edit_and_commit("a.txt", "A", false))], true);
    let mut sub = s.sup.subscribe();
    let lead = lead(
        &s.sup,
        vec![
            ScriptedTurn {
                tool_calls: vec![spawn_call("c1", "edit-a")],
                ..ScriptedTurn::default()
            },
            ScriptedTurn::text("done"),
        ],
    );
    let mut session = lead
        .session()
        .store(s.sup.store().clone())
        .create()
        .await
        .unwrap();
    session.run("edit a", RunOptions::default()).await.unwrap();
    let mut errors = Vec::new();
    while let Some(e) = sub.try_recv() {
        if let SupervisorEvent::DelegationError { error, .. } = &e.event {
            errors.push(error.clone());
        }
    }
    assert_eq!(errors.len(), 1);
    assert!(
        errors[0].ends_with("has uncommitted changes: kept for review"),
        "{}",
        errors[0]
    );
    // The work is there to review.
    assert_eq!(git(&s.repo, &["worktree", "list"]).lines().count(), 2);
    assert_eq!(
        std::fs::read_to_string(s.repo.join("a.txt")).unwrap(),
        "a\n"
    );
}

#[tokio::test]
async fn without_an_allow_listed_root_the_child_fails_before_git_or_its_factory_runs() {
    let s = setup(vec![("edit-a", edit_and_commit("a.txt", "A", true))], false);
    let e = s
        .sup
        .delegate(arbor_core::supervisor::DelegationRequest::new(
            "edit-a", "go",
        ))
        .await
        .unwrap_err();
    assert!(
        e.to_string()
            .contains("no worktree root is allow-listed: configure one before delegating"),
        "{e}"
    );
    assert_eq!(
        s.built.load(Ordering::SeqCst),
        0,
        "the inner factory never ran"
    );
    assert_eq!(git(&s.repo, &["branch", "--list", "agent/*"]), "");
}

/// A supervisor over `store` whose `edit-a` child works in a worktree of `repo`, with durable
/// approvals: every child call waits for a decision.
fn durable(
    store: &Arc<dyn arbor_store::Store>,
    repo: &std::path::Path,
    root: &std::path::Path,
    built: &Arc<AtomicUsize>,
) -> (Supervisor, Arc<Worktrees>) {
    let trees = Arc::new(Worktrees::new(
        WorkspaceConfig::new(repo, "demo").worktree_root(root),
    ));
    let factory = coder(&trees, edit_and_commit("a.txt", "A", true), built);
    let sup = Supervisor::builder(Ownership::user("t", "u"))
        .store(store.clone())
        .durable_approvals("rev-1")
        .after(trees.clone())
        .child(ChildEntry::new("edit-a", factory))
        .build()
        .unwrap();
    (sup, trees)
}

#[tokio::test]
async fn a_resumed_child_finds_its_worktree_again_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let repo_path = dir.path().join("repo");
    repo(&repo_path);
    std::fs::write(repo_path.join("a.txt"), "a\n").unwrap();
    git(&repo_path, &["commit", "-q", "-am", "stems"]);
    let store: Arc<dyn arbor_store::Store> = Arc::new(arbor_store::MemoryStore::new());
    let built = Arc::new(AtomicUsize::new(0));
    let roots = dir.path().join("trees");

    let (first, _trees) = durable(&store, &repo_path, &roots, &built);
    let mut session = lead(
        &first,
        vec![
            ScriptedTurn {
                tool_calls: vec![spawn_call("c1", "edit-a")],
                ..ScriptedTurn::default()
            },
            ScriptedTurn::text("done"),
        ],
    )
    .session()
    .store(store.clone())
    .create()
    .await
    .unwrap();
    let opts = |sup: &Supervisor| RunOptions::default().with_nested(Arc::new(sup.clone()));
    let s1 = session
        .run("edit", opts(&first))
        .await
        .unwrap()
        .suspension
        .unwrap();
    assert_eq!(s1.pending[0].tool, "edit_file");
    // Suspended: not terminal, so the worktree stays, untouched.
    let worktrees = git(&repo_path, &["worktree", "list"]);
    assert_eq!(worktrees.lines().count(), 2, "{worktrees}");
    first.shutdown().await;
    drop(first);

    // A new process: a new supervisor and worktree manager over the same store.
    let (second, _trees) = durable(&store, &repo_path, &roots, &built);
    let allow =
        |id: &str| arbor_protocol::ApprovalDecision::new(id, arbor_protocol::Verdict::AllowOnce);
    let s2 = session
        .approve(
            s1.run_id,
            s1.version,
            &[allow(&s1.pending[0].id)],
            opts(&second),
        )
        .await
        .unwrap()
        .suspension
        .unwrap();
    assert_eq!(
        s2.pending[0].tool, "run_command",
        "the edit ran; the commit waits"
    );
    let done = session
        .approve(
            s1.run_id,
            s2.version,
            &[allow(&s2.pending[0].id)],
            opts(&second),
        )
        .await
        .unwrap();
    assert_eq!(done.status, RunStatus::Succeeded, "{:?}", done.error);
    // One worktree throughout: the edit and the commit happened in it, then it was removed.
    let branch = git(
        &repo_path,
        &["branch", "--list", "agent/*", "--format=%(refname:short)"],
    );
    assert_eq!(branch.lines().count(), 1);
    assert_eq!(git(&repo_path, &["show", &format!("{branch}:a.txt")]), "A");
    assert_eq!(git(&repo_path, &["worktree", "list"]).lines().count(), 1);
    assert_eq!(
        std::fs::read_to_string(repo_path.join("a.txt")).unwrap(),
        "a\n"
    );
    assert_eq!(built.load(Ordering::SeqCst), 3, "built once per attempt");
}
