//! Model controls in requests (`controls` of `POST /v1/runs` and of a host's spawn): their
//! shape in the OpenAPI document ([`ControlsSchema`], the JSON of [`arbor_model::Controls`])
//! and their check, which names the control (`controls.temperature`) before anything starts.
//! A control the provider's wire cannot carry is refused by the launcher or at admission.

use std::collections::BTreeMap;

use arbor_model::Controls;
use serde::Serialize;
use utoipa::ToSchema;

use crate::error::{ApiError, ApiResult};

/// A model call's controls; each one left out is the provider's default (or the agent's).
#[derive(Debug, Clone, Serialize, ToSchema)]
pub struct ControlsSchema {
    /// Sampling temperature, 0 to 2.
    #[schema(minimum = 0, maximum = 2)]
    pub temperature: Option<f64>,
    /// Nucleus sampling, above 0 and at most 1.
    #[schema(exclusive_minimum = 0, maximum = 1)]
    pub top_p: Option<f64>,
    /// A seed, for servers that sample reproducibly (not on the Anthropic wire).
    pub seed: Option<u64>,
    /// Where the answer stops: at most 4, none empty.
    #[schema(max_items = 4)]
    pub stop: Option<Vec<String>>,
    /// The longest answer, in tokens.
    #[schema(minimum = 1)]
    pub max_output_tokens: Option<u32>,
    /// `"auto"`, `"required"`, `"none"`, or `{"tool": NAME}`.
    pub tool_choice: Option<ToolChoiceSchema>,
    /// The `tool_choice` after the model has called a tool in the run (default `auto` when
    /// `tool_choice` forces a call).
    pub tool_choice_after_call: Option<ToolChoiceSchema>,
    /// Whether the model may call several tools in one turn.
    pub parallel_tool_calls: Option<bool>,
    /// Fields passed through to the request body as they are (not `model`, `messages`,
    /// `tools`, `tool_choice`, `max_tokens` and the others the wire builds).
    pub extra: Option<BTreeMap<String, serde_json::Value>>,
}

/// How the model may use its tools.
#[derive(Debug, Clone, Serialize, ToSchema)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoiceSchema {
    /// As it sees fit.
    Auto,
    /// It must call one.
    Required,
    /// It may call none.
    None,
    /// It must call this one.
    Tool(String),
}

/// Controls a request set, each in range: an empty object is none; a bad one is refused
/// naming it (`controls.top_p`).
pub(crate) fn checked(controls: Option<Controls>) -> ApiResult<Option<Controls>> {
    let Some(c) = controls.filter(|c| !c.is_empty()) else {
        return Ok(None);
    };
    c.check().map_err(|(field, message)| {
        ApiError::field(
            format!("controls.{field}"),
            format!("controls.{field}: {message}"),
        )
    })?;
    Ok(Some(c))
}
