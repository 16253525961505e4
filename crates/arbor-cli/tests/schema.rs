//! One JSON shape for a session everywhere: every command that prints sessions prints
//! instances of `docs/schema/session.schema.json` (checked with a JSON Schema validator),
//! and each names the same session with the same values.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::Command;

use serde_json::Value;

const REPLIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/replies.toml");
const SCHEMA: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/../../docs/schema/session.schema.json"
);

fn json(dir: &Path, args: &[&str]) -> Value {
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{args:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

fn validator() -> jsonschema::Validator {
    let schema: Value = serde_json::from_str(&std::fs::read_to_string(SCHEMA).unwrap()).unwrap();
    jsonschema::draft202012::new(&schema).unwrap()
}

fn check(v: &jsonschema::Validator, what: &str, sessions: &[Value]) {
    assert!(!sessions.is_empty(), "{what}: no session");
    for s in sessions {
        let errors: Vec<String> = v.iter_errors(s).map(|e| e.to_string()).collect();
        assert!(errors.is_empty(), "{what}: {errors:?} in {s}");
    }
}

#[test]
fn every_command_prints_sessions_of_the_one_shape() {
    let v = validator();
    // The schema refuses what is not the shape.
    assert!(!v.is_valid(&serde_json::json!({"session_id": "x"})));

    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    let run = json(d, &["run", REPLIES, "--json", "-q"]);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    let ran = run["sessions"].as_array().unwrap().clone();
    check(&v, "run --json", &ran);

    let roots = json(d, &["ls", "--json"]);
    check(&v, "ls --json", roots["roots"].as_array().unwrap());
    let kids = json(d, &["ls", &root, "--json"]);
    check(&v, "ls ROOT --json", kids["children"].as_array().unwrap());
    let tree = json(d, &["tree", &root, "--json"]);
    let walked = tree["sessions"].as_array().unwrap().clone();
    check(&v, "tree --json", &walked);
    // The same sessions, the same values, whichever command printed them.
    assert_eq!(walked.len(), ran.len());
    for s in &ran {
        let same = walked.iter().find(|w| w["id"] == s["id"]).unwrap();
        assert_eq!(same, s);
    }
    assert_eq!(roots["roots"][0], walked[0]);

    let sent = json(d, &["send", &root, "papers", "Which one first?", "--json"]);
    check(&v, "send --json", std::slice::from_ref(&sent["child"]));

    // A deleted child, with its tombstone.
    json(d, &["rm", &root, "quiet", "--json"]);
    let all = json(d, &["ls", &root, "--deleted", "--json"]);
    let rows = all["children"].as_array().unwrap();
    check(&v, "ls --deleted --json", rows);
    let quiet = rows.iter().find(|r| r["name"] == "quiet").unwrap();
    assert_eq!(quiet["deleted"], true);
    assert_eq!(quiet["tombstone"]["final_status"], "succeeded");
}

#[path = "serve_support/mod.rs"]
#[allow(dead_code)]
mod serve_support;

/// The service serves the same shape, with the same values as the CLI prints.
#[tokio::test]
async fn the_service_serves_sessions_of_the_one_shape() {
    use serve_support::{call, client, serve};
    let v = validator();
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    std::fs::create_dir(d.join("specs")).unwrap();
    std::fs::copy(REPLIES, d.join("specs/replies.toml")).unwrap();
    let run = json(d, &["run", REPLIES, "--json", "-q", "--store", "a.db"]);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    let served = serve(d, &[]);
    let http = client();
    let get = reqwest::Method::GET;
    let (status, view) = call(
        &http,
        get.clone(),
        format!("{}/v1/runs/{root}", served.base),
        None,
    )
    .await;
    assert_eq!(status, 200, "{view}");
    let sessions = view["tree"]["sessions"].as_array().unwrap();
    check(&v, "GET /v1/runs/{id}", sessions);
    for s in run["sessions"].as_array().unwrap() {
        let same = sessions.iter().find(|w| w["id"] == s["id"]).unwrap();
        assert_eq!(same, s, "the API and the CLI print the same session");
    }
    let (status, kids) = call(
        &http,
        get.clone(),
        format!("{}/v1/sessions/{root}/children", served.base),
        None,
    )
    .await;
    assert_eq!(status, 200, "{kids}");
    check(
        &v,
        "GET /v1/sessions/{id}/children",
        kids["children"].as_array().unwrap(),
    );
    let (status, one) = call(
        &http,
        get,
        format!("{}/v1/sessions/{root}", served.base),
        None,
    )
    .await;
    assert_eq!(status, 200, "{one}");
}
