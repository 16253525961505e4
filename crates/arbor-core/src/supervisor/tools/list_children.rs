//! `list_children`: the model's view of its own registry. It reads the host's record in the
//! store, never the model's context, so after a compaction or a restart the model asks again
//! and sees every direct child: its name, status (`interrupted` when a process died under its
//! run), model, how it reports, whether it replied or wrote artifacts, and both token totals. Deleted children
//! and grandchildren are not listed.

use arbor_model::ToolSpec;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::registry;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::model_tool::ModelTool;
use crate::tool::{ToolContext, ToolError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct ListArgs {}

/// The `list_children` tool of one supervisor's tree.
#[derive(Debug, Clone)]
pub struct ListChildrenTool {
    supervisor: Supervisor,
    spec: ToolSpec,
}

impl ListChildrenTool {
    /// The tool.
    pub fn new(supervisor: Supervisor) -> Self {
        let spec = ToolSpec {
            name: "list_children".to_owned(),
            description: "List your direct children as the host records them: name, status, \
                          model, mode, replies and tokens. Use it after a restart or when \
                          unsure what still runs."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {},
                "additionalProperties": false
            }),
        };
        Self { supervisor, spec }
    }
}

#[async_trait]
impl ModelTool for ListChildrenTool {
    type Args = ListArgs;

    const ARGUMENTS_OPTIONAL: bool = true;

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    async fn call(&self, _args: ListArgs, ctx: ToolContext) -> Result<String, ToolError> {
        let sup = &self.supervisor;
        let rows = registry::children(self.supervisor.store().as_ref(), ctx.session.id, false)
            .await
            .map_err(|e| sup.model_error(&e))?;
        let children: Vec<serde_json::Value> = rows
            .iter()
            .map(|r| {
                json!({
                    "name": r.name,
                    "session_id": r.id,
                    "child_id": r.child_id,
                    "status": r.status,
                    "model": r.model,
                    "mode": r.mode,
                    "lifetime": r.lifetime,
                    "replies": r.replies,
                    "artifacts": r.artifacts,
                    "silent": r.silent,
                    "own_tokens": r.usage.own.total_tokens,
                    "aggregate_tokens": r.usage.aggregate.total_tokens,
                })
            })
            .collect();
        Ok(self
            .supervisor
            .redact(&json!({ "children": children }).to_string()))
    }
}
