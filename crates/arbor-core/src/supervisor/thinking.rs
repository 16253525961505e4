//! Thinking levels at admission: the check of a requested level against what the resolved
//! model supports ([`ChildEntry::supported_thinking`]), and the level a child's record keeps
//! (`meta.thinking`), which every run of the child (a follow-up, a resume) is held to.

use arbor_model::{ThinkingLevel, thinking_names};

use crate::error::{CoreError, CoreResult};
use crate::supervisor::catalog::ChildEntry;

/// The requested level if the resolved `model` supports it (admission step 7); the error
/// names the level, the model and the levels it supports.
pub(crate) fn check(
    entry: &ChildEntry,
    model: Option<&str>,
    requested: Option<ThinkingLevel>,
) -> CoreResult<Option<ThinkingLevel>> {
    let Some(level) = requested else {
        return Ok(None);
    };
    let supported = entry.supported_thinking(model);
    if supported.contains(&level) {
        return Ok(Some(level));
    }
    let by = match model {
        Some(m) => format!("model \"{m}\""),
        None => format!("child \"{}\" (its factory chooses the model)", entry.id),
    };
    Err(CoreError::validation(format!(
        "Requested thinking level \"{level}\" is not supported by {by}; supported levels: {}",
        thinking_names(&supported)
    )))
}

/// The level a child's record was admitted with, if any.
pub(crate) fn recorded(meta: &serde_json::Value) -> Option<ThinkingLevel> {
    meta["thinking"]
        .as_str()
        .and_then(|t| ThinkingLevel::parse(t).ok())
}
