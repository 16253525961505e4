//! A model call's controls ([`Controls`]): sampling (`temperature`, `top_p`, `seed`,
//! `stop`), the answer's length (`max_output_tokens`), how the model uses its tools
//! (`tool_choice`, `parallel_tool_calls`) and `extra`, fields passed through to the server
//! as they are. Each wire format maps them ([`crate::wire`]); one a format cannot carry is
//! named by [`Controls::unsupported_by`], so a caller refuses it rather than drop it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// The most stop sequences a call carries (what both APIs accept).
pub const MAX_STOP: usize = 4;

/// The fields of a request body that `extra` may not set: the ones the wire format builds.
pub const RESERVED_EXTRA: [&str; 10] = [
    "model",
    "messages",
    "stream",
    "stream_options",
    "tools",
    "tool_choice",
    "system",
    "max_tokens",
    "thinking",
    "reasoning_effort",
];

/// How the model may use its tools on a call.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// As it sees fit (the default).
    Auto,
    /// It must call one.
    Required,
    /// It may call none.
    None,
    /// It must call this one.
    Tool(String),
}

/// A model call's controls; each one left out is the provider's default. Set on an agent, a
/// spawn or a request, the narrower one's fields win ([`Controls::over`]).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct Controls {
    /// Sampling temperature, 0 to 2.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub temperature: Option<f64>,
    /// Nucleus sampling, above 0 and at most 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub top_p: Option<f64>,
    /// A seed, for servers that sample reproducibly with one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed: Option<u64>,
    /// Where the answer stops (at most [`MAX_STOP`], none empty).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub stop: Vec<String>,
    /// The longest answer, in tokens (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_output_tokens: Option<u32>,
    /// How the model may use its tools.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice: Option<ToolChoice>,
    /// The `tool_choice` of a run's turns after the model has called a tool in it (its
    /// first turn is over and it asked for tools). Default: `auto` when `tool_choice`
    /// forces a call (`required` or one tool), as the OpenAI Agents SDK's
    /// `reset_tool_choice`, so a forced call cannot loop; `none` has the model answer in
    /// text after its call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_choice_after_call: Option<ToolChoice>,
    /// Whether it may call several tools in one turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallel_tool_calls: Option<bool>,
    /// Fields passed through to the request body as they are (not those of
    /// [`RESERVED_EXTRA`]).
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub extra: BTreeMap<String, Value>,
}

/// A wire format, for what it can carry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Wire {
    /// OpenAI's Chat Completions (and the servers that speak it).
    OpenAi,
    /// Anthropic's Messages.
    Anthropic,
    /// A provider's own: it reads the controls itself (the scripted one reads none).
    Own,
}

impl Controls {
    /// Whether none is set.
    pub fn is_empty(&self) -> bool {
        *self == Self::default()
    }

    /// These controls, the fields they leave out taken from `base` (`extra` merged, these
    /// winning).
    #[must_use]
    pub fn over(&self, base: &Self) -> Self {
        let mut extra = base.extra.clone();
        extra.extend(self.extra.iter().map(|(k, v)| (k.clone(), v.clone())));
        Self {
            temperature: self.temperature.or(base.temperature),
            top_p: self.top_p.or(base.top_p),
            seed: self.seed.or(base.seed),
            stop: if self.stop.is_empty() {
                base.stop.clone()
            } else {
                self.stop.clone()
            },
            max_output_tokens: self.max_output_tokens.or(base.max_output_tokens),
            tool_choice: self
                .tool_choice
                .clone()
                .or_else(|| base.tool_choice.clone()),
            tool_choice_after_call: self
                .tool_choice_after_call
                .clone()
                .or_else(|| base.tool_choice_after_call.clone()),
            parallel_tool_calls: self.parallel_tool_calls.or(base.parallel_tool_calls),
            extra,
        }
    }

    /// The controls of a turn: after the model has called a tool in the run, `tool_choice`
    /// becomes `tool_choice_after_call` (default `auto` when it forced a call). `None` when
    /// they are the same as these.
    #[must_use]
    pub fn after_call(&self) -> Option<Self> {
        let forced = matches!(
            self.tool_choice,
            Some(ToolChoice::Required | ToolChoice::Tool(_))
        );
        let then = match (&self.tool_choice_after_call, forced) {
            (Some(t), _) => Some(t.clone()),
            (None, true) => Some(ToolChoice::Auto),
            (None, false) => return None,
        };
        (then != self.tool_choice).then(|| Self {
            tool_choice: then,
            ..self.clone()
        })
    }

    /// The tools `tool_choice` and `tool_choice_after_call` name, if any.
    pub fn named_tools(&self) -> impl Iterator<Item = &str> {
        [&self.tool_choice, &self.tool_choice_after_call]
            .into_iter()
            .filter_map(|t| match t {
                Some(ToolChoice::Tool(name)) => Some(name.as_str()),
                _ => None,
            })
    }

    /// The first value out of range: `(field, why)`.
    pub fn check(&self) -> Result<(), (&'static str, String)> {
        if let Some(t) = self.temperature
            && !(0.0..=2.0).contains(&t)
        {
            return Err(("temperature", format!("temperature {t} is not 0 to 2")));
        }
        if let Some(p) = self.top_p
            && !(p > 0.0 && p <= 1.0)
        {
            return Err(("top_p", format!("top_p {p} is not above 0 and at most 1")));
        }
        if self.stop.len() > MAX_STOP {
            return Err((
                "stop",
                format!("{} stop sequences; at most {MAX_STOP}", self.stop.len()),
            ));
        }
        if self.stop.iter().any(String::is_empty) {
            return Err(("stop", "a stop sequence is empty".to_owned()));
        }
        if self.max_output_tokens == Some(0) {
            return Err((
                "max_output_tokens",
                "max_output_tokens is at least 1".to_owned(),
            ));
        }
        if let Some(ToolChoice::Tool(name)) = &self.tool_choice
            && name.trim().is_empty()
        {
            return Err(("tool_choice", "tool_choice names no tool".to_owned()));
        }
        if let Some(ToolChoice::Tool(name)) = &self.tool_choice_after_call
            && name.trim().is_empty()
        {
            return Err((
                "tool_choice_after_call",
                "tool_choice_after_call names no tool".to_owned(),
            ));
        }
        if let Some(key) = self
            .extra
            .keys()
            .find(|k| RESERVED_EXTRA.contains(&k.as_str()))
        {
            return Err((
                "extra",
                format!("extra may not set {key:?}: arbor builds that field"),
            ));
        }
        Ok(())
    }

    /// The first control `wire` cannot carry, if any: a caller refuses it by name rather than
    /// drop it.
    pub fn unsupported_by(&self, wire: Wire) -> Option<&'static str> {
        self.refused_by(wire, false).map(|(field, _)| field)
    }

    /// The first control `wire` cannot carry, `(field, why)`; `thinking`: the model is asked
    /// to think. Anthropic has no `seed` and takes a `temperature` of 0 to 1; while its model
    /// thinks it refuses a forced tool choice, a `temperature` other than 1 and a `top_p`
    /// under 0.95.
    pub fn refused_by(&self, wire: Wire, thinking: bool) -> Option<(&'static str, String)> {
        if wire != Wire::Anthropic {
            return None;
        }
        let forced =
            |t: &Option<ToolChoice>| matches!(t, Some(ToolChoice::Required | ToolChoice::Tool(_)));
        if self.seed.is_some() {
            return Some(("seed", "the Anthropic API has no seed".to_owned()));
        }
        if let Some(t) = self.temperature.filter(|t| *t > 1.0) {
            return Some((
                "temperature",
                format!("Anthropic's temperature is 0 to 1, not {t}"),
            ));
        }
        if !thinking {
            return None;
        }
        if forced(&self.tool_choice) {
            return Some((
                "tool_choice",
                "Anthropic refuses a forced tool choice while the model thinks".to_owned(),
            ));
        }
        if forced(&self.tool_choice_after_call) {
            return Some((
                "tool_choice_after_call",
                "Anthropic refuses a forced tool choice while the model thinks".to_owned(),
            ));
        }
        if let Some(t) = self.temperature.filter(|t| (*t - 1.0).abs() > f64::EPSILON) {
            return Some((
                "temperature",
                format!("while the model thinks Anthropic takes only temperature 1, not {t}"),
            ));
        }
        if let Some(p) = self.top_p.filter(|p| *p < 0.95) {
            return Some((
                "top_p",
                format!("while the model thinks Anthropic takes top_p 0.95 to 1, not {p}"),
            ));
        }
        None
    }
}
