//! The model and thinking level at admission: the requested model checked against what the
//! entry allows, the requested level against what the resolved model supports
//! ([`ChildEntry::supported_thinking`]), and the level a child's record keeps
//! (`meta.thinking`), which every run of the child (a follow-up, a resume) is held to.

use arbor_model::{ThinkingLevel, thinking_names};

use crate::error::{CoreError, CoreResult};
use crate::supervisor::config::catalog::ChildEntry;

impl ChildEntry {
    /// The model a request runs: the requested one if the entry allows it, else the
    /// entry's default.
    pub(crate) fn resolve_model(&self, requested: Option<&str>) -> CoreResult<Option<String>> {
        let Some(requested) = requested else {
            return Ok(self.model.clone());
        };
        let requested = requested.trim();
        let allowed = self.models();
        match allowed.iter().find(|m| m.eq_ignore_ascii_case(requested)) {
            Some(m) => Ok(Some((*m).to_owned())),
            None => Err(CoreError::invalid(
                "model",
                format!(
                    "Requested model \"{requested}\" is not allowed for child \"{}\"; allowed \
                 models: {}",
                    self.id,
                    if allowed.is_empty() {
                        "none (its factory chooses)".to_owned()
                    } else {
                        allowed.join(", ")
                    }
                ),
            )),
        }
    }

    /// The requested level if the resolved `model` supports it (admission step 7); the
    /// error names the level, the model and the levels it supports.
    pub(crate) fn check_thinking(
        &self,
        model: Option<&str>,
        requested: Option<ThinkingLevel>,
    ) -> CoreResult<Option<ThinkingLevel>> {
        let Some(level) = requested else {
            return Ok(None);
        };
        let supported = self.supported_thinking(model);
        if supported.contains(&level) {
            return Ok(Some(level));
        }
        let by = match model {
            Some(m) => format!("model \"{m}\""),
            None => format!("child \"{}\" (its factory chooses the model)", self.id),
        };
        Err(CoreError::validation(format!(
            "Requested thinking level \"{level}\" is not supported by {by}; supported levels: {}",
            thinking_names(&supported)
        )))
    }
}

/// The level a child's record was admitted with, if any.
pub(crate) fn recorded(meta: &arbor_store::Meta) -> Option<ThinkingLevel> {
    // A child registered by this process: its typed terms, without building the JSON.
    if let Some(child) = meta.typed_as::<crate::supervisor::config::child_meta::ChildMeta>() {
        return child.thinking;
    }
    meta["thinking"]
        .as_str()
        .and_then(|t| ThinkingLevel::parse(t).ok())
}
