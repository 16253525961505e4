//! `send_message`: how a session talks to its family. A child replies to its parent
//! (`to: "parent"`), a parent follows up with a retained child, siblings pass notes; the
//! target is named by name (or session id) among the sender's parent, siblings and direct
//! children, nothing further.

use arbor_model::ToolSpec;
use arbor_store::SessionQuery;
use async_trait::async_trait;
use serde::Deserialize;
use serde_json::json;

use crate::error::CoreError;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::model_tool::ModelTool;
use crate::supervisor::tree::messages::{MAX_MESSAGE_BYTES, Sender};
use crate::tool::{ToolContext, ToolError};

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct SendArgs {
    to: String,
    text: String,
}

/// The `send_message` tool of one supervisor's tree.
#[derive(Debug, Clone)]
pub struct SendMessageTool {
    supervisor: Supervisor,
    spec: ToolSpec,
}

impl SendMessageTool {
    /// The tool.
    pub fn new(supervisor: Supervisor) -> Self {
        let spec = ToolSpec {
            name: "send_message".to_owned(),
            description: format!(
                "Send a message to your parent (to: \"parent\"), a sibling or one of your \
                 children (to: its name). This is how a child returns its result: your parent \
                 sees nothing of your work unless you send it. Bodies up to {MAX_MESSAGE_BYTES} \
                 bytes; the target reads it on its next turn."
            ),
            parameters: json!({
                "type": "object",
                "properties": {
                    "to": {"type": "string", "description": "\"parent\", or a sibling's or child's name"},
                    "text": {"type": "string", "minLength": 1, "maxLength": MAX_MESSAGE_BYTES}
                },
                "required": ["to", "text"],
                "additionalProperties": false
            }),
        };
        Self { supervisor, spec }
    }

    async fn target(
        &self,
        ctx: &ToolContext,
        to: &str,
    ) -> Result<arbor_protocol::SessionId, CoreError> {
        let store = self.supervisor.store();
        let me = crate::registry::session(store.as_ref(), ctx.session.id).await?;
        if to == "parent" {
            return me
                .parent_id
                .ok_or_else(|| CoreError::validation("this session has no parent"));
        }
        let mut family = store.list_sessions(SessionQuery::Children(me.id)).await?;
        if let Some(parent) = me.parent_id {
            family.extend(
                store
                    .list_sessions(SessionQuery::Children(parent))
                    .await?
                    .into_iter()
                    .filter(|s| s.id != me.id),
            );
        }
        // One rule for every selector: a name shared by a sibling and a child, or one
        // agent's name that is another's session id, is refused naming both.
        match crate::registry::select(&family, to)? {
            Some(one) if one.tombstone.is_none() => Ok(one.id),
            _ => Err(CoreError::denied(
                crate::error::DenyReason::Unreachable,
                format!(
                    "No agent named \"{to}\" among this session's parent, siblings and children"
                ),
            )),
        }
    }
}

#[async_trait]
impl ModelTool for SendMessageTool {
    type Args = SendArgs;

    fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    fn supervisor(&self) -> &Supervisor {
        &self.supervisor
    }

    async fn call(&self, args: SendArgs, ctx: ToolContext) -> Result<String, ToolError> {
        let sup = &self.supervisor;
        let to = self
            .target(&ctx, args.to.trim())
            .await
            .map_err(|e| sup.model_error(&e))?;
        let receipt = self
            .supervisor
            .send_message(Sender::Session(ctx.session.id), to, &args.text)
            .await
            .map_err(|e| sup.model_error(&e))?;
        Ok(json!({
            "id": receipt.id,
            "to": receipt.to_name,
            "status": receipt.status,
        })
        .to_string())
    }
}
