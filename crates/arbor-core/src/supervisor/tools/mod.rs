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
pub(crate) mod read_child;
pub(crate) mod rename_child;
pub mod report;
pub(crate) mod send_message;
pub(crate) mod spawn_agent;

pub use find_models::FindModelsTool;
pub use handle::{CancelAgentTool, WaitAgentTool};
pub use list_children::ListChildrenTool;
pub use read_child::{ChildPage, ReadChild, ReadChildTool};
pub use rename_child::RenameChildTool;
pub use report::{ChildAnswer, ChildStarted, HandleStatus, HandleUpdate, ToolReport};
pub use send_message::SendMessageTool;
pub use spawn_agent::{HostSpawn, SpawnAgentTool};

use std::sync::Arc;

/// Every delegation tool, by name: what [`Delegator::tools_named`] chooses from.
pub const DELEGATION_TOOLS: [&str; 8] = [
    "send_message",
    "spawn_agent",
    "wait_agent",
    "cancel_agent",
    "list_children",
    "rename_child",
    "find_models",
    "read_child",
];

/// The tools of [`Delegator::tools`]: every delegation tool but the last, `read_child`, which
/// a host names when it wants a parent to read its descendants' transcripts.
const FAMILY: &[&str] = DELEGATION_TOOLS.split_at(DELEGATION_TOOLS.len() - 1).0;

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

    /// A lean tool set: only the delegation tools `names` lists (each one of
    /// [`DELEGATION_TOOLS`], else a validation error names it), offering `children`. The
    /// tools that act on children need some; `spawn_agent` offers only the modes the set
    /// can follow (`async` and `lifetime: session` need `wait_agent`) and only the options
    /// its children can use (`model` when one may run another model, `thinking` when one
    /// supports a level other than `off`), in shorter words.
    pub fn tools_named(
        &self,
        children: &[String],
        names: &[String],
    ) -> CoreResult<Vec<Arc<dyn DynTool>>> {
        if let Some(name) = names
            .iter()
            .find(|n| !DELEGATION_TOOLS.contains(&n.as_str()))
        {
            return Err(crate::CoreError::Validation(format!(
                "unknown delegation tool {name:?} (known: {})",
                DELEGATION_TOOLS.join(", ")
            )));
        }
        if children.is_empty()
            && let Some(name) = names.iter().find(|n| n.as_str() != "send_message")
        {
            return Err(crate::CoreError::Validation(format!(
                "delegation tool {name:?} needs children to act on"
            )));
        }
        if !children.is_empty() {
            self.tools_for(children)?;
        }
        let can_wait = names.iter().any(|n| n == "wait_agent");
        // In the order of DELEGATION_TOOLS, each built once.
        Ok(DELEGATION_TOOLS
            .iter()
            .filter(|t| names.iter().any(|n| n == *t))
            .map(|t| self.tool(t, children, Some(can_wait)))
            .collect())
    }

    /// The tools of a child that answers its parent but spawns nothing: `send_message`.
    pub fn reply_tools(&self) -> Vec<Arc<dyn DynTool>> {
        vec![Arc::new(SendMessageTool::new(self.supervisor().clone()))]
    }

    fn family(&self, children: &[String]) -> Vec<Arc<dyn DynTool>> {
        FAMILY
            .iter()
            .map(|t| self.tool(t, children, None))
            .collect()
    }

    /// The delegation tool `name` (one of [`DELEGATION_TOOLS`]) offering `children`
    /// (allow-listed: the caller checked); `lean`: a lean set's `spawn_agent`, which can wait
    /// or not.
    fn tool(&self, name: &str, children: &[String], lean: Option<bool>) -> Arc<dyn DynTool> {
        let sup = self.supervisor().clone();
        match name {
            "spawn_agent" => {
                let spawn = SpawnAgentTool::build(self.clone(), "spawn_agent", children.to_vec());
                match lean {
                    Some(can_wait) => Arc::new(spawn.lean(can_wait)),
                    None => Arc::new(spawn),
                }
            }
            "wait_agent" => Arc::new(WaitAgentTool::new(self.clone())),
            "cancel_agent" => Arc::new(CancelAgentTool::new(self.clone())),
            "list_children" => Arc::new(ListChildrenTool::new(sup)),
            "rename_child" => Arc::new(RenameChildTool::new(sup)),
            "read_child" => Arc::new(ReadChildTool::new(sup)),
            "find_models" => Arc::new(FindModelsTool::build(sup, children.to_vec())),
            // `send_message`, the last of DELEGATION_TOOLS not matched above.
            _ => Arc::new(SendMessageTool::new(sup)),
        }
    }
}
