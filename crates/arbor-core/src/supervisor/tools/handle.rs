//! The model-facing tools that act on an async child's handle: `wait_agent` (its answer, or
//! that it was cancelled; a handle that died with its process is rejoined from the store) and
//! `cancel_agent`. A model reaches the handles of its own tree only: another tree's id is as
//! unknown as one never issued.

use arbor_model::ToolSpec;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::supervisor::delegation::join::{WaitOptions, WaitOutcome};
use crate::supervisor::runtime::{Delegator, Supervisor};
use crate::supervisor::tools::model_tool::ModelTool;
use crate::supervisor::tools::report::{self, CancelReport, HandleStatus, HandleUpdate, finished};
use crate::supervisor::tree::handles::Reach;
use crate::tool::{ToolContext, ToolError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct HandleArgs {
    delegation_id: String,
}

/// What the two handle tools share: the delegator, and a spec taking one handle.
#[derive(Debug, Clone)]
struct OnHandle {
    delegator: Delegator,
    spec: ToolSpec,
}

impl OnHandle {
    fn new(delegator: Delegator, name: &str, description: &str) -> Self {
        Self {
            delegator,
            spec: ToolSpec {
                name: name.to_owned(),
                description: description.to_owned(),
                parameters: json!({
                    "type": "object",
                    "properties": {"delegation_id": {"type": "string"}},
                    "required": ["delegation_id"],
                    "additionalProperties": false
                }),
            },
        }
    }
}

/// `wait_agent`: wait for one async child by its handle.
#[derive(Debug, Clone)]
pub struct WaitAgentTool(OnHandle);

impl WaitAgentTool {
    /// The tool, named `wait_agent`.
    pub fn new(delegator: Delegator) -> Self {
        Self(OnHandle::new(
            delegator,
            "wait_agent",
            "Wait for one async child delegation by its handle.",
        ))
    }
}

#[async_trait]
impl ModelTool for WaitAgentTool {
    type Args = HandleArgs;

    fn spec(&self) -> &ToolSpec {
        &self.0.spec
    }

    fn supervisor(&self) -> &Supervisor {
        self.0.delegator.supervisor()
    }

    async fn call(&self, args: HandleArgs, ctx: ToolContext) -> Result<String, ToolError> {
        let options = WaitOptions {
            timeout: None,
            cancel: Some(ctx.cancel.clone()),
        };
        match self
            .0
            .delegator
            .supervisor()
            .wait_from(
                Reach::Tree(ctx.session.root_id),
                &args.delegation_id,
                options,
            )
            .await
        {
            Ok(WaitOutcome::Finished(r)) => Ok(finished(&self.0.delegator, &r)),
            Ok(WaitOutcome::Cancelled { delegation_id }) => Ok(report::text(&HandleUpdate {
                delegation_id,
                status: HandleStatus::Cancelled,
            })),
            // The handle died with the process that held it (this run was continued in
            // another one), or its run suspended (a question, an approval) and was resumed on
            // its own since: the child is rejoined from the store (read once it ended).
            Err(e)
                if e.deny_reason() == Some(crate::error::DenyReason::Unknown)
                    || e.kind() == crate::CoreErrorKind::Suspended =>
            {
                let sup = self.0.delegator.supervisor();
                match sup
                    .rejoin_handle(ctx.session.id, &args.delegation_id, &ctx.cancel)
                    .await
                {
                    Ok(Some(r)) => Ok(finished(&self.0.delegator, &r)),
                    Ok(None) => Err(sup.model_error(&e)),
                    Err(again) => Err(sup.model_error(&again)),
                }
            }
            Err(e) => Err(self.0.delegator.supervisor().model_error(&e)),
        }
    }
}

/// `cancel_agent`: cancel one async child by its handle.
#[derive(Debug, Clone)]
pub struct CancelAgentTool(OnHandle);

impl CancelAgentTool {
    /// The tool, named `cancel_agent`.
    pub fn new(delegator: Delegator) -> Self {
        Self(OnHandle::new(
            delegator,
            "cancel_agent",
            "Cancel one async child delegation by its handle.",
        ))
    }
}

#[async_trait]
impl ModelTool for CancelAgentTool {
    type Args = HandleArgs;

    fn spec(&self) -> &ToolSpec {
        &self.0.spec
    }

    fn supervisor(&self) -> &Supervisor {
        self.0.delegator.supervisor()
    }

    async fn call(&self, args: HandleArgs, ctx: ToolContext) -> Result<String, ToolError> {
        // A model reaches its own tree's handles only: another tree's id is unknown to it.
        let reach = Reach::Tree(ctx.session.root_id);
        match self
            .0
            .delegator
            .supervisor()
            .end_reported(reach, &args.delegation_id, None, false)
            .await
        {
            Ok(ended) if !ended.stopped.is_empty() => Ok(report::text(&CancelReport {
                delegation_id: args.delegation_id,
                status: HandleStatus::Cancelling,
                stopped: ended.stopped,
            })),
            Ok(ended) => Ok(report::text(&HandleUpdate {
                delegation_id: args.delegation_id,
                status: if ended.running {
                    HandleStatus::Cancelling
                } else {
                    HandleStatus::Terminal
                },
            })),
            Err(e) => Err(self.0.delegator.supervisor().model_error(&e)),
        }
    }
}
