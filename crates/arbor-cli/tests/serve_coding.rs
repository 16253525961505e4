//! A coding child's work over `/v1`, with a real HTTP client against `arbor serve` and real
//! git: the pending `merge_child` lists its review (files, lines, the commit), the child's
//! diff reads by pages, a merge names the commit the caller saw (refused once the branch
//! moved), the model's own merge approved afterwards finds it done (never twice), a discard
//! removes the branch, and another tenant's caller gets the unknown-session answer.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;

use reqwest::Method;
use serde_json::{Value, json};

#[allow(dead_code)]
mod git_support;
#[allow(dead_code)]
mod serve_support;
use git_support::{git, init_repo};
use serve_support::tenants::{TOKEN_A, TOKEN_B};
use serve_support::{call_as, client, serve_env, status_becomes_as};

fn spec(repo: &Path, worktrees: &Path) -> String {
    format!(
        r#"
task = "t"
root = "lead"
[workspace]
repository = "{repo}"
worktrees = "{worktrees}"
id = "t"
[agents.lead]
children = ["edit"]
tools = ["merge_child"]
[[agents.lead.turns]]
tool_calls = [{{ name = "spawn_agent", arguments = {{ child_id = "edit", name = "edit", input = "go" }} }}]
[[agents.lead.turns]]
tool_calls = [{{ name = "merge_child", arguments = {{ child = "edit" }} }}]
[[agents.lead.turns]]
text = "done"
[agents.edit]
workspace = true
tools = ["edit_file", "run_command"]
[[agents.edit.turns]]
tool_calls = [{{ name = "edit_file", arguments = {{ path = "greet.sh", old = "hello", new = "Hello" }} }}]
[[agents.edit.turns]]
tool_calls = [{{ name = "run_command", arguments = {{ argv = ["git", "-c", "user.name=e", "-c", "user.email=e@example.invalid", "commit", "-q", "-am", "Capitalise"] }} }}]
[[agents.edit.turns]]
text = "committed"
"#,
        repo = repo.display(),
        worktrees = worktrees.display()
    )
}

#[tokio::test]
#[allow(clippy::too_many_lines, reason = "one scenario, read top to bottom")]
async fn a_childs_work_is_diffed_merged_once_and_discarded_over_http() {
    let dir = tempfile::tempdir().unwrap();
    let repo = dir.path().join("repo");
    init_repo(&repo, &[("greet.sh", "greeting() { echo hello; }\n")]);
    let start = git(&repo, &["rev-parse", "HEAD"]);
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(
        dir.path().join("specs/team.toml"),
        spec(&repo, &dir.path().join("worktrees")),
    )
    .unwrap();
    let tokens = format!("a={TOKEN_A},b={TOKEN_B}");
    let served = serve_env(dir.path(), &[], &[("ARBOR_TOKENS", &tokens)]);
    let (http, base) = (client(), served.base.clone());
    let (status, run) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/runs"),
        TOKEN_A,
        Some(json!({"spec": "team"})),
    )
    .await;
    assert_eq!(status, 201, "{run}");
    let root = run["root_id"].as_str().unwrap().to_owned();
    status_becomes_as(&http, &base, &root, "suspended", TOKEN_A).await;

    // The pending merge shows what it would bring in.
    let (status, waiting) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/approvals"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 200, "{waiting}");
    let pending = &waiting["suspensions"][0]["pending"][0];
    assert_eq!(pending["tool"], "merge_child");
    let review = &pending["review"];
    assert_eq!(
        review["files"],
        json!([{"path": "greet.sh", "added": 1, "removed": 1}])
    );
    let tip = review["tip"].as_str().unwrap().to_owned();
    let branch = review["branch"].as_str().unwrap().to_owned();
    assert_eq!(git(&repo, &["rev-parse", &branch]), tip);

    let (_, kids) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/children"),
        TOKEN_A,
        None,
    )
    .await;
    let child = kids["children"][0]["session_id"]
        .as_str()
        .or_else(|| kids["children"][0]["id"].as_str())
        .unwrap()
        .to_owned();

    // The diff, by pages; another tenant's caller, and the root, get no diff.
    let (status, diff) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{child}/diff?max_bytes=40"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 200, "{diff}");
    assert_eq!(
        (diff["tip"].as_str(), diff["files_total"].as_u64()),
        (Some(tip.as_str()), Some(1))
    );
    let next = diff["next_offset"].as_u64().expect("a second page");
    assert!(diff["patch"].as_str().unwrap().len() <= 40);
    let (_, rest) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{child}/diff?offset={next}&max_bytes=65536"),
        TOKEN_A,
        None,
    )
    .await;
    let whole = format!(
        "{}{}",
        diff["patch"].as_str().unwrap(),
        rest["patch"].as_str().unwrap()
    );
    assert!(whole.contains("+greeting() { echo Hello; }"), "{whole}");
    assert_eq!(whole.len() as u64, diff["total_bytes"].as_u64().unwrap());
    let (status, foreign) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{child}/diff"),
        TOKEN_B,
        None,
    )
    .await;
    assert_eq!(status, 404, "{foreign}");
    let (status, _) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/diff"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 409);
    let (status, bad) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{child}/diff?max_bytes=0"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(
        (status, bad["error"]["field"].as_str()),
        (400, Some("max_bytes")),
        "{bad}"
    );

    // A merge names the commit its caller saw; a bad strategy is named.
    let url = format!("{base}/v1/sessions/{child}/merge");
    let (status, bad) = call_as(
        &http,
        Method::POST,
        url.clone(),
        TOKEN_A,
        Some(json!({"strategy": "rebase"})),
    )
    .await;
    assert_eq!(
        (status, bad["error"]["field"].as_str()),
        (400, Some("strategy")),
        "{bad}"
    );
    let (status, bad) = call_as(
        &http,
        Method::POST,
        url.clone(),
        TOKEN_A,
        Some(json!({"expect_tip": "c2fb1836"})),
    )
    .await;
    assert_eq!(
        (status, bad["error"]["field"].as_str()),
        (400, Some("expect_tip")),
        "{bad}"
    );
    let (status, moved) = call_as(
        &http,
        Method::POST,
        url.clone(),
        TOKEN_A,
        Some(json!({"expect_tip": "0".repeat(40)})),
    )
    .await;
    assert_eq!(status, 409, "{moved}");
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), start, "nothing merged");
    let (status, foreign) =
        call_as(&http, Method::POST, url.clone(), TOKEN_B, Some(json!({}))).await;
    assert_eq!(status, 404, "{foreign}");
    let (status, merged) = call_as(
        &http,
        Method::POST,
        url.clone(),
        TOKEN_A,
        Some(json!({"expect_tip": tip})),
    )
    .await;
    assert_eq!(status, 200, "{merged}");
    assert_eq!(
        (merged["merged"].as_bool(), merged["strategy"].as_str()),
        (Some(true), Some("merge"))
    );
    assert_eq!(
        git(&repo, &["rev-parse", "HEAD"]),
        merged["commit"].as_str().unwrap()
    );

    // The model's merge, approved now, finds it done: one merge in all.
    let id = pending["id"].as_str().unwrap();
    let (status, decided) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{root}/approvals"),
        TOKEN_A,
        Some(json!({"decisions": [{"id": id, "verdict": "allow_once"}]})),
    )
    .await;
    assert_eq!(status, 200, "{decided}");
    let (status, resumed) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/runs/{root}/resume"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 202, "{resumed}");
    status_becomes_as(&http, &base, &root, "succeeded", TOKEN_A).await;
    assert_eq!(
        git(&repo, &["rev-list", "--merges", "--count", "main"]),
        "1"
    );
    let (_, page) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{root}/transcript?limit=500"),
        TOKEN_A,
        None,
    )
    .await;
    let results: Vec<Value> = page["entries"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .filter_map(|e| serde_json::from_str(e["message"]["content"].as_str()?).ok())
        .collect();
    assert!(
        results.iter().any(|r| r["already_merged"] == true),
        "{results:?}"
    );

    // Discarded: the branch goes; the diff is no more.
    let (status, gone) = call_as(
        &http,
        Method::POST,
        format!("{base}/v1/sessions/{child}/discard"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 200, "{gone}");
    assert_eq!(gone["branch"].as_str(), Some(branch.as_str()));
    assert_eq!(git(&repo, &["branch", "--list", &branch]), "");
    let (status, _) = call_as(
        &http,
        Method::GET,
        format!("{base}/v1/sessions/{child}/diff"),
        TOKEN_A,
        None,
    )
    .await;
    assert_eq!(status, 409);
}
