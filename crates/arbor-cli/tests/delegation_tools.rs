//! A lean tool set: the delegation tools each agent of a spec gets (`delegation_tools`, or by
//! default what its children's modes need), as its model is shown them on the wire; the
//! listed ones checked by `arbor validate`; and the root prompt of `examples/review.toml`
//! at least 40 % smaller with its lean set than with all seven tools.
#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use arbor_model::testing::{Canned, ReplayServer};
use serde_json::Value;

const TEXT: &[u8] = include_bytes!("../../arbor-model/tests/fixtures/openai/text.sse");

fn arbor(dir: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_arbor"))
        .args(args)
        .current_dir(dir)
        .env_remove("ARBOR_LOG")
        .output()
        .unwrap()
}

/// The body of the root's first model call when `spec` runs with its root on a replay
/// server (`{base}` in the spec is the server's URL).
async fn root_request(spec: &str) -> Value {
    let server = ReplayServer::start(vec![
        Canned::json(200, r#"{"id":"m","object":"model"}"#),
        Canned::sse(TEXT),
    ])
    .await
    .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let text = spec.replace("{base}", &server.url);
    std::fs::write(dir.path().join("s.toml"), text).unwrap();
    let out = arbor(dir.path(), &["run", "--memory", "s.toml", "-q"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let chat = server
        .requests()
        .into_iter()
        .find(|r| r.path.ends_with("/chat/completions"))
        .unwrap();
    serde_json::from_str(&chat.body).unwrap()
}

fn names(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|t| {
            t.iter()
                .map(|t| t["function"]["name"].as_str().unwrap().to_owned())
                .collect()
        })
        .unwrap_or_default()
}

const HEAD: &str = "task = \"t\"\n[providers.fake]\nkind = \"openai\"\nbase_url = \"{base}/v1\"\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_agent_is_shown_only_the_delegation_tools_it_gets() {
    // A parent by default: spawn, the handle tools and send_message.
    let parent = format!(
        "{HEAD}[agents.root]\nprovider = \"fake\"\nmodel = \"m\"\nchildren = [\"kid\"]\n\
         [agents.kid]\n[[agents.kid.turns]]\ntext = \"k\"\n"
    );
    let body = root_request(&parent).await;
    assert_eq!(
        names(&body),
        ["send_message", "spawn_agent", "wait_agent", "cancel_agent"]
    );
    // The options its children cannot use are not offered.
    let spawn = &body["tools"][1]["function"]["parameters"]["properties"];
    assert!(
        spawn.get("model").is_none() && spawn.get("thinking").is_none(),
        "{spawn}"
    );
    assert!(spawn.get("lifetime").is_some(), "{spawn}");

    // Listed: spawn_agent alone offers only the modes it can follow.
    let listed = parent.replace(
        "children = [\"kid\"]\n",
        "children = [\"kid\"]\ndelegation_tools = [\"spawn_agent\"]\n",
    );
    let body = root_request(&listed).await;
    assert_eq!(names(&body), ["spawn_agent"]);
    let spawn = &body["tools"][0]["function"];
    assert_eq!(
        spawn["parameters"]["properties"]["mode"]["enum"],
        serde_json::json!(["sync", "message"])
    );
    assert!(spawn["parameters"]["properties"].get("lifetime").is_none());
    assert!(
        !spawn["description"]
            .as_str()
            .unwrap()
            .contains("wait_agent"),
        "{spawn}"
    );

    // A root without children gets no tool at all.
    let alone = format!("{HEAD}[agents.root]\nprovider = \"fake\"\nmodel = \"m\"\n");
    let body = root_request(&alone).await;
    assert!(body.get("tools").is_none(), "{body}");
}

#[test]
fn listed_delegation_tools_are_checked_by_name() {
    let dir = tempfile::tempdir().unwrap();
    for (agent, said) in [
        (
            "children = [\"kid\"]\ndelegation_tools = [\"spawn_agent\", \"fork\"]",
            "agent \"root\": delegation_tools: unknown tool \"fork\" (known: send_message, \
             spawn_agent, wait_agent, cancel_agent, list_children, rename_child, find_models, \
             read_child)",
        ),
        (
            "children = [\"kid\"]\ndelegation_tools = [\"wait_agent\"]",
            "delegation_tools: list spawn_agent: without it the agent cannot reach its children",
        ),
        (
            "delegation_tools = [\"wait_agent\"]",
            "delegation_tools: \"wait_agent\" acts on children, and the agent has none",
        ),
        (
            "children = [\"kid\"]\ndelegation_tools = [\"spawn_agent\", \"spawn_agent\"]",
            "delegation_tools: \"spawn_agent\" is listed twice",
        ),
    ] {
        let text = format!(
            "task = \"t\"\n[agents.root]\n{agent}\n[[agents.root.turns]]\ntext = \"r\"\n\
             [agents.kid]\n[[agents.kid.turns]]\ntext = \"k\"\n"
        );
        std::fs::write(dir.path().join("s.toml"), text).unwrap();
        let out = arbor(dir.path(), &["validate", "s.toml"]);
        assert_eq!(out.status.code(), Some(2), "{agent}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains("s.toml:") && err.contains(said),
            "{agent}: {err}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_review_roots_prompt_is_at_least_40_percent_smaller_with_its_lean_set() {
    let example = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../examples/review.toml"
    ))
    .unwrap();
    assert!(example.contains("delegation_tools = [\"spawn_agent\"]"));
    // The root on the OpenAI wire: its scripted turns give way to the replay server.
    let on_wire = |text: &str| {
        format!("{text}\n[providers.fake]\nkind = \"openai\"\nbase_url = \"{{base}}/v1\"\n")
            .replacen(
                "[agents.root]\n",
                "[agents.root]\nprovider = \"fake\"\nmodel = \"m\"\n",
                1,
            )
    };
    let lean = root_request(&on_wire(&example)).await;
    let all = example.replace(
        "delegation_tools = [\"spawn_agent\"]",
        "delegation_tools = [\"send_message\", \"spawn_agent\", \"wait_agent\", \
         \"cancel_agent\", \"list_children\", \"rename_child\", \"find_models\"]",
    );
    let full = root_request(&on_wire(&all)).await;
    let (lean, full) = (lean.to_string().len(), full.to_string().len());
    assert!(
        lean * 10 <= full * 6,
        "the lean request is {lean} bytes against {full} with every tool"
    );
}
