//! The model-facing tools, one file each: `spawn_agent`, `wait_agent` and `cancel_agent`
//! (`spawn_agent.rs`, `handle.rs`), `send_message`, `list_children`, `rename_child` and `find_models`; and
//! the check of a model's arguments against each tool's schema (`arguments.rs`); how a
//! tool's error reads to the model (`errors.rs`); and the typed results of the delegation
//! tools ([`report`]).

pub(crate) mod arguments;
pub(crate) mod errors;
pub(crate) mod find_models;
pub(crate) mod handle;
pub(crate) mod list_children;
pub(crate) mod model_tool;
pub(crate) mod rename_child;
pub mod report;
pub(crate) mod send_message;
pub(crate) mod spawn_agent;

pub use find_models::FindModelsTool;
pub use handle::{CancelAgentTool, WaitAgentTool};
pub use list_children::ListChildrenTool;
pub use rename_child::RenameChildTool;
pub use report::{ChildAnswer, ChildStarted, HandleStatus, HandleUpdate, ToolReport};
pub use send_message::SendMessageTool;
pub use spawn_agent::{HostSpawn, SpawnAgentTool};

use std::sync::Arc;

use crate::error::CoreResult;
use crate::supervisor::runtime::Delegator;
use crate::tool::DynTool;

impl Delegator {
    /// Every delegation tool a parent needs, for all of the supervisor's children:
    /// `send_message`, `spawn_agent`, `wait_agent`, `cancel_agent`, `list_children`,
    /// `rename_child` and `find_models`. Give them to the parent's agent
    /// (`AgentBuilder::dyn_tools`); a child that only answers needs [`reply_tools`].
    ///
    /// [`reply_tools`]: Delegator::reply_tools
    pub fn tools(&self) -> Vec<Arc<dyn DynTool>> {
        let children = self.supervisor().child_ids().to_vec();
        self.family(&children)
    }

    /// [`tools`](Delegator::tools) offering only `children` (each must be allow-listed,
    /// else a validation error names it).
    pub fn tools_for(&self, children: &[String]) -> CoreResult<Vec<Arc<dyn DynTool>>> {
        let known = self.supervisor().child_ids();
        if let Some(id) = children.iter().find(|id| !known.contains(id)) {
            return Err(crate::CoreError::Validation(format!(
                "Invalid child id: {id}"
            )));
        }
        Ok(self.family(children))
    }

    /// The tools of a child that answers its parent but spawns nothing: `send_message`.
    pub fn reply_tools(&self) -> Vec<Arc<dyn DynTool>> {
        vec![Arc::new(SendMessageTool::new(self.supervisor().clone()))]
    }

    fn family(&self, children: &[String]) -> Vec<Arc<dyn DynTool>> {
        let sup = self.supervisor().clone();
        let mut tools = self.reply_tools();
        // `children` are allow-listed (checked by the caller).
        tools.push(Arc::new(SpawnAgentTool::build(
            self.clone(),
            "spawn_agent",
            children.to_vec(),
        )));
        tools.push(Arc::new(WaitAgentTool::new(self.clone())));
        tools.push(Arc::new(CancelAgentTool::new(self.clone())));
        tools.push(Arc::new(ListChildrenTool::new(sup.clone())));
        tools.push(Arc::new(RenameChildTool::new(sup.clone())));
        tools.push(Arc::new(FindModelsTool::build(sup, children.to_vec())));
        tools
    }
}
