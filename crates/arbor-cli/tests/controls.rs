//! An agent's model controls in a spec (`[agents.NAME.controls]`): checked by `arbor
//! validate` naming the agent, the control and the line; a spec with valid ones runs.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::process::Command;

use serde_json::json;

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
        (
            "top_p = 0.0",
            "controls.top_p: top_p 0 is not above 0 and at most 1",
        ),
        (
            "max_output_tokens = 0",
            "controls.max_output_tokens: max_output_tokens is at least 1",
        ),
        ("seed = -1", "invalid value: integer `-1`"),
        (
            "tool_choice = { tool = \" \" }",
            "controls.tool_choice: tool_choice names no tool",
        ),
        (
            "tool_choice_after_call = { tool = \"\" }",
            "controls.tool_choice_after_call: tool_choice_after_call names no tool",
        ),
        ("tool_choice = \"sometimes\"", "unknown variant `sometimes`"),
        (
            "parallel_tool_calls = \"yes\"",
            "invalid type: string \"yes\", expected a boolean",
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
              top_p = 0.9\nseed = 7\nmax_output_tokens = 256\ntool_choice_after_call = \"none\"\n\
              tool_choice = \"auto\"\nparallel_tool_calls = false\nextra = { min_p = 0.05 }\n\
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

const TEXT: &[u8] = include_bytes!("../../arbor-model/tests/fixtures/openai/text.sse");

/// A spec whose root and `writer` child run on an OpenAI-compatible server at `base`.
fn on_server(base: &str) -> String {
    format!(
        r#"task = "write"
[providers.fake]
kind = "openai"
base_url = "{base}/v1"
api_key_env = "FAKE_KEY"
[agents.root]
provider = "fake"
model = "m"
children = ["writer"]
[agents.root.controls]
temperature = 0.9
top_p = 0.5
[agents.writer]
provider = "fake"
model = "m"
"#
    )
}

fn body(r: &arbor_model::testing::Recorded) -> serde_json::Value {
    serde_json::from_str(&r.body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_controls_reach_the_wire_over_the_specs_and_are_refused_by_name() {
    use arbor_model::testing::{Canned, ReplayServer};
    let server = ReplayServer::start(vec![
        Canned::json(200, r#"{"id":"m","object":"model"}"#),
        Canned::sse(TEXT),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("s.toml"), on_server(&server.url)).unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--memory", "s.toml", "-q"];
        args.extend_from_slice(extra);
        Command::new(env!("CARGO_BIN_EXE_arbor"))
            .args(&args)
            .current_dir(dir.path())
            .env_remove("ARBOR_LOG")
            .env("FAKE_KEY", "k")
            .output()
            .unwrap()
    };
    let out = run(&[
        "--controls",
        r#"{"temperature": 0, "seed": 7, "tool_choice": "none"}"#,
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let sent = server.requests();
    assert_eq!(sent.len(), 2);
    let b = body(&sent[1]);
    assert_eq!(
        (
            &b["temperature"],
            &b["top_p"],
            &b["seed"],
            &b["tool_choice"]
        ),
        (&json!(0.0), &json!(0.5), &json!(7), &json!("none")),
        "{b}"
    );
    // Refused by name before any call.
    for (controls, said) in [
        (
            r#"{"temperature": 3}"#,
            "controls.temperature: temperature 3 is not 0 to 2",
        ),
        (r#"{"tempo": 1}"#, "unknown field `tempo`"),
    ] {
        let out = run(&["--controls", controls]);
        assert_eq!(out.status.code(), Some(2), "{controls}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains(said), "{controls}: {err}");
    }
    assert_eq!(server.requests().len(), 2, "no call was made");
    // The Messages wire has no seed: `arbor validate` names the agent and the control.
    let anthropic = "task = \"x\"\n[agents.root]\nprovider = \"anthropic\"\nmodel = \"m\"\n\
                     [agents.root.controls]\nseed = 1\n";
    std::fs::write(dir.path().join("a.toml"), anthropic).unwrap();
    let out = arbor(dir.path(), &["validate", "a.toml"]);
    assert_eq!(out.status.code(), Some(2));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("agent \"root\": controls.seed: provider \"anthropic\" cannot carry seed"),
        "{err}"
    );
}
