//! The model-facing tools, one file each: `spawn_agent`, `wait_agent` and `cancel_agent`
//! ([`spawn_agent`]), `send_message`, `list_children`, `rename_child` and `find_models`; and
//! the check of a model's arguments against each tool's schema ([`arguments`]).

pub(crate) mod arguments;
pub(crate) mod find_models;
pub(crate) mod list_children;
pub(crate) mod rename_child;
pub(crate) mod send_message;
pub(crate) mod spawn_agent;

pub use find_models::FindModelsTool;
pub use list_children::ListChildrenTool;
pub use rename_child::RenameChildTool;
pub use send_message::SendMessageTool;
pub use spawn_agent::{CancelAgentTool, SpawnAgentTool, WaitAgentTool};
