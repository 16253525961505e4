//! The model, thinking level and controls at admission: the requested model checked against
//! what the entry allows, the requested level against what the resolved model supports
//! ([`ChildEntry::supported_thinking`]), the requested controls against their ranges and what
//! the entry's provider can carry; and the level and controls a child's record keeps
//! (`meta.thinking`, `meta.controls`), which every run of the child (a follow-up, a resume)
//! is held to.

use arbor_model::{Controls, ThinkingLevel, thinking_names};

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

impl ChildEntry {
    /// The requested controls if each is in range and the entry's provider (when it has one
    /// to ask) can carry it; the error names the control (`controls.seed`). An entry
    /// without a provider has its agent checked when its factory builds it, before any call.
    pub(crate) fn check_controls(
        &self,
        requested: Option<Controls>,
        thinking: Option<ThinkingLevel>,
    ) -> CoreResult<Option<Controls>> {
        let Some(controls) = requested.filter(|c| !c.is_empty()) else {
            return Ok(None);
        };
        if let Err((field, message)) = controls.check() {
            return Err(CoreError::invalid(
                control_field(field),
                format!("{}: {message}", control_field(field)),
            ));
        }
        let thinks = thinking.and_then(ThinkingLevel::budget_tokens).is_some();
        if let Some(provider) = &self.preflight
            && let Some((field, why)) = controls.refused_by(provider.wire(), thinks)
        {
            return Err(CoreError::invalid(
                control_field(field),
                format!(
                    "{}: child \"{}\" runs on provider \"{}\", which cannot carry {field} \
                     ({why})",
                    control_field(field),
                    self.id,
                    provider.name()
                ),
            ));
        }
        Ok(Some(controls))
    }
}

/// A control's name as a request's field.
pub(crate) fn control_field(field: &str) -> &'static str {
    match field {
        "temperature" => "controls.temperature",
        "top_p" => "controls.top_p",
        "seed" => "controls.seed",
        "stop" => "controls.stop",
        "max_output_tokens" => "controls.max_output_tokens",
        "tool_choice" => "controls.tool_choice",
        "tool_choice_after_call" => "controls.tool_choice_after_call",
        "parallel_tool_calls" => "controls.parallel_tool_calls",
        "extra" => "controls.extra",
        _ => "controls",
    }
}

/// The controls a child's record was admitted with, if any.
pub(crate) fn recorded_controls(meta: &arbor_store::Meta) -> Option<Controls> {
    if let Some(child) = meta.typed_as::<crate::supervisor::config::child_meta::ChildMeta>() {
        return child.controls.clone();
    }
    let value = &meta["controls"];
    if value.is_null() {
        return None;
    }
    // A record kept by an older or foreign writer: what does not parse is not forced.
    serde_json::from_value::<Controls>(value.clone())
        .ok()
        .filter(|c| c.check().is_ok())
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
