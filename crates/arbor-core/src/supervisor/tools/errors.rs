//! How a delegation tool says what went wrong to the model: tool errors (redacted), a core
//! error as the model reads it (with the limit that fired), and argument errors that name
//! the field (the tool's schema checked first, see [`arguments`]).

use arbor_model::ToolSpec;

use crate::error::CoreError;
use crate::supervisor::runtime::Supervisor;
use crate::supervisor::tools::arguments;
use crate::tool::ToolError;

impl Supervisor {
    /// `text` as a tool error the model reads, redacted.
    pub(crate) fn tool_error(&self, text: &str) -> ToolError {
        ToolError::ToModel(self.redact(text))
    }

    /// A core error as the model reads it: with the limit that fired, redacted. A wiring
    /// error of the host ([`CoreErrorKind::Config`](crate::CoreErrorKind::Config)) ends the
    /// run instead: the model cannot fix it, and the run must not look successful.
    pub(crate) fn model_error(&self, e: &CoreError) -> ToolError {
        if e.kind() == crate::CoreErrorKind::Config {
            return ToolError::Fatal(self.redact(&e.to_string()));
        }
        if e.kind() == crate::CoreErrorKind::Suspended {
            // An async child stopped on a question or a call waiting for approval: it is
            // listed at the root and goes on once that is decided.
            return self.tool_error(
                "the child waits for a person at the root (a question it asked, or a call \
                 waiting for approval); it goes on once that is decided, and its answer is then \
                 in its transcript",
            );
        }
        match e.limit() {
            Some(info) => self.tool_error(&format!("{e}: {info}")),
            None => self.tool_error(&e.to_string()),
        }
    }

    /// A model's arguments for `spec`, checked against its parameter schema first: an error
    /// names the field, the class of the value given and what is accepted, so the model can
    /// correct itself. It may quote the value, so it is redacted before the model reads it.
    pub(crate) fn parse_arguments<T: serde::de::DeserializeOwned>(
        &self,
        spec: &ToolSpec,
        arguments: serde_json::Value,
    ) -> Result<T, ToolError> {
        if let Err(e) = arguments::check(&spec.name, &spec.parameters, &arguments) {
            return Err(self.bad_arguments(&spec.name, &e));
        }
        serde_json::from_value(arguments).map_err(|e| self.bad_arguments(&spec.name, &e))
    }

    /// Bad arguments for `tool`, as the model reads them (redacted).
    pub(crate) fn bad_arguments(&self, tool: &str, e: &dyn std::fmt::Display) -> ToolError {
        self.tool_error(&format!("invalid arguments for {tool}: {e}"))
    }
}
