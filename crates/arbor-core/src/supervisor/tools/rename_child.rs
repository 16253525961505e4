//! `rename_child`: the model renames one of its direct children. The new name is held among
//! the child's siblings and the old one freed, durably, with a `renamed` record in the
//! child's transcript (see [`Supervisor::rename_child`]).

use arbor_model::ToolSpec;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::model_tool::ModelTool;
use crate::tool::{ToolContext, ToolError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RenameArgs {
    child: String,
    name: String,
}

/// The `rename_child` tool of one supervisor's tree.
#[derive(Debug, Clone)]
pub struct RenameChildTool {
    supervisor: Supervisor,
    spec: ToolSpec,
}

impl RenameChildTool {
    /// The tool.
    pub fn new(supervisor: Supervisor) -> Self {
        let spec = ToolSpec {
            name: "rename_child".to_owned(),
            description: "Rename one of your direct children (by its name or session id). The \
                          new name must be free among its siblings."
                .to_owned(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "child": {"type": "string", "description": "The child's name or session id."},
                    "name": {"type": "string", "minLength": 1, "maxLength": 64},
                },
                "required": ["child", "name"],
                "additionalProperties": false
            }),
        };
        Self { supervisor, spec }
    }
}

#[async_trait]
impl ModelTool for RenameChildTool {
    type Args = RenameArgs;

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    async fn call(&self, args: RenameArgs, ctx: ToolContext) -> Result<String, ToolError> {
        let sup = &self.supervisor;
        let by = format!("session:{}", ctx.session.id);
        let renamed = sup
            .rename_child(
                crate::supervisor::RenameChild::new(ctx.session.id, &args.child, &args.name)
                    .by(&by),
            )
            .await
            .map_err(|e| sup.model_error(&e))?;
        Ok(sup.redact(
            &json!({
                "session_id": renamed.session_id,
                "from": renamed.from,
                "name": renamed.to,
            })
            .to_string(),
        ))
    }
}
