//! Two tenants, `a` and `b` (and an operator's token), over a directory of specs.

use serde_json::{Value, json};

use super::{Served, serve_env};

/// A spec whose root and its one child answer at once.
pub(crate) const QUICK: &str = r#"
task = "say hello"
root = "root"

[agents.root]
children = ["helper"]
repeat_last = true
[[agents.root.turns]]
text = "hello"

[agents.helper]
repeat_last = true
[[agents.helper.turns]]
text = "helped"
"#;

/// A spec whose root takes a minute.
pub(crate) const SLOW: &str = r#"
task = "take a minute"
root = "root"

[agents.root]
repeat_last = true
[[agents.root.turns]]
delay_ms = 60000
text = "late"
"#;

pub(crate) const TOKEN_A: &str = "token-of-tenant-a-0123456789";
pub(crate) const TOKEN_B: &str = "token-of-tenant-b-0123456789";
pub(crate) const TOKEN_OPS: &str = "token-of-the-operator-0123456789";

/// A server over a fresh directory holding `specs/quick.toml` and `specs/slow.toml`, with
/// tenants `a` and `b`.
pub(crate) fn two_tenants(extra: &[&str]) -> (tempfile::TempDir, Served) {
    two_tenants_env(extra, &[])
}

/// [`two_tenants`] with more of the environment.
pub(crate) fn two_tenants_env(extra: &[&str], env: &[(&str, &str)]) -> (tempfile::TempDir, Served) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir(dir.path().join("specs")).unwrap();
    std::fs::write(dir.path().join("specs/quick.toml"), QUICK).unwrap();
    std::fs::write(dir.path().join("specs/slow.toml"), SLOW).unwrap();
    let tokens = format!("a={TOKEN_A},b={TOKEN_B}");
    let mut env = env.to_vec();
    env.push(("ARBOR_TOKENS", &tokens));
    let served = serve_env(dir.path(), extra, &env);
    (dir, served)
}

/// Starts a run of `spec` as tenant A: its root's id.
pub(crate) async fn start(http: &reqwest::Client, base: &str, spec: &str) -> String {
    let resp = http
        .post(format!("{base}/v1/runs"))
        .bearer_auth(TOKEN_A)
        .json(&json!({"spec": spec}))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 201);
    let run: Value = resp.json().await.unwrap();
    run["root_id"].as_str().unwrap().to_owned()
}
