//! `read_child` from a spec: a parent given it (`delegation_tools`) reads the rest of a
//! child's answer that `max_result_bytes` cut, by pages, in the same run.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

use serde_json::Value;

const SPEC: &str = r#"
task = "read"

[supervisor]
limits = { max_result_bytes = 256 }

[agents.root]
children = ["writer"]
delegation_tools = ["spawn_agent", "read_child"]
[[agents.root.turns]]
tool_calls = [{ name = "spawn_agent", arguments = { child_id = "writer", name = "writer", input = "write" } }]
[[agents.root.turns]]
tool_calls = [{ name = "read_child", arguments = { child = "writer", kinds = ["message"], limit = 5 } }]
[[agents.root.turns]]
text = "read it"

[agents.writer]
[[agents.writer.turns]]
text = "START ........................................................................................................................................................................................................................................................................................................................ END"
"#;

#[test]
fn a_parent_reads_what_its_childs_capped_answer_left_out() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), SPEC).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["run", "s.toml", "--json", "-q"])
        .current_dir(dir.path())
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap();
    let report: Value = serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out.stderr)));
    assert_eq!(report["status"], "succeeded", "{report}");
    let root = report["root_session_id"].as_str().unwrap();
    let log = Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(["log", root, "--json"])
        .current_dir(dir.path())
        .output()
        .unwrap();
    let results: Vec<String> = String::from_utf8_lossy(&log.stdout)
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["kind"] == "message" && e["message"]["role"] == "tool")
        .map(|e| e["message"]["content"].as_str().unwrap().to_owned())
        .collect();
    // The spawn's answer was cut; the page of the child's messages is capped too, and says
    // where to read on. The END of the answer is in the page or beyond next_after.
    assert!(results[0].contains("[truncated:"), "{}", results[0]);
    let page: Value = serde_json::from_str(&results[1]).unwrap();
    assert_eq!(page["name"], "writer", "{page}");
    assert!(results[1].len() <= 256, "{} bytes", results[1].len());
    assert!(page["entries"].is_array(), "{page}");
    assert!(
        page["next_after"].is_u64() || results[1].contains("END"),
        "{page}"
    );
}
