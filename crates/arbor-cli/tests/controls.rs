//! An agent's model controls in a spec (`[agents.NAME.controls]`): checked by `arbor
//! validate` naming the agent, the control and the line; a spec with valid ones runs.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

fn arbor(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

#[test]
fn controls_are_checked_by_name_and_a_spec_with_valid_ones_runs() {
    let dir = tempfile::tempdir().unwrap();
    for (body, said) in [
        (
            "temperature = 3.0",
            "controls.temperature: temperature 3 is not 0 to 2",
        ),
        (
            "stop = [\"a\", \"b\", \"c\", \"d\", \"e\"]",
            "controls.stop: 5 stop sequences; at most 4",
        ),
        (
            "extra = { messages = [] }",
            "controls.extra: extra may not set \"messages\"",
        ),
        ("temprature = 1.0", "unknown field `temprature`"),
    ] {
        let text = format!(
            "task = \"x\"\n[agents.root]\n[agents.root.controls]\n{body}\n[[agents.root.turns]]\ntext = \"hi\"\n"
        );
        std::fs::write(dir.path().join("bad.toml"), text).unwrap();
        let out = arbor(dir.path(), &["validate", "bad.toml"]);
        assert_eq!(out.status.code(), Some(2), "{body}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("bad.toml:") && err.contains(said),
            "{body}: {err}"
        );
    }
    let ok = "task = \"x\"\n[agents.root]\n[agents.root.controls]\ntemperature = 0.2\nstop = [\"END\"]\n\
              tool_choice = \"required\"\nparallel_tool_calls = false\nextra = { min_p = 0.05 }\n\
              [[agents.root.turns]]\ntext = \"hi\"\n";
    std::fs::write(dir.path().join("ok.toml"), ok).unwrap();
    assert!(arbor(dir.path(), &["validate", "ok.toml"]).status.success());
    let run = arbor(dir.path(), &["run", "--memory", "ok.toml"]);
    assert!(
        run.status.success(),
        "{}",
        String::from_utf8_lossy(&run.stderr)
    );
}
