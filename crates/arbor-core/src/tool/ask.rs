//! `ask_human`: a question from any depth to the person at the root.
//!
//! An agent given [`AskHuman`] (granted like any tool: the agent must have it, and its
//! permission must allow the call) may ask a free-text question, optionally with choices. The
//! call does not run: the asking run suspends through the same checkpoint machinery as an
//! approval ([`crate::approval`]), and the question waits at the root with the calls waiting
//! for approval (its pending decision's `tool` is [`ASK_HUMAN`], its `arguments` the
//! [`Question`]). A person answers it once, compare-and-swap like any decision: an
//! `allow_once` decision whose `reason` is the answer ([`answer`]), or a `reject_once`
//! (declined, with an optional reason). On resume, in this process or another after a
//! restart, the answer is the call's result; a decline is an error result the model reads.
//!
//! What a question may hold and what answers it: [`crate::approval::question`] (re-exported
//! here).

pub use crate::approval::question::{
    ASK_HUMAN, MAX_ANSWER_BYTES, MAX_CHOICE_BYTES, MAX_CHOICES, MAX_QUESTION_BYTES, Question,
    answer,
};

use arbor_model::ToolSpec;
use async_trait::async_trait;
use serde_json::Value;

use crate::tool::{DynTool, ToolContext, ToolError, tool_schema};

/// The `ask_human` tool: its calls wait for a person at the root (see the module docs).
#[derive(Debug, Clone)]
pub struct AskHuman {
    spec: ToolSpec,
}

impl AskHuman {
    /// The tool.
    pub fn new() -> Self {
        Self {
            spec: ToolSpec {
                name: ASK_HUMAN.to_owned(),
                description: "Asks the person supervising this work a question and waits for \
                              the answer, which is this call's result. Ask only what you cannot \
                              find out yourself; give choices when the answer is one of a few."
                    .to_owned(),
                parameters: tool_schema::<Question>(),
            },
        }
    }
}

impl Default for AskHuman {
    fn default() -> Self {
        Self::new()
    }
}

#[async_trait]
impl DynTool for AskHuman {
    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn exclusive(&self) -> bool {
        false
    }

    fn asks_human(&self) -> bool {
        true
    }

    /// Called outside a run loop (which holds the call for a person instead): nobody can be
    /// asked here.
    async fn call_json(&self, arguments: Value, _ctx: ToolContext) -> Result<String, ToolError> {
        Question::parse(&arguments).map_err(|e| ToolError::ToModel(e.to_string()))?;
        Err(ToolError::ToModel(
            "ask_human needs a run that can suspend for a person; nobody can be asked here"
                .to_owned(),
        ))
    }
}
