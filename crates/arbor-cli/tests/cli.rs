//! The `arbor` binary, run as a user would.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::path::Path;
use std::process::{Command, Output};

const REVIEW: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../../examples/review.toml");

fn arbor(dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env("ARBOR_BUSY_TIMEOUT_MS", "200")
        .output()
        .unwrap()
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn session<'a>(report: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    report["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["name"] == name)
        .unwrap_or_else(|| panic!("no session {name}"))
}

#[test]
fn review_json_report_on_the_default_sqlite_store() {
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["run", REVIEW, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["status"], "succeeded");
    assert_eq!(report["store"], "sqlite");
    let root = session(&report, "root");
    assert_eq!(root["parent_id"], serde_json::Value::Null);
    assert_eq!(root["depth"], 0);
    assert_eq!(root["usage"]["own"]["total_tokens"], 40_000);
    assert_eq!(root["context_tokens"], 40_000);
    assert_eq!(root["usage"]["aggregate"]["total_tokens"], 740_000);
    let audit = session(&report, "audit");
    assert_eq!(audit["usage"]["own"]["total_tokens"], 250_000);
    assert_eq!(audit["usage"]["aggregate"]["total_tokens"], 310_000);
    assert_eq!(audit["context_tokens"], 250_000);
    assert_eq!(report["reconciliation"]["consistent"], true);
    assert_eq!(report["reconciliation"]["own_total_tokens"], 740_000);
    assert_eq!(report["reconciliation"]["root_aggregate_tokens"], 740_000);
    let helper = session(&report, "audit-helper");
    assert_eq!(helper["parent_id"], audit["id"]);
    assert_eq!(helper["depth"], 2);
    assert_eq!(helper["usage"]["own"]["total_tokens"], 60_000);
    assert_eq!(report["sessions"].as_array().unwrap().len(), 5);
    assert_eq!(report["tree_own_total_tokens"], 740_000);
    assert!(dir.path().join(".arbor/arbor.db").exists());
    // Progress goes to stderr and shows each delegation.
    let err = stderr(&out);
    assert!(err.contains("root: run started"), "{err}");
    assert!(
        err.contains("audit-helper: delegation started (depth 2)"),
        "{err}"
    );
    assert!(err.contains("root: run succeeded"), "{err}");
}

#[cfg(unix)]
#[test]
fn the_default_store_is_private_to_its_owner() {
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["run", REVIEW, "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&dir.path().join(".arbor")), 0o700);
    assert_eq!(mode(&dir.path().join(".arbor/arbor.db")), 0o600);
    assert!(!stderr(&out).contains("WARN"), "{}", stderr(&out));

    // A directory made by someone else keeps its mode, and the run says it is open.
    let other = tempfile::tempdir().unwrap();
    let arbor_dir = other.path().join(".arbor");
    std::fs::create_dir(&arbor_dir).unwrap();
    std::fs::set_permissions(&arbor_dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    let out = arbor(other.path(), &["run", REVIEW, "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(mode(&arbor_dir), 0o755);
    assert_eq!(mode(&arbor_dir.join("arbor.db")), 0o600);
    let err = stderr(&out);
    let warnings: Vec<&str> = err.lines().filter(|l| l.contains("WARN")).collect();
    assert_eq!(warnings.len(), 1, "{err}");
    assert!(
        warnings[0].contains("the store's directory is open to other users")
            && warnings[0].contains("chmod 700 .arbor"),
        "{err}"
    );
}

#[test]
fn memory_store_leaves_no_file_and_the_table_has_separators() {
    let dir = tempfile::tempdir().unwrap();
    let out = arbor(dir.path(), &["run", REVIEW, "--memory", "--quiet"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!dir.path().join(".arbor").exists());
    let table = stdout(&out);
    assert!(table.contains("40,000"), "{table}");
    assert!(table.contains("740,000"), "{table}");
    assert!(table.contains("audit-helper"), "{table}");
    assert!(stderr(&out).is_empty(), "quiet: {}", stderr(&out));
}

#[test]
fn bad_specs_fail_with_one_line_and_exit_2() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("bad.toml"),
        "task = \"x\"\n[agents.root]\nmodel = \"scripted\"\n\n[[agents.root.turns]]\ntxet = \"typo\"\n",
    )
    .unwrap();
    let out = arbor(dir.path(), &["run", "bad.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(
        err.starts_with("error: bad.toml:6: unknown field `txet`"),
        "{err}"
    );
    assert!(
        !dir.path().join(".arbor").exists(),
        "a bad spec opens no store"
    );

    let out = arbor(dir.path(), &["run", "missing.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.starts_with("error: cannot read missing.toml:"), "{err}");

    std::fs::write(
        dir.path().join("broken.toml"),
        "task = \"x\"\n[agents.root\n",
    )
    .unwrap();
    let out = arbor(dir.path(), &["run", "broken.toml"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(
        stderr(&out).starts_with("error: broken.toml:2:"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_limit_breach_exits_1_with_the_breach_in_the_report() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("big.toml"),
        "task = \"x\"\n[agents.root]\nlimits = { max_tokens = 100 }\n[[agents.root.turns]]\ntext = \"hi\"\nusage = { input_tokens = 150, output_tokens = 1 }\n",
    )
    .unwrap();
    let out = arbor(dir.path(), &["run", "big.toml", "--json", "--memory"]);
    assert_eq!(out.status.code(), Some(1));
    let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(report["status"], "failed");
    assert_eq!(
        report["result"]["breach"],
        serde_json::json!({"limit": "max_tokens", "maximum": 100, "observed": 151})
    );
    assert!(stderr(&out).contains("limit max_tokens exceeded (maximum 100, observed 151)"));
}

#[test]
fn a_locked_store_is_a_clear_error_and_its_data_survives() {
    let dir = tempfile::tempdir().unwrap();
    let first = arbor(dir.path(), &["run", REVIEW, "--json", "-q"]);
    assert!(first.status.success());
    let first: serde_json::Value = serde_json::from_str(&stdout(&first)).unwrap();
    let db = dir.path().join(".arbor/arbor.db");
    let lock = rusqlite::Connection::open(&db).unwrap();
    lock.execute_batch("BEGIN EXCLUSIVE").unwrap();
    let out = arbor(dir.path(), &["run", REVIEW, "-q"]);
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let err = stderr(&out);
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("is locked by another process"), "{err}");
    lock.execute_batch("COMMIT").unwrap();
    drop(lock);
    // The earlier run is intact and the store works again.
    let conn = rusqlite::Connection::open(&db).unwrap();
    let root: String = first["root_session_id"].as_str().unwrap().to_owned();
    let n: i64 = conn
        .query_row(
            "SELECT count(*) FROM sessions WHERE root_id = ?1",
            [&root],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(n, 5);
    drop(conn);
    let again = arbor(dir.path(), &["run", REVIEW, "-q"]);
    assert!(again.status.success(), "{}", stderr(&again));
}

/// A child agent asks for more than the supervisor's ceiling over children allows.
const CEILING: &str = r#"
task = "Loop."
root = "root"

[agents.root]
children = ["worker"]

[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "worker", name = "worker", input = "Go." } }]

[[agents.root.turns]]
text = "done"

[agents.worker]
tools = ["echo"]
limits = { max_steps = 20, timeout_ms = 600000 }
repeat_last = true

[[agents.worker.turns]]
tool_calls = [{ name = "echo", arguments = { text = "again" } }]
"#;

#[test]
fn a_limit_the_ceiling_lowers_is_warned_by_validate_and_named_when_it_fires() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("ceiling.toml"), CEILING).unwrap();
    let v = arbor(dir.path(), &["validate", "ceiling.toml"]);
    assert!(v.status.success(), "{}", stderr(&v));
    // The effective limits, and a warning per lowered value naming the key to raise.
    assert!(
        stdout(&v).contains("worker: scripted scripted, tools echo, limits 8 steps, 32 tool calls, 20,000 tokens, 60,000 ms"),
        "{}",
        stdout(&v)
    );
    let warned = stderr(&v);
    for (key, written, now) in [
        ("max_steps", "20", "8"),
        ("timeout_ms", "600,000", "60,000"),
    ] {
        assert!(
            warned.contains(&format!(
                "warning: agents.worker.limits.{key} = {written} is lowered to {now} when worker \
                 runs as a child, by the supervisor's ceiling (its built-in default); raise \
                 [supervisor] limits.{key} to allow it"
            )),
            "{warned}"
        );
    }
    let json_out = arbor(dir.path(), &["validate", "ceiling.toml", "--json"]);
    let report: serde_json::Value = serde_json::from_slice(&json_out.stdout).unwrap();
    let worker = report["agents"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["name"] == "worker")
        .unwrap();
    assert_eq!(
        worker["limits"]["timeout_ms"],
        serde_json::json!({"value": 60000, "from": "supervisor_default", "written": 600000,
            "raise": "supervisor.limits.timeout_ms"})
    );
    assert_eq!(report["warnings"].as_array().unwrap().len(), 2);
    // When it fires, the line says where the bound came from.
    let run = arbor(
        dir.path(),
        &["run", "ceiling.toml", "--progress", "lines", "--memory"],
    );
    let said = stderr(&run);
    assert!(
        said.contains(
            "worker: child failed: Delegation run limit exceeded: max_steps (maximum 8, observed \
             9) (the supervisor's built-in \
             ceiling over children, below what agents.worker.limits asks for; raise it with \
             [supervisor] limits.max_steps)"
        ),
        "{said}"
    );
    // Raised, nothing is lowered.
    let raised = CEILING.replace(
        "[agents.root]",
        "[supervisor]\nlimits = { max_steps = 20, timeout_ms = 600000 }\n\n[agents.root]",
    );
    std::fs::write(dir.path().join("raised.toml"), raised).unwrap();
    let v = arbor(dir.path(), &["validate", "raised.toml"]);
    assert!(!stderr(&v).contains("warning"), "{}", stderr(&v));
}
