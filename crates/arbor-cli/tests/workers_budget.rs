//! A tree's budget across `arbor worker` processes on a shared PostgreSQL store: six children
//! that would each spend 30,000 tokens start at once on two workers under a 100,000-token
//! pool; the reservations are counted in the database, so three run and three are refused
//! before their call, whichever process runs them, and nothing stays reserved. Needs the test
//! server of `ARBOR_TEST_POSTGRES_URL` (`. .ci/postgres.sh`); skips loudly without it.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]
#![cfg(unix)]

#[allow(dead_code)]
mod pg_support;
#[allow(dead_code)]
mod serve_support;

use std::time::Duration;

use pg_support::fleet::{finish, start_tree, worker};
use pg_support::{drop_schema, json, server};

fn spec() -> String {
    let spawn = (1..=6)
        .map(|i| {
            format!(
                "{{ name = \"spawn_agent\", arguments = {{ child_id = \"spender\", name = \
                 \"s{i}\", input = \"spend\" }} }}"
            )
        })
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "task = \"spend\"\nroot = \"root\"\n\n[supervisor]\n\
         limits = {{ max_tokens = 1000000, max_active_children = 8 }}\n\n\
         [agents.root]\nchildren = [\"spender\"]\ntool_concurrency = 8\n\
         controls = {{ max_output_tokens = 1000 }}\nbudget = {{ max_tree_tokens = 100000 }}\n\
         [[agents.root.turns]]\nusage = {{ input_tokens = 10, output_tokens = 10 }}\n\
         tool_calls = [{spawn}]\n[[agents.root.turns]]\n\
         usage = {{ input_tokens = 10, output_tokens = 10 }}\ntext = \"done\"\n\n\
         [agents.spender]\ncontrols = {{ max_output_tokens = 30000 }}\n\
         limits = {{ max_tokens = 1000000 }}\n\
         [[agents.spender.turns]]\ndelay_ms = 500\n\
         usage = {{ input_tokens = 10, output_tokens = 29990 }}\ntext = \"spent\"\n"
    )
}

#[test]
fn siblings_on_two_workers_share_one_pool_in_the_database() {
    let Some(pg) = server("siblings_on_two_workers_share_one_pool") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/tree.toml"), spec()).unwrap();
    let mut workers: Vec<_> = (1..=2).map(|n| worker(dir.path(), &pg, n, "4")).collect();
    let run = start_tree(dir.path(), &pg);
    let report = finish(run, &dir.path().join("run.log"), Duration::from_secs(120));
    for w in &mut workers {
        w.kill().unwrap();
        w.wait().unwrap();
    }
    assert_eq!(report["status"], "succeeded", "{report}");
    let root = report["root_session_id"].as_str().unwrap().to_owned();
    let tree = json(dir.path(), &pg, &["tree", &root, "--json"]);
    assert_eq!(tree["reconciliation"]["consistent"], true, "{tree}");
    let sessions = tree["sessions"].as_array().unwrap();
    let spent: Vec<u64> = sessions[1..]
        .iter()
        .map(|s| s["usage"]["own"]["total_tokens"].as_u64().unwrap())
        .collect();
    assert_eq!(
        spent.iter().filter(|&&t| t == 30_000).count(),
        3,
        "three children fit in the pool: {spent:?}"
    );
    assert_eq!(
        spent.iter().filter(|&&t| t == 0).count(),
        3,
        "three were refused before their call: {spent:?}"
    );
    let total = tree["reconciliation"]["root_aggregate_tokens"]
        .as_u64()
        .unwrap();
    assert_eq!(total, 90_040);
    let pool = &tree["pools"][0];
    assert_eq!(pool["spent"]["tokens"], 90_040, "{tree}");
    assert_eq!(
        pool["reserved"]["tokens"], 0,
        "nothing stays reserved: {tree}"
    );
    drop_schema(&pg);
}
