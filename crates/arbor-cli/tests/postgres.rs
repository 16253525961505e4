//! Every command on a PostgreSQL store (`ARBOR_STORE_URL`, a schema of its own): a run, then
//! `ls`, `tree`, `log`, a follow-up `send` and `rm` from new processes, as on SQLite; nothing
//! is written to the working directory, and no output shows the URL's password. Needs the
//! test server of `ARBOR_TEST_POSTGRES_URL` (`. .ci/postgres.sh`); skips loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use serde_json::Value;

#[allow(dead_code)]
mod pg_support;
#[allow(dead_code)]
mod serve_support;

use pg_support::{PASSWORD, Pg, arbor, drop_schema, json, server};

const REPLIES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/replies.toml");
const REVIEW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml");

fn child<'a>(rows: &'a Value, name: &str) -> &'a Value {
    rows.as_array()
        .unwrap()
        .iter()
        .find(|r| r["name"] == name)
        .unwrap_or_else(|| panic!("no {name} in {rows}"))
}

#[test]
fn every_command_works_on_a_postgres_store_and_never_shows_its_password() {
    let Some(pg) = server("every_command_works_on_a_postgres_store") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let run = json(dir.path(), &pg, &["run", REPLIES, "--json", "-q"]);
    assert_eq!(run["status"], "succeeded", "{run}");
    assert_eq!(run["silent_children"], 1);
    let root = run["root_session_id"].as_str().unwrap().to_owned();
    assert_eq!(run["store"], "postgres", "{run}");

    let roots = json(dir.path(), &pg, &["ls", "--json"]);
    assert_eq!(roots["roots"][0]["id"], root.as_str(), "{roots}");
    let kids = json(dir.path(), &pg, &["ls", &root, "--json"]);
    let papers = child(&kids["children"], "papers");
    assert_eq!(papers["usage"]["own"]["total_tokens"], 98);
    assert_eq!(papers["replies"], 1);

    let out = arbor(dir.path(), &pg, &["log", &root]);
    let log = String::from_utf8_lossy(&out.stdout);
    assert!(
        log.contains("user: [from child:papers] Found 3 papers"),
        "{log}"
    );

    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");

    // A follow-up from a new process: the retained child runs again and replies.
    let sent = json(
        dir.path(),
        &pg,
        &["send", &root, "papers", "Which one first?", "--json"],
    );
    assert_eq!(sent["child"]["replies"], 2, "{sent}");
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");

    let rm = json(dir.path(), &pg, &["rm", &root, "quiet", "--json"]);
    assert_eq!(rm["already_deleted"], false);
    let kids = json(dir.path(), &pg, &["ls", &root, "--json"]);
    assert_eq!(kids["children"].as_array().unwrap().len(), 1);

    // Nothing was written here: the store is the database.
    let left: Vec<_> = std::fs::read_dir(dir.path()).unwrap().collect();
    assert!(
        left.is_empty(),
        "files written to the working directory: {left:?}"
    );

    // A wrong URL is named without its password, as a store failure.
    let bad = Pg {
        url: format!("postgres://arbor:{PASSWORD}@127.0.0.1:1/arbor"),
        schema: pg.schema.clone(),
    };
    let out = arbor(dir.path(), &bad, &["ls", "--json"]);
    assert_eq!(out.status.code(), Some(3), "{out:?}");
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("postgres://arbor@127.0.0.1:1/arbor"), "{err}");

    drop_schema(&pg);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn arbor_serve_runs_on_a_postgres_store_and_the_cli_reads_its_tree() {
    let Some(pg) = server("arbor_serve_runs_on_a_postgres_store") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::copy(REVIEW, dir.path().join("specs/review.toml")).unwrap();
    let served = serve_support::serve_env(
        dir.path(),
        &[],
        &[
            ("ARBOR_STORE_URL", pg.url.as_str()),
            ("ARBOR_STORE_SCHEMA", pg.schema.as_str()),
        ],
    );
    let said = served.early.join("\n");
    assert!(!said.contains(PASSWORD), "{said}");
    let http = serve_support::client();
    let root = serve_support::start_run(&http, &served.base, "review").await;
    let run = serve_support::status_becomes(&http, &served.base, &root, "succeeded").await;
    let sessions = run["tree"]["sessions"].as_array().unwrap();
    assert_eq!(sessions.len(), 5, "{run}");
    // The example's totals: the root's own 40,000; the tree's 740,000.
    assert_eq!(sessions[0]["usage"]["own"]["total_tokens"], 40_000);
    assert_eq!(sessions[0]["usage"]["aggregate"]["total_tokens"], 740_000);
    drop(served);

    // Another process reads the same tree from the database.
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    assert_eq!(tree["reconciliation"]["root_aggregate_tokens"], 740_000);
    assert!(!dir.path().join("a.db").exists() && !dir.path().join(".arbor").exists());
    drop_schema(&pg);
}
