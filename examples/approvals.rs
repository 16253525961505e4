//! A host running a tree on a real provider, with every child's tool call approved by a
//! person at the root, read from stdin. Any OpenAI-compatible server works (OpenAI, or a
//! local llama.cpp / vLLM / Ollama server):
//!
//! ```sh
//! OPENAI_BASE_URL=http://127.0.0.1:8080/v1 ARBOR_MODEL=qwen2.5 \
//!   cargo run -p arbor-core --example approvals -- "Write a haiku about trees, then save it"
//! ```
//!
//! The root may delegate to `writer`, whose `save` tool is a side effect: with durable
//! approvals, the run suspends on it and this program asks `approve? [y/N]` for each call it
//! waits on (with the child's path, the tool and its arguments), then resumes; an approved
//! call runs exactly once, even if the program is restarted in between (the decisions and
//! the suspended run are in the store).

// An example program: it prints what it did.
#![allow(clippy::print_stdout)]

use std::io::{BufRead, Write};
use std::sync::Arc;

use arbor_core::supervisor::{ChildEntry, Ownership, Supervisor, factory_fn};
use arbor_core::{Agent, RunOptions, Tool, ToolContext, ToolError, async_trait};
use arbor_model::http::{OpenAiConfig, OpenAiProvider};
use arbor_protocol::{ApprovalDecision, RunStatus, Verdict};

/// The side effect: "saves" a text (prints it).
#[derive(Debug, Clone)]
struct Save;

#[derive(Debug, serde::Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
struct SaveArgs {
    /// What to save.
    text: String,
}

#[async_trait]
impl Tool for Save {
    type Args = SaveArgs;
    type Output = String;
    fn name(&self) -> &str {
        "save"
    }
    fn description(&self) -> &str {
        "Saves a text for the user."
    }
    async fn call(&self, args: SaveArgs, _ctx: ToolContext) -> Result<String, ToolError> {
        println!("[saved] {}", args.text);
        Ok("saved".to_owned())
    }
}

/// Asks the person for each pending call; `y` approves it once, anything else rejects it.
fn ask(pending: &[arbor_protocol::PendingDecision]) -> Vec<ApprovalDecision> {
    let stdin = std::io::stdin();
    let mut decisions = Vec::new();
    for p in pending {
        print!(
            "{} wants to call {} with {}: approve? [y/N] ",
            p.path.join(" > "),
            p.tool,
            p.arguments
        );
        let _ = std::io::stdout().flush();
        let mut line = String::new();
        let _ = stdin.lock().read_line(&mut line);
        let verdict = if line.trim().eq_ignore_ascii_case("y") {
            Verdict::AllowOnce
        } else {
            Verdict::RejectOnce
        };
        decisions.push(ApprovalDecision::new(&p.id, verdict));
    }
    decisions
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let task = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "Write a haiku about trees, then have it saved".to_owned());
    let model = std::env::var("ARBOR_MODEL").unwrap_or_else(|_| "gpt-4o-mini".to_owned());
    let provider = OpenAiProvider::new(OpenAiConfig::from_env())?;

    let writer_model = model.clone();
    let writer_provider = provider.clone();
    let supervisor = Supervisor::builder(Ownership::user("local", "me"))
        .child(
            ChildEntry::new(
                "writer",
                factory_fn(move |_ctx| {
                    let (model, provider) = (writer_model.clone(), writer_provider.clone());
                    async move {
                        Agent::builder("writer")
                            .provider(provider)
                            .model(model)
                            .system("You write short texts and save them with the save tool.")
                            .tool(Save)
                            .build()
                    }
                }),
            )
            .description("writes a text and saves it"),
        )
        // Every call of every child waits for a decision at the root.
        .durable_approvals("approvals-example-v1")
        .build()?;
    let root = Agent::builder("root")
        .provider(provider)
        .model(model)
        .system("Delegate writing to the writer child with spawn_agent.")
        .dyn_tools(supervisor.delegator().tools())
        .build()?;
    let mut session = supervisor.root_session(&root, |s| s).await?;
    let options = || RunOptions::default().with_nested(Arc::new(supervisor.clone()));

    let mut result = session.run(&task, options()).await?;
    while result.status == RunStatus::Suspended {
        let Some(waiting) = result.suspension.clone() else {
            break;
        };
        let decisions = ask(&waiting.pending);
        result = session
            .approve(waiting.run_id, waiting.version, &decisions, options())
            .await?;
    }
    supervisor.shutdown().await;
    println!("{:?}: {}", result.status, result.text);
    Ok(())
}
