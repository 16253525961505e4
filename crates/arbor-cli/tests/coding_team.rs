//! Coding children's work brought back through the approval gate, end to end with the
//! `arbor` binary and real git: examples/coding-team.sh (three children, two merges, a
//! conflict redone and discarded, the tests run on the result), a merge rejected, a merge
//! refused once its branch moved after the approval, a foreign child unknown, and a merge
//! SIGKILLed half way then resumed (never half merged, never merged twice).
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const EXAMPLES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples");

#[allow(dead_code)]
mod git_support;
use git_support::{git, init_repo};

/// The test repository: greet.sh, on `main`.
fn repo(dir: &Path) {
    init_repo(dir, &[("greet.sh", "greeting() { echo hello; }\n")]);
}

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env("ARBOR_BUSY_TIMEOUT_MS", "2000")
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// The lines of `git log --format=%s` of `main`.
fn subjects(repo: &Path) -> Vec<String> {
    git(repo, &["log", "--format=%s", "main"])
        .lines()
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_coding_team_merges_two_redoes_a_conflict_and_its_tests_pass() {
    let work = tempfile::tempdir().unwrap();
    let out = Command::new("bash")
        .arg(format!("{EXAMPLES}/coding-team.sh"))
        .arg("--yes")
        .arg(work.path())
        .env("ARBOR", env!("CARGO_BIN_EXE_arbor"))
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    let shown = text(&out);
    assert!(out.status.success(), "{shown}");
    // Each merge was shown with its files and lines before it was approved.
    assert!(
        shown.contains("merge greeting (agent/") && shown.contains("greet.sh +1 -1"),
        "{shown}"
    );
    let repo = work.path().join("repo");
    // The final tree of files.
    assert_eq!(
        std::fs::read_to_string(repo.join("greet.sh")).unwrap(),
        "greeting() { echo Hello; }\nname() { echo arbor; }\n"
    );
    assert!(repo.join("NOTES.md").is_file());
    assert_eq!(
        git(&repo, &["status", "--porcelain"]),
        "",
        "nothing left over"
    );
    let tests = Command::new("sh")
        .arg("test.sh")
        .current_dir(&repo)
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&tests.stdout), "all tests pass\n");
    // The history: three merge commits (notes, greeting, rename) over their own commits;
    // naming's conflicting commit never reached main.
    let subjects = subjects(&repo);
    let merges = subjects
        .iter()
        .filter(|s| s.starts_with("Merge agent/"))
        .count();
    assert_eq!(merges, 3, "{subjects:?}");
    let mut own: Vec<&str> = subjects
        .iter()
        .filter(|s| !s.starts_with("Merge "))
        .map(String::as_str)
        .collect();
    own.sort_unstable();
    assert_eq!(
        own,
        [
            "A greeting and its tests",
            "Add notes",
            "Capitalise the greeting",
            "Name the program arbor"
        ]
    );
    assert_eq!(
        git(&repo, &["rev-list", "--merges", "--count", "main"]),
        "3"
    );
    // naming was discarded (its branch is gone); the others' branches stay.
    let branches = git(&repo, &["branch", "--list", "agent/*"]);
    assert_eq!(branches.lines().count(), 4, "{branches}");
    // The lead read the conflict by file, and the tester saw the tests pass.
    let log = text(&arbor(work.path(), &["log"]));
    assert!(
        log.contains(
            "tool merge_child ok: {\"child\":\"naming\",\"conflicts\":[{\"hunks\":\"<<<<<<<"
        ),
        "{log}"
    );
    let tree = text(&arbor(work.path(), &["tree", "--json"]));
    let tree: Value = serde_json::from_str(tree.lines().next().unwrap()).unwrap();
    let tester = tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == "tester")
        .unwrap()["id"]
        .as_str()
        .unwrap()
        .to_owned();
    let tested = text(&arbor(work.path(), &["log", &tester]));
    assert!(tested.contains("all tests pass"), "{tested}");
}

/// A lead with one coding child `edit` (it capitalises the greeting and commits), then the
/// lead's `turns` (TOML inline tables of tool calls, one turn each), then its last text.
fn spec(dir: &Path, turns: &[&str]) -> String {
    let mut s = String::from(
        "task = \"t\"\nroot = \"lead\"\n[workspace]\nrepository = \"repo\"\nid = \"t\"\n\
         [agents.lead]\nchildren = [\"edit\"]\n\
         tools = [\"diff_child\", \"merge_child\", \"discard_child\"]\n\
         [[agents.lead.turns]]\ntool_calls = [{ name = \"spawn_agent\", arguments = { child_id = \"edit\", name = \"edit\", input = \"go\" } }]\n",
    );
    for t in turns {
        s.push_str(&format!("[[agents.lead.turns]]\ntool_calls = [{t}]\n"));
    }
    s.push_str(
        "[[agents.lead.turns]]\ntext = \"done\"\n\
         [agents.edit]\nworkspace = true\ntools = [\"edit_file\", \"run_command\"]\n\
         [[agents.edit.turns]]\ntool_calls = [{ name = \"edit_file\", arguments = { path = \"greet.sh\", old = \"hello\", new = \"Hello\" } }]\n\
         [[agents.edit.turns]]\ntool_calls = [{ name = \"run_command\", arguments = { argv = [\"git\", \"-c\", \"user.name=e\", \"-c\", \"user.email=e@example.invalid\", \"commit\", \"-q\", \"-am\", \"Capitalise\"] } }]\n\
         [[agents.edit.turns]]\ntext = \"committed\"\n",
    );
    std::fs::write(dir.join("s.toml"), &s).unwrap();
    s
}

/// The pending calls of the latest root, as `arbor approvals --json` lists them.
fn pending(dir: &Path) -> Vec<Value> {
    let out = arbor(dir, &["approvals", "--json"]);
    let v: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)));
    v["suspensions"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|s| s["pending"].as_array().unwrap().clone())
        .collect()
}

const MERGE: &str = "{ name = \"merge_child\", arguments = { child = \"edit\" } }";

#[test]
fn a_merge_waits_with_its_diff_and_a_rejected_one_changes_nothing() {
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    let start = git(&repo_dir, &["rev-parse", "HEAD"]);
    spec(
        work.path(),
        &[
            "{ name = \"diff_child\", arguments = { child = \"edit\" } }, { name = \"diff_child\", arguments = { child = \"ghost\" } }",
            MERGE,
        ],
    );
    let run = arbor(work.path(), &["run", "s.toml", "--no-input", "-q"]);
    assert_eq!(run.status.code(), Some(4), "{}", text(&run));
    let waiting = pending(work.path());
    assert_eq!(waiting.len(), 1, "{waiting:?}");
    let p = &waiting[0];
    assert_eq!(p["tool"], "merge_child");
    // The person sees the change: its files and lines, and the commit that would be merged.
    let review = &p["review"];
    assert_eq!(review["files"][0]["path"], "greet.sh");
    assert_eq!(
        (review["added"].as_u64(), review["removed"].as_u64()),
        (Some(1), Some(1))
    );
    let branch = review["branch"].as_str().unwrap();
    assert_eq!(
        review["tip"].as_str().unwrap(),
        git(&repo_dir, &["rev-parse", branch])
    );
    assert_eq!(
        git(&repo_dir, &["rev-parse", "HEAD"]),
        start,
        "nothing merged yet"
    );

    let id = p["id"].as_str().unwrap();
    let rejected = arbor(
        work.path(),
        &["reject", "@latest", id, "--reason", "not now"],
    );
    assert!(rejected.status.success(), "{}", text(&rejected));
    let resumed = arbor(work.path(), &["resume", "@latest", "--no-input"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(
        git(&repo_dir, &["rev-parse", "HEAD"]),
        start,
        "a rejected merge changes nothing"
    );
    let log = text(&arbor(work.path(), &["log"]));
    assert!(
        log.contains("tool merge_child error: rejected by a reviewer: not now"),
        "{log}"
    );
    // diff_child showed the change; a child not of this lead is unknown.
    assert!(log.contains("tool diff_child ok: {\"added\":1"), "{log}");
    assert!(
        log.contains("tool diff_child error: child \"ghost\" of this session not found"),
        "{log}"
    );
}

#[test]
fn a_branch_moved_after_its_approval_is_not_merged() {
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    let start = git(&repo_dir, &["rev-parse", "HEAD"]);
    spec(work.path(), &[MERGE]);
    let run = arbor(work.path(), &["run", "s.toml", "--no-input", "-q"]);
    assert_eq!(run.status.code(), Some(4), "{}", text(&run));
    let p = pending(work.path()).remove(0);
    let branch = p["review"]["branch"].as_str().unwrap().to_owned();
    // A commit lands on the child's branch after the person saw it.
    let tree = git(&repo_dir, &["rev-parse", &format!("{branch}^{{tree}}")]);
    let moved = git(
        &repo_dir,
        &[
            "-c",
            "user.name=x",
            "-c",
            "user.email=x@example.invalid",
            "commit-tree",
            &tree,
            "-p",
            &branch,
            "-m",
            "sneaked in",
        ],
    );
    git(
        &repo_dir,
        &["update-ref", &format!("refs/heads/{branch}"), &moved],
    );
    let ok = arbor(
        work.path(),
        &["approve", "@latest", p["id"].as_str().unwrap()],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let resumed = arbor(work.path(), &["resume", "@latest", "--no-input"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(
        git(&repo_dir, &["rev-parse", "HEAD"]),
        start,
        "what was not approved is not merged"
    );
    let log = text(&arbor(work.path(), &["log"]));
    assert!(log.contains("moved since its merge was approved"), "{log}");
}

#[test]
fn a_merge_whose_change_could_not_be_shown_merges_nothing() {
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    let start = git(&repo_dir, &["rev-parse", "HEAD"]);
    spec(
        work.path(),
        &["{ name = \"merge_child\", arguments = { child = \"ghost\" } }"],
    );
    let run = arbor(work.path(), &["run", "s.toml", "--no-input", "-q"]);
    assert_eq!(run.status.code(), Some(4), "{}", text(&run));
    let p = pending(work.path()).remove(0);
    // The person is told why there is nothing to see.
    let summary = p["review"]["summary"].as_str().unwrap();
    assert!(
        summary.starts_with("cannot show the change of \"ghost\""),
        "{summary}"
    );
    let ok = arbor(
        work.path(),
        &["approve", "@latest", p["id"].as_str().unwrap()],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let resumed = arbor(work.path(), &["resume", "@latest", "--no-input"]);
    assert!(resumed.status.success(), "{}", text(&resumed));
    assert_eq!(git(&repo_dir, &["rev-parse", "HEAD"]), start);
    let log = text(&arbor(work.path(), &["log"]));
    assert!(
        log.contains("tool merge_child error: nothing was merged: the change could not be shown"),
        "{log}"
    );
}

/// The id of the session named `name` in the latest root's tree.
fn session_named(dir: &Path, name: &str) -> String {
    let out = arbor(dir, &["tree", "--json"]);
    let tree: Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|_| panic!("{}", text(&out)));
    tree["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {tree}"))["id"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn the_cli_diffs_merges_and_discards_a_child_with_the_person_as_approver() {
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    spec(work.path(), &[]);
    let run = arbor(work.path(), &["run", "s.toml", "--no-input", "-q"]);
    assert!(run.status.success(), "{}", text(&run));
    let child = session_named(work.path(), "edit");
    let root = session_named(work.path(), "lead");

    let diff = arbor(work.path(), &["diff", &child]);
    let shown = text(&diff);
    assert!(diff.status.success(), "{shown}");
    assert!(shown.contains("  greet.sh +1 -1"), "{shown}");
    assert!(shown.contains("+greeting() { echo Hello; }"), "{shown}");
    let json: Value =
        serde_json::from_slice(&arbor(work.path(), &["diff", &child, "--json"]).stdout).unwrap();
    let tip = json["tip"].as_str().unwrap().to_owned();
    assert_eq!(json["files_total"], 1);

    // A root has no branch; a commit that is not the branch's tip is refused.
    let refused = arbor(work.path(), &["diff", &root]);
    assert_eq!(refused.status.code(), Some(2), "{}", text(&refused));
    let moved = arbor(
        work.path(),
        &["merge", &child, "--expect-tip", &"0".repeat(40)],
    );
    assert_eq!(moved.status.code(), Some(1), "{}", text(&moved));
    assert!(text(&moved).contains("moved since"), "{}", text(&moved));
    assert_eq!(
        git(&repo_dir, &["rev-list", "--merges", "--count", "main"]),
        "0"
    );

    let merged = arbor(work.path(), &["merge", &child, "--expect-tip", &tip]);
    assert!(merged.status.success(), "{}", text(&merged));
    assert!(
        text(&merged).starts_with("merged edit into the main checkout: "),
        "{}",
        text(&merged)
    );
    assert_eq!(
        git(&repo_dir, &["rev-list", "--merges", "--count", "main"]),
        "1"
    );
    let again = arbor(work.path(), &["merge", &child]);
    assert!(
        text(&again).contains("edit was merged already"),
        "{}",
        text(&again)
    );
    assert_eq!(
        git(&repo_dir, &["rev-list", "--merges", "--count", "main"]),
        "1"
    );

    let gone = arbor(work.path(), &["discard", &child]);
    assert!(gone.status.success(), "{}", text(&gone));
    assert!(
        text(&gone).starts_with("discarded edit: branch agent/"),
        "{}",
        text(&gone)
    );
    assert_eq!(git(&repo_dir, &["branch", "--list", "agent/*"]), "");
    let after = arbor(work.path(), &["diff", &child]);
    assert_eq!(after.status.code(), Some(1), "{}", text(&after));
    // Its transcript stays.
    let log = arbor(work.path(), &["log", &child]);
    assert!(text(&log).contains("committed"), "{}", text(&log));
}

/// Kills the whole process group of `child` (arbor, git and the hook git started).
fn kill_group(child: &std::process::Child) {
    let pid = rustix::process::Pid::from_raw(i32::try_from(child.id()).unwrap()).unwrap();
    rustix::process::kill_process_group(pid, rustix::process::Signal::KILL).unwrap();
}

/// Where git's merge is cut off.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Cut {
    /// git merged the files and stopped before committing (killed between the two).
    BeforeCommit,
    /// git committed the merge; arbor had not settled its marker yet.
    AfterCommit,
}

/// A `git` ahead of the real one on PATH: every command goes to the real git, except the
/// merge itself, which (with `cut` = before) is made without its commit, as a git killed
/// before committing leaves it, or (after) is made whole; then it marks `mark` and hangs
/// until it is killed. SIGKILL cannot be timed inside git otherwise: arbor runs git
/// without the repository's hooks.
fn hanging_git(bin: &Path, mark: &Path, cut: Cut) {
    let real = String::from_utf8(
        Command::new("sh")
            .args(["-c", "command -v git"])
            .output()
            .unwrap()
            .stdout,
    )
    .unwrap();
    let swap = if cut == Cut::BeforeCommit {
        "[ \"$a\" = --commit ] && a=--no-commit"
    } else {
        ":"
    };
    std::fs::create_dir_all(bin).unwrap();
    let script = format!(
        "#!/bin/sh\nreal='{real}'\nmerging=\nfor a in \"$@\"; do [ \"$a\" = --no-ff ] && merging=1; done\n\
         [ -z \"$merging\" ] && exec \"$real\" \"$@\"\n\
         n=$#\nfor a in \"$@\"; do {swap}; set -- \"$@\" \"$a\"; done\nshift $n\n\
         \"$real\" \"$@\"\ntouch '{mark}'\nsleep 60\n",
        real = real.trim(),
        mark = mark.display()
    );
    let file = bin.join("git");
    std::fs::write(&file, script).unwrap();
    let mut perms = std::fs::metadata(&file).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&file, perms).unwrap();
}

/// Runs the merge under approval, SIGKILLs `arbor resume` (and git with it) where `cut`
/// says, then resumes: the checkout is never left half merged and the child is merged
/// exactly once, whatever the lead does next (it asks to merge again).
fn killed(cut: Cut) {
    use std::os::unix::process::CommandExt;
    let work = tempfile::tempdir().unwrap();
    let repo_dir = work.path().join("repo");
    repo(&repo_dir);
    let start = git(&repo_dir, &["rev-parse", "HEAD"]);
    spec(work.path(), &[MERGE, MERGE]);
    let run = arbor(work.path(), &["run", "s.toml", "--no-input", "-q"]);
    assert_eq!(run.status.code(), Some(4), "{}", text(&run));
    let p = pending(work.path()).remove(0);
    let ok = arbor(
        work.path(),
        &["approve", "@latest", p["id"].as_str().unwrap()],
    );
    assert!(ok.status.success(), "{}", text(&ok));

    let mark = work.path().join("in-merge");
    let bin = work.path().join("bin");
    hanging_git(&bin, &mark, cut);
    let path = format!(
        "{}:{}",
        bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let mut resume = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["resume", "@latest", "--no-input"])
        .current_dir(work.path())
        .env("PATH", path)
        .env("ARBOR_BUSY_TIMEOUT_MS", "2000")
        .env_remove("ARBOR_LOG")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap();
    let began = Instant::now();
    while !mark.exists() {
        if began.elapsed() > Duration::from_secs(30) {
            kill_group(&resume);
            panic!("the merge never started");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    kill_group(&resume);
    resume.wait().unwrap();
    let git_dir = repo_dir.join(".git");
    assert!(
        git_dir.join("arbor-merge").exists(),
        "cut off with its marker"
    );
    if cut == Cut::BeforeCommit {
        assert!(git_dir.join("MERGE_HEAD").exists(), "cut off half merged");
    }

    // Resumed: the cut-off merge is settled first (undone, or found done), the call that was
    // cut off reads as interrupted, and the lead's second merge_child asks again.
    let again = arbor(work.path(), &["resume", "@latest", "--no-input"]);
    assert_eq!(again.status.code(), Some(4), "{}", text(&again));
    assert!(
        !git_dir.join("MERGE_HEAD").exists(),
        "no merge left in progress"
    );
    assert!(
        !git_dir.join("arbor-merge").exists(),
        "the marker is settled"
    );
    assert_eq!(
        git(&repo_dir, &["status", "--porcelain"]),
        "",
        "nothing half merged"
    );
    let merges = git(&repo_dir, &["rev-list", "--merges", "--count", "main"]);
    if cut == Cut::BeforeCommit {
        assert_eq!(git(&repo_dir, &["rev-parse", "HEAD"]), start, "undone");
        assert_eq!(merges, "0");
    } else {
        assert_eq!(merges, "1", "done once");
    }
    let p = pending(work.path()).remove(0);
    let ok = arbor(
        work.path(),
        &["approve", "@latest", p["id"].as_str().unwrap()],
    );
    assert!(ok.status.success(), "{}", text(&ok));
    let done = arbor(work.path(), &["resume", "@latest", "--no-input"]);
    assert!(done.status.success(), "{}", text(&done));
    assert_eq!(
        git(&repo_dir, &["rev-list", "--merges", "--count", "main"]),
        "1",
        "merged exactly once"
    );
    assert_eq!(
        std::fs::read_to_string(repo_dir.join("greet.sh")).unwrap(),
        "greeting() { echo Hello; }\n"
    );
    let log = text(&arbor(work.path(), &["log"]));
    assert!(log.contains("interrupted"), "{log}");
    if cut == Cut::AfterCommit {
        assert!(log.contains("\"already_merged\":true"), "{log}");
    }
}

#[test]
fn a_merge_killed_before_its_commit_is_undone_then_merged_once() {
    killed(Cut::BeforeCommit);
}

#[test]
fn a_merge_killed_after_its_commit_is_found_done_and_never_repeated() {
    killed(Cut::AfterCommit);
}
